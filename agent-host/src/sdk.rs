//! The one module that names the official A2A SDK crates (`a2a-lf`, `a2a-server-lf`,
//! `a2a-client-lf`, pinned exactly): their churn stops here. Everything else in Sagaplane
//! uses these re-exports.

pub use a2a::{
    A2AError, AgentCapabilities, AgentCard, AgentExtension, AgentInterface, AgentSkill, Artifact,
    CancelTaskRequest, GetTaskRequest, ListTasksRequest, ListTasksResponse, Message, Part,
    PartContent, Role, SendMessageConfiguration, SendMessageRequest, SendMessageResponse,
    StreamResponse, SubscribeToTaskRequest, Task, TaskArtifactUpdateEvent, TaskState, TaskStatus,
    TaskStatusUpdateEvent,
};
pub use a2a_server::{RequestHandler, ServiceParams};

/// What a `RequestHandler` must name for the methods Sagaplane's agents refuse.
pub use a2a::{
    DeleteTaskPushNotificationConfigRequest, GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest, ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse, TaskPushNotificationConfig,
};

/// The SDK's outbound JSON-RPC transport (`client/`).
pub use a2a_client::Transport;
pub use a2a_client::jsonrpc::JsonRpcTransport;

/// What reading a JSON-RPC answer by hand needs (`client/send_message.rs`), and reading a
/// stream's event in a form serde does not read as the SDK reads it
/// (`client/send_message/events.rs`).
pub use a2a::jsonrpc::JsonRpcResponse;
pub use a2a::{JsonRpcError, TypedDetail, error_code, errordetails, methods, reason_to_error_code};
pub use a2a_pb::protojson_conv;

/// JSON-RPC 2.0 binding: `POST /`. A `SendMessage` answer and a stream's events are
/// written from the SDK's types with serde (`jsonrpc`); everything else is the SDK's
/// handler.
pub fn jsonrpc_router<H: RequestHandler>(handler: std::sync::Arc<H>) -> axum::Router {
    jsonrpc::router(handler)
}

mod jsonrpc;

/// HTTP+JSON binding: `/message:send`, `/tasks/{id}`, ….
pub fn rest_router<H: RequestHandler>(handler: std::sync::Arc<H>) -> axum::Router {
    a2a_server::rest::rest_router(handler)
}

/// A fresh task id (UUIDv7, time-ordered).
pub fn new_task_id() -> String {
    a2a::new_task_id()
}

/// A fresh context id.
pub fn new_context_id() -> String {
    a2a::new_context_id()
}

/// A fresh message id.
pub fn new_message_id() -> String {
    a2a::new_message_id()
}

/// A fresh artifact id.
pub fn new_artifact_id() -> String {
    a2a::new_artifact_id()
}

/// Whether a task in this state will never change again.
pub fn is_terminal(state: &TaskState) -> bool {
    state.is_terminal()
}

/// Whether a task in this state waits for someone outside the agent (a human, a credential).
pub fn is_interrupted(state: &TaskState) -> bool {
    matches!(state, TaskState::InputRequired | TaskState::AuthRequired)
}

/// A JSON document with every number as a double: how the SDK's ProtoJSON carries the
/// numbers of a data part (`google.protobuf.Value`), for tests that compare a writing of
/// ours with the SDK's by value.
#[cfg(test)]
pub(crate) fn numbers_as_doubles(value: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Number(n) => serde_json::json!(n.as_f64()),
        Value::Array(items) => Value::Array(items.iter().map(numbers_as_doubles).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), numbers_as_doubles(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}
