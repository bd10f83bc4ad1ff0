//! Progress on a saga's A2A task, off the saga's path: the driver hands each step's shown
//! commands to a `TaskReporter` and goes on; one reporting task per saga writes them to
//! the task in order, folding whatever queued up during a write into the next one.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_host::TaskHandle;
use agent_host::cpu;
use agent_host::sdk::{Artifact, Message, PartContent, Task, TaskState};
use agent_host::tasks::{edit_artifact, put_artifact};
use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use crate::driver::{EndWrite, Reporter};
use crate::error::{Error, Result};
use crate::saga::model::StepRecord;
use crate::saga::{Command, Saga};
use crate::sync;
use crate::task_view::{LEDGER, ledger_artifact, status_message_id, status_of, unwound};

/// How the ledger on the task is brought up to date.
#[derive(Debug, Clone, PartialEq)]
enum LedgerChange {
    /// The whole ledger: the first report, and the one after a failed write.
    Whole(Value),
    /// Its phase, and each step that changed since the last report (by index).
    Steps {
        phase: Value,
        steps: Vec<(usize, Value)>,
    },
}

impl LedgerChange {
    /// This change followed by `next`, as one.
    fn then(self, next: LedgerChange) -> LedgerChange {
        match (self, next) {
            (_, whole @ LedgerChange::Whole(_)) => whole,
            (LedgerChange::Whole(mut ledger), LedgerChange::Steps { phase, steps }) => {
                // Cannot fail: a whole ledger has every step.
                let _ = apply(&mut ledger, phase, steps);
                LedgerChange::Whole(ledger)
            }
            (
                LedgerChange::Steps { mut steps, .. },
                LedgerChange::Steps {
                    phase,
                    steps: newer,
                },
            ) => {
                for (index, step) in newer {
                    match steps.iter_mut().find(|(i, _)| *i == index) {
                        Some(older) => older.1 = step,
                        None => steps.push((index, step)),
                    }
                }
                LedgerChange::Steps { phase, steps }
            }
        }
    }
}

/// Writes `phase` and `steps` into a ledger where it stands.
fn apply(ledger: &mut Value, phase: Value, steps: Vec<(usize, Value)>) -> Result<(), String> {
    let Value::Object(members) = ledger else {
        return Err("the ledger is not an object".into());
    };
    members.insert("phase".to_owned(), phase);
    let Some(Value::Array(entries)) = members.get_mut("steps") else {
        return Err("the ledger has no steps".into());
    };
    for (index, step) in steps {
        let entry = entries
            .get_mut(index)
            .ok_or_else(|| format!("the ledger has no step {index}"))?;
        *entry = step;
    }
    Ok(())
}

/// Writes `phase` and `steps` into the ledger artifact's data part.
fn apply_to_artifact(
    artifact: &mut Artifact,
    phase: Value,
    steps: Vec<(usize, Value)>,
) -> Result<(), String> {
    match artifact.parts.first_mut().map(|p| &mut p.content) {
        Some(PartContent::Data(ledger)) => apply(ledger, phase, steps),
        _ => Err("the artifact has no ledger data part".into()),
    }
}

/// What the driver has shown and the task does not carry yet.
#[derive(Default, Clone)]
struct Pending {
    statuses: Vec<(TaskState, Option<Message>)>,
    /// The ledger's changes since the last write, folded together.
    ledger: Option<LedgerChange>,
    /// Pauses and ends among the statuses: each is a stop once written.
    stops: u64,
    /// Members of the task's metadata to set (the saga's id; `outcome` when the saga
    /// ended other than completed).
    metadata: Vec<(String, Value)>,
    /// The driver is gone: write what is left, then end.
    closed: bool,
    /// The saga's end is among the statuses: nothing can follow it.
    ended: bool,
    /// The driver ends the saga: the reporting task leaves what it has not written to
    /// the end's write (`TaskReporter::end`), and stops.
    ending: bool,
}

impl Pending {
    /// These reports followed by `newer`, as one batch.
    fn then(mut self, newer: Pending) -> Pending {
        self.statuses.extend(newer.statuses);
        self.ledger = match (self.ledger, newer.ledger) {
            (Some(older), Some(newer)) => Some(older.then(newer)),
            (older, newer) => newer.or(older),
        };
        self.stops += newer.stops;
        self.metadata.extend(newer.metadata);
        self.closed |= newer.closed;
        self.ended |= newer.ended;
        self.ending |= newer.ending;
        self
    }

