//! The task lifecycle shared by every agent: durable writes through the `TaskStore`,
//! then one event per change on the per-task event bus, in that order, so a subscriber
//! never sees a state the store would not return after a crash.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chrono::Utc;

use crate::error::{Error, Result};
use crate::sdk::{
    A2AError, Artifact, Message, StreamResponse, Task, TaskArtifactUpdateEvent, TaskState,
    TaskStatus, TaskStatusUpdateEvent, is_interrupted, is_terminal,
};
use crate::store::{Expected, TaskStore, TaskWrite, Version};

mod feed;
mod prepared;
mod shown;

pub use feed::{Announced, Ended, InProcessFeed, Seq, Subscription, TaskFeed, Watch};
pub(crate) use shown::Shown;

/// The task as this manager last wrote it, with the version the store gave that write
/// (`NOT_STORED` for a task prepared and not written yet).
type WriteLock = Arc<tokio::sync::Mutex<Option<(Version, Task)>>>;

/// The version of a task prepared (`TaskManager::prepare`) and not stored yet: its first
/// write creates it.
const NOT_STORED: Version = 0;

/// How the request that prepared a task (`TaskManager::prepare`) is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prepared {
    /// The task was stored: the request is answered with it.
    Stored,
    /// The agent found the work already under way on another task (the same work sent
    /// again): the prepared task is dropped, never stored, and the request is answered
    /// with that task, as `Reply::Existing` would be.
    Existing { task_id: String },
}

/// What a write of a task held at `version` expects the store to hold.
fn expecting(version: Version) -> Expected {
    match version {
        NOT_STORED => Expected::Absent,
        version => Expected::Version(version),
    }
}

/// Who makes a change's durable write: the task store, or another store's write that
/// carries it in its own transaction (`TaskWrite`).
trait Put {
    type Error: From<Error>;
    async fn put(
        self,
        store: &dyn TaskStore,
        task: &Task,
        expected: Expected,
    ) -> std::result::Result<Version, Self::Error>;
}

/// The task store writes it.
struct ToStore;

impl Put for ToStore {
    type Error = Error;
    async fn put(self, store: &dyn TaskStore, task: &Task, expected: Expected) -> Result<Version> {
        store.put(task, expected).await
    }
}

/// Another store's write carries it: `F` makes that write, with the task's.
struct CarriedBy<F>(F);

impl<F, Fut, E> Put for CarriedBy<F>
where
    F: FnOnce(TaskWrite) -> Fut,
    Fut: std::future::Future<Output = std::result::Result<(), E>>,
    E: From<Error>,
{
    type Error = E;
    async fn put(
        self,
        _: &dyn TaskStore,
        task: &Task,
        expected: Expected,
    ) -> std::result::Result<Version, E> {
        let write = TaskWrite::of(task, expected)?;
        let version = write.version_after();
        (self.0)(write).await?;
        Ok(version)
    }
}

/// Owns the store and the feed of task events; hands out `TaskHandle`s.
pub struct TaskManager {
    store: Arc<dyn TaskStore>,
    feed: Arc<dyn TaskFeed>,
    /// One writer at a time per task keeps events in store order. The lock holds the
    /// task as last written, so an update need not read and decode it again, and the
    /// version the store gave it, which the next write expects (a write by anyone else
    /// in between makes that one fail instead of being overwritten); `None` after a
    /// failed write (the next update reads the store).
    write_locks: Mutex<HashMap<String, WriteLock>>,
    /// Who waits for each prepared task to be stored (the request that created it).
    prepared: Mutex<HashMap<String, tokio::sync::oneshot::Sender<Prepared>>>,
}

impl std::fmt::Debug for TaskManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskManager").finish_non_exhaustive()
    }
}

impl TaskManager {
    /// A manager whose events reach the subscribers of this process.
    pub fn new(store: Arc<dyn TaskStore>) -> Arc<Self> {
        Self::with_feed(store, Arc::new(InProcessFeed::new()))
    }

