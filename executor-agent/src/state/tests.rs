//! The state file: the earlier layout's files are imported once, whole.

use agent_host::TaskStore;
use agent_host::sdk::{Task, TaskState, TaskStatus};
use shared_types::TrustStore;

use super::*;
use crate::journal::{Headers, SagaHeader, SagaLog, SqliteJournal};
use crate::registry::Registry;
use crate::saga::SagaSpec;

fn header(saga_id: &str) -> SagaHeader {
    SagaHeader {
        format: crate::journal::JOURNAL_FORMAT,
        saga_id: saga_id.into(),
        plan_version: 1,
        task_id: format!("task-{saga_id}"),
        context_id: format!("ctx-{saga_id}"),
        plan: serde_json::json!({"sagaId": saga_id}).into(),
        spec: SagaSpec {
            saga_id: saga_id.into(),
            steps: Vec::new(),
            point_of_no_return: None,
            expires_at_ms: 0,
            mandate: None,
            max_parallel_steps: None,
        }
        .into(),
        registrations_read: None,
    }
}

fn task(id: &str) -> Task {
    Task {
        id: id.into(),
        context_id: format!("ctx-{id}"),
        status: TaskStatus {
            state: TaskState::Working,
            message: None,
            timestamp: None,
        },
        artifacts: None,
        history: None,
        metadata: None,
    }
}

/// A data directory of the earlier layout: an unfinished saga, a task, a card row.
async fn earlier_layout(dir: &Path) {
    let journal = SqliteJournal::open(&dir.join("journal.db")).unwrap();
    journal.begin(&header("sg_1"), &[]).await.unwrap();
    let tasks = agent_host::SqliteTaskStore::open(&dir.join("tasks.db")).unwrap();
    tasks
        .put(&task("task-sg_1"), agent_host::store::Expected::Absent)
        .await
        .unwrap();
    drop(Registry::open(&dir.join("registry.db"), TrustStore::new()).unwrap());
    open_connection(&dir.join("registry.db"), "registry")
        .unwrap()
        .execute(
            "INSERT INTO cards (name, card) VALUES ('vendor-registry', '{}')",
            [],
        )
        .unwrap();
}

fn count(db: &Database, table: &str) -> i64 {
    open_connection(db.path(), "test")
        .unwrap()
        .query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0))
        .unwrap()
}

#[tokio::test]
async fn the_earlier_files_are_imported_once() {
    let dir = tempfile::tempdir().unwrap();
    earlier_layout(dir.path()).await;

    let db = open(dir.path()).unwrap();
    assert_eq!(db.path(), dir.path().join(STATE_FILE));
    // The indexes came along with the tables (read before any store could make them).
    let indexes: i64 = open_connection(db.path(), "test")
        .unwrap()
        .query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name IN (
                 'entries_by_saga', 'sagas_unfinished', 'sagas_by_finish',
                 'tasks_by_update', 'tasks_by_state', 'tasks_by_context')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(indexes, 6);
    // Each store's schema version came along with its tables.
    let versions: Vec<(String, i64)> = open_connection(db.path(), "test")
        .unwrap()
        .prepare("SELECT store, version FROM schema_versions ORDER BY store")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    let stores: Vec<&str> = versions.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(stores, ["journal", "mandates", "registry", "task"]);
    assert!(versions.iter().all(|(_, v)| *v > 0), "{versions:?}");
    let journal = SqliteJournal::on(&db).unwrap();
    assert_eq!(journal.unfinished().await.unwrap(), ["sg_1"]);
    assert_eq!(journal.header("sg_1").await.unwrap(), Some(header("sg_1")));
    let tasks = agent_host::SqliteTaskStore::on(&db).unwrap();
    assert_eq!(
        tasks.get("task-sg_1").await.unwrap(),
        Some(task("task-sg_1"))
    );
    assert_eq!(count(&db, "cards"), 1);

    // New writes go to the state file; opening it again imports nothing a second time.
    journal.begin(&header("sg_2"), &[]).await.unwrap();
    drop((journal, tasks, db));
    let db = open(dir.path()).unwrap();
    assert_eq!(count(&db, "sagas"), 2);
    assert_eq!(count(&db, "tasks"), 1);
    assert_eq!(count(&db, "cards"), 1);
}

#[tokio::test]
async fn an_import_cut_short_is_done_again() {
    let dir = tempfile::tempdir().unwrap();
    earlier_layout(dir.path()).await;
    // What a start that died while importing leaves: a partial file under another name.
    let partial = dir.path().join(STATE_FILE).with_extension("db.importing");
    open_connection(&partial, "test")
        .unwrap()
        .execute_batch("CREATE TABLE cards (name TEXT PRIMARY KEY, card TEXT NOT NULL);")
        .unwrap();

    let db = open(dir.path()).unwrap();
    assert!(!partial.exists());
    assert_eq!(count(&db, "cards"), 1);
    assert_eq!(count(&db, "sagas"), 1);
}

#[tokio::test]
async fn a_new_data_directory_starts_with_the_state_file_alone() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path()).unwrap();
    let _journal = SqliteJournal::on(&db).unwrap();
    for name in EARLIER_FILES {
        assert!(!dir.path().join(name).exists(), "{name}");
    }
    assert!(dir.path().join(STATE_FILE).exists());
}

#[tokio::test]
async fn a_second_executor_on_the_same_data_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path()).unwrap();
    let journal = SqliteJournal::on(&db).unwrap();
    let refused = open(dir.path()).unwrap_err().to_string();
    assert!(refused.contains("in use"), "{refused}");
    assert!(refused.contains("executor.db.lock"), "{refused}");
    // The lock goes with the last handle on the file.
    drop((db, journal));
    open(dir.path()).unwrap();
}
