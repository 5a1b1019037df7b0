//! Who the endpoint lets in: the [`Authorization`] a client must give in its `CONNECT`, and the
//! endpoint's [`Access`] (that, whether JetStream is on, whether the server is up).

/// What a client must give in its `CONNECT` to be let in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authorization {
    /// A user and password (`user`, `pass`), as `nats://user:password@host` gives them.
    UserPassword {
        /// The user.
        user: String,
        /// The password.
        password: String,
    },
    /// A token (`auth_token`), as `nats://token@host` gives it.
    Token(String),
}

impl Authorization {
    /// Whether a `CONNECT`'s JSON options give what this requires.
    pub(super) fn admits(&self, options: &str) -> bool {
        let options: serde_json::Value = serde_json::from_str(options).unwrap_or_default();
        let field = |name: &str| options.get(name).and_then(serde_json::Value::as_str);
        match self {
            Self::UserPassword { user, password } => {
                field("user") == Some(user.as_str()) && field("pass") == Some(password.as_str())
            }
            Self::Token(token) => field("auth_token") == Some(token.as_str()),
        }
    }
}

/// How the endpoint lets clients in: what it requires, whether JetStream is on, whether it is
/// up.
#[derive(Debug, Clone)]
pub(crate) struct Access {
    pub(crate) authorization: Option<Authorization>,
    pub(crate) jetstream: bool,
    pub(crate) up: bool,
}
