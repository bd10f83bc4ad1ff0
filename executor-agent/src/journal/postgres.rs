//! The PostgreSQL journal, shared by executor replicas: each saga's owner, epoch and lease
//! on its row; every append fenced by a lock on that row in the append's own statement,
//! so a claim and an append of one saga are ordered by the database, never by a replica's
//! memory; appends group-committed with the other writes of the moment (`Postgres::write`:
//! the task store's too); a saga begun in one statement that takes its mandate's budget,
//! the begins under one mandate sharing a transaction (`Postgres::write_together`).

use sagaplane_storage::postgres::{
    Cached, Connection, Done, DriverError, Migration, Param, Postgres, RowWrite, Statement, failed,
    to_i64, to_u64,
};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use shared_types::Violation;

use super::{
    Claim, Ending, Entry, Epoch, Forgettable, Headers, Ownership, SagaHeader, SagaLog, Unrevoked,
};
use crate::error::{Error, Result};
use crate::mandates;
use crate::saga::spec::MandateHold;

mod fenced;
mod sql;
use agent_host::store::{Expected, TaskWrite};
use fenced::{fenced_outcome, task_columns, task_params};
use sql::{
    APPEND, APPEND_WITH_TASK, BEGIN_IF_CURRENT, BEGIN_UNDER_MANDATE,
    BEGIN_UNDER_MANDATE_IF_CURRENT, CREATE_TASK, END, END_WITH_TASK, MANDATE_IF_NEW,
};

/// The journal's schema in PostgreSQL, in order; the count is its version.
const MIGRATIONS: &[Migration] = &[
    Migration {
        what: "the sagas, their owners and their entries",
        sql: "CREATE TABLE IF NOT EXISTS sagas (
              saga_id        TEXT PRIMARY KEY,
              task_id        TEXT NOT NULL,
              header         TEXT NOT NULL,
              finished       BOOLEAN NOT NULL DEFAULT FALSE,
              -- The begin time until the saga finishes, then the finish time.
              finished_ms    BIGINT NOT NULL,
              -- When the plan's mandate expires (NULL when it cannot be read: kept).
              mandate_ends_ms BIGINT,
              owner          TEXT,
              epoch          BIGINT NOT NULL,
              lease_until_ms BIGINT NOT NULL
          );
          CREATE TABLE IF NOT EXISTS entries (
              seq     BIGSERIAL PRIMARY KEY,
              saga_id TEXT NOT NULL REFERENCES sagas (saga_id),
              body    TEXT NOT NULL
          );
          CREATE INDEX IF NOT EXISTS entries_by_saga ON entries (saga_id, seq);
          -- Recovery, claims and renewals read the sagas still running, not every saga.
          CREATE INDEX IF NOT EXISTS sagas_unfinished ON sagas (owner, saga_id) WHERE NOT finished;
          CREATE INDEX IF NOT EXISTS sagas_by_finish ON sagas (finished_ms) WHERE finished;",
    },
    Migration {
        what: "plans and entries compressed with lz4",
        sql: sagaplane_storage::where_lz4!(
            "ALTER TABLE sagas ALTER COLUMN header SET COMPRESSION lz4; \
             ALTER TABLE entries ALTER COLUMN body SET COMPRESSION lz4;"
        ),
    },
    Migration {
        what: "the replicas alive, among which lapsed sagas are shared out",
        sql: sagaplane_storage::postgres::REPLICAS_ALIVE,
    },
    Migration {
        what: "the sagas by task, by which a task's saga is found",
        sql: "CREATE INDEX IF NOT EXISTS sagas_by_task ON sagas (task_id);",
    },
    Migration {
        what: "the unfinished sagas in saga id order, as claims and starts read them",
        // A claim takes lapsed sagas in saga id order: with the unfinished ones indexed by
        // owner first, the server walked the primary key over every saga kept (finished
        // for days, until forgotten) each renewal period, on every replica. A renewal
        // now reads every running saga to find its owner's: the sagas in flight, few.
        sql: "CREATE INDEX IF NOT EXISTS sagas_unfinished_by_id ON sagas (saga_id) WHERE NOT finished;
              DROP INDEX IF EXISTS sagas_unfinished;",
    },
    Migration {
        what: "the entries keyed by saga and sequence",
        // One index where there were two (the sequence's key, and saga and sequence,
        // which every read uses), and no foreign key: every write of an entry is fenced
        // by its saga's row in its own statement, or follows that row's insert in the
        // begin's, so the key's check read that row again for nothing. Each saga writes
        // about seven entries.
        sql: "CREATE UNIQUE INDEX IF NOT EXISTS entries_key ON entries (saga_id, seq);
              ALTER TABLE entries DROP CONSTRAINT IF EXISTS entries_saga_id_fkey;
              ALTER TABLE entries DROP CONSTRAINT IF EXISTS entries_pkey;
              ALTER TABLE entries ADD CONSTRAINT entries_pkey PRIMARY KEY USING INDEX entries_key;
              DROP INDEX IF EXISTS entries_by_saga;",
    },
];

