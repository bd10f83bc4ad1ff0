//! An in-memory `TaskStore`: for tests, the TCK and benchmarks; nothing survives a restart.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;

use super::{TaskPage, TaskQuery, TaskStore, updated_at};
use crate::error::{Error, Result};
use crate::sdk::Task;

#[derive(Debug, Default)]
pub struct MemoryTaskStore {
    /// Tasks with the order in which they were first written.
    tasks: Mutex<HashMap<String, (u64, Task)>>,
}

impl MemoryTaskStore {
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl TaskStore for MemoryTaskStore {
    async fn put(&self, task: &Task) -> Result<()> {
        let mut tasks = self
            .tasks
            .lock()
            .map_err(|_| Error::store("task map poisoned"))?;
        let seq = tasks
            .get(&task.id)
            .map_or(tasks.len() as u64, |(seq, _)| *seq);
        tasks.insert(task.id.clone(), (seq, task.clone()));
        Ok(())
    }

    async fn delete(&self, ids: &[String]) -> Result<()> {
        let mut tasks = self
            .tasks
            .lock()
            .map_err(|_| Error::store("task map poisoned"))?;
        for id in ids {
            tasks.remove(id);
        }
        Ok(())
    }

    async fn get(&self, id: &str) -> Result<Option<Task>> {
        let tasks = self
            .tasks
            .lock()
            .map_err(|_| Error::store("task map poisoned"))?;
        Ok(tasks.get(id).map(|(_, t)| t.clone()))
    }

    async fn list(&self, query: &TaskQuery) -> Result<TaskPage> {
        let tasks = self
            .tasks
            .lock()
            .map_err(|_| Error::store("task map poisoned"))?;
        let mut matching: Vec<&(u64, Task)> = tasks
            .values()
            .filter(|(_, t)| query.context_id.as_ref().is_none_or(|c| &t.context_id == c))
            .filter(|(_, t)| query.state.as_ref().is_none_or(|s| &t.status.state == s))
            .filter(|(_, t)| {
                query
                    .owner
                    .as_deref()
                    .is_none_or(|o| super::owner_of(t) == Some(o))
            })
            .filter(|(_, t)| {
                query
                    .updated_after
                    .is_none_or(|after| updated_at(t) > after)
            })
            .collect();
        matching.sort_by(|(sa, a), (sb, b)| updated_at(b).cmp(&updated_at(a)).then(sb.cmp(sa)));
        Ok(TaskPage {
            total: matching.len(),
            tasks: matching
                .into_iter()
                .skip(query.offset)
                .take(query.limit)
                .map(|(_, t)| t.clone())
                .collect(),
        })
    }
}
