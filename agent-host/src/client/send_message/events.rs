//! `SendStreamingMessage` and `SubscribeToTask` over JSON-RPC, each event read with serde
//! into the SDK's types. The SDK's transport reads every event into a `serde_json::Value`
//! and then through protobuf (`protojson_conv::from_value`): half of a streaming client's
//! CPU in the executor's whole-path benchmark. What the stream yields is what the SDK's
//! transport yields for the same bytes: events split at a blank line (`\n\n`, `\r\r` or
//! `\r\n\r\n`), the `data:` lines of each joined, comments and empty events skipped, a
//! JSON-RPC error as an `Err` item, an unterminated last event read, and a stream cut in
//! the middle of one reported rather than ended quietly. An event serde cannot read is
//! read as the SDK reads it. Unlike the SDK's, one event may not grow past
//! `MAX_ANSWER_BYTES`: a peer cannot make the reader buffer without end.

use std::collections::VecDeque;

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::{self, BoxStream};
use http::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue};
use http::{StatusCode, Uri};
use http_body_util::{BodyExt, Limited};
use serde::Serialize;

use super::{Http, MAX_ANSWER_BYTES, Response, encode_call, json_post, protocol_error};
use crate::error::{Error, Result};
use crate::sdk::{A2AError, JsonRpcResponse, StreamResponse, protojson_conv};

/// A stream's events, as the SDK's transport gives them.
pub(in crate::client) type Events = BoxStream<'static, Result<StreamResponse, A2AError>>;

impl Http {
    /// Calls the streaming `method` with `params` and these headers. Nothing is sent when
    /// the request cannot be encoded (`Error::Config`); a failure on the way, or an answer
    /// that is neither a stream nor JSON-RPC, is `Error::Transport`; a JSON-RPC error
    /// answered instead of a stream is `Error::Protocol`.
    pub(in crate::client) async fn stream<P: Serialize>(
        &self,
        uri: &Uri,
        mut headers: HeaderMap,
        method: &'static str,
        params: &P,
    ) -> Result<Events> {
        let body = encode_call(method, params)?;
        headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        let response = self
            .client
            .request(json_post(uri, headers, body))
            .await
            .map_err(|e| Error::Transport(format!("{method} to {uri} failed: {e}")))?;
        // As the SDK's transport: no content type is taken for a stream, since reading
        // the body to look would wait on a stream that has sent nothing yet.
        let is_stream = response
            .headers()
            .get(CONTENT_TYPE)
            .is_none_or(|v| v.as_bytes().starts_with(b"text/event-stream"));
        let status = response.status();
        if !is_stream {
            let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
                .collect()
                .await
                .map_err(|e| Error::Transport(format!("reading the answer of {uri} failed: {e}")))?
                .to_bytes();
            return Err(not_a_stream(status, &body));
        }
        tracing::debug!(%uri, %status, method, "stream opened");
        Ok(events(response.into_body().into_data_stream()))
    }
}

/// What a JSON answer to a streaming call says: a JSON-RPC error, or that it is no stream.
fn not_a_stream(status: StatusCode, body: &[u8]) -> Error {
    match serde_json::from_slice::<JsonRpcResponse>(body) {
        Ok(JsonRpcResponse {
            error: Some(error), ..
        }) => Error::Protocol(protocol_error(error)),
        Ok(_) => Error::Protocol(A2AError::internal(
            "expected streaming response but got non-streaming JSON-RPC result",
        )),
        Err(e) => Error::Transport(format!("HTTP {status} with no JSON-RPC answer ({e})")),
    }
}

/// The events of a stream's body.
pub(super) fn events<S, E>(frames: S) -> Events
where
    S: futures::Stream<Item = std::result::Result<Bytes, E>> + Send + 'static,
    E: std::fmt::Display,
{
    let reader = Reader {
        frames: Box::pin(frames),
        buffer: Vec::new(),
        scanned: 0,
        ready: VecDeque::new(),
        ended: false,
    };
    stream::unfold(reader, |mut reader| async move {
        reader.next().await.map(|event| (event, reader))
    })
    .boxed()
}

struct Reader<S> {
    frames: std::pin::Pin<Box<S>>,
    /// Bytes of events not yet complete.
    buffer: Vec<u8>,
    /// How far `buffer` holds no boundary (short of the last 3 bytes, which may start one).
    scanned: usize,
    ready: VecDeque<Result<StreamResponse, A2AError>>,
    ended: bool,
}

