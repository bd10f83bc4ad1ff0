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
        let indexing = Self::state_index_missing(db)?;
        let started = std::time::Instant::now();
        if indexing {
            tracing::info!(
                "indexing the task store by state (once, after an upgrade: every task is read, so a large store takes a while)"
            );
        }
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
             CREATE INDEX IF NOT EXISTS tasks_by_context ON tasks (context_id);
             -- A listing by state reads the tasks in that state, not every task there
             -- is. On the state alone: a task's state changes a few times in its life,
             -- its update time at every write, and every write would move its entry.
             CREATE INDEX IF NOT EXISTS tasks_by_state ON tasks (state);",
        )?;
        if indexing {
            tracing::info!(
                ms = started.elapsed().as_millis() as u64,
                "task store indexed by state"
            );
        }
        Ok(Self {
            reader: db.reader()?,
            db: db.clone(),
        })
    }
}

impl SqliteTaskStore {
    /// Whether the file holds tasks but not yet their index by state (a store from before
    /// it), whose building reads every task once.
    fn state_index_missing(db: &Database) -> Result<bool> {
        let conn = super::durable::open_connection(db.path(), "task store")?;
        let missing = || -> rusqlite::Result<bool> {
            let has_tasks = conn
                .prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'tasks'")?
                .exists([])?
                && conn.prepare("SELECT 1 FROM tasks LIMIT 1")?.exists([])?;
            let has_index = conn
                .prepare(
                    "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = 'tasks_by_state'",
                )?
                .exists([])?;
            Ok(has_tasks && !has_index)
        };
        missing().map_err(|e| Error::store(format!("cannot read the task store's schema: {e}")))
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

    async fn delete(&self, ids: &[String]) -> Result<()> {
        let ids = ids.to_vec();
        self.db
            .submit(move |tx| {
                let mut delete = tx.prepare_cached("DELETE FROM tasks WHERE id = ?1")?;
                for id in &ids {
                    delete.execute([id])?;
                }
                Ok(())
            })
            .await
    }

    async fn get(&self, id: &str) -> Result<Option<Task>> {
        let id = id.to_owned();
        self.reader
            .read(move |conn| {
                conn.prepare_cached("SELECT body FROM tasks WHERE id = ?1")?
                    .query_row([id], |row| decode(&row.get::<_, String>(0)?))
                    .optional()
            })
            .await
    }

    async fn list(&self, query: &TaskQuery) -> Result<TaskPage> {
        let (filter, values) = list_filter(query);
        let (offset, limit) = (query.offset as i64, query.limit as i64);
        self.reader
            .read(move |conn| {
                let total: i64 = conn.query_row(
                    &count_sql(&filter),
                    rusqlite::params_from_iter(&values),
                    |row| row.get(0),
                )?;
                let tasks = conn
                    .prepare(&page_sql(&filter, limit, offset))?
                    .query_map(rusqlite::params_from_iter(&values), |row| {
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

/// What a listing reads: the table through the index that narrows it most (by context,
/// or by state, or all tasks in update order; named, as SQLite's own choice varies with
/// what it knows of the table), and a `WHERE` clause naming only the conditions the query
/// has, with the values it binds.
fn list_filter(query: &TaskQuery) -> (String, Vec<rusqlite::types::Value>) {
    use rusqlite::types::Value;
    let mut conditions = Vec::new();
    let mut values = Vec::new();
    if let Some(context_id) = &query.context_id {
        conditions.push("context_id = ?");
        values.push(Value::Text(context_id.clone()));
    }
    if let Some(state) = &query.state {
        conditions.push("state = ?");
        values.push(Value::Text(state_name(state)));
    }
    if let Some(owner) = &query.owner {
        // Read from the stored task itself: a filter of the rows the index chose.
        conditions.push("json_extract(body, '$.metadata.owner') = ?");
        values.push(Value::Text(owner.clone()));
    }
    if let Some(after) = query.updated_after {
        conditions.push("updated_ms > ?");
        values.push(Value::Integer(after.timestamp_millis()));
    }
    let index = if query.context_id.is_some() {
        "tasks_by_context"
    } else if query.state.is_some() {
        "tasks_by_state"
    } else {
        "tasks_by_update"
    };
    let mut from = format!(" INDEXED BY {index}");
    if !conditions.is_empty() {
        from.push_str(&format!(" WHERE {}", conditions.join(" AND ")));
    }
    (from, values)
}

fn count_sql(filter: &str) -> String {
    format!("SELECT COUNT(*) FROM tasks{filter}")
}

fn page_sql(filter: &str, limit: i64, offset: i64) -> String {
    format!(
        "SELECT body FROM tasks{filter} ORDER BY updated_ms DESC, seq DESC LIMIT {limit} OFFSET {offset}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sdk::TaskState;

    /// How SQLite runs `sql`: the details of its query plan, joined.
    fn query_plan(
        conn: &rusqlite::Connection,
        sql: &str,
        values: &[rusqlite::types::Value],
    ) -> String {
        let mut statement = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let details: Vec<String> = statement
            .query_map(rusqlite::params_from_iter(values), |row| row.get(3))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        details.join("; ")
    }

    #[test]
    fn a_listing_by_state_or_context_reads_its_page_from_an_index() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.db");
        let _store = SqliteTaskStore::open(&path).unwrap();
        let conn = super::super::durable::open_connection(&path, "test").unwrap();
        let by_state = TaskQuery {
            state: Some(TaskState::Submitted),
            ..TaskQuery::default()
        };
        let by_context = TaskQuery {
            context_id: Some("c".into()),
            ..TaskQuery::default()
        };
        for (query, index) in [
            (by_state, "tasks_by_state"),
            (by_context, "tasks_by_context"),
            (TaskQuery::default(), "tasks_by_update"),
        ] {
            let (filter, values) = list_filter(&query);
            let page = query_plan(&conn, &page_sql(&filter, 100, 0), &values);
            // Through the index, not a scan of every task.
            assert!(page.contains(&format!("USING INDEX {index}")), "{page}");
            let count = query_plan(&conn, &count_sql(&filter), &values);
            assert!(count.contains("INDEX"), "{count}");
        }
    }
}