/// How many mandates a journal remembers having seen written (`known_mandates`).
const KNOWN_MANDATES_AT_MOST: usize = 65_536;

/// How long the row of a replica that stopped renewing is kept (a day): past that it is
/// deleted at another's renewal.
const REPLICA_GONE_AFTER_MS: i64 = 24 * 60 * 60 * 1000;

/// Claims lapsed sagas for `$1` (lease until `$2`, now `$3`, at most `$4`). The owners
/// alive (their last renewal's lease holds; this one counts) share them out by a hash of
/// saga id and epoch, each claiming only its share, so that a dead replica's sagas spread
/// over the others instead of going to whichever claims first; a saga taken over again
/// is shared out anew. A saga whose lease lapsed more than a lease (`$5`) ago is
/// anyone's: the owner of its share is alive on paper but does not claim it. A saga
/// given up at a stop (no owner, its lease ended then) is shared out like a lapsed one.
const CLAIM_LAPSED: &str = concat!(
    sagaplane_storage::with_share!(),
    "UPDATE sagas SET owner = $1, epoch = epoch + 1, lease_until_ms = $2
     WHERE saga_id IN (
         SELECT saga_id FROM sagas
         WHERE NOT finished AND (owner IS NULL OR lease_until_ms < $3)
           AND owner IS DISTINCT FROM $1
           AND (lease_until_ms < $3 - $5::BIGINT OR ",
    sagaplane_storage::in_share!("saga_id || '@' || epoch"),
    ")
         ORDER BY saga_id LIMIT $4
         FOR UPDATE SKIP LOCKED
     )
     RETURNING saga_id, epoch"
);

/// Extends every lease of `$1` to `$2`, and its row among the replicas alive with them
/// (it is seen alive exactly as long as the leases it renewed hold); the rows of replicas
/// gone for a day (before `$3`) are deleted.
///
/// A renewal waits for no saga's row: one locked by a transaction (the ends that a
/// mandate's transaction gathers lock theirs in the order they came, a claim locks one)
/// is skipped, and renewed at the next renewal if it is still unfinished and ours. Had it
/// waited, it would lock the rows it renews in its own order, and with a transaction
/// locking two of them in the other order each waits for the other until the server's
/// deadlock check refuses one a second later: the renewal, or the mandate's writes of
/// that moment. With the defaults (a lease of 4 s renewed every second) a row skipped once
/// still has 3 s of its lease when the next renewal comes.
const RENEW: &str = "WITH beat AS (
         INSERT INTO replicas (owner, alive_until_ms) VALUES ($1, $2)
         ON CONFLICT (owner) DO UPDATE SET alive_until_ms = EXCLUDED.alive_until_ms
     ), gone AS (
         DELETE FROM replicas WHERE alive_until_ms < $3
     )
     UPDATE sagas SET lease_until_ms = $2
     WHERE saga_id IN (
         SELECT saga_id FROM sagas WHERE NOT finished AND owner = $1
         FOR NO KEY UPDATE SKIP LOCKED
     )";

