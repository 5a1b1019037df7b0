//! Typed handlers: the payload decoded with the mount's [`Codec`] before the handler is called
//! ([`Typed`]; [`Json`] with JSON).

use std::future::Future;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use super::codec::{Codec, DecodeError, JsonCodec};
use super::context::{Context, ContextSource};
use super::delivery::Delivery;
use super::handled::{Handled, IntoHandled};
use super::handler::{HandledFuture, Handler, HandlerSlot, in_place};
use super::handler_fn::{reply_context, run};

/// A typed handler: decodes the payload into `T` with its codec `C`, then calls `f` with the
/// value and the delivery (`Fn(T, Delivery)`), or with the value, the delivery and its
/// [`Context`] (`Fn(T, Delivery, Context)`). [`App::mount_typed`](crate::App::mount_typed)
/// builds it (and [`App::mount_json`](crate::App::mount_json) with [`JsonCodec`], as [`Json`]);
/// `Args` tells the two forms apart, and is inferred.
///
/// A payload that does not decode never reaches `f`: it goes straight to the at-limit path,
/// so it is dead-lettered if the mount declares a dead-letter subject (with provenance,
/// `Ruststream-Reason: undecodable`), and otherwise terminated (`+TERM`) on JetStream and let
/// go on Core, whatever the attempt. Retrying cannot make a bad payload good. The log line says
/// why, naming the codec ([`DecodeError`]).
///
/// What the handler returns is encoded apart from the mount's codec: a [`Reply`](crate::Reply)
/// is JSON whatever the mount's codec; [`ReplyAs`](crate::ReplyAs) answers in the codec it is
/// given.
pub struct Typed<C, T, F, Args = (T, Delivery)> {
    codec: C,
    f: F,
    _type: std::marker::PhantomData<fn() -> (T, Args)>,
}

/// A typed handler whose payload is JSON: [`Typed`] with [`JsonCodec`], as
/// [`App::mount_json`](crate::App::mount_json) builds it.
pub type Json<T, F, Args = (T, Delivery)> = Typed<JsonCodec, T, F, Args>;

impl<C, T, F, Args> Typed<C, T, F, Args> {
    /// Wraps `f`, its payloads decoded with `codec`.
    pub fn with_codec(codec: C, f: F) -> Self {
        Self {
            codec,
            f,
            _type: std::marker::PhantomData,
        }
    }

    /// The codec its payloads are decoded with.
    pub fn codec(&self) -> &C {
        &self.codec
    }
}

impl<C: Default, T, F, Args> Typed<C, T, F, Args> {
    /// Wraps `f`, its payloads decoded with `C`'s default (the codecs of this crate are unit
    /// structs: `Json::new(f)`).
    pub fn new(f: F) -> Self {
        Self::with_codec(C::default(), f)
    }
}

impl<C, T, F, Fut> Handler for Typed<C, T, F, (T, Delivery)>
where
    C: Codec,
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

impl<C, T, F, Fut> Typed<C, T, F, (T, Delivery)>
where
    C: Codec,
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
    ) -> Result<impl Future<Output = Handled> + Send + use<C, T, F, Fut>, DecodeError> {
        let value = self.codec.decode::<T>(&delivery.payload)?;
        let context = reply_context::<Fut::Output>(context, &delivery);
        Ok(run((self.f)(value, delivery), context))
    }
}

impl<C, T, F, Fut> Handler for Typed<C, T, F, (T, Delivery, Context)>
where
    C: Codec,
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

impl<C, T, F, Fut> Typed<C, T, F, (T, Delivery, Context)>
where
    C: Codec,
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
    ) -> Result<impl Future<Output = Handled> + Send + use<C, T, F, Fut>, DecodeError> {
        let value = self.codec.decode::<T>(&delivery.payload)?;
        let context = context.context(&delivery);
        let reply = Fut::Output::REPLIES.then(|| context.clone());
        Ok(run((self.f)(value, delivery, context), reply))
    }
}

/// What [`App::mount_typed`](crate::App::mount_typed) takes with the codec `C`: an async
/// function of a value decoded with `C` and the delivery, `Fn(T, Delivery) -> impl
/// Future<Output = O>`, or of the value, the delivery and its [`Context`], `Fn(T, Delivery,
/// Context) -> impl Future<Output = O>`, where `O` is an [`IntoHandled`]. See [`Typed`].
pub trait IntoTypedHandler<C, T, Args>: Sized {
    /// The handler built.
    type Handler: Handler;

    /// Builds the handler, its payloads decoded with `codec`.
    fn into_typed_handler(self, codec: C) -> Self::Handler;
}

impl<C, T, F, Fut> IntoTypedHandler<C, T, (T, Delivery)> for F
where
    C: Codec,
    T: DeserializeOwned + Send + 'static,
    F: Fn(T, Delivery) -> Fut + Send + Sync + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: IntoHandled,
{
    type Handler = Typed<C, T, F, (T, Delivery)>;

    fn into_typed_handler(self, codec: C) -> Self::Handler {
        Typed::with_codec(codec, self)
    }
}

impl<C, T, F, Fut> IntoTypedHandler<C, T, (T, Delivery, Context)> for F
where
    C: Codec,
    T: DeserializeOwned + Send + 'static,
    F: Fn(T, Delivery, Context) -> Fut + Send + Sync + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: IntoHandled,
{
    type Handler = Typed<C, T, F, (T, Delivery, Context)>;

    fn into_typed_handler(self, codec: C) -> Self::Handler {
        Typed::with_codec(codec, self)
    }
}

/// What [`App::mount_json`](crate::App::mount_json) takes: [`IntoTypedHandler`] with
/// [`JsonCodec`], implemented for every such function. See [`Json`].
pub trait IntoJsonHandler<T, Args>: Sized {
    /// The handler built.
    type Handler: Handler;

    /// Builds the handler.
    fn into_json_handler(self) -> Self::Handler;
}

impl<T, Args, H: IntoTypedHandler<JsonCodec, T, Args>> IntoJsonHandler<T, Args> for H {
    type Handler = H::Handler;

    fn into_json_handler(self) -> Self::Handler {
        self.into_typed_handler(JsonCodec)
    }
}
