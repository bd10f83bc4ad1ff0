//! A small agent and a real server on 127.0.0.1:0 for the hosting layer's tests.

#![allow(dead_code)]

use std::sync::Arc;

use agent_host::sdk::{Message, Part, Role, TaskState, new_message_id};
use agent_host::{
    Agent, HostConfig, InboundAuth, MemoryTaskStore, RequestContext, ServedCard, TaskHandle,
    TaskManager, prepare_card,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Completes on "complete", pauses for input on "pause"; a follow-up turn completes.
/// "taken at accept" is read by `accept`, which keeps it for `run`.
pub struct EchoAgent;

/// The text `accept` reads and keeps for `run` (`Accepted`).
pub const TAKEN_AT_ACCEPT: &str = "taken at accept";

fn text_of(message: &Message) -> String {
    message
        .parts
        .iter()
        .find_map(|p| p.as_text())
        .unwrap_or_default()
        .to_owned()
}

#[async_trait::async_trait]
impl Agent for EchoAgent {
    async fn accept(
        &self,
        ctx: &RequestContext,
        message: &Message,
        _task: Option<&agent_host::sdk::Task>,
    ) -> Result<agent_host::Reply, agent_host::sdk::A2AError> {
        let text = text_of(message);
        if text == TAKEN_AT_ACCEPT {
            ctx.accepted.keep(text);
        }
        Ok(agent_host::Reply::Task)
    }

    async fn run(&self, ctx: RequestContext, task: TaskHandle, message: Message) {
        // The reply says how many parts `run` was handed, and what it read.
        let parts = message.parts.len();
        let text = ctx
            .accepted
            .take::<String>()
            .unwrap_or_else(|| text_of(&message));
        if text == TAKEN_AT_ACCEPT {
            let reply = agent_host::agent_message(format!("{text}; parts in run: {parts}"), None);
            let _ = task.set_status(TaskState::Completed, Some(reply)).await;
            return;
        }
        if text == "headers" {
            let seen = serde_json::json!({
                "caller": ctx.caller, "idempotencyKey": ctx.idempotency_key,
                "traceparent": ctx.traceparent, "baggage": ctx.baggage, "extensions": ctx.extensions,
            });
            let artifact = agent_host::sdk::Artifact {
                artifact_id: "headers".into(),
                name: None,
                description: None,
                parts: vec![Part::data(seen)],
                metadata: None,
                extensions: None,
            };
            let _ = task.add_artifact(artifact, false, true).await;
            let _ = task.set_status(TaskState::Completed, None).await;
            return;
        }
        if text == "hang" {
            // Never answers: for deadline tests.
            std::future::pending::<()>().await;
        }
        let reply = Message {
            message_id: new_message_id(),
            context_id: None,
            task_id: None,
            role: Role::Agent,
            parts: vec![Part::text(format!("echo: {text}"))],
            metadata: None,
            extensions: None,
            reference_task_ids: None,
        };
        let state = if text == "pause" {
            TaskState::InputRequired
        } else {
            TaskState::Completed
        };
        let _ = task.set_status(TaskState::Working, None).await;
        let _ = task.set_status(state, Some(reply)).await;
    }
}

pub fn card() -> Value {
    json!({
        "name": "echo", "description": "test agent", "version": "1.0.0",
        "supportedInterfaces": [
            {"url": "", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": "", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}
        ],
        "capabilities": {"streaming": true, "pushNotifications": false},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "echo", "name": "echo", "description": "echoes", "tags": []}]
    })
}

/// A running agent: its base URL and the token that stops it.
pub struct Running {
    pub url: String,
    pub shutdown: CancellationToken,
    pub server: tokio::task::JoinHandle<agent_host::Result<()>>,
}

pub async fn start(auth: InboundAuth) -> Running {
    start_signed(auth, None).await
}

/// Like `start`, serving a card signed by `signer`.
pub async fn start_signed(
    auth: InboundAuth,
    signer: Option<&shared_types::SigningIdentity>,
) -> Running {
    start_card(auth, card(), signer).await
}

/// Like `start_signed`, serving `card` (whose interfaces are pointed at the address).
pub async fn start_card(
    auth: InboundAuth,
    card: Value,
    signer: Option<&shared_types::SigningIdentity>,
) -> Running {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let card = prepare_card(agent_host::describe_auth(card, &auth), &url, signer).unwrap();
    let config = HostConfig::new(ServedCard::new(&card).unwrap(), auth);
    let router = agent_host::app(
        &config,
        Arc::new(EchoAgent),
        TaskManager::new(Arc::new(MemoryTaskStore::new())),
    );
    let shutdown = config.shutdown.clone();
    let server = tokio::spawn(agent_host::serve(listener, router, shutdown.clone()));
    Running {
        url,
        shutdown,
        server,
    }
}

/// A JSON-RPC call with `A2A-Version: 1.0` and optional bearer token; returns the body.
pub async fn rpc(url: &str, method: &str, params: Value, token: Option<&str>) -> (u16, Value) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let mut request = reqwest::Client::new()
        .post(format!("{url}/"))
        .header("A2A-Version", "1.0")
        .json(&body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

pub fn user_message(text: &str) -> Value {
    json!({"message": {"role": "ROLE_USER", "messageId": new_message_id(), "parts": [{"text": text}]}})
}

/// The number of tasks the agent has (through ListTasks, authenticated with `token`).
pub async fn task_count(url: &str, token: Option<&str>) -> i64 {
    let (_, body) = rpc(url, "ListTasks", json!({}), token).await;
    let result = body
        .get("result")
        .unwrap_or_else(|| panic!("ListTasks: {body}"));
    // ProtoJSON leaves out zero values: no totalSize means 0.
    result.get("totalSize").and_then(Value::as_i64).unwrap_or(0)
}
