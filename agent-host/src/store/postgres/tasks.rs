//! The PostgreSQL `TaskStore`: one table, each write one row of a statement that the
//! writes of its kind share in a group commit, acknowledged once its batch committed
//! (the server's `synchronous_commit` decides when a commit is durable; on by default),
//! compare-and-set on a version, listings paged by key through an index.

use async_trait::async_trait;

use crate::error::{Error, Result};
use crate::sdk::Task;
use crate::store::{
    Expected, PageKey, StoredTask, TaskPage, TaskQuery, TaskStore, TaskWrite, Version, state_name,
};
use sagaplane_storage::postgres::{
    Cached, Migration, Postgres, RowWrite, ToSql, failed, to_i64, to_u64,
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
    sql: sagaplane_storage::where_lz4!(
        "ALTER TABLE tasks ALTER COLUMN body SET COMPRESSION lz4;"
    ),
}, Migration {
    what: "the process holding each task it is taking in",
    sql: "ALTER TABLE tasks ADD COLUMN IF NOT EXISTS holder TEXT;
          ALTER TABLE tasks ADD COLUMN IF NOT EXISTS held_until_ms BIGINT NOT NULL DEFAULT 0;
          CREATE INDEX IF NOT EXISTS tasks_submitted_by_holder ON tasks (holder, held_until_ms)
              WHERE state = 'TASK_STATE_SUBMITTED';",
}, Migration {
    what: "the replicas alive, among which lapsed held tasks are shared out",
    sql: sagaplane_storage::postgres::REPLICAS_ALIVE,
}, Migration {
    // A plan's task is created by the write that journals its saga, whose lease decides
    // who drives it: no task is held apart from its saga any more.
    what: "no process holding a task",
    sql: "DROP INDEX IF EXISTS tasks_submitted_by_holder;
          ALTER TABLE tasks DROP COLUMN IF EXISTS holder;
          ALTER TABLE tasks DROP COLUMN IF EXISTS held_until_ms;",
}, Migration {
    // Tasks are found by id; the sequence only breaks ties in listings' order, which their
    // indexes hold. One unique index fewer to write at each insert, and at each update
    // that changes a task's state.
    what: "tasks keyed by id",
    sql: "ALTER TABLE tasks DROP CONSTRAINT IF EXISTS tasks_pkey;
          ALTER TABLE tasks DROP CONSTRAINT IF EXISTS tasks_id_key;
          ALTER TABLE tasks ADD PRIMARY KEY (id);",
}];

/// Tasks created, the rows of one batch in one statement (`RowWrite`): id, context,
/// state, owner, update time, body. A task that exists is left as it is, and its row not
/// answered.
const INSERT_TASKS: &str = "WITH r AS (
         SELECT * FROM unnest($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $5::TEXT[],
                              $6::TEXT[])
             WITH ORDINALITY AS r (id, context_id, state, owner, updated_ms, body, n)
     ), written AS (
         INSERT INTO tasks (id, context_id, state, owner, updated_ms, version, body)
         SELECT id, context_id, state, owner, updated_ms::BIGINT, 1, body
         FROM r ORDER BY n
         ON CONFLICT (id) DO NOTHING
         RETURNING id
     )
     SELECT min(r.n) FROM r JOIN written ON written.id = r.id GROUP BY r.id";

/// Tasks written over at the version read, the rows of one batch in one statement
/// (`RowWrite`): id, context, state, owner, update time, body, the version read. A task
/// at another version is left as it is, and its row not answered.
const UPDATE_TASKS: &str = "WITH r AS (
         SELECT * FROM unnest($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $5::TEXT[],
                              $6::TEXT[], $7::TEXT[])
             WITH ORDINALITY AS r (id, context_id, state, owner, updated_ms, body, version, n)
     )
     UPDATE tasks SET context_id = r.context_id, state = r.state, owner = r.owner,
                      updated_ms = r.updated_ms::BIGINT, version = tasks.version + 1,
                      body = r.body
     FROM r WHERE tasks.id = r.id AND tasks.version = r.version::BIGINT
     RETURNING r.n";

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

/// The task with id `id` in `db`, as stored (for the task feed, which reads an ended
/// task when another process announces its end).
pub(super) async fn read_task(db: &Postgres, id: &str) -> Result<Option<Task>> {
    let conn = db.connection().await?;
    let row = conn
        .row_opt("SELECT body FROM tasks WHERE id = $1", &[&id])
        .await
        .map_err(|e| failed("cannot read a task", &e))?;
    row.map(|row| decode(row.get(0))).transpose()
}

fn decode(body: &str) -> Result<Task> {
    serde_json::from_str(body)
        .map_err(|e| Error::store(format!("a stored task cannot be read: {e}")))
}

#[async_trait]
impl TaskStore for PostgresTaskStore {
    async fn put(&self, task: &Task, expected: Expected) -> Result<Version> {
        let row = TaskWrite::of(task, expected)?;
        let version = row.version_after();
        // Group-committed with the other writes waiting at this moment (`sagaplane_storage::postgres`): a
        // task is written by one manager at a time, so no two batches wait for its row.
        let text = |n: i64| Some(n.to_string());
        // The columns both statements take first, in their order.
        let mut values = vec![
            Some(row.id),
            Some(row.context_id),
            Some(row.state),
            row.owner,
            text(row.updated_ms),
            Some(row.body),
        ];
        let sql = match expected {
            Expected::Absent => INSERT_TASKS,
            Expected::Version(version) => {
                values.push(text(to_i64(version)));
                UPDATE_TASKS
            }
        };
        let written = self
            .db
            .write_row(RowWrite { sql, values })
            .await
            .map_err(|e| Error::store(format!("cannot write a task: {e}")))?;
        if !written {
            return Err(Error::Conflict {
                task_id: task.id.clone(),
            });
        }
        Ok(version)
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
