//! The sagas this process drives: launching a driver (registered as live before it
//! acts), telling drivers of a revocation, and where a task's saga is — read from the
//! journal when it is not live here, never assumed.

use super::*;
use agent_host::Watch;

/// Said to a caller whose cancel or answer names a saga that is journaled, unfinished and
/// not driven by this process (its driver stopped on a journal it could not write).
pub(super) const NOT_DRIVEN_HERE: &str = "its saga is journaled and not finished, but this executor \
     process does not drive it; it resumes when the executor next starts";

/// Where a task's saga is: read from the journal when this process does not drive it,
/// never assumed.
pub(super) enum Driven {
    /// Driven here: its control and its stops.
    Here(mpsc::Sender<Control>, watch::Receiver<u64>),
    /// Begun for this task, not finished, and not driven by this process.
    Elsewhere,
    /// Begun for this task and finished.
    Ended,
    /// No saga was begun for this task: nothing ran.
    Never,
}

pub(super) struct Live {
    pub(super) control: mpsc::Sender<Control>,
    pub(super) stops: watch::Receiver<u64>,
    /// The principal's key and the mandate's id the saga runs under.
    pub(super) mandate: Option<(String, String)>,
}

impl Executor {
    /// Extends the leases of every saga this process drives, plans waiting for a slot
    /// included, in one journal write.
    pub async fn renew_leases(&self, now_ms: i64) -> Result<usize> {
        self.config.journal.renew(now_ms).await
    }

    /// Starts a driver for `saga` reporting on `task`, which lacks `unwritten`, holding `permit` or waiting for a slot; returns
    /// once the saga first stops. `intake`, for a new plan, ends once the saga is live.
    pub(super) async fn launch(
        self: &Arc<Self>,
        task: TaskHandle,
        saga: Saga,
        start: Start,
        unwritten: Unwritten,
        permit: Option<Permit>,
        intake: Option<Intake>,
    ) {
        let mut first_stop =
            self.start_driver(task.clone(), saga, start, unwritten, permit, intake);
        // At a stop, the sender is answered with what stands: the process is going.
        if first_stop.changed().await.is_err() && !self.config.shutdown.is_cancelled() {
            self.until_stopped_elsewhere(&task).await;
        }
    }

    /// The driver ended before the saga showed a pause or its end, and this process is
    /// not stopping: another replica took the saga over. Whoever waits here for the
    /// plan's answer waits for the pause or the end that the replica driving it now shows.
    async fn until_stopped_elsewhere(&self, task: &TaskHandle) {
        let stopped =
            |state: &TaskState| state.is_terminal() || agent_host::sdk::is_interrupted(state);
        task.left_to_another();
        let Ok(mut events) = self.tasks.watch(task.id(), Watch::End) else {
            return;
        };
        self.tasks.follow_writer(task.id(), Watch::End).await;
        // Read from the store: what this process last wrote of the task is behind.
        if let Ok(Some(stored)) = self.tasks.store().get(task.id()).await
            && stopped(&self.shown(stored).await.task.status.state)
        {
            return;
        }
        tokio::select! {
            _ = events.recv() => {}
            () = self.config.shutdown.cancelled() => {}
        }
    }

    /// Registers `saga` as live here and spawns its driver, reporting on `task`, which
    /// lacks `unwritten`; returns the saga's stops. Once
    /// this returns, a cancel or an answer for the saga reaches its driver.
    pub(super) fn start_driver(
        self: &Arc<Self>,
        task: TaskHandle,
        saga: Saga,
        start: Start,
        unwritten: Unwritten,
        permit: Option<Permit>,
        intake: Option<Intake>,
    ) -> watch::Receiver<u64> {
        let (control, rx) = mpsc::channel(8);
        let (reporter, stops) =
            TaskProgress::start(task.clone(), unwritten, self.config.tasks_beside_journal);
        let reporter: Arc<dyn crate::driver::Reporter> =
            Arc::new(MeteredReporter::new(reporter, self.metrics.clone(), &saga));
        let reporter: Arc<dyn crate::driver::Reporter> = match &self.config.traces {
            Some(traces) => Arc::new(crate::telemetry::TracedReporter::new(
                reporter,
                traces.clone(),
                &saga,
            )),
            None => reporter,
        };
        let first_stop = stops.clone();
        let mandate = saga
            .spec
            .mandate
            .as_ref()
            .map(|h| (h.principal_key.clone(), h.mandate_id.clone()));
        sync::lock(&self.live).insert(
            task.id().to_owned(),
            Live {
                control,
                stops,
                mandate,
            },
        );
        // A cancel that waited for the saga to start finds it live now.
        drop(intake);
        let (journal, invoker, me, task_id, reported_task) = (
            self.config.journal.clone(),
            self.invoker(),
            self.clone(),
            task.id().to_owned(),
            task.clone(),
        );
        let saga_id = saga.spec.saga_id.clone();
        let stop = self.config.shutdown.clone();
        let revocations = Arc::new(self.config.mandates.clone());
        let slot = SlotHold::new(self.slots.clone(), permit);
        self.drivers.spawn(cpu::measured(cpu::Phase::Saga, async move {
            let driven = Driver {
                saga_id,
                journal,
                invoker,
                reporter,
                control: rx,
                stop,
                slot,
                revocations,
            }
            .run(saga, start)
            .await;
            if let Ok(Phase::Done { ending }) = &driven {
                me.metrics.saga_ended(*ending);
            }
            if let Err(e @ Error::Fenced { .. }) = &driven {
                // Its lease lapsed (this process was paused or cut off) and another
                // replica drives it now: nothing more is done for it here.
                reported_task.left_to_another();
                tracing::warn!(
                    task = %task_id, error = %e,
                    "another replica took the saga over; this one stops driving it"
                );
            } else if let Err(e) = driven {
                // Only a stop ends a driver whose journal cannot be written. The task
                // keeps what it showed: marking it failed would run ahead of the journal,
                // where the saga is unfinished and resumes at the next start.
                tracing::error!(
                    task = %task_id, error = %e.chain(),
                    "the saga stopped with its journal unwritable; it resumes from the journal at the next start"
                );
            }
            sync::lock(&me.live).remove(&task_id);
        }));
        first_stop
    }