/// The journal in a PostgreSQL database; one owner per opening (a replica's run).
#[derive(Debug, Clone)]
pub struct PostgresJournal {
    db: Postgres,
    owner: String,
    lease: std::time::Duration,
    /// The mandates whose row this process saw written: a begin under one of them skips
    /// creating it (rows of mandates are never deleted; one missing after all is created
    /// again by the begin's next attempt).
    known_mandates: std::sync::Arc<std::sync::Mutex<std::collections::HashSet<(String, String)>>>,
}

impl PostgresJournal {
    /// The journal in `db`, its schema (and the mandates' tables that accepting and
    /// finishing write) brought to this binary's version.
    pub async fn on(db: &Postgres) -> Result<Self> {
        db.migrate(mandates::STORE, mandates::POSTGRES_MIGRATIONS)
            .await?;
        db.migrate("journal", MIGRATIONS).await?;
        Ok(Self {
            db: db.clone(),
            owner: uuid::Uuid::new_v4().to_string(),
            lease: super::DEFAULT_LEASE,
            known_mandates: Default::default(),
        })
    }

    /// Who this opening claims sagas as: one replica's run.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The same journal, whose claims hold a saga for `lease` without renewal.
    pub fn with_lease(mut self, lease: std::time::Duration) -> Self {
        self.lease = lease;
        self
    }

    /// The same database, opened by another owner (another replica, in tests).
    pub fn as_other_owner(&self) -> Self {
        Self {
            owner: uuid::Uuid::new_v4().to_string(),
            ..self.clone()
        }
    }

    fn lease_until(&self, now_ms: i64) -> i64 {
        super::lease_until(self.lease, now_ms)
    }

    async fn connection(&self) -> Result<Connection> {
        Ok(self.db.connection().await?)
    }

    /// An append carrying its task's write: one statement, in a transaction of its own
    /// (it is rare: a step that changes the state its task shows).
    async fn append_with_task(
        &self,
        saga_id: &str,
        epoch: Epoch,
        body: String,
        task: &TaskWrite,
        unrevoked: Option<Unrevoked<'_>>,
    ) -> Result<()> {
        let mut params: Vec<Param> = vec![
            Box::new(saga_id.to_owned()),
            Box::new(to_i64(epoch)),
            Box::new(self.owner.clone()),
            Box::new(body),
        ];
        params.extend(task_params(task)?);
        params.push(Box::new(unrevoked.map(|m| m.principal_key.to_owned())));
        params.push(Box::new(unrevoked.map(|m| m.mandate_id.to_owned())));
        let statement = Statement {
            sql: APPEND_WITH_TASK,
            params,
            returns_rows: true,
        };
        let done = self.db.write_together(None, vec![statement]).await?;
        fenced_outcome(&done, saga_id, epoch, Some(task), "an append")
    }
}

fn encode<T: Serialize>(value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|source| Error::Encoding {
        what: "a journal entry",
        source,
    })
}

fn decode<T: for<'de> Deserialize<'de>>(text: &str) -> Result<T> {
    serde_json::from_str(text)
        .map_err(|e| Error::Journal(format!("a journal row cannot be read: {e}")))
}

/// When the plan's mandate expires, in ms; `None` when the plan does not say readably.
fn mandate_ends_ms(header: &SagaHeader) -> Option<i64> {
    let mandate = header.plan.get("mandate")?;
    let text = mandate
        .get("notAfter")
        .or_else(|| mandate.get("expiresAt"))?
        .as_str()?;
    Some(
        chrono::DateTime::parse_from_rfc3339(text)
            .ok()?
            .timestamp_millis(),
    )
}

