//! One client connection's task: it announces the server (`INFO`), reads the client's bytes and
//! hands each whole operation to the dispatcher, while a writer task it spawns writes what is
//! queued for the client; it ends when the client closes, breaks the protocol, or a fault
//! closes it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::{Notify, mpsc};

use crate::endpoint::{Client, Shared};
use crate::model::wire::protocol;

/// Serves one client connection until it closes, breaks the protocol, or a fault closes it.
pub(super) async fn serve(
    shared: Arc<Shared>,
    socket: TcpStream,
    addr: SocketAddr,
    client_id: u64,
) {
    let _ = socket.set_nodelay(true);
    let (mut reader, mut writer) = socket.into_split();
    let (out, mut outgoing) = mpsc::unbounded_channel::<Bytes>();
    let close = Arc::new(Notify::new());
    let connection = {
        let mut inner = shared.lock();
        if !inner.access.up {
            // Down: the connection closes before the server says anything.
            return;
        }
        let connection = inner.server.connect();
        let info = serde_json::json!({
            "server_id": "RUSTSTREAMSIM",
            "server_name": "ruststream-sim",
            "version": inner.server.version.announced(),
            "proto": 1,
            "go": "ruststream-sim",
            "host": addr.ip().to_string(),
            "port": addr.port(),
            "headers": true,
            "max_payload": inner.server.max_payload(),
            "jetstream": inner.access.jetstream,
            "auth_required": inner.access.authorization.is_some(),
            "client_id": client_id,
        });
        let _ = out.send(Bytes::from(format!("INFO {info}\r\n")));
        let admitted = inner.access.authorization.is_none();
        inner.clients.insert(
            connection,
            Client {
                admitted,
                out,
                sids: HashMap::new(),
                close: close.clone(),
            },
        );
        connection
    };
    let writing = tokio::spawn(async move {
        while let Some(bytes) = outgoing.recv().await {
            if writer.write_all(&bytes).await.is_err() {
                break;
            }
        }
    });
    let mut buf = BytesMut::with_capacity(64 * 1024);
    'reading: loop {
        tokio::select! {
            biased;
            () = close.notified() => {
                writing.abort();
                break 'reading;
            }
            read = reader.read_buf(&mut buf) => {
                if !matches!(read, Ok(n) if n > 0) {
                    break 'reading;
                }
                let mut ops = Vec::new();
                let broken = loop {
                    match protocol::parse(&mut buf) {
                        Ok(Some(op)) => ops.push(op),
                        Ok(None) => break None,
                        Err(e) => break Some(e),
                    }
                };
                protocol::order_subscriptions(&mut ops);
                let mut inner = shared.lock();
                for op in ops {
                    if inner.apply(connection, op).is_err() {
                        inner.flush();
                        break 'reading;
                    }
                }
                if let Some(e) = broken {
                    inner.send(connection, format!("-ERR '{e}'\r\n"));
                    break 'reading;
                }
                inner.flush();
                drop(inner);
                shared.changed.notify_one();
            }
        }
    }
    {
        let mut inner = shared.lock();
        inner.close(connection);
        inner.flush();
    }
    shared.changed.notify_one();
    // The writer ends once its queue is drained (an `-ERR` reaches the client first); a
    // fault's close aborted it.
    let _ = writing.await;
}
