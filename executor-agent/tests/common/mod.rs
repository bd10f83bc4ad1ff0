//! Tool agents for the executor's tests: real A2A servers on 127.0.0.1:0 that honour
//! Idempotency-Key, record what they were asked and what they applied, and take faults.

#![allow(dead_code)]

pub mod crash;
pub mod logs;
pub mod process;
pub mod served;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use agent_host::sdk::{
    Artifact, Message, Part, PartContent, SendMessageRequest, SendMessageResponse, Task, TaskState,
};
use agent_host::{
    Agent, AgentClient, HostConfig, InboundAuth, JwtPolicy, OutboundCall, RequestContext,
    ServedCard, SqliteTaskStore, TaskHandle, TaskManager, mint_jwt, prepare_card,
};
use axum::extract::connect_info::{ConnectInfo, Connected};
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use executor_agent::agent::{DEFAULT_MAX_RUNNING_SAGAS, Executor, ExecutorAgent, ExecutorConfig};
use executor_agent::journal::SqliteJournal;
use executor_agent::mcp::invoker::McpInvoker;
use executor_agent::registry::Registry;
use sagaplane_storage::sqlite::Database;
use serde_json::{Value, json};
use shared_types::{SigningIdentity, TrustStore};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

// Not every test uses all of them.
#[allow(unused_imports)]
pub use test_kit::{AGENTS, read, supplier_catalog, supplier_plan};
mod journal;
pub use journal::{FlakyJournal, flaky};

pub const TOOL_TOKEN: &str = "tool-secret";

/// The agent id MCP tests register an MCP server under.
pub const MCP_AGENT: &str = "shop";

/// The principal the tests' executors trust: the fixture key the example plans' mandate
/// is signed with.
pub fn principal() -> SigningIdentity {
    let jwk: shared_types::Jwk =
        serde_json::from_value(read("examples/keys/test-principal.jwk")).unwrap();
    SigningIdentity::from_jwk(&jwk).unwrap()
}

/// The principals as an executor's trust store.
pub fn principals() -> TrustStore {
    let mut trust = TrustStore::new();
    trust.add_jwk(&principal().public_jwk()).unwrap();
    trust
}

/// The example plans' mandate (`examples/mandates/test-mandate.json`), granted by the test
/// principal to `planner` under the id `md_tests_<planner>`, with a budget no test
/// exhausts (unless it sets its own).
pub fn grant_for(planner: &SigningIdentity) -> Value {
    let mut mandate = read("examples/mandates/test-mandate.json");
    mandate["mandateId"] = json!(format!("md_tests_{}", planner.kid()));
    mandate["grantees"] = json!([planner.kid()]);
    mandate["budget"]["amountMinor"] = json!(1_000_000_000_000u64);
    principal().sign_in_place(&mut mandate).unwrap();
    mandate
}

/// Puts `planner`'s test mandate (`grant_for`) in `plan`, its scope widened to the
/// plan's steps when they go beyond it (under an id of its own: one id names one
/// grant), then signs the plan as `planner`.
pub fn sign_plan(planner: &SigningIdentity, plan: &mut Value) {
    let mut mandate = grant_for(planner);
    let mut scope: Vec<(String, String)> = Vec::new();
    for entry in mandate["scope"].as_array().unwrap() {
        for skill in entry["skills"].as_array().unwrap() {
            scope.push((
                entry["agent"].as_str().unwrap().into(),
                skill.as_str().unwrap().into(),
            ));
        }
    }
    let mut widened = false;
    for step in plan["steps"].as_array().into_iter().flatten() {
        if let (Some(agent), Some(skill)) = (step["agent"].as_str(), step["skill"].as_str())
            && !scope.iter().any(|(a, s)| a == agent && s == skill)
        {
            scope.push((agent.into(), skill.into()));
            widened = true;
        }
    }
    if widened {
        scope.sort();
        let entries: Vec<Value> = scope
            .iter()
            .map(|(agent, skill)| json!({"agent": agent, "skills": [skill]}))
            .collect();
        let names: Vec<String> = scope.iter().map(|(a, s)| format!("{a}/{s}")).collect();
        let digest = shared_types::json::canonicalize(&json!(names)).unwrap();
        let tag: u32 = digest
            .iter()
            .fold(0, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(*b)));
        mandate["scope"] = Value::Array(entries);
        mandate["mandateId"] = json!(format!("md_tests_{}_{tag:08x}", planner.kid()));
        principal().sign_in_place(&mut mandate).unwrap();
    }
    plan["mandate"] = mandate;
    planner.sign_in_place(plan).unwrap();
}