    /// Records a principal's signed revocation, then tells every saga under that mandate
    /// driven here and waits until each has journaled it (from then on none of them
    /// starts a forward attempt at or before its pivot). Returns what was revoked and
    /// what it did to those sagas.
    pub async fn revoke(&self, document: &Value) -> Result<(Revoked, RevocationHeard)> {
        let revoked = self.config.mandates.revoke(document).await?;
        tracing::info!(
            principal_key = ?revoked.principal_key,
            mandate = ?revoked.mandate_id,
            "a principal revoked a mandate: new plans under it are refused, its sagas before their pivot unwind"
        );
        let key = (revoked.principal_key.clone(), revoked.mandate_id.clone());
        let controls: Vec<mpsc::Sender<Control>> = sync::lock(&self.live)
            .values()
            .filter(|l| l.mandate.as_ref() == Some(&key))
            .map(|l| l.control.clone())
            .collect();
        let heard = futures::future::join_all(controls.into_iter().map(tell_revoked)).await;
        Ok((revoked, RevocationHeard::count(heard)))
    }

    pub(super) fn live_control(
        &self,
        task_id: &str,
    ) -> Option<(mpsc::Sender<Control>, watch::Receiver<u64>)> {
        sync::lock(&self.live)
            .get(task_id)
            .map(|l| (l.control.clone(), l.stops.clone()))
    }

    /// Where the saga of `task` is. A saga that is not live here is looked up in the
    /// journal, by its task.
    pub(super) async fn driven(&self, task: &TaskHandle) -> Result<Driven, A2AError> {
        if let Some((control, stops)) = self.live_control(task.id()) {
            return Ok(Driven::Here(control, stops));
        }
        let unreadable = |e: Error| {
            tracing::error!(task = %task.id(), "cannot tell where a task's saga is");
            A2AError::internal(format!("{}; try again", e.reply("finding the task's saga")))
        };
        let shown = task
            .snapshot()
            .await
            .map_err(|e| unreadable(Error::Storage(e)))?;
        if shown.status.state.is_terminal() {
            return Ok(Driven::Ended);
        }
        let journal = &self.config.journal;
        Ok(
            match journal.saga_of_task(task.id()).await.map_err(&unreadable)? {
                Some((_, false)) => Driven::Elsewhere,
                Some((_, true)) => Driven::Ended,
                None => Driven::Never,
            },
        )
    }
}

/// How long the revocation route waits for one saga to journal the revocation. A saga
/// whose journal cannot be written meanwhile acts on nothing either; it is told again
/// from the mandate book when it resumes.
const REVOCATION_HEARD_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

/// Tells one saga's driver that its mandate was revoked, and waits for its answer.
async fn tell_revoked(control: mpsc::Sender<Control>) -> Option<MandateEndEffect> {
    let (reply, heard) = oneshot::channel();
    control.send(Control::MandateRevoked(reply)).await.ok()?;
    tokio::time::timeout(REVOCATION_HEARD_WITHIN, heard)
        .await
        .ok()?
        .ok()
}

/// What a revocation did to the sagas under the mandate that this process drives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RevocationHeard {
    /// They unwind (at once, or once the call they have out answers).
    pub unwinding: usize,
    /// Their pivot's call is out or its outcome unknown: no attempt starts again; its
    /// answer, or a person, decides whether they finish or unwind.
    pub held_at_pivot: usize,
    /// Past their pivot: they finish the commitment made.
    pub finishing: usize,
    /// They did not say within `REVOCATION_HEARD_WITHIN` (a journal that cannot be
    /// written, a stop): they act on nothing meanwhile, and hear it when they resume.
    pub not_yet_heard: usize,
}

impl RevocationHeard {
    fn count(heard: Vec<Option<MandateEndEffect>>) -> Self {
        let mut counted = Self::default();
        for effect in heard {
            match effect {
                Some(MandateEndEffect::Unwinds) => counted.unwinding += 1,
                Some(MandateEndEffect::HeldAtPivot) => counted.held_at_pivot += 1,
                Some(MandateEndEffect::Finishes) => counted.finishing += 1,
                None => counted.not_yet_heard += 1,
            }
        }
        counted
    }
}
