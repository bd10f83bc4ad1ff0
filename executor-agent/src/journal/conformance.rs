//! What every journal must do, written once and run against each (in memory, SQLite, and
//! PostgreSQL when `SAGAPLANE_TEST_PG` names a database): append order, the header lookup, recovery's reads, claims and
//! leases, fencing, and concurrent writers. `owners` gives two journals on one state,
//! each its own owner, with a lease of `LEASE`.

use std::time::Duration;

use serde_json::json;

use super::{Claim, Entry, Epoch, Journal, SagaHeader};
use crate::Error;
use crate::saga::{Event, SagaSpec};

pub const LEASE: Duration = Duration::from_secs(60);
const LEASE_MS: i64 = 60_000;

/// A saga without steps or mandate, for the suite (and the stores' own tests).
pub(crate) fn header(saga_id: &str) -> SagaHeader {
    SagaHeader {
        format: super::JOURNAL_FORMAT,
        saga_id: saga_id.into(),
        plan_version: 1,
        task_id: format!("task-{saga_id}"),
        context_id: format!("ctx-{saga_id}"),
        plan: json!({}).into(),
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

pub(crate) fn event(n: i64) -> Entry {
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
    let ending = super::Ending::default();
    journal.end("done", 1, &[], &ending, None).await.unwrap();
    let unfinished = journal.unfinished().await.unwrap();
    assert!(unfinished.contains(&"running".to_owned()), "{unfinished:?}");
    assert!(!unfinished.contains(&"done".to_owned()), "{unfinished:?}");
    // A task's saga is found by the task, finished or not.
    assert_eq!(
        journal.saga_of_task("task-done").await.unwrap(),
        Some(("done".to_owned(), true))
    );
    assert_eq!(
        journal.saga_of_task("task-running").await.unwrap(),
        Some(("running".to_owned(), false))
    );
    assert_eq!(journal.saga_of_task("task-never").await.unwrap(), None);
    // Only finished sagas are forgotten.
    journal
        .forget(&["done".to_owned(), "running".to_owned()])
        .await
        .unwrap();
    assert!(journal.header("done").await.unwrap().is_none());
    assert!(journal.header("running").await.unwrap().is_some());
    assert_eq!(journal.saga_of_task("task-done").await.unwrap(), None);
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

pub async fn an_end_is_one_write_fenced_like_an_append(first: &dyn Journal, second: &dyn Journal) {
    let ending = super::Ending::default();
    let epoch = first.begin(&header("ends"), &[event(0)]).await.unwrap();
    first
        .end("ends", epoch, &[event(1), event(2)], &ending, None)
        .await
        .unwrap();
    let (_, entries) = first.load("ends").await.unwrap().unwrap();
    assert_eq!(entries, [event(0), event(1), event(2)]);
    assert_eq!(
        first.saga_of_task("task-ends").await.unwrap(),
        Some(("ends".to_owned(), true))
    );
    assert!(!first.unfinished().await.unwrap().contains(&"ends".into()));
    // An end journaled before, marked now: no entries.
    let epoch = first.begin(&header("marked"), &[event(0)]).await.unwrap();
    first
        .end("marked", epoch, &[], &ending, None)
        .await
        .unwrap();
    assert_eq!(first.load("marked").await.unwrap().unwrap().1, [event(0)]);
    assert_eq!(
        first.saga_of_task("task-marked").await.unwrap(),
        Some(("marked".to_owned(), true))
    );
    // A stale owner's end writes nothing: neither its entries nor its mark.
    let old = first.begin(&header("taken"), &[event(0)]).await.unwrap();
    second
        .claim("taken", now(), Claim::TakeOver)
        .await
        .unwrap()
        .expect("taken over");
    assert!(matches!(
        first.end("taken", old, &[event(1)], &ending, None).await,
        Err(Error::Fenced { .. })
    ));
    assert_eq!(second.load("taken").await.unwrap().unwrap().1, [event(0)]);
    assert!(second.unfinished().await.unwrap().contains(&"taken".into()));
}

/// The task of saga `saga_id` (`task-…`, in context `ctx-…`) in `state`, with nothing else.
fn saga_task(saga_id: &str, state: agent_host::sdk::TaskState) -> agent_host::sdk::Task {
    use agent_host::sdk::{Task, TaskStatus};
    Task {
        id: format!("task-{saga_id}"),
        context_id: format!("ctx-{saga_id}"),
        status: TaskStatus {
            state,
            message: None,
            timestamp: Some(chrono::Utc::now()),
        },
        artifacts: None,
        history: None,
        metadata: None,
    }
}

/// A journal keeping its tables beside `tasks`: a saga's begin carries its task's
/// creation, and both land or neither does.
pub async fn a_begin_creates_its_task_all_or_nothing(
    journal: &dyn Journal,
    tasks: &dyn agent_host::TaskStore,
) {
    use agent_host::sdk::TaskState;
    use agent_host::store::{Expected, TaskWrite};
    let task = |saga_id: &str| saga_task(saga_id, TaskState::Submitted);
    let creation = |saga_id: &str| TaskWrite::of(&task(saga_id), Expected::Absent).unwrap();
    let stored = async |saga_id: &str| {
        tasks
            .read(&format!("task-{saga_id}"))
            .await
            .unwrap()
            .map(|stored| (stored.task.status.state, stored.version))
    };
    // Both land.
    let epoch = journal
        .begin_creating(&header("created"), &[event(0)], Some(&creation("created")))
        .await
        .unwrap();
    assert_eq!(epoch, 1);
    assert_eq!(stored("created").await, Some((TaskState::Submitted, 1)));
    assert_eq!(
        journal.load("created").await.unwrap().unwrap().1,
        [event(0)]
    );
    // A task that exists already (never a fresh task id): the saga is not begun.
    let mut existing = task("exists");
    existing.status.state = TaskState::Working;
    tasks.put(&existing, Expected::Absent).await.unwrap();
    let refused = journal
        .begin_creating(&header("exists"), &[event(0)], Some(&creation("exists")))
        .await;
    assert!(refused.is_err(), "{refused:?}");
    assert_eq!(journal.header("exists").await.unwrap(), None);
    assert_eq!(stored("exists").await, Some((TaskState::Working, 1)));
    // A begin its mandate refuses (a budget of 100 cannot hold 500): no task either.
    let refused = journal
        .begin_creating(
            &under_mandate("over", 500),
            &[event(0)],
            Some(&creation("over")),
        )
        .await;
    assert!(matches!(refused, Err(Error::Mandate(_))), "{refused:?}");
    assert_eq!(journal.header("over").await.unwrap(), None);
    assert_eq!(stored("over").await, None);
}

/// A journal keeping its tables beside `tasks` (one state file, one database): a saga's
/// append that changes the state its task shows, and its end, carry the task's write, and
/// both land or neither does.
pub async fn a_step_carries_its_tasks_write_all_or_nothing(
    first: &dyn Journal,
    second: &dyn Journal,
    tasks: &dyn agent_host::TaskStore,
) {
    for ends in [false, true] {
        a_write_carries_its_tasks_all_or_nothing(first, second, tasks, ends).await;
    }
}

/// One case of the above: by an append, or by the saga's end (`ends`).
async fn a_write_carries_its_tasks_all_or_nothing(
    first: &dyn Journal,
    second: &dyn Journal,
    tasks: &dyn agent_host::TaskStore,
    ends: bool,
) {
    use agent_host::sdk::TaskState;
    use agent_host::store::{Expected, TaskWrite};
    let how = if ends { "end" } else { "append" };
    let id = |case: &str| format!("{case}-by-{how}");
    let task = saga_task;
    let shown = if ends {
        TaskState::Completed
    } else {
        TaskState::InputRequired
    };
    let write = async |journal: &dyn Journal, saga_id: &str, version: u64| {
        let write =
            TaskWrite::of(&task(saga_id, shown.clone()), Expected::Version(version)).unwrap();
        if ends {
            let ending = super::Ending::default();
            journal
                .end(saga_id, 1, &[event(1)], &ending, Some(&write))
                .await
        } else {
            journal
                .append_carrying(saga_id, 1, &[event(1)], Some(&write), None)
                .await
        }
    };
    let state = async |saga_id: &str| {
        let stored = tasks
            .read(&format!("task-{saga_id}"))
            .await
            .unwrap()
            .unwrap();
        (stored.task.status.state, stored.version)
    };
    for saga_id in [id("carried"), id("conflict"), id("fenced")] {
        tasks
            .put(&task(&saga_id, TaskState::Working), Expected::Absent)
            .await
            .unwrap();
        first.begin(&header(&saga_id), &[event(0)]).await.unwrap();
    }
    // Both land.
    let carried = id("carried");
    write(first, &carried, 1).await.unwrap();
    assert_eq!(state(&carried).await, (shown.clone(), 2), "{how}");
    assert_eq!(
        first.load(&carried).await.unwrap().unwrap().1,
        [event(0), event(1)]
    );
    assert_eq!(
        first
            .saga_of_task(&format!("task-{carried}"))
            .await
            .unwrap(),
        Some((carried.clone(), ends)),
        "{how}"
    );
    // The task at another version: neither lands.
    let conflict = id("conflict");
    let refused = write(first, &conflict, 7).await;
    assert!(
        matches!(
            refused,
            Err(Error::Storage(agent_host::Error::Conflict { .. }))
        ),
        "{how}: {refused:?}"
    );
    assert_eq!(state(&conflict).await, (TaskState::Working, 1));
    assert_eq!(first.load(&conflict).await.unwrap().unwrap().1, [event(0)]);
    assert!(first.unfinished().await.unwrap().contains(&conflict));
    // A stale owner: neither lands.
    let fenced = id("fenced");
    second
        .claim(&fenced, now(), Claim::TakeOver)
        .await
        .unwrap()
        .expect("taken over");
    let refused = write(first, &fenced, 1).await;
    assert!(
        matches!(refused, Err(Error::Fenced { .. })),
        "{how}: {refused:?}"
    );
    assert_eq!(state(&fenced).await, (TaskState::Working, 1));
    assert_eq!(first.load(&fenced).await.unwrap().unwrap().1, [event(0)]);
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
    first
        .end("ended", 1, &[], &super::Ending::default(), None)
        .await
        .unwrap();
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

pub async fn owners_claiming_lapsed_sagas_at_once_share_them_out(
    one: &dyn Journal,
    two: &dyn Journal,
) {
    const SAGAS: usize = 40;
    for n in 0..SAGAS {
        let saga_id = format!("lapsed-{n:02}");
        let epoch = one.begin(&header(&saga_id), &[]).await.unwrap();
        // Given up, as by an owner that stopped: any owner may claim it at once.
        one.release(&saga_id, epoch).await.unwrap();
    }
    let t = now();
    // Two owners claim in rounds of 7, at once, until none is left.
    let (mut took_one, mut took_two) = (Vec::new(), Vec::new());
    loop {
        let (a, b) = futures::join!(one.claim_lapsed(t, 7), two.claim_lapsed(t, 7));
        let (a, b) = (a.unwrap(), b.unwrap());
        if a.is_empty() && b.is_empty() {
            break;
        }
        assert!(a.len() <= 7 && b.len() <= 7);
        took_one.extend(a);
        took_two.extend(b);
    }
    let mut all: Vec<&String> = took_one.iter().chain(&took_two).map(|(id, _)| id).collect();
    all.sort();
    let total = all.len();
    all.dedup();
    assert_eq!(all.len(), total, "a saga was claimed by both owners");
    assert_eq!(total, SAGAS, "every lapsed saga was claimed once");
    // Each claim is at a new epoch, and fences the other owner out.
    for (saga_id, epoch) in &took_one {
        assert_eq!(*epoch, 2, "{saga_id}");
        assert!(matches!(
            two.append(saga_id, *epoch, &[event(1)]).await,
            Err(Error::Fenced { .. })
        ));
        one.append(saga_id, *epoch, &[event(1)]).await.unwrap();
    }
    // Held and live, they are not claimed again.
    assert!(two.claim_lapsed(t, 100).await.unwrap().is_empty());
    // Once the leases lapse, each owner takes over the other's, never its own.
    let later = t + LEASE_MS + 1;
    let (one_took, two_took) =
        futures::join!(one.claim_lapsed(later, 100), two.claim_lapsed(later, 100));
    let ids_of = |claims: &[(String, Epoch)]| {
        let mut ids: Vec<String> = claims.iter().map(|(id, _)| id.clone()).collect();
        ids.sort();
        ids
    };
    let ids = |claims: Vec<(String, Epoch)>| ids_of(&claims);
    assert_eq!(
        ids(two_took.unwrap()),
        ids_of(&took_one),
        "two takes over one's sagas"
    );
    assert_eq!(
        ids(one_took.unwrap()),
        ids_of(&took_two),
        "one takes over two's sagas"
    );
}

/// A saga under a mandate for `budget` minor units and at most `max_sagas` sagas, that
/// may spend `reserved`.
fn under_mandate(saga_id: &str, reserved: u64) -> SagaHeader {
    let mut header = header(saga_id);
    std::sync::Arc::make_mut(&mut header.spec).mandate = Some(crate::mandates::test_hold(
        "principal-key",
        "md_conformance",
        Some(4),
        reserved,
    ));
    header
}

pub async fn owners_accepting_at_once_never_overspend_a_mandate(
    one: &dyn Journal,
    two: &dyn Journal,
) {
    // Six plans of 40 each under a budget of 100, begun at once by two owners: two fit.
    let begins = (0..6).map(|n| {
        let journal = if n % 2 == 0 { one } else { two };
        async move {
            journal
                .begin(&under_mandate(&format!("m{n}"), 40), &[])
                .await
        }
    });
    let outcomes = futures::future::join_all(begins).await;
    let accepted: Vec<usize> = (0..6).filter(|n| outcomes[*n].is_ok()).collect();
    assert_eq!(accepted.len(), 2, "{outcomes:?}");
    for outcome in &outcomes {
        if let Err(e) = outcome {
            assert!(
                matches!(e, Error::Mandate(v) if v.code == shared_types::ViolationCode::MandateExhausted),
                "{e:?}"
            );
        }
    }
    // A refused plan wrote nothing.
    let refused = (0..6).find(|n| !accepted.contains(n)).unwrap();
    assert_eq!(one.header(&format!("m{refused}")).await.unwrap(), None);
    // One accepted saga spent 10 of its 40: 30 come back (80 - 30 = 50 used), so a plan
    // of 50 now fits exactly, and then not one unit more.
    // Its end names the mandate: a shared journal commits it with the other writes under
    // it.
    let finished = under_mandate(&format!("m{}", accepted[0]), 40);
    let owner = if accepted[0].is_multiple_of(2) {
        one
    } else {
        two
    };
    let ending = super::Ending {
        mandate: finished.spec.mandate.clone(),
        spent_minor: 10,
    };
    owner
        .end(&finished.saga_id, 1, &[event(9)], &ending, None)
        .await
        .unwrap();
    // Settled once: ending it again gives nothing back twice.
    let again = super::Ending {
        mandate: None,
        spent_minor: 0,
    };
    owner
        .end(&finished.saga_id, 1, &[], &again, None)
        .await
        .unwrap();
    two.begin(&under_mandate("after-settle", 50), &[])
        .await
        .unwrap();
    let over = one.begin(&under_mandate("over", 1), &[]).await;
    assert!(
        matches!(&over, Err(Error::Mandate(v)) if v.code == shared_types::ViolationCode::MandateExhausted),
        "{over:?}"
    );
}

/// Runs the whole suite against fresh journals from `owners`.
pub async fn run<J: Journal>(owners: &impl AsyncFn() -> (J, J)) {
    let (one, _) = owners().await;
    appends_load_in_order_with_their_header(&one).await;
    let (one, _) = owners().await;
    recovery_reads_the_unfinished_sagas_only(&one).await;
    let (one, two) = owners().await;
    a_write_under_a_stale_epoch_is_refused_by_the_store(&one, &two).await;
    let (one, two) = owners().await;
    an_end_is_one_write_fenced_like_an_append(&one, &two).await;
    let (one, two) = owners().await;
    a_claim_takes_a_saga_only_when_its_lease_lapsed_or_it_is_free(&one, &two).await;
    let (one, _) = owners().await;
    concurrent_writers_keep_each_sagas_order(&one).await;
    let (one, two) = owners().await;
    owners_claiming_lapsed_sagas_at_once_share_them_out(&one, &two).await;
}

/// The suite and the mandates' accounting, for the journals that keep it (all but the
/// in-memory one).
pub async fn run_with_mandates<J: Journal>(owners: impl AsyncFn() -> (J, J)) {
    run(&owners).await;
    let (one, two) = owners().await;
    owners_accepting_at_once_never_overspend_a_mandate(&one, &two).await;
}

#[tokio::test]
async fn the_memory_journal_conforms() {
    run(&async || {
        let journal = super::MemoryJournal::new().with_lease(LEASE);
        let other = journal.as_other_owner();
        (journal, other)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sqlite_journal_conforms() {
    let dirs = std::sync::Mutex::new(Vec::new());
    run_with_mandates(async || {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sqlite_journal_carries_its_tasks_writes() {
    let dir = tempfile::tempdir().unwrap();
    let db =
        sagaplane_storage::sqlite::Database::open(&dir.path().join("state.db"), "state").unwrap();
    let journal = super::SqliteJournal::on(&db).unwrap().with_lease(LEASE);
    let tasks = agent_host::SqliteTaskStore::on(&db).unwrap();
    a_begin_creates_its_task_all_or_nothing(&journal, &tasks).await;
    a_step_carries_its_tasks_write_all_or_nothing(&journal, &journal.as_other_owner(), &tasks)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_journal_carries_its_tasks_writes() {
    use sagaplane_storage::postgres::{Postgres, testing};
    let Some(url) = testing::scratch_database("postgres_end_carries_task").await else {
        return;
    };
    let db = Postgres::connect(&url, 8).unwrap();
    let journal = super::PostgresJournal::on(&db)
        .await
        .unwrap()
        .with_lease(LEASE);
    let tasks = agent_host::store::postgres::PostgresTaskStore::on(&db)
        .await
        .unwrap();
    a_begin_creates_its_task_all_or_nothing(&journal, &tasks).await;
    a_step_carries_its_tasks_write_all_or_nothing(&journal, &journal.as_other_owner(), &tasks)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_journal_conforms() {
    use sagaplane_storage::postgres::{Postgres, testing};
    const TEST: &str = "the_postgres_journal_conforms";
    if testing::scratch_database(TEST).await.is_none() {
        return;
    }
    run_with_mandates(async || {
        // A schema of its own for each run of the suite's parts, as a fresh file is.
        let url = testing::scratch_database(TEST).await.unwrap();
        let db = Postgres::connect(&url, 8).unwrap();
        let journal = super::PostgresJournal::on(&db)
            .await
            .unwrap()
            .with_lease(LEASE);
        let other = journal.as_other_owner();
        (journal, other)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_plan_under_a_revoked_mandate_is_refused_and_writes_nothing() {
    use crate::journal::{Headers, SagaLog};
    let Some((db, journal)) = postgres_journal("postgres_revoked_mandate").await else {
        return;
    };
    journal
        .begin(&under_mandate("before", 10), &[])
        .await
        .unwrap();
    revoke_conformance_mandate(&db).await;
    let refused = journal.begin(&under_mandate("after", 10), &[]).await;
    assert!(
        matches!(&refused, Err(Error::Mandate(v)) if v.code == shared_types::ViolationCode::MandateRevoked),
        "{refused:?}"
    );
    assert_eq!(journal.header("after").await.unwrap(), None);
    assert!(journal.header("before").await.unwrap().is_some());
}

/// A database of its own for `test`, with the PostgreSQL journal on it; `None` when no
/// PostgreSQL is given (the test is skipped, and says so).
pub(crate) async fn postgres_journal(
    test: &str,
) -> Option<(
    sagaplane_storage::postgres::Postgres,
    super::PostgresJournal,
)> {
    use sagaplane_storage::postgres::{Postgres, testing};
    let url = testing::scratch_database(test).await?;
    let db = Postgres::connect(&url, 4).unwrap();
    let journal = super::PostgresJournal::on(&db).await.unwrap();
    Some((db, journal))
}

/// Records the revocation of the mandate `under_mandate` names, as the mandate book does.
async fn revoke_conformance_mandate(db: &sagaplane_storage::postgres::Postgres) {
    use sagaplane_storage::postgres::Cached;
    db.connection()
        .await
        .unwrap()
        .run(
            "INSERT INTO mandate_revocations VALUES ('principal-key', 'md_conformance', 'now', '{}')",
            &[],
        )
        .await
        .unwrap();
}

/// On PostgreSQL an append that names its saga's mandate (it carries forward calls) is
/// written only while the mandate is not revoked, checked in the write itself, plain or
/// carrying its task's write: refused `RevokedAtWrite` with nothing written once it is,
/// while an append that names none (an answer, an undo) is written as before, and a
/// fence that moved is still told apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_an_append_carrying_calls_is_refused_once_its_mandate_is_revoked() {
    use crate::journal::{SagaLog, Unrevoked};
    use agent_host::sdk::TaskState;
    use agent_host::store::{Expected, TaskStore, TaskWrite};
    let Some((db, journal)) = postgres_journal("postgres_append_unrevoked").await else {
        return;
    };
    let tasks = agent_host::store::postgres::PostgresTaskStore::on(&db)
        .await
        .unwrap();
    let task = |state| saga_task("guarded", state);
    let mandate = Unrevoked {
        principal_key: "principal-key",
        mandate_id: "md_conformance",
    };
    journal
        .begin(&under_mandate("guarded", 10), &[event(1)])
        .await
        .unwrap();
    journal
        .append_carrying("guarded", 1, &[event(2)], None, Some(mandate))
        .await
        .unwrap();
    // A stale epoch is fenced, not taken for a revocation.
    let fenced = journal
        .append_carrying("guarded", 7, &[event(9)], None, Some(mandate))
        .await;
    assert!(matches!(&fenced, Err(Error::Fenced { .. })), "{fenced:?}");
    revoke_conformance_mandate(&db).await;
    let refused = journal
        .append_carrying("guarded", 1, &[event(3)], None, Some(mandate))
        .await;
    assert!(
        matches!(&refused, Err(Error::RevokedAtWrite { saga_id }) if saga_id == "guarded"),
        "{refused:?}"
    );
    // Carrying its task's write: neither is written.
    tasks
        .put(&task(TaskState::Working), Expected::Absent)
        .await
        .unwrap();
    let write = TaskWrite::of(&task(TaskState::Completed), Expected::Version(1)).unwrap();
    let refused = journal
        .append_carrying("guarded", 1, &[event(3)], Some(&write), Some(mandate))
        .await;
    assert!(
        matches!(&refused, Err(Error::RevokedAtWrite { .. })),
        "{refused:?}"
    );
    let stored = tasks.read("task-guarded").await.unwrap().unwrap();
    assert_eq!(stored.task.status.state, TaskState::Working);
    // What names no mandate (an answer, an undo) is written as before.
    journal
        .append_carrying("guarded", 1, &[event(4)], None, None)
        .await
        .unwrap();
    let (_, entries) = journal.load("guarded").await.unwrap().unwrap();
    assert_eq!(entries, [event(1), event(2), event(4)]);
}

/// On PostgreSQL the owners alive share a dead owner's sagas out, each claiming only its
/// share however soon it claims, and a share whose owner is alive but does not claim goes
/// to the others once it has lapsed for a lease more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_the_owners_alive_share_a_dead_owners_sagas_out() {
    use crate::journal::{Ownership, SagaLog};
    let Some((_db, dead)) = postgres_journal("postgres_sagas_shared_out").await else {
        return;
    };
    let dead = dead.with_lease(LEASE);
    let (two, three, idle) = (
        dead.as_other_owner(),
        dead.as_other_owner(),
        dead.as_other_owner(),
    );
    const SAGAS: usize = 60;
    for n in 0..SAGAS {
        dead.begin(&header(&format!("shared-{n:02}")), &[])
            .await
            .unwrap();
    }
    // After the begins: their leases run from their own clock reads.
    let t = now();
    let ids = |claims: &[(String, Epoch)]| -> Vec<String> {
        claims.iter().map(|(id, _)| id.clone()).collect()
    };
    // The dead owner's leases lapse; two and three are alive (they renewed), and claim
    // one after the other: the first takes its share only, not all it finds.
    let lapsed = t + LEASE_MS + 1;
    two.renew(lapsed).await.unwrap();
    three.renew(lapsed).await.unwrap();
    let by_two = two.claim_lapsed(lapsed, 1_000).await.unwrap();
    let by_three = three.claim_lapsed(lapsed, 1_000).await.unwrap();
    assert!(
        !by_two.is_empty() && by_two.len() < SAGAS,
        "two took {} of {SAGAS}",
        by_two.len()
    );
    assert_eq!(
        by_two.len() + by_three.len(),
        SAGAS,
        "each saga went to one"
    );
    let mut all = [ids(&by_two), ids(&by_three)].concat();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), SAGAS, "no saga went to both");
    assert!(two.claim_lapsed(lapsed, 1_000).await.unwrap().is_empty());

    // Now three dies too, while idle is alive and never claims: two takes its own share
    // of three's sagas at once, and idle's share once that has lapsed a lease more.
    let later = lapsed + LEASE_MS + 1;
    two.renew(later).await.unwrap();
    idle.renew(later).await.unwrap();
    let first = two.claim_lapsed(later, 1_000).await.unwrap();
    assert!(
        !first.is_empty() && first.len() < by_three.len(),
        "two took {} of three's {} while idle's share was fresh",
        first.len(),
        by_three.len()
    );
    let much_later = later + LEASE_MS + 1;
    two.renew(much_later).await.unwrap();
    idle.renew(much_later).await.unwrap();
    let rest = two.claim_lapsed(much_later, 1_000).await.unwrap();
    let mut taken = [ids(&first), ids(&rest)].concat();
    taken.sort();
    assert_eq!(taken, ids(&by_three), "two took all of three's, once each");

    // An owner that retires (a planned stop) is not counted from then on: what a dead
    // owner leaves goes to the one owner left at once.
    let last = dead.as_other_owner();
    // Held from far on, past every earlier lease (and the rows alive with them).
    let base = much_later + 10 * LEASE_MS;
    for n in 0..10 {
        let saga_id = format!("left-{n}");
        last.begin(&header(&saga_id), &[]).await.unwrap();
        last.claim(&saga_id, base, Claim::TakeOver).await.unwrap();
    }
    let gone = base + LEASE_MS + 1;
    two.renew(gone).await.unwrap();
    idle.renew(gone).await.unwrap();
    idle.retire().await.unwrap();
    let all_left = two.claim_lapsed(gone, 1_000).await.unwrap();
    assert_eq!(all_left.len(), 10, "{all_left:?}");
}

/// On PostgreSQL a begin skips creating a mandate's row it saw written before; one gone
/// after all (a database restored from before it) is created again by the next attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_mandate_row_gone_after_it_was_seen_is_created_again() {
    use crate::journal::{Headers, SagaLog};
    use sagaplane_storage::postgres::Cached;
    let Some((db, journal)) = postgres_journal("postgres_mandate_row_again").await else {
        return;
    };
    journal
        .begin(&under_mandate("first", 10), &[])
        .await
        .unwrap();
    let conn = db.connection().await.unwrap();
    conn.run("DELETE FROM mandates", &[]).await.unwrap();
    journal
        .begin(&under_mandate("second", 10), &[])
        .await
        .unwrap();
    assert!(journal.header("second").await.unwrap().is_some());
    let row = conn
        .row_opt(
            "SELECT sagas FROM mandates WHERE mandate_id = 'md_conformance'",
            &[],
        )
        .await
        .unwrap()
        .expect("the mandate's row is there again");
    let sagas: i64 = row.get(0);
    assert_eq!(sagas, 1, "counted from its new row");
}