/// The test principal's signed revocation of its mandate `id`, posted to the executor at
/// `url`: the executor's answer.
pub async fn post_revocation(url: &str, id: &str) -> reqwest::Response {
    let mut revocation =
        json!({"revokedMandateId": id, "revokedAt": chrono::Utc::now().to_rfc3339()});
    principal().sign_in_place(&mut revocation).unwrap();
    reqwest::Client::new()
        .post(format!("{url}/mandates/revocations"))
        .json(&revocation)
        .send()
        .await
        .unwrap()
}

/// For drivers run directly, of sagas held against no mandate: nothing is revoked.
pub struct NeverRevoked;

#[async_trait::async_trait]
impl executor_agent::authority::Revocations for NeverRevoked {
    async fn is_revoked(&self, _: &str, _: &str) -> executor_agent::Result<bool> {
        Ok(false)
    }
}

/// A fault injected on every call of one skill (or on its first `n` calls).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fault {
    /// The tool's task fails: a definite failure, nothing applied; marked permanent on a
    /// forward call, unmarked on a compensation (which is then tried again, per its
    /// policy, as the tests of dead-lettering need).
    Decline,
    /// The first `n` calls fail, marked transient (nothing applied), then it works.
    FailTransient(u32),
    /// The first `n` calls fail with no failure class, then it works.
    FailUnmarked(u32),
    /// The tool never answers.
    Hang,
    /// Declines the first `n` calls, then works.
    DeclineTimes(u32),
    /// The first `n` calls are applied, then never answered (the caller times out or
    /// dies first); `ToolLog::applied` is notified when the effect is in place.
    ApplyThenHang(u32),
    /// Like `ApplyThenHang`, but the answer goes once `ToolLog::release` is notified.
    ApplyThenHold(u32),
    /// Like `ApplyThenHold`, but each answer goes once it takes a permit of
    /// `ToolLog::gate` (none until the test adds them): held answers of many calls go at
    /// once, however many are held by then.
    ApplyThenGate(u32),
    /// The first `n` calls reach the tool, which does its work, but the HTTP answer is
    /// replaced by a `503` with a plain body, as a gateway in front of the tool answers.
    ServerError(u32),
    /// Like `ServerError`, but the answer is a `500` whose body is a JSON-RPC error
    /// (`-32000`, "server error"), as a server that maps its failures to HTTP 500 answers.
    ServerErrorRpc(u32),
    /// The first `n` calls reach the tool, which does its work, then the server closes
    /// the connection without writing a byte of the answer.
    DropConnection(u32),
}

/// A count for the counted faults (`DeclineTimes`, `ServerError`, …) that never runs out.
pub const ALWAYS: u32 = u32::MAX;

/// The faults of one tool and how many calls of each skill they have seen.
#[derive(Debug, Default)]
struct Faults {
    declared: HashMap<String, Fault>,
    calls: Mutex<HashMap<String, u32>>,
}

impl Faults {
    /// Counts a call of `skill` and says whether its counted fault fires on it.
    fn within(&self, skill: &str, n: u32) -> bool {
        let mut calls = self.calls.lock().unwrap();
        let seen = calls.entry(skill.to_owned()).or_default();
        *seen += 1;
        *seen <= n
    }

    /// The fault the agent itself injects on this call, if any.
    fn in_agent(&self, skill: &str) -> Option<Fault> {
        match self.declared.get(skill).copied()? {
            f @ (Fault::Decline | Fault::Hang) => Some(f),
            Fault::DeclineTimes(n) if self.within(skill, n) => Some(Fault::Decline),
            Fault::FailTransient(n) if self.within(skill, n) => Some(Fault::FailTransient(0)),
            Fault::FailUnmarked(n) if self.within(skill, n) => Some(Fault::FailUnmarked(0)),
            Fault::ApplyThenHang(n) if self.within(skill, n) => Some(Fault::ApplyThenHang(0)),
            Fault::ApplyThenHold(n) if self.within(skill, n) => Some(Fault::ApplyThenHold(0)),
            Fault::ApplyThenGate(n) if self.within(skill, n) => Some(Fault::ApplyThenGate(0)),
            _ => None,
        }
    }

    /// The fault the HTTP layer injects on this call, if any.
    fn in_transport(&self, skill: &str) -> Option<Fault> {
        match self.declared.get(skill).copied()? {
            f @ (Fault::ServerError(n) | Fault::ServerErrorRpc(n) | Fault::DropConnection(n))
                if self.within(skill, n) =>
            {
                Some(f)
            }
            _ => None,
        }
    }

