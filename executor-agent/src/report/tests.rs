//! The reporter against a task store whose writes are held until the test lets them go:
//! the driver never waits for a write, nothing is lost or reordered, what queued up during
//! a write goes out in the next one, and stops and the end are signalled only once written.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use agent_host::sdk::{PartContent, Task, TaskState, TaskStatus};
use agent_host::{MemoryTaskStore, TaskManager, TaskStore};
use async_trait::async_trait;
use serde_json::json;
use tokio::sync::{Semaphore, mpsc};

use super::*;
use crate::journal::SagaLog;
use crate::saga::Ending;
use crate::saga::tests::supplier;
use crate::saga::{CallOutcome, Event, Invocation, Target};

/// A memory store whose every `put` announces itself, then waits for a permit (and
/// fails, while `failing` counts down).
struct HeldStore {
    inner: MemoryTaskStore,
    permits: Semaphore,
    arrived: mpsc::UnboundedSender<()>,
    failing: AtomicU32,
}

#[async_trait]
impl TaskStore for HeldStore {
    async fn put(
        &self,
        task: &Task,
        expected: agent_host::store::Expected,
    ) -> agent_host::Result<agent_host::store::Version> {
        let fail = self
            .failing
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        let _ = self.arrived.send(());
        if let Ok(permit) = self.permits.acquire().await {
            permit.forget();
        }
        if fail {
            return Err(agent_host::Error::Store("disk full".into()));
        }
        self.inner.put(task, expected).await
    }

    async fn read(&self, id: &str) -> agent_host::Result<Option<agent_host::store::StoredTask>> {
        self.inner.read(id).await
    }

    async fn list(
        &self,
        query: &agent_host::store::TaskQuery,
    ) -> agent_host::Result<agent_host::store::TaskPage> {
        self.inner.list(query).await
    }

    async fn delete(&self, ids: &[String]) -> agent_host::Result<()> {
        self.inner.delete(ids).await
    }
}

/// A new task, as the executor creates one for a plan.
fn submitted(id: &str, context_id: &str) -> Task {
    Task {
        id: id.into(),
        context_id: context_id.into(),
        status: TaskStatus {
            state: TaskState::Submitted,
            message: None,
            timestamp: None,
        },
        artifacts: None,
        history: None,
        metadata: None,
    }
}

struct Fixture {
    store: Arc<HeldStore>,
    arrived: mpsc::UnboundedReceiver<()>,
    task: TaskHandle,
    saga: Saga,
}

impl Fixture {
    async fn new() -> Self {
        let (arrived_tx, arrived) = mpsc::unbounded_channel();
        let store = Arc::new(HeldStore {
            inner: MemoryTaskStore::new(),
            permits: Semaphore::new(1),
            arrived: arrived_tx,
            failing: AtomicU32::new(0),
        });
        let tasks = TaskManager::new(store.clone());
        let task = tasks.create(submitted("task-1", "ctx-1")).await.unwrap();
        let mut fixture = Self {
            store,
            arrived,
            task,
            saga: supplier(),
        };
        fixture.arrived.recv().await.unwrap();
        fixture
    }

    /// Lets `n` more writes through.
    fn release(&self, n: usize) {
        self.store.permits.add_permits(n);
    }

    async fn stored(&self) -> Task {
        self.store.inner.get("task-1").await.unwrap().unwrap()
    }
}

fn report(step: &str, what: &str) -> Command {
    Command::Report {
        step: step.into(),
        what: what.into(),
    }
}

/// The text of each message in the task's history, in order.
fn history(task: &Task) -> Vec<String> {
    task.history
        .iter()
        .flatten()
        .filter_map(|m| {
            m.parts.iter().find_map(|p| match &p.content {
                PartContent::Text(t) => Some(t.clone()),
                _ => None,
            })
        })
        .collect()
}

fn ledger_of(task: &Task) -> Option<Value> {
    let artifact = task
        .artifacts
        .iter()
        .flatten()
        .find(|a| a.artifact_id == LEDGER)?;
    match &artifact.parts.first()?.content {
        PartContent::Data(v) => Some(v.clone()),
        _ => None,
    }
}

fn ledger_phase(task: &Task) -> Option<Value> {
    ledger_of(task)?.get("phase").cloned()
}

