//! MCP tool servers through the official SDK `rmcp`: a session over streamable HTTP
//! (protocol 2026-07-28, falling back to 2025-11-25's `initialize` for older servers), the
//! raw tool list, and tool calls that carry the saga context (`idempotencyKey` in the
//! params as SEP-3182 proposes and in `_meta`, trace context as headers), classified like
//! A2A calls: `isError` is a definite failure, a lost answer an unknown outcome.

pub mod invoker;
mod transport;

use std::time::Duration;

use rmcp::model::{
    CallToolResult, ClientCapabilities, ClientConfig, ClientRequest, CustomRequest, Implementation,
    ListToolsRequest, MetaObject, PaginatedRequestParams, ProtocolVersion, RequestMetaObject,
    ServerResult,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, PeerRequestOptions, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceError};
use serde_json::{Map, Value, json};
use shared_types::REVERSIBILITY_EXTENSION_URI;
use shared_types::mcp::SAGA_META_KEY;

use crate::saga::{CallOutcome, FailureClass};
use crate::sync;
use transport::{RawResults, SagaHttpClient};

/// The largest answer to one MCP request (or one event of a stream) that is read.
const MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;

/// JSON-RPC errors that prove the server refused a call before running the tool: parse
/// error, invalid request, unknown method, invalid params (MCP's answer to an unknown tool).
const REFUSED_BEFORE_ANY_EFFECT: [i32; 4] = [-32700, -32600, -32601, -32602];

/// Pages of `tools/list` read before giving up on a server that never stops paginating.
const MAX_TOOL_PAGES: usize = 100;

/// The saga context of one call.
#[derive(Debug, Clone)]
pub struct McpCallContext {
    pub idempotency_key: String,
    pub saga_id: String,
    pub step_id: String,
    pub caused_by: Option<String>,
    pub compensation: bool,
    pub traceparent: String,
    pub baggage: String,
    /// The class of an `isError` result that carries none (`invoke::unmarked_failure`).
    pub unmarked: Option<FailureClass>,
}

/// One open MCP session.
pub struct McpSession {
    service: RunningService<RoleClient, ClientConfig>,
    raw: RawResults,
    list_lock: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for McpSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpSession")
            .field("server", &self.server_name())
            .field("protocol", &self.protocol_version())
            .finish_non_exhaustive()
    }
}

fn client_info() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("sagaplane-executor", env!("CARGO_PKG_VERSION")),
    )
}

impl McpSession {
    /// Opens a session with the server at `url` (its MCP endpoint), with the executor's
    /// credential for it.
    pub async fn connect(
        url: &str,
        bearer: Option<String>,
        timeout: Duration,
    ) -> Result<Self, String> {
        // No redirects: the credential is for the endpoint the curated manifest names.
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
        let client = SagaHttpClient::new(http);
        let raw = client.raw_results();
        let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
        config.auth_header = bearer;
        // A tool's answer is bounded like every document read from a peer.
        let config = config
            .max_json_response_size(MAX_RESPONSE_BYTES)
            .max_sse_event_size(MAX_RESPONSE_BYTES)
            .max_error_response_size(4 * 1024);
        let transport = StreamableHttpClientTransport::with_client(client, config);
        let lifecycle = ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            legacy_version: Some(ProtocolVersion::V_2025_11_25),
        };
        let service = tokio::time::timeout(
            timeout,
            client_info().serve_with_lifecycle(transport, lifecycle),
        )
        .await
        .map_err(|_| format!("the MCP server at {url} did not answer within {timeout:?}"))?
        .map_err(|e| format!("cannot open an MCP session with {url}: {e}"))?;
        Ok(Self {
            service,
            raw,
            list_lock: tokio::sync::Mutex::new(()),
        })
    }

    /// The server's `serverInfo.name`, when it gave one.
    pub fn server_name(&self) -> Option<String> {
        let info = self.service.peer_info()?;
        info.server_info.as_ref().map(|i| i.name.clone())
    }

    /// The protocol version the session speaks.
    pub fn protocol_version(&self) -> Option<String> {
        self.service
            .peer_info()
            .map(|info| info.protocol_version.to_string())
    }

    /// Every tool of the server as raw JSON (all pages), so that keys the SDK's types
    /// drop (`annotations.recovery`) are still there.
    pub async fn list_tools(&self) -> Result<Vec<Value>, String> {
        let _one_at_a_time = self.list_lock.lock().await;
        let mut tools = Vec::new();
        let mut cursor = None;
        for _ in 0..MAX_TOOL_PAGES {
            sync::lock(&self.raw).clear();
            let params = cursor.take().map(|c| {
                let mut p = PaginatedRequestParams::default();
                p.cursor = Some(c);
                p
            });
            let answer = self
                .service
                .peer()
                .send_request(ClientRequest::ListToolsRequest(ListToolsRequest {
                    method: Default::default(),
                    params,
                    extensions: Default::default(),
                }))
                .await
                .map_err(|e| format!("tools/list failed: {e}"))?;
            let raw_page = sync::lock(&self.raw)
                .drain()
                .next()
                .map(|(_, v)| v)
                .ok_or("tools/list answered, but its raw result was not captured")?;
            match answer {
                ServerResult::ListToolsResult(_) => {}
                _ => return Err("tools/list was answered with something else".into()),
            }
            let page = raw_page
                .get("tools")
                .and_then(Value::as_array)
                .ok_or("the tools/list result has no tools array")?;
            tools.extend(page.iter().cloned());
            match raw_page.get("nextCursor").and_then(Value::as_str) {
                Some(next) if !next.is_empty() => cursor = Some(next.to_owned()),
                _ => return Ok(tools),
            }
        }
        Err(format!(
            "tools/list kept paginating after {MAX_TOOL_PAGES} pages"
        ))
    }

    /// Calls `tool` with `arguments` and classifies the answer.
    pub async fn call(
        &self,
        tool: &str,
        arguments: &Value,
        context: &McpCallContext,
        timeout: Duration,
    ) -> CallOutcome {
        let saga = json!({
            "sagaId": context.saga_id, "stepId": context.step_id,
            "idempotencyKey": context.idempotency_key, "causedBy": context.caused_by,
            "compensation": context.compensation,
        });
        let mut meta = Map::new();
        meta.insert(SAGA_META_KEY.to_owned(), saga);
        meta.insert(
            "idempotencyKey".to_owned(),
            Value::String(context.idempotency_key.clone()),
        );
        meta.insert(
            "traceparent".to_owned(),
            Value::String(context.traceparent.clone()),
        );
        meta.insert("baggage".to_owned(), Value::String(context.baggage.clone()));
        // A custom request, because the SDK's typed `tools/call` params have no place for
        // SEP-3182's `idempotencyKey`.
        let request = ClientRequest::CustomRequest(CustomRequest::new(
            "tools/call",
            Some(json!({
                "name": tool,
                "arguments": arguments,
                "idempotencyKey": context.idempotency_key,
            })),
        ));
        let options = PeerRequestOptions::with_timeout(timeout)
            .with_meta(RequestMetaObject(MetaObject(meta)));
        let sent = self
            .service
            .peer()
            .send_request_with_option(request, options)
            .await;
        let answer = match sent {
            Ok(handle) => handle.await_response().await,
            Err(e) => Err(e),
        };
        classify(answer, context.unmarked)
    }

    /// Ends the session politely.
    pub async fn close(self) {
        let _ = self.service.cancel().await;
    }
}

