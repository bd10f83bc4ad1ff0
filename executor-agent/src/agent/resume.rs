//! The executor's start: every unfinished saga resumed from the journal (live before
//! the executor serves), plans accepted to wait for a slot among them. A plan's task is
//! created by the write that journals its saga, so no task is left without one; a task
//! an earlier release left `SUBMITTED` without a saga is ended at the start.

use super::*;
use crate::journal::Entry;

/// At most this many sagas are claimed in one write, at a start or a takeover.
const TAKEOVER_BATCH: usize = 256;

impl Executor {
    /// Resumes every unfinished saga from the journal (call once at start), plans
    /// accepted to wait for a slot among them; how many.
    pub async fn recover(self: &Arc<Self>) -> Result<usize> {
        self.end_tasks_without_a_saga().await?;
        let journal = &self.config.journal;
        let now = chrono::Utc::now().timestamp_millis();
        if journal.is_shared() {
            // Other replicas drive the sagas they hold: this one claims those nobody
            // holds (their owner stopped, or its lease lapsed), and later ones as they
            // lapse (`take_over_lapsed`), plans waiting for a slot there included.
            let mut resumed = 0;
            loop {
                let claimed = journal.claim_lapsed(now, TAKEOVER_BATCH).await?;
                // A short batch is the last: one given back (`resume_claimed`) is not
                // claimed again in this loop.
                let last = claimed.len() < TAKEOVER_BATCH;
                resumed += self.resume_claimed(claimed, now).await?.len();
                if last {
                    return Ok(resumed);
                }
            }
        }
        // This process owns the state file (its lock), so it takes every saga over, at a
        // new epoch: a write under an older claim is refused from now on. The claims
        // share commits.
        let ids = journal.unfinished().await?;
        let claims = futures::future::join_all(
            ids.iter()
                .map(|saga_id| journal.claim(saga_id, now, Claim::TakeOver)),
        )
        .await;
        let mut claimed = Vec::new();
        for (saga_id, epoch) in ids.iter().zip(claims) {
            // None: it finished meanwhile, which only its own driver could have done.
            if let Some(epoch) = epoch? {
                claimed.push((saga_id.clone(), epoch));
            }
        }
        self.resume_claimed(claimed, now).await?;
        Ok(ids.len())
    }

    /// Takes over, on a journal replicas share, the sagas whose owner's lease lapsed (it
    /// died, or was cut off or paused past its lease), at most `TAKEOVER_BATCH` at once;
    /// how many it resumed. Each is fenced from its earlier owner by the new epoch. A
    /// journal of one process has nothing to take over.
    pub async fn take_over_lapsed(self: &Arc<Self>, now_ms: i64) -> Result<usize> {
        let journal = &self.config.journal;
        if !journal.is_shared() {
            return Ok(0);
        }
        let claimed = journal.claim_lapsed(now_ms, TAKEOVER_BATCH).await?;
        if claimed.is_empty() {
            return Ok(0);
        }
        let count = claimed.len();
        self.resume_claimed(claimed, now_ms).await?;
        tracing::info!(sagas = count, "took over sagas whose owner's lease lapsed");
        Ok(count)
    }

    /// Resumes the sagas this executor just claimed, at their epochs: each replayed from
    /// its journal, shown on its task, and live before this returns. Returns the tasks of
    /// the sagas it read (resumed or not).
    pub(super) async fn resume_claimed(
        self: &Arc<Self>,
        claimed: Vec<(String, Epoch)>,
        now: i64,
    ) -> Result<Vec<String>> {
        let journal = &self.config.journal;
        // A saga taken over calls the agents registered on any replica.
        if !claimed.is_empty() {
            self.refresh_registry().await?;
        }
        let mut begun = Vec::new();
        let mut resumed = Vec::new();
        for (saga_id, epoch) in claimed {
            let Some((header, entries)) = journal.load(&saga_id).await? else {
                continue;
            };
            if header.format != JOURNAL_FORMAT {
                let why = format!(
                    "saga {saga_id} was journaled in format {}, and this executor reads journal \
                     format {JOURNAL_FORMAT} only; start the executor release that wrote it",
                    header.format
                );
                if !journal.is_shared() {
                    // Replayed under rules it was not written by, a saga could make other
                    // calls under the keys it journaled: nothing is resumed.
                    return Err(Error::Journal(why));
                }
                // Given back, for a replica of the release that wrote it.
                tracing::error!(saga = %saga_id, "{why}");
                journal.release(&saga_id, epoch).await?;
                continue;
            }
            begun.push(header.task_id.clone());
            let recovered = match replay(header.spec.clone(), &entries, now) {
                Ok(recovered) => recovered,
                Err(e) => {
                    // Not this saga's journal as it stands: nothing of it is acted on, and
                    // the other sagas resume.
                    tracing::error!(
                        saga = %saga_id, error = %e.chain(),
                        "the saga's journal is inconsistent: it is not resumed, and its task keeps what it showed"
                    );
                    continue;
                }
            };
            let task = self
                .tasks
                .resumed(&header.task_id, &header.context_id)
                .await;
            resumed.push((task, header, entries, recovered, epoch));
        }
        // On the tasks before anyone can read them (the executor serves once this returns),
        // in writes that share commits: what the journal shows and the task's row lacks
        // (progress is written only at state changes).
        futures::future::join_all(
            resumed
                .iter()
                .map(|(task, header, entries, _, _)| catch_up(task, header, entries)),
        )
        .await;
        let resumed = resumed
            .into_iter()
            .map(|(task, header, _, recovered, epoch)| {
                (task, saga_metadata(&header), recovered, epoch)
            });
        for (task, metadata, mut recovered, epoch) in resumed {
            // A revocation recorded before the saga heard of it (the process stopped in
            // between) is told again, before the saga makes any call.
            let revoked = match &recovered.saga.spec.mandate {
                Some(hold) => {
                    self.config
                        .mandates
                        .is_revoked(&hold.principal_key, &hold.mandate_id)
                        .await?
                }
                None => false,
            };
            if revoked {
                recovered.tell_revoked(now);
            }
            let saga = recovered.saga.clone();
            self.metrics.saga_resumed();
            // Live before this returns, and so before a start serves: a cancel or an
            // answer that comes first finds the saga's driver.
            self.start_driver(
                task,
                saga,
                Start::Resumed(Box::new(recovered), epoch),
                metadata,
                None,
                None,
            );
        }
        Ok(begun)
    }

