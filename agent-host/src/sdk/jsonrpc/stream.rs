//! A stream's events as server-sent events, framed as the SDK's `sse_jsonrpc_stream`
//! frames them (an `id` counting from 1 in each response, the JSON-RPC envelope as
//! `data`, a comment every 15 s on an idle stream so that proxies keep the connection),
//! each event written with serde (`envelope`) instead of through protobuf and a `Value`.

use std::convert::Infallible;
use std::time::Duration;

use a2a::jsonrpc::JsonRpcId;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use futures::stream::BoxStream;

use super::envelope;
use crate::sdk::StreamResponse;

/// The SDK's interval between comments on an idle stream.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

pub(super) fn write(
    id: JsonRpcId,
    events: BoxStream<'static, Result<StreamResponse, a2a::A2AError>>,
) -> Response {
    let mut sent = 0u64;
    let frames = events.map(move |event| {
        sent += 1;
        Ok::<_, Infallible>(Event::default().id(sent.to_string()).data(data(&id, event)))
    });
    Sse::new(frames)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response()
}

/// One event's `data`: its JSON-RPC envelope.
pub(super) fn data(id: &JsonRpcId, event: Result<StreamResponse, a2a::A2AError>) -> String {
    envelope(id, &event.map(as_the_sdk_writes))
}

/// `event` without what the SDK's writing leaves out: a flag that is false (protobuf
/// cannot tell it from a flag not set).
fn as_the_sdk_writes(mut event: StreamResponse) -> StreamResponse {
    if let StreamResponse::ArtifactUpdate(update) = &mut event {
        update.append.take_if(|append| !*append);
        update.last_chunk.take_if(|last| !*last);
    }
    event
}