impl<S, E> Reader<S>
where
    S: futures::Stream<Item = std::result::Result<Bytes, E>> + Send + 'static,
    E: std::fmt::Display,
{
    async fn next(&mut self) -> Option<Result<StreamResponse, A2AError>> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Some(event);
            }
            if self.ended {
                return None;
            }
            match self.frames.next().await {
                Some(Ok(bytes)) => {
                    self.buffer.extend_from_slice(&bytes);
                    self.split();
                    if self.buffer.len() > MAX_ANSWER_BYTES {
                        self.ready.push_back(Err(A2AError::internal(format!(
                            "an event of the stream grew past {MAX_ANSWER_BYTES} bytes; the stream was dropped"
                        ))));
                        self.ended = true;
                    }
                }
                Some(Err(e)) => {
                    self.ready
                        .push_back(Err(A2AError::internal(format!("SSE stream error: {e}"))));
                    self.ended = true;
                }
                None => {
                    self.ended = true;
                    if let Some(last) = tail(&std::mem::take(&mut self.buffer)) {
                        self.ready.push_back(last);
                    }
                }
            }
        }
    }

    /// Moves every complete event in `buffer` to `ready`.
    fn split(&mut self) {
        while let Some((end, next)) = boundary(&self.buffer, self.scanned) {
            let event: Vec<u8> = self.buffer.drain(..next).collect();
            self.scanned = 0;
            match std::str::from_utf8(&event[..end]) {
                Ok(text) => self.ready.extend(event_of(text)),
                Err(e) => self.ready.push_back(Err(A2AError::internal(format!(
                    "SSE UTF-8 decode error: {e}"
                )))),
            }
        }
        self.scanned = self.buffer.len().saturating_sub(3);
    }
}

/// The first blank line in `buffer` from `from`: where the event before it ends, and where
/// the next begins.
fn boundary(buffer: &[u8], from: usize) -> Option<(usize, usize)> {
    (from..buffer.len().saturating_sub(1)).find_map(|i| match &buffer[i..] {
        [b'\n', b'\n', ..] | [b'\r', b'\r', ..] => Some((i, i + 2)),
        [b'\r', b'\n', b'\r', b'\n', ..] => Some((i, i + 4)),
        _ => None,
    })
}

/// One event's item: `None` for an event with no data (a comment, a keep-alive).
fn event_of(text: &str) -> Option<Result<StreamResponse, A2AError>> {
    let data: Vec<&str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(|data| data.strip_prefix(' ').unwrap_or(data))
        .collect();
    if data.is_empty() {
        return None;
    }
    read(&data.join("\n"))
}

/// One event's data: its JSON-RPC envelope, read with serde, or as the SDK reads it.
fn read(data: &str) -> Option<Result<StreamResponse, A2AError>> {
    match serde_json::from_str::<Response<StreamResponse>>(data) {
        Ok(Response {
            error: Some(error), ..
        }) => Some(Err(protocol_error(error))),
        Ok(Response {
            result: Some(event),
            ..
        }) => Some(Ok(event)),
        Ok(Response { .. }) => None,
        Err(_) => read_as_the_sdk(data),
    }
}

/// The SDK's reading: a JSON-RPC envelope whose result goes through protobuf, or else a
/// bare event.
fn read_as_the_sdk(data: &str) -> Option<Result<StreamResponse, A2AError>> {
    let parse_error =
        |e: &dyn std::fmt::Display| A2AError::internal(format!("SSE parse error: {e}"));
    match serde_json::from_str::<JsonRpcResponse>(data) {
        Ok(JsonRpcResponse {
            error: Some(error), ..
        }) => Some(Err(protocol_error(error))),
        Ok(JsonRpcResponse {
            result: Some(result),
            ..
        }) => Some(protojson_conv::from_value(result).map_err(|e| parse_error(&e))),
        Ok(_) => None,
        Err(_) => Some(protojson_conv::from_str(data).map_err(|e| parse_error(&e))),
    }
}

/// What is left when the body ends: nothing (whitespace), a last event never terminated,
/// a JSON-RPC answer sent without SSE framing, or a stream cut in the middle of an event.
fn tail(buffer: &[u8]) -> Option<Result<StreamResponse, A2AError>> {
    let text = match std::str::from_utf8(buffer) {
        Ok(text) => text,
        Err(e) => {
            return Some(Err(A2AError::internal(format!(
                "SSE UTF-8 decode error at end of stream: {e}"
            ))));
        }
    };
    if text.trim().is_empty() {
        return None;
    }
    if text.lines().any(|line| line.starts_with("data:")) {
        return event_of(text);
    }
    if serde_json::from_str::<JsonRpcResponse>(text).is_ok()
        && let Some(answer) = read(text)
    {
        return Some(answer);
    }
    Some(Err(A2AError::internal(format!(
        "stream ended with {} unparseable trailing byte(s); the connection was probably cut mid-message",
        buffer.len()
    ))))
}

#[cfg(test)]
mod tests;
