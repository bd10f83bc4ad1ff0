//! What only the SQLite store does: durability across a reopen, the schema versions of
//! its file, and refusing a file that is not a database. The behaviour every store
//! shares is in `conformance.rs`.

use super::conformance::three_tasks;
use super::*;
use crate::sdk::TaskState;

#[tokio::test]
async fn a_reopened_sqlite_store_holds_what_was_written_with_its_versions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks.db");
    three_tasks(&SqliteTaskStore::open(&path).unwrap()).await;
    let reopened = SqliteTaskStore::open(&path).unwrap();
    let c = reopened.read("c").await.unwrap().unwrap();
    assert_eq!(
        (c.task.status.state, c.version),
        (TaskState::InputRequired, 1)
    );
    assert_eq!(reopened.read("a").await.unwrap().unwrap().version, 2);
    let all = reopened
        .list(&TaskQuery {
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(all.total, 3);
}

#[tokio::test]
async fn a_store_from_before_versions_is_migrated_and_its_tasks_start_at_version_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks.db");
    // The table as binaries before schema versions made it, with one task.
    let body = serde_json::to_string(&super::conformance::task("old", "c", TaskState::Working, 1))
        .unwrap();
    let conn = sagaplane_storage::sqlite::open_connection(&path, "test").unwrap();
    conn.execute_batch(
        "CREATE TABLE tasks (
             seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, context_id TEXT NOT NULL,
             state TEXT NOT NULL, updated_ms INTEGER NOT NULL, body TEXT NOT NULL
         );
         CREATE INDEX tasks_by_update ON tasks (updated_ms DESC, seq DESC);
         CREATE INDEX tasks_by_context ON tasks (context_id);",
    )
    .unwrap();
    conn.execute(
        "INSERT INTO tasks (id, context_id, state, updated_ms, body) VALUES ('old', 'c', 'TASK_STATE_WORKING', 1, ?1)",
        [body],
    )
    .unwrap();
    drop(conn);

    let store = SqliteTaskStore::open(&path).unwrap();
    let old = store.read("old").await.unwrap().unwrap();
    assert_eq!(old.version, 1);
    let mut next = old.task.clone();
    next.status.state = TaskState::Completed;
    assert_eq!(store.put(&next, Expected::Version(1)).await.unwrap(), 2);
    let conn = sagaplane_storage::sqlite::open_connection(&path, "test").unwrap();
    assert_eq!(
        sagaplane_storage::schema::version(&conn, "task").unwrap(),
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
