//! The SQLite `TaskStore`: one file, WAL, `synchronous=FULL`, so a write has reached the
//! disk when `put` returns. Calls run on the blocking pool.

use std::path::Path;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};

use super::{TaskPage, TaskQuery, TaskStore, state_name, updated_at};
use crate::error::{Error, Result};
use crate::sdk::Task;

#[derive(Debug, Clone)]
pub struct SqliteTaskStore {
    conn: Arc<Mutex<Connection>>,
}

impl SqliteTaskStore {
    /// Opens (or creates) the store at `path`.
    pub fn open(path: &Path) -> Result<Self> {
        let conn = Connection::open(path)
            .map_err(|e| Error::store(format!("cannot open task store {}: {e}", path.display())))?;
        conn.execute_batch(
            "PRAGMA journal_mode = WAL;
             PRAGMA synchronous = FULL;
             PRAGMA busy_timeout = 5000;
             CREATE TABLE IF NOT EXISTS tasks (
                 id          TEXT PRIMARY KEY,
                 seq         INTEGER NOT NULL,
                 context_id  TEXT NOT NULL,
                 state       TEXT NOT NULL,
                 updated_ms  INTEGER NOT NULL,
                 body        TEXT NOT NULL
             );
             CREATE INDEX IF NOT EXISTS tasks_by_update ON tasks (updated_ms DESC, seq DESC);
             CREATE INDEX IF NOT EXISTS tasks_by_context ON tasks (context_id);",
        )
        .map_err(|e| Error::store(format!("cannot prepare task store {}: {e}", path.display())))?;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    async fn with_conn<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T> {
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || {
            let mut conn = conn
                .lock()
                .map_err(|_| Error::store("task store connection poisoned"))?;
            work(&mut conn).map_err(|e| Error::store(format!("task store: {e}")))
        })
        .await
        .map_err(|e| Error::store(format!("task store worker failed: {e}")))?
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
        let id = task.id.clone();
        let context_id = task.context_id.clone();
        let state = state_name(&task.status.state);
        let updated_ms = updated_at(task).timestamp_millis();
        self.with_conn(move |conn| {
            conn.execute(
                "INSERT INTO tasks (id, seq, context_id, state, updated_ms, body)
                 VALUES (?1, (SELECT IFNULL(MAX(seq), 0) + 1 FROM tasks), ?2, ?3, ?4, ?5)
                 ON CONFLICT (id) DO UPDATE SET
                     context_id = excluded.context_id, state = excluded.state,
                     updated_ms = excluded.updated_ms, body = excluded.body",
                params![id, context_id, state, updated_ms, body],
            )
            .map(|_| ())
        })
        .await
    }

    async fn get(&self, id: &str) -> Result<Option<Task>> {
        let id = id.to_owned();
        self.with_conn(move |conn| {
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
        self.with_conn(move |conn| {
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
