//! Cancels and answers for a saga that another replica drives (docs/running-the-executor.md): the
//! replica that received one checks it as it would its own, then leaves it in the shared
//! database (`saga_requests`) and announces it on a channel; the replica driving the saga
//! takes it, carries it out as if it had been sent there, and writes the answer back,
//! announced the same way. The request is kept until it is answered, so a cancel for a
//! saga whose owner just died is carried out by the replica that takes the saga over
//! (each replica also looks for requests left for the sagas it drives, every lease
//! renewal period: a notification sent while a listener was away is lost).
//!
//! A request is taken by one replica at a time (`taken_by`). One taken by a replica that
//! no longer drives the saga (it died, or was fenced out, before it answered) is taken
//! again by the new owner: a cancel is carried out again (a cancel already applied
//! leaves the saga as it is); an answer to a person's question is refused instead, since
//! the saga may already have moved on from that question.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sagaplane_storage::postgres::{Cached, Listener, Migration, Postgres, failed};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use crate::error::{Error, Result};
use crate::saga::{Decider, Resolution};
use crate::sync;

/// The notification channel of forwarded requests and their answers, in `public`.
const CHANNEL: &str = "sagaplane_saga_requests";

/// How long an answered request is kept before it is deleted.
const ANSWERED_KEPT_MS: i64 = 10 * 60 * 1000;

const MIGRATIONS: &[Migration] = &[Migration {
    what: "requests for sagas driven by another replica",
    sql: "CREATE TABLE IF NOT EXISTS saga_requests (
              id          BIGSERIAL PRIMARY KEY,
              task_id     TEXT NOT NULL,
              context_id  TEXT NOT NULL,
              at_ms       BIGINT NOT NULL,
              body        TEXT NOT NULL,
              taken_by    TEXT,
              answer      TEXT,
              answered_ms BIGINT
          );
          CREATE INDEX IF NOT EXISTS saga_requests_open ON saga_requests (id)
              WHERE answer IS NULL;
          CREATE INDEX IF NOT EXISTS saga_requests_answered ON saga_requests (answered_ms)
              WHERE answer IS NOT NULL;",
}];

/// What another replica asks of a saga's driver.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Request {
    /// A2A CancelTask.
    Cancel,
    /// A person's answer, already checked against the task where it was received, and
    /// the message it came in (recorded on the task by the owner, the task's one writer).
    Resolve {
        resolution: Resolution,
        decider: Decider,
        message: Box<agent_host::sdk::Message>,
    },
}

/// An A2A error as it travels back to the replica that forwarded the request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Refusal {
    pub code: i32,
    pub message: String,
}

/// What the driver's replica answered: done, or refused as the owner would refuse it.
pub type Answer = std::result::Result<(), Refusal>;

/// A request taken by this replica, to carry out.
#[derive(Debug, Clone, PartialEq)]
pub struct Taken {
    pub id: i64,
    pub task_id: String,
    pub context_id: String,
    pub request: Request,
    /// Another replica had taken it before and never answered.
    pub taken_before: bool,
}

/// An open request: its id and the task it is for.
pub type Open = (i64, String);

/// This replica's end of the forwarded requests.
pub struct Forwarding {
    db: Postgres,
    channel: String,
    /// This replica, as `taken_by` names it.
    me: String,
    /// Who waits for the answer to each request this replica sent.
    waiting: Mutex<HashMap<i64, oneshot::Sender<()>>>,
    /// Requests announced by the others, until the executor takes the receiver.
    incoming: Mutex<Option<mpsc::UnboundedReceiver<Open>>>,
    _listening: JoinSet<()>,
}

impl std::fmt::Debug for Forwarding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forwarding")
            .field("me", &self.me)
            .finish_non_exhaustive()
    }
}

/// A notification: `r <id> <task id>` for a request, `a <id>` for its answer.
fn announced(payload: &str) -> Option<(bool, i64, Option<&str>)> {
    let mut words = payload.splitn(3, ' ');
    let kind = words.next()?;
    let id = words.next()?.parse().ok()?;
    match kind {
        "r" => Some((true, id, Some(words.next()?))),
        "a" => Some((false, id, None)),
        _ => None,
    }
}

impl Forwarding {
    /// This replica's end on `db`, listening already when it returns.
    pub async fn start(db: &Postgres) -> Result<Arc<Self>> {
        db.migrate("saga-requests", MIGRATIONS).await?;
        let channel = db.channel(CHANNEL).await?;
        let listener = db.listen(channel.clone(), "requests for sagas").await?;
        let (announce, incoming) = mpsc::unbounded_channel();
        let forwarding = Arc::new_cyclic(|me: &std::sync::Weak<Self>| {
            let mut tasks = JoinSet::new();
            tasks.spawn(dispatch(listener, me.clone(), announce));
            Self {
                db: db.clone(),
                channel,
                me: uuid::Uuid::new_v4().to_string(),
                waiting: Mutex::default(),
                incoming: Mutex::new(Some(incoming)),
                _listening: tasks,
            }
        });
        Ok(forwarding)
    }

