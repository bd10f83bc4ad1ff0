//! Issue 25, finding 2: the planner (the real binary) rides out an executor that restarts
//! while goals are being planned. The executor here is an `agent_host` agent in the test
//! process that keeps its tasks and sagas across restarts (stopped: its port is closed,
//! every connection dropped), answers a plan sent again with the task it has (the
//! resubmission rule), and can lose the answer to a plan it took: a gateway's 502, or a
//! stream cut before its first event, as a crash right after the task's creation leaves
//! it. Every goal must end COMPLETED on exactly one saga, each submission of a saga
//! carrying the same signed plan. A refusal (401, a REJECTED plan) is not tried again.

mod common;

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_host::sdk::{
    A2AError, Message, PartContent, StreamResponse, Task, TaskState, new_message_id,
};
use agent_host::store::TaskQuery;
use agent_host::{
    Agent, AgentClient, HostConfig, InboundAuth, JwtPolicy, MemoryTaskStore, OutboundCall, Reply,
    RequestContext, ServedCard, TaskHandle, TaskManager, prepare_card,
};
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use common::*;
use futures::StreamExt;
use serde_json::{Value, json};
use shared_types::{Jwk, PlanValidator, TrustStore};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Far longer than any run here takes; only a stuck goal reaches it.
const STUCK: Duration = Duration::from_secs(60);

/// How the answer to a saga's first submission is lost.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Loss {
    /// A gateway's `502` with a plain body.
    Gateway,
    /// The stream is cut before its first event.
    Cut,
    /// Cut, and the plan sent again gets a task of its own, which points at the first
    /// (as the executor does when the copy sent again meets the first one being taken
    /// in at a restart).
    CutThenPointed,
}

/// What the executor keeps across restarts, and what the test reads of it.
#[derive(Default)]
struct Books {
    /// Each saga's task and plan, from its first task's run.
    sagas: HashMap<String, (String, Value)>,
    /// How many times each saga was run (a second task of a saga only points at its first).
    runs: HashMap<String, usize>,
    /// Every plan received, by saga id, in order.
    submissions: Vec<(String, Value)>,
    /// Plans whose signature or content the validator refused.
    invalid: usize,
    /// Plans sent under a known saga id with other content.
    conflicts: usize,
    /// Whether the answer to each saga's first submission is lost.
    lose_first_answers: bool,
    /// Sagas whose first answer was lost, and how.
    lost: HashMap<String, Loss>,
    /// Catalog reads seen, and how many more to answer with a `503`.
    catalog_reads: usize,
    catalog_errors: usize,
    /// Every plan is REJECTED (as for a violation).
    reject_plans: bool,
}

type Shared = Arc<Mutex<Books>>;

fn plan_in(message: &Message) -> Option<Value> {
    message.parts.iter().find_map(|p| match &p.content {
        PartContent::Data(v) => {
            let mut plan = v.clone();
            shared_types::json::normalize_integers(&mut plan);
            Some(plan)
        }
        _ => None,
    })
}

fn saga_of(plan: &Value) -> String {
    plan["sagaId"].as_str().unwrap_or_default().to_owned()
}

fn agent_message(text: &str, data: Option<Value>) -> Message {
    let mut parts = vec![agent_host::sdk::Part::text(text)];
    parts.extend(data.map(agent_host::sdk::Part::data));
    Message {
        message_id: new_message_id(),
        context_id: None,
        task_id: None,
        role: agent_host::sdk::Role::Agent,
        parts,
        metadata: None,
        extensions: None,
        reference_task_ids: None,
    }
}

struct Executor {
    books: Shared,
    validator: PlanValidator,
}

