//! Fixtures for the planner's tests: the six committed cards as a catalog, a fake
//! executor (an `agent_host` agent that serves `/catalog` beside A2A, both behind the
//! planner-JWT check, validates and records every plan it receives and answers by a
//! script), and a planner served in-process on 127.0.0.1:0.

#![allow(dead_code)]

pub mod model;
pub mod processes;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use agent_host::sdk::{
    Message, Part, PartContent, Role, SendMessageRequest, SendMessageResponse, StreamResponse,
    Task, TaskState, new_message_id,
};
use agent_host::{
    Agent, AgentClient, HostConfig, InboundAuth, JwtPolicy, MemoryTaskStore, OutboundCall,
    RequestContext, ServedCard, TaskHandle, TaskManager, prepare_card,
};
use axum::routing::get;
use futures::StreamExt;
use planner_agent::Templates;
use planner_agent::service::{Service, Settings, build};
use serde_json::{Value, json};
use shared_types::{Mandate, PlanValidator, SigningIdentity, TrustStore, Violation};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

// Not every test uses all of them.
#[allow(unused_imports)]
pub use test_kit::{AGENTS, read, supplier_catalog};
pub const SUPPLIER_GOAL: &str =
    "Onboard supplier ACME GmbH, contact ops@acme.example, setup fee 120 EUR";

pub fn planner_identity() -> SigningIdentity {
    SigningIdentity::from_seed([7; 32], Some("planner-test".into()))
}

/// The principal whose mandates the tests' planners plan under (and the fake executor
/// trusts).
pub fn principal_identity() -> SigningIdentity {
    SigningIdentity::from_seed([9; 32], Some("principal-test".into()))
}

/// The tests' mandate, unsigned: granted to `planner-test`, the six supplier agents'
/// skills, 1000.00 EUR per saga out of 1 000 000.00 EUR, until 2099.
pub fn mandate_doc() -> Mandate {
    let mut mandate = Mandate::from_value(&read("examples/mandates/test-mandate.json")).unwrap();
    mandate.mandate_id = "md_planner_tests".into();
    mandate.grantees = vec!["planner-test".into()];
    mandate.per_saga = Some(policy_cap());
    mandate
}

/// `mandate` signed by the tests' principal, as the planner is given it.
pub fn signed_mandate(mandate: &Mandate) -> Value {
    mandate.signed_by(&principal_identity()).unwrap()
}

/// The tests' mandate, signed.
pub fn test_mandate() -> Value {
    signed_mandate(&mandate_doc())
}

/// How the fake executor answers a plan it accepted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Script {
    /// A status update per step, then COMPLETED.
    Complete,
    /// FAILED with `metadata.outcome = "compensated"`.
    Compensate,
    /// INPUT_REQUIRED at the pivot.
    Escalate,
    /// REJECTED with a violation, as if the mandate were exceeded.
    Reject,
    /// WORKING, and it stays so until the test ends it (`FakeExecutor::complete`).
    Hold,
}

/// What the fake executor saw.
#[derive(Debug, Default)]
pub struct Seen {
    /// Every plan received, with the validator's violations for it.
    pub plans: Vec<(Value, Vec<Violation>)>,
    /// Tasks held by `Script::Hold`.
    pub held: Vec<TaskHandle>,
    /// Told each time a task is held.
    pub held_signal: Arc<tokio::sync::Notify>,
}

struct FakeAgent {
    /// The script of each plan in the order received; the last one for any after.
    scripts: Vec<Script>,
    validator: PlanValidator,
    seen: Arc<Mutex<Seen>>,
}

fn message(text: &str, data: Option<Value>) -> Message {
    let mut parts = vec![Part::text(text)];
    if let Some(data) = data {
        parts.push(Part::data(data));
    }
    Message {
        message_id: new_message_id(),
        context_id: None,
        task_id: None,
        role: Role::Agent,
        parts,
        metadata: None,
        extensions: None,
        reference_task_ids: None,
    }
}

