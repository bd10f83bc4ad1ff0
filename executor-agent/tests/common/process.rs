//! The real `executor-agent` binary as a process for the tests: the keys and files every
//! run shares (`World`), an executor started on a data directory or a PostgreSQL database,
//! killed, stopped and read from its stderr, and a saga followed to its end through A2A.

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use agent_host::sdk::{SendMessageRequest, SendMessageResponse, StreamResponse, Task, TaskState};
use agent_host::{AgentClient, OutboundCall, mint_jwt};
use futures::StreamExt;
use serde_json::{Value, json};
use shared_types::SigningIdentity;
use tokio::sync::mpsc;

use super::{AGENTS, TOOL_TOKEN, ToolLog, data_message, principal, read};

/// Far longer than any run here takes; only a stuck saga reaches it.
pub const STUCK: std::time::Duration = std::time::Duration::from_secs(30);
pub const ADMIN_TOKEN: &str = "admin-token-for-crash-tests";

/// Keys, cards and credentials shared by every run.
pub struct World {
    pub dir: tempfile::TempDir,
    pub platform: SigningIdentity,
    pub planner: SigningIdentity,
    /// The plan every run submits (the supplier-onboarding example unless `with_plan`).
    pub plan: &'static str,
}

impl World {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let platform = SigningIdentity::from_seed([31; 32], Some("platform".into()));
        let planner = SigningIdentity::from_seed([32; 32], Some("planner-1".into()));
        let write = |name: &str, value: Value| {
            std::fs::write(dir.path().join(name), value.to_string()).unwrap();
        };
        write(
            "platform.pub.jwk",
            serde_json::to_value(platform.public_jwk()).unwrap(),
        );
        write(
            "planner.pub.jwk",
            serde_json::to_value(planner.public_jwk()).unwrap(),
        );
        write(
            "principal.pub.jwk",
            serde_json::to_value(principal().public_jwk()).unwrap(),
        );
        let credentials: serde_json::Map<String, Value> = AGENTS
            .iter()
            .map(|a| (a.to_string(), json!(TOOL_TOKEN)))
            .collect();
        write("credentials.json", Value::Object(credentials));
        Self {
            dir,
            platform,
            planner,
            plan: "examples/plans/supplier-onboarding.json",
        }
    }

    /// A world whose runs submit the plan at `path`.
    pub fn with_plan(path: &'static str) -> Self {
        Self {
            plan: path,
            ..Self::new()
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// A running executor process.
pub struct Executor {
    pub child: Child,
    pub url: String,
    /// Lines the process writes to stderr.
    pub stderr: mpsc::UnboundedReceiver<String>,
}

impl Drop for Executor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Executor {
    pub fn start(world: &World, data: &Path, pause_after: Option<u64>) -> Self {
        Self::start_logging(world, data, pause_after, "warn", &[])
    }

    /// `start`, with `RUST_LOG` set to `log` and `extra` arguments.
    pub fn start_logging(
        world: &World,
        data: &Path,
        pause_after: Option<u64>,
        log: &str,
        extra: &[&str],
    ) -> Self {
        Self::start_on(
            world,
            [OsStr::new("--data"), data.as_os_str()],
            pause_after,
            log,
            extra,
        )
    }

    /// A replica on the PostgreSQL database at `url`, logging at `log`, with `extra`
    /// arguments.
    pub fn replica(world: &World, url: &str, log: &str, extra: &[&str]) -> Self {
        Self::start_on(
            world,
            [OsStr::new("--store"), OsStr::new(url)],
            None,
            log,
            extra,
        )
    }

    fn start_on(
        world: &World,
        store: [&OsStr; 2],
        pause_after: Option<u64>,
        log: &str,
        extra: &[&str],
    ) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_executor-agent"));
        command
            .args(["--listen", "127.0.0.1:0"])
            .args(store)
            .arg("--platform-key")
            .arg(world.path("platform.pub.jwk"))
            .arg("--planner")
            .arg(world.path("planner.pub.jwk"))
            .arg("--principal")
            .arg(world.path("principal.pub.jwk"))
            .arg("--credentials")
            .arg(world.path("credentials.json"))
            .env("SAGAPLANE_ADMIN_TOKEN", ADMIN_TOKEN)
            .args(extra)
            .env("RUST_LOG", log)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(n) = pause_after {
            command.args(["--pause-after-journal-writes", &n.to_string()]);
        }
        let mut child = command.spawn().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        let (tx, stderr) = mpsc::unbounded_channel();
        let err = BufReader::new(child.stderr.take().unwrap());
        std::thread::spawn(move || {
            for line in err.lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Self { child, url, stderr }
    }

    /// SIGKILL: no chance to flush or finish anything.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    pub fn client(&self) -> AgentClient {
        AgentClient::new(&self.url).unwrap()
    }

    /// Waits until the process reports that it paused after a journal write.
    pub async fn paused(&mut self) -> bool {
        self.said("pausing for a crash test").await
    }

    /// Waits until the process writes a line containing `words` on stderr; `false` if it
    /// ends first.
    pub async fn said(&mut self, words: &str) -> bool {
        self.line_saying(words).await.is_some()
    }

    /// The first line from now on stderr that contains `words`; `None` if the process
    /// ends first.
    pub async fn line_saying(&mut self, words: &str) -> Option<String> {
        while let Some(line) = self.stderr.recv().await {
            eprintln!("executor: {line}");
            if line.contains(words) {
                return Some(line);
            }
        }
        None
    }

    /// SIGTERM, as a service manager stops a process.
    pub fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
}

pub async fn register(executor: &Executor, cards: &[Value]) {
    let http = reqwest::Client::new();
    for card in cards {
        let response = http
            .post(format!("{}/admin/cards", executor.url))
            .bearer_auth(ADMIN_TOKEN)
            .json(card)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201, "{}", response.text().await.unwrap());
    }
}

pub fn as_planner(world: &World) -> OutboundCall {
    OutboundCall {
        bearer: Some(mint_jwt(&world.planner, "planner-1", "executor", 60).unwrap()),
        ..OutboundCall::default()
    }
}

pub fn plan_message(world: &World) -> SendMessageRequest {
    let mut plan = read(world.plan);
    super::sign_plan(&world.planner, &mut plan);
    data_message(plan, None)
}

/// Submits the plan (again): returns the saga's task as it stands when the call returns.
pub async fn submit(world: &World, executor: &Executor) -> Task {
    match executor
        .client()
        .send(&as_planner(world), &plan_message(world))
        .await
        .unwrap()
    {
        SendMessageResponse::Task(task) => task,
        other => panic!("expected a task, got {other:?}"),
    }
}

/// Follows a task until it stops (terminal or waiting for a person).
pub async fn settle(world: &World, executor: &Executor, task: Task) -> Task {
    if task.status.state.is_terminal() || task.status.state == TaskState::InputRequired {
        return task;
    }
    let client = executor.client();
    // A task that ends before the subscription starts cannot be subscribed to: then
    // GetTask below shows its end.
    if let Ok(mut stream) = client.subscribe(&as_planner(world), &task.id).await {
        // A saga that never reports its end again would hang here: fail instead.
        while let Some(event) = tokio::time::timeout(STUCK, stream.next())
            .await
            .unwrap_or_else(|_| panic!("task {} stuck: {:?}", task.id, task.status))
        {
            if let Ok(StreamResponse::StatusUpdate(update)) = event {
                let state = update.status.state.clone();
                if state.is_terminal() || state == TaskState::InputRequired {
                    break;
                }
            }
        }
    }
    client.get_task(&as_planner(world), &task.id).await.unwrap()
}

/// What must be the same after a crash: the task's state and outcome, each step's forward
/// and undo state, and the set of effects every tool applied.
#[derive(Debug, PartialEq)]
pub struct Ending {
    pub state: TaskState,
    pub outcome: Option<Value>,
    pub steps: Vec<(String, String, String)>,
    pub effects: BTreeSet<String>,
}

pub fn ending(task: &Task, logs: &HashMap<String, Arc<Mutex<ToolLog>>>) -> Ending {
    let ledger = task
        .artifacts
        .iter()
        .flatten()
        .find(|a| a.artifact_id == "saga-ledger")
        .map(|a| serde_json::to_value(&a.parts[0]).unwrap())
        .unwrap_or_default();
    let steps = ledger
        .pointer("/data/steps")
        .and_then(Value::as_array)
        .map(|steps| {
            steps
                .iter()
                .map(|s| {
                    (
                        s["step"].as_str().unwrap_or_default().to_owned(),
                        s["forward"]["state"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                        s["undo"]["state"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let mut effects = BTreeSet::new();
    for log in logs.values() {
        for (key, _) in &log.lock().unwrap().effects {
            assert!(effects.insert(key.clone()), "{key} applied twice");
        }
    }
    Ending {
        state: task.status.state.clone(),
        outcome: task
            .metadata
            .as_ref()
            .and_then(|m| m.get("outcome").cloned()),
        steps,
        effects,
    }
}

/// Waits until `agent` has received a call under `key`.
pub async fn called(logs: &HashMap<String, Arc<Mutex<ToolLog>>>, agent: &str, key: &str) {
    let signal = logs[agent].lock().unwrap().called.clone();
    loop {
        {
            let log = logs[agent].lock().unwrap();
            if log.calls.iter().any(|c| c.0 == key) {
                return;
            }
        }
        signal.notified().await;
    }
}

/// Waits until `agent` has applied the effect under `key`.
pub async fn applied(logs: &HashMap<String, Arc<Mutex<ToolLog>>>, agent: &str, key: &str) {
    let signal = logs[agent].lock().unwrap().applied.clone();
    loop {
        signal.notified().await;
        let log = logs[agent].lock().unwrap();
        if log.effects.iter().any(|(k, _)| k == key) {
            return;
        }
    }
}
