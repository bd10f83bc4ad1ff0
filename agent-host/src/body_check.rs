//! A bounded pre-scan of every A2A request body, before the SDK builds values from it.
//!
//! The SDK reads a body into `serde_json::Value`, converts it to protobuf values and
//! back, and the agent reads it again: each JSON value costs hundreds of bytes several
//! times over, so a 1 MiB body of tiny values costs hundreds of MiB. The scan walks the
//! body once with serde_json's own parser (so it reads exactly what the SDK will read)
//! without building anything, and refuses a body that nests too deep, holds too many
//! values, too many message parts or too long a string. It also applies the I-JSON rules
//! (RFC 7493) that signed JSON is read under everywhere else: no duplicate member name,
//! no integer beyond ±(2^53 − 1). A body that is not JSON is left to the SDK, which
//! answers it as a parse error after reading no more than the scan did.

use std::collections::HashSet;
use std::fmt;
use std::time::Duration;

use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use shared_types::money::MAX_SAFE_INTEGER;

use crate::protocol::{jsonrpc_error, rest_error};

/// What one request body may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyLimits {
    /// Nesting of arrays and objects, the envelope included.
    pub max_depth: usize,
    /// JSON values of every kind (containers and scalars), the envelope included.
    pub max_values: usize,
    /// Parts of the message (`message.parts`).
    pub max_parts: usize,
    /// Bytes of one string or member name, after unescaping.
    pub max_string_bytes: usize,
    /// How long the whole body may take to arrive (and, on every route, the longest
    /// silence while it does): a request holds one of the agent's turns while its body
    /// arrives, so a trickling body must not hold it for long.
    pub read_timeout: Duration,
}

impl Default for BodyLimits {
    /// A signed plan costs about 15 values a step, nested 8 deep in the envelope (the
    /// example's 6 steps: 92 values); 20,000 values is a plan of over a thousand steps,
    /// while the SDK's copies of the largest such body stay near 10 MiB (about 500 bytes
    /// a value, measured). serde_json itself stops at 128 levels; 64 is far beyond any
    /// plan, card or tool argument and half what would fail in the SDK. 1 MiB in 30 s
    /// is 35 KB/s.
    fn default() -> Self {
        Self {
            max_depth: 64,
            max_values: 20_000,
            max_parts: 64,
            max_string_bytes: 256 * 1024,
            read_timeout: Duration::from_secs(30),
        }
    }
}

/// Why a body was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A limit of `BodyLimits` was crossed at `pointer`.
    Limit {
        name: &'static str,
        max: usize,
        pointer: String,
    },
    /// The body is not I-JSON: a duplicate member name or an inexact integer.
    NotIJson(String),
}

impl Refusal {
    /// The A2A reason carried in `google.rpc.ErrorInfo`.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Limit { .. } => "REQUEST_LIMIT_EXCEEDED",
            Self::NotIJson(_) => "SCHEMA_INVALID",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Limit { name, max, pointer } => {
                let what = match *name {
                    "maxDepth" => "levels of nesting",
                    "maxValues" => "JSON values",
                    "maxParts" => "message parts",
                    _ => "bytes in one string",
                };
                write!(
                    f,
                    "the request body exceeds {name}: more than {max} {what} (at {pointer:?}); \
                     this agent reads at most {max}"
                )
            }
            Self::NotIJson(message) => f.write_str(message),
        }
    }
}

/// Scans `body` against `limits`. Text that is not JSON passes: the SDK answers it.
pub fn scan(body: &[u8], limits: &BodyLimits) -> Result<(), Refusal> {
    let mut scan = Scan {
        limits,
        values: 0,
        path: Vec::new(),
        refusal: None,
    };
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let walked = ValueSeed(&mut scan).deserialize(&mut deserializer);
    match scan.refusal {
        Some(refusal) => Err(refusal),
        None => {
            // Syntax errors, trailing text: the SDK's own parse error, as before.
            let _ = walked.and_then(|()| deserializer.end());
            Ok(())
        }
    }
}