fn store(what: &str) -> impl Fn(DriverError) -> Error + '_ {
    move |e| Error::from(failed(what, &e))
}

#[async_trait]
impl SagaLog for PostgresJournal {
    async fn begin_creating(
        &self,
        header: &SagaHeader,
        first: &[Entry],
        task: Option<&TaskWrite>,
    ) -> Result<Epoch> {
        let body = encode(header)?;
        let first = if first.is_empty() {
            None
        } else {
            Some(encode(&first)?)
        };
        if let Some(task) = task
            && task.expected != Expected::Absent
        {
            return Err(Error::Journal(
                "a saga's begin creates its task, which exists already".into(),
            ));
        }
        let create_task = || {
            task.map(|task| {
                let mut params = Vec::from(task_columns(task));
                params.push(Box::new(header.saga_id.clone()));
                Statement {
                    sql: CREATE_TASK,
                    params,
                    returns_rows: false,
                }
            })
        };
        let registrations = header.registrations_read;
        let Some(hold) = &header.spec.mandate else {
            let at_ms = chrono::Utc::now().timestamp_millis();
            if let Some(seen) = registrations {
                let mut params =
                    saga_params(header, body, at_ms, &self.owner, self.lease_until(at_ms));
                params.push(Box::new(seen));
                params.push(Box::new(first));
                let mut statements = vec![Statement {
                    sql: BEGIN_IF_CURRENT,
                    params,
                    returns_rows: true,
                }];
                statements.extend(create_task());
                let done = self.db.write_together(None, statements).await?;
                let Some(Done::Rows(rows)) = done.first() else {
                    return Err(Error::Journal("a begin answered no row".into()));
                };
                let Some(row) = rows.first() else {
                    return Err(Error::Journal("a begin answered no row".into()));
                };
                let (written, current): (bool, bool) = (row.get(0), row.get(1));
                return match (written, current) {
                    (true, _) => Ok(1),
                    (false, false) => Err(Error::RegistryChanged),
                    (false, true) => Err(begun_already(header)),
                };
            }
            let mut statements = vec![Statement {
                sql: "INSERT INTO sagas (saga_id, task_id, header, finished_ms, mandate_ends_ms,
                                         owner, epoch, lease_until_ms)
                      VALUES ($1, $2, $3, $4, $5, $6, 1, $7)",
                params: saga_params(header, body, at_ms, &self.owner, self.lease_until(at_ms)),
                returns_rows: false,
            }];
            if let Some(first) = first {
                statements.push(Statement {
                    sql: "INSERT INTO entries (saga_id, body) VALUES ($1, $2)",
                    params: vec![Box::new(header.saga_id.clone()), Box::new(first)],
                    returns_rows: false,
                });
            }
            statements.extend(create_task());
            self.db.write_together(None, statements).await?;
            return Ok(1);
        };
        let mandate = (hold.principal_key.clone(), hold.mandate_id.clone());
        for attempt in 0..RESERVE_ATTEMPTS {
            let at_ms = chrono::Utc::now().timestamp_millis();
            let mut params = saga_params(
                header,
                body.clone(),
                at_ms,
                &self.owner,
                self.lease_until(at_ms),
            );
            params.extend(budget_params(hold));
            params.push(Box::new(first.clone()));
            if let Some(seen) = registrations {
                params.push(Box::new(seen));
            }
            let known = attempt == 0 && crate::sync::lock(&self.known_mandates).contains(&mandate);
            let mut statements = Vec::with_capacity(2);
            if !known {
                statements.push(Statement {
                    sql: MANDATE_IF_NEW,
                    params: mandate_params(hold),
                    returns_rows: false,
                });
            }
            statements.push(Statement {
                sql: match registrations {
                    Some(_) => BEGIN_UNDER_MANDATE_IF_CURRENT,
                    None => BEGIN_UNDER_MANDATE,
                },
                params,
                returns_rows: true,
            });
            let begin_at = statements.len() - 1;
            statements.extend(create_task());
            // The plans accepted under one mandate at one moment share a transaction of
            // their own: its row is locked once for all of them (`batch.rs`).
            let done = self
                .db
                .write_together(Some(mandate_group(hold)), statements)
                .await?;
            let Some(Done::Rows(rows)) = done.get(begin_at) else {
                return Err(Error::Journal("a begin answered no row".into()));
            };
            let Some(row) = rows.first() else {
                return Err(Error::Journal("a begin answered no row".into()));
            };
            let (taken, revoked, current, begun): (bool, bool, bool, bool) =
                (row.get(0), row.get(1), row.get(2), row.get(3));
            if !current {
                return Err(Error::RegistryChanged);
            }
            if begun {
                return Err(begun_already(header));
            }
            if taken {
                let mut known = crate::sync::lock(&self.known_mandates);
                // Bounded: forgetting them costs only the creating statement again.
                if known.len() >= KNOWN_MANDATES_AT_MOST {
                    known.clear();
                }
                known.insert(mandate);
                return Ok(1);
            }
            if revoked {
                return Err(Error::Mandate(mandates::revoked(hold)));
            }
            if let Some(violation) = self.refusal(hold).await? {
                return Err(Error::Mandate(violation));
            }
            // The budget changed between the refusal and the read: asked again.
        }
        Err(Error::Journal(format!(
            "the reservation against mandate {:?} was refused {RESERVE_ATTEMPTS} times while its row allowed it",
            hold.mandate_id
        )))
    }

    async fn append_carrying(
        &self,
        saga_id: &str,
        epoch: Epoch,
        entries: &[Entry],
        task: Option<&TaskWrite>,
        unrevoked: Option<Unrevoked<'_>>,
    ) -> Result<()> {
        let body = encode(&entries)?;
        let written = match task {
            Some(task) => {
                self.append_with_task(saga_id, epoch, body, task, unrevoked)
                    .await
            }
            // Group-committed with the other writes waiting at this moment (the
            // database's `write_row`): each append is fenced as if alone.
            None => self
                .db
                .write_row(RowWrite {
                    sql: APPEND,
                    values: vec![
                        Some(saga_id.to_owned()),
                        Some(body),
                        Some(epoch.to_string()),
                        Some(self.owner.clone()),
                        unrevoked.map(|m| m.principal_key.to_owned()),
                        unrevoked.map(|m| m.mandate_id.to_owned()),
                    ],
                })
                .await
                .map_err(Error::from)
                .and_then(|written| {
                    if written {
                        Ok(())
                    } else {
                        Err(Error::Fenced {
                            saga_id: saga_id.to_owned(),
                            epoch,
                        })
                    }
                }),
        };
        match (written, unrevoked) {
            // Not written: for a fence that moved, or for the mandate's revocation, which
            // is read (rarely: a refused write) to say which.
            (Err(Error::Fenced { .. }), Some(mandate))
                if mandates::postgres::is_revoked(
                    &self.db,
                    mandate.principal_key,
                    mandate.mandate_id,
                )
                .await? =>
            {
                Err(Error::RevokedAtWrite {
                    saga_id: saga_id.to_owned(),
                })
            }
            (written, _) => written,
        }
    }

    fn checks_revocations(&self) -> bool {
        true
    }

    async fn end(
        &self,
        saga_id: &str,
        epoch: Epoch,
        entries: &[Entry],
        ending: &Ending,
        task: Option<&TaskWrite>,
    ) -> Result<()> {
        let body = if entries.is_empty() {
            None
        } else {
            Some(encode(&entries)?)
        };
        let mut params: Vec<Param> = vec![
            Box::new(saga_id.to_owned()),
            Box::new(to_i64(epoch)),
            Box::new(self.owner.clone()),
            Box::new(body),
            Box::new(to_i64(ending.spent_minor)),
            Box::new(chrono::Utc::now().timestamp_millis()),
        ];
        let sql = match task {
            None => END,
            Some(task) => {
                params.extend(task_params(task)?);
                END_WITH_TASK
            }
        };
        let statement = Statement {
            sql,
            params,
            returns_rows: true,
        };
        // Under a mandate, committed with the begins under it (`batch.rs`: the one
        // transaction that locks its row), as `finish` is.
        let group = ending.mandate.as_ref().map(mandate_group);
        let done = self.db.write_together(group, vec![statement]).await?;
        fenced_outcome(&done, saga_id, epoch, task, "a saga's end")
    }

    async fn load(&self, saga_id: &str) -> Result<Option<(SagaHeader, Vec<Entry>)>> {
        let conn = self.connection().await?;
        let Some(row) = conn
            .row_opt("SELECT header FROM sagas WHERE saga_id = $1", &[&saga_id])
            .await
            .map_err(store("cannot load a saga"))?
        else {
            return Ok(None);
        };
        let header: SagaHeader = decode(row.get(0))?;
        let rows = conn
            .rows(
                "SELECT body FROM entries WHERE saga_id = $1 ORDER BY seq",
                &[&saga_id],
            )
            .await
            .map_err(store("cannot load a saga"))?;
        let mut entries = Vec::new();
        for row in &rows {
            // A row is the array of one append.
            entries.extend(decode::<Vec<Entry>>(row.get(0))?);
        }
        Ok(Some((header, entries)))
    }

    async fn unfinished(&self) -> Result<Vec<String>> {
        let conn = self.connection().await?;
        let rows = conn
            .rows(
                "SELECT saga_id FROM sagas WHERE NOT finished ORDER BY saga_id",
                &[],
            )
            .await
            .map_err(store("cannot list the unfinished sagas"))?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }

    async fn forgettable(
        &self,
        finished_before_ms: i64,
        now_ms: i64,
        at_most: usize,
    ) -> Result<Vec<Forgettable>> {
        let at_most = i64::try_from(at_most).unwrap_or(i64::MAX);
        let conn = self.connection().await?;
        let rows = conn
            .rows(
                "SELECT saga_id, task_id FROM sagas
                 WHERE finished AND finished_ms < $1 AND mandate_ends_ms < $2
                 ORDER BY finished_ms LIMIT $3",
                &[&finished_before_ms, &now_ms, &at_most],
            )
            .await
            .map_err(store("cannot list the sagas to forget"))?;
        Ok(rows
            .iter()
            .map(|row| Forgettable {
                saga_id: row.get(0),
                task_id: row.get(1),
            })
            .collect())
    }

    async fn forget(&self, saga_ids: &[String]) -> Result<()> {
        let mut conn = self.connection().await?;
        let tx = conn
            .transaction()
            .await
            .map_err(store("cannot forget sagas"))?;
        // Only a finished saga is ever forgotten.
        tx.run(
            "DELETE FROM entries WHERE saga_id IN
                 (SELECT saga_id FROM sagas WHERE saga_id = ANY($1) AND finished)",
            &[&saga_ids],
        )
        .await
        .map_err(store("cannot forget sagas"))?;
        tx.run(
            "DELETE FROM sagas WHERE saga_id = ANY($1) AND finished",
            &[&saga_ids],
        )
        .await
        .map_err(store("cannot forget sagas"))?;
        tx.commit().await.map_err(store("cannot forget sagas"))
    }
}