    /// The requests the others announce, `(id, task id)`: given once.
    pub fn incoming(&self) -> Option<mpsc::UnboundedReceiver<Open>> {
        sync::lock(&self.incoming).take()
    }

    /// Leaves `request` for the saga of task `task_id`, announced; its id. A wait for its
    /// answer (`answered`) begins now, so that an answer given at once is not missed.
    pub async fn send(
        &self,
        task_id: &str,
        context_id: &str,
        request: &Request,
    ) -> Result<(i64, oneshot::Receiver<()>)> {
        let body = serde_json::to_string(request)
            .map_err(|e| Error::Refused(format!("cannot encode a forwarded request: {e}")))?;
        let mut conn = self.db.connection().await?;
        let tx = conn
            .transaction()
            .await
            .map_err(|e| failed("cannot forward a request", &e))?;
        let now_ms = chrono::Utc::now().timestamp_millis();
        let id: i64 = tx
            .row(
                "INSERT INTO saga_requests (task_id, context_id, at_ms, body)
                 VALUES ($1, $2, $3, $4) RETURNING id",
                &[&task_id, &context_id, &now_ms, &body],
            )
            .await
            .map_err(|e| failed("cannot forward a request", &e))?
            .get(0);
        let (told, answered) = oneshot::channel();
        sync::lock(&self.waiting).insert(id, told);
        let sent = async {
            tx.run(
                "SELECT pg_notify($1, $2)",
                &[&self.channel, &format!("r {id} {task_id}")],
            )
            .await?;
            tx.commit().await
        };
        if let Err(e) = sent.await {
            sync::lock(&self.waiting).remove(&id);
            return Err(failed("cannot forward a request", &e).into());
        }
        Ok((id, answered))
    }

    /// The answer to request `id`, if it was given; `None` otherwise.
    pub async fn answer_of(&self, id: i64) -> Result<Option<Answer>> {
        let row = self
            .db
            .connection()
            .await?
            .row_opt(
                "SELECT answer FROM saga_requests WHERE id = $1 AND answer IS NOT NULL",
                &[&id],
            )
            .await
            .map_err(|e| failed("cannot read a forwarded request's answer", &e))?;
        let Some(row) = row else {
            return Ok(None);
        };
        let text: String = row.get(0);
        let answer = serde_json::from_str(&text).unwrap_or_else(|_| {
            Err(Refusal {
                code: agent_host::sdk::error_code::INTERNAL_ERROR,
                message: "the replica driving the saga answered something unreadable".into(),
            })
        });
        Ok(Some(answer))
    }

    /// Whether request `id` was taken by a replica (and not given back).
    pub async fn is_taken(&self, id: i64) -> Result<bool> {
        let row = self
            .db
            .connection()
            .await?
            .row_opt(
                "SELECT 1 FROM saga_requests WHERE id = $1 AND taken_by IS NOT NULL",
                &[&id],
            )
            .await
            .map_err(|e| failed("cannot read a forwarded request", &e))?;
        Ok(row.is_some())
    }

    /// Withdraws request `id` if nobody took it: whether it was withdrawn (nobody will
    /// carry it out).
    pub async fn withdraw(&self, id: i64) -> Result<bool> {
        sync::lock(&self.waiting).remove(&id);
        let deleted = self
            .db
            .connection()
            .await?
            .run(
                "DELETE FROM saga_requests WHERE id = $1 AND taken_by IS NULL",
                &[&id],
            )
            .await
            .map_err(|e| failed("cannot withdraw a forwarded request", &e))?;
        Ok(deleted == 1)
    }

    /// Stops waiting for the answer to `id` here (it came, or the caller went away).
    pub fn forget(&self, id: i64) {
        sync::lock(&self.waiting).remove(&id);
    }

    /// The requests not answered and not taken by this replica, oldest first (at most
    /// `at_most`); the answered ones older than `ANSWERED_KEPT_MS` are deleted.
    pub async fn open(&self, at_most: i64) -> Result<Vec<Open>> {
        let conn = self.db.control_connection().await?;
        let now_ms = chrono::Utc::now().timestamp_millis();
        conn.run(
            "DELETE FROM saga_requests WHERE answer IS NOT NULL AND answered_ms < $1",
            &[&(now_ms - ANSWERED_KEPT_MS)],
        )
        .await
        .map_err(|e| failed("cannot delete answered requests", &e))?;
        let rows = conn
            .rows(
                "SELECT id, task_id FROM saga_requests
                 WHERE answer IS NULL AND taken_by IS DISTINCT FROM $1
                 ORDER BY id LIMIT $2",
                &[&self.me, &at_most],
            )
            .await
            .map_err(|e| failed("cannot read the open requests", &e))?;
        Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
    }

