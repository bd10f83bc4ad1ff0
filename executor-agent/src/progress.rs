//! A saga's progress on its A2A task. The journal holds every step the driver takes; the
//! task's stored row changes only with the state it shows (a saga that waited for a slot
//! starts, a pause, the saga going on after one) and at the end, and then in the journal's
//! own write of that step (`StepWrite`, carrying the task store's `TaskWrite`), so that
//! listings filter and order by state and the row never shows what the journal lacks.
//! The statuses in between are announced to the task's subscribers as they are journaled,
//! and not written: every read of an unfinished saga's task brings the stored row up to
//! date from the journal (`task_view`, `Executor::shown`), and the next write carries
//! them.

use std::sync::{Arc, Mutex};

use agent_host::TaskHandle;
use agent_host::sdk::{Artifact, Message, Task, TaskState};
use agent_host::tasks::put_artifact;
use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::driver::{Reporter, StepWrite};
use crate::error::{Error, Result};
use crate::saga::{Command, Saga};
use crate::sync;
use crate::task_view::{Shown, ledger_artifact, shown_statuses, unwound};

/// Statuses to show, each a state and its message.
type Statuses = Vec<(TaskState, Option<Message>)>;
/// Members of the task's metadata to set.
type Members = Vec<(String, Value)>;

/// What the stored task lacks of what the saga showed.
#[derive(Default)]
pub struct Unwritten {
    /// The state the stored task shows; `None` until it is read, at the first report.
    stored: Option<TaskState>,
    /// What was shown since the task was last written, in order: statuses (announced
    /// already) and people's answers.
    shown: Vec<Shown>,
    /// Members of the task's metadata to set with the next write (the saga's id;
    /// `outcome` when the saga ended other than completed).
    metadata: Members,
    /// Whether the write creating the task showed the saga's first step.
    first_step_shown: bool,
}

impl Unwritten {
    /// A task its saga's begin created showing the saga's first step, in `state`: it
    /// lacks nothing.
    pub fn created(state: TaskState) -> Self {
        Self {
            stored: Some(state),
            first_step_shown: true,
            ..Self::default()
        }
    }

    /// A task that lacks nothing but the members `metadata` of its metadata.
    pub fn metadata(metadata: Members) -> Self {
        Self {
            metadata,
            ..Self::default()
        }
    }

    /// A resumed saga's task, whose row shows `stored` and lacks `shown` and the members
    /// `metadata` of what its journal shows: the next write carries them.
    pub fn behind(stored: TaskState, shown: Vec<Shown>, metadata: Members) -> Self {
        Self {
            stored: Some(stored),
            shown,
            metadata,
            first_step_shown: false,
        }
    }

    /// Writes what `task` lacks on it now, with the saga's `ledger`: for a row that shows
    /// another state than its journal (left so by an earlier release, which wrote a
    /// pause after journaling it), since listings filter by it; `seq`: how many of the
    /// saga's events the journal holds. What is still unwritten: nothing, or all of it
    /// when the write failed.
    pub async fn write_now(self, task: &TaskHandle, ledger: Option<Artifact>, seq: u64) -> Self {
        let (history, statuses, _) = assemble(task, &self.shown, 0);
        let Some((state, _)) = statuses.last() else {
            return self;
        };
        let state = state.clone();
        let metadata = self.metadata.clone();
        let written = task
            .change_with_statuses(
                |task| {
                    task.history.get_or_insert_with(Vec::new).extend(history);
                    let members = task.metadata.get_or_insert_with(Default::default);
                    members.extend(metadata);
                    Ok(ledger.map(|ledger| put_artifact(task, ledger)))
                },
                statuses,
                0,
                Some(seq),
            )
            .await;
        match written {
            Ok(()) => Self::behind(state, Vec::new(), Vec::new()),
            Err(e) => {
                tracing::warn!(task = task.id(), error = %e, "cannot show on the resumed saga's task what its journal holds");
                self
            }
        }
    }
}