    fn any_in_transport(&self) -> bool {
        self.declared.values().any(|f| {
            matches!(
                f,
                Fault::ServerError(_) | Fault::ServerErrorRpc(_) | Fault::DropConnection(_)
            )
        })
    }
}

/// Answers held until the test lets them go (`Fault::ApplyThenGate`).
#[derive(Debug)]
pub struct Gate(pub tokio::sync::Semaphore);

impl Default for Gate {
    fn default() -> Self {
        Self(tokio::sync::Semaphore::new(0))
    }
}

impl Gate {
    /// Lets every held answer go, and every later one.
    pub fn open(&self) {
        self.0.add_permits(tokio::sync::Semaphore::MAX_PERMITS / 2);
    }
}

/// Orders effects across tool agents (see `ToolLog::effect_seq`).
static EFFECT_SEQ: AtomicU64 = AtomicU64::new(0);

/// What one tool agent saw and did.
#[derive(Debug, Default)]
pub struct ToolLog {
    /// (idempotency key, skill) of every effect applied, in order.
    pub effects: Vec<(String, String)>,
    /// A process-wide sequence number for each entry of `effects`, to order the effects
    /// of several tools (see `effects_in_order`).
    pub effect_seq: Vec<u64>,
    /// Every call received: (key, skill, caller, traceparent present, baggage).
    pub calls: Vec<(String, String, String, bool, String)>,
    pub results: HashMap<String, (Value, Value)>,
    /// Notified each time an effect is applied.
    pub applied: Arc<tokio::sync::Notify>,
    /// Lets a call held by `Fault::ApplyThenHold` answer.
    pub release: Arc<tokio::sync::Notify>,
    /// Notified at each call received.
    pub called: Arc<tokio::sync::Notify>,
    /// When each entry of `calls` was received.
    pub called_at: Vec<std::time::Instant>,
    /// The `traceparent` of each entry of `calls` (empty when none came).
    pub traceparents: Vec<String>,
    /// Lets calls held by `Fault::ApplyThenGate` answer, one per permit.
    pub gate: Arc<Gate>,
    /// Results to answer instead of `response(skill)`, by skill.
    pub answers: HashMap<String, Value>,
}

/// How many calls of `skill` the tool agent `agent` received.
pub fn calls_of(logs: &HashMap<String, Arc<Mutex<ToolLog>>>, agent: &str, skill: &str) -> usize {
    logs[agent]
        .lock()
        .unwrap()
        .calls
        .iter()
        .filter(|call| call.1 == skill)
        .count()
}

/// The idempotency keys of every effect the tools applied, in the order they applied them.
pub fn effects_in_order(logs: &HashMap<String, Arc<Mutex<ToolLog>>>) -> Vec<String> {
    effects_with_skills(logs)
        .into_iter()
        .map(|(key, _)| key)
        .collect()
}

/// Every effect the tools applied, as (idempotency key, skill), in the order applied.
pub fn effects_with_skills(logs: &HashMap<String, Arc<Mutex<ToolLog>>>) -> Vec<(String, String)> {
    let mut all: Vec<(u64, (String, String))> = logs
        .values()
        .flat_map(|log| {
            let log = log.lock().unwrap();
            log.effect_seq
                .iter()
                .copied()
                .zip(log.effects.iter().cloned())
                .collect::<Vec<_>>()
        })
        .collect();
    all.sort();
    all.into_iter().map(|(_, effect)| effect).collect()
}

struct Tool {
    faults: Arc<Faults>,
    log: Arc<Mutex<ToolLog>>,
}

pub fn response(skill: &str) -> Value {
    match skill {
        "vendor.create" => json!({"vendorId": "v_1"}),
        "budget.reserve" => json!({"reservationId": "r_1"}),
        "sandbox.provision" => json!({"tenantId": "t_1", "login": "acme-admin"}),
        "compliance.check" => json!({"status": "clear", "reference": "c_1"}),
        "payments.capture" => json!({"captureId": "p_1", "amountMinor": 12000, "currency": "EUR"}),
        "email.send" => json!({"messageId": "m_1"}),
        "budget.release" => json!({"released": true}),
        _ => json!({"done": true}),
    }
}