    /// Reads what other replicas registered since the last read (nothing changes on a
    /// store of one's own): a card or server registered on any replica is in force from
    /// the next plan or takeover here on; an MCP server registered anew is reached
    /// through a new session.
    pub(super) async fn refresh_registry(&self) -> Result<()> {
        for agent in self.config.registry.refresh().await? {
            self.config.mcp.forget(&agent).await;
        }
        Ok(())
    }

    /// Ends the tasks an earlier release created and left `SUBMITTED` without a saga (it
    /// stopped before journaling their plans: a plan waiting for a slot, or one a crash
    /// caught), `FAILED`, saying to send the plan again: nothing of it ran. This release
    /// creates a plan's task in the write that journals its saga, so it leaves none.
    async fn end_tasks_without_a_saga(&self) -> Result<()> {
        const PAGE: usize = 100;
        let mut after = None;
        let mut left = Vec::new();
        loop {
            let query = TaskQuery {
                state: Some(TaskState::Submitted),
                after,
                limit: PAGE,
                ..TaskQuery::default()
            };
            let page = self.tasks.store().list(&query).await?;
            for task in page.tasks {
                if self.config.journal.saga_of_task(&task.id).await?.is_none() {
                    left.push(task);
                }
            }
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        for task in &left {
            let handle = self.tasks.resumed(&task.id, &task.context_id).await;
            let text = "an earlier executor release took this plan in and stopped before \
                        journaling it: nothing ran; send the plan again";
            self.answer(&handle, TaskState::Failed, agent_message(text, None))
                .await;
        }
        if !left.is_empty() {
            tracing::warn!(
                tasks = left.len(),
                "ended the tasks an earlier release left submitted without a saga; their plans can be sent again"
            );
        }
        Ok(())
    }
}

/// Writes on a resumed saga's task what its journal holds and the task's row lacks (the
/// row is written only when the state it shows changes): the statuses in order, the
/// ledger, the saga's metadata, in one write. Each status is known by its message's id, so
/// one the task shows already is not shown again. A task that cannot be read or written
/// now keeps what it shows; every read shows the rest from the journal, and the saga's
/// next write carries its ledger and metadata.
async fn catch_up(task: &TaskHandle, header: &SagaHeader, entries: &[Entry]) {
    let shown = match task.snapshot().await {
        Ok(shown) if !shown.status.state.is_terminal() => shown,
        Ok(_) => return,
        Err(e) => {
            tracing::warn!(task = task.id(), error = %e, "cannot read the resumed saga's task");
            return;
        }
    };
    let view = match crate::task_view::view(&shown, header, entries) {
        Ok(view) => view,
        Err(e) => {
            tracing::warn!(task = task.id(), error = %e.chain(), "cannot show the resumed saga on its task");
            return;
        }
    };
    let metadata: Vec<(String, Value)> = view
        .task
        .metadata
        .iter()
        .flatten()
        .filter(|(key, value)| shown.metadata.as_ref().and_then(|m| m.get(*key)) != Some(value))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    if view.added.is_empty() {
        for (key, value) in metadata {
            if let Err(e) = task.set_metadata(&key, value).await {
                tracing::warn!(task = task.id(), error = %e, "cannot show the saga on its resumed task yet");
                return;
            }
        }
        return;
    }
    let ledger = view
        .task
        .artifacts
        .iter()
        .flatten()
        .find(|a| a.artifact_id == crate::task_view::LEDGER)
        .cloned();
    let shown = task
        .change_with_statuses(
            |task| {
                let members = task.metadata.get_or_insert_with(Default::default);
                members.extend(metadata);
                Ok(ledger.map(|ledger| agent_host::tasks::put_artifact(task, ledger)))
            },
            view.added,
            0,
        )
        .await;
    if let Err(e) = shown {
        tracing::warn!(task = task.id(), error = %e, "cannot show on the resumed saga's task what its journal holds");
    }
}
