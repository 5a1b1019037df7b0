//! Codecs: how a typed handler's payload is decoded, and how a value a handler publishes or
//! replies with is encoded ([`Codec`]). A typed mount chooses its codec
//! ([`App::mount_typed`](crate::App::mount_typed)); so does each encoded publish
//! ([`Context::publish_encoded`](crate::Context::publish_encoded)) and reply
//! ([`ReplyAs`](crate::ReplyAs)).
//!
//! - [`JsonCodec`], always: serde_json, `application/json`.
//! - `MessagePack`, with the cargo feature `msgpack`: rmp-serde, `application/msgpack`.
//! - `Cbor`, with the cargo feature `cbor`: ciborium, `application/cbor`.
//!
//! The trait is open: a codec of your own (protobuf through a serde bridge, a JSON with other
//! settings) is a type that implements it.

use std::error::Error;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// How a payload becomes a value of a serde type, and a value becomes a payload: what a typed
/// mount decodes its deliveries with ([`App::mount_typed`](crate::App::mount_typed),
/// [`App::mount_typed_batch`](crate::App::mount_typed_batch)), and what a handler encodes what
/// it publishes and replies with ([`Context::publish_encoded`](crate::Context::publish_encoded),
/// [`ReplyAs`](crate::ReplyAs)).
///
/// Implementations MUST be deterministic in what they accept: a payload that does not decode
/// once never will, and the runtime sends it straight to the at-limit path (rule 17) without
/// retrying it. A decode SHOULD take the whole payload as one value and refuse bytes left
/// over, as the codecs of this crate do.
///
/// A mount calls [`decode`](Self::decode) once per delivery, on the mount loop's thread,
/// before the handler runs: keep it to decoding.
///
/// # A codec of your own
///
/// ```
/// use ruststream_adapter::{Codec, DecodeError, EncodeError};
///
/// /// JSON, pretty-printed when encoded.
/// struct PrettyJson;
///
/// impl Codec for PrettyJson {
///     fn name(&self) -> &'static str {
///         "pretty JSON"
///     }
///
///     fn content_type(&self) -> &'static str {
///         "application/json"
///     }
///
///     fn decode<T: serde::de::DeserializeOwned>(&self, payload: &[u8]) -> Result<T, DecodeError> {
///         serde_json::from_slice(payload).map_err(|e| DecodeError::new(self.name(), e))
///     }
///
///     fn encode<T: serde::Serialize + ?Sized>(&self, value: &T) -> Result<Vec<u8>, EncodeError> {
///         serde_json::to_vec_pretty(value).map_err(|e| EncodeError::new(self.name(), e))
///     }
/// }
///
/// let payload = PrettyJson.encode(&[1, 2]).unwrap();
/// assert_eq!(PrettyJson.decode::<Vec<u8>>(&payload).unwrap(), [1, 2]);
/// ```
pub trait Codec: Send + Sync + 'static {
    /// Its name, as errors and log lines give it: `JSON`, `MessagePack`, `CBOR`
    /// ("payload does not decode as MessagePack: …").
    fn name(&self) -> &'static str;

    /// The media type of what it encodes, which the app's AsyncAPI document gives a typed
    /// mount's messages (their `contentType`): `application/json`, `application/msgpack`,
    /// `application/cbor`.
    fn content_type(&self) -> &'static str;

    /// Decodes `payload`, the whole of it, as one value of `T`.
    ///
    /// # Errors
    /// [`DecodeError`], naming this codec ([`DecodeError::new`]), when `payload` is not one
    /// value of `T` in this encoding: malformed, of another shape, or with bytes left over.
    fn decode<T: DeserializeOwned>(&self, payload: &[u8]) -> Result<T, DecodeError>;

    /// Encodes `value` as one payload.
    ///
    /// # Errors
    /// [`EncodeError`], naming this codec ([`EncodeError::new`]), when `value` has no encoding
    /// here (JSON: a map whose keys are not strings; any codec: a `Serialize` impl that fails).
    fn encode<T: Serialize + ?Sized>(&self, value: &T) -> Result<Vec<u8>, EncodeError>;
}