#[async_trait]
impl Ownership for PostgresJournal {
    async fn claim(&self, saga_id: &str, now_ms: i64, how: Claim) -> Result<Option<Epoch>> {
        let conn = self.connection().await?;
        let row = conn
            .row_opt(
                // FOR UPDATE: the lock an append's fence (KEY SHARE) waits for.
                "UPDATE sagas SET owner = $2, epoch = epoch + 1, lease_until_ms = $3
                 WHERE saga_id = (SELECT saga_id FROM sagas WHERE saga_id = $1 FOR UPDATE)
                   AND NOT finished
                   AND ($4 OR owner IS NULL OR lease_until_ms < $5)
                 RETURNING epoch",
                &[
                    &saga_id,
                    &self.owner,
                    &self.lease_until(now_ms),
                    &(how == Claim::TakeOver),
                    &now_ms,
                ],
            )
            .await
            .map_err(store("cannot claim a saga"))?;
        Ok(row.map(|row| to_u64(row.get(0))))
    }

    async fn renew(&self, now_ms: i64) -> Result<usize> {
        let conn = self.db.control_connection().await?;
        let renewed = conn
            .run(
                RENEW,
                &[
                    &self.owner,
                    &self.lease_until(now_ms),
                    &(now_ms - REPLICA_GONE_AFTER_MS),
                ],
            )
            .await
            .map_err(store("cannot renew leases"))?;
        Ok(usize::try_from(renewed).unwrap_or(usize::MAX))
    }

