//! What every journal must do, written once and run against each (SQLite and in memory
//! now; PostgreSQL next): append order, the header lookup, recovery's reads, claims and
//! leases, fencing, and concurrent writers. `owners` gives two journals on one state,
//! each its own owner, with a lease of `LEASE`.

use std::time::Duration;

use serde_json::json;

use super::{Claim, Entry, Journal, SagaHeader};
use crate::Error;
use crate::saga::{Event, SagaSpec};

pub const LEASE: Duration = Duration::from_secs(60);
const LEASE_MS: i64 = 60_000;

fn header(saga_id: &str) -> SagaHeader {
    SagaHeader {
        format: super::JOURNAL_FORMAT,
        saga_id: saga_id.into(),
        plan_version: 1,
        task_id: format!("task-{saga_id}"),
        context_id: format!("ctx-{saga_id}"),
        plan: json!({}),
        spec: SagaSpec {
            saga_id: saga_id.into(),
            steps: Vec::new(),
            point_of_no_return: None,
            expires_at_ms: 0,
            mandate: None,
        },
    }
}

fn event(n: i64) -> Entry {
    Entry::Event(Event::Cancel { now_ms: n })
}

fn now() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

pub async fn appends_load_in_order_with_their_header(journal: &dyn Journal) {
    let epoch = journal.begin(&header("order"), &[event(0)]).await.unwrap();
    journal
        .append("order", epoch, &[event(1), event(2)])
        .await
        .unwrap();
    journal.append("order", epoch, &[event(3)]).await.unwrap();
    let (read, entries) = journal.load("order").await.unwrap().unwrap();
    assert_eq!(read, header("order"));
    assert_eq!(entries, [event(0), event(1), event(2), event(3)]);
    assert_eq!(
        journal.header("order").await.unwrap(),
        Some(header("order"))
    );
    assert_eq!(journal.header("never").await.unwrap(), None);
    assert!(journal.load("never").await.unwrap().is_none());
    // A saga id is begun once.
    assert!(journal.begin(&header("order"), &[]).await.is_err());
}

pub async fn recovery_reads_the_unfinished_sagas_only(journal: &dyn Journal) {
    journal.begin(&header("running"), &[]).await.unwrap();
    journal.begin(&header("done"), &[]).await.unwrap();
    journal.finish("done", 0).await.unwrap();
    let unfinished = journal.unfinished().await.unwrap();
    assert!(unfinished.contains(&"running".to_owned()), "{unfinished:?}");
    assert!(!unfinished.contains(&"done".to_owned()), "{unfinished:?}");
    assert_eq!(journal.is_finished("done").await.unwrap(), Some(true));
    assert_eq!(journal.is_finished("running").await.unwrap(), Some(false));
    assert_eq!(journal.is_finished("never").await.unwrap(), None);
    // Only finished sagas are forgotten.
    journal
        .forget(&["done".to_owned(), "running".to_owned()])
        .await
        .unwrap();
    assert!(journal.header("done").await.unwrap().is_none());
    assert!(journal.header("running").await.unwrap().is_some());
}

pub async fn a_write_under_a_stale_epoch_is_refused_by_the_store(
    first: &dyn Journal,
    second: &dyn Journal,
) {
    let old = first.begin(&header("fenced"), &[event(0)]).await.unwrap();
    let new = second
        .claim("fenced", now(), Claim::TakeOver)
        .await
        .unwrap()
        .expect("taken over");
    assert!(new > old);
    match first.append("fenced", old, &[event(1)]).await {
        Err(Error::Fenced { saga_id, epoch }) => {
            assert_eq!((saga_id.as_str(), epoch), ("fenced", old));
        }
        other => panic!("a stale owner's write must be refused: {other:?}"),
    }
    // The same epoch from another owner is no better.
    assert!(matches!(
        first.append("fenced", new, &[event(1)]).await,
        Err(Error::Fenced { .. })
    ));
    second.append("fenced", new, &[event(2)]).await.unwrap();
    let (_, entries) = second.load("fenced").await.unwrap().unwrap();
    assert_eq!(entries, [event(0), event(2)], "nothing of the stale writes");
}