/// Why a typed handler could not be given a delivery: its payload does not decode with the
/// mount's [`Codec`]. The delivery then goes straight to the at-limit path (rule 17; see
/// [`Typed`](crate::Typed)).
///
/// Its text is `payload does not decode as <codec>: <the codec's error>`; the codec's error is
/// also its [`source`](std::error::Error::source). One pointer wide, as the runtime passes it
/// back from every handler call.
#[derive(Debug)]
pub struct DecodeError(Box<Refused>);

/// What a [`DecodeError`] holds: boxed, so that the `Result` of every handler call stays one
/// pointer wide.
#[derive(Debug)]
struct Refused {
    codec: &'static str,
    source: Box<dyn Error + Send + Sync + 'static>,
}

impl DecodeError {
    /// The error of the codec named `codec` ([`Codec::name`]): `source` is its own error, or a
    /// text (`&str`, `String`).
    pub fn new(codec: &'static str, source: impl Into<Box<dyn Error + Send + Sync>>) -> Self {
        Self(Box::new(Refused {
            codec,
            source: source.into(),
        }))
    }

    /// The name of the codec that refused the payload ([`Codec::name`]).
    pub fn codec(&self) -> &'static str {
        self.0.codec
    }
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "payload does not decode as {}: {}",
            self.0.codec, self.0.source
        )
    }
}

impl Error for DecodeError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&*self.0.source)
    }
}

/// A serde_json error as the [`JsonCodec`]'s, so that `?` on `serde_json::from_slice` works in
/// a [`Handler`](crate::Handler) of your own.
impl From<serde_json::Error> for DecodeError {
    fn from(error: serde_json::Error) -> Self {
        Self::new(JsonCodec.name(), error)
    }
}

/// Why a value could not be encoded by a [`Codec`].
///
/// Its text is `does not encode as <codec>: <the codec's error>`; the codec's error is also its
/// [`source`](std::error::Error::source). [`ContextError::Encode`](crate::ContextError::Encode)
/// carries it, and `?` turns one into the other.
#[derive(Debug, thiserror::Error)]
#[error("does not encode as {codec}: {source}")]
pub struct EncodeError {
    codec: &'static str,
    source: Box<dyn Error + Send + Sync + 'static>,
}

impl EncodeError {
    /// The error of the codec named `codec` ([`Codec::name`]): `source` is its own error, or a
    /// text (`&str`, `String`).
    pub fn new(codec: &'static str, source: impl Into<Box<dyn Error + Send + Sync>>) -> Self {
        Self {
            codec,
            source: source.into(),
        }
    }

    /// The name of the codec that could not encode the value ([`Codec::name`]).
    pub fn codec(&self) -> &'static str {
        self.codec
    }
}

/// A serde_json error as the [`JsonCodec`]'s.
impl From<serde_json::Error> for EncodeError {
    fn from(error: serde_json::Error) -> Self {
        Self::new(JsonCodec.name(), error)
    }
}

/// JSON (RFC 8259) with serde_json: named `JSON`, content type `application/json`. What
/// [`App::mount_json`](crate::App::mount_json), the `*_json` publishes of
/// [`Context`](crate::Context) and [`Reply`](crate::Reply) use.
///
/// Decoding takes the whole payload as one value (whitespace around it allowed, anything else
/// after it refused).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JsonCodec;

impl Codec for JsonCodec {
    fn name(&self) -> &'static str {
        "JSON"
    }

    fn content_type(&self) -> &'static str {
        "application/json"
    }

    #[inline]
    fn decode<T: DeserializeOwned>(&self, payload: &[u8]) -> Result<T, DecodeError> {
        Ok(serde_json::from_slice(payload)?)
    }

    fn encode<T: Serialize + ?Sized>(&self, value: &T) -> Result<Vec<u8>, EncodeError> {
        Ok(serde_json::to_vec(value)?)
    }
}

/// How deeply nested a MessagePack value may be: 128, serde_json's own limit.
#[cfg(feature = "msgpack")]
const MAX_DEPTH: usize = 128;

