//! Handlers and what they are given.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_nats::{HeaderMap, Subject};
use bytes::Bytes;
use ruststream_core::{Attempt, Outcome};
use serde::de::DeserializeOwned;

use crate::context::{Context, ContextSource};

/// A boxed future of an outcome: what a handler written as a closure may return when its
/// futures differ in type (an [`Outcome`] is an [`IntoHandled`]).
pub type OutcomeFuture = Pin<Box<dyn Future<Output = Outcome> + Send + 'static>>;

/// A boxed future of what a handler returned: what [`Handler::call`] gives the runtime.
pub type HandledFuture = Pin<Box<dyn Future<Output = Handled> + Send + 'static>>;

/// What a handler returned: an [`Outcome`], the text of the error of a handler that returned
/// `Err` (which the mount's [`ErrorPolicy`](crate::ErrorPolicy) turns into an outcome), or a
/// reply to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handled {
    /// The handler's outcome.
    Outcome(Outcome),
    /// The handler returned this error (its `Display` text).
    Error(String),
    /// The handler returned a [`Reply`]: this payload is for the delivery's reply subject, and
    /// the outcome is [`Outcome::Ack`] once it is sent. The handlers this crate builds from
    /// functions send it themselves, and give the runtime the outcome; a [`Handler`] of your
    /// own that gives this to the runtime gets it logged as an error (the reply is not sent)
    /// and settled by the mount's [`ErrorPolicy`].
    Reply(Bytes),
}

/// What a handler may return: an [`Outcome`], a [`Reply`], or `Result<O, E>` of either for
/// any error type that can be displayed, so that `?` works in a handler. An `Err` is logged
/// with its text and turned into an outcome by the mount's [`ErrorPolicy`] (by default
/// [`Outcome::Retry`], so `max_attempts` and the backoff apply).
pub trait IntoHandled: Send + 'static {
    /// Whether a value of this type may be a reply, which needs the delivery's [`Context`] to
    /// be sent. A mount whose handler returns replies cannot be a JetStream mount (refused at
    /// start-up: a JetStream delivery's reply subject is its ack reply subject).
    const REPLIES: bool = false;

    /// This return value as [`Handled`].
    fn into_handled(self) -> Handled;
}

impl IntoHandled for Outcome {
    #[inline]
    fn into_handled(self) -> Handled {
        Handled::Outcome(self)
    }
}

impl<O: IntoHandled, E: std::fmt::Display + Send + 'static> IntoHandled for Result<O, E> {
    const REPLIES: bool = O::REPLIES;

    #[inline]
    fn into_handled(self) -> Handled {
        match self {
            Ok(o) => o.into_handled(),
            Err(e) => Handled::Error(e.to_string()),
        }
    }
}

/// A handler's answer to a Core request, FastStream-style: `T` is encoded as JSON and
/// published to the delivery's reply subject, then the delivery is settled as
/// [`Outcome::Ack`].
///
/// - A value that does not encode is a handler error (the mount's [`ErrorPolicy`]), and so is
///   a reply the client could not take.
/// - A delivery without a reply subject (published, not requested) is acked, and the reply
///   dropped with a debug log line: there is no one to answer.
/// - A mount whose handler returns `Reply` cannot be a JetStream mount: refused at start-up,
///   naming the mount.
///
/// To answer with raw bytes, or to settle otherwise after answering, use
/// [`Context::respond`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply<T>(pub T);

impl<T: serde::Serialize + Send + 'static> IntoHandled for Reply<T> {
    const REPLIES: bool = true;

    fn into_handled(self) -> Handled {
        match serde_json::to_vec(&self.0) {
            Ok(payload) => Handled::Reply(payload.into()),
            Err(e) => Handled::Error(format!("the reply does not encode as JSON: {e}")),
        }
    }
}

/// What a JetStream delivery's ack reply subject says about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JetStreamInfo {
    /// The stream's name (kept once per process, as [`Delivery::mount`]).
    pub stream: &'static str,
    /// The consumer's name (kept once per process, as [`Delivery::mount`]).
    pub consumer: &'static str,
    /// How many times the message has been delivered to this consumer, this time included.
    pub delivered: u64,
    /// The message's sequence in the stream.
    pub stream_sequence: u64,
    /// The delivery's sequence in the consumer.
    pub consumer_sequence: u64,
    /// When the message was stored, in nanoseconds since the Unix epoch.
    pub timestamp: u64,
    /// How many messages the consumer still had pending.
    pub pending: u64,
}