/// The commands of an engine step that are shown on the task.
fn shown(commands: &[Command]) -> Vec<Command> {
    commands
        .iter()
        .filter(|c| {
            matches!(
                c,
                Command::Report { .. } | Command::Pause { .. } | Command::Finish { .. }
            )
        })
        .cloned()
        .collect()
}

/// Runs `saga` to its end, every call answered by `tool`, reporting each engine step;
/// `between(i)` runs after the `i`-th report.
async fn run_reporting(
    saga: &mut Saga,
    reporter: &TaskReporter,
    tool: impl Fn(&Invocation) -> CallOutcome,
    mut between: impl AsyncFnMut(usize),
) {
    let mut commands = saga.step(Event::Start { now_ms: 0 });
    for i in 0.. {
        reporter.report_all(&shown(&commands), saga).await;
        between(i).await;
        let Some(call) = commands.iter().find_map(|c| match c {
            Command::Invoke(invocation) => Some(invocation.clone()),
            _ => None,
        }) else {
            return;
        };
        commands = saga.step(Event::Result {
            target: call.target,
            attempt: call.attempt,
            outcome: tool(&call),
            now_ms: 0,
        });
    }
}

/// One answer with every member any step of the plan binds from an earlier answer.
fn answer(_: &Invocation) -> CallOutcome {
    CallOutcome::Succeeded {
        response: json!({
            "vendorId": "v_1", "reservationId": "r_1", "tenantId": "t_1", "login": "admin",
            "status": "clear", "reference": "c_1", "captureId": "p_1", "amountMinor": 12000,
        }),
    }
}

#[tokio::test]
async fn reports_made_during_a_held_write_follow_in_one_write_in_order() {
    let mut f = Fixture::new().await;
    let (reporter, reporting) =
        TaskReporter::start(f.task.clone(), Vec::new(), Duration::ZERO, false);

    // The first write starts and is held: the driver goes on reporting regardless.
    f.saga.step(Event::Start { now_ms: 0 });
    reporter
        .report_all(&[report("a", "started")], &f.saga)
        .await;
    f.arrived.recv().await.unwrap();
    reporter
        .report_all(&[report("a", "succeeded")], &f.saga)
        .await;
    reporter
        .report_all(&[report("b", "started"), report("b", "retrying")], &f.saga)
        .await;
    assert_eq!(history(&f.stored().await), Vec::<String>::new());

    f.release(1);
    f.arrived.recv().await.unwrap();
    assert_eq!(history(&f.stored().await), ["a: started"]);
    f.release(1);
    drop(reporter);
    reporting.finished().await;

    let task = f.stored().await;
    assert_eq!(
        history(&task),
        ["a: started", "a: succeeded", "b: started", "b: retrying"]
    );
    assert_eq!(task.status.state, TaskState::Working);
    assert!(ledger_phase(&task).is_some(), "{task:?}");
    // One write for the first report, one for the three queued behind it, nothing more.
    assert!(f.arrived.try_recv().is_err());
}

#[tokio::test]
async fn a_pause_is_signalled_only_once_it_is_on_the_task() {
    let mut f = Fixture::new().await;
    let (reporter, reporting) =
        TaskReporter::start(f.task.clone(), Vec::new(), Duration::ZERO, false);
    let mut stops = reporting.stops();

    reporter
        .report_all(
            &[Command::Pause {
                reason: "step s4 needs approval".into(),
            }],
            &f.saga,
        )
        .await;
    f.arrived.recv().await.unwrap();
    assert!(!stops.has_changed().unwrap(), "signalled before the write");

    f.release(1);
    stops.changed().await.unwrap();
    assert_eq!(f.stored().await.status.state, TaskState::InputRequired);
    drop(reporter);
    reporting.finished().await;
}