    async fn release(&self, saga_id: &str, epoch: Epoch) -> Result<()> {
        let conn = self.connection().await?;
        // Given up now: free at once, shared out among the owners alive like a lapsed
        // saga, and anyone's once a lease has passed (`CLAIM_LAPSED`).
        let now_ms = chrono::Utc::now().timestamp_millis();
        conn.run(
            "UPDATE sagas SET owner = NULL, lease_until_ms = $4
             WHERE saga_id = $1 AND owner = $2 AND epoch = $3",
            &[&saga_id, &self.owner, &to_i64(epoch), &now_ms],
        )
        .await
        .map_err(store("cannot release a saga"))?;
        Ok(())
    }

    async fn claim_lapsed(&self, now_ms: i64, at_most: usize) -> Result<Vec<(String, Epoch)>> {
        let at_most = i64::try_from(at_most).unwrap_or(i64::MAX);
        let conn = self.db.control_connection().await?;
        // SKIP LOCKED: owners claiming at once each take sagas the others have not
        // locked, instead of waiting for them and then finding them taken. Each claims
        // its share (`CLAIM_LAPSED`).
        let rows = conn
            .rows(
                CLAIM_LAPSED,
                &[
                    &self.owner,
                    &self.lease_until(now_ms),
                    &now_ms,
                    &at_most,
                    &i64::try_from(self.lease.as_millis()).unwrap_or(i64::MAX),
                ],
            )
            .await
            .map_err(store("cannot claim lapsed sagas"))?;
        let mut claimed: Vec<(String, Epoch)> = rows
            .iter()
            .map(|row| (row.get(0), to_u64(row.get(1))))
            .collect();
        claimed.sort();
        Ok(claimed)
    }

