//! Task events across processes, through PostgreSQL's LISTEN/NOTIFY: a subscriber on one
//! replica follows a task that another writes.
//!
//! Each process fans its own writes out to its own subscribers at once (an
//! `InProcessFeed`). A task's events go to the other processes only while a subscriber
//! there follows it: the subscriber's process announces a follow (`Wire::Follow`), every
//! process notes it, and the one writing the task acknowledges it (`Wire::Ack`) and from
//! then on sends that task's events, in write order, on one connection as notifications
//! on `CHANNEL` (one per schema: `Postgres::channel`). The follower reads the task once
//! acknowledged (or after `FOLLOW_WAIT`, when no process writes it now): what was
//! written before the writer heard of it is in that read, what comes after arrives as
//! events. A task nobody follows elsewhere costs no notification. A follow lasts until
//! the task ends.
//!
//! Every process listens on another connection (`Postgres::listen`) and fans out the
//! others' notifications the same way. PostgreSQL delivers one session's notifications
//! in the order it sent them, so a subscriber sees a task's events in the order they
//! were written. A write whose events do not fit a notification (`NOTIFY_LIMIT`) is kept
//! in a table for a few minutes and announced by its row's id: the listening side reads
//! exactly those events, not the task as it stands by then.
//!
//! A notification sent while the database is away is lost; a subscriber then sees the
//! next one. The listener reconnects by itself.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use crate::error::{Error, Result};
use crate::sdk::{StreamResponse, Task};
use crate::tasks::{InProcessFeed, Seq, Subscription, TaskFeed, Watch};
use sagaplane_storage::postgres::{Cached, Listener, Migration, Postgres, chain};

/// The notification channel of task events, in the `public` schema; the stores of
/// another schema of the same database (notifications are database-wide) use theirs
/// (`Postgres::channel`).
pub const CHANNEL: &str = "sagaplane_task_events";

/// The largest payload sent whole (PostgreSQL refuses one of 8,000 bytes or more).
const NOTIFY_LIMIT: usize = 7_900;

/// How long a write's events too large for a notification are kept for the listeners.
const KEPT_FOR_MS: i64 = 5 * 60 * 1000;

/// How long a follow waits for the task's writer to acknowledge it. Only a task that no
/// process works on now (its writer died, and no other has taken it over yet) waits this
/// long, or one whose writer reads its notifications later than this: the bound on how
/// late it may hear a follow without a subscriber missing events.
const FOLLOW_WAIT: Duration = Duration::from_secs(2);

/// The feed's table: the events too large for a notification.
const MIGRATIONS: &[Migration] = &[
    Migration {
        what: "task events too large for a notification",
        sql: "CREATE TABLE IF NOT EXISTS task_notices (
              id      BIGSERIAL PRIMARY KEY,
              at_ms   BIGINT NOT NULL,
              payload TEXT NOT NULL
          );
          CREATE INDEX IF NOT EXISTS task_notices_by_time ON task_notices (at_ms);",
    },
    Migration {
        what: "kept task events compressed with lz4",
        sql: sagaplane_storage::where_lz4!(
            "ALTER TABLE task_notices ALTER COLUMN payload SET COMPRESSION lz4;"
        ),
    },
];

/// One write's events as they travel between processes.
#[derive(Debug, Serialize, Deserialize)]
struct Notice {
    /// The process that wrote the task (which has fanned the events out already).
    origin: String,
    task_id: String,
    events: Vec<StreamResponse>,
    /// The write's sequence in the agent's record of the task (`tasks::Seq`), which the
    /// streams here compare. Absent from what an earlier binary sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    seq: Option<Seq>,
    /// The task as the write ended it, when it did (sent by earlier binaries; `ends`
    /// now, and the listening side reads the ended task, which no longer changes).
    ended: Option<Task>,
    /// Whether the write ended the task.
    #[serde(default)]
    ends: bool,
}