    /// A manager announcing its writes on `feed`.
    pub fn with_feed(store: Arc<dyn TaskStore>, feed: Arc<dyn TaskFeed>) -> Arc<Self> {
        Arc::new(Self {
            store,
            feed,
            write_locks: Mutex::new(HashMap::new()),
            prepared: Mutex::new(HashMap::new()),
        })
    }

    pub fn store(&self) -> &Arc<dyn TaskStore> {
        &self.store
    }

    /// Subscribes to a task's future events.
    pub fn subscribe(self: &Arc<Self>, task_id: &str) -> Result<Subscription> {
        self.watch(task_id, Watch::Everything)
    }

    /// Subscribes to a task's future events, or only to its end (`Watch::End`).
    pub fn watch(self: &Arc<Self>, task_id: &str, watch: Watch) -> Result<Subscription> {
        self.feed.subscribe(task_id, watch)
    }

    /// For a subscription made here (`watch`) to a task that may be written in another
    /// process: makes sure its writer announces to this process from now on
    /// (`TaskFeed::follow`). Asked once the caller may see the task, never for an id a
    /// caller merely names. Returns whether the task must be read again: what was written
    /// elsewhere before the writer heard of this subscriber was not announced here.
    pub async fn follow_writer(&self, task_id: &str, watch: Watch) -> bool {
        self.feed.follow(task_id, watch).await
    }

    /// The task as last written by this manager, when it holds it (a task being worked
    /// on); `None` sends the reader to the store.
    async fn last_written(&self, task_id: &str) -> Option<Task> {
        self.last_written_with(task_id, Task::clone).await
    }

    /// `read` of the copy of the task this manager last wrote, when it holds one.
    async fn last_written_with<T>(
        &self,
        task_id: &str,
        read: impl FnOnce(&Task) -> T,
    ) -> Option<T> {
        let lock = self.write_locks.lock().ok()?.get(task_id).cloned()?;
        let written = lock.lock().await;
        written.as_ref().map(|(_, task)| read(task))
    }

    fn write_lock(&self, task_id: &str) -> Result<WriteLock> {
        let mut locks = self
            .write_locks
            .lock()
            .map_err(|_| Error::store("task locks poisoned"))?;
        Ok(locks.entry(task_id.to_owned()).or_default().clone())
    }

    /// Stores a new (or resumed) task and announces it.
    pub async fn create(self: &Arc<Self>, task: Task) -> Result<TaskHandle> {
        let lock = self.write_lock(&task.id)?;
        let mut written = lock.lock().await;
        *written = None;
        let version = self.store.put(&task, Expected::Absent).await?;
        *written = Some((version, task.clone()));
        self.feed.publish(
            &task.id,
            vec![StreamResponse::Task(task.clone())],
            None,
            None,
        );
        Ok(self.handle(&task.id, &task.context_id))
    }

    /// A new task held here and not stored: its first write creates it (a change, or a
    /// write of the agent's own that carries it: `TaskHandle::create_written_by`). The
    /// receiver hears when it is stored; until then the store has no such task, and
    /// nobody else can read it.
    pub async fn prepare(
        self: &Arc<Self>,
        task: Task,
    ) -> Result<(TaskHandle, tokio::sync::oneshot::Receiver<Prepared>)> {
        let (stored, heard) = tokio::sync::oneshot::channel();
        self.prepared
            .lock()
            .map_err(|_| Error::store("task locks poisoned"))?
            .insert(task.id.clone(), stored);
        let lock = self.write_lock(&task.id)?;
        let handle = self.handle(&task.id, &task.context_id);
        *lock.lock().await = Some((NOT_STORED, task));
        Ok((handle, heard))
    }