#[tokio::test]
async fn finished_waits_for_the_end_written_in_one_write_with_the_metadata() {
    let mut f = Fixture::new().await;
    let metadata = vec![("sagaId".to_owned(), json!("sg_1"))];
    let (reporter, reporting) =
        TaskReporter::start(f.task.clone(), metadata, Duration::ZERO, false);

    reporter
        .report_all(
            &[
                report("a", "compensated"),
                Command::Finish {
                    ending: Ending::Compensated,
                    reason: "step s3 failed; everything before it was undone".into(),
                },
            ],
            &f.saga,
        )
        .await;
    let mut finished = std::pin::pin!(reporting.finished());
    f.arrived.recv().await.unwrap();
    assert!(futures::poll!(&mut finished).is_pending());
    f.release(1);
    // Nothing follows an end: reporting is over once it is written, while the driver
    // still holds the reporter.
    tokio::time::timeout(Duration::from_secs(10), finished)
        .await
        .expect("reporting ends with the end");
    drop(reporter);

    let task = f.stored().await;
    assert_eq!(task.status.state, TaskState::Failed);
    let metadata = task.metadata.clone().unwrap_or_default();
    assert_eq!(metadata.get("sagaId"), Some(&json!("sg_1")));
    assert_eq!(metadata.get("outcome"), Some(&json!("compensated")));
    assert_eq!(history(&task).len(), 2);
    // The saga's id, the outcome, the statuses and the ledger: one write.
    assert!(f.arrived.try_recv().is_err());
}

#[tokio::test]
async fn commands_that_show_nothing_write_nothing() {
    let mut f = Fixture::new().await;
    let (reporter, reporting) =
        TaskReporter::start(f.task.clone(), Vec::new(), Duration::ZERO, false);
    reporter
        .report_all(
            &[Command::RefuseCancel {
                reason: "past the pivot".into(),
            }],
            &f.saga,
        )
        .await;
    drop(reporter);
    reporting.finished().await;
    assert!(f.arrived.try_recv().is_err());
    assert_eq!(f.stored().await.status.state, TaskState::Submitted);
}

/// Runs the saga with every write let through, except that the second one fails
/// `failures` times; returns the task as stored, and the saga's own ledger.
async fn run_failing_the_second_write(failures: u32) -> (Task, Value) {
    let mut f = Fixture::new().await;
    f.release(1000);
    let (reporter, reporting) =
        TaskReporter::start(f.task.clone(), Vec::new(), Duration::ZERO, false);
    let arrived = &mut f.arrived;
    let store = f.store.clone();
    run_reporting(&mut f.saga, &reporter, answer, async |i| {
        if i == 0 {
            // The first report's write is on its way: the next ones fail.
            arrived.recv().await.unwrap();
            store.failing.store(failures, Ordering::SeqCst);
        }
        if i == 1 {
            for _ in 0..failures {
                arrived.recv().await.unwrap();
            }
        }
    })
    .await;
    drop(reporter);
    reporting.finished().await;
    (f.stored().await, f.saga.ledger())
}

#[tokio::test(start_paused = true)]
async fn a_failed_write_is_tried_again_with_what_queued_up_meanwhile() {
    let (task, ledger) = run_failing_the_second_write(1).await;
    assert_eq!(task.status.state, TaskState::Completed);
    assert_eq!(ledger_of(&task), Some(ledger));
    let history = history(&task);
    assert_eq!(history.len(), 13, "{history:?}");
    assert!(history.contains(&"s0: succeeded".to_owned()), "{history:?}");
}

#[tokio::test(start_paused = true)]
async fn after_a_write_is_given_up_the_whole_ledger_is_sent_again() {
    // Every try of the second report's write fails: its statuses are lost, and with them
    // the first step's success, which nothing reports again.
    let (task, ledger) = run_failing_the_second_write(WRITE_TRIES).await;
    assert_eq!(task.status.state, TaskState::Completed);
    assert_eq!(ledger_of(&task), Some(ledger));
    let history = history(&task);
    assert!(
        !history.contains(&"s0: succeeded".to_owned()),
        "{history:?}"
    );
}

#[tokio::test]
async fn a_ledger_sent_as_changes_while_writes_are_held_ends_as_the_whole_ledger() {
    let mut f = Fixture::new().await;
    let (reporter, reporting) =
        TaskReporter::start(f.task.clone(), Vec::new(), Duration::ZERO, false);
    // The fourth step is declined: the three before it are undone.
    let declined = |call: &Invocation| match call.target {
        Target::Forward(3) => CallOutcome::failed("declined"),
        _ => answer(call),
    };
    let store = f.store.clone();
    // Writes go through two at a time, every third report: the rest queue up and fold.
    run_reporting(&mut f.saga, &reporter, declined, async |i| {
        if i % 3 == 2 {
            store.permits.add_permits(2);
        }
    })
    .await;
    drop(reporter);
    f.release(1000);
    reporting.finished().await;

    let task = f.stored().await;
    assert_eq!(task.status.state, TaskState::Failed);
    assert_eq!(ledger_of(&task), Some(f.saga.ledger()));
    let history = history(&task);
    assert!(
        history.iter().any(|t| t.contains("compensated")),
        "{history:?}"
    );
}