/// What a notification carries: a notice, where one too large for it is kept, a follow,
/// or a writer's acknowledgement of one.
#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
enum Wire {
    Whole(Box<Notice>),
    Kept {
        origin: String,
        kept: i64,
        /// Absent from what an earlier binary sent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        task_id: Option<String>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        ends: bool,
    },
    /// A subscriber in `origin` follows the task `follow`.
    Follow {
        origin: String,
        follow: String,
        /// Which follow of `origin` the writer acknowledges.
        nonce: u64,
        /// Whether it reads every event (else only the end, or an interruption).
        every: bool,
    },
    /// `origin` writes the task of `to`'s follow `ack`, and now announces it there.
    Ack {
        origin: String,
        ack: u64,
        to: String,
    },
}

/// Who sent a notification and which task it is about, read without building the events:
/// every replica receives every other's notifications, and most are about tasks nobody
/// follows there.
#[derive(Deserialize)]
struct Head {
    origin: String,
    task_id: Option<String>,
    #[serde(default)]
    ends: bool,
}

/// The feed of a process among several on one database.
pub struct PostgresFeed {
    local: Arc<InProcessFeed>,
    interest: Arc<Interest>,
    /// The sender and the listener; they end when the feed is dropped.
    _tasks: JoinSet<()>,
}

impl std::fmt::Debug for PostgresFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresFeed")
            .field("origin", &self.interest.origin)
            .finish_non_exhaustive()
    }
}

/// Which tasks are followed across processes, and this process's part in it.
struct Interest {
    origin: String,
    /// Each notification's task id and payload, in the order they are to be sent.
    outbox: mpsc::UnboundedSender<(String, String)>,
    /// Tasks a subscriber in another process follows, and what the most demanding of
    /// them reads. Noted by every process (whichever writes the task next announces it);
    /// forgotten when the task ends.
    followed: Mutex<HashMap<String, Watch>>,
    /// Tasks worked on, written or announced here since this process started, and not
    /// ended: the follows this process acknowledges.
    writing: Mutex<HashSet<String>>,
    /// This process's follows waiting for the writer's acknowledgement.
    unacknowledged: Mutex<HashMap<u64, oneshot::Sender<()>>>,
    next_follow: AtomicU64,
}

impl Interest {
    fn send(&self, task_id: &str, wire: &Wire) {
        let payload = serde_json::to_string(wire).unwrap_or_default();
        // The sender is gone only when the feed is: nobody is left to tell.
        let _ = self.outbox.send((task_id.to_owned(), payload));
    }

    fn followed(&self, task_id: &str) -> Option<Watch> {
        self.followed.lock().ok()?.get(task_id).copied()
    }

    fn writes(&self, task_id: &str) -> bool {
        self.writing
            .lock()
            .is_ok_and(|writing| writing.contains(task_id))
    }

    /// This process writes `task_id` (until it ends).
    fn note_writing(&self, task_id: &str) {
        if !self.writes(task_id)
            && let Ok(mut writing) = self.writing.lock()
        {
            writing.insert(task_id.to_owned());
        }
    }

    /// A subscriber in `origin` follows `task_id`: noted, and acknowledged when this
    /// process writes the task.
    fn follow_from(&self, origin: String, task_id: String, nonce: u64, every: bool) {
        let watch = if every { Watch::Everything } else { Watch::End };
        if let Ok(mut followed) = self.followed.lock() {
            let noted = followed.entry(task_id.clone()).or_insert(watch);
            if watch == Watch::Everything {
                *noted = Watch::Everything;
            }
        }
        if self.writes(&task_id) {
            let ack = Wire::Ack {
                origin: self.origin.clone(),
                ack: nonce,
                to: origin,
            };
            self.send(&task_id, &ack);
        }
    }

    /// The task ended: nobody follows it any more. Returns whether somebody did.
    fn ended(&self, task_id: &str) -> bool {
        if let Ok(mut writing) = self.writing.lock() {
            writing.remove(task_id);
        }
        self.followed
            .lock()
            .is_ok_and(|mut followed| followed.remove(task_id).is_some())
    }
}