/// `value`, decoded by codec `codec` from a payload that left `rest` unread: an error when
/// bytes are left over after the `what` (a payload is one value, whole).
#[cfg(any(feature = "msgpack", feature = "cbor"))]
fn whole<T>(codec: &'static str, value: T, rest: &[u8], what: &str) -> Result<T, DecodeError> {
    match rest.len() {
        0 => Ok(value),
        left => Err(DecodeError::new(
            codec,
            format!("{left} byte(s) left over after the {what}"),
        )),
    }
}

/// MessagePack (<https://msgpack.org>, its spec at
/// <https://github.com/msgpack/msgpack/blob/master/spec.md>) with rmp-serde: named
/// `MessagePack`, content type `application/msgpack`. Cargo feature `msgpack`.
///
/// - Encoding writes structs as maps keyed by field name (rmp-serde's `to_vec_named`), as
///   other languages' MessagePack libraries write their objects and records, so that what a
///   Go, Python or JavaScript service publishes decodes here and the other way round. (A
///   struct written as an array of its fields, rmp-serde's compact form, still decodes.)
/// - Enums are written as serde's externally tagged form: a unit variant as its name, a
///   variant with data as a one-entry map from its name.
/// - Decoding takes the whole payload as one value: bytes left over after it are refused.
#[cfg(feature = "msgpack")]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MessagePack;

#[cfg(feature = "msgpack")]
impl Codec for MessagePack {
    fn name(&self) -> &'static str {
        "MessagePack"
    }

    fn content_type(&self) -> &'static str {
        "application/msgpack"
    }

    fn decode<T: DeserializeOwned>(&self, payload: &[u8]) -> Result<T, DecodeError> {
        let mut deserializer = rmp_serde::Deserializer::new(std::io::Cursor::new(payload));
        // As deep as serde_json goes (128), not rmp-serde's 1,024: a payload nested that deep
        // overflows a thread's stack in a debug build before the limit is reached.
        deserializer.set_max_depth(MAX_DEPTH);
        let value =
            T::deserialize(&mut deserializer).map_err(|e| DecodeError::new(self.name(), e))?;
        let read = usize::try_from(deserializer.position()).unwrap_or(payload.len());
        whole(
            self.name(),
            value,
            payload.get(read..).unwrap_or_default(),
            "value",
        )
    }

    fn encode<T: Serialize + ?Sized>(&self, value: &T) -> Result<Vec<u8>, EncodeError> {
        rmp_serde::to_vec_named(value).map_err(|e| EncodeError::new(self.name(), e))
    }
}

/// CBOR (RFC 8949) with ciborium: named `CBOR`, content type `application/cbor`. Cargo
/// feature `cbor`.
///
/// - Structs are maps keyed by field name; enums serde's externally tagged form (a unit
///   variant as its name, a variant with data as a one-entry map from its name).
/// - Decoding takes the whole payload as one data item: bytes left over after it are refused.
#[cfg(feature = "cbor")]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cbor;

