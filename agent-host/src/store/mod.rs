//! Durable task storage: the `TaskStore` trait, an in-memory store for tests and
//! benchmarks, the SQLite store that is the embedded default, and the PostgreSQL store
//! that replicas share.
//!
//! Invariants every store keeps (checked by `conformance.rs` against each of them):
//! - a write names the version it expects and is refused (`Error::Conflict`, nothing
//!   written) when the store holds another: two writers never overwrite each other;
//! - a listing pages by key (the last task's update time and insertion order), so a
//!   page is read through an index however deep it is, and a task written between two
//!   pages is neither listed twice nor makes another skipped.

#[cfg(test)]
pub(crate) mod conformance;
mod memory;
pub mod postgres;
mod sqlite;

pub use sqlite::write_task as write_task_sqlite;

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
    /// Only the tasks after this one in the listing's order (the decoded page token).
    pub after: Option<PageKey>,
    pub limit: usize,
}

/// Where a task stands in a listing: its last update, then the order in which tasks
/// were first written (newest first in both).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct PageKey {
    pub updated_ms: i64,
    pub seq: i64,
}

impl PageKey {
    /// The page token a caller sends back for the page after this key.
    pub fn token(&self) -> String {
        format!("{}:{}", self.updated_ms, self.seq)
    }

    /// The key a page token names; `None` for text this agent did not issue.
    pub fn from_token(token: &str) -> Option<Self> {
        let (updated_ms, seq) = token.split_once(':')?;
        Some(Self {
            updated_ms: updated_ms.parse().ok()?,
            seq: seq.parse().ok()?,
        })
    }
}

/// One page of tasks, with the total that matched.
#[derive(Debug, Clone)]
pub struct TaskPage {
    pub tasks: Vec<Task>,
    pub total: usize,
    /// Where the next page starts, when there is one.
    pub next: Option<PageKey>,
}

/// The version a store gave a task's last write: 1 when it was created, one more at
/// each write after.
pub type Version = u64;

/// A task as the store holds it, with the version of its last write.
#[derive(Debug, Clone)]
pub struct StoredTask {
    pub task: Task,
    pub version: Version,
}

/// What a write expects the store to hold for the task (compare-and-set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expected {
    /// No task with this id: the write creates it.
    Absent,
    /// The task at this version, as its writer last read or wrote it.
    Version(Version),
}

/// A task's write carried by another store's write, in its transaction, on the database
/// both keep their tables in: the executor's journal writes a saga's task as it ends with
/// the saga's last entries (`TaskHandle::change_written_by`). The row as the stores on
/// that database keep it, and what the write expects the task store to hold (a write
/// that finds another version writes nothing, and neither does the write carrying it).
#[derive(Debug, Clone)]
pub struct TaskWrite {
    pub id: String,
    pub context_id: String,
    /// The state's wire name.
    pub state: String,
    pub owner: Option<String>,
    pub updated_ms: i64,
    /// The task, as JSON.
    pub body: String,
    pub expected: Expected,
}

impl TaskWrite {
    /// The write of `task` as the stores keep it, if the store holds `expected`.
    pub fn of(task: &Task, expected: Expected) -> Result<Self> {
        Ok(Self {
            id: task.id.clone(),
            context_id: task.context_id.clone(),
            state: state_name(&task.status.state),
            owner: owner_of(task).map(str::to_owned),
            updated_ms: updated_at(task).timestamp_millis(),
            body: serde_json::to_string(task)
                .map_err(|e| crate::Error::store(format!("cannot encode task: {e}")))?,
            expected,
        })
    }

    /// The version the task has once this write lands.
    pub fn version_after(&self) -> Version {
        match self.expected {
            Expected::Absent => 1,
            Expected::Version(version) => version + 1,
        }
    }
}

/// Where tasks live. Every write is durable when it returns, so a task's visible state
/// never runs ahead of what survives a crash.
#[async_trait]
pub trait TaskStore: Send + Sync + 'static {
    /// Writes the task if the store holds what `expected` says, and returns the version
    /// it now has; otherwise writes nothing and fails with `Error::Conflict`.
    async fn put(&self, task: &Task, expected: Expected) -> Result<Version>;
    /// The task with the version of its last write.
    async fn read(&self, id: &str) -> Result<Option<StoredTask>>;
    async fn get(&self, id: &str) -> Result<Option<Task>> {
        Ok(self.read(id).await?.map(|stored| stored.task))
    }
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