impl PostgresFeed {
    /// A feed on `db`, listening already when it returns (so that a write announced by
    /// another process after that reaches this one).
    pub async fn start(db: &Postgres) -> Result<Self> {
        db.migrate("task-feed", MIGRATIONS).await?;
        let channel: Arc<str> = db.channel(CHANNEL).await?.into();
        let listener = db.listen(channel.to_string(), "task events").await?;
        let local = Arc::new(InProcessFeed::new());
        let origin = uuid::Uuid::new_v4().to_string();
        let (outbox, queued) = mpsc::unbounded_channel();
        let interest = Arc::new(Interest {
            origin: origin.clone(),
            outbox,
            followed: Mutex::default(),
            writing: Mutex::default(),
            unacknowledged: Mutex::default(),
            next_follow: AtomicU64::new(0),
        });
        let mut tasks = JoinSet::new();
        tasks.spawn(send(db.clone(), channel, origin, queued));
        tasks.spawn(relay_all(
            listener,
            db.clone(),
            interest.clone(),
            local.clone(),
        ));
        Ok(Self {
            local,
            interest,
            _tasks: tasks,
        })
    }
}

impl TaskFeed for PostgresFeed {
    fn subscribe(&self, task_id: &str, watch: Watch) -> Result<Subscription> {
        self.local.subscribe(task_id, watch)
    }

    fn writes(&self, task_id: &str) {
        self.interest.note_writing(task_id);
    }

    fn no_longer_writes(&self, task_id: &str) {
        if let Ok(mut writing) = self.interest.writing.lock() {
            writing.remove(task_id);
        }
    }

    /// Subscribers here, or a follow from another process. Asked by the writer: the
    /// task is noted as written here, for the follows to come.
    fn watched(&self, task_id: &str) -> Option<Watch> {
        self.interest.note_writing(task_id);
        match (self.local.watched(task_id), self.interest.followed(task_id)) {
            (Some(Watch::Everything), _) | (_, Some(Watch::Everything)) => Some(Watch::Everything),
            (here, there) => here.or(there),
        }
    }

    /// Announces the follow to every process, and waits (`FOLLOW_WAIT` at most) for the
    /// one writing the task to acknowledge it. A task written here is announced here
    /// already: no wait; the others note the follow all the same, should another process
    /// take the task over.
    fn follow(&self, task_id: &str, watch: Watch) -> BoxFuture<'static, bool> {
        let nonce = self.interest.next_follow.fetch_add(1, Ordering::Relaxed);
        let follow = Wire::Follow {
            origin: self.interest.origin.clone(),
            follow: task_id.to_owned(),
            nonce,
            every: watch == Watch::Everything,
        };
        if self.interest.writes(task_id) {
            self.interest.send(task_id, &follow);
            return std::future::ready(false).boxed();
        }
        let (acknowledged, heard) = oneshot::channel();
        if let Ok(mut waiting) = self.interest.unacknowledged.lock() {
            waiting.insert(nonce, acknowledged);
        }
        self.interest.send(task_id, &follow);
        let interest = self.interest.clone();
        async move {
            if tokio::time::timeout(FOLLOW_WAIT, heard).await.is_err() {
                tracing::debug!(
                    nonce,
                    "no process acknowledged a follow: none writes the task now"
                );
            }
            if let Ok(mut waiting) = interest.unacknowledged.lock() {
                waiting.remove(&nonce);
            }
            true
        }
        .boxed()
    }

    /// Sent to the processes that follow the task, without the task as it was created
    /// or ended: a task is followed elsewhere only once it exists (a subscription there
    /// reads it first), and an ended task no longer changes, so the other side reads it
    /// when someone there waits for it. What travels is then mostly a status, within a
    /// notification.
    fn publish(
        &self,
        task_id: &str,
        events: Vec<StreamResponse>,
        seq: Option<Seq>,
        ended: Option<Task>,
    ) {
        let ends = ended.is_some();
        let followed = if ends {
            self.interest.ended(task_id)
        } else {
            self.interest.note_writing(task_id);
            self.interest.followed(task_id).is_some()
        };
        if !followed {
            self.local.publish(task_id, events, seq, ended);
            return;
        }
        let remote: Vec<StreamResponse> = events
            .iter()
            .filter(|event| !matches!(event, StreamResponse::Task(_)))
            .cloned()
            .collect();
        self.local.publish(task_id, events, seq, ended);
        if remote.is_empty() && !ends {
            return;
        }
        let notice = Notice {
            origin: self.interest.origin.clone(),
            task_id: task_id.to_owned(),
            events: remote,
            seq,
            ended: None,
            ends,
        };
        self.interest.send(task_id, &Wire::Whole(Box::new(notice)));
    }
}

