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
use agent_host::sdk::{Message, Task, TaskState};
use agent_host::tasks::put_artifact;
use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::driver::{Reporter, StepWrite};
use crate::error::{Error, Result};
use crate::saga::{Command, Saga};
use crate::sync;
use crate::task_view::{ledger_artifact, shown_statuses, unwound};

/// Statuses to show, each a state and its message.
type Statuses = Vec<(TaskState, Option<Message>)>;
/// Members of the task's metadata to set.
type Members = Vec<(String, Value)>;

/// What the stored task lacks of what the saga showed.
#[derive(Default)]
pub struct Unwritten {
    /// The state the stored task shows; `None` until it is read, at the first report.
    stored: Option<TaskState>,
    /// The statuses shown since the task was last written, in order.
    statuses: Statuses,
    /// Members of the task's metadata to set with the next write (the saga's id;
    /// `outcome` when the saga ended other than completed).
    metadata: Members,
}

impl Unwritten {
    /// A task that lacks nothing but the members `metadata` of its metadata.
    pub fn metadata(metadata: Members) -> Self {
        Self {
            metadata,
            ..Self::default()
        }
    }

    /// A resumed saga's task, whose row shows `stored` and lacks `statuses` and the
    /// members `metadata` of what its journal shows: the next write carries them.
    pub fn behind(stored: TaskState, statuses: Statuses, metadata: Members) -> Self {
        Self {
            stored: Some(stored),
            statuses,
            metadata,
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
        let state = self.task.snapshot().await.ok()?.status.state;
        sync::lock(&self.unwritten).stored = Some(state.clone());
        Some(state)
    }

    /// Everything unwritten, taken out.
    fn take(&self) -> (Statuses, Members) {
        let mut unwritten = sync::lock(&self.unwritten);
        (
            std::mem::take(&mut unwritten.statuses),
            std::mem::take(&mut unwritten.metadata),
        )
    }

    /// What failed to be written waits for the next write, before what came since.
    fn put_back(&self, statuses: Statuses, metadata: Members) {
        let mut unwritten = sync::lock(&self.unwritten);
        let newer = std::mem::replace(&mut unwritten.statuses, statuses);
        unwritten.statuses.extend(newer);
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

/// What a write changes on the task besides its statuses: its metadata, and the ledger
/// as the saga stands.
fn change_of<'a>(
    metadata: &'a [(String, Value)],
    saga: &'a Saga,
) -> impl FnOnce(&mut Task) -> Result<Option<String>, String> + 'a {
    move |task: &mut Task| {
        let members = task.metadata.get_or_insert_with(Default::default);
        members.extend(metadata.iter().cloned());
        Ok(Some(put_artifact(task, ledger_artifact(saga.ledger()))))
    }
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

    /// Statuses shown without a write: announced, and kept for the next write.
    fn announce(&self, shown: &[Command], saga: &Saga, statuses: Statuses) {
        log_stops(shown, saga, self.task.id());
        self.task
            .announce(|| Some(ledger_artifact(saga.ledger())), &statuses);
        sync::lock(&self.unwritten).statuses.extend(statuses);
    }

    /// Writes on the task what waited and `statuses` (of `shown`), with the ledger and
    /// the metadata waiting, in `write`, the durable write of the step that showed them
    /// (`carried`), or after it. An error is the step's write failing: nothing was
    /// written, and what waited waits again.
    async fn write_with(
        &self,
        shown: &[Command],
        saga: &Saga,
        statuses: Statuses,
        write: &StepWrite<'_>,
    ) -> Result<()> {
        let last = statuses.last().map(|(state, _)| state.clone());
        let (mut all, mut metadata) = self.take();
        // What waited, should the write fail; it was announced when it was shown.
        let waited = (all.len(), metadata.len());
        all.extend(statuses);
        if unwound(shown) {
            metadata.push(("outcome".to_owned(), json!("compensated")));
        }
        let written = if self.carried {
            self.task
                .change_written_by(
                    change_of(&metadata, saga),
                    all.clone(),
                    waited.0,
                    |task| async move { write.write(Some(&task)).await },
                )
                .await
        } else {
            write.write(None).await?;
            let shown_too = self
                .task
                .change_with_statuses(change_of(&metadata, saga), all.clone(), waited.0)
                .await;
            if let Err(e) = shown_too {
                // The journal holds them, and every read shows them: they are announced,
                // and go with the next write.
                tracing::warn!(task = self.task.id(), error = %e, "cannot write the saga's task yet; its next write carries what it lacks");
                self.task
                    .announce(|| Some(ledger_artifact(saga.ledger())), &all[waited.0..]);
                self.put_back(all, metadata);
                return Ok(());
            }
            Ok(())
        };
        let written = match written {
            // The task cannot take it (it ended already: shown before the saga was
            // marked finished, by a release that marked it in a write of its own).
            Err(Error::Storage(agent_host::Error::Protocol(why))) => {
                tracing::debug!(task = self.task.id(), error = %why.message, "the task has ended already");
                write.write(None).await
            }
            other => other,
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
            if !statuses.is_empty() {
                self.announce(shown, saga, statuses);
            }
            return;
        }
        log_stops(shown, saga, self.task.id());
        let (mut all, mut metadata) = self.take();
        let announced = all.len();
        all.extend(statuses);
        if unwound(shown) {
            metadata.push(("outcome".to_owned(), json!("compensated")));
        }
        let written = self
            .task
            .change_with_statuses(change_of(&metadata, saga), all.clone(), announced)
            .await;
        match written {
            Ok(()) => {
                sync::lock(&self.unwritten).stored = all.last().map(|(state, _)| state.clone());
            }
            Err(e) => {
                tracing::warn!(task = self.task.id(), error = %e, "cannot write the saga's task yet; its next write carries what it lacks");
                self.task
                    .announce(|| Some(ledger_artifact(saga.ledger())), &all[announced..]);
                self.put_back(all, metadata);
            }
        }
        self.stopped(shown);
    }

    /// A step, and what it shows: announced after its journal write when the task's state
    /// stays, carried by that write when it changes (a pause, going on, the end), so the
    /// task shows a state exactly when the journal holds it; the end's write also marks
    /// the saga finished.
    async fn written(&self, shown: &[Command], saga: &Saga, write: &StepWrite<'_>) -> Result<()> {
        let statuses = shown_statuses(self.task.id(), shown, saga);
        if write.ends() || self.changes_state(shown, &statuses).await {
            return self.write_with(shown, saga, statuses, write).await;
        }
        write.write(None).await?;
        if !statuses.is_empty() {
            self.announce(shown, saga, statuses);
        }
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
