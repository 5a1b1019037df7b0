//! Server URLs as users write them: one URL, or several separated by commas, with credentials
//! in them. async-nats 0.51 takes a list only as separate addresses and ignores credentials in
//! a URL, so the app turns them into addresses without credentials plus
//! [`ConnectOptions`] that carry them.

use async_nats::{ConnectOptions, ServerAddr};

/// Credentials given in a server URL's user-info part.
#[derive(Clone, PartialEq, Eq)]
enum UrlCredentials {
    /// `nats://user:password@host`.
    UserPassword { user: String, password: String },
    /// `nats://token@host`.
    Token(String),
}

impl std::fmt::Debug for UrlCredentials {
    /// Never shows a secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::UserPassword { .. } => f.write_str("UserPassword(..)"),
            Self::Token(_) => f.write_str("Token(..)"),
        }
    }
}

/// A server list read from a URL string: the addresses with their credentials removed, and
/// the credentials, the same for every entry.
#[derive(Debug)]
pub(crate) struct ServerList {
    /// The servers, in the order given, without user-info.
    pub(crate) addresses: Vec<ServerAddr>,
    credentials: Option<UrlCredentials>,
}

impl ServerList {
    /// Reads `urls`: one server URL or several separated by commas, surrounding whitespace
    /// ignored. Each is what async-nats accepts (`nats://`, `tls://`, `ws://`, `wss://`, or a
    /// bare `host:port`, which means `nats://`). User-info is credentials: `user:password@`
    /// (percent-encoded where it holds `:`, `@` or `/`) or `token@`; every entry that carries
    /// any must carry the same, since a connection has one set.
    ///
    /// # Errors
    /// A message that names the entry (1-based, of how many) and the part that is wrong, and
    /// never holds the URL or a secret: an empty entry, a scheme, host or port that does not
    /// parse, entries with different credentials, or user-info that does not decode as UTF-8.
    pub(crate) fn parse(urls: &str) -> Result<Self, String> {
        let entries: Vec<&str> = urls.split(',').map(str::trim).collect();
        let count = entries.len();
        let mut list = Self {
            addresses: Vec::with_capacity(count),
            credentials: None,
        };
        let mut credentials_from = 0;
        for (index, entry) in entries.into_iter().enumerate() {
            let which = match count {
                1 => "the server URL".to_owned(),
                n => format!("server URL {} of {n}", index + 1),
            };
            if entry.is_empty() {
                return Err(format!("{which} is empty"));
            }
            // async-nats' own message names the part (scheme, host, port) and not the input.
            let address: ServerAddr = entry.parse().map_err(|e| format!("{which}: {e}"))?;
            refuse_path(&address).map_err(|e| format!("{which}: {e}"))?;
            let (address, credentials) = take_credentials(address, has_password(entry))
                .map_err(|e| format!("{which}: {e}"))?;
            match (&list.credentials, credentials) {
                (_, None) => {}
                (None, Some(found)) => {
                    list.credentials = Some(found);
                    credentials_from = index + 1;
                }
                (Some(known), Some(found)) if *known == found => {}
                (Some(_), Some(_)) => {
                    return Err(format!(
                        "{which} carries other credentials than server URL {credentials_from}: \
                         a connection has one set"
                    ));
                }
            }
            list.addresses.push(address);
        }
        Ok(list)
    }

    /// `options` with the list's credentials, if it has any. They replace credentials of the
    /// same kind set on `options` (async-nats keeps one user and password, and one token).
    pub(crate) fn apply(&self, options: ConnectOptions) -> ConnectOptions {
        match &self.credentials {
            None => options,
            Some(UrlCredentials::UserPassword { user, password }) => {
                options.user_and_password(user.clone(), password.clone())
            }
            Some(UrlCredentials::Token(token)) => options.token(token.clone()),
        }
    }
}

/// Whether the entry's user-info has a `:`, and so a password, perhaps empty (`user:@host`):
/// the parsed URL cannot tell an empty password from none.
fn has_password(entry: &str) -> bool {
    let rest = entry.split_once("://").map_or(entry, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    authority
        .rsplit_once('@')
        .is_some_and(|(user_info, _)| user_info.contains(':'))
}

/// A `nats://` or `tls://` server URL is `scheme://[credentials@]host[:port]`: a path, query
/// or fragment there is a typo (`nats:/host:4222` reads as host `nats` with a path) or
/// something async-nats would ignore. WebSocket URLs may have them.
fn refuse_path(address: &ServerAddr) -> Result<(), &'static str> {
    if address.is_websocket() {
        return Ok(());
    }
    let url = address.clone().into_inner();
    let path = url.path();
    match (path.is_empty() || path == "/", url.query(), url.fragment()) {
        (true, None, None) => Ok(()),
        _ => Err(
            "a nats:// or tls:// URL has no path, query or fragment (is a `/` of `://` missing?)",
        ),
    }
}