    /// Drops a prepared task that was never stored (its agent's run ended first).
    pub async fn drop_prepared(&self, task_id: &str) {
        if let Ok(mut prepared) = self.prepared.lock() {
            prepared.remove(task_id);
        }
        let Some(lock) = self
            .write_locks
            .lock()
            .ok()
            .and_then(|locks| locks.get(task_id).cloned())
        else {
            return;
        };
        let written = lock.lock().await;
        if matches!(written.as_ref(), Some((NOT_STORED, _)))
            && let Ok(mut locks) = self.write_locks.lock()
        {
            locks.remove(task_id);
        }
    }

    /// A prepared task was stored: whoever waits for it hears so.
    fn stored(&self, task_id: &str) {
        let waiting = self
            .prepared
            .lock()
            .ok()
            .and_then(|mut prepared| prepared.remove(task_id));
        if let Some(waiting) = waiting {
            let _ = waiting.send(Prepared::Stored);
        }
    }

    /// A handle on an existing task, for an agent that resumes work (after a restart).
    pub fn handle(self: &Arc<Self>, task_id: &str, context_id: &str) -> TaskHandle {
        TaskHandle {
            id: task_id.to_owned(),
            context_id: context_id.to_owned(),
            manager: self.clone(),
        }
    }

    /// A handle on a task this process starts to drive again, which another process may
    /// have written since this one last did (a saga taken over by a replica, then back;
    /// or a task this process prepared, whose creating write landed with its answer lost):
    /// the copy held from this manager's last write is dropped, so the next write reads
    /// the store and expects the version there instead of conflicting with it.
    pub async fn resumed(self: &Arc<Self>, task_id: &str, context_id: &str) -> TaskHandle {
        let held = self
            .write_locks
            .lock()
            .ok()
            .and_then(|locks| locks.get(task_id).cloned());
        if let Some(lock) = held {
            let mut written = lock.lock().await;
            // Prepared here, and stored by a write whose answer was lost.
            if matches!(written.as_ref(), Some((NOT_STORED, _))) {
                self.stored(task_id);
            }
            *written = None;
        }
        self.handle(task_id, context_id)
    }

    /// Reads a task, applying it a change, and writes it back durably before announcing
    /// `event(&task)`.
    async fn update(
        &self,
        task_id: &str,
        change: impl FnOnce(&mut Task) -> std::result::Result<(), A2AError>,
        event: impl FnOnce(&Task) -> StreamResponse,
    ) -> Result<Task> {
        self.update_announcing(
            task_id,
            change,
            |task| vec![event(task)],
            None,
            Task::clone,
            ToStore,
        )
        .await
    }

    /// `update`, announcing several events (in order) for one durable write, which `put`
    /// makes, at sequence `seq` of the agent's record.
    async fn update_announcing<T, P: Put>(
        &self,
        task_id: &str,
        change: impl FnOnce(&mut Task) -> std::result::Result<(), A2AError>,
        events: impl FnOnce(&Task) -> Vec<StreamResponse>,
        seq: Option<Seq>,
        answer: impl FnOnce(&Task) -> T,
        put: P,
    ) -> std::result::Result<T, P::Error> {
        let lock = self.write_lock(task_id)?;
        let mut written = lock.lock().await;
        let held = written.take();
        // A prepared task not stored is held again when its first write fails.
        let unstored = held
            .as_ref()
            .filter(|(version, _)| *version == NOT_STORED)
            .cloned();
        let (version, mut task) = match held {
            Some(held) => held,
            None => self
                .store
                .read(task_id)
                .await?
                .map(|stored| (stored.version, stored.task))
                .ok_or_else(|| Error::Protocol(A2AError::task_not_found(task_id)))?,
        };
        if is_terminal(&task.status.state) {
            return Err(Error::Protocol(A2AError::unsupported_operation(format!(
                "task {task_id} is already in a terminal state"
            )))
            .into());
        }
        change(&mut task).map_err(|e| {
            *written = unstored.clone();
            Error::Protocol(e)
        })?;
        let version = match put
            .put(self.store.as_ref(), &task, expecting(version))
            .await
        {
            Ok(version) => version,
            Err(e) => {
                *written = unstored;
                return Err(e);
            }
        };
        if unstored.is_some() {
            self.stored(task_id);
        }
        let last = is_terminal(&task.status.state);
        let answer = answer(&task);
        // Events are built only for someone listening. Checked after the write: whoever
        // subscribes later reads the written task first.
        let events = match self.feed.watched(task_id) {
            Some(Watch::Everything) => events(&task),
            Some(Watch::End) if last || is_interrupted(&task.status.state) => {
                vec![status_event(
                    &task.id,
                    &task.context_id,
                    task.status.clone(),
                )]
            }
            _ => Vec::new(),
        };
        if last {
            if let Ok(mut locks) = self.write_locks.lock() {
                locks.remove(task_id);
            }
            self.feed.publish(task_id, events, seq, Some(task));
        } else {
            *written = Some((version, task));
            self.feed.publish(task_id, events, seq, None);
        }
        Ok(answer)
    }
}

