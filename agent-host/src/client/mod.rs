//! The outbound A2A client every agent uses to call another: the SDK's JSON-RPC
//! transport (and, for `SendMessage`, the SDK's types sent directly: `send_message`) with
//! our headers on each call (`A2A-Version`, bearer credential,
//! `Idempotency-Key`, `traceparent`, `baggage`), a deadline on each call, and agent-card
//! fetching with signature verification.

mod send_message;
mod tool_call;

pub use tool_call::{SagaContext, ToolAnswer, failure_message, tool_answer, tool_call};

use std::time::Duration;

use futures::stream::BoxStream;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;
use shared_types::TrustStore;

use crate::card::AGENT_CARD_PATH;
use crate::error::{Error, Result};
use crate::protocol::PROTOCOL_VERSION;
use crate::sdk::{
    A2AError, CancelTaskRequest, GetTaskRequest, ListTasksRequest, ListTasksResponse,
    SendMessageRequest, SendMessageResponse, ServiceParams, StreamResponse, SubscribeToTaskRequest,
    Task,
};
use crate::sdk::{JsonRpcTransport, Transport};

/// The per-call context: credentials, identity of the effect, tracing, and a deadline.
#[derive(Debug, Clone)]
pub struct OutboundCall {
    pub bearer: Option<String>,
    pub idempotency_key: Option<String>,
    pub traceparent: Option<String>,
    /// W3C baggage members, e.g. `("sagaplane.saga", "sg_1")`.
    pub baggage: Vec<(String, String)>,
    /// The A2A extensions the call activates (`A2A-Extensions`, their URIs).
    pub extensions: Vec<String>,
    pub timeout: Duration,
}

impl Default for OutboundCall {
    fn default() -> Self {
        Self {
            bearer: None,
            idempotency_key: None,
            traceparent: None,
            baggage: Vec::new(),
            extensions: Vec::new(),
            timeout: Duration::from_secs(30),
        }
    }
}

impl OutboundCall {
    fn params(&self) -> ServiceParams {
        let mut params = ServiceParams::new();
        let mut put = |name: &str, value: String| {
            params.insert(name.to_owned(), vec![value]);
        };
        put("A2A-Version", PROTOCOL_VERSION.to_owned());
        if let Some(token) = &self.bearer {
            put("Authorization", format!("Bearer {token}"));
        }
        if let Some(key) = &self.idempotency_key {
            put("Idempotency-Key", key.clone());
        }
        if let Some(traceparent) = &self.traceparent {
            put("traceparent", traceparent.clone());
        }
        if !self.baggage.is_empty() {
            put("baggage", baggage_header(&self.baggage));
        }
        if !self.extensions.is_empty() {
            put("A2A-Extensions", self.extensions.join(", "));
        }
        params
    }

    /// The same headers as `params`, for a request sent without the SDK's transport;
    /// `credential` is the client's own, used when the call brings none. A value that
    /// cannot be a header (a line break in it) is refused here, before anything is sent.
    fn headers(&self, credential: Option<&HeaderValue>) -> Result<HeaderMap> {
        let mut headers = HeaderMap::with_capacity(6);
        let mut put = |name: &'static str, value: &str| -> Result<()> {
            let value = HeaderValue::from_str(value)
                .map_err(|_| Error::Config(format!("the {name} header cannot carry this value")))?;
            headers.insert(HeaderName::from_static(name), value);
            Ok(())
        };
        put("a2a-version", PROTOCOL_VERSION)?;
        if let Some(token) = &self.bearer {
            put("authorization", &format!("Bearer {token}"))?;
        }
        if let Some(key) = &self.idempotency_key {
            put("idempotency-key", key)?;
        }
        if let Some(traceparent) = &self.traceparent {
            put("traceparent", traceparent)?;
        }
        if !self.baggage.is_empty() {
            put("baggage", &baggage_header(&self.baggage))?;
        }
        if !self.extensions.is_empty() {
            put("a2a-extensions", &self.extensions.join(", "))?;
        }
        if self.bearer.is_none()
            && let Some(credential) = credential
        {
            headers.insert(http::header::AUTHORIZATION, credential.clone());
        }
        Ok(headers)
    }
}

