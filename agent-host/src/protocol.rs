//! Protocol gaps the SDK's bindings leave open, closed as axum middleware: the
//! `A2A-Version` check on both bindings (with a message that says what to send), and
//! the HTTP statuses of the HTTP+JSON binding's errors.

use axum::body::{Body, Bytes, to_bytes};
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// The protocol version every Sagaplane agent serves.
pub const PROTOCOL_VERSION: &str = "1.0";

/// Bodies larger than this are not read back by the middleware (the limit layer refuses
/// them earlier anyway).
const INSPECT_LIMIT: usize = 16 * 1024 * 1024;

/// Whether the `A2A-Version` header asks for 1.x. A missing header means 0.3 (A2A §3.6).
fn supported(version: Option<&HeaderValue>) -> Result<(), String> {
    let Some(value) = version else {
        return Err(
            "the request has no A2A-Version header, which means protocol 0.3; this agent serves \
                    A2A 1.0 only: send the header A2A-Version: 1.0"
                .into(),
        );
    };
    let text = value.to_str().unwrap_or("").trim();
    let major = text.split('.').next().unwrap_or("");
    if major == "1" {
        Ok(())
    } else {
        Err(format!(
            "A2A-Version {text:?} is not supported; this agent serves A2A 1.0: send A2A-Version: 1.0"
        ))
    }
}

/// The JSON-RPC binding lives at `POST /`; everything else under the A2A routes is REST.
pub(crate) fn is_jsonrpc(request: &Request) -> bool {
    request.method() == Method::POST && request.uri().path() == "/"
}

/// Refuses unsupported protocol versions on both bindings before they reach the SDK,
/// and JSON-RPC requests that are not JSON (ContentTypeNotSupported, -32005).
pub async fn require_version(request: Request, next: Next) -> Response {
    if is_jsonrpc(&request)
        && let Some(content_type) = request.headers().get(header::CONTENT_TYPE)
        && !is_json(content_type)
    {
        let shown = String::from_utf8_lossy(content_type.as_bytes()).into_owned();
        return jsonrpc_error(
            Value::Null,
            -32005,
            "CONTENT_TYPE_NOT_SUPPORTED",
            &format!("Content-Type {shown:?} is not supported; send application/json"),
        );
    }
    let Err(message) = supported(request.headers().get("a2a-version")) else {
        return next.run(request).await;
    };
    if is_jsonrpc(&request) {
        // JSON-RPC errors echo the request id, which is in the body.
        let id = jsonrpc_request_id(request.into_body()).await;
        jsonrpc_error(id, -32009, "VERSION_NOT_SUPPORTED", &message)
    } else {
        rest_error(
            StatusCode::BAD_REQUEST,
            "FAILED_PRECONDITION",
            "VERSION_NOT_SUPPORTED",
            &message,
        )
    }
}

fn is_json(content_type: &HeaderValue) -> bool {
    let essence = content_type
        .to_str()
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// The `id` of a JSON-RPC request, for an error answered before the SDK reads the body.
/// The body is read up to `ID_READ_LIMIT` bytes and for at most `ID_READ_TIMEOUT`, and
/// only the `id` member is built (the rest is skipped without allocating). A body that
/// cannot be read or parsed, or an id that is not a string or a number, gives `null`,
/// as JSON-RPC 2.0 asks when the id cannot be determined.
pub(crate) async fn jsonrpc_request_id(body: Body) -> Value {
    request_id_within(body, ID_READ_LIMIT, ID_READ_TIMEOUT).await
}

/// `jsonrpc_request_id` for a caller who has not authenticated: such a request may make
/// the agent hold no more than `UNAUTHENTICATED_ID_READ_LIMIT` bytes, for no longer than
/// `UNAUTHENTICATED_ID_READ_TIMEOUT`; a longer or slower body answers with a null id.
pub(crate) async fn unauthenticated_request_id(body: Body) -> Value {
    request_id_within(
        body,
        UNAUTHENTICATED_ID_READ_LIMIT,
        UNAUTHENTICATED_ID_READ_TIMEOUT,
    )
    .await
}

async fn request_id_within(body: Body, limit: usize, timeout: std::time::Duration) -> Value {
    let read = tokio::time::timeout(timeout, to_bytes(body, limit)).await;
    let Ok(Ok(bytes)) = read else {
        return Value::Null;
    };
    serde_json::from_slice::<Envelope>(&bytes)
        .map(|envelope| envelope.id.0)
        .unwrap_or(Value::Null)
}

/// The most read of a body to find its id: the hosting layer's body limit (1 MiB).
const ID_READ_LIMIT: usize = 1024 * 1024;
/// The longest wait for that body: a client that stops sending mid-body gets its error
/// (with a null id) instead of holding the request open.
const ID_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The most of an unauthenticated body read to find its id (a request's id comes with its
/// envelope, and a JSON-RPC 401 with a null id is still a well-formed answer).
const UNAUTHENTICATED_ID_READ_LIMIT: usize = 64 * 1024;
/// The longest wait for that body.
const UNAUTHENTICATED_ID_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// A JSON-RPC request as far as its id.
#[derive(serde::Deserialize)]
struct Envelope {
    #[serde(default)]
    id: RequestId,
}

/// A JSON-RPC id: a string, a number or null; anything else is skipped and reads as null.
#[derive(Default)]
struct RequestId(Value);

impl<'de> serde::Deserialize<'de> for RequestId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(RequestIdVisitor)
    }
}

