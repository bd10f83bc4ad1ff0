//! An in-memory `TaskStore`: for tests, the TCK and benchmarks; nothing survives a restart.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;

use super::{
    Expected, PageKey, StoredTask, TaskPage, TaskQuery, TaskStore, Version, owner_of, updated_at,
};
use crate::error::{Error, Result};
use crate::sdk::Task;

#[derive(Debug, Default)]
pub struct MemoryTaskStore {
    tasks: Mutex<Tasks>,
}

#[derive(Debug, Default)]
struct Tasks {
    /// Each task with the order in which it was first written and its version.
    by_id: HashMap<String, (i64, Version, Task)>,
    /// The order the next new task gets: never one a deleted task had.
    next_seq: i64,
}

impl MemoryTaskStore {
    pub fn new() -> Self {
        Self::default()
    }

    fn tasks(&self) -> Result<MutexGuard<'_, Tasks>> {
        self.tasks
            .lock()
            .map_err(|_| Error::store("task map poisoned"))
    }
}

fn key(seq: i64, task: &Task) -> PageKey {
    PageKey {
        updated_ms: updated_at(task).timestamp_millis(),
        seq,
    }
}

#[async_trait]
impl TaskStore for MemoryTaskStore {
    async fn put(&self, task: &Task, expected: Expected) -> Result<Version> {
        let mut tasks = self.tasks()?;
        let held = tasks.by_id.get(&task.id).map(|(seq, v, _)| (*seq, *v));
        let (seq, version) = match (expected, held) {
            (Expected::Absent, None) => {
                tasks.next_seq += 1;
                (tasks.next_seq, 1)
            }
            (Expected::Version(want), Some((seq, have))) if want == have => (seq, have + 1),
            _ => {
                return Err(Error::Conflict {
                    task_id: task.id.clone(),
                });
            }
        };
        tasks
            .by_id
            .insert(task.id.clone(), (seq, version, task.clone()));
        Ok(version)
    }

    async fn delete(&self, ids: &[String]) -> Result<()> {
        let mut tasks = self.tasks()?;
        for id in ids {
            tasks.by_id.remove(id);
        }
        Ok(())
    }

    async fn read(&self, id: &str) -> Result<Option<StoredTask>> {
        let tasks = self.tasks()?;
        Ok(tasks.by_id.get(id).map(|(_, version, task)| StoredTask {
            task: task.clone(),
            version: *version,
        }))
    }

    async fn list(&self, query: &TaskQuery) -> Result<TaskPage> {
        let tasks = self.tasks()?;
        let mut matching: Vec<(PageKey, &Task)> = tasks
            .by_id
            .values()
            .filter(|(_, _, t)| query.context_id.as_ref().is_none_or(|c| &t.context_id == c))
            .filter(|(_, _, t)| query.state.as_ref().is_none_or(|s| &t.status.state == s))
            .filter(|(_, _, t)| {
                query
                    .owner
                    .as_deref()
                    .is_none_or(|o| owner_of(t) == Some(o))
            })
            .filter(|(_, _, t)| {
                query
                    .updated_after
                    .is_none_or(|after| updated_at(t) > after)
            })
            .map(|(seq, _, t)| (key(*seq, t), t))
            .collect();
        matching.sort_by(|(a, _), (b, _)| b.cmp(a));
        let total = matching.len();
        let mut page: Vec<(PageKey, &Task)> = matching
            .into_iter()
            .filter(|(key, _)| query.after.is_none_or(|after| *key < after))
            .take(query.limit.saturating_add(1))
            .collect();
        let next = if page.len() > query.limit {
            page.truncate(query.limit);
            page.last().map(|(key, _)| *key)
        } else {
            None
        };
        Ok(TaskPage {
            total,
            next,
            tasks: page.into_iter().map(|(_, t)| t.clone()).collect(),
        })
    }
}
