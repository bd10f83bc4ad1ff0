//! Rewriting rmcp's raw `tools/list` responses to add `annotations.recovery`, which its
//! typed `ToolAnnotations` cannot carry: a JSON body is rewritten whole; an SSE body
//! (legacy sessions answer every POST as a stream) event by event as it flows, so that
//! keep-alives and other messages pass untouched and nothing waits for the stream's end.

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use futures::{Stream, StreamExt};
use serde_json::Value;

use super::tools::{RecoveryVariant, annotate_tools_list};

/// The largest JSON `tools/list` body rewritten; larger ones pass unchanged.
const MAX_JSON_BODY: usize = 4 * 1024 * 1024;

/// Adds `annotations.recovery` (declarations of `variant`) to a `tools/list` response.
pub(crate) async fn annotate_response(response: Response, variant: RecoveryVariant) -> Response {
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    let (mut parts, body) = response.into_parts();
    if content_type.starts_with("application/json") {
        let Ok(bytes) = axum::body::to_bytes(body, MAX_JSON_BODY).await else {
            tracing::warn!("a tools/list response could not be read to add annotations");
            parts.status = StatusCode::INTERNAL_SERVER_ERROR;
            parts.headers.remove(header::CONTENT_LENGTH);
            return Response::from_parts(parts, Body::empty());
        };
        let rewritten = serde_json::from_slice::<Value>(&bytes)
            .ok()
            .and_then(|mut message| {
                annotate_tools_list(&mut message, variant).then(|| message.to_string())
            });
        let Some(text) = rewritten else {
            return Response::from_parts(parts, Body::from(bytes));
        };
        parts.headers.remove(header::CONTENT_LENGTH);
        if let Ok(length) = HeaderValue::from_str(&text.len().to_string()) {
            parts.headers.insert(header::CONTENT_LENGTH, length);
        }
        return Response::from_parts(parts, Body::from(text));
    }
    if content_type.starts_with("text/event-stream") {
        parts.headers.remove(header::CONTENT_LENGTH);
        let events = rewrite_events(body.into_data_stream(), variant);
        return Response::from_parts(parts, Body::from_stream(events));
    }
    Response::from_parts(parts, body)
}

/// The end of the first complete SSE event in `buffer` (after its blank line).
fn event_end(buffer: &[u8]) -> Option<usize> {
    let lf = buffer.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    let crlf = buffer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 4);
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// One SSE event, with its data rewritten when it is a `tools/list` result.
fn rewrite_event(event: &[u8], variant: RecoveryVariant) -> Bytes {
    let unchanged = || Bytes::copy_from_slice(event);
    let Ok(text) = std::str::from_utf8(event) else {
        return unchanged();
    };
    let mut fields = Vec::new();
    let mut data = Vec::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        match line.strip_prefix("data:") {
            Some(value) => data.push(value.strip_prefix(' ').unwrap_or(value)),
            None => fields.push(line),
        }
    }
    if data.is_empty() {
        return unchanged();
    }
    let Ok(mut message) = serde_json::from_str::<Value>(&data.join("\n")) else {
        return unchanged();
    };
    if !annotate_tools_list(&mut message, variant) {
        return unchanged();
    }
    let mut out = String::new();
    for field in fields {
        out.push_str(field);
        out.push('\n');
    }
    out.push_str("data: ");
    out.push_str(&message.to_string());
    out.push_str("\n\n");
    Bytes::from(out)
}

/// Splits a byte stream into SSE events and rewrites each one.
fn rewrite_events<S>(
    inner: S,
    variant: RecoveryVariant,
) -> impl Stream<Item = Result<Bytes, axum::Error>> + Send
where
    S: Stream<Item = Result<Bytes, axum::Error>> + Send + Unpin + 'static,
{
    struct Split<S> {
        inner: S,
        buffer: Vec<u8>,
        ended: bool,
    }
    let start = Split {
        inner,
        buffer: Vec::new(),
        ended: false,
    };
    futures::stream::unfold(start, move |mut split| async move {
        loop {
            if let Some(end) = event_end(&split.buffer) {
                let event: Vec<u8> = split.buffer.drain(..end).collect();
                return Some((Ok(rewrite_event(&event, variant)), split));
            }
            if split.ended {
                if split.buffer.is_empty() {
                    return None;
                }
                // A trailing partial event: pass it on as it came.
                let rest = Bytes::from(std::mem::take(&mut split.buffer));
                return Some((Ok(rest), split));
            }
            match split.inner.next().await {
                Some(Ok(chunk)) => split.buffer.extend_from_slice(&chunk),
                Some(Err(e)) => {
                    split.ended = true;
                    split.buffer.clear();
                    return Some((Err(e), split));
                }
                None => split.ended = true,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_split_on_blank_lines_of_either_kind() {
        assert_eq!(event_end(b"data: 1\n\ndata: 2"), Some(9));
        assert_eq!(event_end(b"data: 1\r\n\r\n"), Some(11));
        assert_eq!(event_end(b"data: 1\n"), None);
    }

    #[test]
    fn a_tools_list_event_gains_recovery_and_others_pass_unchanged() {
        let list = b"id: 0/1\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"tools\":[{\"name\":\"reserve_inventory\",\"annotations\":{\"readOnlyHint\":false}}]}}\n\n";
        let out = rewrite_event(list, RecoveryVariant::Curated);
        let text = std::str::from_utf8(&out).unwrap();
        assert!(text.starts_with("id: 0/1\ndata: "), "{text}");
        let data: Value = serde_json::from_str(text.lines().nth(1).unwrap()[6..].trim()).unwrap();
        assert_eq!(
            data.pointer("/result/tools/0/annotations/recovery/compensatingOperation/operationId"),
            Some(&Value::from("release_inventory"))
        );
        assert_eq!(
            data.pointer("/result/tools/0/annotations/readOnlyHint"),
            Some(&Value::from(false))
        );
        let ping = b": ping\n\n";
        assert_eq!(&rewrite_event(ping, RecoveryVariant::Curated)[..], ping);
    }
}