struct RequestIdVisitor;

impl<'de> serde::de::Visitor<'de> for RequestIdVisitor {
    type Value = RequestId;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON-RPC id")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<RequestId, E> {
        Ok(RequestId(Value::String(v.to_owned())))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<RequestId, E> {
        Ok(RequestId(json!(v)))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<RequestId, E> {
        Ok(RequestId(json!(v)))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<RequestId, E> {
        Ok(RequestId(
            serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number),
        ))
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<RequestId, E> {
        Ok(RequestId::default())
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<RequestId, E> {
        Ok(RequestId::default())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<RequestId, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(RequestId::default())
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<RequestId, A::Error> {
        while map
            .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
            .is_some()
        {}
        Ok(RequestId::default())
    }
}

/// `google.rpc.ErrorInfo` for `reason` without a timestamp, for answers that must not
/// differ from one request to the next.
pub(crate) fn unstamped_error_info(reason: &str) -> Value {
    json!({
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": reason,
        "domain": "a2a-protocol.org",
    })
}

fn error_info(reason: &str) -> Value {
    json!({
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": reason,
        "domain": "a2a-protocol.org",
        "metadata": {"timestamp": chrono::Utc::now().to_rfc3339()},
    })
}

/// A JSON-RPC error response (HTTP 200) with `google.rpc.ErrorInfo` in `error.data`.
pub fn jsonrpc_error(id: Value, code: i32, reason: &str, message: &str) -> Response {
    let body = json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": code, "message": message, "data": [error_info(reason)]},
    });
    (StatusCode::OK, axum::Json(body)).into_response()
}

/// An HTTP+JSON error response in the AIP-193 shape the SDK uses.
pub fn rest_error(status: StatusCode, grpc_status: &str, reason: &str, message: &str) -> Response {
    let body = json!({
        "error": {
            "code": status.as_u16(),
            "status": grpc_status,
            "message": message,
            "details": [error_info(reason)],
        }
    });
    let mut response = (status, axum::Json(body)).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    response
}

/// The HTTP status the A2A spec's error mapping gives each reason, where the SDK differs.
fn status_for_reason(reason: &str) -> Option<StatusCode> {
    Some(match reason {
        "TASK_NOT_CANCELABLE" => StatusCode::CONFLICT,
        "CONTENT_TYPE_NOT_SUPPORTED" => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "INVALID_AGENT_RESPONSE" => StatusCode::BAD_GATEWAY,
        "METHOD_NOT_FOUND" => StatusCode::NOT_FOUND,
        _ => return None,
    })
}

/// Brings HTTP+JSON responses in line with the spec: `Content-Type: application/json`
/// (the SDK sends `application/a2a+json` and `application/problem+json`), and error
/// statuses per the spec's mapping.
pub async fn rest_responses(request: Request, next: Next) -> Response {
    if is_jsonrpc(&request) {
        return next.run(request).await;
    }
    let mut response = next.run(request).await;
    let content_type = response.headers().get(header::CONTENT_TYPE).cloned();
    let Some(content_type) = content_type else {
        return response;
    };
    let is_problem = content_type
        .as_bytes()
        .starts_with(b"application/problem+json");
    if content_type.as_bytes().starts_with(b"application/a2a+json") || is_problem {
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    if !is_problem {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let bytes = to_bytes(body, INSPECT_LIMIT)
        .await
        .unwrap_or_else(|_| Bytes::new());
    let Ok(mut value) = serde_json::from_slice::<Value>(&bytes) else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    let reason = value
        .pointer("/error/details")
        .and_then(Value::as_array)
        .and_then(|d| {
            d.iter()
                .find_map(|d| d.get("reason").and_then(Value::as_str))
        })
        .map(str::to_owned);
    if let Some(status) = reason.as_deref().and_then(status_for_reason) {
        parts.status = status;
        if let Some(code) = value.pointer_mut("/error/code") {
            *code = json!(status.as_u16());
        }
        parts.headers.remove(header::CONTENT_LENGTH);
        return Response::from_parts(parts, Body::from(value.to_string()));
    }
    Response::from_parts(parts, Body::from(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_body_that_stops_arriving_gives_a_null_id() {
        let stalled = futures::stream::pending::<Result<Bytes, std::io::Error>>();
        let id = jsonrpc_request_id(Body::from_stream(stalled)).await;
        assert_eq!(id, Value::Null);
    }

    #[tokio::test]
    async fn only_string_and_number_ids_are_echoed() {
        let id = |body: &'static str| jsonrpc_request_id(Body::from(body));
        assert_eq!(id(r#"{"id": "a", "method": "x"}"#).await, json!("a"));
        assert_eq!(id(r#"{"method": "x", "id": 1.5}"#).await, json!(1.5));
        assert_eq!(id(r#"{"id": true}"#).await, Value::Null);
        assert_eq!(id(r#"{"id": [1]}"#).await, Value::Null);
        assert_eq!(
            id(r#"{"id": 1, "id": 2}"#).await,
            Value::Null,
            "duplicate id"
        );
        assert_eq!(id(r#"{"method": "x"}"#).await, Value::Null);
    }
}
