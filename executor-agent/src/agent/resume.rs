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
        // What the journal shows and each task's row lacks (progress is written only at
        // state changes), for the saga's next write to carry; read before anyone can read
        // the tasks (the executor serves once this returns).
        let behind = futures::future::join_all(
            resumed
                .iter()
                .map(|(task, header, entries, _, _)| behind(task, header, entries)),
        )
        .await;
        let resumed = resumed
            .into_iter()
            .zip(behind)
            .map(|((task, _, _, recovered, epoch), unwritten)| (task, unwritten, recovered, epoch));
        for (task, unwritten, mut recovered, epoch) in resumed {
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
                unwritten,
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

/// What a resumed saga's task lacks of what its journal shows: the statuses and people's
/// answers in order, and the members of the saga's metadata; the saga's next write carries
/// them with its ledger. Each is known by its message's id, so one the task shows already
/// is not shown again. A row that shows another state than its journal (an earlier release wrote
/// a pause after journaling it, and a crash came between) is written at once, since
/// listings filter by it. A task that cannot be read now lacks the saga's metadata alone:
/// every read shows the rest from the journal.
async fn behind(task: &TaskHandle, header: &SagaHeader, entries: &[Entry]) -> Unwritten {
    let lacking_all = || Unwritten::metadata(saga_metadata(header));
    let stored = match task.snapshot().await {
        Ok(stored) if !stored.status.state.is_terminal() => stored,
        Ok(_) => return lacking_all(),
        Err(e) => {
            tracing::warn!(task = task.id(), error = %e, "cannot read the resumed saga's task");
            return lacking_all();
        }
    };
    let view = match crate::task_view::view(&stored, header, entries) {
        Ok(view) => view,
        Err(e) => {
            tracing::warn!(task = task.id(), error = %e.chain(), "cannot show the resumed saga on its task");
            return lacking_all();
        }
    };
    let metadata: Vec<(String, Value)> = view
        .task
        .metadata
        .iter()
        .flatten()
        .filter(|(key, value)| stored.metadata.as_ref().and_then(|m| m.get(*key)) != Some(value))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    let unwritten = Unwritten::behind(stored.status.state.clone(), view.added, metadata);
    if view.task.status.state == stored.status.state {
        return unwritten;
    }
    let ledger = view
        .task
        .artifacts
        .iter()
        .flatten()
        .find(|a| a.artifact_id == crate::task_view::LEDGER)
        .cloned();
    unwritten.write_now(task, ledger, view.seq).await
}