/// What an agent uses to report progress on one task.
#[derive(Debug, Clone)]
pub struct TaskHandle {
    id: String,
    context_id: String,
    manager: Arc<TaskManager>,
}

impl TaskHandle {
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn context_id(&self) -> &str {
        &self.context_id
    }

    /// The task as stored now (the copy this manager last wrote, when it holds one).
    pub async fn snapshot(&self) -> Result<Task> {
        if let Some(task) = self.manager.last_written(&self.id).await {
            return Ok(task);
        }
        self.manager
            .store
            .get(&self.id)
            .await?
            .ok_or_else(|| Error::Protocol(A2AError::task_not_found(&self.id)))
    }

    /// The state of the task as stored now: `snapshot`'s, without copying the task.
    pub async fn state(&self) -> Result<TaskState> {
        let last = self
            .manager
            .last_written_with(&self.id, |task| task.status.state.clone())
            .await;
        match last {
            Some(state) => Ok(state),
            None => Ok(self.snapshot().await?.status.state),
        }
    }

    /// Moves the task to `state`, with an optional agent message (kept in the history).
    pub async fn set_status(&self, state: TaskState, message: Option<Message>) -> Result<Task> {
        self.change_status(
            |_| Ok(None),
            Statuses::new(vec![(state, message)]),
            false,
            Task::clone,
            ToStore,
        )
        .await
    }

    /// Sets members of the task's metadata and moves it to `state`, in one durable write.
    /// A subscriber sees what `set_metadata` calls and then `set_status` would have shown:
    /// the task with its new metadata, then the status.
    pub async fn set_metadata_and_status(
        &self,
        metadata: Vec<(String, serde_json::Value)>,
        state: TaskState,
        message: Option<Message>,
    ) -> Result<Task> {
        let edit = |task: &mut Task| {
            let members = task.metadata.get_or_insert_with(Default::default);
            for (key, value) in metadata {
                members.insert(key, value);
            }
            Ok(None)
        };
        let statuses = Statuses::new(vec![(state, message)]);
        self.change_status(edit, statuses, true, Task::clone, ToStore)
            .await
    }

    /// Several status changes that happened together, and the artifact as it stands after
    /// them, in one durable write: every message joins the history, the last status is
    /// the task's, and a subscriber sees the artifact and then each status in order.
    pub async fn set_statuses_with_artifact(
        &self,
        artifact: Option<Artifact>,
        statuses: Vec<(TaskState, Option<Message>)>,
    ) -> Result<()> {
        let put = |task: &mut Task| Ok(artifact.map(|artifact| put_artifact(task, artifact)));
        self.change_with_statuses(put, statuses, 0, None).await
    }