pub async fn a_claim_takes_a_saga_only_when_its_lease_lapsed_or_it_is_free(
    first: &dyn Journal,
    second: &dyn Journal,
) {
    let t = now();
    let epoch = first.begin(&header("held"), &[]).await.unwrap();
    // Held by a live owner: not claimable, and a claim that waits for a lapse gets nothing.
    assert!(
        !second
            .claimable(t, 100)
            .await
            .unwrap()
            .contains(&"held".to_owned())
    );
    assert_eq!(
        second.claim("held", t, Claim::IfLapsed).await.unwrap(),
        None
    );
    // Renewed at t + LEASE/2, it is still held at t + LEASE + 1.
    let half = t + LEASE_MS / 2;
    assert!(first.renew(half).await.unwrap() >= 1);
    assert_eq!(
        second
            .claim("held", t + LEASE_MS + 1, Claim::IfLapsed)
            .await
            .unwrap(),
        None
    );
    // Past the renewed lease, anyone may take it, at a higher epoch.
    let lapsed = half + LEASE_MS + 1;
    assert!(
        second
            .claimable(lapsed, 100)
            .await
            .unwrap()
            .contains(&"held".to_owned())
    );
    let taken = second
        .claim("held", lapsed, Claim::IfLapsed)
        .await
        .unwrap()
        .expect("a lapsed lease is claimed");
    assert!(taken > epoch);
    // The old owner's renewal no longer covers it.
    first.renew(lapsed).await.unwrap();
    assert_eq!(
        first.claim("held", lapsed, Claim::IfLapsed).await.unwrap(),
        None
    );

    // Given up, a saga is claimable at once; a finished one never is.
    second.release("held", taken).await.unwrap();
    assert!(
        first
            .claimable(lapsed, 100)
            .await
            .unwrap()
            .contains(&"held".to_owned())
    );
    assert!(
        first
            .claim("held", lapsed, Claim::IfLapsed)
            .await
            .unwrap()
            .is_some()
    );
    first.begin(&header("ended"), &[]).await.unwrap();
    first.finish("ended", 0).await.unwrap();
    assert_eq!(
        second
            .claim("ended", lapsed, Claim::TakeOver)
            .await
            .unwrap(),
        None
    );
    assert!(
        !second
            .claimable(lapsed, 100)
            .await
            .unwrap()
            .contains(&"ended".to_owned())
    );
}

pub async fn concurrent_writers_keep_each_sagas_order(journal: &dyn Journal) {
    const SAGAS: usize = 16;
    const APPENDS: i64 = 12;
    let writers = (0..SAGAS).map(|n| async move {
        let saga_id = format!("concurrent-{n}");
        let epoch = journal.begin(&header(&saga_id), &[]).await.unwrap();
        for i in 0..APPENDS {
            journal.append(&saga_id, epoch, &[event(i)]).await.unwrap();
        }
    });
    futures::future::join_all(writers).await;
    for n in 0..SAGAS {
        let (_, entries) = journal
            .load(&format!("concurrent-{n}"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(entries, (0..APPENDS).map(event).collect::<Vec<_>>());
    }
}

/// Runs the whole suite against fresh journals from `owners`.
pub async fn run<J: Journal>(owners: impl Fn() -> (J, J)) {
    let (one, _) = owners();
    appends_load_in_order_with_their_header(&one).await;
    let (one, _) = owners();
    recovery_reads_the_unfinished_sagas_only(&one).await;
    let (one, two) = owners();
    a_write_under_a_stale_epoch_is_refused_by_the_store(&one, &two).await;
    let (one, two) = owners();
    a_claim_takes_a_saga_only_when_its_lease_lapsed_or_it_is_free(&one, &two).await;
    let (one, _) = owners();
    concurrent_writers_keep_each_sagas_order(&one).await;
}

#[tokio::test]
async fn the_memory_journal_conforms() {
    run(|| {
        let journal = super::MemoryJournal::new().with_lease(LEASE);
        let other = journal.as_other_owner();
        (journal, other)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sqlite_journal_conforms() {
    let dirs = std::sync::Mutex::new(Vec::new());
    run(|| {
        let dir = tempfile::tempdir().unwrap();
        let journal = super::SqliteJournal::open(&dir.path().join("journal.db"))
            .unwrap()
            .with_lease(LEASE);
        let other = journal.as_other_owner();
        dirs.lock().unwrap().push(dir);
        (journal, other)
    })
    .await;
}
