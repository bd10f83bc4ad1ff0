//! The same behaviour from every `TaskStore`, and durability of the SQLite one.

use std::sync::Arc;

use chrono::{TimeZone, Utc};

use super::*;
use crate::sdk::{TaskState, TaskStatus};

fn task(id: &str, context: &str, state: TaskState, second: u32) -> Task {
    Task {
        id: id.into(),
        context_id: context.into(),
        status: TaskStatus {
            state,
            message: None,
            timestamp: Some(Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, second).unwrap()),
        },
        artifacts: None,
        history: None,
        metadata: None,
    }
}

async fn behaves_like_a_store(store: Arc<dyn TaskStore>) {
    assert!(store.get("missing").await.unwrap().is_none());
    store
        .put(&task("a", "c1", TaskState::Working, 1))
        .await
        .unwrap();
    store
        .put(&task("b", "c1", TaskState::Completed, 2))
        .await
        .unwrap();
    store
        .put(&task("c", "c2", TaskState::InputRequired, 3))
        .await
        .unwrap();
    // Replacing keeps one row per task.
    store
        .put(&task("a", "c1", TaskState::Completed, 4))
        .await
        .unwrap();
    assert_eq!(
        store.get("a").await.unwrap().unwrap().status.state,
        TaskState::Completed
    );

    let all = store
        .list(&TaskQuery {
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    let ids: Vec<&str> = all.tasks.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["a", "c", "b"], "newest update first");
    assert_eq!(all.total, 3);

    let by_context = store
        .list(&TaskQuery {
            context_id: Some("c1".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(by_context.total, 2);
    let by_state = store
        .list(&TaskQuery {
            state: Some(TaskState::Completed),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        by_state
            .tasks
            .iter()
            .map(|t| t.id.as_str())
            .collect::<Vec<_>>(),
        ["a", "b"]
    );
    let recent = store
        .list(&TaskQuery {
            updated_after: Some(Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 2).unwrap()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(recent.total, 2);
    let page = store
        .list(&TaskQuery {
            offset: 1,
            limit: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(page.tasks.len(), 1);
    assert_eq!(page.tasks[0].id, "c");
    assert_eq!(page.total, 3);
}

/// A listing limited to an owner counts and returns that owner's tasks only.
async fn lists_by_owner(store: Arc<dyn TaskStore>) {
    for (id, owner, second) in [
        ("o1", Some("alice"), 1),
        ("o2", Some("bob"), 2),
        ("o3", None, 3),
    ] {
        let mut t = task(id, "c", TaskState::Working, second);
        t.metadata = owner.map(|o| {
            [(
                crate::agent::OWNER_METADATA.to_owned(),
                serde_json::json!(o),
            )]
            .into()
        });
        store.put(&t).await.unwrap();
    }
    for (owner, want) in [("alice", vec!["o1"]), ("bob", vec!["o2"]), ("eve", vec![])] {
        let page = store
            .list(&TaskQuery {
                owner: Some(owner.into()),
                limit: 10,
                ..Default::default()
            })
            .await
            .unwrap();
        let ids: Vec<&str> = page.tasks.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(ids, want, "{owner}");
        assert_eq!(page.total, want.len(), "{owner}");
    }
}

#[tokio::test]
async fn both_stores_list_by_owner() {
    lists_by_owner(Arc::new(MemoryTaskStore::new())).await;
    let dir = tempfile::tempdir().unwrap();
    lists_by_owner(Arc::new(
        SqliteTaskStore::open(&dir.path().join("tasks.db")).unwrap(),
    ))
    .await;
}

#[tokio::test]
async fn memory_store() {
    behaves_like_a_store(Arc::new(MemoryTaskStore::new())).await;
}

#[tokio::test]
async fn sqlite_store_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks.db");
    behaves_like_a_store(Arc::new(SqliteTaskStore::open(&path).unwrap())).await;
    let reopened = SqliteTaskStore::open(&path).unwrap();
    assert_eq!(
        reopened.get("c").await.unwrap().unwrap().status.state,
        TaskState::InputRequired
    );
    assert_eq!(
        reopened
            .list(&TaskQuery {
                limit: 10,
                ..Default::default()
            })
            .await
            .unwrap()
            .total,
        3
    );
}

#[tokio::test]
async fn sqlite_refuses_an_unusable_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("not-a-db");
    std::fs::write(
        &path,
        b"this is not sqlite, and it is long enough to have a header",
    )
    .unwrap();
    assert!(SqliteTaskStore::open(&path).is_err());
}
