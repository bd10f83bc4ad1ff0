//! Progress against a real task manager and feed: statuses between state changes reach
//! subscribers and not the store; a change of state writes everything that waited, in
//! order, with the ledger; a write that fails is announced and carried by the next; the
//! end is one write with the journal's last entries and finish mark, a change of state one
//! with its step's entries.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use agent_host::sdk::{PartContent, StreamResponse, Task, TaskState, TaskStatus};
use agent_host::tasks::{InProcessFeed, Watch};
use agent_host::{MemoryTaskStore, TaskManager, TaskStore};
use async_trait::async_trait;
use serde_json::json;

use super::*;
use crate::saga::Ending;
use crate::saga::tests::supplier;
use crate::saga::{Event, Saga};
use crate::task_view::{LEDGER, Shown, status_message_id};

/// A memory store that counts its writes, and fails the next `failing` of them.
#[derive(Default)]
struct CountedStore {
    inner: MemoryTaskStore,
    writes: AtomicU32,
    failing: AtomicU32,
}

#[async_trait]
impl TaskStore for CountedStore {
    async fn put(
        &self,
        task: &Task,
        expected: agent_host::store::Expected,
    ) -> agent_host::Result<agent_host::store::Version> {
        if self
            .failing
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(agent_host::Error::Store("disk full".into()));
        }
        self.writes.fetch_add(1, Ordering::SeqCst);
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

fn task_in(id: &str, state: TaskState) -> Task {
    Task {
        id: id.into(),
        context_id: "ctx-1".into(),
        status: TaskStatus {
            state,
            message: None,
            timestamp: None,
        },
        artifacts: None,
        history: None,
        metadata: None,
    }
}

struct Fixture {
    store: Arc<CountedStore>,
    tasks: Arc<TaskManager>,
    task: TaskHandle,
    saga: Saga,
}

impl Fixture {
    /// A task created in `state`, and a saga that has taken its first step.
    async fn new(state: TaskState) -> Self {
        let store = Arc::new(CountedStore::default());
        let tasks = TaskManager::with_feed(store.clone(), Arc::new(InProcessFeed::new()));
        let task = tasks.create(task_in("task-1", state)).await.unwrap();
        let mut saga = supplier();
        saga.step(Event::Start { now_ms: 0 });
        Self {
            store,
            tasks,
            task,
            saga,
        }
    }

    async fn stored(&self) -> Task {
        self.store.inner.get("task-1").await.unwrap().unwrap()
    }

