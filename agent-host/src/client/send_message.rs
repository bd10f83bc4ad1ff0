//! `SendMessage` over JSON-RPC with the SDK's own types serialized directly. The SDK's
//! JSON-RPC transport turns every request into its protobuf types, encodes and decodes
//! them, builds a `serde_json::Value` and only then writes bytes (and the reverse for the
//! answer); in the executor's benchmark that was about a third of a tool call's CPU. The
//! SDK's types already serialize to the same ProtoJSON (held equal by this module's
//! tests), so the call that every saga step makes goes straight from them to bytes. Every
//! other method still goes through the SDK's transport.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use http::{Method, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::sdk::errordetails::{BAD_REQUEST_TYPE, ERROR_INFO_TYPE, PROTOCOL_DOMAIN};
use crate::sdk::{
    A2AError, JsonRpcError, Message, SendMessageRequest, SendMessageResponse, Task, TypedDetail,
    error_code, methods, reason_to_error_code,
};

/// Request ids only need to be unique per request; a counter is enough and costs nothing.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

#[derive(Serialize)]
struct Request<'a, P> {
    jsonrpc: &'static str,
    id: u64,
    method: &'static str,
    params: &'a P,
}

/// A JSON-RPC answer whose result is read as `R`: a `Reply`, or a stream's event.
#[derive(Deserialize)]
struct Response<R> {
    #[serde(default = "Option::default")]
    result: Option<R>,
    #[serde(default)]
    error: Option<JsonRpcError>,
}

/// `SendMessageResponse` as ProtoJSON carries it: one member, `task` or `message`.
#[derive(Deserialize)]
struct Reply {
    #[serde(default)]
    task: Option<Task>,
    #[serde(default)]
    message: Option<Message>,
}

/// Answers above this size are refused rather than read into memory.
const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// The HTTP client for `SendMessage`: hyper's pooled HTTP/1.1 client, used directly. The
/// layers reqwest adds (redirects, retries, turning each answer's URI back into a `Url`)
/// cost an eighth of the executor's CPU per step in its benchmark and give a tool call
/// nothing: a tool's JSON-RPC endpoint answers where it is.
#[derive(Clone)]
pub(super) struct Http {
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Http {
    pub(super) fn new(connect_timeout: Duration) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(connect_timeout));
        // As reqwest does: a small request must not wait for Nagle's algorithm.
        connector.set_nodelay(true);
        Self {
            client: Client::builder(TokioExecutor::new()).build(connector),
        }
    }

    /// Sends one `SendMessage` with these headers and reads its answer. Nothing is sent
    /// when the request cannot be encoded (`Error::Config`); a failure on the way or an
    /// answer that is not JSON-RPC is `Error::Transport`; a JSON-RPC error is
    /// `Error::Protocol`.
    pub(super) async fn send(
        &self,
        uri: &Uri,
        headers: HeaderMap,
        request: &SendMessageRequest,
    ) -> Result<SendMessageResponse> {
        let body = encode(request)?;
        let response = self
            .client
            .request(json_post(uri, headers, body))
            .await
            .map_err(|e| Error::Transport(format!("SendMessage to {uri} failed: {e}")))?;
        let status = response.status();
        let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map_err(|e| Error::Transport(format!("reading the answer of {uri} failed: {e}")))?
            .to_bytes();
        tracing::debug!(%uri, %status, bytes = body.len(), "SendMessage answered");
        decode(status, &body)
    }
}

/// A POST of the JSON `body` to `uri` with these headers.
fn json_post(uri: &Uri, mut headers: HeaderMap, body: Vec<u8>) -> http::Request<Full<Bytes>> {
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let mut request = http::Request::new(Full::new(Bytes::from(body)));
    *request.method_mut() = Method::POST;
    *request.uri_mut() = uri.clone();
    *request.headers_mut() = headers;
    request
}

/// The JSON-RPC request body of one `SendMessage`.
fn encode(request: &SendMessageRequest) -> Result<Vec<u8>> {
    encode_call(methods::SEND_MESSAGE, request)
}

/// The JSON-RPC request body of one call of `method`.
fn encode_call<P: Serialize>(method: &'static str, params: &P) -> Result<Vec<u8>> {
    let body = Request {
        jsonrpc: "2.0",
        id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        method,
        params,
    };
    serde_json::to_vec(&body).map_err(|e| Error::Config(format!("cannot encode {method}: {e}")))
}

/// The answer to one `SendMessage`, from the HTTP status and body.
fn decode(status: StatusCode, body: &[u8]) -> Result<SendMessageResponse> {
    let response: Response<Reply> = match serde_json::from_slice(body) {
        Ok(response) => response,
        Err(e) => {
            // Not JSON-RPC at all: nothing says whether the tool acted, so this is a
            // transport-level answer, with the status the SDK's client would have hidden.
            return Err(Error::Transport(format!(
                "HTTP {status} with no JSON-RPC answer ({e})"
            )));
        }
    };
    if let Some(error) = response.error {
        return Err(Error::Protocol(protocol_error(error)));
    }
    match response.result {
        Some(Reply {
            task: Some(task), ..
        }) => Ok(SendMessageResponse::Task(task)),
        Some(Reply {
            message: Some(message),
            ..
        }) => Ok(SendMessageResponse::Message(message)),
        Some(_) => Err(Error::Protocol(A2AError::internal(
            "SendMessage result has neither 'task' nor 'message'",
        ))),
        None => Err(Error::Protocol(A2AError::internal(
            "JSON-RPC response missing result",
        ))),
    }
}

/// A JSON-RPC error as the SDK's client reads it: the code, refined by the typed details
/// the SDK's server attaches (an A2A reason names the precise code; field violations make
/// an internal error an invalid-params one and are added to the message).
fn protocol_error(error: JsonRpcError) -> A2AError {
    let details: Vec<TypedDetail> = match error.data {
        Some(Value::Array(items)) => items
            .into_iter()
            .filter_map(|v| serde_json::from_value(v).ok())
            .collect(),
        _ => Vec::new(),
    };
    let mut code = error.code;
    let mut message = error.message;
    for detail in &details {
        if detail.type_url == BAD_REQUEST_TYPE {
            if let Some(Value::Array(violations)) = detail.value.get("fieldViolations") {
                let described: Vec<String> = violations
                    .iter()
                    .filter_map(|v| {
                        let field = v.get("field")?.as_str()?;
                        let description = v.get("description")?.as_str()?;
                        Some(if field.is_empty() {
                            description.to_owned()
                        } else {
                            format!("{field}: {description}")
                        })
                    })
                    .collect();
                if !described.is_empty() {
                    message = format!("{message}: {}", described.join("; "));
                }
            }
            if code == error_code::INTERNAL_ERROR {
                code = error_code::INVALID_PARAMS;
            }
        } else if detail.type_url == ERROR_INFO_TYPE
            && detail.value.get("domain").and_then(Value::as_str) == Some(PROTOCOL_DOMAIN)
            && let Some(precise) = detail
                .value
                .get("reason")
                .and_then(Value::as_str)
                .and_then(reason_to_error_code)
        {
            code = precise;
        }
    }
    A2AError {
        code,
        message,
        details: (!details.is_empty()).then_some(details),
    }
}

mod events;

#[cfg(test)]
mod tests;