#[cfg(feature = "cbor")]
impl Codec for Cbor {
    fn name(&self) -> &'static str {
        "CBOR"
    }

    fn content_type(&self) -> &'static str {
        "application/cbor"
    }

    fn decode<T: DeserializeOwned>(&self, payload: &[u8]) -> Result<T, DecodeError> {
        let mut rest = payload;
        let value =
            ciborium::from_reader(&mut rest).map_err(|e| DecodeError::new(self.name(), e))?;
        whole(self.name(), value, rest, "data item")
    }

    fn encode<T: Serialize + ?Sized>(&self, value: &T) -> Result<Vec<u8>, EncodeError> {
        let mut payload = Vec::new();
        ciborium::into_writer(value, &mut payload).map_err(|e| EncodeError::new(self.name(), e))?;
        Ok(payload)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    use std::collections::BTreeMap;

    /// A MessagePack payload nested 100,000 arrays deep is refused as undecodable at depth
    /// 128, not followed down until the thread's stack overflows (a breaker found the abort
    /// in a debug build with rmp-serde's own limit of 1,024).
    #[cfg(feature = "msgpack")]
    #[test]
    fn a_message_pack_payload_nested_too_deep_is_refused_not_followed() {
        let mut payload = vec![0x91_u8; 100_000];
        payload.push(0x01);
        let handle = std::thread::Builder::new()
            .stack_size(2 * 1024 * 1024)
            .spawn(move || {
                MessagePack
                    .decode::<serde_json::Value>(&payload)
                    .map(|_| ())
            })
            .unwrap();
        let e = handle.join().expect("no stack overflow").unwrap_err();
        assert!(e.to_string().contains("MessagePack"), "{e}");
        let shallow = [&[0x91_u8; 100][..], &[0x01]].concat();
        assert!(MessagePack.decode::<serde_json::Value>(&shallow).is_ok());
    }

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Order {
        id: u64,
        sku: String,
        lines: Vec<Line>,
        note: Option<String>,
        state: State,
    }

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Line {
        quantity: u32,
        price: f64,
    }

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    enum State {
        New,
        Held { reason: String },
    }

    fn order() -> Order {
        Order {
            id: 7,
            sku: "apple".to_owned(),
            lines: vec![Line {
                quantity: 2,
                price: 1.25,
            }],
            note: None,
            state: State::Held {
                reason: "stock".to_owned(),
            },
        }
    }

    /// `value` encoded and decoded again by `codec` is `value`.
    fn round_trips<C: Codec>(codec: &C) {
        let payload = codec.encode(&order()).unwrap();
        assert_eq!(codec.decode::<Order>(&payload).unwrap(), order());
        let unit = codec.encode(&State::New).unwrap();
        assert_eq!(codec.decode::<State>(&unit).unwrap(), State::New);
    }

    /// A payload that is not a `T` in `codec`'s encoding is a [`DecodeError`] naming it.
    fn refuses<C: Codec>(codec: &C, payload: &[u8], name: &str) {
        let e = codec.decode::<Order>(payload).unwrap_err();
        assert_eq!(e.codec(), name);
        let text = e.to_string();
        assert!(
            text.starts_with(&format!("payload does not decode as {name}: ")),
            "{text}"
        );
        assert!(e.source().is_some(), "the codec's error is the source");
    }

    #[test]
    fn json_round_trips_and_names_itself_when_a_payload_does_not_decode() {
        round_trips(&JsonCodec);
        assert_eq!(JsonCodec.content_type(), "application/json");
        assert_eq!(
            JsonCodec
                .encode(&Line {
                    quantity: 1,
                    price: 2.5
                })
                .unwrap(),
            br#"{"quantity":1,"price":2.5}"#
        );
        refuses(&JsonCodec, b"not json", "JSON");
        refuses(&JsonCodec, br#"{"id":1}"#, "JSON");
        let trailing = [JsonCodec.encode(&order()).unwrap(), b"x".to_vec()].concat();
        refuses(&JsonCodec, &trailing, "JSON");
    }

    #[test]
    fn json_names_itself_when_a_value_does_not_encode() {
        let map: BTreeMap<Vec<u8>, u8> = [(vec![1], 1)].into();
        let e = JsonCodec.encode(&map).unwrap_err();
        assert_eq!(e.codec(), "JSON");
        assert!(
            e.to_string().starts_with("does not encode as JSON: "),
            "{e}"
        );
    }

    #[test]
    fn a_decode_error_is_one_pointer_wide() {
        assert_eq!(
            std::mem::size_of::<DecodeError>(),
            std::mem::size_of::<usize>()
        );
    }

    #[test]
    fn a_codecs_own_error_may_be_a_text() {
        let e = DecodeError::new("mine", "bad magic number");
        assert_eq!(
            e.to_string(),
            "payload does not decode as mine: bad magic number"
        );
        let e = EncodeError::new("mine", format!("{} too deep", 3));
        assert_eq!(e.to_string(), "does not encode as mine: 3 too deep");
    }

    #[cfg(feature = "msgpack")]
    #[test]
    fn msgpack_round_trips_and_names_itself_when_a_payload_does_not_decode() {
        round_trips(&MessagePack);
        assert_eq!(MessagePack.content_type(), "application/msgpack");
        refuses(&MessagePack, b"", "MessagePack");
        // 0xc1 is never used in MessagePack.
        refuses(&MessagePack, &[0xc1], "MessagePack");
        // A string, not a map of an order's fields.
        refuses(&MessagePack, &[0xa3, b'a', b'b', b'c'], "MessagePack");
        let trailing = [MessagePack.encode(&order()).unwrap(), vec![0xc0]].concat();
        refuses(&MessagePack, &trailing, "MessagePack");
        // JSON is not MessagePack.
        refuses(
            &MessagePack,
            &JsonCodec.encode(&order()).unwrap(),
            "MessagePack",
        );
    }

    #[cfg(feature = "msgpack")]
    #[test]
    fn msgpack_writes_structs_as_maps_of_field_names_and_reads_the_compact_form_too() {
        let payload = MessagePack
            .encode(&Line {
                quantity: 2,
                price: 0.5,
            })
            .unwrap();
        // fixmap of 2, "quantity" 2, "price" float64 0.5.
        let mut want = vec![0x82, 0xa8];
        want.extend_from_slice(b"quantity");
        want.extend_from_slice(&[0x02, 0xa5]);
        want.extend_from_slice(b"price");
        want.push(0xcb);
        want.extend_from_slice(&0.5f64.to_be_bytes());
        assert_eq!(payload, want);
        let compact = rmp_serde::to_vec(&order()).unwrap();
        assert_eq!(MessagePack.decode::<Order>(&compact).unwrap(), order());
        // Enums externally tagged: a unit variant as its name, one with data as a map from it.
        assert_eq!(MessagePack.encode(&State::New).unwrap(), b"\xa3New");
        let held = MessagePack
            .encode(&State::Held {
                reason: "x".to_owned(),
            })
            .unwrap();
        assert_eq!(held, b"\x81\xa4Held\x81\xa6reason\xa1x");
    }

    #[cfg(feature = "cbor")]
    #[test]
    fn cbor_round_trips_and_names_itself_when_a_payload_does_not_decode() {
        round_trips(&Cbor);
        assert_eq!(Cbor.content_type(), "application/cbor");
        assert_eq!(Cbor.name(), "CBOR");
        refuses(&Cbor, b"", "CBOR");
        // 0xff alone: a "break" outside any indefinite-length item.
        refuses(&Cbor, &[0xff], "CBOR");
        // The text "abc", not a map of an order's fields.
        refuses(&Cbor, &[0x63, b'a', b'b', b'c'], "CBOR");
        let trailing = [Cbor.encode(&order()).unwrap(), vec![0xf6]].concat();
        refuses(&Cbor, &trailing, "CBOR");
        refuses(&Cbor, &JsonCodec.encode(&order()).unwrap(), "CBOR");
    }

    #[cfg(feature = "cbor")]
    #[test]
    fn cbor_writes_structs_as_maps_of_field_names() {
        let payload = Cbor
            .encode(&Line {
                quantity: 2,
                price: 0.5,
            })
            .unwrap();
        // map of 2, "quantity" 2, "price" 0.5 (ciborium writes the shortest float that keeps
        // the value: half precision, 0xf9 0x3800).
        let mut want = vec![0xa2, 0x68];
        want.extend_from_slice(b"quantity");
        want.extend_from_slice(&[0x02, 0x65]);
        want.extend_from_slice(b"price");
        want.extend_from_slice(&[0xf9, 0x38, 0x00]);
        assert_eq!(payload, want);
        assert_eq!(Cbor.encode(&State::New).unwrap(), b"\x63New");
        let held = Cbor
            .encode(&State::Held {
                reason: "x".to_owned(),
            })
            .unwrap();
        assert_eq!(held, b"\xa1\x64Held\xa1\x66reason\x61x");
    }
}
