//! The [`Handler`] trait, and the [`HandlerSlot`] a mount loop keeps a handler's runs in.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::codec::DecodeError;
use super::context::ContextSource;
use super::delivery::Delivery;
use super::handled::Handled;

/// A boxed future of what a handler returned: what [`Handler::call`] gives the runtime.
pub type HandledFuture = Pin<Box<dyn Future<Output = Handled> + Send + 'static>>;

/// What the runtime runs for each delivery: the handler's future, started by [`call`](Self::call)
/// in the mount loop's [`HandlerSlot`] (see [`slot`](Self::slot)).
///
/// Applications rarely implement it: [`App::mount`](crate::App::mount) takes async functions (see
/// [`IntoHandler`](crate::IntoHandler)) and [`App::mount_typed`](crate::App::mount_typed) (or
/// [`App::mount_json`](crate::App::mount_json)) typed ones, and builds it. A handler that panics
/// is caught and counts as [`Outcome::None`](crate::Outcome::None) (rule 13).
pub trait Handler: Send + Sync + 'static {
    /// Starts handling one delivery. `context` gives the delivery's [`Context`](crate::Context),
    /// for a handler that wants one.
    ///
    /// # Errors
    /// [`DecodeError`] when the payload cannot be given to the handler at all; the runtime then
    /// sends the delivery straight to the at-limit path (see [`Typed`](crate::Typed)).
    fn call(
        &self,
        delivery: Delivery,
        context: ContextSource<'_>,
    ) -> Result<HandledFuture, DecodeError>;

    /// Whether it may return a [`Handled::Reply`], which a JetStream mount cannot send
    /// (checked at start-up). `false` unless overridden.
    fn replies(&self) -> bool {
        false
    }

    /// Where a mount keeps this handler's runs. A mount loop calls it when it starts, holds the
    /// slot, starts each delivery's run in it and polls it there; a run that does not finish at its
    /// first poll leaves the loop to finish on a task of its own.
    ///
    /// The default starts each run with [`call`](Self::call) and keeps the boxed future it gives; a
    /// run that waits leaves as that future, and the slot stays. A handler of your own needs
    /// nothing more, and pays what it did before this method existed: one allocation a delivery.
    /// The handlers this crate builds from functions ([`IntoHandler`](crate::IntoHandler),
    /// [`Typed`](crate::Typed)) override it to keep their future unboxed in the slot and use its
    /// storage again for the next delivery: no allocation and no dynamic call a delivery that
    /// finishes at once; a run that waits leaves with the slot it is kept in, and the loop asks for
    /// a new one (one allocation a run that waits). Issue 13.
    ///
    /// Do not override it: [`HandlerSlot`] has no public constructor, so an override could only
    /// give another handler's slot, and then the runtime would never call this handler's own `call`
    /// (a wrapper's logging or checks there would be skipped). It should not panic either: it runs
    /// outside the guard that catches a handler's panics (rule 13).
    fn slot(self: Arc<Self>) -> HandlerSlot {
        HandlerSlot::new(BoxedSlot {
            handler: self,
            run: None,
        })
    }
}

/// A mount loop's place for one handler run at a time; see [`Handler::slot`]. Opaque.
pub struct HandlerSlot(Pin<Box<dyn Slot>>);

impl std::fmt::Debug for HandlerSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HandlerSlot(..)")
    }
}

impl HandlerSlot {
    fn new(slot: impl Slot + 'static) -> Self {
        Self(Box::pin(slot))
    }

    /// Starts the handler on `delivery`, dropping any run the slot still held.
    ///
    /// # Errors
    /// The handler's [`DecodeError`]: then nothing runs.
    #[inline]
    pub(crate) fn start(
        &mut self,
        delivery: Delivery,
        context: ContextSource<'_>,
    ) -> Result<(), DecodeError> {
        self.0.as_mut().start(delivery, context)
    }

    /// Takes out the run that is still pending after its first poll, to finish on a task of
    /// its own: the boxed future alone from the default slot (which stays, empty), or else
    /// the whole slot, replaced by a new one of `handler`'s (a run kept in place cannot move
    /// out of it).
    pub(crate) fn take_run(&mut self, handler: &Arc<dyn Handler>) -> PendingRun {
        match self.0.as_mut().take_boxed() {
            Some(run) => PendingRun::Boxed(run),
            None => PendingRun::InSlot(std::mem::replace(self, handler.clone().slot())),
        }
    }