    /// The general form of the one above: `change` edits the task (its artifacts with
    /// `put_artifact`, or `edit_artifact` for a large one that changes a little at a time;
    /// its metadata) and names the artifact it changed, if any, for the event that shows
    /// it; then come the statuses, of which the first `announced` were announced already
    /// (`announce`) and get no event again; all in one durable write, at sequence `seq`
    /// of the agent's record when it keeps one. Nothing is written if `change` fails.
    pub async fn change_with_statuses(
        &self,
        change: impl FnOnce(&mut Task) -> std::result::Result<Option<String>, String>,
        statuses: Vec<(TaskState, Option<Message>)>,
        announced: usize,
        seq: Option<Seq>,
    ) -> Result<()> {
        let change = |task: &mut Task| {
            change(task).map_err(|why| A2AError::internal(format!("cannot change the task: {why}")))
        };
        let statuses = Statuses {
            all: statuses,
            announced,
            seq,
        };
        self.change_status(change, statuses, false, |_| (), ToStore)
            .await
    }

    /// `change_with_statuses`, the durable write made by `write`: another store's write
    /// on the database the task store keeps its tables in, carrying the task's
    /// (`TaskWrite`) in its own transaction, so that both land or neither does. Events
    /// are announced once `write` succeeded; when it fails, the task is read from the
    /// store at its next change.
    pub async fn change_written_by<E, Fut>(
        &self,
        change: impl FnOnce(&mut Task) -> std::result::Result<Option<String>, String>,
        statuses: Vec<(TaskState, Option<Message>)>,
        announced: usize,
        seq: Option<Seq>,
        write: impl FnOnce(TaskWrite) -> Fut,
    ) -> std::result::Result<(), E>
    where
        Fut: std::future::Future<Output = std::result::Result<(), E>>,
        E: From<Error>,
    {
        let change = |task: &mut Task| {
            change(task).map_err(|why| A2AError::internal(format!("cannot change the task: {why}")))
        };
        let statuses = Statuses {
            all: statuses,
            announced,
            seq,
        };
        self.change_status(change, statuses, false, |_| (), CarriedBy(write))
            .await
    }

    /// Says that this process works on the task from now on (it starts, resumes or
    /// takes it over): a subscriber in another process is then answered by this one.
    pub fn work_here(&self) {
        self.manager.feed.writes(&self.id);
    }

    /// Says that the task goes on in another process, which took it over: this one no
    /// longer answers for it to subscribers elsewhere, and reads it from the store (what
    /// it last wrote itself is behind).
    pub fn left_to_another(&self) {
        self.manager.feed.no_longer_writes(&self.id);
        if let Ok(mut locks) = self.manager.write_locks.lock() {
            locks.remove(&self.id);
        }
    }

    /// Announces statuses the store does not hold, and `artifact` as it stands, to the
    /// task's subscribers, without a write: for an agent whose tasks are views of a
    /// durable record of its own (the executor's journal), which has made them durable
    /// there and shows them on every read (`Agent::shown`). Events are built only for
    /// someone listening, and `artifact` is called only for one who hears everything;
    /// one waiting for the end alone hears only an interrupting or ending last status.
    /// `seq`: the sequence in that record of what is announced.
    pub fn announce(
        &self,
        artifact: impl FnOnce() -> Option<Artifact>,
        statuses: &[(TaskState, Option<Message>)],
        seq: Seq,
    ) {
        let Some(watch) = self.manager.feed.watched(&self.id) else {
            return;
        };
        let Some((last, _)) = statuses.last() else {
            return;
        };
        let statuses = match watch {
            Watch::Everything => statuses,
            Watch::End if is_terminal(last) || is_interrupted(last) => {
                &statuses[statuses.len() - 1..]
            }
            Watch::End => return,
        };
        let now = Some(Utc::now());
        let mut events: Vec<StreamResponse> = Vec::with_capacity(statuses.len() + 1);
        if watch == Watch::Everything
            && let Some(artifact) = artifact()
        {
            events.push(artifact_event(
                &self.id,
                &self.context_id,
                artifact,
                false,
                true,
            ));
        }
        events.extend(statuses.iter().map(|(state, message)| {
            let status = TaskStatus {
                state: state.clone(),
                message: message.clone().map(|mut m| {
                    m.task_id = Some(self.id.clone());
                    m.context_id = Some(self.context_id.clone());
                    m
                }),
                timestamp: now,
            };
            status_event(&self.id, &self.context_id, status)
        }));
        self.manager.feed.publish(&self.id, events, Some(seq), None);
    }