    /// Adds what people see of one step of the engine on task `task_id` (`shown`, with the
    /// saga as it stands after it, and `ledger`, how the ledger changed): each status
    /// (its message named as the journal's view names it), the pauses and the end among
    /// them, and `outcome` when the saga unwound.
    fn add(&mut self, task_id: &str, shown: &[Command], saga: &Saga, ledger: LedgerChange) {
        let stops = shown
            .iter()
            .filter(|c| matches!(c, Command::Pause { .. } | Command::Finish { .. }))
            .count() as u64;
        self.stops += stops;
        self.ended |= shown.iter().any(|c| matches!(c, Command::Finish { .. }));
        if unwound(shown) {
            self.metadata
                .push(("outcome".to_owned(), json!("compensated")));
        }
        let event = saga.events.saturating_sub(1);
        let statuses = shown.iter().filter_map(|c| status_of(c, saga));
        self.statuses
            .extend(statuses.enumerate().map(|(n, (state, message))| {
                let message = message.map(|mut m| {
                    m.message_id = status_message_id(task_id, event, n);
                    m
                });
                (state, message)
            }));
        self.ledger = Some(match self.ledger.take() {
            Some(older) => older.then(ledger),
            None => ledger,
        });
    }
}

struct Shared {
    pending: Mutex<Pending>,
    wake: Notify,
    /// Set when a write was given up: the task may lack changes, so the next report
    /// sends the whole ledger.
    resend_whole: AtomicBool,
    /// Counts the pauses and the end written on the task.
    stops: watch::Sender<u64>,
    /// Set once the reporting task has returned.
    exited: watch::Sender<bool>,
}

/// Marks the reporting task returned, however it returns.
struct Exit(Arc<Shared>);

impl Drop for Exit {
    fn drop(&mut self) {
        self.0.exited.send_replace(true);
    }
}

/// Puts `metadata` on `task`, merged into what it has (its `owner` stays). A task that
/// ended already keeps its end; a write that fails is logged, and the saga's first
/// report carries the same members again.
pub async fn show_saga(task: &TaskHandle, metadata: &[(String, Value)]) {
    for (key, value) in metadata {
        if let Err(e) = task.set_metadata(key, value.clone()).await {
            if has_ended(task).await {
                return;
            }
            tracing::warn!(task = task.id(), error = %e, "cannot show the saga on its task yet");
        }
    }
}

/// Reports a saga's progress on its A2A task. Reports reach the task in the order they
/// were made, and only ever after the driver journaled them, so the task never runs ahead
/// of the journal; the driver does not wait for the task's write.
pub struct TaskReporter {
    shared: Arc<Shared>,
    task: TaskHandle,
    /// Each step's record as last reported (empty before the first report): a step whose
    /// record is unchanged is not built or written again.
    reported: Mutex<Vec<StepRecord>>,
    /// Whether the journal's ending write carries the task's last write (the task store
    /// keeps its tables in the journal's database, as the executor's stores always do).
    carried: bool,
}

/// The reporting task of one saga.
pub struct Reporting {
    stops: watch::Receiver<u64>,
    writer: JoinHandle<()>,
}

impl Reporting {
    /// A signal that changes each time a pause or the end is on the task.
    pub fn stops(&self) -> watch::Receiver<u64> {
        self.stops.clone()
    }

    /// Waits until every report is on the task: until the end is written, or, for a saga
    /// that does not end here, until the driver has let go of its `TaskReporter`.
    pub async fn finished(self) {
        if let Err(e) = self.writer.await {
            tracing::error!(error = %e, "the saga's reporting task failed");
        }
    }
}

impl TaskReporter {
    /// Starts the reporting task for `task`; `metadata` goes on the task with the first
    /// report. Progress waits up to `gather` (at most `MAX_GATHER`) for the reports after
    /// it, so that they share one write; a pause is written at once (with whatever waits
    /// before it), and the end with the journal's ending write. `carried`: that write
    /// carries the task's (the task store keeps its tables in the journal's database);
    /// otherwise (a benchmark's tasks in memory) the task is written after it, and a
    /// crash in between leaves a finished saga whose task does not show its end.
    pub fn start(
        task: TaskHandle,
        metadata: Vec<(String, Value)>,
        gather: Duration,
        carried: bool,
    ) -> (Arc<Self>, Reporting) {
        let (stops_tx, stops) = watch::channel(0u64);
        let shared = Arc::new(Shared {
            pending: Mutex::new(Pending {
                metadata,
                ..Pending::default()
            }),
            wake: Notify::new(),
            resend_whole: AtomicBool::new(false),
            stops: stops_tx,
            exited: watch::Sender::new(false),
        });
        let gather = gather.min(MAX_GATHER);
        let writer = tokio::spawn(cpu::measured(
            cpu::Phase::Saga,
            write_reports(task.clone(), shared.clone(), gather),
        ));
        let reporter = Self {
            shared,
            task,
            reported: Mutex::new(Vec::new()),
            carried,
        };
        (Arc::new(reporter), Reporting { stops, writer })
    }

