//! Durable task storage: the `TaskStore` trait, an in-memory store for tests and
//! benchmarks, and the SQLite store that is the embedded default.

pub mod durable;
mod memory;
mod sqlite;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

pub use memory::MemoryTaskStore;
pub use sqlite::SqliteTaskStore;

use crate::error::Result;
use crate::sdk::{Task, TaskState};

/// Which tasks to list, newest update first.
#[derive(Debug, Clone, Default)]
pub struct TaskQuery {
    pub context_id: Option<String>,
    pub state: Option<TaskState>,
    pub updated_after: Option<DateTime<Utc>>,
    /// Only the tasks whose metadata names this owner (`agent::OWNER_METADATA`).
    pub owner: Option<String>,
    /// Rows to skip (the decoded page token).
    pub offset: usize,
    pub limit: usize,
}

/// One page of tasks, with the total that matched.
#[derive(Debug, Clone)]
pub struct TaskPage {
    pub tasks: Vec<Task>,
    pub total: usize,
}

/// Where tasks live. Every write is durable when it returns, so a task's visible state
/// never runs ahead of what survives a crash. A PostgreSQL store implements the same trait.
#[async_trait]
pub trait TaskStore: Send + Sync + 'static {
    /// Writes the task (insert or replace).
    async fn put(&self, task: &Task) -> Result<()>;
    async fn get(&self, id: &str) -> Result<Option<Task>>;
    async fn list(&self, query: &TaskQuery) -> Result<TaskPage>;
    /// Deletes these tasks (those it has), in one durable write.
    async fn delete(&self, ids: &[String]) -> Result<()>;
    /// Why the store cannot write now (a full disk, say), if its last write failed for
    /// that reason and none has landed since: the agent should take no new work.
    fn write_failure(&self) -> Option<String> {
        None
    }
}

/// The task's last status change, used to order and filter listings.
pub(crate) fn updated_at(task: &Task) -> DateTime<Utc> {
    task.status.timestamp.unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// The owner a task's metadata names, if any.
pub(crate) fn owner_of(task: &Task) -> Option<&str> {
    task.metadata
        .as_ref()?
        .get(crate::agent::OWNER_METADATA)?
        .as_str()
}

/// The wire name of a state, as stored.
pub(crate) fn state_name(state: &TaskState) -> String {
    serde_json::to_value(state)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
