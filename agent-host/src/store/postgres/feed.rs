//! Task events across processes, through PostgreSQL's LISTEN/NOTIFY: a subscriber on one
//! replica follows a task that another writes.
//!
//! Each process fans its own writes out to its own subscribers at once (an
//! `InProcessFeed`), and sends them, in write order, on one connection as notifications
//! on `CHANNEL`; it listens on another connection, and fans out the others' notifications
//! the same way. PostgreSQL delivers one session's notifications in the order it sent
//! them, so a subscriber sees a task's events in the order they were written. A write
//! whose events do not fit a notification (`NOTIFY_LIMIT`) is announced by task id
//! alone: the listening side reads the task from the store and announces its status.
//!
//! A notification sent while the database is away is lost; a subscriber then sees the
//! next one. The listener reconnects by itself.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use super::{Cached, Postgres, chain};
use crate::error::{Error, Result};
use crate::sdk::{StreamResponse, Task, TaskStatusUpdateEvent};
use crate::store::TaskStore;
use crate::tasks::{InProcessFeed, Subscription, TaskFeed, Watch};

/// The notification channel of task events.
pub const CHANNEL: &str = "sagaplane_task_events";

/// The largest payload sent whole (PostgreSQL refuses one of 8,000 bytes or more).
const NOTIFY_LIMIT: usize = 7_900;

/// How long the listener waits before connecting again after losing its connection.
const RECONNECT_AFTER: Duration = Duration::from_millis(500);

/// One write's events as they travel between processes.
#[derive(Debug, Serialize, Deserialize)]
struct Notice {
    /// The process that wrote the task (which has fanned the events out already).
    origin: String,
    task_id: String,
    /// The events, or `None` when they did not fit: read the task from the store.
    events: Option<Vec<StreamResponse>>,
    /// The task as the write ended it, when it did (with `events`).
    ended: Option<Task>,
    /// Whether the write ended the task (also when the events did not fit).
    last: bool,
}

/// The feed of a process among several on one database.
pub struct PostgresFeed {
    local: Arc<InProcessFeed>,
    origin: String,
    outbox: mpsc::UnboundedSender<String>,
    /// The sender and the listener; they end when the feed is dropped.
    _tasks: JoinSet<()>,
}

impl std::fmt::Debug for PostgresFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresFeed")
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

impl PostgresFeed {
    /// A feed on `db`, listening already when it returns (so that a write announced by
    /// another process after that reaches this one); `store` is where a task whose
    /// events did not fit a notification is read.
    pub async fn start(db: &Postgres, store: Arc<dyn TaskStore>) -> Result<Self> {
        let local = Arc::new(InProcessFeed::new());
        let origin = uuid::Uuid::new_v4().to_string();
        let (outbox, queued) = mpsc::unbounded_channel();
        let mut tasks = JoinSet::new();
        tasks.spawn(send(db.clone(), queued));
        let (listening, listens) = oneshot::channel();
        tasks.spawn(listen(
            db.clone(),
            origin.clone(),
            local.clone(),
            store,
            listening,
        ));
        listens.await.map_err(|_| {
            Error::store(format!(
                "cannot listen for task events on PostgreSQL at {}",
                db.place()
            ))
        })?;
        Ok(Self {
            local,
            origin,
            outbox,
            _tasks: tasks,
        })
    }
}

impl TaskFeed for PostgresFeed {
    fn subscribe(&self, task_id: &str, watch: Watch) -> Result<Subscription> {
        self.local.subscribe(task_id, watch)
    }

    /// Subscribers in other processes cannot be seen from here: every write's events are
    /// built.
    fn watched(&self, _task_id: &str) -> Option<Watch> {
        Some(Watch::Everything)
    }

    fn publish(&self, task_id: &str, events: Vec<StreamResponse>, ended: Option<Task>) {
        let mut notice = Notice {
            origin: self.origin.clone(),
            task_id: task_id.to_owned(),
            events: Some(events.clone()),
            ended: ended.clone(),
            last: ended.is_some(),
        };
        let mut payload = serde_json::to_string(&notice).unwrap_or_default();
        if payload.is_empty() || payload.len() > NOTIFY_LIMIT {
            notice.events = None;
            notice.ended = None;
            payload = serde_json::to_string(&notice).unwrap_or_default();
        }
        self.local.publish(task_id, events, ended);
        // The sender is gone only when the feed is: nobody is left to tell.
        let _ = self.outbox.send(payload);
    }
}