#[test]
fn ledger_changes_fold_in_order() {
    let whole = json!({"sagaId": "s", "phase": {"phase": "notStarted"}, "steps": [{"n": 0}, {"n": 0}, {"n": 0}]});
    let first = LedgerChange::Steps {
        phase: json!("p1"),
        steps: vec![(0, json!({"n": 1})), (2, json!({"n": 1}))],
    };
    let second = LedgerChange::Steps {
        phase: json!("p2"),
        steps: vec![(2, json!({"n": 2})), (1, json!({"n": 2}))],
    };
    assert_eq!(
        first.clone().then(second.clone()),
        LedgerChange::Steps {
            phase: json!("p2"),
            steps: vec![
                (0, json!({"n": 1})),
                (2, json!({"n": 2})),
                (1, json!({"n": 2}))
            ],
        }
    );
    assert_eq!(
        LedgerChange::Whole(whole.clone()).then(first).then(second),
        LedgerChange::Whole(
            json!({"sagaId": "s", "phase": "p2", "steps": [{"n": 1}, {"n": 2}, {"n": 2}]})
        )
    );
    // A whole ledger replaces whatever came before it.
    assert_eq!(
        LedgerChange::Steps {
            phase: json!("p0"),
            steps: vec![]
        }
        .then(LedgerChange::Whole(whole.clone())),
        LedgerChange::Whole(whole.clone())
    );
    // A change that does not fit the ledger is refused, not guessed at.
    let mut ledger = whole;
    assert!(apply(&mut ledger, json!("p"), vec![(3, json!({}))]).is_err());
    assert!(apply(&mut json!([]), json!("p"), vec![]).is_err());
}

/// A saga's journal and its task's store in one state file, as the executor keeps them,
/// the journal failing its first `failing` ending writes.
struct Beside {
    journal: crate::journal::Wrapped<crate::journal::SqliteJournal, FailingEnds>,
    task: TaskHandle,
    store: agent_host::SqliteTaskStore,
    _dir: tempfile::TempDir,
}

struct FailingEnds(AtomicU32);

impl crate::journal::Around for FailingEnds {
    fn around<'a, T: Send + 'a>(
        &'a self,
        what: crate::journal::Call<'a>,
        call: futures::future::BoxFuture<'a, Result<T>>,
    ) -> futures::future::BoxFuture<'a, Result<T>> {
        let fail = matches!(what, crate::journal::Call::End { .. })
            && self
                .0
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
        Box::pin(async move {
            if fail {
                return Err(Error::Journal("database or disk is full".into()));
            }
            call.await
        })
    }
}

impl Beside {
    /// `what` names the state file in `sqlite::commits`: one of its own per test.
    async fn new(failing: u32, what: &'static str) -> Self {
        use crate::journal::SagaLog;
        let dir = tempfile::tempdir().unwrap();
        let db =
            sagaplane_storage::sqlite::Database::open(&dir.path().join("state.db"), what).unwrap();
        let journal = crate::journal::Wrapped {
            inner: Arc::new(crate::journal::SqliteJournal::on(&db).unwrap()),
            around: FailingEnds(AtomicU32::new(failing)),
        };
        let store = agent_host::SqliteTaskStore::on(&db).unwrap();
        let header = crate::journal::conformance::header("sg");
        journal.begin(&header, &[]).await.unwrap();
        let task = TaskManager::new(Arc::new(store.clone()))
            .create(submitted(&header.task_id, &header.context_id))
            .await
            .unwrap();
        Self {
            journal,
            task,
            store,
            _dir: dir,
        }
    }