#[async_trait::async_trait]
impl Agent for Executor {
    async fn accept(
        &self,
        _: &RequestContext,
        message: &Message,
        task: Option<&Task>,
    ) -> Result<Reply, A2AError> {
        if task.is_some() {
            return Err(A2AError::invalid_params("no follow-up messages here"));
        }
        let plan = plan_in(message).ok_or_else(|| A2AError::invalid_params("no plan"))?;
        let saga = saga_of(&plan);
        let mut books = self.books.lock().unwrap();
        books.submissions.push((saga.clone(), plan.clone()));
        if !self
            .validator
            .validate(&plan, chrono::Utc::now())
            .is_valid()
        {
            books.invalid += 1;
        }
        let Some((task_id, accepted)) = books.sagas.get(&saga).cloned() else {
            return Ok(Reply::Task);
        };
        if accepted != plan {
            books.conflicts += 1;
            return Err(A2AError::invalid_params("PLAN_CONFLICT"));
        }
        if books.lost.get(&saga) == Some(&Loss::CutThenPointed) {
            return Ok(Reply::Task);
        }
        Ok(Reply::Existing { task_id })
    }

    async fn run(&self, _: RequestContext, task: TaskHandle, message: Message) {
        let Some(plan) = plan_in(&message) else {
            return;
        };
        let saga = saga_of(&plan);
        let (first, reject) = {
            let mut books = self.books.lock().unwrap();
            let first = books.sagas.get(&saga).map(|(id, _)| id.clone());
            if first.is_none() {
                books
                    .sagas
                    .insert(saga.clone(), (task.id().to_owned(), plan));
                *books.runs.entry(saga.clone()).or_default() += 1;
            }
            (first, books.reject_plans)
        };
        if let Some(first) = first {
            let text = format!("the same plan already runs as task {first}: follow that task");
            let data = json!({"existingTaskId": first});
            let _ = task
                .set_status(TaskState::Rejected, Some(agent_message(&text, Some(data))))
                .await;
            return;
        }
        if reject {
            let data = json!({"violations": [{"code": "MANDATE_EXCEEDED", "step": "s4",
                "message": "over the mandate"}]});
            let text = "the plan was refused with 1 violation(s)";
            let _ = task
                .set_status(TaskState::Rejected, Some(agent_message(text, Some(data))))
                .await;
            return;
        }
        let working = Some(agent_message("s0: vendor.create succeeded", None));
        let _ = task.set_status(TaskState::Working, working).await;
        let done = Some(agent_message("saga completed", None));
        let _ = task.set_status(TaskState::Completed, done).await;
    }
}

/// The saga id in a JSON-RPC request's plan, wherever the binding put it.
fn saga_in(value: &Value) -> Option<String> {
    match value {
        Value::Object(members) => members
            .get("sagaId")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| members.values().find_map(saga_in)),
        Value::Array(items) => items.iter().find_map(saga_in),
        _ => None,
    }
}

/// Lets a saga's first submission reach the executor (which creates its task), then
/// loses the answer, while `lose_first_answers` is set.
async fn lose_first_answers(State(books): State<Shared>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let value: Value = serde_json::from_slice(&bytes).unwrap_or_default();
    let loss = match saga_in(&value) {
        Some(saga) if value["method"] == "SendStreamingMessage" => {
            let mut books = books.lock().unwrap();
            if books.lose_first_answers && !books.lost.contains_key(&saga) {
                let loss = [Loss::Gateway, Loss::Cut, Loss::CutThenPointed][books.lost.len() % 3];
                books.lost.insert(saga, loss);
                Some(loss)
            } else {
                None
            }
        }
        _ => None,
    };
    let answer = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    match loss {
        None => answer,
        Some(Loss::Gateway) => (StatusCode::BAD_GATEWAY, "502 Bad Gateway").into_response(),
        Some(Loss::Cut | Loss::CutThenPointed) => {
            let cut = futures::stream::once(async {
                Err::<Bytes, _>(std::io::Error::other("the executor went away"))
            });
            (
                [(header::CONTENT_TYPE, "text/event-stream")],
                Body::from_stream(cut),
            )
                .into_response()
        }
    }
}

