//! Retention: forgetting finished sagas whose plans can no longer be accepted again.

use super::*;

impl Executor {
    /// Forgets the sagas that finished more than `keep` before `now_ms` and whose plans'
    /// mandates expired before it (a plan sent again is then refused, never run twice):
    /// their tasks first, then their journal, so that a crash in between leaves a saga
    /// to forget at the next sweep rather than a task nobody deletes. Returns how many.
    pub async fn forget_finished(&self, keep: Duration, now_ms: i64) -> Result<usize> {
        const BATCH: usize = 256;
        let keep_ms = i64::try_from(keep.as_millis()).unwrap_or(i64::MAX);
        let finished_before = now_ms.saturating_sub(keep_ms);
        let journal = &self.config.journal;
        let mut forgotten = 0;
        loop {
            let batch = journal.forgettable(finished_before, now_ms, BATCH).await?;
            if batch.is_empty() {
                return Ok(forgotten);
            }
            let tasks: Vec<String> = batch.iter().map(|f| f.task_id.clone()).collect();
            self.tasks.store().delete(&tasks).await?;
            let sagas: Vec<String> = batch.into_iter().map(|f| f.saga_id).collect();
            journal.forget(&sagas).await?;
            forgotten += sagas.len();
        }
    }
}