    fn is_shared(&self) -> bool {
        true
    }

    async fn retire(&self) -> Result<()> {
        let conn = self.db.control_connection().await?;
        conn.run("DELETE FROM replicas WHERE owner = $1", &[&self.owner])
            .await
            .map_err(store("cannot say that this replica stops"))?;
        Ok(())
    }

    async fn claimable(&self, now_ms: i64, at_most: usize) -> Result<Vec<String>> {
        let at_most = i64::try_from(at_most).unwrap_or(i64::MAX);
        let conn = self.connection().await?;
        let rows = conn
            .rows(
                "SELECT saga_id FROM sagas
                 WHERE NOT finished AND (owner IS NULL OR lease_until_ms < $1)
                 ORDER BY saga_id LIMIT $2",
                &[&now_ms, &at_most],
            )
            .await
            .map_err(store("cannot list the claimable sagas"))?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }
}

#[async_trait]
impl Headers for PostgresJournal {
    async fn header(&self, saga_id: &str) -> Result<Option<SagaHeader>> {
        let conn = self.connection().await?;
        let row = conn
            .row_opt("SELECT header FROM sagas WHERE saga_id = $1", &[&saga_id])
            .await
            .map_err(store("cannot read a saga's header"))?;
        row.map(|row| decode(row.get(0))).transpose()
    }