/// Shows a saga's progress on its A2A task: announced at once, written when the task's
/// state changes and at the end. Only ever after the driver journaled it, so the task
/// never runs ahead of the journal.
pub struct TaskProgress {
    task: TaskHandle,
    unwritten: Mutex<Unwritten>,
    /// Counts the pauses and the end shown on the task.
    stops: watch::Sender<u64>,
    /// Whether the journal's ending write carries the task's last write (the task store
    /// keeps its tables in the journal's database, as the executor's stores always do).
    carried: bool,
}

impl TaskProgress {
    /// Progress on `task`, which lacks `unwritten`: its next write carries it.
    /// `carried`: the journal's writes carry the task's (the task store keeps its tables
    /// in the journal's database); otherwise (a benchmark's tasks in memory) the task is
    /// written after the journal, and a crash in between leaves a saga whose task does not
    /// show how far it went. Returns a signal that changes each time a pause or the end is
    /// shown.
    pub fn start(
        task: TaskHandle,
        unwritten: Unwritten,
        carried: bool,
    ) -> (Arc<Self>, watch::Receiver<u64>) {
        let (stops, stopped) = watch::channel(0u64);
        task.work_here();
        let progress = Self {
            task,
            unwritten: Mutex::new(unwritten),
            stops,
            carried,
        };
        (Arc::new(progress), stopped)
    }

    /// The state the stored task shows, read once.
    async fn stored_state(&self) -> Option<TaskState> {
        if let Some(state) = sync::lock(&self.unwritten).stored.clone() {
            return Some(state);
        }
        let state = self.task.state().await.ok()?;
        sync::lock(&self.unwritten).stored = Some(state.clone());
        Some(state)
    }

    /// Everything unwritten, taken out.
    fn take(&self) -> (Vec<Shown>, Members) {
        let mut unwritten = sync::lock(&self.unwritten);
        (
            std::mem::take(&mut unwritten.shown),
            std::mem::take(&mut unwritten.metadata),
        )
    }

    /// What failed to be written waits for the next write, before what came since.
    fn put_back(&self, shown: Vec<Shown>, metadata: Members) {
        let mut unwritten = sync::lock(&self.unwritten);
        let newer = std::mem::replace(&mut unwritten.shown, shown);
        unwritten.shown.extend(newer);
        let newer = std::mem::replace(&mut unwritten.metadata, metadata);
        unwritten.metadata.extend(newer);
    }

    fn stopped(&self, shown: &[Command]) {
        let stops = shown
            .iter()
            .filter(|c| matches!(c, Command::Pause { .. } | Command::Finish { .. }))
            .count() as u64;
        if stops > 0 {
            self.stops.send_modify(|n| *n += stops);
        }
    }
}

/// What a write changes on the task besides its statuses: the messages that join its
/// history first, its metadata, and the ledger as the saga stands.
fn change_of<'a>(
    history: Vec<Message>,
    metadata: &'a [(String, Value)],
    saga: &'a Saga,
) -> impl FnOnce(&mut Task) -> Result<Option<String>, String> + 'a {
    move |task: &mut Task| {
        task.history.get_or_insert_with(Vec::new).extend(history);
        let members = task.metadata.get_or_insert_with(Default::default);
        members.extend(metadata.iter().cloned());
        Ok(Some(put_artifact(task, ledger_artifact(saga.ledger()))))
    }
}

/// One write of what the task lacks (`shown`, of which the first `announced` were
/// announced): the messages up to the last answer join the history as they are (their
/// statuses were announced; an answer has no event), and the statuses after it are the
/// write's, of which the first `.2` were announced.
fn assemble(
    task: &TaskHandle,
    shown: &[Shown],
    announced: usize,
) -> (Vec<Message>, Statuses, usize) {
    let split = shown
        .iter()
        .rposition(|s| matches!(s, Shown::Answer(_)))
        .map_or(0, |last| last + 1);
    let history = shown[..split]
        .iter()
        .filter_map(|s| match s {
            Shown::Answer(message) => Some(message.clone()),
            Shown::Status(_, message) => message.clone().map(|mut m| {
                m.task_id = Some(task.id().to_owned());
                m.context_id = Some(task.context_id().to_owned());
                m
            }),
        })
        .collect();
    let statuses = shown[split..]
        .iter()
        .filter_map(|s| match s {
            Shown::Status(state, message) => Some((state.clone(), message.clone())),
            Shown::Answer(_) => None,
        })
        .collect();
    (history, statuses, announced.saturating_sub(split))
}

