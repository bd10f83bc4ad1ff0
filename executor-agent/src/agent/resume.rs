//! The executor's start: every unfinished saga resumed from the journal (live before
//! the executor serves), and every plan whose task was created but whose saga was never
//! begun taken in again.

use super::*;

/// At most this many sagas are claimed in one write, at a start or a takeover.
const TAKEOVER_BATCH: usize = 256;

impl Executor {
    /// Resumes every unfinished saga from the journal, and takes in again every plan
    /// whose task was created but whose saga never reached the journal (call once at
    /// start). Returns how many sagas it resumed and how many plans it took in again.
    pub async fn recover(self: &Arc<Self>) -> Result<(usize, usize)> {
        let journal = &self.config.journal;
        let now = chrono::Utc::now().timestamp_millis();
        if journal.is_shared() {
            // Other replicas drive the sagas they hold: this one claims those nobody
            // holds (their owner stopped, or its lease lapsed), and later ones as they
            // lapse (`take_over_lapsed`). A task created by a replica that died before
            // beginning its saga is taken in once its hold lapses (`take_in_lapsed`).
            let mut resumed = 0;
            loop {
                let claimed = journal.claim_lapsed(now, TAKEOVER_BATCH).await?;
                // A short batch is the last: one given back (`resume_claimed`) is not
                // claimed again in this loop.
                let last = claimed.len() < TAKEOVER_BATCH;
                resumed += self.resume_claimed(claimed, now).await?.len();
                if last {
                    return Ok((resumed, 0));
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
        let begun = self.resume_claimed(claimed, now).await?;
        let begun: HashSet<String> = begun.into_iter().collect();
        let orphans = self.submitted_but_not_begun(&begun).await?;
        for task in &orphans {
            let handle = self.tasks.resumed(&task.id, &task.context_id).await;
            let plan = first_plan(task).map(|plan| self.read_plan(plan));
            let me = self.clone();
            self.drivers
                .spawn(async move { me.take_in(handle, plan).await });
        }
        Ok((ids.len(), orphans.len()))
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

    /// Takes in, on a store replicas share, the plans whose task another replica created
    /// and held, then stopped renewing before their saga began (it died, or was paused
    /// past its lease): at most `TAKEOVER_BATCH` at once; how many. A plan whose saga
    /// began is left to the saga's own lease. Should the replica that held one come back,
    /// the journal keeps the plan to one saga: its begin finds the saga begun on the task.
    pub async fn take_in_lapsed(self: &Arc<Self>, now_ms: i64) -> Result<usize> {
        let Some(held) = &self.config.held_tasks else {
            return Ok(0);
        };
        let claimed = held.claim_lapsed_submitted(now_ms, TAKEOVER_BATCH).await?;
        let mut taken = 0;
        for task_id in claimed {
            let Some(task) = self.tasks.store().get(&task_id).await? else {
                continue;
            };
            if task.status.state != TaskState::Submitted {
                continue;
            }
            // Begun on its task already: its saga's lease decides who drives it.
            if self.config.journal.saga_of_task(&task.id).await?.is_some() {
                continue;
            }
            let plan = first_plan(&task).map(|plan| self.read_plan(plan));
            // Read again when first written here: the replica that held it wrote it.
            let handle = self.tasks.resumed(&task.id, &task.context_id).await;
            let me = self.clone();
            self.drivers
                .spawn(async move { me.take_in(handle, plan).await });
            taken += 1;
        }
        if taken > 0 {
            tracing::info!(
                plans = taken,
                "took in plans whose replica stopped before their saga began"
            );
        }
        Ok(taken)
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
            resumed.push((task, saga_metadata(&header), recovered, epoch));
        }
        // On the tasks before anyone can read them (the executor serves once this returns),
        // in writes that share commits: a saga may have died before its first report.
        futures::future::join_all(
            resumed
                .iter()
                .map(|(task, metadata, _, _)| show_saga(task, metadata)),
        )
        .await;
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

    /// Tasks still `SUBMITTED` with no saga in the journal: the process stopped after the
    /// hosting layer created the task (the request was acknowledged) and before the plan's
    /// saga was begun. A task whose saga began is among `begun`, or has ended.
    pub(super) async fn submitted_but_not_begun(
        &self,
        begun: &HashSet<String>,
    ) -> Result<Vec<Task>> {
        const PAGE: usize = 100;
        let mut orphans = Vec::new();
        let mut after = None;
        loop {
            let query = TaskQuery {
                state: Some(TaskState::Submitted),
                after,
                limit: PAGE,
                ..TaskQuery::default()
            };
            let page = self.tasks.store().list(&query).await?;
            orphans.extend(page.tasks.into_iter().filter(|t| !begun.contains(&t.id)));
            match page.next {
                Some(next) => after = Some(next),
                None => return Ok(orphans),
            }
        }
    }
}

/// The plan of the message that created `task`, if it had one.
fn first_plan(task: &Task) -> Option<Value> {
    task.history
        .as_deref()
        .unwrap_or_default()
        .first()
        .and_then(plan_of)
}
