//! The PostgreSQL `TaskStore`: one table, each write one statement, group-committed with
//! the other writes of the moment and acknowledged once its batch committed (the server's
//! `synchronous_commit` decides when a commit is durable; on by default),
//! compare-and-set on a version, listings paged by key through an index.

use async_trait::async_trait;

use super::{Cached, Migration, Postgres, ToSql, failed, to_i64, to_u64};
use crate::error::{Error, Result};
use crate::sdk::Task;
use crate::store::{
    Expected, PageKey, StoredTask, TaskPage, TaskQuery, TaskStore, Version, owner_of, state_name,
    updated_at,
};

/// The task store's schema, in order; the count is its version.
const MIGRATIONS: &[Migration] = &[Migration {
    what: "the tasks table",
    sql: "CREATE TABLE IF NOT EXISTS tasks (
              seq         BIGSERIAL PRIMARY KEY,
              id          TEXT NOT NULL UNIQUE,
              context_id  TEXT NOT NULL,
              state       TEXT NOT NULL,
              owner       TEXT,
              updated_ms  BIGINT NOT NULL,
              version     BIGINT NOT NULL,
              body        TEXT NOT NULL
          );
          -- Each listing reads its page in key order from the index that narrows it.
          CREATE INDEX IF NOT EXISTS tasks_by_update ON tasks (updated_ms DESC, seq DESC);
          CREATE INDEX IF NOT EXISTS tasks_by_context ON tasks (context_id, updated_ms DESC, seq DESC);
          CREATE INDEX IF NOT EXISTS tasks_by_state ON tasks (state, updated_ms DESC, seq DESC);",
}, Migration {
    what: "tasks compressed with lz4",
    sql: "DO $$ BEGIN
              -- lz4 where the server has it: pglz compressing the large JSON of every
              -- write was a large share of the database's CPU under load (perf).
              IF EXISTS (SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression'
                                                     AND 'lz4' = ANY(enumvals)) THEN
                  ALTER TABLE tasks ALTER COLUMN body SET COMPRESSION lz4;
              END IF;
          END $$;",
}];

/// Tasks in a PostgreSQL database, shared by every replica that opens it.
#[derive(Debug, Clone)]
pub struct PostgresTaskStore {
    db: Postgres,
}

impl PostgresTaskStore {
    /// The store in `db`, its schema brought to this binary's version.
    pub async fn on(db: &Postgres) -> Result<Self> {
        db.migrate("task", MIGRATIONS).await?;
        Ok(Self { db: db.clone() })
    }
}

fn decode(body: &str) -> Result<Task> {
    serde_json::from_str(body)
        .map_err(|e| Error::store(format!("a stored task cannot be read: {e}")))
}

#[async_trait]
impl TaskStore for PostgresTaskStore {
    async fn put(&self, task: &Task, expected: Expected) -> Result<Version> {
        let body = serde_json::to_string(task)
            .map_err(|e| Error::store(format!("cannot encode task: {e}")))?;
        let state = state_name(&task.status.state);
        let owner = owner_of(task);
        let updated_ms = updated_at(task).timestamp_millis();
        let context_id = task.context_id.clone();
        let owner = owner.map(str::to_owned);
        // Group-committed with the other writes waiting at this moment (`batch.rs`): a
        // task is written by one manager at a time, so no two batches wait for its row.
        let written = match expected {
            Expected::Absent => self
                .db
                .write(
                    "INSERT INTO tasks (id, context_id, state, owner, updated_ms, version, body)
                         VALUES ($1, $2, $3, $4, $5, 1, $6) ON CONFLICT (id) DO NOTHING",
                    vec![
                        Box::new(task.id.clone()),
                        Box::new(context_id),
                        Box::new(state),
                        Box::new(owner),
                        Box::new(updated_ms),
                        Box::new(body),
                    ],
                )
                .await,
            Expected::Version(version) => {
                self.db
                    .write(
                        "UPDATE tasks SET context_id = $2, state = $3, owner = $4, updated_ms = $5,
                             version = version + 1, body = $6
                         WHERE id = $1 AND version = $7",
                        vec![
                            Box::new(task.id.clone()),
                            Box::new(context_id),
                            Box::new(state),
                            Box::new(owner),
                            Box::new(updated_ms),
                            Box::new(body),
                            Box::new(to_i64(version)),
                        ],
                    )
                    .await
            }
        }
        .map_err(|e| Error::store(format!("cannot write a task: {e}")))?;
        if written != 1 {
            return Err(Error::Conflict {
                task_id: task.id.clone(),
            });
        }
        Ok(match expected {
            Expected::Absent => 1,
            Expected::Version(version) => version + 1,
        })
    }

