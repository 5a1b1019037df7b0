//! The app's Core thread, and the one way both of an app's threads start: a named thread
//! running a Tokio current-thread runtime of its own.

use std::sync::{Mutex, PoisonError};

/// The app's Core thread: a Tokio current-thread runtime of its own, running the Core mount
/// loops until its NATS thread stops it (or every clone of the
/// [`NatsThread`](super::NatsThread) is gone).
#[derive(Debug)]
pub(super) struct CoreThread {
    /// Its runtime, where the Core loops are spawned.
    pub(super) handle: tokio::runtime::Handle,
    /// Sent, or dropped, to end the thread: its runtime is dropped, cancelling what runs on
    /// it.
    stop: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl CoreThread {
    /// Starts the thread, named `name`.
    pub(super) fn start(name: &str) -> Result<Self, String> {
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (handle, thread) = runtime_thread(name, "Core", move |runtime| {
            // A panic in a task is the task's (its JoinHandle says so); this only waits.
            let _ = runtime.block_on(stop_rx);
        })?;
        Ok(Self {
            handle,
            stop: Mutex::new(Some(stop)),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Ends the thread and waits until it has dropped its runtime (and what ran on it).
    pub(super) fn stop_and_join(&self) {
        if let Some(stop) = self
            .stop
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = stop.send(());
        }
        let thread = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(thread) = thread
            && thread.join().is_err()
        {
            tracing::error!("the app's Core thread panicked");
        }
    }
}

/// Starts a thread named `name` that builds a Tokio current-thread runtime, marks itself one of an
/// app's threads ([`NatsThread::is_current`](super::NatsThread::is_current)) and gives the runtime
/// to `run`: the runtime's handle and the thread, once the runtime is built. `kind` names the
/// thread in the errors (`"NATS"`, `"Core"`).
pub(super) fn runtime_thread(
    name: &str,
    kind: &str,
    run: impl FnOnce(tokio::runtime::Runtime) + Send + 'static,
) -> Result<(tokio::runtime::Handle, std::thread::JoinHandle<()>), String> {
    let (handle_tx, handle_rx) = std::sync::mpsc::channel();
    let thread = std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => {
                    OWN_RUNTIME.set(Some(runtime.handle().clone()));
                    let _ = handle_tx.send(Ok(runtime.handle().clone()));
                    run(runtime);
                }
                Err(e) => {
                    let _ = handle_tx.send(Err(e.to_string()));
                }
            }
        })
        .map_err(|e| format!("cannot start the app's {kind} thread: {e}"))?;
    let handle = handle_rx
        .recv()
        .map_err(|_| format!("the app's {kind} thread ended at start"))?
        .map_err(|e| format!("cannot build the app's {kind} runtime: {e}"))?;
    Ok((handle, thread))
}

thread_local! {
    /// The thread's own runtime, set on each app thread (see [`runtime_thread`]), for
    /// `NatsThread::current_runtime` and `NatsThread::is_current`.
    pub(super) static OWN_RUNTIME: std::cell::RefCell<Option<tokio::runtime::Handle>> =
        const { std::cell::RefCell::new(None) };
}
