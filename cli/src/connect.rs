//! Connecting as the runtime does, from the command line's options.

use async_nats::{Client, ConnectOptions};

use crate::CliError;
use crate::args::Connection;

/// A client for `connection`. The error names the option or file at fault, never a value.
pub(crate) async fn connect(connection: &Connection) -> Result<Client, CliError> {
    let mut options = match &connection.creds {
        Some(path) => ConnectOptions::with_credentials_file(path)
            .await
            .map_err(|e| {
                CliError::Connect(format!(
                    "the credentials file {} cannot be read: {e}",
                    path.display()
                ))
            })?,
        None => ConnectOptions::new(),
    };
    if let (Some(user), Some(password)) = (&connection.user, &connection.password) {
        options = options.user_and_password(user.clone(), password.clone());
    }
    if let Some(token) = &connection.token {
        options = options.token(token.clone());
    }
    if let Some(ca) = &connection.tls_ca {
        options = options.add_root_certificates(ca.clone());
    }
    if let (Some(cert), Some(key)) = (&connection.tls_cert, &connection.tls_key) {
        options = options.add_client_certificate(cert.clone(), key.clone());
    }
    let tls = connection.tls || connection.tls_ca.is_some() || connection.tls_cert.is_some();
    options = options
        .require_tls(tls)
        .name("ruststream-tools")
        // No retrying at the start: an operator's command says at once that it cannot
        // connect. A connection lost later is tried again a few times.
        .max_reconnects(Some(3))
        .connection_timeout(std::time::Duration::from_secs(5));
    ruststream_adapter::connect_url(&connection.url, options)
        .await
        .map_err(|e| CliError::Connect(e.to_string()))
}