    async fn read(&self, id: &str) -> Result<Option<StoredTask>> {
        let conn = self.db.connection().await?;
        let row = conn
            .row_opt("SELECT body, version FROM tasks WHERE id = $1", &[&id])
            .await
            .map_err(|e| failed("cannot read a task", &e))?;
        row.map(|row| {
            Ok(StoredTask {
                task: decode(row.get(0))?,
                version: to_u64(row.get(1)),
            })
        })
        .transpose()
    }

    async fn list(&self, query: &TaskQuery) -> Result<TaskPage> {
        let filter = Filter::of(query);
        let conn = self.db.connection().await?;
        let total: i64 = conn
            .row(
                &format!("SELECT COUNT(*) FROM tasks{}", filter.sql),
                &filter.values(),
            )
            .await
            .map_err(|e| failed("cannot count tasks", &e))?
            .get(0);
        let mut page = filter.clone();
        if let Some(after) = query.after {
            page.push("(updated_ms, seq) < (", Value::Int(after.updated_ms));
            page.sql.push_str(&format!(", ${})", page.bound.len() + 1));
            page.bound.push(Value::Int(after.seq));
        }
        // One more than the page, to know whether another follows.
        let limit = to_i64(u64::try_from(query.limit).unwrap_or(u64::MAX)).saturating_add(1);
        page.bound.push(Value::Int(limit));
        let rows = conn
            .rows(
                &format!(
                    "SELECT body, updated_ms, seq FROM tasks{} ORDER BY updated_ms DESC, seq DESC LIMIT ${}",
                    page.sql,
                    page.bound.len()
                ),
                &page.values(),
            )
            .await
            .map_err(|e| failed("cannot list tasks", &e))?;
        let mut keyed = Vec::with_capacity(rows.len());
        for row in &rows {
            let key = PageKey {
                updated_ms: row.get(1),
                seq: row.get(2),
            };
            keyed.push((key, decode(row.get(0))?));
        }
        let next = if keyed.len() > query.limit {
            keyed.truncate(query.limit);
            keyed.last().map(|(key, _)| *key)
        } else {
            None
        };
        Ok(TaskPage {
            tasks: keyed.into_iter().map(|(_, task)| task).collect(),
            total: usize::try_from(total).unwrap_or(0),
            next,
        })
    }

    async fn delete(&self, ids: &[String]) -> Result<()> {
        let conn = self.db.connection().await?;
        conn.run("DELETE FROM tasks WHERE id = ANY($1)", &[&ids])
            .await
            .map_err(|e| failed("cannot delete tasks", &e))?;
        Ok(())
    }

    fn write_failure(&self) -> Option<String> {
        self.db.unreachable()
    }
}

/// A value a listing binds.
#[derive(Debug, Clone)]
enum Value {
    Text(String),
    Int(i64),
}

/// A listing's `WHERE` clause, naming only the conditions its query has, and the values
/// it binds in order.
#[derive(Debug, Clone)]
struct Filter {
    sql: String,
    bound: Vec<Value>,
}

impl Filter {
    fn of(query: &TaskQuery) -> Self {
        let mut filter = Self {
            sql: String::new(),
            bound: Vec::new(),
        };
        if let Some(context_id) = &query.context_id {
            filter.push("context_id = ", Value::Text(context_id.clone()));
        }
        if let Some(state) = &query.state {
            filter.push("state = ", Value::Text(state_name(state)));
        }
        if let Some(owner) = &query.owner {
            filter.push("owner = ", Value::Text(owner.clone()));
        }
        if let Some(after) = query.updated_after {
            filter.push("updated_ms > ", Value::Int(after.timestamp_millis()));
        }
        filter
    }

    /// Adds `condition` followed by the next parameter, bound to `value`.
    fn push(&mut self, condition: &str, value: Value) {
        self.sql.push_str(if self.bound.is_empty() {
            " WHERE "
        } else {
            " AND "
        });
        self.bound.push(value);
        self.sql
            .push_str(&format!("{condition}${}", self.bound.len()));
    }

    fn values(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.bound
            .iter()
            .map(|value| match value {
                Value::Text(text) => text as &(dyn ToSql + Sync),
                Value::Int(int) => int as &(dyn ToSql + Sync),
            })
            .collect()
    }
}