/// How a write of the task is made durable.
#[derive(Clone, Copy)]
enum Durable<'a> {
    /// In the journal write of its step (the task store keeps its tables in the
    /// journal's database).
    CarriedBy(&'a StepWrite<'a>),
    /// After the journal write of its step (a benchmark's tasks in memory).
    After(&'a StepWrite<'a>),
    /// Alone: its step was journaled already (a new saga's first step, by its begin).
    Alone,
}

impl TaskProgress {
    /// Whether showing `statuses` (of `shown`) changes the state the stored task shows,
    /// and so is written: a pause always is (what it waits for is in its status).
    async fn changes_state(&self, shown: &[Command], statuses: &Statuses) -> bool {
        let Some((last, _)) = statuses.last() else {
            return false;
        };
        shown.iter().any(|c| matches!(c, Command::Pause { .. }))
            || self.stored_state().await.as_ref() != Some(last)
    }

    /// A step shown without a write: its statuses announced, and kept for the next write
    /// after its answer, if it took one.
    fn announce(
        &self,
        shown: &[Command],
        saga: &Saga,
        answer: Option<&Message>,
        statuses: Statuses,
    ) {
        log_stops(shown, saga, self.task.id());
        if !statuses.is_empty() {
            self.task.announce(
                || Some(ledger_artifact(saga.ledger())),
                &statuses,
                saga.events,
            );
        }
        let mut unwritten = sync::lock(&self.unwritten);
        unwritten.shown.extend(answer.cloned().map(Shown::Answer));
        unwritten.shown.extend(
            statuses
                .into_iter()
                .map(|(state, m)| Shown::Status(state, m)),
        );
    }

    /// Writes on the task what waited, the step's answer and `statuses` (of `shown`),
    /// with the ledger and the metadata waiting, as `durable` says. An error is the
    /// step's journal write failing: nothing was written, and what waited waits again. A
    /// task's write that fails after its step was journaled is announced instead, and
    /// the next write carries it.
    async fn write_with(
        &self,
        shown: &[Command],
        saga: &Saga,
        answer: Option<&Message>,
        statuses: Statuses,
        durable: Durable<'_>,
    ) -> Result<()> {
        let last = statuses.last().map(|(state, _)| state.clone());
        let (mut all, mut metadata) = self.take();
        // What waited, should the write fail; its statuses were announced when shown.
        let waited = (all.len(), metadata.len());
        all.extend(answer.cloned().map(Shown::Answer));
        all.extend(
            statuses
                .into_iter()
                .map(|(state, m)| Shown::Status(state, m)),
        );
        if unwound(shown) {
            metadata.push(("outcome".to_owned(), json!("compensated")));
        }
        let (history, to_write, announced) = assemble(&self.task, &all, waited.0);
        let change = change_of(history, &metadata, saga);
        let written = match durable {
            Durable::CarriedBy(write) => {
                self.task
                    .change_written_by(
                        change,
                        to_write,
                        announced,
                        Some(saga.events),
                        |task| async move { write.write(Some(&task)).await },
                    )
                    .await
            }
            Durable::After(_) | Durable::Alone => {
                if let Durable::After(write) = durable {
                    write.write(None).await?;
                }
                let shown_too = self
                    .task
                    .change_with_statuses(change, to_write.clone(), announced, Some(saga.events))
                    .await;
                if let Err(e) = shown_too {
                    // The journal holds them, and every read shows them: they are
                    // announced, and go with the next write.
                    tracing::warn!(task = self.task.id(), error = %e, "cannot write the saga's task yet; its next write carries what it lacks");
                    self.task.announce(
                        || Some(ledger_artifact(saga.ledger())),
                        &to_write[announced..],
                        saga.events,
                    );
                    self.put_back(all, metadata);
                    self.stopped(shown);
                    return Ok(());
                }
                Ok(())
            }
        };
        let written = match (written, durable) {
            // The task cannot take it (it ended already: shown before the saga was
            // marked finished, by a release that marked it in a write of its own).
            (Err(Error::Storage(agent_host::Error::Protocol(why))), Durable::CarriedBy(write)) => {
                tracing::debug!(task = self.task.id(), error = %why.message, "the task has ended already");
                write.write(None).await
            }
            (other, _) => other,
        };
        if let Err(e) = written {
            // Tried again with the same step: what waited goes back.
            all.truncate(waited.0);
            metadata.truncate(waited.1);
            self.put_back(all, metadata);
            return Err(e);
        }
        if let Some(last) = last {
            sync::lock(&self.unwritten).stored = Some(last);
        }
        log_stops(shown, saga, self.task.id());
        self.stopped(shown);
        Ok(())
    }
}