/// Counts catalog reads, answering `503` while `catalog_errors` lasts.
async fn count_catalog_reads(
    State(books): State<Shared>,
    request: Request,
    next: Next,
) -> Response {
    let failing = {
        let mut books = books.lock().unwrap();
        books.catalog_reads += 1;
        let failing = books.catalog_errors > 0;
        books.catalog_errors = books.catalog_errors.saturating_sub(1);
        failing
    };
    if failing {
        return (StatusCode::SERVICE_UNAVAILABLE, "restarting").into_response();
    }
    next.run(request).await
}

fn test_planner_key() -> Jwk {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/keys/test-planner.pub.jwk"),
    )
    .unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The executor's state, and its server while it runs.
struct Restartable {
    address: SocketAddr,
    url: String,
    books: Shared,
    tasks: Arc<TaskManager>,
    serving: Option<(CancellationToken, tokio::task::JoinHandle<()>)>,
}

impl Restartable {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let mut executor = Self {
            address,
            url: format!("http://{address}"),
            books: Shared::default(),
            tasks: TaskManager::new(Arc::new(MemoryTaskStore::new())),
            serving: None,
        };
        executor.serve(listener);
        executor
    }

    fn serve(&mut self, listener: TcpListener) {
        let key = test_planner_key();
        let policy = JwtPolicy::new("executor", &[("test-planner".to_owned(), key.clone())]);
        let auth = InboundAuth::Jwt(Arc::new(policy.unwrap()));
        let mut trust = TrustStore::new();
        trust.add_jwk(&key).unwrap();
        let agent = Executor {
            books: self.books.clone(),
            validator: PlanValidator::new(supplier_catalog(), trust)
                .unwrap()
                .with_principals(test_principals()),
        };
        let card = json!({"name": "executor", "description": "restartable", "version": "1",
            "supportedInterfaces": [], "capabilities": {"streaming": true},
            "defaultInputModes": [], "defaultOutputModes": [], "skills": []});
        let card = ServedCard::new(&prepare_card(card, &self.url, None).unwrap()).unwrap();
        let config = HostConfig::new(card, auth.clone());
        let books = self.books.clone();
        let catalog = axum::Router::new()
            .route("/catalog", get(|| async { axum::Json(supplier_catalog()) }))
            .layer(axum::middleware::from_fn_with_state(
                auth,
                agent_host::auth::authenticate,
            ))
            .layer(axum::middleware::from_fn_with_state(
                books.clone(),
                count_catalog_reads,
            ));
        let router = agent_host::app(&config, Arc::new(agent), self.tasks.clone())
            .layer(axum::middleware::from_fn_with_state(
                books,
                lose_first_answers,
            ))
            .merge(catalog);
        let shutdown = config.shutdown.clone();
        let served = tokio::spawn(async move {
            let _ = agent_host::serve(listener, router, shutdown).await;
        });
        self.serving = Some((config.shutdown, served));
    }

    /// Stops serving: the port is closed until `start_again`.
    async fn stop(&mut self) {
        let (shutdown, served) = self.serving.take().unwrap();
        shutdown.cancel();
        served.await.unwrap();
    }

    async fn start_again(&mut self) {
        let listener = TcpListener::bind(self.address).await.unwrap();
        self.serve(listener);
    }

    /// Every task the executor has.
    async fn all_tasks(&self) -> Vec<Task> {
        let query = TaskQuery {
            limit: 1000,
            ..TaskQuery::default()
        };
        self.tasks.store().list(&query).await.unwrap().tasks
    }
}

/// The planner binary, open on loopback, in front of `executor`.
struct Planner {
    child: Child,
    url: String,
    client: AgentClient,
    _data: tempfile::TempDir,
}