/// At most this many notices share a transaction.
const NOTICE_BATCH: usize = 128;

/// Every notice of a batch, in one statement: `unnest` gives the payloads in their order,
/// and each is sent as its row is read.
const NOTIFY_ALL: &str = "SELECT pg_notify($1, payload) FROM unnest($2::TEXT[]) AS payload";

/// Sends the queued notices, in order: all that queued while the last were sent go in
/// one transaction (one commit) and one statement.
/// PostgreSQL delivers a transaction's notifications at its commit, in the order they
/// were made.
async fn send(
    db: Postgres,
    channel: Arc<str>,
    origin: String,
    mut queued: mpsc::UnboundedReceiver<(String, String)>,
) {
    while let Some(first) = queued.recv().await {
        let mut batch = vec![first];
        while batch.len() < NOTICE_BATCH {
            match queued.try_recv() {
                Ok(payload) => batch.push(payload),
                Err(_) => break,
            }
        }
        if let Err(e) = send_batch(&db, &channel, &origin, batch).await {
            tracing::warn!(error = %e, "task events could not be sent to the other replicas");
        }
    }
}

async fn send_batch(
    db: &Postgres,
    channel: &str,
    origin: &str,
    batch: Vec<(String, String)>,
) -> Result<()> {
    let mut conn = db.connection().await?;
    let failed = |e: sagaplane_storage::postgres::DriverError| Error::store(chain(&e));
    // Each fits a notification (the usual case): one statement is the transaction.
    if batch
        .iter()
        .all(|(_, payload)| payload.len() <= NOTIFY_LIMIT)
    {
        let payloads: Vec<String> = batch.into_iter().map(|(_, payload)| payload).collect();
        conn.run(NOTIFY_ALL, &[&channel, &payloads])
            .await
            .map_err(failed)?;
        return Ok(());
    }
    let tx = conn.transaction().await.map_err(failed)?;
    let mut payloads = Vec::with_capacity(batch.len());
    let mut swept = false;
    for (task_id, payload) in batch {
        if payload.len() <= NOTIFY_LIMIT {
            payloads.push(payload);
            continue;
        }
        let now_ms = chrono::Utc::now().timestamp_millis();
        if !swept {
            tx.run(
                "DELETE FROM task_notices WHERE at_ms < $1",
                &[&(now_ms - KEPT_FOR_MS)],
            )
            .await
            .map_err(failed)?;
            swept = true;
        }
        let kept: i64 = tx
            .row(
                "INSERT INTO task_notices (at_ms, payload) VALUES ($1, $2) RETURNING id",
                &[&now_ms, &payload],
            )
            .await
            .map_err(failed)?
            .get(0);
        let ends = serde_json::from_str::<Head>(&payload).is_ok_and(|head| head.ends);
        let wire = Wire::Kept {
            origin: origin.to_owned(),
            kept,
            task_id: Some(task_id),
            ends,
        };
        payloads.push(serde_json::to_string(&wire).unwrap_or_default());
    }
    tx.run(NOTIFY_ALL, &[&channel, &payloads])
        .await
        .map_err(failed)?;
    tx.commit().await.map_err(failed)
}

/// Fans out every notice from the other processes, and takes their follows and
/// acknowledgements, for as long as `listener` listens (it is owned here whole: dropping
/// it stops the listening).
async fn relay_all(
    mut listener: Listener,
    db: Postgres,
    interest: Arc<Interest>,
    local: Arc<InProcessFeed>,
) {
    while let Some(payload) = listener.payloads.recv().await {
        relay(&db, &payload, &interest, &local).await;
    }
}