#[async_trait]
impl Reporter for TaskProgress {
    async fn report(&self, command: &Command, saga: &Saga) {
        self.report_all(std::slice::from_ref(command), saga).await;
    }

    /// What a step journaled already shows (a new saga's first step, which its begin
    /// created the task for): announced, or, when the state changes, written alone.
    async fn report_all(&self, shown: &[Command], saga: &Saga) {
        let statuses = shown_statuses(self.task.id(), shown, saga);
        if !self.changes_state(shown, &statuses).await {
            self.announce(shown, saga, None, statuses);
            return;
        }
        // Alone, a failed write is announced and kept: this cannot fail.
        let _ = self
            .write_with(shown, saga, None, statuses, Durable::Alone)
            .await;
    }

    /// A new saga's first step: when the task shows it since its creation, announced (a
    /// request waiting for a pause hears of it), and nothing kept for the next write;
    /// otherwise (a task created on its own, in a benchmark) reported as any step.
    async fn begun(&self, shown: &[Command], saga: &Saga) {
        if !sync::lock(&self.unwritten).first_step_shown {
            return self.report_all(shown, saga).await;
        }
        let statuses = shown_statuses(self.task.id(), shown, saga);
        log_stops(shown, saga, self.task.id());
        if !statuses.is_empty() {
            self.task.announce(
                || Some(ledger_artifact(saga.ledger())),
                &statuses,
                saga.events,
            );
        }
        self.stopped(shown);
    }

    /// A step, and what it shows: announced after its journal write when the task's state
    /// stays, carried by that write when it changes (a pause, going on, the end), so the
    /// task shows a state exactly when the journal holds it; the end's write also marks
    /// the saga finished. A person's answer the step took joins the task's history with
    /// the step's write that changes the state, or the next one.
    async fn written(&self, shown: &[Command], saga: &Saga, write: &StepWrite<'_>) -> Result<()> {
        let statuses = shown_statuses(self.task.id(), shown, saga);
        if write.ends() || self.changes_state(shown, &statuses).await {
            let durable = if self.carried {
                Durable::CarriedBy(write)
            } else {
                Durable::After(write)
            };
            return self
                .write_with(shown, saga, write.answer, statuses, durable)
                .await;
        }
        write.write(None).await?;
        self.announce(shown, saga, write.answer, statuses);
        Ok(())
    }
}

/// Logs the pauses and ends among `shown`: a pause waits for a person, who may learn of
/// it here first.
fn log_stops(shown: &[Command], saga: &Saga, task_id: &str) {
    for command in shown {
        match command {
            Command::Pause { reason } => tracing::warn!(
                saga = %saga.spec.saga_id, task = %task_id, ?reason,
                "the saga waits for a person: answer on its task with a resolution (sagaplane task resolve)"
            ),
            Command::Finish { ending, .. } => tracing::debug!(
                saga = %saga.spec.saga_id, task = %task_id, ?ending, "the saga ended"
            ),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests;
