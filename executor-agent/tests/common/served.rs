//! An executor served as `main` serves it (`service::build` on a real listener), with the
//! six tool agents registered, for tests that attack it over HTTP.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use executor_agent::agent::DEFAULT_MAX_RUNNING_SAGAS;
use executor_agent::http::RegistrationHosts;
use executor_agent::service::{Settings, build};
use shared_types::{SigningIdentity, TrustStore};
use tokio_util::sync::CancellationToken;

use agent_host::sdk::{SendMessageResponse, Task};
use agent_host::{AgentClient, OutboundCall, mint_jwt};
use serde_json::{Value, json};

use super::{AGENTS, Fault, TOOL_TOKEN, ToolLog, data_message, read, start_tools_timed};

pub const ADMIN_TOKEN: &str = "admin-token-for-security-tests";

pub struct Served {
    pub url: String,
    /// Planner `planner-1`, who signs and sends the plans.
    pub planner: SigningIdentity,
    /// Another trusted planner, `planner-2`.
    pub other_planner: SigningIdentity,
    /// The approver `approver-1` (a person).
    pub approver: SigningIdentity,
    pub platform: SigningIdentity,
    pub logs: HashMap<String, Arc<Mutex<ToolLog>>>,
    /// The signed cards registered, in `AGENTS` order.
    pub cards: Vec<serde_json::Value>,
    /// Where saga spans go, when the settings send them.
    pub traces: Option<Arc<executor_agent::telemetry::Traces>>,
    pub shutdown: CancellationToken,
    _dir: tempfile::TempDir,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// An executor's settings as the tests' executors use them, with no planner and no
/// approver yet: the data in `data_dir`, reached at `public_url`, trusting the test
/// principal, holding the tool credentials, the admin token `ADMIN_TOKEN`.
pub fn test_settings(data_dir: std::path::PathBuf, public_url: &str) -> Settings {
    Settings {
        store: executor_agent::service::Store::DataDir(data_dir),
        executor_id: "executor".into(),
        public_url: public_url.into(),
        platform_keys: TrustStore::new(),
        planners: Vec::new(),
        approvers: Vec::new(),
        principals: vec![super::principal().public_jwk()],
        admin_token: ADMIN_TOKEN.into(),
        operator_token: None,
        otlp_endpoint: None,
        credentials: AGENTS
            .iter()
            .map(|a| (a.to_string(), TOOL_TOKEN.to_owned()))
            .collect(),
        pause_after_journal_writes: None,
        max_running_sagas: DEFAULT_MAX_RUNNING_SAGAS,
        max_parallel_steps: executor_agent::saga::spec::DEFAULT_MAX_PARALLEL_STEPS,
        undo_expiring_within: executor_agent::metrics::DEFAULT_UNDO_EXPIRING_WITHIN,
        registration_hosts: RegistrationHosts::any(),
    }
}

/// The executor as `main` serves it, with the six tool agents registered.
pub async fn serve() -> Served {
    serve_with(RegistrationHosts::any()).await
}

/// `serve`, with registrations restricted to `hosts`.
pub async fn serve_with(hosts: RegistrationHosts) -> Served {
    serve_faulty(hosts, &[]).await
}

/// `serve_with`, with `faults` injected in the tool agents.
pub async fn serve_faulty(hosts: RegistrationHosts, faults: &[(&str, Fault)]) -> Served {
    serve_configured(hosts, faults, |_| {}).await
}

/// `serve_faulty`, with the executor's settings changed by `configure` last.
pub async fn serve_configured(
    hosts: RegistrationHosts,
    faults: &[(&str, Fault)],
    configure: impl FnOnce(&mut Settings),
) -> Served {
    serve_timed(hosts, faults, 300, configure).await
}

/// `serve_configured`, with every skill's timeout set to `timeout_ms` (a call held by a
/// fault then waits that long before it counts as unanswered).
pub async fn serve_timed(
    hosts: RegistrationHosts,
    faults: &[(&str, Fault)],
    timeout_ms: u64,
    configure: impl FnOnce(&mut Settings),
) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let platform = SigningIdentity::from_seed([41; 32], Some("platform".into()));
    let planner = SigningIdentity::from_seed([42; 32], Some("planner-1".into()));
    let other_planner = SigningIdentity::from_seed([43; 32], Some("planner-2".into()));
    let approver = SigningIdentity::from_seed([44; 32], Some("approver-1".into()));
    let mut platform_keys = TrustStore::new();
    platform_keys.add_jwk(&platform.public_jwk()).unwrap();
    let (cards, logs) = start_tools_timed(faults, &platform, timeout_ms).await;
    // With an allow-list, the six tools registered below are on it (by host and port).
    let hosts = hosts.and(cards.iter().filter_map(|card| {
        let url = card.pointer("/supportedInterfaces/0/url")?.as_str()?;
        let url = reqwest::Url::parse(url).ok()?;
        Some(format!(
            "{}:{}",
            url.host_str()?,
            url.port_or_known_default()?
        ))
    }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let shutdown = CancellationToken::new();
    let mut settings = Settings {
        platform_keys,
        planners: vec![
            ("planner-1".into(), planner.public_jwk()),
            ("planner-2".into(), other_planner.public_jwk()),
        ],
        approvers: vec![("approver-1".into(), approver.public_jwk())],
        registration_hosts: hosts,
        ..test_settings(dir.path().join("data"), &url)
    };
    configure(&mut settings);
    let service = build(settings, shutdown.clone()).await.unwrap();
    let traces = service.traces.clone();
    tokio::spawn(agent_host::serve(
        listener,
        service.router,
        shutdown.clone(),
    ));
    let http = reqwest::Client::new();
    for card in &cards {
        let response = http
            .post(format!("{url}/admin/cards"))
            .bearer_auth(ADMIN_TOKEN)
            .json(card)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201);
    }
    Served {
        url,
        planner,
        other_planner,
        approver,
        platform,
        logs,
        cards,
        traces,
        shutdown,
        _dir: dir,
    }
}

impl Served {
    /// The executor's state file (journal, registry, tasks).
    pub fn state_file(&self) -> std::path::PathBuf {
        self._dir
            .path()
            .join("data")
            .join(executor_agent::state::STATE_FILE)
    }
}

pub fn calls_seen(served: &Served) -> usize {
    served
        .logs
        .values()
        .map(|l| l.lock().unwrap().calls.len())
        .sum()
}

pub async fn send(
    served: &Served,
    bearer: Option<String>,
    plan: Value,
) -> agent_host::Result<Task> {
    send_on(served, bearer, plan, None).await
}

/// Sends `data` with `bearer`, on task `task_id` when given; the task it answers with.
async fn send_on(
    served: &Served,
    bearer: Option<String>,
    data: Value,
    task_id: Option<&str>,
) -> agent_host::Result<Task> {
    let call = OutboundCall {
        bearer,
        ..OutboundCall::default()
    };
    let client = AgentClient::new(&served.url).unwrap();
    match client.send(&call, &data_message(data, task_id)).await? {
        SendMessageResponse::Task(task) => Ok(task),
        other => panic!("expected a task, got {other:?}"),
    }
}

/// Sends `data` on task `id` with `bearer`; the refusal, or the task.
pub async fn answer(
    served: &Served,
    bearer: Option<String>,
    id: &str,
    data: Value,
) -> Result<Task, agent_host::sdk::A2AError> {
    match send_on(served, bearer, data, Some(id)).await {
        Ok(task) => Ok(task),
        Err(agent_host::Error::Protocol(e)) => Err(e),
        Err(other) => panic!("expected an A2A answer, got {other:?}"),
    }
}

/// What the paused task shows it waits for approval of.
pub fn awaiting(task: &Task) -> Value {
    executor_agent::answers::awaiting_approval(task)
        .cloned()
        .expect("the task's status carries what it waits for approval of")
}

/// An approval of what `task` waits for, expiring at `expires_at`.
pub fn approval(task: &Task, expires_at: chrono::DateTime<chrono::Utc>) -> Value {
    let shown = awaiting(task);
    json!({"resolution": "approve", "approval": {
        "sagaId": shown["sagaId"], "stepId": shown["stepId"], "argsSha256": shown["argsSha256"],
        "expiresAt": expires_at.to_rfc3339(),
    }})
}

/// The approver's approval of what `task` waits for, sent on it: the task it answers with.
pub async fn approved(served: &Served, task: &Task) -> Task {
    let approval = approval(task, in_five_minutes());
    answer(served, approver_jwt(served), &task.id, approval)
        .await
        .unwrap()
}

pub fn in_five_minutes() -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now() + chrono::Duration::minutes(5)
}