/// Takes one notification from another process. A notice of this process, or about a
/// task nobody here follows, is left unread: a subscriber that comes after it reads the
/// task from the store, where the write it announces already is.
async fn relay(db: &Postgres, payload: &str, interest: &Interest, local: &InProcessFeed) {
    let origin = interest.origin.as_str();
    if let Ok(head) = serde_json::from_str::<Head>(payload) {
        if head.origin == origin {
            return;
        }
        if let Some(task_id) = head.task_id {
            if head.ends {
                interest.ended(&task_id);
            }
            if local.watched(&task_id).is_none() {
                return;
            }
        }
    }
    let notice = match serde_json::from_str::<Wire>(payload) {
        Ok(Wire::Whole(notice)) => *notice,
        Ok(Wire::Kept { origin: from, .. }) if from == origin => return,
        Ok(Wire::Kept { kept, .. }) => match read_kept(db, kept).await {
            Ok(Some(notice)) => notice,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read task events another replica kept");
                return;
            }
        },
        Ok(Wire::Follow {
            origin: from,
            follow,
            nonce,
            every,
        }) => {
            interest.follow_from(from, follow, nonce, every);
            return;
        }
        Ok(Wire::Ack { ack, to, .. }) => {
            if to == origin
                && let Some(waiting) = interest
                    .unacknowledged
                    .lock()
                    .ok()
                    .and_then(|mut waiting| waiting.remove(&ack))
            {
                let _ = waiting.send(());
            }
            return;
        }
        Err(_) => {
            tracing::warn!(
                bytes = payload.len(),
                "a task-event notification that is not one; ignored"
            );
            return;
        }
    };
    if notice.origin == origin {
        return;
    }
    let ended = match notice.ended {
        Some(task) => Some(task),
        None if notice.ends => match super::tasks::read_task(db, &notice.task_id).await {
            Ok(task) => task,
            Err(e) => {
                // The end is still told; a waiter then reads the task itself.
                tracing::warn!(error = %e, "cannot read a task another replica ended");
                None
            }
        },
        None => None,
    };
    local.publish(&notice.task_id, notice.events, notice.seq, ended);
}