    async fn saga_of_task(&self, task_id: &str) -> Result<Option<(String, bool)>> {
        let conn = self.connection().await?;
        let row = conn
            .row_opt(
                "SELECT saga_id, finished FROM sagas WHERE task_id = $1",
                &[&task_id],
            )
            .await
            .map_err(store("cannot read the saga of a task"))?;
        Ok(row.map(|row| (row.get(0), row.get(1))))
    }
}

/// A begin refused because its saga id was begun already (the same plan sent again, or
/// another plan under its id: admission tells which).
fn begun_already(header: &SagaHeader) -> Error {
    Error::Journal(format!("saga {} is begun already", header.saga_id))
}

/// The parameters `$1`–`$7` of a begin: the saga's row.
fn saga_params(
    header: &SagaHeader,
    body: String,
    at_ms: i64,
    owner: &str,
    lease_until_ms: i64,
) -> Vec<Param> {
    vec![
        Box::new(header.saga_id.clone()),
        Box::new(header.task_id.clone()),
        Box::new(body),
        Box::new(at_ms),
        Box::new(mandate_ends_ms(header)),
        Box::new(owner.to_owned()),
        Box::new(lease_until_ms),
    ]
}

/// The parameters `$8`–`$13` of a begin under a mandate: what its budget must allow.
fn budget_params(hold: &MandateHold) -> Vec<Param> {
    vec![
        Box::new(hold.principal_key.clone()),
        Box::new(hold.mandate_id.clone()),
        Box::new(to_i64(hold.reserved_minor)),
        Box::new(hold.document_sha256.clone()),
        Box::new(to_i64(hold.budget.amount_minor.get())),
        Box::new(hold.max_sagas.map(i64::from)),
    ]
}

/// The group of the writes that lock `hold`'s mandate row (`batch.rs`).
fn mandate_group(hold: &MandateHold) -> String {
    format!("mandate {} {}", hold.principal_key, hold.mandate_id)
}

fn mandate_params(hold: &MandateHold) -> Vec<Param> {
    vec![
        Box::new(hold.principal_key.clone()),
        Box::new(hold.mandate_id.clone()),
        Box::new(hold.document_sha256.clone()),
        Box::new(hold.principal.clone()),
        Box::new(hold.budget.currency.as_str().to_owned()),
        Box::new(to_i64(hold.budget.amount_minor.get())),
        Box::new(hold.max_sagas.map(i64::from)),
    ]
}

/// How many times a begin refused by the budget is tried again when the refusal cannot be
/// explained by what the mandate's row shows (it changed in between).
const RESERVE_ATTEMPTS: usize = 3;

impl PostgresJournal {
    /// Why the mandate's budget refuses `hold`, from its row as it stands; `None` when it
    /// would now allow it.
    async fn refusal(&self, hold: &MandateHold) -> Result<Option<Violation>> {
        let conn = self.connection().await?;
        let row = conn
            .row_opt(
                "SELECT document_sha256, used_minor, sagas FROM mandates
                 WHERE principal_key = $1 AND mandate_id = $2",
                &[&hold.principal_key, &hold.mandate_id],
            )
            .await
            .map_err(store("cannot reserve against a mandate"))?;
        let Some(row) = row else {
            return Ok(None);
        };
        let (known, used, sagas): (String, i64, i64) = (row.get(0), row.get(1), row.get(2));
        Ok(mandates::refusal_for(
            hold,
            &known,
            to_u64(used),
            to_u64(sagas),
        ))
    }
}

#[cfg(test)]
mod tests;