impl Drop for Planner {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Planner {
    fn start(executor: &str, executor_id: &str) -> Self {
        let data = tempfile::tempdir().unwrap();
        let key = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/keys/test-planner.jwk");
        let mut child = Command::new(env!("CARGO_BIN_EXE_planner-agent"))
            .args(["--listen", "127.0.0.1:0", "--open"])
            .arg("--mandate")
            .arg(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../examples/mandates/test-mandate.signed.json"),
            )
            .args(["--executor", executor, "--executor-id", executor_id])
            .args(["--executor-retry-secs", "20"])
            .arg("--data")
            .arg(data.path())
            .arg("--key")
            .arg(key)
            .env_remove("SAGAPLANE_PLANNER_TOKEN")
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let url = listening_url(&mut child);
        let stderr = BufReader::new(child.stderr.take().unwrap());
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                eprintln!("planner: {line}");
            }
        });
        Self {
            child,
            client: AgentClient::new(&url).unwrap(),
            url,
            _data: data,
        }
    }

    async fn task(&self, id: &str) -> Task {
        self.client
            .get_task(&OutboundCall::default(), id)
            .await
            .unwrap()
    }
}

fn texts_of(task: &Task) -> Vec<String> {
    task.history
        .iter()
        .flatten()
        .flat_map(|m| &m.parts)
        .filter_map(|p| match &p.content {
            PartContent::Text(t) => Some(t.clone()),
            _ => None,
        })
        .collect()
}

