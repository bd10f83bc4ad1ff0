//! What every `TaskStore` must do, written once and run against each store (in-memory,
//! SQLite, and PostgreSQL when `SAGAPLANE_TEST_PG` names a database): reads and listings, compare-and-set writes,
//! paging by key, deletion, and concurrent writers.

use std::sync::Arc;

use chrono::{TimeZone, Utc};

use super::*;
use crate::error::Error;
use crate::sdk::{TaskState, TaskStatus};

/// Each store under test, fresh, with what keeps its file alive; PostgreSQL's in a
/// schema of `test`'s own.
async fn stores(test: &str) -> Vec<(&'static str, Arc<dyn TaskStore>, Option<tempfile::TempDir>)> {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteTaskStore::open(&dir.path().join("tasks.db")).unwrap();
    let mut stores: Vec<(&'static str, Arc<dyn TaskStore>, Option<tempfile::TempDir>)> = vec![
        ("memory", Arc::new(MemoryTaskStore::new()), None),
        ("sqlite", Arc::new(sqlite), Some(dir)),
    ];
    if let Some(url) = sagaplane_storage::postgres::testing::scratch_database(test).await {
        let db = sagaplane_storage::postgres::Postgres::connect(&url, 8).unwrap();
        let store = postgres::PostgresTaskStore::on(&db).await.unwrap();
        stores.push(("postgres", Arc::new(store), None));
    }
    stores
}

pub(crate) fn task(id: &str, context: &str, state: TaskState, second: u32) -> Task {
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

fn ids(page: &TaskPage) -> Vec<&str> {
    page.tasks.iter().map(|t| t.id.as_str()).collect()
}

fn query(limit: usize) -> TaskQuery {
    TaskQuery {
        limit,
        ..Default::default()
    }
}

/// Writes tasks `a` (c1, replaced once), `b` (c1) and `c` (c2); returns `a`'s version.
pub(super) async fn three_tasks(store: &dyn TaskStore) -> Version {
    let first = store
        .put(&task("a", "c1", TaskState::Working, 1), Expected::Absent)
        .await
        .unwrap();
    assert_eq!(first, 1, "a new task is at version 1");
    for (id, context, state, second) in [
        ("b", "c1", TaskState::Completed, 2),
        ("c", "c2", TaskState::InputRequired, 3),
    ] {
        store
            .put(&task(id, context, state, second), Expected::Absent)
            .await
            .unwrap();
    }
    store
        .put(
            &task("a", "c1", TaskState::Completed, 4),
            Expected::Version(first),
        )
        .await
        .unwrap()
}

#[tokio::test]
async fn a_task_reads_back_as_written_and_listings_filter_and_order_it() {
    for (name, store, _dir) in
        stores("a_task_reads_back_as_written_and_listings_filter_and_order_it").await
    {
        assert!(store.get("missing").await.unwrap().is_none(), "{name}");
        let version = three_tasks(store.as_ref()).await;
        assert_eq!(version, 2, "{name}: each write adds one");
        let a = store.read("a").await.unwrap().unwrap();
        assert_eq!(a.version, 2, "{name}");
        assert_eq!(a.task.status.state, TaskState::Completed, "{name}");

        let all = store.list(&query(10)).await.unwrap();
        assert_eq!(ids(&all), ["a", "c", "b"], "{name}: newest update first");
        assert_eq!((all.total, all.next), (3, None), "{name}");

        let by_context = TaskQuery {
            context_id: Some("c1".into()),
            ..query(10)
        };
        assert_eq!(
            ids(&store.list(&by_context).await.unwrap()),
            ["a", "b"],
            "{name}"
        );
        let by_state = TaskQuery {
            state: Some(TaskState::Completed),
            ..query(10)
        };
        assert_eq!(
            ids(&store.list(&by_state).await.unwrap()),
            ["a", "b"],
            "{name}"
        );
        let recent = TaskQuery {
            updated_after: Some(Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 2).unwrap()),
            ..query(10)
        };
        let recent = store.list(&recent).await.unwrap();
        assert_eq!((ids(&recent), recent.total), (vec!["a", "c"], 2), "{name}");

        store.delete(&["a".into(), "missing".into()]).await.unwrap();
        assert!(store.get("a").await.unwrap().is_none(), "{name}");
        assert_eq!(store.list(&query(10)).await.unwrap().total, 2, "{name}");
    }
}

#[tokio::test]
async fn a_write_that_expects_another_version_is_refused_and_writes_nothing() {
    for (name, store, _dir) in
        stores("a_write_that_expects_another_version_is_refused_and_writes_nothing").await
    {
        let version = three_tasks(store.as_ref()).await;
        let refused = [
            // Created twice.
            (task("b", "c1", TaskState::Failed, 9), Expected::Absent),
            // Written from a stale read.
            (
                task("a", "c1", TaskState::Failed, 9),
                Expected::Version(version - 1),
            ),
            // From a read ahead of the store.
            (
                task("a", "c1", TaskState::Failed, 9),
                Expected::Version(version + 1),
            ),
            // An update of a task the store does not have.
            (task("z", "c1", TaskState::Failed, 9), Expected::Version(1)),
        ];
        for (write, expected) in refused {
            let before = store.read(&write.id).await.unwrap();
            match store.put(&write, expected).await {
                Err(Error::Conflict { task_id }) => assert_eq!(task_id, write.id, "{name}"),
                other => panic!("{name}: {expected:?} on {} gave {other:?}", write.id),
            }
            let after = store.read(&write.id).await.unwrap();
            assert_eq!(
                before.map(|s| (s.version, s.task.status.state)),
                after.map(|s| (s.version, s.task.status.state)),
                "{name}: a refused write changes nothing"
            );
        }
        // A deleted task may be created again, and starts over.
        store.delete(&["b".into()]).await.unwrap();
        let again = store
            .put(&task("b", "c1", TaskState::Working, 10), Expected::Absent)
            .await
            .unwrap();
        assert_eq!(again, 1, "{name}");
    }
}