#[async_trait::async_trait]
impl Agent for Tool {
    async fn run(&self, ctx: RequestContext, task: TaskHandle, message: Message) {
        let Some(PartContent::Data(call)) = message.parts.first().map(|p| p.content.clone()) else {
            let _ = task.set_status(TaskState::Rejected, None).await;
            return;
        };
        let skill = call["skill"].as_str().unwrap_or_default().to_owned();
        let key = ctx.idempotency_key.clone().unwrap_or_default();
        self.log.lock().unwrap().calls.push((
            key.clone(),
            skill.clone(),
            ctx.caller.clone(),
            ctx.traceparent.is_some(),
            ctx.baggage.clone().unwrap_or_default(),
        ));
        {
            let mut log = self.log.lock().unwrap();
            log.called_at.push(std::time::Instant::now());
            log.traceparents
                .push(ctx.traceparent.clone().unwrap_or_default());
            log.called.notify_one();
        }
        let fault = self.faults.in_agent(&skill);
        if fault == Some(Fault::Hang) {
            std::future::pending::<()>().await;
        }
        let compensation = message
            .metadata
            .as_ref()
            .and_then(|m| m.get(shared_types::REVERSIBILITY_EXTENSION_URI))
            .and_then(|c| c.get("compensation"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        use shared_types::FailureClass::{Permanent, Transient};
        let failure = match fault {
            Some(Fault::Decline) if compensation => Some(("declined", None)),
            Some(Fault::Decline) => Some(("declined", Some(Permanent))),
            Some(Fault::FailTransient(_)) => Some(("busy; try again", Some(Transient))),
            Some(Fault::FailUnmarked(_)) => Some(("failed", None)),
            _ => None,
        };
        if let Some((text, class)) = failure {
            let reason = agent_host::failure_message(text, class);
            let _ = task.set_status(TaskState::Failed, Some(reason)).await;
            return;
        }
        // A status skill (`payments.status`) says whether the call under `forwardKey` took
        // effect, from what this tool applied; it applies nothing itself.
        let asked = call["args"]["forwardKey"]
            .as_str()
            .filter(|_| skill.ends_with(".status"));
        if let Some(asked) = asked {
            let answer = match self.log.lock().unwrap().results.get(asked) {
                Some((_, result)) => json!({"status": "applied", "response": result}),
                None => json!({"status": "not-applied"}),
            };
            // Asked, answered here, and the answer never sent.
            if fault == Some(Fault::ApplyThenHang(0)) {
                std::future::pending::<()>().await;
            }
            let artifact = Artifact {
                artifact_id: "result".into(),
                name: None,
                description: None,
                parts: vec![Part::data(answer)],
                metadata: None,
                extensions: None,
            };
            let _ = task.add_artifact(artifact, false, true).await;
            let _ = task.set_status(TaskState::Completed, None).await;
            return;
        }
        let result = {
            let mut log = self.log.lock().unwrap();
            match log.results.get(&key) {
                Some((args, result)) if *args == call["args"] => result.clone(),
                Some(_) => Value::Null,
                None => {
                    let result = log
                        .answers
                        .get(&skill)
                        .cloned()
                        .unwrap_or_else(|| response(&skill));
                    log.effects.push((key.clone(), skill.clone()));
                    log.effect_seq
                        .push(EFFECT_SEQ.fetch_add(1, Ordering::SeqCst));
                    log.results
                        .insert(key, (call["args"].clone(), result.clone()));
                    log.applied.notify_one();
                    result
                }
            }
        };
        if fault == Some(Fault::ApplyThenHang(0)) {
            std::future::pending::<()>().await;
        }
        if fault == Some(Fault::ApplyThenHold(0)) {
            let release = self.log.lock().unwrap().release.clone();
            release.notified().await;
        }
        if fault == Some(Fault::ApplyThenGate(0)) {
            let gate = self.log.lock().unwrap().gate.clone();
            if let Ok(permit) = gate.0.acquire().await {
                permit.forget();
            }
        }
        if result.is_null() {
            let _ = task.set_status(TaskState::Failed, None).await;
            return;
        }
        let artifact = Artifact {
            artifact_id: "result".into(),
            name: None,
            description: None,
            parts: vec![Part::data(result)],
            metadata: None,
            extensions: None,
        };
        let _ = task.add_artifact(artifact, false, true).await;
        let _ = task.set_status(TaskState::Completed, None).await;
    }
}

pub async fn start_tool(faults: HashMap<String, Fault>, log: Arc<Mutex<ToolLog>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let card = json!({"name": "tool", "description": "", "version": "1", "supportedInterfaces": [],
        "capabilities": {"streaming": true}, "defaultInputModes": [], "defaultOutputModes": [], "skills": []});
    let card = prepare_card(card, &url, None).unwrap();
    let auth = InboundAuth::StaticBearer {
        name: "executor".into(),
        token: TOOL_TOKEN.into(),
    };
    let mut config = HostConfig::new(ServedCard::new(&card).unwrap(), auth);
    // A tool double holds as many calls as a test sends it (hundreds held at once, in
    // the replica tests), never refusing one for being busy.
    config.max_concurrent_requests = 4096;
    let faults = Arc::new(Faults {
        declared: faults,
        calls: Mutex::default(),
    });
    let router = agent_host::app(
        &config,
        Arc::new(Tool {
            faults: faults.clone(),
            log,
        }),
        TaskManager::new(Arc::new(agent_host::MemoryTaskStore::new())),
    );
    if faults.any_in_transport() {
        let router = router
            .layer(axum::middleware::from_fn_with_state(
                faults,
                transport_faults,
            ))
            .into_make_service_with_connect_info::<Cut>();
        let server = axum::serve(CuttableListener(listener), router)
            .with_graceful_shutdown(config.shutdown.clone().cancelled_owned());
        tokio::spawn(async move { server.await });
    } else {
        tokio::spawn(agent_host::serve(listener, router, config.shutdown.clone()));
    }
    url
}

/// The skill named in a call's JSON-RPC body (`{"skill": …, "args": …}` in a data part).
fn skill_in(body: &Value) -> Option<String> {
    match body {
        Value::Object(members) => members
            .get("skill")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| members.values().find_map(skill_in)),
        Value::Array(items) => items.iter().find_map(skill_in),
        _ => None,
    }
}

/// The HTTP layer's faults: the call goes through to the tool, then its answer is lost.
async fn transport_faults(
    State(faults): State<Arc<Faults>>,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    let call: Value = serde_json::from_slice(&body).unwrap_or_default();
    let fault = skill_in(&call).and_then(|skill| faults.in_transport(&skill));
    let connection = parts.extensions.get::<ConnectInfo<Cut>>().cloned();
    let response = next
        .run(Request::from_parts(parts, axum::body::Body::from(body)))
        .await;
    match fault {
        Some(Fault::ServerError(_)) => {
            (StatusCode::SERVICE_UNAVAILABLE, "upstream unavailable").into_response()
        }
        Some(Fault::ServerErrorRpc(_)) => {
            let error = json!({"jsonrpc": "2.0", "id": call["id"],
                "error": {"code": -32000, "message": "server error"}});
            (StatusCode::INTERNAL_SERVER_ERROR, axum::Json(error)).into_response()
        }
        Some(Fault::DropConnection(_)) => {
            connection
                .expect("served with Cut")
                .0
                .0
                .store(true, Ordering::SeqCst);
            response
        }
        _ => response,
    }
}

/// A connection's kill switch: once set, its socket refuses to read or write, so the
/// server drops the connection without answering.
#[derive(Debug, Clone, Default)]
struct Cut(Arc<AtomicBool>);

struct CuttableListener(TcpListener);

struct CuttableStream {
    io: TcpStream,
    cut: Cut,
}

impl CuttableStream {
    fn check(&self) -> std::io::Result<()> {
        if self.cut.0.load(Ordering::SeqCst) {
            return Err(std::io::ErrorKind::ConnectionAborted.into());
        }
        Ok(())
    }
}

impl axum::serve::Listener for CuttableListener {
    type Io = CuttableStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (CuttableStream, SocketAddr) {
        let (io, addr) = axum::serve::Listener::accept(&mut self.0).await;
        let cut = Cut::default();
        (CuttableStream { io, cut }, addr)
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.0.local_addr()
    }
}

impl Connected<axum::serve::IncomingStream<'_, CuttableListener>> for Cut {
    fn connect_info(stream: axum::serve::IncomingStream<'_, CuttableListener>) -> Self {
        stream.io().cut.clone()
    }
}

