//! A scripted OpenAI-compatible server on 127.0.0.1:0 (axum): answers
//! `POST /v1/chat/completions` with its script's replies in order (the last one again once
//! the script is spent) and records every request it receives, whatever its path. A
//! request without the tests' key (`API_KEY`) as its bearer token is refused (401), as a
//! hosted API refuses it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// What the model id the server reports.
pub const REPORTED_MODEL: &str = "scripted-model-2026";

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// 200 with this as `choices[0].message.content`.
    Content(String),
    /// This status and body.
    Status(u16, String),
    /// This reply, once this long has passed (a model that does not answer in time).
    After(std::time::Duration, Box<Reply>),
    /// This reply, once the test cancels the token: a model still thinking while the
    /// test changes the world around the planner.
    Held(CancellationToken, Box<Reply>),
}

impl Reply {
    /// The draft `value` as a model's answer.
    pub fn draft(value: &Value) -> Self {
        Self::Content(value.to_string())
    }
}

/// One request as the server received it.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub authorization: Option<String>,
    pub body: Value,
}

impl Received {
    /// The request's messages' contents, joined: what the model was shown.
    pub fn prompt(&self) -> String {
        self.body["messages"]
            .as_array()
            .map(|messages| {
                messages
                    .iter()
                    .filter_map(|m| m["content"].as_str())
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default()
    }

    pub fn json_mode(&self) -> bool {
        self.body.get("response_format").is_some()
    }
}

#[derive(Default)]
struct Script {
    replies: VecDeque<Reply>,
    last: Option<Reply>,
    /// Refuse any request that asks for JSON mode, as a server without it does.
    refuse_json_mode: bool,
    received: Vec<Received>,
    /// Told how many requests were received, after each.
    count: Option<tokio::sync::watch::Sender<usize>>,
}

/// The running server.
pub struct ScriptedModel {
    /// `http://127.0.0.1:PORT` (no `/v1`).
    pub url: String,
    script: Arc<Mutex<Script>>,
    shutdown: CancellationToken,
    count: tokio::sync::watch::Receiver<usize>,
}

impl Drop for ScriptedModel {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Records the request, then what it is answered: a refusal at once, or the script's
/// next reply.
fn next(
    script: &Mutex<Script>,
    uri: &Uri,
    headers: &HeaderMap,
    body: Value,
) -> Result<Reply, Box<Response>> {
    let mut script = script.lock().unwrap();
    let authorization = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    script.received.push(Received {
        path: uri.path().to_owned(),
        authorization: authorization.clone(),
        body: body.clone(),
    });
    let count = script.received.len();
    if let Some(told) = &script.count {
        told.send_replace(count);
    }
    if uri.path() != "/v1/chat/completions" {
        return Err(Box::new(
            (StatusCode::NOT_FOUND, "no such route").into_response(),
        ));
    }
    let refused = |status: StatusCode, message: &str| {
        let error = json!({"error": {"message": message, "type": "invalid_request_error"}});
        Err(Box::new((status, axum::Json(error)).into_response()))
    };
    if authorization != Some(format!("Bearer {API_KEY}")) {
        return refused(StatusCode::UNAUTHORIZED, "no valid API key");
    }
    if script.refuse_json_mode && body.get("response_format").is_some() {
        // What vLLM-style servers answer for a parameter they do not take.
        return refused(
            StatusCode::BAD_REQUEST,
            "response_format is not supported by this server",
        );
    }
    Ok(match script.replies.pop_front() {
        Some(reply) => {
            script.last = Some(reply.clone());
            reply
        }
        None => script
            .last
            .clone()
            .unwrap_or(Reply::Status(500, "the script is empty".into())),
    })
}

async fn answer(
    State(script): State<Arc<Mutex<Script>>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let mut reply = match next(&script, &uri, &headers, body) {
        Ok(reply) => reply,
        Err(refused) => return *refused,
    };
    let reply = loop {
        reply = match reply {
            Reply::After(wait, then) => {
                tokio::time::sleep(wait).await;
                *then
            }
            Reply::Held(token, then) => {
                token.cancelled().await;
                *then
            }
            answer => break answer,
        };
    };
    match reply {
        Reply::Content(content) => axum::Json(json!({
            "id": "chatcmpl-scripted", "object": "chat.completion", "model": REPORTED_MODEL,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}]
        }))
        .into_response(),
        Reply::Status(status, body) => (
            StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            body,
        )
            .into_response(),
        Reply::After(..) | Reply::Held(..) => unreachable!("waited for above"),
    }
}

impl ScriptedModel {
    /// Serves `replies` in order; with `refuse_json_mode`, refuses every request that
    /// carries `response_format` (without spending a reply).
    pub async fn start(replies: Vec<Reply>, refuse_json_mode: bool) -> Self {
        let (told, count) = tokio::sync::watch::channel(0);
        let script = Arc::new(Mutex::new(Script {
            replies: replies.into(),
            refuse_json_mode,
            count: Some(told),
            ..Script::default()
        }));
        let router = Router::new()
            .fallback(axum::routing::any(answer))
            .with_state(script.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            axum::serve(listener, router)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await
                .unwrap();
        });
        Self {
            url,
            script,
            shutdown,
            count,
        }
    }

