//! `SendMessage` and `SendStreamingMessage` over JSON-RPC, the calls every plan and every
//! saga step makes, read and answered from the SDK's types with serde (and the events of
//! `SubscribeToTask`, which a stream that was cut follows again, written so). A request in the
//! form every official client sends is read with serde (`read`); any other the SDK reads
//! as it always does (`protojson_conv`, the same checks and refusals). The answer, and
//! each event of a stream, skips the SDK's trip through protobuf and a
//! `serde_json::Value` tree: on the whole path that trip measured as the largest single
//! cost of serving a blocking send (`protojson_conv::to_value`, about 9% of the
//! executor's CPU) and of a stream (16% of the executor's samples at 64 streaming
//! clients, with the protobuf decoding it makes). Our types' serde form is the wire's (the
//! tests hold the two writings equal, numbers aside: the SDK writes every number in a
//! data part as a double, serde as it is held). A stream is framed as the SDK frames it
//! (`stream`). Any request this path does not take (another method, a version or an
//! envelope the SDK refuses, parameters it cannot read) goes to the SDK's handler as it
//! came, which answers it as before.

use std::sync::Arc;

use a2a::jsonrpc::{JsonRpcId, JsonRpcRequest, JsonRpcResponse};
use a2a_pb::protojson_conv;
use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::stream::BoxStream;
use serde::Serialize;
use tower::ServiceExt;

use super::{
    RequestHandler, SendMessageRequest, ServiceParams, StreamResponse, SubscribeToTaskRequest,
    methods,
};

mod read;
mod stream;

/// The SDK's router, with `SendMessage`'s answer written here.
pub(super) fn router<H: RequestHandler>(handler: Arc<H>) -> Router {
    let sdk = a2a_server::jsonrpc::jsonrpc_router(handler.clone());
    Router::new().route(
        "/",
        axum::routing::post(move |request: Request| {
            let (handler, sdk) = (handler.clone(), sdk.clone());
            async move { serve(handler, sdk, request).await }
        }),
    )
}

async fn serve<H: RequestHandler>(handler: Arc<H>, sdk: Router, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    // The body's size was bounded before it got here (the host's limits).
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => bytes,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    if let Some(answer) = sent_message(handler.as_ref(), &parts.headers, &bytes).await {
        return answer;
    }
    let request = Request::from_parts(parts, Body::from(bytes));
    match sdk.oneshot(request).await {
        Ok(response) => response,
        Err(infallible) => match infallible {},
    }
}

/// The answer to a `SendMessage`, `SendStreamingMessage` or `SubscribeToTask` the SDK
/// would take, or `None` for anything else.
async fn sent_message<H: RequestHandler>(
    handler: &H,
    headers: &HeaderMap,
    body: &[u8],
) -> Option<Response> {
    let call: JsonRpcRequest = serde_json::from_slice(body).ok()?;
    if call.jsonrpc != "2.0" || !supported(headers) {
        return None;
    }
    let params = call.params.unwrap_or(serde_json::Value::Null);
    let service = service_params(headers);
    match call.method.as_str() {
        methods::SEND_MESSAGE => {
            let request = message_request(params)?;
            Some(write(
                &call.id,
                handler.send_message(&service, request).await,
            ))
        }
        methods::SEND_STREAMING_MESSAGE => {
            let request = message_request(params)?;
            let events = handler.send_streaming_message(&service, request).await;
            Some(streamed(call.id, events))
        }
        // The request (an id) is read by the SDK's reading; only the events' writing is ours.
        methods::SUBSCRIBE_TO_TASK => {
            let request: SubscribeToTaskRequest = protojson_conv::from_value(params).ok()?;
            let events = handler.subscribe_to_task(&service, request).await;
            Some(streamed(call.id, events))
        }
        _ => None,
    }
}

/// A message's parameters: with serde in the form official clients send, else as the SDK
/// reads them (`None` when it cannot: the SDK then refuses them itself).
fn message_request(params: serde_json::Value) -> Option<SendMessageRequest> {
    match read::send_message(&params) {
        Some(request) => Some(request),
        None => protojson_conv::from_value(params).ok(),
    }
}

/// A stream's events, or, refused before any event, a JSON answer (as the SDK's).
fn streamed(
    id: JsonRpcId,
    events: Result<BoxStream<'static, Result<StreamResponse, a2a::A2AError>>, a2a::A2AError>,
) -> Response {
    match events {
        Ok(events) => stream::write(id, events),
        Err(error) => write::<StreamResponse>(&id, Err(error)),
    }
}

/// Whether the SDK accepts the request's `A2A-Version` (major version 1; a request
/// without one asks for 0.3, which it refuses).
fn supported(headers: &HeaderMap) -> bool {
    let requested = headers
        .get("a2a-version")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("0.3");
    requested.trim().split('.').next() == Some("1")
}

/// The request's headers as the SDK hands them to a handler.
fn service_params(headers: &HeaderMap) -> ServiceParams {
    let mut params = ServiceParams::new();
    for (name, value) in headers {
        if let Ok(value) = value.to_str() {
            params
                .entry(name.as_str().to_owned())
                .or_default()
                .push(value.to_owned());
        }
    }
    params
}

/// A successful answer's envelope, in the SDK's member order.
#[derive(Serialize)]
struct Answered<'a, T> {
    jsonrpc: &'static str,
    id: &'a JsonRpcId,
    result: &'a T,
}

/// The JSON-RPC envelope of an answer (or of one event of a stream), as the SDK's handler
/// writes it.
fn envelope<T: Serialize>(id: &JsonRpcId, answer: &Result<T, a2a::A2AError>) -> String {
    let refusal = |error: &a2a::A2AError| {
        serde_json::to_string(&JsonRpcResponse::error(
            id.clone(),
            error.to_jsonrpc_error(),
        ))
    };
    let written = match answer {
        Ok(result) => serde_json::to_string(&Answered {
            jsonrpc: "2.0",
            id,
            result,
        }),
        Err(error) => refusal(error),
    };
    written
        .or_else(|e| {
            refusal(&a2a::A2AError::internal(format!(
                "cannot write the answer: {e}"
            )))
        })
        // An error's envelope is a number and strings: serde writes it.
        .unwrap_or_default()
}

/// The JSON-RPC answer, as the SDK's handler writes it: HTTP 200 either way.
fn write<T: Serialize>(id: &JsonRpcId, answer: Result<T, a2a::A2AError>) -> Response {
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        envelope(id, &answer),
    )
        .into_response()
}

#[cfg(test)]
mod tests;
