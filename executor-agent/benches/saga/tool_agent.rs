//! The benchmark's in-process A2A tool agent: the SDK's JSON-RPC binding in front of a
//! handler that answers each skill with a fixed result in a completed task's artifact,
//! replaying the stored result for an Idempotency-Key it has seen.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use agent_host::sdk;
use agent_host::sdk::{
    A2AError, Artifact, CancelTaskRequest, GetTaskRequest, ListTasksRequest, ListTasksResponse,
    Part, PartContent, RequestHandler, SendMessageRequest, SendMessageResponse, ServiceParams,
    StreamResponse, SubscribeToTaskRequest, Task, TaskState, TaskStatus, new_context_id,
    new_task_id,
};
use async_trait::async_trait;
use futures::stream::BoxStream;
use serde_json::{Value, json};

use crate::TOOL_TOKEN;

/// The fixed result of each skill of the supplier-onboarding plan.
pub(crate) fn tool_result(skill: &str) -> Value {
    match skill {
        "vendor.create" => json!({"vendorId": "v_1"}),
        // The card declares where the hold's expiry stands (`undoExpiresAt`); a result
        // without it would be logged as unusable at every saga.
        "budget.reserve" => {
            json!({"reservationId": "r_1", "holdExpiresAt": "2099-01-01T00:00:00Z"})
        }
        "sandbox.provision" => json!({"tenantId": "t_1", "login": "acme-admin"}),
        "compliance.check" => json!({"status": "clear", "reference": "c_1"}),
        "payments.capture" => json!({"captureId": "p_1", "amountMinor": 12000, "currency": "EUR"}),
        "email.send" => json!({"messageId": "m_1"}),
        _ => json!({"done": true}),
    }
}

/// A minimal A2A tool agent: no task store, no event bus, one map of results by key.
#[derive(Default)]
struct ToolAgent {
    results_by_key: Mutex<HashMap<String, Value>>,
    /// How long each of these skills takes before it answers (others answer at once).
    slow: HashMap<String, std::time::Duration>,
}

fn unsupported<T>() -> Result<T, A2AError> {
    Err(A2AError::unsupported_operation(
        "the benchmark's tool agent only answers SendMessage",
    ))
}

#[async_trait]
impl RequestHandler for ToolAgent {
    async fn send_message(
        &self,
        params: &ServiceParams,
        req: SendMessageRequest,
    ) -> Result<SendMessageResponse, A2AError> {
        let header = |name: &str| params.get(name).and_then(|v| v.first());
        let bearer = header("authorization").and_then(|v| v.strip_prefix("Bearer "));
        if bearer != Some(TOOL_TOKEN) {
            return Err(A2AError::invalid_request("unknown caller"));
        }
        let key = header("idempotency-key")
            .cloned()
            .ok_or_else(|| A2AError::invalid_params("an Idempotency-Key is required"))?;
        let skill = req
            .message
            .parts
            .iter()
            .find_map(|p| match &p.content {
                PartContent::Data(call) => call["skill"].as_str(),
                _ => None,
            })
            .ok_or_else(|| A2AError::invalid_params("expected a data part {skill, args}"))?;
        if let Some(takes) = self.slow.get(skill) {
            tokio::time::sleep(*takes).await;
        }
        let result = self
            .results_by_key
            .lock()
            .map_err(|_| A2AError::internal("poisoned"))?
            .entry(key)
            .or_insert_with(|| tool_result(skill))
            .clone();
        Ok(SendMessageResponse::Task(Task {
            id: new_task_id(),
            context_id: req.message.context_id.unwrap_or_else(new_context_id),
            status: TaskStatus {
                state: TaskState::Completed,
                message: None,
                timestamp: Some(chrono::Utc::now()),
            },
            artifacts: Some(vec![Artifact {
                artifact_id: "result".into(),
                name: None,
                description: None,
                parts: vec![Part::data(result)],
                metadata: None,
                extensions: None,
            }]),
            history: None,
            metadata: None,
        }))
    }

    async fn send_streaming_message(
        &self,
        _: &ServiceParams,
        _: SendMessageRequest,
    ) -> Result<BoxStream<'static, Result<StreamResponse, A2AError>>, A2AError> {
        unsupported()
    }

    async fn get_task(&self, _: &ServiceParams, _: GetTaskRequest) -> Result<Task, A2AError> {
        unsupported()
    }

    async fn list_tasks(
        &self,
        _: &ServiceParams,
        _: ListTasksRequest,
    ) -> Result<ListTasksResponse, A2AError> {
        unsupported()
    }

    async fn cancel_task(&self, _: &ServiceParams, _: CancelTaskRequest) -> Result<Task, A2AError> {
        unsupported()
    }

    async fn subscribe_to_task(
        &self,
        _: &ServiceParams,
        _: SubscribeToTaskRequest,
    ) -> Result<BoxStream<'static, Result<StreamResponse, A2AError>>, A2AError> {
        unsupported()
    }

    async fn create_push_config(
        &self,
        _: &ServiceParams,
        _: sdk::TaskPushNotificationConfig,
    ) -> Result<sdk::TaskPushNotificationConfig, A2AError> {
        unsupported()
    }

    async fn get_push_config(
        &self,
        _: &ServiceParams,
        _: sdk::GetTaskPushNotificationConfigRequest,
    ) -> Result<sdk::TaskPushNotificationConfig, A2AError> {
        unsupported()
    }

    async fn list_push_configs(
        &self,
        _: &ServiceParams,
        _: sdk::ListTaskPushNotificationConfigsRequest,
    ) -> Result<sdk::ListTaskPushNotificationConfigsResponse, A2AError> {
        unsupported()
    }

    async fn delete_push_config(
        &self,
        _: &ServiceParams,
        _: sdk::DeleteTaskPushNotificationConfigRequest,
    ) -> Result<(), A2AError> {
        unsupported()
    }

    async fn get_extended_agent_card(
        &self,
        _: &ServiceParams,
        _: sdk::GetExtendedAgentCardRequest,
    ) -> Result<sdk::AgentCard, A2AError> {
        unsupported()
    }
}

/// Starts one tool agent on `tool_runtime`; returns its URL.
pub(crate) fn start_tool_agent(tool_runtime: &tokio::runtime::Runtime) -> String {
    start_slow_tool_agent(tool_runtime, &[])
}

/// `start_tool_agent`, whose skills `slow` take their time before answering.
pub(crate) fn start_slow_tool_agent(
    tool_runtime: &tokio::runtime::Runtime,
    slow: &[(&str, std::time::Duration)],
) -> String {
    let agent = ToolAgent {
        slow: slow.iter().map(|(s, d)| (s.to_string(), *d)).collect(),
        ..ToolAgent::default()
    };
    let listener = tool_runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind a loopback port");
    let url = format!("http://{}", listener.local_addr().expect("a local address"));
    let router = agent_host::sdk::jsonrpc_router(Arc::new(agent));
    tool_runtime.spawn(async move { axum::serve(listener, router).await });
    url
}