    /// Applies `artifact` (which names the artifact it changed, if any) and the statuses
    /// in one durable write. With `announce_edit`, subscribers first see the task as
    /// `artifact` left it (its metadata, say), before the statuses.
    async fn change_status<T, P: Put>(
        &self,
        artifact: impl FnOnce(&mut Task) -> std::result::Result<Option<String>, A2AError>,
        statuses: Statuses,
        announce_edit: bool,
        answer: impl FnOnce(&Task) -> T,
        put: P,
    ) -> std::result::Result<T, P::Error> {
        let Statuses {
            all: statuses,
            announced,
            seq,
        } = statuses;
        if statuses.is_empty() {
            return Err(Error::Protocol(A2AError::invalid_params(
                "a status change needs a status",
            ))
            .into());
        }
        let now = Utc::now();
        // Each status's state, and whether it has a message (the message itself is moved
        // into the history, and the events, when anyone listens, are built from there).
        let shape: Vec<(TaskState, bool)> = statuses
            .iter()
            .map(|(state, message)| (state.clone(), message.is_some()))
            .collect();
        // Which artifact changed, for the event that shows it.
        let changed = std::sync::OnceLock::new();
        let edited = std::sync::OnceLock::new();
        self.manager
            .update_announcing(
                &self.id,
                |task| {
                    if let Some(id) = artifact(task)? {
                        let _ = changed.set(id);
                    }
                    if announce_edit {
                        let _ = edited.set(task.clone());
                    }
                    let history = task.history.get_or_insert_with(Vec::new);
                    let last = statuses.len() - 1;
                    for (i, (state, message)) in statuses.into_iter().enumerate() {
                        let message = message.map(|mut m| {
                            m.task_id = Some(self.id.clone());
                            m.context_id = Some(self.context_id.clone());
                            m
                        });
                        // Every message joins the history; only the last status is the task's.
                        if i < last {
                            history.extend(message);
                            continue;
                        }
                        history.extend(message.clone());
                        task.status = TaskStatus {
                            state,
                            message,
                            timestamp: Some(now),
                        };
                    }
                    Ok(())
                },
                |task| {
                    let mut events: Vec<StreamResponse> = edited
                        .get()
                        .cloned()
                        .map(StreamResponse::Task)
                        .into_iter()
                        .collect();
                    if let Some(id) = changed.get()
                        && let Some(artifact) = task
                            .artifacts
                            .iter()
                            .flatten()
                            .find(|a| &a.artifact_id == id)
                    {
                        events.push(artifact_event(
                            &task.id,
                            &task.context_id,
                            artifact.clone(),
                            false,
                            true,
                        ));
                    }
                    let history = task.history.as_deref().unwrap_or_default();
                    let with_message = shape.iter().filter(|(_, has)| *has).count();
                    let mut messages = history[history.len().saturating_sub(with_message)..].iter();
                    let unannounced =
                        shape
                            .into_iter()
                            .enumerate()
                            .filter_map(|(i, (state, has_message))| {
                                // Each message is passed, and only an unannounced one cloned.
                                let message = has_message.then(|| messages.next()).flatten();
                                (i >= announced).then(|| (state, message.cloned()))
                            });
                    events.extend(unannounced.map(|(state, message)| {
                        let status = TaskStatus {
                            state,
                            message,
                            timestamp: Some(now),
                        };
                        status_event(&task.id, &task.context_id, status)
                    }));
                    events
                },
                seq,
                answer,
                put,
            )
            .await
    }

