//! The HTTP client under `rmcp`'s streamable-HTTP transport. It adds two things to the
//! SDK's own reqwest client: the saga's `traceparent`, `baggage` and `Idempotency-Key`
//! travel as HTTP headers too (lifted from the request's `_meta`, where SEP-414 puts trace
//! context), as on every A2A call (spec/reversibility-v1.md), and the raw JSON
//! of `tools/list` results is kept, because the SDK's typed tool annotations drop the
//! SEP-3172 `annotations.recovery` key.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::sync;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::common::http_header::HEADER_SESSION_ID;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use serde_json::Value;

type HttpResult<T> = Result<T, StreamableHttpError<reqwest::Error>>;

/// The largest `tools/list` answer read (the document a manifest is checked against).
const MAX_TOOL_LIST_BYTES: usize = agent_host::MAX_FETCHED_DOCUMENT_BYTES;

/// Raw `tools/list` results by JSON-RPC request id (its JSON text).
pub type RawResults = Arc<Mutex<HashMap<String, Value>>>;

/// `rmcp`'s reqwest client plus the saga headers and the raw `tools/list` capture.
#[derive(Clone, Debug)]
pub struct SagaHttpClient {
    http: reqwest::Client,
    raw: RawResults,
}

impl SagaHttpClient {
    pub fn new(http: reqwest::Client) -> Self {
        Self {
            http,
            raw: RawResults::default(),
        }
    }

    /// Where the raw `tools/list` results land.
    pub fn raw_results(&self) -> RawResults {
        self.raw.clone()
    }
}

/// The trace headers a request's `_meta` asks for.
fn trace_headers(message: &Value) -> Vec<(HeaderName, HeaderValue)> {
    let Some(meta) = message.pointer("/params/_meta") else {
        return Vec::new();
    };
    [
        ("traceparent", "traceparent"),
        ("baggage", "baggage"),
        ("idempotencyKey", "idempotency-key"),
    ]
    .into_iter()
    .filter_map(|(key, header)| {
        let value = HeaderValue::from_str(meta.get(key)?.as_str()?).ok()?;
        Some((HeaderName::from_static(header), value))
    })
    .collect()
}

/// The JSON-RPC messages in a response body: one JSON document, or the `data:` of each
/// server-sent event.
fn messages_in(body: &str, is_json: bool) -> Vec<Value> {
    if is_json {
        return serde_json::from_str(body).into_iter().collect();
    }
    body.split("\n\n")
        .filter_map(|event| {
            let data: Vec<&str> = event
                .lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            (!data.is_empty())
                .then(|| serde_json::from_str(&data.join("\n")).ok())
                .flatten()
        })
        .collect()
}

impl SagaHttpClient {
    /// Posts a `tools/list` request itself (same URL, session, credential and protocol
    /// headers as the SDK would send) so the raw result can be kept, then hands the SDK
    /// the parsed response.
    async fn post_tools_list(
        &self,
        uri: Arc<str>,
        message: Value,
        session_id: Option<Arc<str>>,
        auth_token: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<StreamableHttpPostResponse> {
        let id = message.get("id").cloned().unwrap_or(Value::Null);
        let mut request = self
            .http
            .post(uri.as_ref())
            .header(ACCEPT, "application/json, text/event-stream")
            .json(&message);
        if let Some(token) = auth_token {
            request = request.bearer_auth(token);
        }
        for (name, value) in custom_headers {
            request = request.header(name, value);
        }
        if let Some(session) = &session_id {
            request = request.header(HEADER_SESSION_ID, session.as_ref());
        }
        let response = request.send().await.map_err(StreamableHttpError::Client)?;
        let status = response.status();
        if !status.is_success() {
            return Err(StreamableHttpError::UnexpectedServerResponse(
                format!("tools/list was answered with HTTP {status}").into(),
            ));
        }
        let session = response
            .headers()
            .get(HEADER_SESSION_ID)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .or_else(|| session_id.map(|s| s.to_string()));
        let is_json = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.starts_with("application/json"));
        let body = agent_host::read_capped(response, MAX_TOOL_LIST_BYTES)
            .await
            .map_err(|why| StreamableHttpError::UnexpectedServerResponse(why.into()))?;
        let body = String::from_utf8_lossy(&body);
        let answer = messages_in(&body, is_json)
            .into_iter()
            .find(|m| m.get("id") == Some(&id) && m.get("method").is_none())
            .ok_or(StreamableHttpError::UnexpectedEndOfStream)?;
        if let Some(result) = answer.get("result") {
            sync::lock(&self.raw).insert(id.to_string(), result.clone());
        }
        let parsed: ServerJsonRpcMessage = serde_json::from_value(answer)?;
        Ok(StreamableHttpPostResponse::Json(parsed, session))
    }
}

impl StreamableHttpClient for SagaHttpClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_token: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<StreamableHttpPostResponse> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_token,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_token: Option<String>,
        mut custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> HttpResult<StreamableHttpPostResponse> {
        let raw = serde_json::to_value(&message)?;
        custom_headers.extend(trace_headers(&raw));
        if raw.get("method").and_then(Value::as_str) == Some("tools/list") {
            return self
                .post_tools_list(uri, raw, session_id, auth_token, custom_headers)
                .await;
        }
        self.http
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_token,
                custom_headers,
                limits,
            )
            .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_token: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<()> {
        self.http
            .delete_session(uri, session_id, auth_token, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_token: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<futures::stream::BoxStream<'static, Result<sse_stream::Sse, sse_stream::Error>>>
    {
        self.http
            .get_stream(uri, session_id, last_event_id, auth_token, custom_headers)
            .await
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn messages_are_read_from_json_and_from_events() {
        let one = json!({"jsonrpc": "2.0", "id": 3, "result": {"tools": []}});
        assert_eq!(messages_in(&one.to_string(), true), vec![one.clone()]);
        let events = format!(
            "event: message\nid: 1\ndata: {}\n\ndata: {}\n\n",
            json!({"jsonrpc": "2.0", "method": "notifications/progress"}),
            one
        );
        assert_eq!(messages_in(&events, false)[1], one);
        assert!(messages_in("not json", true).is_empty());
    }

    #[test]
    fn trace_context_in_meta_becomes_headers() {
        let message = json!({"params": {"_meta": {"traceparent": "00-ab-cd-01", "baggage": "a=b",
            "idempotencyKey": "sg_1:s0", "other": "x"}}});
        let headers = trace_headers(&message);
        assert_eq!(headers.len(), 3);
        assert!(
            headers
                .iter()
                .any(|(n, v)| n == "idempotency-key" && v == "sg_1:s0")
        );
        assert!(trace_headers(&json!({"params": {}})).is_empty());
    }
}