#[tokio::test]
async fn pages_by_key_cover_every_task_once_even_when_tasks_are_written_between_pages() {
    for (name, store, _dir) in
        stores("pages_by_key_cover_every_task_once_even_when_tasks_are_written_between_pages").await
    {
        // 25 tasks over 10 seconds: most share their second with others, so the order
        // within a second (first written, newest first) decides the pages too.
        for n in 0..25u32 {
            store
                .put(
                    &task(&format!("t{n:02}"), "c", TaskState::Working, n % 10),
                    Expected::Absent,
                )
                .await
                .unwrap();
        }
        let whole = store.list(&query(100)).await.unwrap();
        assert_eq!(whole.tasks.len(), 25, "{name}");

        let mut paged = Vec::new();
        let mut after = None;
        let mut pages = 0;
        loop {
            let page = store.list(&TaskQuery { after, ..query(7) }).await.unwrap();
            assert_eq!(page.total, 25, "{name}: the total counts every match");
            pages += 1;
            paged.extend(page.tasks.iter().map(|t| t.id.clone()));
            if pages == 1 {
                // A task of a later page is written now: it moves to the front, which
                // this listing has passed; none of the others moves.
                let moved = store.read("t00").await.unwrap().unwrap();
                let mut newer = moved.task.clone();
                newer.status.timestamp =
                    Some(Utc.with_ymd_and_hms(2026, 11, 29, 12, 1, 0).unwrap());
                store
                    .put(&newer, Expected::Version(moved.version))
                    .await
                    .unwrap();
            }
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        assert_eq!(pages, 4, "{name}: 7 + 7 + 7 + 4");
        let mut want: Vec<String> = whole.tasks.iter().map(|t| t.id.clone()).collect();
        want.retain(|id| id != "t00");
        assert_eq!(
            paged, want,
            "{name}: each once, in order, the moved one not again"
        );

        // A page that ends exactly at the last task says there is no next one.
        let exact = store
            .list(&TaskQuery {
                after: Some(PageKey {
                    updated_ms: i64::MAX,
                    seq: i64::MAX,
                }),
                ..query(25)
            })
            .await
            .unwrap();
        assert_eq!((exact.tasks.len(), exact.next), (25, None), "{name}");
    }
}

#[tokio::test]
async fn a_listing_for_an_owner_counts_and_returns_that_owners_tasks_only() {
    for (name, store, _dir) in
        stores("a_listing_for_an_owner_counts_and_returns_that_owners_tasks_only").await
    {
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
            store.put(&t, Expected::Absent).await.unwrap();
        }
        for (owner, want) in [("alice", vec!["o1"]), ("bob", vec!["o2"]), ("eve", vec![])] {
            let page = store
                .list(&TaskQuery {
                    owner: Some(owner.into()),
                    ..query(10)
                })
                .await
                .unwrap();
            assert_eq!(ids(&page), want, "{name}: {owner}");
            assert_eq!(page.total, want.len(), "{name}: {owner}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_lose_no_write_and_one_writer_wins_each_version() {
    for (name, store, _dir) in
        stores("concurrent_writers_lose_no_write_and_one_writer_wins_each_version").await
    {
        // 16 writers, each on its own task, 20 updates each.
        let mut writers = tokio::task::JoinSet::new();
        for w in 0..16u32 {
            let store = store.clone();
            writers.spawn(async move {
                let id = format!("w{w}");
                let mut version = store
                    .put(&task(&id, "c", TaskState::Working, 0), Expected::Absent)
                    .await
                    .unwrap();
                for n in 1..=20u32 {
                    version = store
                        .put(
                            &task(&id, "c", TaskState::Working, n),
                            Expected::Version(version),
                        )
                        .await
                        .unwrap();
                }
                version
            });
        }
        while let Some(version) = writers.join_next().await {
            assert_eq!(version.unwrap(), 21, "{name}");
        }
        for w in 0..16 {
            let stored = store.read(&format!("w{w}")).await.unwrap().unwrap();
            assert_eq!(stored.version, 21, "{name}");
            assert_eq!(
                stored.task.status.timestamp.map(|t| t.timestamp() % 60),
                Some(20)
            );
        }

        // 16 writers at once on one task, all from the same read: one wins.
        let mut racers = tokio::task::JoinSet::new();
        for r in 0..16u32 {
            let store = store.clone();
            racers.spawn(async move {
                let mut write = task("w0", "c", TaskState::Working, 30);
                write.context_id = format!("racer-{r}");
                store.put(&write, Expected::Version(21)).await
            });
        }
        let mut won = Vec::new();
        while let Some(outcome) = racers.join_next().await {
            match outcome.unwrap() {
                Ok(version) => won.push(version),
                Err(Error::Conflict { .. }) => {}
                Err(other) => panic!("{name}: {other}"),
            }
        }
        assert_eq!(won, [22], "{name}: exactly one writer of version 21 wins");
        let stored = store.read("w0").await.unwrap().unwrap();
        assert_eq!(stored.version, 22, "{name}");
        assert!(stored.task.context_id.starts_with("racer-"), "{name}");
    }
}