    /// Adds an artifact, replaces the one with the same id, or appends to it (`append`).
    pub async fn add_artifact(
        &self,
        artifact: Artifact,
        append: bool,
        last_chunk: bool,
    ) -> Result<Task> {
        let sent = artifact.clone();
        self.manager
            .update(
                &self.id,
                |task| {
                    replace_artifact(task, artifact, append);
                    task.status.timestamp = Some(Utc::now());
                    Ok(())
                },
                |task| artifact_event(&task.id, &task.context_id, sent, append, last_chunk),
            )
            .await
    }

    /// Sets one member of the task's metadata (announced as a task snapshot).
    pub async fn set_metadata(&self, key: &str, value: serde_json::Value) -> Result<Task> {
        let key = key.to_owned();
        self.manager
            .update(
                &self.id,
                |task| {
                    task.metadata
                        .get_or_insert_with(Default::default)
                        .insert(key, value);
                    Ok(())
                },
                |task| StreamResponse::Task(task.clone()),
            )
            .await
    }

    /// Appends a message from the client to the history (a follow-up turn).
    pub async fn record_message(&self, message: Message) -> Result<Task> {
        self.manager
            .update(
                &self.id,
                |task| {
                    task.history.get_or_insert_with(Vec::new).push(message);
                    Ok(())
                },
                |task| StreamResponse::Task(task.clone()),
            )
            .await
    }
}

/// Statuses for one write, of which the first `announced` were announced already, at
/// sequence `seq` of the agent's record.
struct Statuses {
    all: Vec<(TaskState, Option<Message>)>,
    announced: usize,
    seq: Option<Seq>,
}

impl Statuses {
    /// Statuses of a write the agent keeps no record of.
    fn new(all: Vec<(TaskState, Option<Message>)>) -> Self {
        Self {
            all,
            announced: 0,
            seq: None,
        }
    }
}

/// Adds `artifact` to `task`, or replaces the one with its id; returns the id.
pub fn put_artifact(task: &mut Task, artifact: Artifact) -> String {
    let id = artifact.artifact_id.clone();
    replace_artifact(task, artifact, false);
    id
}

/// Changes the task's artifact `artifact_id` where it stands.
pub fn edit_artifact(
    task: &mut Task,
    artifact_id: &str,
    edit: impl FnOnce(&mut Artifact) -> std::result::Result<(), String>,
) -> std::result::Result<(), String> {
    let artifact = task
        .artifacts
        .iter_mut()
        .flatten()
        .find(|a| a.artifact_id == artifact_id)
        .ok_or_else(|| format!("task has no artifact {artifact_id} to change"))?;
    edit(artifact).map_err(|why| format!("cannot change artifact {artifact_id}: {why}"))
}

/// Adds `artifact` to `task`, replaces the one with the same id, or appends to it.
fn replace_artifact(task: &mut Task, artifact: Artifact, append: bool) {
    let artifacts = task.artifacts.get_or_insert_with(Vec::new);
    match artifacts
        .iter_mut()
        .find(|a| a.artifact_id == artifact.artifact_id)
    {
        Some(existing) if append => existing.parts.extend(artifact.parts),
        Some(existing) => *existing = artifact,
        None => artifacts.push(artifact),
    }
}

/// An artifact's event on the task `task_id` of `context_id`.
fn artifact_event(
    task_id: &str,
    context_id: &str,
    artifact: Artifact,
    append: bool,
    last_chunk: bool,
) -> StreamResponse {
    StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
        task_id: task_id.to_owned(),
        context_id: context_id.to_owned(),
        artifact,
        append: Some(append),
        last_chunk: Some(last_chunk),
        metadata: None,
    })
}

/// A status's event on the task `task_id` of `context_id`.
fn status_event(task_id: &str, context_id: &str, status: TaskStatus) -> StreamResponse {
    StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
        task_id: task_id.to_owned(),
        context_id: context_id.to_owned(),
        status,
        metadata: None,
    })
}

#[cfg(test)]
mod tests;