    /// Polls the run; once it is ready the slot is empty again. An empty slot is ready at
    /// once with an error (the runtime never polls one).
    #[inline]
    pub(crate) fn poll_run(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Handled> {
        self.0.as_mut().poll_run(cx)
    }
}

/// A handler run taken out of a mount loop's slot by [`HandlerSlot::take_run`].
pub(crate) enum PendingRun {
    /// The boxed future of the default slot.
    Boxed(HandledFuture),
    /// The slot the run is kept in.
    InSlot(HandlerSlot),
}

/// What a [`HandlerSlot`] holds: a handler, and its run when one is started.
trait Slot: Send {
    /// The run, when it is a boxed future that can leave the slot by itself.
    fn take_boxed(self: Pin<&mut Self>) -> Option<HandledFuture> {
        None
    }

    /// Starts a run on `delivery`. Drops the run it held before it calls the handler, so
    /// that a handler panicking in the call leaves the slot empty and usable.
    fn start(
        self: Pin<&mut Self>,
        delivery: Delivery,
        context: ContextSource<'_>,
    ) -> Result<(), DecodeError>;

    /// Polls the run; once it is ready the slot is empty again.
    fn poll_run(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Handled>;
}

/// The text a slot polled with no run in it is ready with (a bug in the runtime, never seen).
const NO_RUN: &str = "the runtime polled a handler slot with no run in it";

/// [`Handler::slot`]'s default: each run is the boxed future [`Handler::call`] gives.
struct BoxedSlot<H: ?Sized> {
    handler: Arc<H>,
    run: Option<HandledFuture>,
}

impl<H: Handler + ?Sized> Slot for BoxedSlot<H> {
    fn take_boxed(self: Pin<&mut Self>) -> Option<HandledFuture> {
        self.get_mut().run.take()
    }

    fn start(
        self: Pin<&mut Self>,
        delivery: Delivery,
        context: ContextSource<'_>,
    ) -> Result<(), DecodeError> {
        let this = self.get_mut();
        this.run = None;
        this.run = Some(this.handler.call(delivery, context)?);
        Ok(())
    }

    fn poll_run(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Handled> {
        let this = self.get_mut();
        let Some(run) = this.run.as_mut() else {
            return std::task::Poll::Ready(Handled::Error(NO_RUN.to_owned()));
        };
        let handled = std::task::ready!(run.as_mut().poll(cx));
        this.run = None;
        std::task::Poll::Ready(handled)
    }
}

pin_project_lite::pin_project! {
    /// The slot of a handler this crate builds: its run unboxed, in place, started by `start`
    /// (monomorphised: no dynamic call inside).
    struct InPlace<H, S, Run> {
        handler: Arc<H>,
        start: S,
        #[pin]
        run: Option<Run>,
    }
}

impl<H, S, Run> Slot for InPlace<H, S, Run>
where
    H: Send + Sync + 'static,
    S: Fn(&H, Delivery, ContextSource<'_>) -> Result<Run, DecodeError> + Send + 'static,
    Run: Future<Output = Handled> + Send + 'static,
{
    #[inline]
    fn start(
        self: Pin<&mut Self>,
        delivery: Delivery,
        context: ContextSource<'_>,
    ) -> Result<(), DecodeError> {
        let mut this = self.project();
        // Dropped before the handler is called: a run left over is never the one to keep.
        this.run.set(None);
        let run = (this.start)(this.handler, delivery, context)?;
        this.run.set(Some(run));
        Ok(())
    }

    #[inline]
    fn poll_run(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Handled> {
        let mut this = self.project();
        let Some(run) = this.run.as_mut().as_pin_mut() else {
            return std::task::Poll::Ready(Handled::Error(NO_RUN.to_owned()));
        };
        let handled = std::task::ready!(run.poll(cx));
        this.run.set(None);
        std::task::Poll::Ready(handled)
    }
}

/// The slot of a handler this crate builds, whose runs `start` begins.
pub(super) fn in_place<H, S, Run>(handler: Arc<H>, start: S) -> HandlerSlot
where
    H: Send + Sync + 'static,
    S: Fn(&H, Delivery, ContextSource<'_>) -> Result<Run, DecodeError> + Send + 'static,
    Run: Future<Output = Handled> + Send + 'static,
{
    HandlerSlot::new(InPlace {
        handler,
        start,
        run: None,
    })
}
