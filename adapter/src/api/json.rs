//! Typed handlers: the payload decoded as JSON before the handler is called ([`Json`]).

use std::future::Future;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use super::context::{Context, ContextSource};
use super::delivery::{DecodeError, Delivery};
use super::handled::{Handled, IntoHandled};
use super::handler::{HandledFuture, Handler, HandlerSlot, in_place};
use super::handler_fn::{reply_context, run};

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