/// The address without its user-info, and the credentials the user-info held: a user and a
/// password when it has a `:` (`has_password`), else a token.
fn take_credentials(
    address: ServerAddr,
    has_password: bool,
) -> Result<(ServerAddr, Option<UrlCredentials>), &'static str> {
    let decode = |part: &str| {
        percent_encoding::percent_decode_str(part)
            .decode_utf8()
            .map(|s| s.into_owned())
    };
    let password = address.password().or(has_password.then_some(""));
    let credentials = match (address.username(), password) {
        (None, None) => return Ok((address, None)),
        (Some(user), Some(password)) => UrlCredentials::UserPassword {
            user: decode(user).map_err(|_| "its user name is not UTF-8 once decoded")?,
            password: decode(password).map_err(|_| "its password is not UTF-8 once decoded")?,
        },
        (Some(token), None) => {
            UrlCredentials::Token(decode(token).map_err(|_| "its token is not UTF-8 once decoded")?)
        }
        (None, Some(_)) => return Err("it has a password without a user name"),
    };
    let mut url = address.into_inner();
    // Both only fail for URLs that cannot have user-info, and this one had some.
    let cleared = url.set_username("").and_then(|()| url.set_password(None));
    if cleared.is_err() {
        return Err("its user-info cannot be removed");
    }
    let address = ServerAddr::from_url(url)
        .map_err(|_| "it is not a NATS URL once its user-info is removed")?;
    Ok((address, Some(credentials)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(list: &ServerList) -> Vec<String> {
        list.addresses
            .iter()
            .map(|a| a.as_url_str().to_owned())
            .collect()
    }

    #[test]
    fn one_url_without_credentials() {
        let list = ServerList::parse("nats://127.0.0.1:4222").expect("parses");
        assert_eq!(hosts(&list), ["nats://127.0.0.1:4222"]);
        assert_eq!(list.credentials, None);
    }

    #[test]
    fn a_comma_separated_list_with_spaces_and_bare_hosts() {
        let list = ServerList::parse(" nats://a:4222 ,tls://b:4443,c:5222").expect("parses");
        assert_eq!(
            hosts(&list),
            ["nats://a:4222", "tls://b:4443", "nats://c:5222"]
        );
    }

    #[test]
    fn user_and_password_are_taken_out_of_every_entry() {
        let list = ServerList::parse("nats://alice:s%3Acret%40@a:4222,nats://alice:s%3Acret%40@b")
            .expect("parses");
        assert_eq!(hosts(&list), ["nats://a:4222", "nats://b"]);
        assert_eq!(
            list.credentials,
            Some(UrlCredentials::UserPassword {
                user: "alice".into(),
                password: "s:cret@".into()
            })
        );
    }

    #[test]
    fn a_user_without_password_is_a_token() {
        let list = ServerList::parse("nats://t0ken@a:4222,nats://b:4222").expect("parses");
        assert_eq!(
            list.credentials,
            Some(UrlCredentials::Token("t0ken".into()))
        );
        assert_eq!(hosts(&list), ["nats://a:4222", "nats://b:4222"]);
    }

    #[test]
    fn an_empty_password_is_a_password_not_a_token() {
        let list = ServerList::parse("nats://bob:@a:4222").expect("parses");
        assert_eq!(
            list.credentials,
            Some(UrlCredentials::UserPassword {
                user: "bob".into(),
                password: String::new()
            })
        );
        assert!(has_password("nats://u:@h"));
        assert!(has_password("u:p@h:4222/x"));
        assert!(!has_password("nats://tok@h"));
        assert!(!has_password("nats://h:4222/a:b@c"));
    }

    #[test]
    fn websocket_urls_may_have_a_path() {
        let list = ServerList::parse("wss://a:443/nats").expect("parses");
        assert_eq!(hosts(&list), ["wss://a/nats"]);
    }

    #[test]
    fn errors_name_the_entry_and_the_part_and_hold_no_secret() {
        let cases = [
            ("nats:/127.0.0.1:4222", "no path, query or fragment"),
            ("nats://a:4222/foo?x=pw-7", "no path, query or fragment"),
            ("nats://a:4222,,nats://b", "server URL 2 of 3 is empty"),
            ("", "the server URL is empty"),
            ("http://a:4222", "scheme"),
            ("nats://a:99999", "port"),
            (
                "nats://alice:pw-1@a,nats://alice:pw-2@b",
                "server URL 2 of 2 carries other credentials than server URL 1",
            ),
            ("nats://:pw-3@a:4222", "password without a user name"),
            ("nats://u:%FF%FE@a:4222", "password is not UTF-8"),
        ];
        for (input, expected) in cases {
            let err = ServerList::parse(input).expect_err(input);
            assert!(err.contains(expected), "{input}: {err}");
            for secret in ["pw-1", "pw-2", "pw-3", "%FF"] {
                assert!(!err.contains(secret), "{input}: {err}");
            }
        }
    }

    #[test]
    fn debug_never_shows_a_secret() {
        let list = ServerList::parse("nats://alice:pw-4@a,nats://alice:pw-4@b").expect("parses");
        assert!(!format!("{list:?}").contains("pw-4"));
        let list = ServerList::parse("nats://tok-5@a").expect("parses");
        assert!(!format!("{list:?}").contains("tok-5"));
    }
}