    /// Adds to what is pending, and wakes the reporting task if it has reason to act:
    /// the first report since its last write starts its wait, a stop or the close ends it.
    /// (Progress joining reports that wait already needs no wake-up.)
    fn with_pending(&self, change: impl FnOnce(&mut Pending)) {
        let wake = |pending: &mut Pending| {
            let first = pending.statuses.is_empty();
            let stops = pending.stops;
            change(pending);
            first || pending.stops > stops || pending.closed || pending.ending
        };
        let wake = wake(&mut sync::lock(&self.shared.pending));
        if wake {
            self.shared.wake.notify_one();
        }
    }

    /// How the ledger changed since the last report.
    fn ledger_change(&self, saga: &Saga) -> LedgerChange {
        let mut reported = sync::lock(&self.reported);
        if self.shared.resend_whole.swap(false, Ordering::AcqRel)
            || reported.len() != saga.records.len()
        {
            reported.clone_from(&saga.records);
            return LedgerChange::Whole(saga.ledger());
        }
        let mut steps = Vec::new();
        for (index, (seen, now)) in reported.iter_mut().zip(&saga.records).enumerate() {
            if seen != now {
                seen.clone_from(now);
                steps.push((index, saga.ledger_step(index)));
            }
        }
        LedgerChange::Steps {
            phase: saga.ledger_phase(),
            steps,
        }
    }
}

impl Drop for TaskReporter {
    fn drop(&mut self) {
        self.with_pending(|p| p.closed = true);
    }
}

#[async_trait]
impl Reporter for TaskReporter {
    async fn report(&self, command: &Command, saga: &Saga) {
        self.report_all(std::slice::from_ref(command), saga).await;
    }

    async fn report_all(&self, shown: &[Command], saga: &Saga) {
        if !shown.iter().any(|c| status_of(c, saga).is_some()) {
            return;
        }
        log_stops(shown, saga, self.task.id());
        let ledger = self.ledger_change(saga);
        let task_id = self.task.id();
        self.with_pending(|pending| pending.add(task_id, shown, saga, ledger));
    }