    /// Waits until `n` requests in all have been received.
    pub async fn asked(&self, n: usize) {
        let mut count = self.count.clone();
        count.wait_for(|&c| c >= n).await.unwrap();
    }

    /// Every request received so far, in order.
    pub fn received(&self) -> Vec<Received> {
        self.script.lock().unwrap().received.clone()
    }
}

/// The committed example's steps as a model would draft them: no class, compensation
/// or idempotency key; and one note of the model's own.
pub fn example_draft() -> Value {
    let example = super::read("examples/plans/supplier-onboarding.json");
    let steps: Vec<Value> = example["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(
            |s| json!({"id": s["id"], "agent": s["agent"], "skill": s["skill"], "args": s["args"]}),
        )
        .collect();
    json!({"steps": steps, "rejectedAlternatives": ["capture the fee first: irreversible before the checks"]})
}

/// `example_draft` with its last step calling a skill no card declares.
pub fn draft_outside_the_catalog() -> Value {
    let mut draft = example_draft();
    draft["steps"][5]["agent"] = json!("crm");
    draft["steps"][5]["skill"] = json!("crm.contacts.add");
    draft
}

/// A planner's settings for a model at `url`: the test key, at most `max_repairs`.
pub fn llm_config(url: &str, max_repairs: u32) -> planner_agent::LlmConfig {
    planner_agent::LlmConfig {
        api_key: Some(API_KEY.into()),
        max_repairs,
        ..planner_agent::LlmConfig::new(url, "test-model")
    }
}

/// The API key the tests' planners present to the model server.
pub const API_KEY: &str = "sk-test-4f1d9c0e7a2b";

/// The data part of a task's status message, integral numbers as integers.
pub fn status_data(task: &agent_host::sdk::Task) -> Option<Value> {
    let mut data = task
        .status
        .message
        .as_ref()?
        .parts
        .iter()
        .find_map(|p| match &p.content {
            agent_host::sdk::PartContent::Data(v) => Some(v.clone()),
            _ => None,
        })?;
    shared_types::json::normalize_integers(&mut data);
    Some(data)
}

/// The codes of a recorded draft's refusals.
pub fn codes(record: &Value) -> Vec<String> {
    record["refusals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["code"].as_str().unwrap().to_owned())
        .collect()
}

/// What a backend plans from, for calling one directly: the supplier goal with a 250 EUR
/// cap, the six cards' catalog, the tests' mandate, a fixed clock.
pub struct Fixture {
    pub goal: planner_agent::Goal,
    pub catalog: shared_types::Catalog,
    pub validator: shared_types::PlanValidator,
    pub ctx: planner_agent::compose::PlanContext,
}

impl Fixture {
    pub fn new() -> Self {
        let catalog = super::supplier_catalog();
        Self {
            goal: planner_agent::Goal::parse(
                &format!("{}, max spend 250 EUR", super::SUPPLIER_GOAL),
                None,
                &planner_agent::Templates::builtin(),
            )
            .unwrap(),
            validator: shared_types::PlanValidator::new(
                catalog.clone(),
                shared_types::TrustStore::new(),
            )
            .unwrap(),
            catalog,
            ctx: planner_agent::compose::PlanContext {
                saga_id: "sg_demo_supplier_onboarding".into(),
                planner_id: "planner-test".into(),
                now: "2026-11-29T10:00:00Z".parse().unwrap(),
                mandate: super::mandate_doc(),
                supersedes: None,
            },
        }
    }

    pub fn request(&self) -> planner_agent::PlanRequest<'_> {
        planner_agent::PlanRequest {
            goal: &self.goal,
            catalog: &self.catalog,
            validator: &self.validator,
            ctx: &self.ctx,
            replan: None,
        }
    }
}
