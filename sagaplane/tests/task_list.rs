//! `sagaplane task list` against a real A2A agent holding more tasks than one page: every
//! task is listed once, and the state, context and limit filters hold.

mod common;

use std::sync::Arc;

use agent_host::sdk::{Message, Task, TaskState, TaskStatus};
use agent_host::store::Expected;
use agent_host::{
    Agent, HostConfig, InboundAuth, MemoryTaskStore, RequestContext, ServedCard, TaskHandle,
    TaskManager, TaskStore, prepare_card,
};
use common::*;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "list-test-token";

/// An agent that is only listed: no message reaches it in this test.
struct Listed;

#[async_trait::async_trait]
impl Agent for Listed {
    async fn run(&self, _: RequestContext, _: TaskHandle, _: Message) {}
}

/// Serves an agent whose store holds `tasks`; returns its URL and the token that stops it.
async fn agent_with(tasks: &[Task]) -> (String, CancellationToken) {
    let store = Arc::new(MemoryTaskStore::new());
    for task in tasks {
        store.put(task, Expected::Absent).await.unwrap();
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let auth = InboundAuth::StaticBearer {
        name: "operator".into(),
        token: TOKEN.into(),
    };
    let card = json!({
        "name": "listed", "description": "holds tasks", "version": "1.0.0",
        "supportedInterfaces": [
            {"url": "", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": "", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}
        ],
        "capabilities": {"streaming": true, "pushNotifications": false},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "listed", "name": "listed", "description": "listed", "tags": []}]
    });
    let card = prepare_card(agent_host::describe_auth(card, &auth), &url, None).unwrap();
    let config = HostConfig::new(ServedCard::new(&card).unwrap(), auth);
    let router = agent_host::app(&config, Arc::new(Listed), TaskManager::new(store));
    let shutdown = config.shutdown.clone();
    tokio::spawn(agent_host::serve(listener, router, shutdown.clone()));
    (url, shutdown)
}

fn task(n: usize, state: TaskState, context: &str) -> Task {
    Task {
        id: format!("task-{n:03}"),
        context_id: context.into(),
        status: TaskStatus {
            state,
            message: None,
            // One second apart, so the agent's order (latest update first) is total.
            timestamp: chrono_at(n),
        },
        artifacts: None,
        history: None,
        metadata: None,
    }
}

fn chrono_at(n: usize) -> Option<chrono::DateTime<chrono::Utc>> {
    let start = chrono::DateTime::parse_from_rfc3339("2026-11-30T00:00:00Z").ok()?;
    Some(start.to_utc() + chrono::Duration::seconds(n as i64))
}

/// Runs `task list` off the runtime's threads; returns stdout's lines.
async fn list(url: &str, extra: &[&str]) -> Vec<String> {
    let mut args = vec!["task", "list", "--agent", url, "--token", TOKEN];
    args.extend(extra);
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let out = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        sagaplane(&args)
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out).lines().map(str::to_owned).collect()
}

/// The task ids at the start of `lines` (the summary line has none).
fn ids(lines: &[String]) -> Vec<&str> {
    lines
        .iter()
        .filter_map(|l| {
            l.split_whitespace()
                .next()
                .filter(|w| w.starts_with("task-"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_list_reads_every_page_and_filters() {
    // 235 tasks: more than two of the agent's largest pages (100).
    let mut tasks = Vec::new();
    for n in 0..235 {
        let (state, context) = match n {
            n if n < 100 => (TaskState::InputRequired, "main"),
            n if n < 230 => (TaskState::Completed, "main"),
            _ => (TaskState::Failed, "other"),
        };
        tasks.push(task(n, state, context));
    }
    let (url, shutdown) = agent_with(&tasks).await;

    let all = list(&url, &[]).await;
    let listed = ids(&all);
    assert_eq!(listed.len(), 235, "{all:?}");
    let mut unique = listed.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), 235, "each task once");
    assert_eq!(listed[0], "task-234", "the latest update first");
    assert_eq!(all.last().map(String::as_str), Some("235 tasks"));

    let waiting = list(&url, &["--state", "input-required"]).await;
    assert_eq!(ids(&waiting).len(), 100, "{waiting:?}");
    assert!(
        waiting[..100].iter().all(|l| l.contains("INPUT_REQUIRED")),
        "{waiting:?}"
    );
    assert_eq!(
        waiting.last().map(String::as_str),
        Some("100 tasks in state input-required")
    );

    let other = list(&url, &["--context", "other"]).await;
    assert_eq!(
        ids(&other),
        ["task-234", "task-233", "task-232", "task-231", "task-230"]
    );

    let few = list(&url, &["--limit", "7"]).await;
    assert_eq!(ids(&few).len(), 7, "{few:?}");
    assert_eq!(few.last().map(String::as_str), Some("7 of 235 tasks shown"));

    let none = list(&url, &["--state", "rejected"]).await;
    assert_eq!(none, ["no tasks in state rejected"]);
    shutdown.cancel();
}

#[test]
fn task_list_refuses_a_state_it_does_not_know() {
    let out = sagaplane(&[
        "task",
        "list",
        "--agent",
        "http://127.0.0.1:9",
        "--state",
        "paused",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("input-required"), "{}", stderr(&out));
}