/// One delivery, as a handler sees it.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The name of the mount it came through.
    ///
    /// Mount, stream and consumer names are kept once per process, for its life, so that every
    /// delivery carries them for free (no allocation, no reference count). Each distinct name
    /// is allocated once, the first time an app starts with it; starting apps again and again
    /// with the same names allocates nothing more.
    pub mount: &'static str,
    /// The subject it was published to.
    pub subject: Subject,
    /// Its reply subject, for a Core request (on JetStream, the ack reply subject, which the
    /// runtime answers itself).
    pub reply: Option<Subject>,
    /// Its headers, if any: shared with the runtime, which builds a Core copy or a dead letter
    /// from the same headers after the handler, so that giving them to the handler copies
    /// nothing. Read them through the [`Arc`] (`d.headers.as_deref().and_then(|h|
    /// h.get("name"))`); [`Arc::unwrap_or_clone`] gives an owned map (a copy only while the
    /// runtime still holds it).
    pub headers: Option<Arc<HeaderMap>>,
    /// Its payload.
    pub payload: Bytes,
    /// Which attempt this is, from 1: `delivered` on JetStream, the retry-count header + 1 on
    /// Core.
    pub attempt: Attempt,
    /// The JetStream metadata; `None` on Core.
    pub jetstream: Option<JetStreamInfo>,
}

