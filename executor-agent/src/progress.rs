//! A saga's progress on its A2A task. The journal holds every step the driver takes; the
//! task's stored row is written only when the state it shows changes (a saga that waited
//! for a slot starts, a pause, the saga going on after one) and at the end, in the
//! journal's ending write, so that listings filter and order by state. The statuses in
//! between are announced to the task's subscribers as they are journaled, and not written:
//! every read of an unfinished saga's task brings the stored row up to date from the
//! journal (`task_view`, `Executor::shown`), and the next write carries them.

use std::sync::{Arc, Mutex};

use agent_host::TaskHandle;
use agent_host::sdk::{Message, Task, TaskState};
use agent_host::tasks::put_artifact;
use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::driver::{EndWrite, Reporter};
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
struct Unwritten {
    /// The state the stored task shows; `None` until it is read, at the first report.
    stored: Option<TaskState>,
    /// The statuses shown since the task was last written, in order.
    statuses: Statuses,
    /// Members of the task's metadata to set with the next write (the saga's id;
    /// `outcome` when the saga ended other than completed).
    metadata: Members,
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
    /// Progress on `task`; `metadata` goes on the task with its next write. `carried`: the
    /// journal's ending write carries the task's (the task store keeps its tables in the
    /// journal's database); otherwise (a benchmark's tasks in memory) the task is written
    /// after it, and a crash in between leaves a finished saga whose task does not show
    /// its end. Returns a signal that changes each time a pause or the end is shown.
    pub fn start(
        task: TaskHandle,
        metadata: Vec<(String, Value)>,
        carried: bool,
    ) -> (Arc<Self>, watch::Receiver<u64>) {
        let (stops, stopped) = watch::channel(0u64);
        task.work_here();
        let progress = Self {
            task,
            unwritten: Mutex::new(Unwritten {
                metadata,
                ..Unwritten::default()
            }),
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

#[async_trait]
impl Reporter for TaskProgress {
    async fn report(&self, command: &Command, saga: &Saga) {
        self.report_all(std::slice::from_ref(command), saga).await;
    }

    async fn report_all(&self, shown: &[Command], saga: &Saga) {
        let statuses = shown_statuses(self.task.id(), shown, saga);
        let Some((last, _)) = statuses.last() else {
            return;
        };
        log_stops(shown, saga, self.task.id());
        let pauses = shown.iter().any(|c| matches!(c, Command::Pause { .. }));
        let changes_state = self.stored_state().await.as_ref() != Some(last);
        if !pauses && !changes_state {
            self.task
                .announce(|| Some(ledger_artifact(saga.ledger())), &statuses);
            sync::lock(&self.unwritten).statuses.extend(statuses);
            return;
        }
        let last = last.clone();
        // What waits to be written was announced when it was shown.
        let (mut waited, mut metadata) = self.take();
        let announced = waited.len();
        waited.extend(statuses);
        let statuses = waited;
        if unwound(shown) {
            metadata.push(("outcome".to_owned(), json!("compensated")));
        }
        let written = self
            .task
            .change_with_statuses(change_of(&metadata, saga), statuses.clone(), announced)
            .await;
        match written {
            Ok(()) => sync::lock(&self.unwritten).stored = Some(last),
            Err(e) => {
                // The journal holds them, and every read shows them: they are announced,
                // and go with the next write.
                tracing::warn!(task = self.task.id(), error = %e, "cannot write the saga's task yet; its next write carries what it lacks");
                self.task.announce(
                    || Some(ledger_artifact(saga.ledger())),
                    &statuses[announced..],
                );
                self.put_back(statuses, metadata);
            }
        }
        self.stopped(shown);
    }

    /// The end, with what waits to be written before it, in the journal's ending write
    /// (`carried`): the task shows its end exactly when the journal holds it, and the
    /// saga is marked finished in the same write.
    async fn end(&self, shown: &[Command], saga: &Saga, end: &EndWrite<'_>) -> Result<()> {
        let (mut statuses, mut metadata) = self.take();
        // What waited, should the write fail.
        let waited = (statuses.len(), metadata.len());
        statuses.extend(shown_statuses(self.task.id(), shown, saga));
        if unwound(shown) {
            metadata.push(("outcome".to_owned(), json!("compensated")));
        }
        let written = if self.carried {
            self.task
                .change_written_by(
                    change_of(&metadata, saga),
                    statuses.clone(),
                    waited.0,
                    |task| async move { end.write(Some(&task)).await },
                )
                .await
        } else {
            let journaled = end.write(None).await;
            if journaled.is_ok()
                && let Err(e) = self
                    .task
                    .change_with_statuses(change_of(&metadata, saga), statuses.clone(), waited.0)
                    .await
            {
                tracing::error!(task = self.task.id(), error = %e, "the saga's end was not shown on its task");
            }
            journaled
        };
        let written = match written {
            // The task cannot take it (it ended already: shown before the saga was
            // marked finished, by a release that marked it in a write of its own).
            Err(Error::Storage(agent_host::Error::Protocol(why))) => {
                tracing::debug!(task = self.task.id(), error = %why.message, "the task has ended already");
                end.write(None).await
            }
            other => other,
        };
        if let Err(e) = written {
            // Tried again with the same end: what waited goes back.
            let (mut statuses, mut metadata) = (statuses, metadata);
            statuses.truncate(waited.0);
            metadata.truncate(waited.1);
            self.put_back(statuses, metadata);
            return Err(e);
        }
        log_stops(shown, saga, self.task.id());
        self.stopped(shown);
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