impl AsyncRead for CuttableStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        self.check()?;
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for CuttableStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.check()?;
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.check()?;
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Starts the six demo tool agents, each with `faults`. Returns their cards (in `AGENTS`
/// order, signed by `platform`, with short timeouts and backoffs so that faults are
/// quick) and what each agent records.
pub async fn start_tools(
    faults: &[(&str, Fault)],
    platform: &SigningIdentity,
) -> (Vec<Value>, HashMap<String, Arc<Mutex<ToolLog>>>) {
    start_tools_timed(faults, platform, 300).await
}

/// `start_tools`, with every skill's timeout set to `timeout_ms`.
pub async fn start_tools_timed(
    faults: &[(&str, Fault)],
    platform: &SigningIdentity,
    timeout_ms: u64,
) -> (Vec<Value>, HashMap<String, Arc<Mutex<ToolLog>>>) {
    start_tools_with(faults, platform, timeout_ms, &|_, _| {}).await
}

/// `start_tools_timed`, with each agent's card changed by `tweak(agent, card)` before
/// the platform signs it.
pub async fn start_tools_with(
    faults: &[(&str, Fault)],
    platform: &SigningIdentity,
    timeout_ms: u64,
    tweak: &dyn Fn(&str, &mut Value),
) -> (Vec<Value>, HashMap<String, Arc<Mutex<ToolLog>>>) {
    let mut cards = Vec::new();
    let mut logs = HashMap::new();
    for agent in AGENTS {
        let log = Arc::new(Mutex::new(ToolLog::default()));
        let faults = faults.iter().map(|(s, f)| (s.to_string(), *f)).collect();
        let url = start_tool(faults, log.clone()).await;
        let mut card = read(&format!("agent-cards/{agent}.json"));
        let skills = card.pointer_mut("/capabilities/extensions/0/params/skills");
        for declaration in skills.and_then(Value::as_object_mut).unwrap().values_mut() {
            declaration["timeoutMs"] = json!(timeout_ms);
            if let Some(retry) = declaration.get_mut("retry") {
                retry["initialBackoffMs"] = json!(20);
                retry["maxBackoffMs"] = json!(50);
            }
        }
        tweak(agent, &mut card);
        cards.push(prepare_card(card, &url, Some(platform)).unwrap());
        logs.insert(agent.to_owned(), log);
    }
    (cards, logs)
}

/// The budget agent's card with `budget.release` not idempotent, declaring a status skill
/// (the payments agent's, renamed) as its verification.
pub fn release_verified(agent: &str, card: &mut Value) {
    release_verified_as(false, agent, card);
}

/// `release_verified`, the release as idempotent as `idempotent` says.
pub fn release_verified_as(idempotent: bool, agent: &str, card: &mut Value) {
    if agent != "budget" {
        return;
    }
    let payments = read("agent-cards/payments.json");
    let skills = "/capabilities/extensions/0/params/skills";
    let mut status = payments
        .pointer(&format!("{skills}/payments.status"))
        .unwrap()
        .clone();
    status["timeoutMs"] = json!(300);
    let mut listed = payments["skills"][1].clone();
    assert_eq!(listed["id"], "payments.status");
    listed["id"] = json!("budget.status");
    card["skills"].as_array_mut().unwrap().push(listed);
    let declared = card.pointer_mut(skills).unwrap();
    declared["budget.status"] = status;
    declared["budget.release"]["idempotent"] = json!(idempotent);
    declared["budget.release"]["verify"] =
        json!({"skill": "budget.status", "args": {"forwardKey": "$step.idempotencyKey"}});
}

/// A user message with one data part (on `task_id`, if given).
pub fn data_message(data: Value, task_id: Option<&str>) -> SendMessageRequest {
    agent_host::user_request(None, Some(data), task_id)
}

/// Asserts that no message appears twice in `task`'s history (by its id).
pub fn each_message_once(task: &Task) {
    let ids: Vec<&str> = task
        .history
        .iter()
        .flatten()
        .map(|m| m.message_id.as_str())
        .collect();
    let once: std::collections::HashSet<&str> = ids.iter().copied().collect();
    assert_eq!(once.len(), ids.len(), "a message twice: {ids:?}");
}

/// A `ListTasks` request for the first 100 tasks (in `status`, when given), without
/// their history or artifacts.
pub fn first_hundred(
    status: Option<agent_host::sdk::TaskState>,
) -> agent_host::sdk::ListTasksRequest {
    agent_host::sdk::ListTasksRequest {
        context_id: None,
        status,
        page_size: Some(100),
        page_token: None,
        history_length: Some(0),
        status_timestamp_after: None,
        include_artifacts: Some(false),
        tenant: None,
    }
}

/// `request`, answered as soon as its task exists (`returnImmediately`), not at the
/// saga's end.
pub fn answered_at_once(mut request: SendMessageRequest) -> SendMessageRequest {
    request.configuration = Some(agent_host::sdk::SendMessageConfiguration {
        accepted_output_modes: None,
        task_push_notification_config: None,
        history_length: None,
        return_immediately: Some(true),
    });
    request
}

/// The executor as an A2A agent on loopback, in front of the six demo tool agents (each
/// with `faults`), with short timeouts and backoffs so that faults are quick.
pub struct Harness {
    pub client: AgentClient,
    /// The trusted planner (issuer `planner`): it signs the plans and sends them.
    pub planner: SigningIdentity,
    /// The approver (issuer `approver`): it answers the sagas that wait for a person.
    pub approver: SigningIdentity,
    /// The platform key that curates cards and MCP manifests.
    pub platform: SigningIdentity,
    pub registry: Registry,
    /// The executor's MCP sessions (its credential for MCP agent `shop` is `TOOL_TOKEN`).
    pub mcp: Arc<McpInvoker>,
    pub logs: HashMap<String, Arc<Mutex<ToolLog>>>,
    /// The executor's journal (it fails nothing until told to).
    pub journal: Arc<FlakyJournal<SqliteJournal>>,
    pub executor: Arc<Executor>,
    /// The executor's shutdown token.
    pub shutdown: tokio_util::sync::CancellationToken,
    /// The executor's base URL, and its state file (journal, registry and tasks).
    pub url: String,
    pub db: Database,
    _dir: tempfile::TempDir,
}

impl Harness {
    pub async fn start(faults: &[(&str, Fault)]) -> Self {
        Self::start_timed(faults, 300).await
    }

    /// `start`, with every skill's timeout set to `timeout_ms`.
    pub async fn start_timed(faults: &[(&str, Fault)], timeout_ms: u64) -> Self {
        Self::start_with(faults, timeout_ms, DEFAULT_MAX_RUNNING_SAGAS).await
    }

    /// `start_timed`, with `max_running_sagas` saga slots.
    pub async fn start_with(
        faults: &[(&str, Fault)],
        timeout_ms: u64,
        max_running_sagas: usize,
    ) -> Self {
        Self::start_with_cards(faults, timeout_ms, max_running_sagas, &|_, _| {}).await
    }

    /// `start_with`, with the tool agents' cards changed by `tweak(agent, card)`.
    pub async fn start_with_cards(
        faults: &[(&str, Fault)],
        timeout_ms: u64,
        max_running_sagas: usize,
        tweak: &dyn Fn(&str, &mut Value),
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let platform = SigningIdentity::from_seed([21; 32], Some("platform".into()));
        let planner = SigningIdentity::from_seed([22; 32], Some("planner".into()));
        let approver = SigningIdentity::from_seed([23; 32], Some("approver".into()));
        let mut platform_keys = TrustStore::new();
        platform_keys.add_jwk(&platform.public_jwk()).unwrap();
        // The executor's one state file, as `executor-agent` keeps it.
        let db = executor_agent::state::open(dir.path()).unwrap();
        let registry = Registry::on(&db, platform_keys).unwrap();
        let (cards, logs) = start_tools_with(faults, &platform, timeout_ms, tweak).await;
        let mut credentials = HashMap::new();
        for (agent, card) in AGENTS.iter().zip(cards) {
            registry.register(card, "test").await.unwrap();
            credentials.insert(agent.to_string(), TOOL_TOKEN.to_owned());
        }
        credentials.insert(MCP_AGENT.to_owned(), TOOL_TOKEN.to_owned());
        let mut planner_keys = TrustStore::new();
        planner_keys.add_jwk(&planner.public_jwk()).unwrap();
        let journal = Arc::new(flaky(Arc::new(SqliteJournal::on(&db).unwrap()), 0..0));
        let tasks = TaskManager::new(Arc::new(SqliteTaskStore::on(&db).unwrap()));
        let shutdown = tokio_util::sync::CancellationToken::new();
        let mcp = Arc::new(McpInvoker::new(credentials.clone()));
        let config = ExecutorConfig {
            registry: registry.clone(),
            planner_keys,
            planner_key_ids: [("planner".to_owned(), planner.kid().to_owned())].into(),
            mandates: executor_agent::mandates::MandateBook::on(&db, principals()).unwrap(),
            approvers: ["approver".to_owned()].into(),
            journal: journal.clone(),
            tasks_beside_journal: true,
            mcp: mcp.clone(),
            credentials,
            max_running_sagas,
            max_parallel_steps: executor_agent::saga::spec::DEFAULT_MAX_PARALLEL_STEPS,
            undo_expiring_within: executor_agent::metrics::DEFAULT_UNDO_EXPIRING_WITHIN,
            forwarding: None,
            traces: None,
            shutdown: shutdown.clone(),
        };
        let executor = Executor::new(config, tasks.clone());

        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let card = json!({"name": "executor", "description": "", "version": "1", "supportedInterfaces": [],
            "capabilities": {"streaming": true}, "defaultInputModes": [], "defaultOutputModes": [], "skills": []});
        let card = ServedCard::new(&prepare_card(card, &url, None).unwrap()).unwrap();
        let callers = [
            ("planner".to_owned(), planner.public_jwk()),
            ("approver".to_owned(), approver.public_jwk()),
        ];
        let policy = JwtPolicy::new("executor", &callers).unwrap();
        let config = HostConfig::new(card, InboundAuth::Jwt(Arc::new(policy)));
        let router = agent_host::app(&config, Arc::new(ExecutorAgent(executor.clone())), tasks)
            .merge(executor_agent::http::metrics_routes(executor.clone()));
        tokio::spawn(agent_host::serve(listener, router, config.shutdown.clone()));
        Self {
            client: AgentClient::new(&url).unwrap(),
            url,
            db,
            planner,
            approver,
            platform,
            registry,
            mcp,
            logs,
            journal,
            executor,
            shutdown,
            _dir: dir,
        }
    }

    /// The plan at `path`, signed by the trusted planner.
    pub fn signed(&self, path: &str) -> Value {
        let mut plan = read(path);
        sign_plan(&self.planner, &mut plan);
        plan
    }

    /// Sends one data part as the planner (on `task_id`, if given); the executor
    /// answers when the saga stops (its end, or a pause for a person).
    pub async fn send(&self, data: Value, task_id: Option<&str>) -> Task {
        self.send_as(&self.as_planner(), data, task_id).await
    }

    /// Sends a person's answer on `task_id` as the approver.
    pub async fn resolve(&self, data: Value, task_id: &str) -> Task {
        self.send_as(&self.as_approver(), data, Some(task_id)).await
    }

    async fn send_as(&self, call: &OutboundCall, data: Value, task_id: Option<&str>) -> Task {
        let request = data_message(data, task_id);
        match self.client.send(call, &request).await {
            Ok(SendMessageResponse::Task(task)) => task,
            other => panic!("expected a task, got {other:?}"),
        }
    }

    /// A request's credential as the planner (a fresh JWT: each is good for one request).
    pub fn as_planner(&self) -> OutboundCall {
        bearer(mint_jwt(&self.planner, "planner", "executor", 60).unwrap())
    }

    /// A request's credential as the approver.
    pub fn as_approver(&self) -> OutboundCall {
        bearer(mint_jwt(&self.approver, "approver", "executor", 60).unwrap())
    }

    /// What the tool agent `agent` saw and did.
    pub fn log(&self, agent: &str) -> MutexGuard<'_, ToolLog> {
        self.logs[agent].lock().unwrap()
    }
}