    /// Takes request `id` for this replica, unless it is answered or taken here already.
    pub async fn take(&self, id: i64) -> Result<Option<Taken>> {
        let row = self
            .db
            .connection()
            .await?
            .row_opt(
                "UPDATE saga_requests r SET taken_by = $2
                 FROM (SELECT id, taken_by FROM saga_requests WHERE id = $1 FOR UPDATE) before
                 WHERE r.id = before.id AND r.answer IS NULL
                   AND r.taken_by IS DISTINCT FROM $2
                 RETURNING r.task_id, r.context_id, r.body, before.taken_by IS NOT NULL",
                &[&id, &self.me],
            )
            .await
            .map_err(|e| failed("cannot take a forwarded request", &e))?;
        let Some(row) = row else {
            return Ok(None);
        };
        let body: String = row.get(2);
        let request = serde_json::from_str(&body)
            .map_err(|e| Error::Refused(format!("forwarded request {id} cannot be read: {e}")))?;
        Ok(Some(Taken {
            id,
            task_id: row.get(0),
            context_id: row.get(1),
            request,
            taken_before: row.get(3),
        }))
    }

    /// Gives request `id` back, for the replica that drives its saga now.
    pub async fn give_back(&self, id: i64) -> Result<()> {
        self.db
            .connection()
            .await?
            .run(
                "UPDATE saga_requests SET taken_by = NULL WHERE id = $1 AND taken_by = $2",
                &[&id, &self.me],
            )
            .await
            .map_err(|e| failed("cannot give a forwarded request back", &e))?;
        Ok(())
    }

    /// Writes the answer to request `id` and announces it.
    pub async fn answer(&self, id: i64, answer: &Answer) -> Result<()> {
        let text = serde_json::to_string(answer)
            .map_err(|e| Error::Refused(format!("cannot encode an answer: {e}")))?;
        let mut conn = self.db.connection().await?;
        let failing = |e: sagaplane_storage::postgres::DriverError| {
            Error::from(failed("cannot answer a forwarded request", &e))
        };
        let tx = conn.transaction().await.map_err(failing)?;
        let now_ms = chrono::Utc::now().timestamp_millis();
        tx.run(
            "UPDATE saga_requests SET answer = $2, answered_ms = $3 WHERE id = $1",
            &[&id, &text, &now_ms],
        )
        .await
        .map_err(failing)?;
        tx.run(
            "SELECT pg_notify($1, $2)",
            &[&self.channel, &format!("a {id}")],
        )
        .await
        .map_err(failing)?;
        tx.commit().await.map_err(failing)
    }
}

/// Hands each announced request to the executor and wakes whoever waits for each answer.
async fn dispatch(
    mut listener: Listener,
    forwarding: std::sync::Weak<Forwarding>,
    announce: mpsc::UnboundedSender<Open>,
) {
    while let Some(payload) = listener.payloads.recv().await {
        let Some((is_request, id, task)) = announced(&payload) else {
            tracing::warn!(
                bytes = payload.len(),
                "a notification on the requests channel that is not one; ignored"
            );
            continue;
        };
        if is_request {
            let _ = announce.send((id, task.unwrap_or_default().to_owned()));
            continue;
        }
        let Some(forwarding) = forwarding.upgrade() else {
            return;
        };
        if let Some(told) = sync::lock(&forwarding.waiting).remove(&id) {
            let _ = told.send(());
        }
    }
}

/// How long a forwarding replica waits for an answer before it looks again at where
/// the saga is (the answer's notification may have been lost, or the saga ended).
pub const LOOK_AGAIN_AFTER: Duration = Duration::from_secs(2);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notifications_are_read_back_and_anything_else_is_refused() {
        assert_eq!(announced("r 12 task-1"), Some((true, 12, Some("task-1"))));
        assert_eq!(announced("a 7"), Some((false, 7, None)));
        for bad in ["", "r", "r x t", "a", "x 1", "r 1"] {
            assert_eq!(announced(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_request_and_an_answer_survive_their_encoding() {
        let request = Request::Resolve {
            resolution: Resolution::ResolvedManually,
            decider: Decider {
                by: "approver".into(),
                approval: None,
                withdrawal: None,
                message_id: None,
            },
            message: Box::new(agent_host::agent_message("resolved", None)),
        };
        let text = serde_json::to_string(&request).unwrap();
        assert_eq!(serde_json::from_str::<Request>(&text).unwrap(), request);
        let refused: Answer = Err(Refusal {
            code: -32002,
            message: "not cancelable".into(),
        });
        let text = serde_json::to_string(&refused).unwrap();
        assert_eq!(serde_json::from_str::<Answer>(&text).unwrap(), refused);
    }
}
