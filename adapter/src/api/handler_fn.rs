//! Handlers built from async functions: of the delivery ([`DeliveryFn`]), or of the delivery and
//! its [`Context`] ([`ContextFn`]), and [`IntoHandler`], which [`App::mount`](crate::App::mount)
//! takes.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use ruststream_settlement::Outcome;

use super::codec::DecodeError;
use super::context::{Context, ContextSource};
use super::delivery::Delivery;
use super::handled::{Handled, IntoHandled};
use super::handler::{HandledFuture, Handler, HandlerSlot, in_place};

/// What [`App::mount`](crate::App::mount) takes: a [`Handler`], or an async function of
/// - the delivery: `Fn(Delivery) -> impl Future<Output = O>`, or
/// - the delivery and its [`Context`]: `Fn(Delivery, Context) -> impl Future<Output = O>`,
///
/// that is `Send + Sync + 'static`, where `O` is an [`IntoHandled`] ([`Outcome`],
/// [`Reply`](crate::Reply), or a `Result` of either). `Args` tells the forms apart; it is inferred
/// (give a closure's argument types, `|d: Delivery|`).
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
    pub(super) struct Run<Fut> {
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
pub(super) fn run<Fut>(future: Fut, context: Option<Context>) -> Run<Fut> {
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

/// Sends a handler's [`Reply`](crate::Reply): acked once the client took it.
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
pub(super) fn reply_context<O: IntoHandled>(
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
