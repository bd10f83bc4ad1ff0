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
}];

/// Tasks created, the rows of one batch in one statement (`RowWrite`): id, context,
/// state, owner, update time, body, holder, held until. A task that exists is left as it
/// is, and its row not answered.
const INSERT_TASKS: &str = "WITH r AS (
         SELECT * FROM unnest($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $5::TEXT[],
                              $6::TEXT[], $7::TEXT[], $8::TEXT[])
             WITH ORDINALITY AS r (id, context_id, state, owner, updated_ms, body, holder,
                                   held_until_ms, n)
     ), written AS (
         INSERT INTO tasks (id, context_id, state, owner, updated_ms, version, body, holder,
                            held_until_ms)
         SELECT id, context_id, state, owner, updated_ms::BIGINT, 1, body, holder,
                held_until_ms::BIGINT
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

/// Claims submitted tasks whose hold lapsed for `$1` (held until `$2`, now `$3`, at
/// most `$4`): each replica alive claims only its share, by a hash of task id and the
/// lapsed hold (`with_share!`), so a dead replica's plans spread over the others; a hold
/// lapsed for a lease more (`$5`) is anyone's.
const CLAIM_LAPSED_SUBMITTED: &str = concat!(
    sagaplane_storage::with_share!(),
    "UPDATE tasks SET holder = $1, held_until_ms = $2
     WHERE seq IN (
         SELECT seq FROM tasks
         WHERE state = 'TASK_STATE_SUBMITTED' AND held_until_ms < $3
           AND holder IS DISTINCT FROM $1
           AND (held_until_ms < $3 - $5::BIGINT OR ",
    sagaplane_storage::in_share!("id || '@' || held_until_ms"),
    ")
         ORDER BY seq LIMIT $4
         FOR UPDATE SKIP LOCKED
     )
     RETURNING id, seq"
);

/// Tasks in a PostgreSQL database, shared by every replica that opens it.
#[derive(Debug, Clone)]
pub struct PostgresTaskStore {
    db: Postgres,
    holder: Option<Holder>,
}

/// The process that holds the tasks this store creates, while they are submitted and not
/// yet worked on (`held_by`).
#[derive(Debug, Clone)]
struct Holder {
    id: String,
    lease: std::time::Duration,
}

impl PostgresTaskStore {
    /// The store in `db`, its schema brought to this binary's version.
    pub async fn on(db: &Postgres) -> Result<Self> {
        db.migrate("task", MIGRATIONS).await?;
        Ok(Self {
            db: db.clone(),
            holder: None,
        })
    }

    /// The same store, whose tasks are created held by `holder` for `lease` while they
    /// are submitted: the lease `renew_held` renews, and that another process claims when
    /// it lapses (`claim_lapsed_submitted`). A task created just before its process died
    /// is then taken in by another, not left submitted for ever.
    pub fn held_by(mut self, holder: &str, lease: std::time::Duration) -> Self {
        self.holder = Some(Holder {
            id: holder.to_owned(),
            lease,
        });
        self
    }

    fn held_until(&self, now_ms: i64) -> i64 {
        let lease = self.holder.as_ref().map_or(0, |h| h.lease.as_millis());
        now_ms.saturating_add(i64::try_from(lease).unwrap_or(i64::MAX))
    }

    /// Renews the lease of the submitted tasks this store's holder holds among
    /// `taking_in` (the tasks whose plans it is still taking in), in one statement, but
    /// those being written at that moment; how many. A task it holds and no longer takes
    /// in (its answer could not be written) is not renewed: its hold lapses, and another
    /// process takes it in.
    pub async fn renew_held(&self, now_ms: i64, taking_in: &[String]) -> Result<u64> {
        let Some(holder) = &self.holder else {
            return Ok(0);
        };
        let conn = self.db.control_connection().await?;
        conn.run(
            // The state named as stored (`state_name`), for the partial index. A task
            // being written at this moment is skipped, not waited for: a group commit
            // writing two of them could otherwise wait for this renewal while it waits
            // for that commit. Its hold is renewed at the next renewal.
            "UPDATE tasks SET held_until_ms = $2
             WHERE seq IN (
                 SELECT seq FROM tasks
                 WHERE state = 'TASK_STATE_SUBMITTED' AND holder = $1 AND id = ANY($3)
                 FOR NO KEY UPDATE SKIP LOCKED
             )",
            &[&holder.id, &self.held_until(now_ms), &taking_in],
        )
        .await
        .map_err(|e| failed("cannot renew the leases of submitted tasks", &e).into())
    }

    /// Claims for this store's holder at most `at_most` submitted tasks whose holder's
    /// lease lapsed (it died, or was paused past it), skipping those another process is
    /// claiming at this moment, and those in the share of another replica alive
    /// (`CLAIM_LAPSED_SUBMITTED`); their ids, oldest first.
    pub async fn claim_lapsed_submitted(&self, now_ms: i64, at_most: usize) -> Result<Vec<String>> {
        let Some(holder) = &self.holder else {
            return Ok(Vec::new());
        };
        let at_most = i64::try_from(at_most).unwrap_or(i64::MAX);
        let conn = self.db.control_connection().await?;
        let rows = conn
            .rows(
                CLAIM_LAPSED_SUBMITTED,
                &[
                    &holder.id,
                    &self.held_until(now_ms),
                    &now_ms,
                    &at_most,
                    &i64::try_from(holder.lease.as_millis()).unwrap_or(i64::MAX),
                ],
            )
            .await
            .map_err(|e| failed("cannot claim submitted tasks", &e))?;
        let mut claimed: Vec<(i64, String)> =
            rows.iter().map(|row| (row.get(1), row.get(0))).collect();
        claimed.sort();
        Ok(claimed.into_iter().map(|(_, id)| id).collect())
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
            Expected::Absent => {
                // Held from its creation, in the same statement: no moment when a task
                // exists that no live process is answerable for.
                let holder = self.holder.as_ref().map(|h| h.id.clone());
                let held_until_ms = self.held_until(chrono::Utc::now().timestamp_millis());
                values.extend([holder, text(held_until_ms)]);
                INSERT_TASKS
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sdk::TaskState;
    use crate::store::conformance::task;
    use sagaplane_storage::postgres::testing::scratch_database;

    const LEASE: std::time::Duration = std::time::Duration::from_secs(4);

    #[tokio::test]
    async fn a_submitted_task_whose_holder_stopped_renewing_is_claimed_by_one_other_holder() {
        let Some(url) = scratch_database("tasks_held").await else {
            return;
        };
        let db = Postgres::connect(&url, 4).unwrap();
        let store = PostgresTaskStore::on(&db).await.unwrap();
        let (a, b, c) = (
            store.clone().held_by("a", LEASE),
            store.clone().held_by("b", LEASE),
            store.clone().held_by("c", LEASE),
        );
        assert_eq!(
            state_name(&TaskState::Submitted),
            "TASK_STATE_SUBMITTED",
            "the state the statements name"
        );
        a.put(
            &task("waits", "ctx", TaskState::Submitted, 1),
            Expected::Absent,
        )
        .await
        .unwrap();
        a.put(
            &task("works", "ctx", TaskState::Submitted, 2),
            Expected::Absent,
        )
        .await
        .unwrap();
        a.put(
            &task("works", "ctx", TaskState::Working, 3),
            Expected::Version(1),
        )
        .await
        .unwrap();
        let now = chrono::Utc::now().timestamp_millis();
        let lease_ms = i64::try_from(LEASE.as_millis()).unwrap();

        // Held while the lease runs, and renewed by its holder alone, while it takes the
        // task's plan in.
        let taking_in = ["waits".to_owned(), "works".to_owned()];
        assert!(b.claim_lapsed_submitted(now, 10).await.unwrap().is_empty());
        assert_eq!(
            a.renew_held(now, &taking_in).await.unwrap(),
            1,
            "only the submitted task"
        );
        assert_eq!(b.renew_held(now, &taking_in).await.unwrap(), 0);
        assert_eq!(
            a.renew_held(now, &[]).await.unwrap(),
            0,
            "a plan its holder no longer takes in is not held for it"
        );

        // Past the lease: claimed once, by one of the two asking; the task working is not.
        let lapsed = now + lease_ms + 1;
        let (by_b, by_c) = tokio::join!(
            b.claim_lapsed_submitted(lapsed, 10),
            c.claim_lapsed_submitted(lapsed, 10)
        );
        let mut claimed = by_b.unwrap();
        claimed.extend(by_c.unwrap());
        assert_eq!(claimed, ["waits"]);
        // Held again from then: neither the other claimer nor the first holder takes it.
        assert!(
            a.claim_lapsed_submitted(lapsed, 10)
                .await
                .unwrap()
                .is_empty()
        );
        assert!(
            b.claim_lapsed_submitted(lapsed, 10)
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            a.renew_held(lapsed, &taking_in).await.unwrap(),
            0,
            "no longer a's"
        );

        // A store that holds nothing claims nothing.
        assert!(
            store
                .claim_lapsed_submitted(lapsed + lease_ms * 10, 10)
                .await
                .unwrap()
                .is_empty()
        );
    }

    #[tokio::test]
    async fn the_replicas_alive_share_out_a_dead_holders_tasks() {
        const TASKS: usize = 20;
        let Some(url) = scratch_database("tasks_held_shared_out").await else {
            return;
        };
        let db = Postgres::connect(&url, 4).unwrap();
        let store = PostgresTaskStore::on(&db).await.unwrap();
        let (dead, a, b) = (
            store.clone().held_by("dead", LEASE),
            store.clone().held_by("a", LEASE),
            store.clone().held_by("b", LEASE),
        );
        for n in 0..TASKS {
            let id = format!("plan-{n:02}");
            dead.put(&task(&id, "ctx", TaskState::Submitted, 1), Expected::Absent)
                .await
                .unwrap();
        }
        let lease_ms = i64::try_from(LEASE.as_millis()).unwrap();
        let lapsed = chrono::Utc::now().timestamp_millis() + lease_ms + 1;
        // a and b alive (as their renewals in the journal mark them), one after the other.
        db.connection()
            .await
            .unwrap()
            .run(
                "INSERT INTO replicas VALUES ('a', $1), ('b', $1)",
                &[&(lapsed + lease_ms)],
            )
            .await
            .unwrap();
        let by_a = a.claim_lapsed_submitted(lapsed, 100).await.unwrap();
        let by_b = b.claim_lapsed_submitted(lapsed, 100).await.unwrap();
        assert!(
            !by_a.is_empty() && by_a.len() < TASKS,
            "a took {} of {TASKS}",
            by_a.len()
        );
        let mut all = [by_a, by_b].concat();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), TASKS, "each task went to one of them");
    }
}