    fn writes(&self) -> u32 {
        self.store.writes.load(Ordering::SeqCst)
    }
}

fn report(step: &str, what: &str) -> Command {
    Command::Report {
        step: step.into(),
        what: what.into(),
    }
}

fn pause() -> Command {
    Command::Pause {
        reason: "step s4 needs approval".into(),
    }
}

fn finish(ending: Ending) -> Command {
    Command::Finish {
        ending,
        reason: "the end".into(),
    }
}

/// The text of each message in the task's history, in order.
fn history(task: &Task) -> Vec<String> {
    task.history.iter().flatten().filter_map(text_of).collect()
}

fn text_of(message: &agent_host::sdk::Message) -> Option<String> {
    message.parts.iter().find_map(|p| match &p.content {
        PartContent::Text(t) => Some(t.clone()),
        _ => None,
    })
}

fn has_ledger(task: &Task) -> bool {
    task.artifacts
        .iter()
        .flatten()
        .any(|a| a.artifact_id == LEDGER)
}

#[tokio::test]
async fn progress_in_the_same_state_is_announced_and_not_written() {
    let f = Fixture::new(TaskState::Working).await;
    let mut events = f.tasks.subscribe("task-1").unwrap();
    let writes = f.writes();
    let (progress, stops) = TaskProgress::start(f.task.clone(), Unwritten::default(), false);
    progress
        .report_all(
            &[report("s0", "started"), report("s0", "succeeded")],
            &f.saga,
        )
        .await;

    assert_eq!(f.writes(), writes, "nothing written");
    assert!(history(&f.stored().await).is_empty());
    assert_eq!(*stops.borrow(), 0);
    let mut seen = Vec::new();
    let mut seqs = Vec::new();
    for _ in 0..3 {
        let announced = events.recv().await.unwrap();
        seqs.push(announced.seq);
        seen.push(announced.event);
    }
    assert_eq!(
        seqs,
        [Some(f.saga.events); 3],
        "tagged with the journal's sequence of the step, as a view reaching it says"
    );
    assert!(
        matches!(&seen[0], StreamResponse::ArtifactUpdate(a) if a.artifact.artifact_id == LEDGER),
        "{seen:?}"
    );
    let ids: Vec<String> = seen[1..]
        .iter()
        .map(|e| match e {
            StreamResponse::StatusUpdate(u) => {
                u.status.message.as_ref().unwrap().message_id.clone()
            }
            other => panic!("not a status: {other:?}"),
        })
        .collect();
    let event = f.saga.events - 1;
    assert_eq!(
        ids,
        [
            status_message_id("task-1", event, 0),
            status_message_id("task-1", event, 1)
        ],
        "named as the journal's view names them"
    );
}

#[tokio::test]
async fn a_pause_writes_what_waited_in_order_and_is_signalled_once_written() {
    let f = Fixture::new(TaskState::Working).await;
    let metadata = vec![("sagaId".to_owned(), json!("sg_1"))];
    let (progress, mut stops) =
        TaskProgress::start(f.task.clone(), Unwritten::metadata(metadata), false);
    progress
        .report_all(&[report("s0", "started")], &f.saga)
        .await;
    progress
        .report_all(&[report("s0", "succeeded")], &f.saga)
        .await;
    let writes = f.writes();
    progress.report_all(&[pause()], &f.saga).await;

    assert_eq!(f.writes(), writes + 1, "one write");
    assert!(stops.has_changed().unwrap());
    assert_eq!(*stops.borrow_and_update(), 1);
    let task = f.stored().await;
    assert_eq!(task.status.state, TaskState::InputRequired);
    assert_eq!(history(&task)[..2], ["s0: started", "s0: succeeded"]);
    assert_eq!(history(&task).len(), 3);
    assert!(has_ledger(&task));
    assert_eq!(task.metadata.unwrap()["sagaId"], json!("sg_1"));

    // Going on after the pause changes the state again: written once more.
    progress
        .report_all(&[report("s4", "started")], &f.saga)
        .await;
    assert_eq!(f.writes(), writes + 2);
    assert_eq!(f.stored().await.status.state, TaskState::Working);
    progress
        .report_all(&[report("s4", "succeeded")], &f.saga)
        .await;
    assert_eq!(f.writes(), writes + 2, "same state: not written");
}

#[tokio::test]
async fn a_saga_that_waited_for_a_slot_is_written_working_when_it_starts() {
    let f = Fixture::new(TaskState::Submitted).await;
    let writes = f.writes();
    let (progress, _stops) = TaskProgress::start(f.task.clone(), Unwritten::default(), false);
    progress
        .report_all(&[report("s0", "started")], &f.saga)
        .await;
    assert_eq!(f.writes(), writes + 1);
    let task = f.stored().await;
    assert_eq!(task.status.state, TaskState::Working);
    assert_eq!(history(&task), ["s0: started"]);
}

#[tokio::test]
async fn a_pause_that_cannot_be_written_is_announced_and_the_next_write_carries_it() {
    let f = Fixture::new(TaskState::Working).await;
    let mut waiting = f.tasks.watch("task-1", Watch::End).unwrap();
    let (progress, stops) = TaskProgress::start(f.task.clone(), Unwritten::default(), false);
    progress
        .report_all(&[report("s0", "started")], &f.saga)
        .await;
    f.store.failing.store(1, Ordering::SeqCst);
    progress.report_all(&[pause()], &f.saga).await;

    assert_eq!(f.stored().await.status.state, TaskState::Working);
    assert_eq!(
        *stops.borrow(),
        1,
        "the pause is shown: the journal holds it"
    );
    match waiting.recv().await.unwrap().event {
        StreamResponse::StatusUpdate(u) => assert_eq!(u.status.state, TaskState::InputRequired),
        other => panic!("not the pause: {other:?}"),
    }
    // Working again, as the stored task shows: nothing to write until the next change.
    let writes = f.writes();
    progress
        .report_all(&[report("s4", "started")], &f.saga)
        .await;
    assert_eq!(f.writes(), writes);
    progress.report_all(&[pause()], &f.saga).await;
    let task = f.stored().await;
    assert_eq!(task.status.state, TaskState::InputRequired);
    let shown = history(&task);
    assert_eq!(shown.len(), 4, "{shown:?}");
    assert_eq!(shown[0], "s0: started");
    assert!(shown[1].starts_with("step s4 needs approval"), "{shown:?}");
    assert_eq!(shown[2], "s4: started");
    assert!(shown[3].starts_with("step s4 needs approval"), "{shown:?}");
}

#[tokio::test]
async fn commands_that_show_nothing_write_and_announce_nothing() {
    let f = Fixture::new(TaskState::Working).await;
    let mut events = f.tasks.subscribe("task-1").unwrap();
    let writes = f.writes();
    let (progress, _stops) = TaskProgress::start(f.task.clone(), Unwritten::default(), false);
    let refused = Command::RefuseCancel {
        reason: "past the pivot".into(),
    };
    progress.report_all(&[refused], &f.saga).await;
    assert_eq!(f.writes(), writes);
    assert!(events.try_recv().is_err());
}

/// A saga's journal and its task's store in one state file, as the executor keeps them,
/// the journal failing its first `failing` writes of the saga's steps (appends, ends).
struct Beside {
    journal: crate::journal::Wrapped<crate::journal::SqliteJournal, FailingSteps>,
    tasks: Arc<TaskManager>,
    task: TaskHandle,
    store: agent_host::SqliteTaskStore,
    _dir: tempfile::TempDir,
}

struct FailingSteps(AtomicU32);

impl crate::journal::Around for FailingSteps {
    fn around<'a, T: Send + 'a>(
        &'a self,
        what: crate::journal::Call<'a>,
        call: futures::future::BoxFuture<'a, Result<T>>,
    ) -> futures::future::BoxFuture<'a, Result<T>> {
        let fail = matches!(
            what,
            crate::journal::Call::End { .. } | crate::journal::Call::Append { .. }
        ) && self
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
            around: FailingSteps(AtomicU32::new(failing)),
        };
        let store = agent_host::SqliteTaskStore::on(&db).unwrap();
        let header = crate::journal::conformance::header("sg");
        journal.begin(&header, &[]).await.unwrap();
        let tasks = TaskManager::new(Arc::new(store.clone()));
        let task = tasks
            .create(task_in(&header.task_id, TaskState::Working))
            .await
            .unwrap();
        Self {
            journal,
            tasks,
            task,
            store,
            _dir: dir,
        }
    }

    /// The saga's end, with `entries`.
    fn end_of(&self, entries: &'static [crate::journal::Entry]) -> StepWrite<'_> {
        StepWrite {
            ending: Some(crate::journal::Ending::default()),
            ..self.step_of(entries)
        }
    }

    /// An append of the saga's, `entries`.
    fn step_of(&self, entries: &'static [crate::journal::Entry]) -> StepWrite<'_> {
        StepWrite {
            journal: &self.journal,
            saga_id: "sg",
            epoch: 1,
            entries,
            ending: None,
            answer: None,
            unrevoked: None,
        }
    }

    /// The entries the saga's journal holds.
    async fn entries(&self) -> Vec<crate::journal::Entry> {
        use crate::journal::SagaLog;
        self.journal.load("sg").await.unwrap().unwrap().1
    }

    async fn stored(&self) -> Task {
        self.store.get(self.task.id()).await.unwrap().unwrap()
    }

    async fn finished(&self) -> bool {
        use crate::journal::Headers;
        self.journal.saga_of_task(self.task.id()).await.unwrap() == Some(("sg".into(), true))
    }
}

static LAST_STEP: [crate::journal::Entry; 1] =
    [crate::journal::Entry::Event(Event::Cancel { now_ms: 1 })];
static A_STEP: [crate::journal::Entry; 1] =
    [crate::journal::Entry::Event(Event::Start { now_ms: 1 })];

#[tokio::test]
async fn a_change_of_state_is_carried_by_its_step_s_append_and_progress_is_not() {
    let f = Beside::new(0, "progress-carried-test").await;
    let saga = supplier();
    let (progress, stops) = TaskProgress::start(f.task.clone(), Unwritten::default(), true);
    progress
        .written(&[report("s0", "started")], &saga, &f.step_of(&A_STEP))
        .await
        .unwrap();
    assert!(history(&f.stored().await).is_empty(), "progress: announced");
    let commits = sagaplane_storage::sqlite::commits("progress-carried-test");
    progress
        .written(&[pause()], &saga, &f.step_of(&A_STEP))
        .await
        .unwrap();
    assert_eq!(
        sagaplane_storage::sqlite::commits("progress-carried-test") - commits,
        1,
        "the pause, what waited and the step's entries: one commit"
    );
    let task = f.stored().await;
    assert_eq!(task.status.state, TaskState::InputRequired);
    assert_eq!(history(&task).len(), 2);
    assert_eq!(history(&task)[0], "s0: started");
    assert!(has_ledger(&task));
    assert_eq!(f.entries().await.len(), 2);
    assert_eq!(*stops.borrow(), 1, "the pause is signalled once written");
    // Going on: carried again; then progress in the same state: the entries alone.
    progress
        .written(&[report("s4", "started")], &saga, &f.step_of(&A_STEP))
        .await
        .unwrap();
    assert_eq!(f.stored().await.status.state, TaskState::Working);
    progress
        .written(&[report("s4", "succeeded")], &saga, &f.step_of(&A_STEP))
        .await
        .unwrap();
    assert_eq!(history(&f.stored().await).len(), 3, "not written");
    assert_eq!(f.entries().await.len(), 4);
}

#[tokio::test]
async fn a_pause_whose_append_failed_is_not_shown_and_is_written_again_whole_and_once() {
    let f = Beside::new(1, "progress-failed-pause-test").await;
    let saga = supplier();
    let mut waiting = f.tasks.watch(f.task.id(), Watch::End).unwrap();
    let (progress, stops) = TaskProgress::start(f.task.clone(), Unwritten::default(), true);
    progress.report_all(&[report("s0", "started")], &saga).await;
    let step = f.step_of(&A_STEP);
    assert!(progress.written(&[pause()], &saga, &step).await.is_err());
    assert_eq!(f.stored().await.status.state, TaskState::Working);
    assert!(
        f.entries().await.is_empty(),
        "nothing of the step is written"
    );
    assert_eq!(*stops.borrow(), 0);
    assert!(waiting.try_recv().is_err(), "nothing announced");
    progress.written(&[pause()], &saga, &step).await.unwrap();
    let task = f.stored().await;
    assert_eq!(task.status.state, TaskState::InputRequired);
    assert_eq!(history(&task).len(), 2, "{:?}", history(&task));
    assert_eq!(f.entries().await, A_STEP);
    assert_eq!(*stops.borrow(), 1);
}

#[tokio::test]
async fn a_resumed_saga_s_next_write_carries_what_its_task_lacked() {
    let f = Beside::new(0, "progress-resumed-test").await;
    let saga = supplier();
    let lacked = agent_host::agent_message("s0: succeeded", None);
    let unwritten = Unwritten::behind(
        TaskState::Working,
        vec![Shown::Status(TaskState::Working, Some(lacked))],
        vec![("sagaId".into(), json!("sg"))],
    );
    let (progress, _stops) = TaskProgress::start(f.task.clone(), unwritten, true);
    progress
        .written(&[pause()], &saga, &f.step_of(&A_STEP))
        .await
        .unwrap();
    let task = f.stored().await;
    assert_eq!(task.status.state, TaskState::InputRequired);
    assert_eq!(history(&task)[0], "s0: succeeded");
    assert_eq!(history(&task).len(), 2);
    assert_eq!(task.metadata.unwrap()["sagaId"], json!("sg"));
}

#[tokio::test]
async fn the_end_carries_what_waits_and_is_one_write_with_the_saga_s_last_entries_and_mark() {
    use crate::journal::SagaLog;
    let f = Beside::new(0, "progress-end-test").await;
    let saga = supplier();
    let metadata = Unwritten::metadata(vec![("sagaId".into(), json!("sg"))]);
    let (progress, stops) = TaskProgress::start(f.task.clone(), metadata, true);
    progress.report_all(&[report("s0", "started")], &saga).await;
    let commits = sagaplane_storage::sqlite::commits("progress-end-test");
    progress
        .written(&[finish(Ending::Completed)], &saga, &f.end_of(&LAST_STEP))
        .await
        .unwrap();
    assert_eq!(
        sagaplane_storage::sqlite::commits("progress-end-test") - commits,
        1,
        "the progress, the end, the entries and the mark: one commit"
    );
    let task = f.stored().await;
    assert_eq!(task.status.state, TaskState::Completed);
    assert_eq!(history(&task), ["s0: started", "the end"]);
    assert_eq!(task.metadata.as_ref().unwrap()["sagaId"], json!("sg"));
    assert!(has_ledger(&task));
    assert!(f.finished().await);
    let entries = f.journal.load("sg").await.unwrap().unwrap().1;
    assert_eq!(entries, LAST_STEP);
    assert_eq!(*stops.borrow(), 1, "the end is signalled once written");
}

#[tokio::test]
async fn an_end_whose_write_failed_is_written_again_whole_and_once() {
    let f = Beside::new(1, "progress-failed-end-test").await;
    let saga = supplier();
    let (progress, stops) = TaskProgress::start(f.task.clone(), Unwritten::default(), true);
    progress.report_all(&[report("s0", "started")], &saga).await;
    let end = f.end_of(&LAST_STEP);
    let shown = [finish(Ending::Compensated)];
    assert!(progress.written(&shown, &saga, &end).await.is_err());
    assert_eq!(f.stored().await.status.state, TaskState::Working);
    assert!(!f.finished().await, "nothing of a failed end is written");
    assert_eq!(*stops.borrow(), 0);
    progress.written(&shown, &saga, &end).await.unwrap();
    let task = f.stored().await;
    assert_eq!(task.status.state, TaskState::Failed);
    assert_eq!(history(&task), ["s0: started", "the end"]);
    assert_eq!(task.metadata.unwrap()["outcome"], json!("compensated"));
    assert!(f.finished().await);
    assert_eq!(*stops.borrow(), 1);
}

#[tokio::test]
async fn an_end_on_a_task_that_ended_already_is_journaled_and_marked_alone() {
    let f = Beside::new(0, "progress-ended-task-test").await;
    let saga = supplier();
    f.task.set_status(TaskState::Completed, None).await.unwrap();
    let (progress, _stops) = TaskProgress::start(f.task.clone(), Unwritten::default(), true);
    progress
        .written(&[finish(Ending::Completed)], &saga, &f.end_of(&[]))
        .await
        .unwrap();
    assert!(f.finished().await);
    let task = f.stored().await;
    assert_eq!(task.status.state, TaskState::Completed);
    assert!(history(&task).is_empty(), "the task kept what it showed");
}

/// A person's answer, as it came.
fn answer_message(text: &str) -> agent_host::sdk::Message {
    let mut message = agent_host::agent_message(text, None);
    message.role = agent_host::sdk::Role::User;
    message
}

#[tokio::test]
async fn a_person_s_answer_joins_the_history_with_its_step_s_write_in_the_order_shown() {
    let f = Beside::new(0, "progress-answer-test").await;
    let saga = supplier();
    let (progress, _stops) = TaskProgress::start(f.task.clone(), Unwritten::default(), true);
    progress
        .written(&[pause()], &saga, &f.step_of(&A_STEP))
        .await
        .unwrap();
    // The answer that moves the saga on: one write with the status it leads to.
    let approve = answer_message("approve");
    let step = StepWrite {
        answer: Some(&approve),
        ..f.step_of(&A_STEP)
    };
    let commits = sagaplane_storage::sqlite::commits("progress-answer-test");
    progress
        .written(&[report("s4", "started")], &saga, &step)
        .await
        .unwrap();
    assert_eq!(
        sagaplane_storage::sqlite::commits("progress-answer-test") - commits,
        1
    );
    let task = f.stored().await;
    assert_eq!(task.status.state, TaskState::Working);
    let shown = history(&task);
    assert_eq!(shown[1..], ["approve", "s4: started"], "{shown:?}");
    let recorded = &task.history.as_ref().unwrap()[1];
    assert_eq!(recorded.message_id, approve.message_id, "as it came");
    assert_eq!(recorded.role, agent_host::sdk::Role::User);
    // An answer the saga took without changing state (it did not apply): kept, in order,
    // for the next write, which is the end.
    progress
        .written(&[report("s4", "succeeded")], &saga, &f.step_of(&A_STEP))
        .await
        .unwrap();
    let late = answer_message("late");
    let step = StepWrite {
        answer: Some(&late),
        ..f.step_of(&A_STEP)
    };
    progress.written(&[], &saga, &step).await.unwrap();
    progress
        .written(&[report("s5", "started")], &saga, &f.step_of(&A_STEP))
        .await
        .unwrap();
    assert_eq!(history(&f.stored().await).len(), 3, "not written yet");
    progress
        .written(&[finish(Ending::Completed)], &saga, &f.end_of(&LAST_STEP))
        .await
        .unwrap();
    let shown = history(&f.stored().await);
    assert_eq!(
        shown[3..],
        ["s4: succeeded", "late", "s5: started", "the end"],
        "{shown:?}"
    );
}

#[tokio::test]
async fn a_subscriber_hears_each_status_once_though_writes_carry_what_was_announced() {
    let f = Beside::new(0, "progress-heard-once-test").await;
    let mut events = f.tasks.subscribe(f.task.id()).unwrap();
    let saga = supplier();
    let (progress, _stops) = TaskProgress::start(f.task.clone(), Unwritten::default(), true);
    progress.report_all(&[report("s0", "started")], &saga).await;
    for shown in [pause(), report("s4", "started"), report("s4", "succeeded")] {
        progress
            .written(&[shown], &saga, &f.step_of(&A_STEP))
            .await
            .unwrap();
    }
    progress
        .written(&[finish(Ending::Completed)], &saga, &f.end_of(&LAST_STEP))
        .await
        .unwrap();
    let mut heard = Vec::new();
    while let Ok(announced) = events.try_recv() {
        if let StreamResponse::StatusUpdate(u) = announced.event {
            heard.extend(u.status.message.as_ref().and_then(text_of));
        }
    }
    let stored = history(&f.stored().await);
    assert_eq!(stored.len(), 5, "{stored:?}");
    assert_eq!(
        heard, stored,
        "every status heard once, in the stored order"
    );
}
