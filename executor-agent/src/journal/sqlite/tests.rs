//! The SQLite journal's own cases beside the conformance suite: headers and state files
//! written by older releases read as before, and recovery's reads through their index.

use super::*;

#[test]
fn a_header_journaled_before_it_carried_its_format_is_format_1() {
    let spec = serde_json::to_value(crate::saga::SagaSpec {
        saga_id: "s".into(),
        steps: Vec::new(),
        point_of_no_return: None,
        expires_at_ms: 0,
        mandate: None,
        max_parallel_steps: None,
    })
    .unwrap();
    let old = serde_json::json!({"sagaId": "s", "planVersion": 1, "taskId": "t", "contextId": "c",
                     "plan": {}, "spec": spec});
    let header: SagaHeader = serde_json::from_value(old).unwrap();
    assert_eq!(header.format, 1);
    let written = serde_json::to_value(&header).unwrap();
    assert_eq!(written["format"], super::super::JOURNAL_FORMAT);
}

#[tokio::test]
async fn a_journal_from_before_finish_times_keeps_its_finished_sagas_from_the_upgrade_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let header = r#"{"taskId": "t-1", "plan": {"mandate": {"expiresAt": "2000-01-01T00:00:00Z"}}}"#;
    let earlier = rusqlite::Connection::open(&path).unwrap();
    earlier
        .execute_batch(&format!(
            "CREATE TABLE sagas (saga_id TEXT PRIMARY KEY, header TEXT NOT NULL, finished INTEGER NOT NULL);
             CREATE TABLE entries (seq INTEGER PRIMARY KEY, saga_id TEXT NOT NULL REFERENCES sagas (saga_id), body TEXT NOT NULL);
             INSERT INTO sagas VALUES ('done', '{header}', 1), ('running', '{header}', 0);
             INSERT INTO entries (saga_id, body) VALUES ('done', '[]'), ('running', '[]');"
        ))
        .unwrap();
    drop(earlier);
    let upgraded_from = chrono::Utc::now().timestamp_millis();
    let journal = SqliteJournal::open(&path).unwrap();
    let upgraded_by = chrono::Utc::now().timestamp_millis();

    let found = journal.forgettable(upgraded_from, i64::MAX, 10).await;
    assert_eq!(found.unwrap(), [], "finished at the upgrade, not before");
    let found = journal.forgettable(upgraded_by + 1, i64::MAX, 10).await;
    let done = Forgettable {
        saga_id: "done".into(),
        task_id: "t-1".into(),
    };
    assert_eq!(found.unwrap(), [done]);
    // Each saga's task is read out of the headers journaled before the column.
    assert_eq!(
        journal
            .saga_of_task("t-1")
            .await
            .unwrap()
            .map(|(_, finished)| finished),
        Some(true),
        "the first of the two sagas on t-1"
    );

    // Asked to forget both, the journal keeps the one still running, entries and all.
    journal
        .forget(&["done".to_owned(), "running".to_owned()])
        .await
        .unwrap();
    assert_eq!(journal.unfinished().await.unwrap(), ["running"]);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let left: Vec<String> = conn
        .prepare("SELECT saga_id FROM entries")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert_eq!(left, ["running"]);
}

#[test]
fn the_sagas_to_resume_are_read_from_their_index_not_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let _journal = SqliteJournal::open(&path).unwrap();
    let conn = sagaplane_storage::sqlite::open_connection(&path, "test").unwrap();
    let details: Vec<String> = conn
        .prepare(&format!("EXPLAIN QUERY PLAN {UNFINISHED}"))
        .unwrap()
        .query_map([], |row| row.get(3))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    let plan = details.join("; ");
    assert!(
        plan.contains("sagas_unfinished") && !plan.contains("TEMP B-TREE"),
        "{plan}"
    );
}