fn bearer(token: String) -> OutboundCall {
    OutboundCall {
        bearer: Some(token),
        ..OutboundCall::default()
    }
}

/// The supplier plan as saga `saga_id`, its mandate ending at `expires_at`, signed by
/// the harness's planner.
pub fn plan_as(setup: &Harness, saga_id: &str, expires_at: chrono::DateTime<chrono::Utc>) -> Value {
    let text = serde_json::to_string(&read("examples/plans/supplier-onboarding.json"))
        .unwrap()
        .replace("sg_demo_supplier_onboarding", saga_id);
    let mut plan: Value = serde_json::from_str(&text).unwrap();
    // Another window is another grant: it needs an id of its own.
    let mut mandate = grant_for(&setup.planner);
    mandate["mandateId"] = json!(format!("md_tests_until_{}", expires_at.timestamp()));
    mandate["notAfter"] = json!(expires_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    principal().sign_in_place(&mut mandate).unwrap();
    plan["mandate"] = mandate;
    setup.planner.sign_in_place(&mut plan).unwrap();
    plan
}

/// The `saga-ledger` artifact of an executor's task, with integral numbers as integers.
pub fn ledger_of(task: &Task) -> Value {
    let artifact = task
        .artifacts
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|a| a.artifact_id == "saga-ledger")
        .expect("the task carries a saga-ledger artifact");
    let mut ledger = artifact
        .parts
        .iter()
        .find_map(|p| match &p.content {
            PartContent::Data(v) => Some(v.clone()),
            _ => None,
        })
        .expect("the ledger is a data part");
    shared_types::json::normalize_integers(&mut ledger);
    ledger
}