/// Why a typed handler could not be given a delivery.
#[derive(Debug, thiserror::Error)]
#[error("payload does not decode: {0}")]
pub struct DecodeError(#[from] pub serde_json::Error);

/// What the runtime runs for each delivery: the handler's future, started by
/// [`call`](Self::call) in the mount loop's [`HandlerSlot`] (see [`slot`](Self::slot)).
///
/// Applications rarely implement it: [`App::mount`](crate::App::mount) takes async functions
/// (see [`IntoHandler`]) and [`App::mount_json`](crate::App::mount_json) typed ones, and
/// builds it. A handler that panics is caught and counts as [`Outcome::None`] (rule 13).
pub trait Handler: Send + Sync + 'static {
    /// Starts handling one delivery. `context` gives the delivery's [`Context`], for a
    /// handler that wants one.
    ///
    /// # Errors
    /// [`DecodeError`] when the payload cannot be given to the handler at all; the runtime
    /// then sends the delivery straight to the at-limit path (see [`Json`]).
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

    /// Where a mount keeps this handler's runs. A mount loop calls it when it starts, holds
    /// the slot, starts each delivery's run in it and polls it there; a run that does not
    /// finish at its first poll leaves the loop to finish on a task of its own.
    ///
    /// The default starts each run with [`call`](Self::call) and keeps the boxed future it
    /// gives; a run that waits leaves as that future, and the slot stays. A handler of your
    /// own needs nothing more, and pays what it did before this method existed: one allocation
    /// a delivery. The handlers this crate builds from functions ([`IntoHandler`], [`Json`])
    /// override it to keep their future unboxed in the slot and use its storage again for the
    /// next delivery: no allocation and no dynamic call a delivery that finishes at once; a
    /// run that waits leaves with the slot it is kept in, and the loop asks for a new one (one
    /// allocation a run that waits). Issue 13.
    ///
    /// Do not override it: [`HandlerSlot`] has no public constructor, so an override could
    /// only give another handler's slot, and then the runtime would never call this handler's
    /// own `call` (a wrapper's logging or checks there would be skipped). It should not panic
    /// either: it runs outside the guard that catches a handler's panics (rule 13).
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
fn in_place<H, S, Run>(handler: Arc<H>, start: S) -> HandlerSlot
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

/// What [`App::mount`](crate::App::mount) takes: a [`Handler`], or an async function of
/// - the delivery: `Fn(Delivery) -> impl Future<Output = O>`, or
/// - the delivery and its [`Context`]: `Fn(Delivery, Context) -> impl Future<Output = O>`,
///
/// that is `Send + Sync + 'static`, where `O` is an [`IntoHandled`] ([`Outcome`], [`Reply`],
/// or a `Result` of either). `Args` tells the forms apart; it is inferred (give a closure's
/// argument types, `|d: Delivery|`).
pub trait IntoHandler<Args>: Sized {
    /// The handler built.
    type Handler: Handler;

    /// Builds the handler.
    fn into_handler(self) -> Self::Handler;
}

impl<H: Handler> IntoHandler<()> for H {
    type Handler = H;

    fn into_handler(self) -> H {
        self
    }
}

pin_project_lite::pin_project! {
    /// A run of a handler this crate builds, kept in its [`HandlerSlot`]: the handler's
    /// future, polled in place, then, for an output that may be a reply (`context` given),
    /// the reply sent before the runtime sees the outcome. Written out rather than as an
    /// `async fn`, whose first poll would move the handler's future into its own state.
    struct Run<Fut> {
        #[pin]
        future: Fut,
        context: Option<Context>,
        // The reply being sent, once the handler gave one (boxed: only replies pay for it).
        sending: Option<HandledFuture>,
    }
}

/// The run of a handler whose future is `future`; `context` is given for an output that may
/// be a reply.
#[inline]
fn run<Fut>(future: Fut, context: Option<Context>) -> Run<Fut> {
    Run {
        future,
        context,
        sending: None,
    }
}

impl<Fut> Future for Run<Fut>
where
    Fut: Future,
    Fut::Output: IntoHandled,
{
    type Output = Handled;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Handled> {
        let this = self.project();
        if let Some(sending) = this.sending {
            return sending.as_mut().poll(cx);
        }
        let handled = std::task::ready!(this.future.poll(cx)).into_handled();
        match (handled, this.context.take()) {
            (Handled::Reply(payload), Some(context)) => this
                .sending
                .insert(Box::pin(async move { send_reply(&context, payload).await }))
                .as_mut()
                .poll(cx),
            (handled, _) => std::task::Poll::Ready(handled),
        }
    }
}

/// Sends a handler's [`Reply`]: acked once the client took it.
async fn send_reply(context: &Context, payload: Bytes) -> Handled {
    if !context.can_respond() {
        tracing::debug!(
            mount = context.mount(),
            "the handler returned a reply to a delivery without a reply subject: not sent"
        );
        return Handled::Outcome(Outcome::Ack);
    }
    match context.respond(payload).await {
        Ok(()) => Handled::Outcome(Outcome::Ack),
        Err(e) => Handled::Error(format!("the reply was not sent: {e}")),
    }
}

/// The context to build for a handler whose output is `O`, when it is not given one.
fn reply_context<O: IntoHandled>(
    source: ContextSource<'_>,
    delivery: &Delivery,
) -> Option<Context> {
    O::REPLIES.then(|| source.context(delivery))
}

/// A handler of the delivery alone (built by [`IntoHandler`]).
pub struct DeliveryFn<F>(F);

impl<F, Fut> Handler for DeliveryFn<F>
where
    F: Fn(Delivery) -> Fut + Send + Sync + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: IntoHandled,
{
    fn call(
        &self,
        delivery: Delivery,
        context: ContextSource<'_>,
    ) -> Result<HandledFuture, DecodeError> {
        Ok(Box::pin(self.begin_run(delivery, context)?))
    }

    fn replies(&self) -> bool {
        Fut::Output::REPLIES
    }

    fn slot(self: Arc<Self>) -> HandlerSlot {
        in_place(self, Self::begin_run)
    }
}

impl<F, Fut> DeliveryFn<F>
where
    F: Fn(Delivery) -> Fut + Send + Sync + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: IntoHandled,
{
    /// The run of one delivery, for [`Handler::call`] and the slot.
    #[inline]
    fn begin_run(
        &self,
        delivery: Delivery,
        context: ContextSource<'_>,
    ) -> Result<impl Future<Output = Handled> + Send + use<F, Fut>, DecodeError> {
        let context = reply_context::<Fut::Output>(context, &delivery);
        Ok(run((self.0)(delivery), context))
    }
}

impl<F, Fut> IntoHandler<(Delivery,)> for F
where
    F: Fn(Delivery) -> Fut + Send + Sync + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: IntoHandled,
{
    type Handler = DeliveryFn<F>;

    fn into_handler(self) -> DeliveryFn<F> {
        DeliveryFn(self)
    }
}

/// A handler of the delivery and its [`Context`] (built by [`IntoHandler`]).
pub struct ContextFn<F>(F);

impl<F, Fut> Handler for ContextFn<F>
where
    F: Fn(Delivery, Context) -> Fut + Send + Sync + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: IntoHandled,
{
    fn call(
        &self,
        delivery: Delivery,
        context: ContextSource<'_>,
    ) -> Result<HandledFuture, DecodeError> {
        Ok(Box::pin(self.begin_run(delivery, context)?))
    }

    fn replies(&self) -> bool {
        Fut::Output::REPLIES
    }

    fn slot(self: Arc<Self>) -> HandlerSlot {
        in_place(self, Self::begin_run)
    }
}

impl<F, Fut> ContextFn<F>
where
    F: Fn(Delivery, Context) -> Fut + Send + Sync + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: IntoHandled,
{
    /// The run of one delivery, for [`Handler::call`] and the slot.
    #[inline]
    fn begin_run(
        &self,
        delivery: Delivery,
        context: ContextSource<'_>,
    ) -> Result<impl Future<Output = Handled> + Send + use<F, Fut>, DecodeError> {
        let context = context.context(&delivery);
        let reply = Fut::Output::REPLIES.then(|| context.clone());
        Ok(run((self.0)(delivery, context), reply))
    }
}

impl<F, Fut> IntoHandler<(Delivery, Context)> for F
where
    F: Fn(Delivery, Context) -> Fut + Send + Sync + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: IntoHandled,
{
    type Handler = ContextFn<F>;

    fn into_handler(self) -> ContextFn<F> {
        ContextFn(self)
    }
}

/// A typed handler: decodes the payload as JSON into `T` with serde_json, then calls `f` with
/// the value and the delivery (`Fn(T, Delivery)`), or with the value, the delivery and its
/// [`Context`] (`Fn(T, Delivery, Context)`). [`App::mount_json`](crate::App::mount_json)
/// builds it; `Args` tells the two forms apart, and is inferred.
///
/// A payload that does not decode never reaches `f`: it goes straight to the at-limit path,
/// so it is dead-lettered if the mount declares a dead-letter subject, and otherwise
/// terminated (`+TERM`) on JetStream and let go on Core, whatever the attempt. Retrying
/// cannot make bad JSON good.
pub struct Json<T, F, Args = (T, Delivery)> {
    f: F,
    _type: std::marker::PhantomData<fn() -> (T, Args)>,
}

impl<T, F, Args> Json<T, F, Args> {
    /// Wraps `f`.
    pub fn new(f: F) -> Self {
        Self {
            f,
            _type: std::marker::PhantomData,
        }
    }
}

impl<T, F, Fut> Handler for Json<T, F, (T, Delivery)>
where
    T: DeserializeOwned + Send + 'static,
    F: Fn(T, Delivery) -> Fut + Send + Sync + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: IntoHandled,
{
    fn call(
        &self,
        delivery: Delivery,
        context: ContextSource<'_>,
    ) -> Result<HandledFuture, DecodeError> {
        Ok(Box::pin(self.begin_run(delivery, context)?))
    }

    fn replies(&self) -> bool {
        Fut::Output::REPLIES
    }

    fn slot(self: Arc<Self>) -> HandlerSlot {
        in_place(self, Self::begin_run)
    }
}

impl<T, F, Fut> Json<T, F, (T, Delivery)>
where
    T: DeserializeOwned + Send + 'static,
    F: Fn(T, Delivery) -> Fut + Send + Sync + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: IntoHandled,
{
    /// The run of one delivery, for [`Handler::call`] and the slot.
    #[inline]
    fn begin_run(
        &self,
        delivery: Delivery,
        context: ContextSource<'_>,
    ) -> Result<impl Future<Output = Handled> + Send + use<T, F, Fut>, DecodeError> {
        let value = serde_json::from_slice::<T>(&delivery.payload)?;
        let context = reply_context::<Fut::Output>(context, &delivery);
        Ok(run((self.f)(value, delivery), context))
    }
}

impl<T, F, Fut> Handler for Json<T, F, (T, Delivery, Context)>
where
    T: DeserializeOwned + Send + 'static,
    F: Fn(T, Delivery, Context) -> Fut + Send + Sync + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: IntoHandled,
{
    fn call(
        &self,
        delivery: Delivery,
        context: ContextSource<'_>,
    ) -> Result<HandledFuture, DecodeError> {
        Ok(Box::pin(self.begin_run(delivery, context)?))
    }

    fn replies(&self) -> bool {
        Fut::Output::REPLIES
    }

    fn slot(self: Arc<Self>) -> HandlerSlot {
        in_place(self, Self::begin_run)
    }
}

impl<T, F, Fut> Json<T, F, (T, Delivery, Context)>
where
    T: DeserializeOwned + Send + 'static,
    F: Fn(T, Delivery, Context) -> Fut + Send + Sync + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: IntoHandled,
{
    /// The run of one delivery, for [`Handler::call`] and the slot.
    #[inline]
    fn begin_run(
        &self,
        delivery: Delivery,
        context: ContextSource<'_>,
    ) -> Result<impl Future<Output = Handled> + Send + use<T, F, Fut>, DecodeError> {
        let value = serde_json::from_slice::<T>(&delivery.payload)?;
        let context = context.context(&delivery);
        let reply = Fut::Output::REPLIES.then(|| context.clone());
        Ok(run((self.f)(value, delivery, context), reply))
    }
}

/// What [`App::mount_json`](crate::App::mount_json) takes: an async function of a value
/// decoded from JSON and the delivery, `Fn(T, Delivery) -> impl Future<Output = O>`, or of the
/// value, the delivery and its [`Context`], `Fn(T, Delivery, Context) -> impl Future<Output =
/// O>`, where `O` is an [`IntoHandled`]. See [`Json`].
pub trait IntoJsonHandler<T, Args>: Sized {
    /// The handler built.
    type Handler: Handler;

    /// Builds the handler.
    fn into_json_handler(self) -> Self::Handler;
}

impl<T, F, Fut> IntoJsonHandler<T, (T, Delivery)> for F
where
    T: DeserializeOwned + Send + 'static,
    F: Fn(T, Delivery) -> Fut + Send + Sync + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: IntoHandled,
{
    type Handler = Json<T, F, (T, Delivery)>;

    fn into_json_handler(self) -> Self::Handler {
        Json::new(self)
    }
}

impl<T, F, Fut> IntoJsonHandler<T, (T, Delivery, Context)> for F
where
    T: DeserializeOwned + Send + 'static,
    F: Fn(T, Delivery, Context) -> Fut + Send + Sync + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: IntoHandled,
{
    type Handler = Json<T, F, (T, Delivery, Context)>;

    fn into_json_handler(self) -> Self::Handler {
        Json::new(self)
    }
}

/// What a mount does with a handler's `Err` (see [`IntoHandled`]): the outcome it stands for.
/// The error is logged at warning level with the mount, subject and attempt first.
#[derive(Clone, Default)]
pub enum ErrorPolicy {
    /// [`Outcome::Retry`]: `max_attempts`, the backoff and the dead-letter subject apply.
    #[default]
    Retry,
    /// [`Outcome::Reject`]: the at-limit path at once (rule 17).
    Reject,
    /// The outcome this function gives for the error's text. It runs on the mount's task: a
    /// panic in it is caught, logged, and counts as [`Outcome::None`].
    Decide(std::sync::Arc<dyn Fn(&str) -> Outcome + Send + Sync>),
}

impl ErrorPolicy {
    /// A policy that asks `decide` for the outcome of each error (given its `Display` text).
    pub fn decide(decide: impl Fn(&str) -> Outcome + Send + Sync + 'static) -> Self {
        Self::Decide(std::sync::Arc::new(decide))
    }

    /// The outcome an error stands for.
    pub fn outcome(&self, error: &str) -> Outcome {
        match self {
            Self::Retry => Outcome::Retry,
            Self::Reject => Outcome::Reject,
            Self::Decide(decide) => decide(error),
        }
    }
}

impl std::fmt::Debug for ErrorPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Retry => f.write_str("Retry"),
            Self::Reject => f.write_str("Reject"),
            Self::Decide(_) => f.write_str("Decide(..)"),
        }
    }
}
