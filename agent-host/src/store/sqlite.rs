//! The SQLite `TaskStore`: one file, WAL, `synchronous=FULL`, so a write has reached the
//! disk when `put` returns. Writes go through one writer thread that commits every write
//! waiting at that moment in one transaction (group commit: one fsync for many tasks);
//! reads use their own connection on the blocking pool.

use std::path::Path;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::{mpsc, oneshot};

use super::{TaskPage, TaskQuery, TaskStore, state_name, updated_at};
use crate::error::{Error, Result};
use crate::sdk::Task;

/// Writes waiting longer than this many are committed in the next transaction.
const MAX_BATCH: usize = 1024;

/// One row to write, and whom to tell once it is durable.
struct PendingWrite {
    id: String,
    context_id: String,
    state: String,
    updated_ms: i64,
    body: String,
    done: oneshot::Sender<Result<()>>,
}

#[derive(Debug, Clone)]
pub struct SqliteTaskStore {
    reader: Arc<Mutex<Connection>>,
    writer: mpsc::UnboundedSender<PendingWrite>,
}

impl std::fmt::Debug for PendingWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingWrite")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

fn connect(path: &Path) -> Result<Connection> {
    let conn = Connection::open(path)
        .map_err(|e| Error::store(format!("cannot open task store {}: {e}", path.display())))?;
    conn.execute_batch(
        "PRAGMA journal_mode = WAL;
         PRAGMA synchronous = FULL;
         PRAGMA busy_timeout = 5000;",
    )
    .map_err(|e| Error::store(format!("cannot prepare task store {}: {e}", path.display())))?;
    Ok(conn)
}

/// The writer thread: waits for a write, takes every other one already waiting, commits
/// them together, then acknowledges each.
fn write_loop(mut conn: Connection, mut queue: mpsc::UnboundedReceiver<PendingWrite>) {
    let mut batch = Vec::new();
    while let Some(first) = queue.blocking_recv() {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let result = commit(&mut conn, &batch).map_err(|e| format!("task store write failed: {e}"));
        for write in batch.drain(..) {
            let _ = write.done.send(result.clone().map_err(Error::Store));
        }
    }
}

fn commit(conn: &mut Connection, batch: &[PendingWrite]) -> rusqlite::Result<()> {
    let tx = conn.transaction()?;
    {
        let mut upsert = tx.prepare_cached(
            "INSERT INTO tasks (id, context_id, state, updated_ms, body)
             VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (id) DO UPDATE SET
                 context_id = excluded.context_id, state = excluded.state,
                 updated_ms = excluded.updated_ms, body = excluded.body",
        )?;
        for w in batch {
            upsert.execute(params![w.id, w.context_id, w.state, w.updated_ms, w.body])?;
        }
    }
    tx.commit()
}

impl SqliteTaskStore {
    /// Opens (or creates) the store at `path`.
    pub fn open(path: &Path) -> Result<Self> {
        let conn = connect(path)?;
        conn.execute_batch(
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
        )
        .map_err(|e| Error::store(format!("cannot prepare task store {}: {e}", path.display())))?;
        let (writer, queue) = mpsc::unbounded_channel();
        std::thread::Builder::new()
            .name("task-store-writer".into())
            .spawn(move || write_loop(conn, queue))
            .map_err(|e| Error::store(format!("cannot start the task store writer: {e}")))?;
        Ok(Self {
            reader: Arc::new(Mutex::new(connect(path)?)),
            writer,
        })
    }

    /// Runs a read on the reader connection, on the blocking pool.
    async fn with_conn<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T> {
        let conn = self.reader.clone();
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
        let (done, durable) = oneshot::channel();
        let write = PendingWrite {
            id: task.id.clone(),
            context_id: task.context_id.clone(),
            state: state_name(&task.status.state),
            updated_ms: updated_at(task).timestamp_millis(),
            body,
            done,
        };
        self.writer
            .send(write)
            .map_err(|_| Error::store("the task store writer has stopped"))?;
        durable.await.map_err(|_| {
            Error::store("the task store writer stopped before the write was durable")
        })?
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