#[async_trait::async_trait]
impl Agent for FakeAgent {
    async fn run(&self, _: RequestContext, task: TaskHandle, m: Message) {
        let Some(PartContent::Data(mut plan)) = m.parts.first().map(|p| p.content.clone()) else {
            let _ = task.set_status(TaskState::Rejected, None).await;
            return;
        };
        shared_types::json::normalize_integers(&mut plan);
        let report = self.validator.validate(&plan, chrono::Utc::now());
        let script = {
            let mut seen = self.seen.lock().unwrap();
            let script = self.scripts[seen.plans.len().min(self.scripts.len() - 1)];
            seen.plans.push((plan.clone(), report.violations.clone()));
            script
        };
        if !report.is_valid() || script == Script::Reject {
            let violations = if report.is_valid() {
                vec![json!({"code": "MANDATE_EXCEEDED", "step": "s4",
                    "message": "spend reaches 30000 EUR minor units at this step, over the mandate's 25000"})]
            } else {
                report
                    .violations
                    .iter()
                    .map(|v| serde_json::to_value(v).unwrap())
                    .collect()
            };
            let text = format!(
                "the plan was refused with {} violation(s):\nMANDATE_EXCEEDED s4: over the mandate",
                violations.len()
            );
            let _ = task
                .set_status(
                    TaskState::Rejected,
                    Some(message(&text, Some(json!({"violations": violations})))),
                )
                .await;
            return;
        }
        let steps: Vec<(String, String)> = plan["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["id"].as_str().unwrap().to_owned(),
                    s["skill"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        let working = |text: String| {
            let task = task.clone();
            async move {
                task.set_status(TaskState::Working, Some(message(&text, None)))
                    .await
                    .unwrap();
            }
        };
        match script {
            Script::Complete => {
                for (id, skill) in &steps {
                    working(format!("{id}: {skill} succeeded")).await;
                }
                task.set_status(TaskState::Completed, Some(message("saga completed", None)))
                    .await
                    .unwrap();
            }
            Script::Compensate => {
                working(format!("{}: {} succeeded", steps[0].0, steps[0].1)).await;
                // The ledger names the step that failed, as the executor's does.
                let ledger = json!({"steps": [
                    {"step": "s0", "forward": {"state": "succeeded"}},
                    {"step": "s3", "forward": {"state": "failed", "reason": "the registry is down"}}]});
                task.add_artifact(
                    agent_host::sdk::Artifact {
                        artifact_id: "saga-ledger".into(),
                        name: None,
                        description: None,
                        parts: vec![Part::data(ledger)],
                        metadata: None,
                        extensions: None,
                    },
                    false,
                    true,
                )
                .await
                .unwrap();
                task.set_metadata("outcome", json!("compensated"))
                    .await
                    .unwrap();
                task.set_status(
                    TaskState::Failed,
                    Some(message(
                        "s3: compliance.check failed; every step was compensated",
                        None,
                    )),
                )
                .await
                .unwrap();
            }
            Script::Escalate => {
                working("s0: vendor.create succeeded".into()).await;
                task.set_status(
                    TaskState::InputRequired,
                    Some(message("s4: payments.capture has an unknown outcome", None)),
                )
                .await
                .unwrap();
            }
            Script::Hold => {
                working("s0: vendor.create running".into()).await;
                let mut seen = self.seen.lock().unwrap();
                seen.held.push(task);
                seen.held_signal.notify_one();
            }
            Script::Reject => unreachable!(),
        }
    }
}

/// A fake executor on loopback.
pub struct FakeExecutor {
    pub url: String,
    pub seen: Arc<Mutex<Seen>>,
    pub shutdown: CancellationToken,
}

impl FakeExecutor {
    /// Trusts `planner`'s key for JWTs (audience `executor`) and plans.
    pub async fn start(script: Script, planner: &SigningIdentity) -> Self {
        Self::start_each(vec![script], planner).await
    }

    /// `start`, running the plans it receives by `scripts` in turn (the last for any
    /// plan after).
    pub async fn start_each(scripts: Vec<Script>, planner: &SigningIdentity) -> Self {
        assert!(!scripts.is_empty());
        let mut trust = TrustStore::new();
        trust.add_jwk(&planner.public_jwk()).unwrap();
        let mut principals = TrustStore::new();
        principals
            .add_jwk(&principal_identity().public_jwk())
            .unwrap();
        let validator = PlanValidator::new(supplier_catalog(), trust)
            .unwrap()
            .with_principals(principals);
        let policy = JwtPolicy::new(
            "executor",
            &[(planner.kid().to_owned(), planner.public_jwk())],
        )
        .unwrap();
        let auth = InboundAuth::Jwt(Arc::new(policy));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let card = json!({"name": "executor", "description": "fake", "version": "1",
            "supportedInterfaces": [], "capabilities": {"streaming": true},
            "defaultInputModes": [], "defaultOutputModes": [], "skills": []});
        let card = ServedCard::new(&prepare_card(card, &url, None).unwrap()).unwrap();
        let config = HostConfig::new(card, auth.clone());
        let seen = Arc::new(Mutex::new(Seen::default()));
        let agent = FakeAgent {
            scripts,
            validator,
            seen: seen.clone(),
        };
        let tasks = TaskManager::new(Arc::new(MemoryTaskStore::new()));
        let catalog = axum::Router::new()
            .route("/catalog", get(|| async { axum::Json(supplier_catalog()) }))
            .layer(axum::middleware::from_fn_with_state(
                auth,
                agent_host::auth::authenticate,
            ));
        let router = agent_host::app(&config, Arc::new(agent), tasks).merge(catalog);
        tokio::spawn(agent_host::serve(listener, router, config.shutdown.clone()));
        Self {
            url,
            seen,
            shutdown: config.shutdown,
        }
    }

    /// Waits until a task is held (`Script::Hold`).
    pub async fn a_task_held(&self) {
        let signal = self.seen.lock().unwrap().held_signal.clone();
        loop {
            let notified = signal.notified();
            if !self.seen.lock().unwrap().held.is_empty() {
                return;
            }
            notified.await;
        }
    }

    pub fn plans(&self) -> Vec<(Value, Vec<Violation>)> {
        self.seen.lock().unwrap().plans.clone()
    }

    /// Completes the first held task.
    pub async fn complete_held(&self) {
        let task = self.seen.lock().unwrap().held.remove(0);
        task.set_status(
            TaskState::Working,
            Some(message("s5: email.send succeeded", None)),
        )
        .await
        .unwrap();
        task.set_status(TaskState::Completed, Some(message("saga completed", None)))
            .await
            .unwrap();
    }
}

/// A planner served in-process.
pub struct RunningPlanner {
    pub url: String,
    pub client: AgentClient,
    pub service_planner: Arc<planner_agent::Planner>,
    pub shutdown: CancellationToken,
    pub served: tokio::task::JoinHandle<()>,
    /// Where its planning spans go, when its settings send them.
    pub traces: Option<Arc<agent_host::telemetry::Exporter>>,
}

/// Starts a planner with the deterministic backend in front of `executor_url`.
pub async fn start_planner(
    executor_url: &str,
    identity: SigningIdentity,
    data_dir: Option<PathBuf>,
    executor_id: &str,
) -> RunningPlanner {
    start_with(executor_url, identity, data_dir, executor_id, None).await
}

/// The tests' mandate's per-saga cap: 1000.00 EUR.
pub fn policy_cap() -> shared_types::Money {
    serde_json::from_value(json!({"currency": "EUR", "amountMinor": 100_000})).unwrap()
}

/// Starts a planner; with `llm`, it asks that model for drafts.
pub async fn start_with(
    executor_url: &str,
    identity: SigningIdentity,
    data_dir: Option<PathBuf>,
    executor_id: &str,
    llm: Option<planner_agent::LlmConfig>,
) -> RunningPlanner {
    start_full(
        executor_url,
        identity,
        data_dir,
        executor_id,
        llm,
        InboundAuth::Open,
    )
    .await
}

/// Starts a planner whose callers authenticate with `auth`.
pub async fn start_full(
    executor_url: &str,
    identity: SigningIdentity,
    data_dir: Option<PathBuf>,
    executor_id: &str,
    llm: Option<planner_agent::LlmConfig>,
    auth: InboundAuth,
) -> RunningPlanner {
    start_under(
        executor_url,
        identity,
        data_dir,
        executor_id,
        llm,
        auth,
        Some(test_mandate()),
    )
    .await
}

/// Starts a planner with `mandate` as its own (`None`: goals must bring theirs).
pub async fn start_under(
    executor_url: &str,
    identity: SigningIdentity,
    data_dir: Option<PathBuf>,
    executor_id: &str,
    llm: Option<planner_agent::LlmConfig>,
    auth: InboundAuth,
    mandate: Option<Value>,
) -> RunningPlanner {
    let settings = |url: &str| Settings {
        data_dir,
        executor_id: executor_id.to_owned(),
        auth,
        mandate,
        ..test_settings(url, executor_url, identity, llm)
    };
    start_configured(settings).await
}

/// A planner's settings for the tests: at `url`, in front of `executor_url` (whose id
/// is `executor`), tasks in memory, open to any caller, under the tests' mandate.
pub fn test_settings(
    url: &str,
    executor_url: &str,
    identity: SigningIdentity,
    llm: Option<planner_agent::LlmConfig>,
) -> Settings {
    Settings {
        data_dir: None,
        identity,
        executor_urls: vec![executor_url.to_owned()],
        executor_id: "executor".to_owned(),
        public_url: url.to_owned(),
        auth: InboundAuth::Open,
        mandate: Some(test_mandate()),
        llm,
        templates: Templates::builtin(),
        executor_retry: planner_agent::DEFAULT_EXECUTOR_RETRY,
        gather_progress: planner_agent::GATHER_PROGRESS,
        max_replans: planner_agent::replan::DEFAULT_MAX_REPLANS,
        otlp_endpoint: None,
    }
}

/// Starts a planner with the settings `settings` gives for its URL.
pub async fn start_configured(settings: impl FnOnce(&str) -> Settings) -> RunningPlanner {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let shutdown = CancellationToken::new();
    let Service {
        router,
        planner,
        traces,
    } = build(settings(&url), shutdown.clone()).unwrap();
    planner.recover().await.unwrap();
    let serving = shutdown.clone();
    let served = tokio::spawn(async move {
        agent_host::serve(listener, router, serving).await.unwrap();
    });
    RunningPlanner {
        client: AgentClient::new(&url).unwrap(),
        url,
        service_planner: planner,
        shutdown,
        served,
        traces,
    }
}

/// A user message with the goal text and an optional data part.
pub fn goal_request(text: &str, data: Option<Value>) -> SendMessageRequest {
    agent_host::user_request(Some(text).filter(|t| !t.is_empty()), data, None)
}

/// Sends a goal and returns its task's id at once (`returnImmediately`), while the
/// planner works on.
pub async fn send_at_once(client: &AgentClient, text: &str) -> String {
    let mut request = goal_request(text, None);
    request.configuration = Some(agent_host::sdk::SendMessageConfiguration {
        accepted_output_modes: None,
        task_push_notification_config: None,
        history_length: None,
        return_immediately: Some(true),
    });
    match client.send(&OutboundCall::default(), &request).await {
        Ok(SendMessageResponse::Task(task)) => task.id,
        other => panic!("expected a task, got {other:?}"),
    }
}

/// Sends a goal; the planner answers when its task ends (or stops for a person).
pub async fn send(client: &AgentClient, text: &str, data: Option<Value>) -> Task {
    match client
        .send(&OutboundCall::default(), &goal_request(text, data))
        .await
    {
        Ok(SendMessageResponse::Task(task)) => task,
        other => panic!("expected a task, got {other:?}"),
    }
}

/// Streams a goal and collects every event until the stream ends.
pub async fn stream(client: &AgentClient, text: &str, data: Option<Value>) -> Vec<StreamResponse> {
    let mut events = client
        .stream(&OutboundCall::default(), &goal_request(text, data))
        .await
        .unwrap();
    let mut out = Vec::new();
    while let Some(event) = events.next().await {
        out.push(event.unwrap());
    }
    out
}

/// The text of a task's status message.
pub fn status_text(task: &Task) -> String {
    task.status
        .message
        .as_ref()
        .map(message_text)
        .unwrap_or_default()
}

/// The text parts of a message, one per line.
pub fn message_text(message: &Message) -> String {
    message
        .parts
        .iter()
        .filter_map(|p| match &p.content {
            PartContent::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The URL a just-started agent binary prints first (`listening on URL`).
pub fn listening_url(child: &mut std::process::Child) -> String {
    processes::listening_urls(child, 1).remove(0).1
}

/// The signed plan in a task's `plan` artifact, with integral numbers as integers.
pub fn plan_artifact(task: &Task) -> Option<Value> {
    let artifact = task
        .artifacts
        .as_deref()?
        .iter()
        .find(|a| a.artifact_id == "plan")?;
    let mut plan = artifact.parts.iter().find_map(|p| match &p.content {
        PartContent::Data(v) => Some(v.clone()),
        _ => None,
    })?;
    shared_types::json::normalize_integers(&mut plan);
    Some(plan)
}

pub fn metadata(task: &Task, key: &str) -> Option<Value> {
    task.metadata.as_ref()?.get(key).cloned()
}

/// Streams a goal until the planner's task names the executor's task; returns both ids.
pub async fn until_submitted(planner: &RunningPlanner) -> (String, String) {
    let mut events = planner
        .client
        .stream(&OutboundCall::default(), &goal_request(SUPPLIER_GOAL, None))
        .await
        .unwrap();
    while let Some(event) = events.next().await {
        if let Ok(StreamResponse::Task(task)) = event
            && let Some(id) = metadata(&task, "executorTaskId")
        {
            return (task.id, id.as_str().unwrap().to_owned());
        }
    }
    panic!("the planner's task never named the executor's task");
}

/// Waits for a task to end (or stop for a person): follows it while it runs, then reads it.
pub async fn settled(planner: &RunningPlanner, task_id: &str) -> Task {
    if let Ok(mut events) = planner
        .client
        .subscribe(&OutboundCall::default(), task_id)
        .await
    {
        while events.next().await.is_some() {}
    }
    planner
        .client
        .get_task(&OutboundCall::default(), task_id)
        .await
        .unwrap()
}