fn text_of(result: &CallToolResult) -> String {
    let texts: Vec<String> = result
        .content
        .iter()
        .filter_map(|block| {
            serde_json::to_value(block)
                .ok()?
                .get("text")?
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    if texts.is_empty() {
        "the tool reported an error".into()
    } else {
        texts.join(" ")
    }
}

/// The failure class an `isError` result carries in its `_meta`, under the extension's
/// URI (`{"failure": "transient" | "permanent"}`), as an A2A tool's status does.
fn marked_failure(result: &CallToolResult) -> Option<FailureClass> {
    let meta = serde_json::to_value(result.meta.as_ref()?).ok()?;
    meta.get(REVERSIBILITY_EXTENSION_URI)
        .and_then(FailureClass::marked_in)
}

/// How a `tools/call` answer counts for the saga; `unmarked` is the class of an
/// `isError` result that carries none.
fn classify(
    answer: Result<ServerResult, ServiceError>,
    unmarked: Option<FailureClass>,
) -> CallOutcome {
    let result = match answer {
        Ok(ServerResult::CallToolResult(result)) => result,
        Ok(ServerResult::CustomResult(custom)) => {
            match serde_json::from_value::<CallToolResult>(custom.0) {
                Ok(result) => result,
                Err(e) => {
                    return CallOutcome::Unknown {
                        reason: format!("the tool's answer is not a tool result: {e}"),
                    };
                }
            }
        }
        Ok(other) => {
            return CallOutcome::Unknown {
                reason: format!("the tool answered with something else: {other:?}"),
            };
        }
        Err(ServiceError::McpError(error)) if REFUSED_BEFORE_ANY_EFFECT.contains(&error.code.0) => {
            return CallOutcome::Failed {
                reason: format!(
                    "the server refused the call: {} ({})",
                    error.message, error.code.0
                ),
                failure: Some(FailureClass::Permanent),
            };
        }
        Err(e) => {
            return CallOutcome::Unknown {
                reason: e.to_string(),
            };
        }
    };
    if result.is_error == Some(true) {
        return CallOutcome::Failed {
            failure: marked_failure(&result).or(unmarked),
            reason: text_of(&result),
        };
    }
    // `$response.body` is the structured content; without it, nothing can be bound.
    CallOutcome::Succeeded {
        response: result.structured_content.unwrap_or_else(|| json!({})),
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::{ErrorCode, ErrorData, ServerResult};

    use super::*;

    #[test]
    fn answers_are_classified_like_a2a_calls() {
        let ok: CallToolResult = serde_json::from_value(json!({
            "content": [{"type": "text", "text": "reserved"}],
            "structuredContent": {"reservationId": "res_1"}}))
        .unwrap();
        assert!(matches!(
            classify(Ok(ServerResult::CallToolResult(ok)), None),
            CallOutcome::Succeeded { response } if response == json!({"reservationId": "res_1"})
        ));
        let failed: CallToolResult = serde_json::from_value(json!({
            "content": [{"type": "text", "text": "carrier refused"}], "isError": true}))
        .unwrap();
        assert!(matches!(
            classify(Ok(ServerResult::CallToolResult(failed)), None),
            CallOutcome::Failed { reason, failure: None } if reason == "carrier refused"
        ));
        let unknown_tool = ErrorData::new(ErrorCode(-32602), "no such tool", None);
        assert!(matches!(
            classify(Err(ServiceError::McpError(unknown_tool)), None),
            CallOutcome::Failed { .. }
        ));
        let internal = ErrorData::new(ErrorCode(-32603), "boom", None);
        assert!(matches!(
            classify(Err(ServiceError::McpError(internal)), None),
            CallOutcome::Unknown { .. }
        ));
        assert!(matches!(
            classify(Err(ServiceError::TransportClosed), None),
            CallOutcome::Unknown { .. }
        ));
    }
}