/// A W3C `baggage` header value from its members.
pub fn baggage_header(members: &[(String, String)]) -> String {
    members
        .iter()
        .map(|(k, v)| format!("{k}={}", percent_encode(v)))
        .collect::<Vec<_>>()
        .join(",")
}

/// Baggage values are percent-encoded outside the unreserved set (W3C Baggage §3.2.1.1).
fn percent_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~:/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The largest document (an agent card, an MCP tool list) read from another agent.
pub const MAX_FETCHED_DOCUMENT_BYTES: usize = 1024 * 1024;

/// Reads a response body of at most `max` bytes, refusing a longer one as soon as it is
/// announced (`Content-Length`) or has arrived, so that a peer cannot make us hold more.
pub async fn read_capped(
    mut response: reqwest::Response,
    max: usize,
) -> std::result::Result<Vec<u8>, String> {
    let too_long = || format!("the answer is longer than {max} bytes");
    if response
        .content_length()
        .is_some_and(|announced| announced > max as u64)
    {
        return Err(too_long());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
        if body.len() + chunk.len() > max {
            return Err(too_long());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A client for one agent's JSON-RPC endpoint.
pub struct AgentClient {
    base_url: String,
    /// The JSON-RPC endpoint, parsed once rather than on every call.
    endpoint: http::Uri,
    /// The HTTP client of `send` (the SDK's transport has its own).
    send_http: send_message::Http,
    http: reqwest::Client,
    transport: JsonRpcTransport,
    /// `Authorization` for calls that bring no bearer of their own (built once).
    credential: Option<HeaderValue>,
}

impl std::fmt::Debug for AgentClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentClient")
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

impl AgentClient {
    /// `base_url` is the agent's JSON-RPC interface URL (its card's `supportedInterfaces`).
    pub fn new(base_url: &str) -> Result<Self> {
        // No redirects: a call carries a credential meant for this agent alone, and a card
        // fetched for registration must come from the address that was asked for.
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| Error::Config(format!("cannot build an HTTP client: {e}")))?;
        let base_url = base_url.trim_end_matches('/').to_owned();
        let endpoint = format!("{base_url}/");
        let parsed: http::Uri = endpoint
            .parse()
            .map_err(|e| Error::Config(format!("{endpoint} is not a URL: {e}")))?;
        Ok(Self {
            transport: JsonRpcTransport::new(http.clone(), endpoint),
            endpoint: parsed,
            send_http: send_message::Http::new(Duration::from_secs(5)),
            credential: None,
            base_url,
            http,
        })
    }

    /// Sends `token` as the bearer credential of every `send` that brings none of its own.
    pub fn with_bearer(mut self, token: &str) -> Result<Self> {
        let mut value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
            Error::Config(format!(
                "the credential for {} cannot be sent as a header",
                self.base_url
            ))
        })?;
        value.set_sensitive(true);
        self.credential = Some(value);
        Ok(self)
    }

    async fn within<T>(
        &self,
        call: &OutboundCall,
        what: &str,
        work: impl Future<Output = Result<T, A2AError>>,
    ) -> Result<T> {
        match tokio::time::timeout(call.timeout, work).await {
            Ok(result) => result.map_err(Error::Protocol),
            Err(_) => Err(self.no_answer(call, what)),
        }
    }

    fn no_answer(&self, call: &OutboundCall, what: &str) -> Error {
        Error::Transport(format!(
            "{what} to {} got no answer within {} ms",
            self.base_url,
            call.timeout.as_millis()
        ))
    }

    pub async fn send(
        &self,
        call: &OutboundCall,
        request: &SendMessageRequest,
    ) -> Result<SendMessageResponse> {
        let headers = call.headers(self.credential.as_ref())?;
        let work = self.send_http.send(&self.endpoint, headers, request);
        match tokio::time::timeout(call.timeout, work).await {
            Ok(answer) => answer,
            Err(_) => Err(self.no_answer(call, "SendMessage")),
        }
    }

    /// Opens a stream; the deadline covers opening it, not reading it. Its events are read
    /// with serde (`send_message/events.rs`). The client's own credential is not sent:
    /// only a `send` carries it.
    pub async fn stream(
        &self,
        call: &OutboundCall,
        request: &SendMessageRequest,
    ) -> Result<BoxStream<'static, Result<StreamResponse, A2AError>>> {
        self.open_stream(call, crate::sdk::methods::SEND_STREAMING_MESSAGE, request)
            .await
    }

    async fn open_stream<P: serde::Serialize>(
        &self,
        call: &OutboundCall,
        method: &'static str,
        params: &P,
    ) -> Result<BoxStream<'static, Result<StreamResponse, A2AError>>> {
        let work = self
            .send_http
            .stream(&self.endpoint, call.headers(None)?, method, params);
        match tokio::time::timeout(call.timeout, work).await {
            Ok(opened) => opened,
            Err(_) => Err(self.no_answer(call, method)),
        }
    }

    pub async fn get_task(&self, call: &OutboundCall, id: &str) -> Result<Task> {
        let params = call.params();
        let request = GetTaskRequest {
            id: id.to_owned(),
            history_length: None,
            tenant: None,
        };
        self.within(call, "GetTask", self.transport.get_task(&params, &request))
            .await
    }

    /// One page of the agent's tasks, newest first (as the agent orders them).
    pub async fn list_tasks(
        &self,
        call: &OutboundCall,
        request: &ListTasksRequest,
    ) -> Result<ListTasksResponse> {
        let params = call.params();
        self.within(
            call,
            "ListTasks",
            self.transport.list_tasks(&params, request),
        )
        .await
    }

    pub async fn cancel_task(&self, call: &OutboundCall, id: &str) -> Result<Task> {
        let params = call.params();
        let request = CancelTaskRequest {
            id: id.to_owned(),
            metadata: None,
            tenant: None,
        };
        self.within(
            call,
            "CancelTask",
            self.transport.cancel_task(&params, &request),
        )
        .await
    }

    pub async fn subscribe(
        &self,
        call: &OutboundCall,
        id: &str,
    ) -> Result<BoxStream<'static, Result<StreamResponse, A2AError>>> {
        let request = SubscribeToTaskRequest {
            id: id.to_owned(),
            tenant: None,
        };
        self.open_stream(call, crate::sdk::methods::SUBSCRIBE_TO_TASK, &request)
            .await
    }

    /// Fetches the agent card as JSON.
    pub async fn fetch_card(&self) -> Result<Value> {
        let url = format!("{}{AGENT_CARD_PATH}", self.base_url);
        let response = self
            .http
            .get(&url)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .map_err(|e| Error::Transport(format!("cannot fetch {url}: {e}")))?;
        if !response.status().is_success() {
            return Err(Error::Transport(format!(
                "{url} answered {}{}",
                response.status(),
                if response.status().is_redirection() {
                    " (redirects are not followed)"
                } else {
                    ""
                }
            )));
        }
        let bytes = read_capped(response, MAX_FETCHED_DOCUMENT_BYTES)
            .await
            .map_err(|e| Error::Transport(format!("cannot read {url}: {e}")))?;
        shared_types::json::parse_strict_bytes(&bytes)
            .map_err(|e| Error::Transport(format!("{url}: {e}")))
    }

    /// Fetches the agent card and verifies its signature; returns it with the signer's key id.
    pub async fn fetch_verified_card(&self, trust: &TrustStore) -> Result<(Value, String)> {
        let card = self.fetch_card().await?;
        let kid = trust.verify(&card).map_err(|e| {
            Error::Config(format!(
                "the agent card of {} is not trusted: {e}",
                self.base_url
            ))
        })?;
        Ok((card, kid))
    }
}
