//! The lease loop (rule 16): one per app, one timer for every lease in the app's
//! [`LeaseRoom`], the driver of the core's `Leases` it holds: renews JetStream deliveries with
//! `+WPI` and fires handlers' time limits.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::Client;
use ruststream_settlement::LeaseDue;
use tokio::sync::watch;

use crate::handling::lease::renew;
use crate::runtime::Runtime;
use crate::state::lease_room::LeaseRoom;
use crate::support::deliberate::{self, Bug};
use crate::support::metrics::Wire;

/// The lease loop of an app: one timer for every lease. Sends each renewal that falls due
/// (`+WPI` on the delivery's ack reply subject) and fires each time limit. Ends when `finish`
/// holds a deadline (the shutdown has accounted for every handler): leases still held then
/// belong to abandoned handlers, whose results will come late and not be sent.
///
/// When `finish` closes instead (the app's `Running` dropped without a shutdown), the mounts
/// go on while a kept `ShutdownHandle` lets them, and once stopped settle what they
/// received: the loop keeps renewing and enforcing time limits until nothing else holds
/// `room` (every mount loop and delivery has ended), looked at every [`ORPHANED_CHECK`].
pub(crate) async fn lease_loop<R: Runtime>(
    room: Arc<LeaseRoom>,
    clients: watch::Receiver<Client>,
    mut finish: watch::Receiver<Option<Instant>>,
) {
    let mut orphaned = false;
    loop {
        if finish.borrow().is_some() || (orphaned && Arc::strong_count(&room) == 1) {
            break;
        }
        let next = room.lock().poll_timeout();
        tokio::select! {
            biased;
            changed = finish.changed(), if !orphaned => orphaned = changed.is_err(),
            () = R::sleep_until(R::now() + ORPHANED_CHECK), if orphaned => {}
            () = room.started() => {}
            () = R::sleep_until(next.unwrap_or_else(R::now)), if next.is_some() => {
                let due = room.lock().handle_timeout(R::now());
                for due in due {
                    match due {
                        LeaseDue::Renew(key) => {
                            // Handed to the client under the lock: a handler that ends takes
                            // it first (`LeaseRoom::end`), so its result is published after
                            // any renewal of its lease, never before one (a `+WPI` after the
                            // `+ACK` was seen once on smol under a loaded CI run). The
                            // publish only queues the message in the client (`renew`).
                            let mut leases = room.lock();
                            let io = leases.get(key).and_then(|io| Some((io.reply.clone()?, io.metrics.clone())));
                            let Some((reply, metrics)) = io else { continue };
                            // Handed to the client: the lease is renewed from now.
                            if deliberate::active(Bug::DropLeaseRenewal) || renew(&clients, reply) {
                                metrics.wire(Wire::Wpi);
                                leases.handle_renewed(key, R::now());
                            }
                        }
                        LeaseDue::TimeLimit(key) => {
                            let cancel = room.lock().get_mut(key).and_then(|io| io.cancel.take());
                            if let Some(cancel) = cancel {
                                let _ = cancel.send(());
                            }
                        }
                    }
                }
            }
        }
    }
    if orphaned {
        tracing::debug!(
            "the lease loop ends: every mount of the app, whose Running is gone, has ended"
        );
    }
}

/// How often the lease loop of an app whose every handle is gone looks whether its mounts
/// have all ended (see [`lease_loop`]).
const ORPHANED_CHECK: Duration = Duration::from_millis(100);
