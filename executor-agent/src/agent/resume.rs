//! The executor's start: every unfinished saga resumed from the journal (live before
//! the executor serves), and every plan whose task was created but whose saga was never
//! begun taken in again.

use super::*;

impl Executor {
    /// Resumes every unfinished saga from the journal, and takes in again every plan
    /// whose task was created but whose saga never reached the journal (call once at
    /// start). Returns how many sagas it resumed and how many plans it took in again.
    pub async fn recover(self: &Arc<Self>) -> Result<(usize, usize)> {
        let ids = self.config.journal.unfinished().await?;
        let now = chrono::Utc::now().timestamp_millis();
        let mut begun = HashSet::new();
        let mut resumed = Vec::new();
        for saga_id in &ids {
            let Some((header, entries)) = self.config.journal.load(saga_id).await? else {
                continue;
            };
            if header.format != JOURNAL_FORMAT {
                // Replayed under rules it was not written by, a saga could make other calls
                // under the keys it journaled: nothing is resumed.
                return Err(Error::Journal(format!(
                    "saga {saga_id} was journaled in format {}, and this executor reads journal \
                     format {JOURNAL_FORMAT} only; start the executor release that wrote it",
                    header.format
                )));
            }
            begun.insert(header.task_id.clone());
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
            let task = self.tasks.handle(&header.task_id, &header.context_id);
            resumed.push((task, saga_metadata(&header), recovered));
        }
        // This process owns the state file (its lock), so it takes every saga over, at a
        // new epoch: a write under an older claim is refused from now on. The claims
        // share commits.
        let journal = &self.config.journal;
        let claims = futures::future::join_all(resumed.iter().map(|(_, _, recovered)| {
            journal.claim(&recovered.saga.spec.saga_id, now, Claim::TakeOver)
        }))
        .await;
        let mut claimed = Vec::new();
        for ((task, metadata, recovered), epoch) in resumed.into_iter().zip(claims) {
            // None: it finished meanwhile, which only its own driver could have done.
            if let Some(epoch) = epoch? {
                claimed.push((task, metadata, recovered, epoch));
            }
        }
        let resumed = claimed;
        // On the tasks before anyone can read them (the executor serves once this returns),
        // in writes that share commits: a saga may have died before its first report.
        futures::future::join_all(
            resumed
                .iter()
                .map(|(task, metadata, _, _)| show_saga(task, metadata)),
        )
        .await;
        for (task, metadata, recovered, epoch) in resumed {
            let saga = recovered.saga.clone();
            // A revocation recorded before the saga heard of it (the process stopped in
            // between) is told again.
            let revoked = match &recovered.saga.spec.mandate {
                Some(hold) => {
                    self.config
                        .mandates
                        .is_revoked(&hold.principal_key, &hold.mandate_id)
                        .await?
                }
                None => false,
            };
            self.metrics.saga_resumed();
            let task_id = task.id().to_owned();
            // Live before `recover` returns, and so before the executor serves: a cancel
            // or an answer that comes first finds the saga's driver.
            self.start_driver(
                task,
                saga,
                Start::Resumed(Box::new(recovered), epoch),
                metadata,
                None,
                None,
            );
            if revoked {
                self.tell_revoked(|id| id == task_id).await;
            }
        }
        let orphans = self.submitted_but_not_begun(&begun).await?;
        for task in &orphans {
            let handle = self.tasks.handle(&task.id, &task.context_id);
            let plan = task
                .history
                .as_deref()
                .unwrap_or_default()
                .first()
                .and_then(plan_of);
            let me = self.clone();
            self.drivers
                .spawn(async move { me.take_in(handle, plan).await });
        }
        Ok((ids.len(), orphans.len()))
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