/// Longest member name or segment shown in a refusal.
const SHOWN_CHARS: usize = 64;

enum Segment {
    Key(String),
    Index(usize),
}

struct Scan<'a> {
    limits: &'a BodyLimits,
    values: usize,
    path: Vec<Segment>,
    refusal: Option<Refusal>,
}

impl Scan<'_> {
    /// The current position as a JSON pointer (RFC 6901), long names shortened.
    fn pointer(&self) -> String {
        let mut out = String::new();
        for segment in &self.path {
            out.push('/');
            match segment {
                Segment::Key(key) => {
                    let shown: String = key.chars().take(SHOWN_CHARS).collect();
                    out.push_str(&shown.replace('~', "~0").replace('/', "~1"));
                    if shown.len() < key.len() {
                        out.push('…');
                    }
                }
                Segment::Index(i) => out.push_str(&i.to_string()),
            }
        }
        out
    }

    fn refuse<E: de::Error>(&mut self, refusal: Refusal) -> E {
        self.refusal = Some(refusal);
        E::custom("refused by the body scan")
    }

    fn limit<E: de::Error>(&mut self, name: &'static str, max: usize) -> E {
        let pointer = self.pointer();
        self.refuse(Refusal::Limit { name, max, pointer })
    }

    fn count<E: de::Error>(&mut self) -> Result<(), E> {
        self.values += 1;
        if self.values > self.limits.max_values {
            return Err(self.limit("maxValues", self.limits.max_values));
        }
        Ok(())
    }

    fn string<E: de::Error>(&mut self, len: usize) -> Result<(), E> {
        if len > self.limits.max_string_bytes {
            return Err(self.limit("maxStringBytes", self.limits.max_string_bytes));
        }
        Ok(())
    }

    fn enter<E: de::Error>(&mut self) -> Result<(), E> {
        self.count()?;
        if self.path.len() >= self.limits.max_depth {
            return Err(self.limit("maxDepth", self.limits.max_depth));
        }
        Ok(())
    }

    fn integer<E: de::Error>(&mut self, exact: bool, shown: &dyn fmt::Display) -> Result<(), E> {
        self.count()?;
        if exact {
            return Ok(());
        }
        let message = format!(
            "integer {shown} at {:?} is outside ±(2^53-1); I-JSON cannot carry it exactly \
             (write it as a string)",
            self.pointer()
        );
        Err(self.refuse(Refusal::NotIJson(message)))
    }

    /// Whether the array being entered is the message's parts, in either binding.
    fn at_parts(&self) -> bool {
        let keys: Vec<&str> = self
            .path
            .iter()
            .map(|s| match s {
                Segment::Key(k) => k.as_str(),
                Segment::Index(_) => "",
            })
            .collect();
        matches!(
            keys.as_slice(),
            ["params", "message", "parts"] | ["message", "parts"]
        )
    }
}

struct ValueSeed<'s, 'a>(&'s mut Scan<'a>);