/// The reason of a request refused as unauthenticated (HTTP 401).
pub fn refusal(result: agent_host::Result<Task>) -> String {
    match result {
        Err(agent_host::Error::Protocol(e)) if e.code == agent_host::auth::UNAUTHENTICATED_CODE => {
            e.message
        }
        other => panic!("expected a 401, got {other:?}"),
    }
}

pub fn planner_jwt(served: &Served, audience: &str) -> Option<String> {
    Some(mint_jwt(&served.planner, "planner-1", audience, 60).unwrap())
}

/// A JWT of the other planner, `planner-2`, for the executor.
pub fn other_planner_jwt(served: &Served) -> Option<String> {
    Some(mint_jwt(&served.other_planner, "planner-2", "executor", 60).unwrap())
}

/// A JWT of the approver, `approver-1`, for the executor.
pub fn approver_jwt(served: &Served) -> Option<String> {
    Some(mint_jwt(&served.approver, "approver-1", "executor", 60).unwrap())
}

/// The plan at `path` under `who`'s test mandate, signed by `who`.
pub fn signed_by(who: &SigningIdentity, path: &str) -> Value {
    let mut plan = read(path);
    super::sign_plan(who, &mut plan);
    plan
}

/// `POST` of `body` to one of the executor's admin routes; the status and the body.
pub async fn admin_post(served: &Served, path: &str, body: &Value) -> (u16, String) {
    let response = reqwest::Client::new()
        .post(format!("{}{path}", served.url))
        .bearer_auth(ADMIN_TOKEN)
        .json(body)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// The status line's code of what `stream` answers: all a test of a refusal needs (the
/// executor may keep the connection open).
async fn status_of(stream: &mut (impl tokio::io::AsyncRead + Unpin)) -> u16 {
    use tokio::io::AsyncReadExt;
    let mut answer = Vec::new();
    let mut buffer = [0u8; 1024];
    while !answer.windows(2).any(|w| w == b"\r\n") {
        // A guard, not a wait: an executor that read the whole body before answering
        // would never answer here.
        let read =
            tokio::time::timeout(std::time::Duration::from_secs(60), stream.read(&mut buffer))
                .await
                .expect("no answer before the body was sent")
                .unwrap();
        assert!(read > 0, "the connection closed without an answer");
        answer.extend_from_slice(&buffer[..read]);
    }
    let status_line = String::from_utf8_lossy(&answer);
    status_line
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {status_line:?}"))
}

fn address_of(served: &Served) -> String {
    served
        .url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned()
}

/// The status the executor answers a `POST path` whose headers declare a body of
/// `length` bytes, none of which is sent: a body over the limit is refused on its
/// declared length alone. (A client that sends such a body may instead see its write
/// fail, when the answer comes and the connection closes before the upload ends.)
pub async fn declared_length_status(served: &Served, path: &str, length: usize) -> u16 {
    use tokio::io::AsyncWriteExt;
    let address = address_of(served);
    let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {ADMIN_TOKEN}\r\n\
         Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    status_of(&mut stream).await
}

/// What an admin route at `path` answers to a body sent in `chunks` chunks of `size`
/// bytes, its length not declared. The chunks are written while the answer is read: the
/// executor answers once the body passes its limit and closes the connection, so a
/// client that must finish writing first (reqwest) may see only the broken pipe.
pub async fn chunked_status(served: &Served, path: &str, chunks: usize, size: usize) -> u16 {
    use tokio::io::AsyncWriteExt;
    let address = address_of(served);
    let stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    let (mut reading, mut writing) = stream.into_split();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {ADMIN_TOKEN}\r\n\
         Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    let writer = tokio::spawn(async move {
        writing.write_all(head.as_bytes()).await?;
        let chunk = [
            format!("{size:x}\r\n").into_bytes(),
            vec![b' '; size],
            b"\r\n".to_vec(),
        ]
        .concat();
        for _ in 0..chunks {
            writing.write_all(&chunk).await?;
        }
        writing.write_all(b"0\r\n\r\n").await
    });
    let status = status_of(&mut reading).await;
    // Cut off by the executor's close, or done: either way nothing more is sent.
    writer.abort();
    status
}

/// The supplier plan as saga `saga_id`, with a compliance review (whose curated card
/// requires approval) after the vendor is created, signed by planner-1.
pub fn approval_plan(served: &Served, saga_id: &str) -> Value {
    approval_plan_by(&served.planner, saga_id)
}

pub fn approval_plan_by(planner: &SigningIdentity, saga_id: &str) -> Value {
    let vendor = json!("$steps.s0.response.body#/vendorId");
    with_review(planner, saga_id, 1, vendor)
}

/// The supplier plan as saga `saga_id`, signed by planner-1, whose first step (a
/// compliance review of a vendor named in the plan) waits for an approval.
pub fn approval_first_plan(served: &Served, saga_id: &str) -> Value {
    with_review(&served.planner, saga_id, 0, json!("v_named_in_the_plan"))
}

/// The supplier plan as saga `saga_id` with a compliance review of `vendor` (which
/// requires approval) as its step `at`, signed by `planner`.
fn with_review(planner: &SigningIdentity, saga_id: &str, at: usize, vendor: Value) -> Value {
    let mut plan = supplier_as(saga_id);
    let review = json!({
        "id": "s0r", "agent": "compliance-registry", "skill": "compliance.review",
        "args": {"vendorId": vendor},
        "class": "retriable", "idempotencyKey": format!("{saga_id}:s0r"),
    });
    plan["steps"].as_array_mut().unwrap().insert(at, review);
    plan["pivotIndex"] = json!(5);
    super::sign_plan(planner, &mut plan);
    plan
}

/// The supplier plan as saga `saga_id` without its payment, signed by planner-1: no step
/// is irreversible, so its point of no return is the email (a retriable step that changes
/// something), which no pivot declares.
pub fn no_pivot_plan(served: &Served, saga_id: &str) -> Value {
    let mut plan = supplier_as(saga_id);
    let steps = plan["steps"].as_array_mut().unwrap();
    steps.retain(|s| s["skill"] != "payments.capture");
    plan.as_object_mut().unwrap().remove("pivotIndex");
    super::sign_plan(&served.planner, &mut plan);
    plan
}

/// The supplier plan as saga `saga_id`, unsigned.
pub fn supplier_as(saga_id: &str) -> Value {
    let text = serde_json::to_string(&read("examples/plans/supplier-onboarding.json"))
        .unwrap()
        .replace("sg_demo_supplier_onboarding", saga_id);
    serde_json::from_str(&text).unwrap()
}

/// The supplier plan as saga `saga_id`, signed by planner-1.
pub fn supplier_plan(served: &Served, saga_id: &str) -> Value {
    let mut plan = supplier_as(saga_id);
    super::sign_plan(&served.planner, &mut plan);
    plan
}

/// The saga paused for its approval: planner-1's task, waiting for a person.
pub async fn paused_for_approval(served: &Served, saga_id: &str) -> Task {
    let task = send(
        served,
        planner_jwt(served, "executor"),
        approval_plan(served, saga_id),
    )
    .await
    .unwrap();
    assert_eq!(
        task.status.state,
        agent_host::sdk::TaskState::InputRequired,
        "{:?}",
        task.status
    );
    task
}