    /// The end, with what waits to be written before it, in the journal's ending write
    /// (`carried`), once the reporting task has stopped: the task shows its end exactly
    /// when the journal holds it, and the saga is marked finished in the same write.
    async fn end(&self, shown: &[Command], saga: &Saga, end: &EndWrite<'_>) -> Result<()> {
        self.with_pending(|pending| pending.ending = true);
        let _ = self
            .shared
            .exited
            .subscribe()
            .wait_for(|exited| *exited)
            .await;
        let waiting = std::mem::take(&mut *sync::lock(&self.shared.pending));
        let mut batch = waiting.clone();
        batch.add(self.task.id(), shown, saga, self.ledger_change(saga));
        let written = if self.carried {
            let statuses = batch.statuses.clone();
            self.task
                .change_written_by(change_of(&batch), statuses, |task| async move {
                    end.write(Some(&task)).await
                })
                .await
        } else {
            let journaled = end.write(None).await;
            if journaled.is_ok()
                && let Err(e) = write(&self.task, &batch).await
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
            // Tried again with the same end: what waited goes back, the ledger whole.
            *sync::lock(&self.shared.pending) = waiting;
            self.shared.resend_whole.store(true, Ordering::Release);
            return Err(e);
        }
        log_stops(shown, saga, self.task.id());
        self.shared.stops.send_modify(|n| *n += batch.stops);
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

/// Tries of one write before its statuses are given up (the ledger is then sent whole
/// with the next report), and the wait before the first retry, doubled each time.
const WRITE_TRIES: u32 = 8;
const FIRST_RETRY_WAIT: Duration = Duration::from_millis(20);

/// How long progress waits on the task by default for the reports after it: short
/// beside a person watching, long beside the steps of a busy executor, whose sagas then
/// write their tasks a few times each instead of at every step.
pub const GATHER_PROGRESS: Duration = Duration::from_millis(100);

/// The longest progress may gather (a longer wait is cut to this).
pub const MAX_GATHER: Duration = Duration::from_secs(60);

/// A saga's progress gathers twice as long after each of its progress writes, up to this
/// many times `gather`: a saga that lives long, as every saga does on a busy executor,
/// writes its progress a number of times that grows with the log of its life, not with
/// its life. A pause or the end is still written at once, and the wait starts afresh.
const GATHER_GROWTH: u32 = 16;

/// The reporting task: waits for reports, lets progress gather (`gather`, then longer,
/// `GATHER_GROWTH`), and writes all that queued up in one durable write (every status in
/// order, the ledger's changes folded), then signals the stops among them. A write that
/// fails is tried again, with what queued up meanwhile.
async fn write_reports(task: TaskHandle, shared: Arc<Shared>, gather: Duration) {
    let _exit = Exit(shared.clone());
    let mut failed: Option<(Pending, u32)> = None;
    let longest = gather.saturating_mul(GATHER_GROWTH).min(MAX_GATHER);
    let mut wait = gather;
    loop {
        if failed.is_none() {
            shared.wake.notified().await;
            wait_for_more(&shared, wait).await;
        }
        let queued = {
            let mut pending = sync::lock(&shared.pending);
            if pending.ending {
                // The end's write takes what is not written yet, a failed write's too.
                if let Some((earlier, _)) = failed.take() {
                    *pending = earlier.then(std::mem::take(&mut *pending));
                }
                return;
            }
            std::mem::take(&mut *pending)
        };
        let (batch, tries) = match failed.take() {
            Some((earlier, tries)) => (earlier.then(queued), tries),
            None => (queued, 0),
        };
        if let Err(e) = write(&task, &batch).await {
            let tries = tries + 1;
            // Only the store's own failures pass; a refusal would be refused again.
            if matches!(e, agent_host::Error::Store(_)) && tries < WRITE_TRIES {
                tracing::warn!(task = task.id(), error = %e, tries, "cannot report saga progress yet");
                tokio::time::sleep(FIRST_RETRY_WAIT * 2u32.pow(tries - 1)).await;
                failed = Some((batch, tries));
                continue;
            }
            if has_ended(&task).await {
                // Recovery showing an end that was shown before its finish mark was lost.
                tracing::debug!(task = task.id(), "the task has ended already");
            } else {
                tracing::error!(task = task.id(), error = %e, "saga progress lost");
                shared.resend_whole.store(true, Ordering::Release);
            }
        }
        if batch.stops > 0 {
            shared.stops.send_modify(|n| *n += batch.stops);
            wait = gather;
        } else {
            wait = wait.saturating_mul(2).min(longest);
        }
        // After the end there is nothing more to write: the task is done at once,
        // without waiting for the driver to let go.
        if batch.closed || batch.ended {
            return;
        }
    }
}

/// Waits until `gather` has passed since now, or a pause, the end or the driver's close is
/// pending, whichever comes first.
async fn wait_for_more(shared: &Shared, gather: Duration) {
    if gather.is_zero() {
        return;
    }
    let deadline = tokio::time::Instant::now() + gather;
    loop {
        let urgent = {
            let pending = sync::lock(&shared.pending);
            pending.stops > 0 || pending.closed || pending.ending
        };
        if urgent {
            return;
        }
        tokio::select! {
            () = tokio::time::sleep_until(deadline) => return,
            () = shared.wake.notified() => {}
        }
    }
}

async fn has_ended(task: &TaskHandle) -> bool {
    task.snapshot()
        .await
        .is_ok_and(|t| t.status.state.is_terminal())
}

/// One batch of reports (metadata, ledger changes, statuses) in one durable write.
async fn write(task: &TaskHandle, batch: &Pending) -> agent_host::Result<()> {
    if batch.statuses.is_empty() {
        for (key, value) in &batch.metadata {
            task.set_metadata(key, value.clone()).await?;
        }
        return Ok(());
    }
    task.change_with_statuses(change_of(batch), batch.statuses.clone())
        .await
}

/// What a batch changes on the task besides its statuses: metadata and the ledger. What
/// it consumes is copied, so that a failed write can be tried again.
fn change_of(batch: &Pending) -> impl FnOnce(&mut Task) -> Result<Option<String>, String> + '_ {
    |task: &mut Task| {
        let members = task.metadata.get_or_insert_with(Default::default);
        for (key, value) in &batch.metadata {
            members.insert(key.clone(), value.clone());
        }
        match &batch.ledger {
            Some(LedgerChange::Steps { phase, steps }) => {
                edit_artifact(task, LEDGER, |artifact| {
                    apply_to_artifact(artifact, phase.clone(), steps.clone())
                })?;
                Ok(Some(LEDGER.to_owned()))
            }
            Some(LedgerChange::Whole(ledger)) => {
                Ok(Some(put_artifact(task, ledger_artifact(ledger.clone()))))
            }
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests;
