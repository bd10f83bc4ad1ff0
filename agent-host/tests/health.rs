//! The health probes: open while A2A needs a token, ready until the agent stops or its
//! state file cannot be written (a real SQLite file that may not grow: a full disk).

mod common;

use std::sync::Arc;

use agent_host::sdk::{Message, Part, Role, Task, TaskState, TaskStatus, new_message_id};
use agent_host::store::Expected;
use agent_host::{
    HostConfig, InboundAuth, ServedCard, SqliteTaskStore, TaskManager, TaskStore, app, prepare_card,
};
use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::{EchoAgent, card, rpc, start};
use http_body_util::BodyExt;
use sagaplane_storage::sqlite::Database;
use serde_json::{Value, json};
use tower::ServiceExt;

async fn probe(router: &axum::Router, path: &str) -> (StatusCode, Value) {
    let response = router
        .clone()
        .oneshot(Request::get(path).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&body).unwrap())
}

fn bearer() -> InboundAuth {
    InboundAuth::StaticBearer {
        name: "caller".into(),
        token: "secret".into(),
    }
}

#[tokio::test]
async fn probes_need_no_token_where_a2a_does() {
    let agent = start(bearer()).await;
    let client = reqwest::Client::new();
    let live = client
        .get(format!("{}/healthz", agent.url))
        .send()
        .await
        .unwrap();
    assert_eq!(live.status(), 200);
    assert_eq!(
        live.json::<Value>().await.unwrap(),
        json!({"status": "live"})
    );
    let ready = client
        .get(format!("{}/readyz", agent.url))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
    assert_eq!(
        ready.json::<Value>().await.unwrap(),
        json!({"status": "ready"})
    );
    let (status, _) = rpc(&agent.url, "ListTasks", json!({}), None).await;
    assert_eq!(status, 401, "A2A itself still needs the token");
    agent.shutdown.cancel();
}

/// A task whose history alone needs more pages than the file may take.
fn big_task(id: &str) -> Task {
    let message = Message {
        message_id: new_message_id(),
        context_id: None,
        task_id: None,
        role: Role::User,
        parts: vec![Part::text("x".repeat(64 * 1024))],
        metadata: None,
        extensions: None,
        reference_task_ids: None,
    };
    Task {
        id: id.into(),
        context_id: "c".into(),
        status: TaskStatus {
            state: TaskState::Submitted,
            message: None,
            timestamp: None,
        },
        artifacts: None,
        history: Some(vec![message]),
        metadata: None,
    }
}

#[tokio::test]
async fn not_ready_while_the_state_file_cannot_grow_and_while_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(&dir.path().join("tasks.db"), "task-store").unwrap();
    let store = Arc::new(SqliteTaskStore::on(&db).unwrap());
    let config = HostConfig::new(
        ServedCard::new(&prepare_card(card(), "http://127.0.0.1:9", None).unwrap()).unwrap(),
        bearer(),
    );
    let router = app(
        &config,
        Arc::new(EchoAgent),
        TaskManager::new(store.clone()),
    );
    assert_eq!(probe(&router, "/readyz").await.0, StatusCode::OK);

    // The file may not grow past its size now, as on a full disk.
    let cap = |pages: u32| {
        move |tx: &rusqlite::Transaction<'_>| {
            tx.execute_batch(&format!("PRAGMA max_page_count = {pages}"))
        }
    };
    db.submit(cap(1)).await.unwrap();
    store
        .put(&big_task("t-1"), Expected::Absent)
        .await
        .unwrap_err();
    let (status, body) = probe(&router, "/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let reasons = body["reasons"].to_string();
    assert!(
        reasons.contains("the task store cannot write") && reasons.contains("full"),
        "{body}"
    );
    assert_eq!(
        probe(&router, "/healthz").await.0,
        StatusCode::OK,
        "still live"
    );

    // Room again: the next write lands, and the agent is ready.
    db.submit(cap(1_000_000)).await.unwrap();
    store.put(&big_task("t-1"), Expected::Absent).await.unwrap();
    assert_eq!(probe(&router, "/readyz").await.0, StatusCode::OK);

    config.shutdown.cancel();
    let (status, body) = probe(&router, "/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["reasons"], json!(["stopping"]));
}