/// Streams a goal to the end; sends the planner's task id on `waiting` once its task
/// says it waits for the executor. Returns the task id.
async fn goal(planner: String, waiting: mpsc::UnboundedSender<String>) -> String {
    let client = AgentClient::new(&planner).unwrap();
    let mut events = client
        .stream(&OutboundCall::default(), &goal_request(SUPPLIER_GOAL, None))
        .await
        .unwrap();
    let mut id = None;
    let mut said = false;
    while let Some(event) = events.next().await {
        let (task_id, text) = match event.unwrap() {
            StreamResponse::Task(t) => (t.id.clone(), status_text(&t)),
            StreamResponse::StatusUpdate(u) => {
                let text = u
                    .status
                    .message
                    .as_ref()
                    .map(message_text)
                    .unwrap_or_default();
                (u.task_id.clone(), text)
            }
            _ => continue,
        };
        id.get_or_insert(task_id.clone());
        if !said && text.contains("waiting for the executor (attempt") {
            said = true;
            let _ = waiting.send(task_id);
        }
    }
    id.expect("the stream named the planner's task")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn goals_planned_across_an_executor_restart_each_end_on_exactly_one_saga() {
    const GOALS: usize = 6;
    let mut executor = Restartable::start().await;
    let planner = Planner::start(&executor.url, "executor");

    // Before the restart, a goal as usual.
    let (warm_tx, _warm_rx) = mpsc::unbounded_channel();
    let warm = goal(planner.url.clone(), warm_tx).await;
    assert_eq!(planner.task(&warm).await.status.state, TaskState::Completed);

    executor.stop().await;
    let (waiting_tx, mut waiting) = mpsc::unbounded_channel();
    let goals: Vec<_> = (0..GOALS)
        .map(|_| tokio::spawn(goal(planner.url.clone(), waiting_tx.clone())))
        .collect();
    // Every goal is being planned, and waits to read the catalog.
    let mut seen = HashSet::new();
    while seen.len() < GOALS {
        let id = tokio::time::timeout(STUCK, waiting.recv())
            .await
            .expect("every goal says it waits for the executor")
            .unwrap();
        seen.insert(id);
    }
    {
        let mut books = executor.books.lock().unwrap();
        // The first catalog read after the restart fails, and so does the first answer
        // to every plan.
        books.catalog_errors = 1;
        books.lose_first_answers = true;
    }
    executor.start_again().await;

    let mut ids = Vec::new();
    for handle in goals {
        let id = tokio::time::timeout(STUCK, handle)
            .await
            .expect("every goal ends")
            .unwrap();
        ids.push(id);
    }
    ids.push(warm);

    let mut ended = Vec::new();
    for id in &ids {
        ended.push(planner.task(id).await);
    }
    let tasks = executor.all_tasks().await;
    let books = executor.books.lock().unwrap();
    assert_eq!(books.invalid, 0, "every plan was signed and valid");
    assert_eq!(books.conflicts, 0, "no saga id came with other content");
    assert_eq!(books.lost.len(), GOALS, "{:?}", books.lost);
    assert!(
        books.catalog_reads > GOALS + 1,
        "the failed catalog read was tried again"
    );
    let mut sagas_of_goals = HashSet::new();
    for task in &ended {
        let texts = texts_of(task);
        assert_eq!(task.status.state, TaskState::Completed, "{texts:#?}");
        let plan = plan_artifact(task).unwrap();
        let saga = saga_of(&plan);
        assert!(sagas_of_goals.insert(saga.clone()), "one saga per goal");
        let (executor_task, accepted) = books.sagas.get(&saga).unwrap();
        assert_eq!(
            metadata(task, "executorTaskId"),
            Some(json!(executor_task)),
            "the planner follows the saga's task: {texts:#?}"
        );
        assert_eq!(accepted, &plan);
        assert_eq!(books.runs[&saga], 1, "the saga ran once");
        let sent: Vec<&Value> = books
            .submissions
            .iter()
            .filter(|(s, _)| *s == saga)
            .map(|(_, p)| p)
            .collect();
        if books.lost.contains_key(&saga) {
            assert!(sent.len() >= 2, "sent again after the lost answer");
            assert!(
                texts
                    .iter()
                    .any(|t| t.contains("waiting for the executor (attempt")),
                "{texts:#?}"
            );
        }
        assert!(
            sent.iter().all(|p| **p == plan),
            "the same signed plan each time"
        );
    }
    assert_eq!(books.sagas.len(), GOALS + 1);
    // The executor's tasks: one per saga, and for the plans sent again while their first
    // copy was taken in, one that points at it.
    let pointed = books
        .lost
        .values()
        .filter(|l| **l == Loss::CutThenPointed)
        .count();
    drop(books);
    let pointers = tasks
        .iter()
        .filter(|t| t.status.state == TaskState::Rejected)
        .count();
    let completed = tasks
        .iter()
        .filter(|t| t.status.state == TaskState::Completed)
        .count();
    assert_eq!(completed, GOALS + 1);
    assert_eq!(pointers, pointed);
    assert_eq!(tasks.len(), GOALS + 1 + pointed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_is_not_tried_again() {
    let executor = Restartable::start().await;

    // JWTs for another audience: the catalog answers 401, once.
    let planner = Planner::start(&executor.url, "someone-else");
    let task = send(&planner.client, SUPPLIER_GOAL, None).await;
    let texts = texts_of(&planner.task(&task.id).await);
    assert_eq!(task.status.state, TaskState::Failed, "{texts:#?}");
    assert!(status_text(&task).contains("401"), "{}", status_text(&task));
    assert!(
        !texts.iter().any(|t| t.contains("waiting for the executor")),
        "{texts:#?}"
    );
    assert_eq!(executor.books.lock().unwrap().catalog_reads, 1);
    drop(planner);

    // A REJECTED plan: submitted once.
    executor.books.lock().unwrap().reject_plans = true;
    let planner = Planner::start(&executor.url, "executor");
    let task = send(&planner.client, SUPPLIER_GOAL, None).await;
    let texts = texts_of(&planner.task(&task.id).await);
    assert_eq!(task.status.state, TaskState::Rejected, "{texts:#?}");
    assert!(
        !texts.iter().any(|t| t.contains("waiting for the executor")),
        "{texts:#?}"
    );
    assert_eq!(executor.books.lock().unwrap().submissions.len(), 1);
}

/// The principal the example mandate is signed by.
fn test_principals() -> TrustStore {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/keys/test-principal.pub.jwk");
    let jwk: Jwk = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut trust = TrustStore::new();
    trust.add_jwk(&jwk).unwrap();
    trust
}