/// The notice kept under `id`, if it is still kept.
async fn read_kept(db: &Postgres, id: i64) -> Result<Option<Notice>> {
    let conn = db.connection().await?;
    let row = conn
        .row_opt("SELECT payload FROM task_notices WHERE id = $1", &[&id])
        .await
        .map_err(|e| Error::store(chain(&e)))?;
    let Some(row) = row else {
        return Ok(None);
    };
    match serde_json::from_str::<Wire>(row.get(0)) {
        Ok(Wire::Whole(notice)) => Ok(Some(*notice)),
        _ => Err(Error::store(format!(
            "kept task events {id} cannot be read"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sdk::TaskState;
    use crate::store::TaskStore;
    use crate::store::postgres::PostgresTaskStore;
    use crate::tasks::TaskManager;
    use sagaplane_storage::postgres::testing;

    /// A process's task manager on `url`: its own pool, store handle and feed.
    async fn replica(url: &str) -> Arc<TaskManager> {
        let db = Postgres::connect(url, 4).unwrap();
        let store: Arc<dyn TaskStore> = Arc::new(PostgresTaskStore::on(&db).await.unwrap());
        let feed = PostgresFeed::start(&db).await.unwrap();
        TaskManager::with_feed(store, Arc::new(feed))
    }

    /// On a scratch database of its own (`None` without a test server): a task created
    /// by one process, and another process on the same database.
    async fn written_and_watched(
        test: &str,
        task_id: &str,
    ) -> Option<(crate::tasks::TaskHandle, Arc<TaskManager>)> {
        let url = testing::scratch_database(test).await?;
        let writer = replica(&url).await;
        let follower = replica(&url).await;
        let task = crate::store::conformance::task(task_id, "c", TaskState::Submitted, 0);
        Some((writer.create(task).await.unwrap(), follower))
    }

    fn state_of(event: &StreamResponse) -> TaskState {
        match event {
            StreamResponse::Task(task) => task.status.state.clone(),
            StreamResponse::StatusUpdate(update) => update.status.state.clone(),
            other => panic!("not a status: {other:?}"),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_subscriber_on_one_process_sees_every_status_another_writes_in_order() {
        const TEST: &str = "a_subscriber_on_one_process_sees_every_status_another_writes_in_order";
        let Some((handle, follower)) = written_and_watched(TEST, "t1").await else {
            return;
        };
        // Followed elsewhere once it exists, as a subscription there reads it first.
        let mut events = follower.subscribe("t1").unwrap();
        assert!(follower.follow_writer("t1", Watch::Everything).await);
        // Writes an agent keeps a record of carry their sequence in it across processes.
        let working = |message| vec![(TaskState::Working, message)];
        handle
            .change_with_statuses(|_| Ok(None), working(None), 0, Some(1))
            .await
            .unwrap();
        // Too large for a notification: kept in the table, announced by its id.
        let large = crate::agent::agent_message("x".repeat(20_000), None);
        handle
            .change_with_statuses(|_| Ok(None), working(Some(large)), 0, Some(2))
            .await
            .unwrap();
        handle.set_status(TaskState::Completed, None).await.unwrap();

        let mut seen = Vec::new();
        let mut texts = Vec::new();
        let mut seqs = Vec::new();
        while seen.last() != Some(&TaskState::Completed) {
            let announced = events.recv().await.unwrap();
            let event = &announced.event;
            if let StreamResponse::StatusUpdate(update) = event {
                texts.push(update.status.message.is_some());
            }
            seen.push(state_of(event));
            seqs.push(announced.seq);
        }
        assert_eq!(
            seen,
            [TaskState::Working, TaskState::Working, TaskState::Completed]
        );
        assert_eq!(texts, [false, true, false], "the large status came whole");
        assert_eq!(
            seqs,
            [Some(1), Some(2), None],
            "each write's sequence came with it"
        );
        let ended = events.ended();
        assert_eq!(
            ended.get().map(|task| task.status.state.clone()),
            Some(TaskState::Completed)
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_task_nobody_follows_elsewhere_is_not_sent_there() {
        const TEST: &str = "a_task_nobody_follows_elsewhere_is_not_sent_there";
        let Some((handle, follower)) = written_and_watched(TEST, "t2").await else {
            return;
        };
        // Subscribed there, but not followed: the writer does not send this status.
        let mut events = follower.subscribe("t2").unwrap();
        handle.set_status(TaskState::Working, None).await.unwrap();
        // Followed from now on: the writer acknowledges, then sends what comes next.
        assert!(follower.follow_writer("t2", Watch::Everything).await);
        handle.set_status(TaskState::Completed, None).await.unwrap();
        let first = events.recv().await.unwrap().event;
        assert_eq!(
            state_of(&first),
            TaskState::Completed,
            "the status written before the follow was not sent: {first:?}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_follow_nobody_acknowledges_reaches_whichever_process_writes_the_task_next() {
        const TEST: &str =
            "a_follow_nobody_acknowledges_reaches_whichever_process_writes_the_task_next";
        let Some(url) = testing::scratch_database(TEST).await else {
            return;
        };
        let first = replica(&url).await;
        let follower = replica(&url).await;
        let successor = replica(&url).await;
        let task = crate::store::conformance::task("t3", "c3", TaskState::Working, 0);
        first.create(task).await.unwrap().left_to_another();
        // Nobody works on the task now: no acknowledgement; the follow still returns.
        let mut events = follower.subscribe("t3").unwrap();
        assert!(follower.follow_writer("t3", Watch::Everything).await);
        // The process that takes the task up next noted the follow meanwhile.
        let taken_up = successor.handle("t3", "c3");
        taken_up.work_here();
        taken_up
            .set_status(TaskState::Completed, None)
            .await
            .unwrap();
        let event = tokio::time::timeout(std::time::Duration::from_secs(30), events.recv())
            .await
            .expect("the process that took the task up sends its events here")
            .unwrap()
            .event;
        assert_eq!(state_of(&event), TaskState::Completed, "{event:?}");
    }
}