impl<'de> DeserializeSeed<'de> for ValueSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.0.count()
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.0.integer(v >= -(MAX_SAFE_INTEGER as i64), &v)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.0.integer(v <= MAX_SAFE_INTEGER, &v)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.0.count()
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.0.count()?;
        self.0.string(v.len())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.0.count()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<(), A::Error> {
        let scan = self.0;
        scan.enter()?;
        let parts = scan.at_parts();
        let mut index = 0;
        loop {
            if parts && index == scan.limits.max_parts {
                // One more part than allowed: refuse at the first one beyond.
                scan.path.push(Segment::Index(index));
                if items.next_element::<de::IgnoredAny>()?.is_some() {
                    return Err(scan.limit("maxParts", scan.limits.max_parts));
                }
                scan.path.pop();
                return Ok(());
            }
            scan.path.push(Segment::Index(index));
            let more = items.next_element_seed(ValueSeed(&mut *scan))?.is_some();
            scan.path.pop();
            if !more {
                return Ok(());
            }
            index += 1;
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut members: A) -> Result<(), A::Error> {
        let scan = self.0;
        scan.enter()?;
        let mut names = HashSet::new();
        while let Some(name) = members.next_key::<String>()? {
            scan.string(name.len())?;
            if names.contains(&name) {
                let shown: String = name.chars().take(SHOWN_CHARS).collect();
                let message = format!(
                    "duplicate member name {shown:?} in the object at {:?}; I-JSON (RFC 7493) \
                     requires unique names, or it is open which value was meant",
                    scan.pointer()
                );
                return Err(scan.refuse(Refusal::NotIJson(message)));
            }
            scan.path.push(Segment::Key(name.clone()));
            names.insert(name);
            members.next_value_seed(ValueSeed(&mut *scan))?;
            scan.path.pop();
        }
        Ok(())
    }
}

/// The JSON-RPC `id` of a body, when it can be read as one (string, number or null).
pub fn request_id(body: &[u8]) -> Value {
    #[derive(Deserialize)]
    struct Envelope {
        #[serde(default, deserialize_with = "scalar")]
        id: Value,
    }
    fn scalar<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Value, D::Error> {
        struct Scalar;
        impl Visitor<'_> for Scalar {
            type Value = Value;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON-RPC id")
            }
            fn visit_str<E>(self, v: &str) -> Result<Value, E> {
                Ok(Value::from(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
                Ok(Value::from(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
                Ok(Value::from(v))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
                Ok(Value::from(v))
            }
            fn visit_unit<E>(self) -> Result<Value, E> {
                Ok(Value::Null)
            }
        }
        deserializer.deserialize_any(Scalar)
    }
    serde_json::from_slice::<Envelope>(body)
        .map(|envelope| envelope.id)
        .unwrap_or(Value::Null)
}

/// The middleware: reads the body (bounded by the body limit outside it), scans it, and
/// refuses it in the binding's own error shape, or passes it on unchanged.
pub async fn check_body(
    State(limits): State<BodyLimits>,
    request: Request,
    next: Next,
) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let jsonrpc = request.uri().path() == "/";
    let (parts, body) = request.into_parts();
    let bytes = match tokio::time::timeout(limits.read_timeout, to_bytes(body, usize::MAX)).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(error)) => return unread_body(&error),
        Err(_elapsed) => return body_timeout(),
    };
    if let Err(refusal) = scan(&bytes, &limits) {
        tracing::info!(
            reason = refusal.reason(),
            "request body refused by the scan"
        );
        let message = refusal.to_string();
        if jsonrpc {
            return jsonrpc_error(request_id(&bytes), -32602, refusal.reason(), &message);
        }
        let mut response = rest_error(
            StatusCode::BAD_REQUEST,
            "INVALID_ARGUMENT",
            refusal.reason(),
            &message,
        );
        // As `protocol::rest_responses` answers every other HTTP+JSON error.
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        return response;
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

fn body_timeout() -> Response {
    (
        StatusCode::REQUEST_TIMEOUT,
        "the request body did not arrive in time",
    )
        .into_response()
}

/// A body that could not be read: over the body limit (413, as the limit layer answers
/// when `Content-Length` says so up front), silent for too long, or cut off.
fn unread_body(error: &axum::Error) -> Response {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(cause) = source {
        if cause.is::<http_body_util::LengthLimitError>() {
            return (StatusCode::PAYLOAD_TOO_LARGE, "length limit exceeded").into_response();
        }
        if cause.is::<tower_http::timeout::TimeoutError>() {
            return body_timeout();
        }
        source = cause.source();
    }
    (
        StatusCode::BAD_REQUEST,
        "the request body could not be read",
    )
        .into_response()
}

#[cfg(test)]
mod tests;
