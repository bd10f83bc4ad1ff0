//! The SQLite `TaskStore`: a table in a `Database` (its own file, or one it shares with
//! other stores), durable when `put` returns, with group commit (`sagaplane_storage::sqlite`); reads use
//! their own connection on the blocking pool.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use rusqlite::{OptionalExtension, Transaction, params};

use super::{
    Expected, PageKey, StoredTask, TaskPage, TaskQuery, TaskStore, TaskWrite, Version, state_name,
};
use crate::error::{Error, Result};
use crate::sdk::Task;
use sagaplane_storage::schema::{self, Migration, has_column};
use sagaplane_storage::sqlite::{Database, Reader};

#[derive(Debug, Clone)]
pub struct SqliteTaskStore {
    reader: Reader,
    db: Database,
}

/// The task store's schema, in order; the count is its version (`sagaplane_storage::schema`).
const MIGRATIONS: &[Migration] = &[
    Migration {
        what: "the tasks table",
        apply: |tx| {
            tx.execute_batch(
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
        },
    },
    Migration {
        what: "an index of tasks by state",
        apply: |tx| {
            if tx.prepare("SELECT 1 FROM tasks LIMIT 1")?.exists([])? {
                tracing::info!(
                    "indexing the task store by state (once, after an upgrade: every task is read, so a large store takes a while)"
                );
            }
            // A listing by state reads the tasks in that state, not every task there is.
            // On the state alone: a task's state changes a few times in its life, its
            // update time at every write, and every write would move its entry.
            tx.execute_batch("CREATE INDEX IF NOT EXISTS tasks_by_state ON tasks (state);")
        },
    },
    Migration {
        what: "a version on each task, for compare-and-set writes",
        apply: |tx| {
            if !has_column(tx, "tasks", "version")? {
                tx.execute_batch(
                    "ALTER TABLE tasks ADD COLUMN version INTEGER NOT NULL DEFAULT 1;",
                )?;
            }
            Ok(())
        },
    },
];

/// Writes `row` in `tx` if the store holds what it expects; whether it did. Another
/// store's write on the same file carries a task's write with this (`TaskWrite`).
pub fn write_task(tx: &Transaction<'_>, row: &TaskWrite) -> rusqlite::Result<bool> {
    let changed = match row.expected {
        // DO NOTHING, not a failed insert: a write refused for its content would make the
        // writes sharing its commit run again one by one.
        Expected::Absent => tx
            .prepare_cached(
                "INSERT INTO tasks (id, context_id, state, updated_ms, body, version)
                 VALUES (?1, ?2, ?3, ?4, ?5, 1) ON CONFLICT (id) DO NOTHING",
            )?
            .execute(params![
                row.id,
                row.context_id,
                row.state,
                row.updated_ms,
                row.body
            ])?,
        Expected::Version(version) => tx
            .prepare_cached(
                "UPDATE tasks SET context_id = ?2, state = ?3, updated_ms = ?4, body = ?5,
                     version = version + 1
                 WHERE id = ?1 AND version = ?6",
            )?
            .execute(params![
                row.id,
                row.context_id,
                row.state,
                row.updated_ms,
                row.body,
                to_sql(version)
            ])?,
    };
    Ok(changed == 1)
}

fn to_sql(version: Version) -> i64 {
    i64::try_from(version).unwrap_or(i64::MAX)
}

impl SqliteTaskStore {
    /// Opens (or creates) a store of its own at `path`.
    pub fn open(path: &Path) -> Result<Self> {
        Self::on(&Database::open(path, "task-store")?)
    }

    /// The store in `db`, whose writes share its group commit with the other stores there.
    pub fn on(db: &Database) -> Result<Self> {
        schema::migrate(db, "task", MIGRATIONS)?;
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
    async fn put(&self, task: &Task, expected: Expected) -> Result<Version> {
        let row = TaskWrite::of(task, expected)?;
        let version = row.version_after();
        let written = Arc::new(AtomicBool::new(false));
        let landed = written.clone();
        self.db
            .submit(move |tx| {
                // Run again alone when a write it shared a commit with failed: what the
                // last run found is what holds.
                landed.store(write_task(tx, &row)?, Ordering::SeqCst);
                Ok(())
            })
            .await?;
        if !written.load(Ordering::SeqCst) {
            return Err(Error::Conflict {
                task_id: task.id.clone(),
            });
        }
        Ok(version)
    }

    fn write_failure(&self) -> Option<String> {
        self.db.write_failure()
    }

    async fn delete(&self, ids: &[String]) -> Result<()> {
        let ids = ids.to_vec();
        Ok(self
            .db
            .submit(move |tx| {
                let mut delete = tx.prepare_cached("DELETE FROM tasks WHERE id = ?1")?;
                for id in &ids {
                    delete.execute([id])?;
                }
                Ok(())
            })
            .await?)
    }

    async fn read(&self, id: &str) -> Result<Option<StoredTask>> {
        let id = id.to_owned();
        Ok(self
            .reader
            .read(move |conn| {
                conn.prepare_cached("SELECT body, version FROM tasks WHERE id = ?1")?
                    .query_row([id], |row| {
                        Ok(StoredTask {
                            task: decode(&row.get::<_, String>(0)?)?,
                            version: u64::try_from(row.get::<_, i64>(1)?).unwrap_or(0),
                        })
                    })
                    .optional()
            })
            .await?)
    }

    async fn list(&self, query: &TaskQuery) -> Result<TaskPage> {
        let (filter, values) = list_filter(query);
        let limit = query.limit;
        let after = query.after;
        Ok(self
            .reader
            .read(move |conn| {
                let total: i64 = conn.query_row(
                    &count_sql(&filter),
                    rusqlite::params_from_iter(&values),
                    |row| row.get(0),
                )?;
                let mut page_values = values.clone();
                if let Some(after) = after {
                    page_values.push(rusqlite::types::Value::Integer(after.updated_ms));
                    page_values.push(rusqlite::types::Value::Integer(after.seq));
                }
                // One more than the page, to know whether another follows.
                let mut rows = conn
                    .prepare(&page_sql(&filter, after.is_some(), limit.saturating_add(1)))?
                    .query_map(rusqlite::params_from_iter(&page_values), |row| {
                        Ok((
                            PageKey {
                                updated_ms: row.get(1)?,
                                seq: row.get(2)?,
                            },
                            decode(&row.get::<_, String>(0)?)?,
                        ))
                    })?
                    .collect::<rusqlite::Result<Vec<(PageKey, Task)>>>()?;
                let next = if rows.len() > limit {
                    rows.truncate(limit);
                    rows.last().map(|(key, _)| *key)
                } else {
                    None
                };
                Ok(TaskPage {
                    tasks: rows.into_iter().map(|(_, task)| task).collect(),
                    total: usize::try_from(total).unwrap_or(0),
                    next,
                })
            })
            .await?)
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
    let mut from = format!(" INDEXED BY {index} WHERE 1");
    for condition in conditions {
        from.push_str(" AND ");
        from.push_str(condition);
    }
    (from, values)
}

fn count_sql(filter: &str) -> String {
    format!("SELECT COUNT(*) FROM tasks{filter}")
}

/// A page in listing order; `after` adds the key the page starts below (bound last).
fn page_sql(filter: &str, after: bool, limit: usize) -> String {
    let after = if after {
        " AND (updated_ms, seq) < (?, ?)"
    } else {
        ""
    };
    format!(
        "SELECT body, updated_ms, seq FROM tasks{filter}{after} ORDER BY updated_ms DESC, seq DESC LIMIT {limit}"
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
        let conn = sagaplane_storage::sqlite::open_connection(&path, "test").unwrap();
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
            let page = query_plan(&conn, &page_sql(&filter, false, 100), &values);
            assert!(page.contains(&format!("USING INDEX {index}")), "{page}");
            let mut after = values.clone();
            after.extend([
                rusqlite::types::Value::Integer(1),
                rusqlite::types::Value::Integer(1),
            ]);
            let page = query_plan(&conn, &page_sql(&filter, true, 100), &after);
            // Through the index, not a scan of every task.
            assert!(page.contains(&format!("USING INDEX {index}")), "{page}");
            let count = query_plan(&conn, &count_sql(&filter), &values);
            assert!(count.contains("INDEX"), "{count}");
        }
    }
}
