//! The SQLite `TaskStore`: a table in a `Database` (its own file, or one it shares with
//! other stores), durable when `put` returns, with group commit (`durable.rs`); reads use
//! their own connection on the blocking pool.

use std::path::Path;

use async_trait::async_trait;
use rusqlite::{OptionalExtension, Transaction, params};

use super::durable::{Database, Reader};
use super::{TaskPage, TaskQuery, TaskStore, state_name, updated_at};
use crate::error::{Error, Result};
use crate::sdk::Task;

/// One row to write.
#[derive(Debug)]
struct TaskRow {
    id: String,
    context_id: String,
    state: String,
    updated_ms: i64,
    body: String,
}

#[derive(Debug, Clone)]
pub struct SqliteTaskStore {
    reader: Reader,
    db: Database,
}

fn upsert(tx: &Transaction<'_>, row: &TaskRow) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT INTO tasks (id, context_id, state, updated_ms, body)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (id) DO UPDATE SET
             context_id = excluded.context_id, state = excluded.state,
             updated_ms = excluded.updated_ms, body = excluded.body",
    )?
    .execute(params![
        row.id,
        row.context_id,
        row.state,
        row.updated_ms,
        row.body
    ])
    .map(|_| ())
}

impl SqliteTaskStore {
    /// Opens (or creates) a store of its own at `path`.
    pub fn open(path: &Path) -> Result<Self> {
        Self::on(&Database::open(path, "task-store")?)
    }

    /// The store in `db`, whose writes share its group commit with the other stores there.
    pub fn on(db: &Database) -> Result<Self> {
        db.prepare(
            "CREATE TABLE IF NOT EXISTS tasks (
                 seq         INTEGER PRIMARY KEY,
                 id          TEXT NOT NULL UNIQUE,
                 context_id  TEXT NOT NULL,
                 state       TEXT NOT NULL,
                 updated_ms  INTEGER NOT NULL,
                 body        TEXT NOT NULL
             );
             CREATE INDEX IF NOT EXISTS tasks_by_update ON tasks (updated_ms DESC, seq DESC);
             CREATE INDEX IF NOT EXISTS tasks_by_context ON tasks (context_id);",
        )?;
        Ok(Self {
            reader: db.reader()?,
            db: db.clone(),
        })
    }
}

fn decode(body: &str) -> rusqlite::Result<Task> {
    serde_json::from_str(body).map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))
}

#[async_trait]
impl TaskStore for SqliteTaskStore {
    async fn put(&self, task: &Task) -> Result<()> {
        let body = serde_json::to_string(task)
            .map_err(|e| Error::store(format!("cannot encode task: {e}")))?;
        let row = TaskRow {
            id: task.id.clone(),
            context_id: task.context_id.clone(),
            state: state_name(&task.status.state),
            updated_ms: updated_at(task).timestamp_millis(),
            body,
        };
        self.db.submit(move |tx| upsert(tx, &row)).await
    }

    fn write_failure(&self) -> Option<String> {
        self.db.write_failure()
    }

    async fn get(&self, id: &str) -> Result<Option<Task>> {
        let id = id.to_owned();
        self.reader
            .read(move |conn| {
                conn.query_row("SELECT body FROM tasks WHERE id = ?1", [id], |row| {
                    decode(&row.get::<_, String>(0)?)
                })
                .optional()
            })
            .await
    }

    async fn list(&self, query: &TaskQuery) -> Result<TaskPage> {
        let context_id = query.context_id.clone();
        let state = query.state.as_ref().map(state_name);
        let after = query.updated_after.map(|t| t.timestamp_millis());
        let (offset, limit) = (query.offset as i64, query.limit as i64);
        self.reader.read(move |conn| {
            let filter = "(?1 IS NULL OR context_id = ?1) AND (?2 IS NULL OR state = ?2) AND (?3 IS NULL OR updated_ms > ?3)";
            let total: i64 = conn.query_row(
                &format!("SELECT COUNT(*) FROM tasks WHERE {filter}"),
                params![context_id, state, after],
                |row| row.get(0),
            )?;
            let mut statement = conn.prepare(&format!(
                "SELECT body FROM tasks WHERE {filter} ORDER BY updated_ms DESC, seq DESC LIMIT ?4 OFFSET ?5"
            ))?;
            let tasks = statement
                .query_map(params![context_id, state, after, limit, offset], |row| {
                    decode(&row.get::<_, String>(0)?)
                })?
                .collect::<rusqlite::Result<Vec<Task>>>()?;
            Ok(TaskPage {
                tasks,
                total: total as usize,
            })
        })
        .await
    }
}