/// Sends each queued notice, in order, on one connection.
async fn send(db: Postgres, mut queued: mpsc::UnboundedReceiver<String>) {
    while let Some(payload) = queued.recv().await {
        let sent = match db.connection().await {
            Ok(conn) => conn
                .run("SELECT pg_notify($1, $2)", &[&CHANNEL, &payload])
                .await
                .map_err(|e| chain(&e)),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = sent {
            tracing::warn!(error = %e, "a task event could not be sent to the other replicas");
        }
    }
}

/// Listens for the other processes' notices and fans them out here, connecting again
/// whenever the connection is lost. `listening` is told once the first LISTEN holds.
async fn listen(
    db: Postgres,
    origin: String,
    local: Arc<InProcessFeed>,
    store: Arc<dyn TaskStore>,
    listening: oneshot::Sender<()>,
) {
    let mut listening = Some(listening);
    loop {
        match db.config.connect(tokio_postgres::NoTls).await {
            Ok((client, mut connection)) => {
                let (notices, mut received) = mpsc::unbounded_channel();
                // The connection's messages, notifications among them, come from polling
                // it; the client's LISTEN completes only while it is polled.
                let driving = async move {
                    loop {
                        let message = std::future::poll_fn(|cx| connection.poll_message(cx)).await;
                        match message {
                            Some(Ok(tokio_postgres::AsyncMessage::Notification(n))) => {
                                let _ = notices.send(n.payload().to_owned());
                            }
                            Some(Ok(_)) => {}
                            Some(Err(e)) => return chain(&e),
                            None => return "the connection closed".to_owned(),
                        }
                    }
                };
                let relaying = async {
                    if let Err(e) = client.batch_execute(&format!("LISTEN {CHANNEL}")).await {
                        return chain(&e);
                    }
                    if let Some(listening) = listening.take() {
                        let _ = listening.send(());
                    }
                    while let Some(payload) = received.recv().await {
                        relay(&payload, &origin, &local, store.as_ref()).await;
                    }
                    "the listener stopped".to_owned()
                };
                let lost = tokio::select! {
                    lost = driving => lost,
                    lost = relaying => lost,
                };
                tracing::warn!(error = %lost, "lost the task-event listener's connection to PostgreSQL; connecting again");
            }
            Err(e) => {
                tracing::warn!(error = %chain(&e), "cannot listen for task events on PostgreSQL; trying again");
            }
        }
        tokio::time::sleep(RECONNECT_AFTER).await;
    }
}

/// Fans one notice from another process out to this one's subscribers.
async fn relay(payload: &str, origin: &str, local: &InProcessFeed, store: &dyn TaskStore) {
    let Ok(notice) = serde_json::from_str::<Notice>(payload) else {
        tracing::warn!(
            bytes = payload.len(),
            "a task-event notification that is not one; ignored"
        );
        return;
    };
    if notice.origin == origin || local.watched(&notice.task_id).is_none() {
        return;
    }
    if let Some(events) = notice.events {
        local.publish(&notice.task_id, events, notice.ended);
        return;
    }
    // Too large to travel: the task as stored now, announced by its status.
    match store.get(&notice.task_id).await {
        Ok(Some(task)) => {
            let status = StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
                task_id: task.id.clone(),
                context_id: task.context_id.clone(),
                status: task.status.clone(),
                metadata: None,
            });
            let ended = notice.last.then_some(task);
            local.publish(&notice.task_id, vec![status], ended);
        }
        Ok(None) => {}
        Err(e) => {
            tracing::warn!(error = %e, "cannot read a task another replica wrote");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sdk::TaskState;
    use crate::store::postgres::{PostgresTaskStore, testing};
    use crate::tasks::TaskManager;

    /// A process's task manager on `url`: its own pool, store handle and feed.
    async fn replica(url: &str) -> Arc<TaskManager> {
        let db = Postgres::connect(url, 4).unwrap();
        let store: Arc<dyn TaskStore> = Arc::new(PostgresTaskStore::on(&db).await.unwrap());
        let feed = PostgresFeed::start(&db, store.clone()).await.unwrap();
        TaskManager::with_feed(store, Arc::new(feed))
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
        let Some(url) = testing::scratch_database(TEST).await else {
            return;
        };
        let writer = replica(&url).await;
        let follower = replica(&url).await;
        let mut events = follower.subscribe("t1").unwrap();

        let task = crate::store::conformance::task("t1", "c1", TaskState::Submitted, 0);
        let handle = writer.create(task).await.unwrap();
        handle.set_status(TaskState::Working, None).await.unwrap();
        // Too large for a notification: announced by id, read back from the store.
        let large = crate::agent::agent_message("x".repeat(20_000), None);
        handle
            .set_status(TaskState::Working, Some(large))
            .await
            .unwrap();
        handle.set_status(TaskState::Completed, None).await.unwrap();

        let mut seen = Vec::new();
        let mut texts = Vec::new();
        while seen.last() != Some(&TaskState::Completed) {
            let event = events.recv().await.unwrap();
            if let StreamResponse::StatusUpdate(update) = &event {
                texts.push(update.status.message.is_some());
            }
            seen.push(state_of(&event));
        }
        assert_eq!(
            seen,
            [
                TaskState::Submitted,
                TaskState::Working,
                TaskState::Working,
                TaskState::Completed
            ]
        );
        assert_eq!(texts, [false, true, false], "the large status came whole");
        let ended = events.ended();
        assert_eq!(
            ended.get().map(|task| task.status.state.clone()),
            Some(TaskState::Completed)
        );
    }
}
