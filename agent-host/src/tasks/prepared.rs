//! A task prepared for a request and not stored yet (`TaskManager::prepare`): created by
//! the agent's first durable write, or dropped for the task the same work runs on.

use super::*;

impl TaskHandle {
    /// Stores the task, when it is prepared and not stored yet (`TaskManager::prepare`),
    /// changed by `change` (which may add to its history, not alter what it holds), in the durable
    /// write `write` makes, which carries the task's creation (`TaskWrite`) in its own
    /// transaction on the database the task store keeps its tables in; a task stored
    /// already gives `write` nothing to carry (and is not changed). The task as created is
    /// what it shows once stored: no event is announced. When `write` fails, the task
    /// stays prepared, unchanged.
    pub async fn create_written_by<T, E, Fut>(
        &self,
        change: impl FnOnce(&mut Task),
        write: impl FnOnce(Option<TaskWrite>) -> Fut,
    ) -> std::result::Result<T, E>
    where
        Fut: std::future::Future<Output = std::result::Result<T, E>>,
        E: From<Error>,
    {
        let lock = self.manager.write_lock(&self.id)?;
        let mut written = lock.lock().await;
        // The history (the request's message, which may be large) moves to the task
        // created, and back as it was should the write fail, rather than being copied.
        let mut kept = None;
        let created = match written.as_mut() {
            Some((NOT_STORED, task)) => {
                let history = task.history.take();
                kept = Some(history.as_ref().map(Vec::len));
                let mut created = task.clone();
                created.history = history;
                change(&mut created);
                match TaskWrite::of(&created, Expected::Absent) {
                    Ok(creation) => Some((created, creation)),
                    Err(e) => {
                        task.history = as_it_was(created.history, kept.flatten());
                        return Err(e.into());
                    }
                }
            }
            _ => None,
        };
        let (created, creation) = created.unzip();
        match write(creation).await {
            Ok(done) => {
                if let Some(task) = created {
                    *written = Some((1, task));
                    self.manager.stored(&self.id);
                }
                Ok(done)
            }
            Err(e) => {
                if let (Some(created), Some((NOT_STORED, task))) = (created, written.as_mut()) {
                    task.history = as_it_was(created.history, kept.flatten());
                }
                Err(e)
            }
        }
    }

    /// Stores the task, changed by `change`, with a write of its own, when it is prepared
    /// and not stored yet.
    pub async fn create_if_prepared(&self, change: impl FnOnce(&mut Task)) -> Result<()> {
        let lock = self.manager.write_lock(&self.id)?;
        let mut written = lock.lock().await;
        if let Some((version, task)) = written.as_mut()
            && *version == NOT_STORED
        {
            let mut created = task.clone();
            change(&mut created);
            *version = self.manager.store.put(&created, Expected::Absent).await?;
            *task = created;
            self.manager.stored(&self.id);
        }
        Ok(())
    }

    /// Answers the request that prepared this task, not stored yet, with the task
    /// `existing` instead (the same work runs there): this one is dropped and never
    /// stored. `false` when it is stored already, or its request no longer waits: it is
    /// then answered like any task.
    pub async fn answered_by(&self, existing: &str) -> bool {
        let lock = match self.manager.write_lock(&self.id) {
            Ok(lock) => lock,
            Err(_) => return false,
        };
        let written = lock.lock().await;
        if !matches!(written.as_ref(), Some((NOT_STORED, _))) {
            return false;
        }
        let waiting = self
            .manager
            .prepared
            .lock()
            .ok()
            .and_then(|mut prepared| prepared.remove(&self.id));
        let Some(waiting) = waiting else {
            return false;
        };
        let sent = waiting
            .send(Prepared::Existing {
                task_id: existing.to_owned(),
            })
            .is_ok();
        if sent && let Ok(mut locks) = self.manager.write_locks.lock() {
            locks.remove(&self.id);
        }
        sent
    }
}

/// A history moved to a task created, given back as it was before `change` added to it
/// (`len` messages; none when it had none).
fn as_it_was(history: Option<Vec<Message>>, len: Option<usize>) -> Option<Vec<Message>> {
    let len = len?;
    let mut history = history?;
    history.truncate(len);
    Some(history)
}