    fn end_of(&self, entries: &'static [crate::journal::Entry]) -> EndWrite<'_> {
        EndWrite {
            journal: &self.journal,
            saga_id: "sg",
            epoch: 1,
            entries,
            ending: crate::journal::Ending::default(),
        }
    }

    async fn stored(&self) -> Task {
        self.store.get(self.task.id()).await.unwrap().unwrap()
    }

    async fn finished(&self) -> bool {
        use crate::journal::Headers;
        self.journal.saga_of_task(self.task.id()).await.unwrap() == Some(("sg".into(), true))
    }
}

fn finish(ending: Ending) -> Command {
    Command::Finish {
        ending,
        reason: "the end".into(),
    }
}

static LAST_STEP: [crate::journal::Entry; 1] =
    [crate::journal::Entry::Event(Event::Cancel { now_ms: 1 })];

#[tokio::test]
async fn the_end_carries_what_waits_and_is_one_write_with_the_saga_s_last_entries_and_mark() {
    let f = Beside::new(0, "report-end-test").await;
    let saga = supplier();
    // Progress gathers for a minute: still waiting when the saga ends.
    let (reporter, reporting) = TaskReporter::start(
        f.task.clone(),
        vec![("sagaId".into(), json!("sg"))],
        Duration::from_secs(60),
        true,
    );
    let stops = reporting.stops();
    reporter.report_all(&[report("s0", "started")], &saga).await;
    let commits = sagaplane_storage::sqlite::commits("report-end-test");
    reporter
        .end(&[finish(Ending::Completed)], &saga, &f.end_of(&LAST_STEP))
        .await
        .unwrap();
    assert_eq!(
        sagaplane_storage::sqlite::commits("report-end-test") - commits,
        1,
        "the progress, the end, the entries and the mark: one commit"
    );
    let task = f.stored().await;
    assert_eq!(task.status.state, TaskState::Completed);
    assert_eq!(history(&task), ["s0: started", "the end"]);
    assert_eq!(task.metadata.as_ref().unwrap()["sagaId"], json!("sg"));
    assert!(ledger_of(&task).is_some());
    assert!(f.finished().await);
    let entries = f.journal.load("sg").await.unwrap().unwrap().1;
    assert_eq!(entries, LAST_STEP);
    assert_eq!(*stops.borrow(), 1, "the end is signalled once written");
    drop(reporter);
    reporting.finished().await;
}

#[tokio::test]
async fn an_end_whose_write_failed_is_written_again_whole_and_once() {
    let f = Beside::new(1, "report-failed-end-test").await;
    let saga = supplier();
    let (reporter, reporting) =
        TaskReporter::start(f.task.clone(), Vec::new(), Duration::from_secs(60), true);
    reporter.report_all(&[report("s0", "started")], &saga).await;
    let end = f.end_of(&LAST_STEP);
    let shown = [finish(Ending::Compensated)];
    assert!(reporter.end(&shown, &saga, &end).await.is_err());
    assert_eq!(f.stored().await.status.state, TaskState::Submitted);
    assert!(!f.finished().await, "nothing of a failed end is written");
    reporter.end(&shown, &saga, &end).await.unwrap();
    let task = f.stored().await;
    assert_eq!(task.status.state, TaskState::Failed);
    assert_eq!(history(&task), ["s0: started", "the end"]);
    assert_eq!(task.metadata.unwrap()["outcome"], json!("compensated"));
    assert!(f.finished().await);
    assert_eq!(f.journal.load("sg").await.unwrap().unwrap().1, LAST_STEP);
    drop(reporter);
    reporting.finished().await;
}

#[tokio::test]
async fn an_end_on_a_task_that_ended_already_is_journaled_and_marked_alone() {
    let f = Beside::new(0, "report-ended-task-test").await;
    let saga = supplier();
    f.task.set_status(TaskState::Completed, None).await.unwrap();
    let (reporter, reporting) =
        TaskReporter::start(f.task.clone(), Vec::new(), Duration::ZERO, true);
    reporter
        .end(&[finish(Ending::Completed)], &saga, &f.end_of(&[]))
        .await
        .unwrap();
    assert!(f.finished().await);
    let task = f.stored().await;
    assert_eq!(task.status.state, TaskState::Completed);
    assert!(history(&task).is_empty(), "the task kept what it showed");
    drop(reporter);
    reporting.finished().await;
}

#[tokio::test(start_paused = true)]
async fn progress_gathers_for_its_window_and_a_stop_or_the_close_ends_the_wait() {
    let mut f = Fixture::new().await;
    f.release(16);
    let gather = Duration::from_millis(100);
    let (reporter, reporting) = TaskReporter::start(f.task.clone(), Vec::new(), gather, false);
    let step = Duration::from_millis(30);

    // Progress alone waits out the window, and everything reported in it shares a write.
    let first = tokio::time::Instant::now();
    f.saga.step(Event::Start { now_ms: 0 });
    reporter
        .report_all(&[report("a", "started")], &f.saga)
        .await;
    tokio::time::sleep(step).await;
    reporter
        .report_all(&[report("a", "succeeded")], &f.saga)
        .await;
    f.arrived.recv().await.unwrap();
    assert_eq!(first.elapsed(), gather);
    assert_eq!(history(&f.stored().await), ["a: started", "a: succeeded"]);

    // A pause goes out as soon as it is reported, with the progress waiting before it.
    let second = tokio::time::Instant::now();
    reporter
        .report_all(&[report("b", "started")], &f.saga)
        .await;
    tokio::time::sleep(step).await;
    let pause = Command::Pause {
        reason: "step b needs approval".into(),
    };
    reporter.report_all(&[pause], &f.saga).await;
    f.arrived.recv().await.unwrap();
    assert_eq!(second.elapsed(), step);
    let task = f.stored().await;
    assert_eq!(
        history(&task)[2..],
        ["b: started".to_owned(), task_text(&task)]
    );
    assert_eq!(task.status.state, TaskState::InputRequired);

    // So does what waits when the driver is gone.
    let third = tokio::time::Instant::now();
    reporter
        .report_all(&[report("b", "approved")], &f.saga)
        .await;
    drop(reporter);
    reporting.finished().await;
    assert_eq!(third.elapsed(), Duration::ZERO);
    assert_eq!(history(&f.stored().await).last().unwrap(), "b: approved");
}

/// The text of the task's status message.
fn task_text(task: &Task) -> String {
    history(&Task {
        history: task.status.message.clone().map(|m| vec![m]),
        ..task.clone()
    })
    .remove(0)
}

#[tokio::test(start_paused = true)]
async fn a_gather_longer_than_the_longest_is_cut_to_it() {
    let mut f = Fixture::new().await;
    f.release(4);
    let (reporter, reporting) =
        TaskReporter::start(f.task.clone(), Vec::new(), Duration::MAX, false);
    let first = tokio::time::Instant::now();
    f.saga.step(Event::Start { now_ms: 0 });
    reporter
        .report_all(&[report("a", "started")], &f.saga)
        .await;
    f.arrived.recv().await.unwrap();
    assert_eq!(first.elapsed(), MAX_GATHER);
    drop(reporter);
    reporting.finished().await;
}

#[tokio::test(start_paused = true)]
async fn progress_gathers_longer_after_each_progress_write_and_afresh_after_a_stop() {
    let mut f = Fixture::new().await;
    f.release(64);
    let gather = Duration::from_millis(100);
    let (reporter, reporting) = TaskReporter::start(f.task.clone(), Vec::new(), gather, false);
    f.saga.step(Event::Start { now_ms: 0 });

    // Progress every 10 ms: each write waits twice as long as the one before, up to
    // GATHER_GROWTH times the window.
    let mut waits = Vec::new();
    for _ in 0..7 {
        let since = tokio::time::Instant::now();
        loop {
            reporter
                .report_all(&[report("a", "still running")], &f.saga)
                .await;
            tokio::select! {
                biased;
                Some(()) = f.arrived.recv() => break,
                () = tokio::time::sleep(Duration::from_millis(10)) => {}
            }
        }
        waits.push(since.elapsed().as_millis());
    }
    assert_eq!(waits, [100, 200, 400, 800, 1600, 1600, 1600]);

    // A pause is written at once, and the progress after it gathers for the window again.
    reporter
        .report_all(
            &[Command::Pause {
                reason: "step a needs approval".into(),
            }],
            &f.saga,
        )
        .await;
    f.arrived.recv().await.unwrap();
    let since = tokio::time::Instant::now();
    reporter
        .report_all(&[report("a", "approved")], &f.saga)
        .await;
    f.arrived.recv().await.unwrap();
    assert_eq!(since.elapsed(), gather);
    drop(reporter);
    reporting.finished().await;
}
