//! Our `RequestHandler` for the SDK's bindings: validation of incoming requests, tasks in
//! our durable store, streams that begin with the Task, subscriptions to paused tasks.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::Utc;
use futures::stream::{self, BoxStream, StreamExt};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::agent::{Agent, OWNER_METADATA, Reply, RequestContext, Viewed};
use crate::cpu::{self, Phase};
use crate::modes::InputModes;
use crate::sdk;
use crate::sdk::{
    A2AError, CancelTaskRequest, GetTaskRequest, ListTasksRequest, ListTasksResponse, Message,
    RequestHandler, Role, SendMessageRequest, SendMessageResponse, ServiceParams, StreamResponse,
    SubscribeToTaskRequest, Task, TaskState, TaskStatus, is_interrupted, is_terminal,
    new_context_id, new_task_id,
};
use crate::store::{PageKey, TaskQuery, owner_of};
use crate::tasks::{Announced, Prepared, Watch};
use crate::tasks::{Subscription, TaskHandle, TaskManager};

const DEFAULT_PAGE_SIZE: usize = 50;
const MAX_PAGE_SIZE: usize = 100;

/// Serves one agent.
pub struct HostHandler<A: Agent> {
    agent: Arc<A>,
    tasks: Arc<TaskManager>,
    shutdown: CancellationToken,
    /// What parts the agent takes (from its card); any, until `accepting` says.
    input_modes: InputModes,
}

impl<A: Agent> HostHandler<A> {
    pub fn new(agent: Arc<A>, tasks: Arc<TaskManager>, shutdown: CancellationToken) -> Self {
        Self {
            agent,
            tasks,
            shutdown,
            input_modes: InputModes::default(),
        }
    }

    /// Refuses messages with parts of other media types than `modes` (ContentTypeNotSupported).
    pub fn accepting(mut self, modes: InputModes) -> Self {
        self.input_modes = modes;
        self
    }

    /// Opens the task a message belongs to (a new one, or the one it continues) and
    /// starts the agent on it. Returns the task and a receiver subscribed before the
    /// agent started, so no event is missed.
    async fn start(
        &self,
        params: &ServiceParams,
        req: SendMessageRequest,
        watch: Watch,
    ) -> Result<Started, A2AError> {
        let ctx = RequestContext::from_params(params);
        let mut message = validate_message(req.message)?;
        self.input_modes.check(&message)?;
        let existing = match message.task_id.as_deref().filter(|id| !id.is_empty()) {
            None => None,
            Some(id) => {
                let task = self.get_for(&ctx.caller, id).await?.task;
                if is_terminal(&task.status.state) {
                    return Err(A2AError::unsupported_operation(format!(
                        "task {id} is {:?} and accepts no more messages",
                        task.status.state
                    )));
                }
                if let Some(context) = message.context_id.as_deref().filter(|c| !c.is_empty())
                    && context != task.context_id
                {
                    return Err(A2AError::invalid_params(format!(
                        "message.contextId {context} does not match task {id}'s context {}",
                        task.context_id
                    )));
                }
                Some(task)
            }
        };
        let reply = self.agent.accept(&ctx, &message, existing.as_ref()).await?;
        let created_by_run = matches!(reply, Reply::CreatedByRun);
        let record = match reply {
            Reply::Message(reply) => return Ok(Started::Message(reply)),
            Reply::Existing { task_id } => {
                return self.existing(&ctx.caller, &task_id, watch).await;
            }
            Reply::Task | Reply::CreatedByRun => true,
            Reply::RecordedByRun => false,
        };
        // A task the agent's run creates: how the request hears that it was stored.
        let mut prepared = None;
        let continued = existing.is_some();
        let handle = match existing {
            Some(task) => {
                let handle = self.tasks.handle(&task.id, &task.context_id);
                if record {
                    handle
                        .record_message(message.clone())
                        .await
                        .map_err(crate::Error::into_a2a)?;
                }
                handle
            }
            None => {
                let context_id = message
                    .context_id
                    .clone()
                    .filter(|c| !c.is_empty())
                    .unwrap_or_else(new_context_id);
                let id = new_task_id();
                // What `run` needs of the message was taken at `accept`: its parts move
                // to the task's history, and `run` gets the rest (`Accepted`).
                let mut first = if ctx.accepted.holds() {
                    let parts = std::mem::take(&mut message.parts);
                    Message {
                        parts,
                        ..message.clone()
                    }
                } else {
                    message.clone()
                };
                first.task_id = Some(id.clone());
                first.context_id = Some(context_id.clone());
                let task = Task {
                    id,
                    context_id,
                    status: TaskStatus {
                        state: TaskState::Submitted,
                        message: None,
                        timestamp: Some(Utc::now()),
                    },
                    artifacts: None,
                    history: Some(vec![first]),
                    metadata: self.agent.scopes_tasks_to_callers().then(|| {
                        [(
                            OWNER_METADATA.to_owned(),
                            serde_json::Value::String(ctx.caller.clone()),
                        )]
                        .into()
                    }),
                };
                if created_by_run {
                    // A blocking send shows the end alone: its stream starts from the
                    // task's outline, not from a copy of the message it holds.
                    let first = match watch {
                        Watch::Everything => task.clone(),
                        Watch::End => outline(&task),
                    };
                    let (handle, stored) = self
                        .tasks
                        .prepare(task)
                        .await
                        .map_err(crate::Error::into_a2a)?;
                    prepared = Some((first, stored));
                    handle
                } else {
                    cpu::measured(Phase::TaskCreation, self.tasks.create(task))
                        .await
                        .map_err(crate::Error::into_a2a)?
                }
            }
        };
        let events = self
            .tasks
            .watch(handle.id(), watch)
            .map_err(crate::Error::into_a2a)?;
        if continued {
            // Its writer may be another process: it announces here before the agent
            // starts (which may pass the message on to it), and the read below follows.
            self.tasks.follow_writer(handle.id(), watch).await;
        }
        // The task as it stands before the agent starts, as callers read it: a stream
        // begins with it, and every change the agent makes then arrives as an event (the
        // subscription is older).
        let (first, stored) = match prepared {
            Some((first, stored)) => (Viewed::stored(first), Some(stored)),
            None => {
                let stored = handle.snapshot().await.map_err(crate::Error::into_a2a)?;
                (self.agent.shown(stored).await, None)
            }
        };
        let caller = ctx.caller.clone();
        let agent = self.agent.clone();
        let run_handle = handle.clone();
        let mut run = tokio::spawn(cpu::measured(Phase::Intake, async move {
            agent.run(ctx, run_handle, message).await
        }));
        if let Some(mut stored) = stored {
            // Answered once the task exists: a task id given out is a task stored.
            // A run ends after its task's first write, whose announcement comes first.
            let heard = tokio::select! {
                biased;
                heard = &mut stored => heard.ok(),
                _ = &mut run => None,
            };
            if let Some(Prepared::Existing { task_id }) = heard {
                // The same work runs on that task: the prepared one was never stored.
                drop(events);
                return self.existing(&caller, &task_id, watch).await;
            }
            if heard.is_none() {
                self.tasks.drop_prepared(handle.id()).await;
                return Err(A2AError::internal(
                    "the work could not be recorded, and nothing was started; send the message again",
                ));
            }
        }
        Ok(Started::Task {
            handle,
            first: Box::new(first),
            events,
            run,
        })
    }

    /// The request answered with `task_id`, on which the same work runs already: a
    /// blocking send gets it as it stands, a stream follows it.
    async fn existing(
        &self,
        caller: &str,
        task_id: &str,
        watch: Watch,
    ) -> Result<Started, A2AError> {
        // Subscribed before reading: a change after the read is then an event, never
        // lost between the two.
        let events = self
            .tasks
            .watch(task_id, watch)
            .map_err(crate::Error::into_a2a)?;
        // An agent's match with a task this caller cannot see never names it.
        let task = self
            .get_for(caller, task_id)
            .await
            .map_err(|e| match e.code {
                crate::sdk::error_code::TASK_NOT_FOUND => A2AError::invalid_params(
                    "the message repeats work on a task this caller cannot see; nothing was started",
                ),
                _ => e,
            })?;
        let task = match watch {
            Watch::Everything => self.followed(caller, task, watch).await?,
            Watch::End => task,
        };
        Ok(Started::Existing {
            task: Box::new(task),
            events,
        })
    }

    /// The task as callers read it (`Agent::shown`), if `caller` may see it: when the
    /// agent scopes tasks to their callers, another caller's task is not found, exactly
    /// as a task that does not exist (unless the agent lets `caller` see every task), and
    /// nothing of it is read beyond its stored owner.
    async fn get_for(&self, caller: &str, id: &str) -> Result<Viewed, A2AError> {
        let stored = self
            .tasks
            .store()
            .get(id)
            .await
            .map_err(crate::Error::into_a2a)?
            .ok_or_else(|| A2AError::task_not_found(id))?;
        if self.scoped_for(caller) && owner_of(&stored) != Some(caller) {
            return Err(A2AError::task_not_found(id));
        }
        Ok(self.agent.shown(stored).await)
    }

    /// `task`, which `caller` may see and has just subscribed to, once its writer
    /// (perhaps another process) announces here: read again when something written
    /// meanwhile may not have been announced here. An ended task no longer changes.
    async fn followed(&self, caller: &str, task: Viewed, watch: Watch) -> Result<Viewed, A2AError> {
        if is_terminal(&task.task.status.state)
            || !self.tasks.follow_writer(&task.task.id, watch).await
        {
            return Ok(task);
        }
        self.get_for(caller, &task.task.id).await
    }

    /// Whether `caller` sees only its own tasks.
    fn scoped_for(&self, caller: &str) -> bool {
        self.agent.scopes_tasks_to_callers() && !self.agent.sees_every_task(caller)
    }

    /// The owner a listing is limited to, when `caller` sees only its own tasks.
    fn owner_filter(&self, params: &ServiceParams) -> Option<String> {
        let caller = RequestContext::from_params(params).caller;
        self.scoped_for(&caller).then_some(caller)
    }

    /// The live stream of a task: a snapshot first, then each event until the task is
    /// terminal or interrupted, or the agent's run ends without either.
    fn follow(
        &self,
        first: Viewed,
        events: Subscription,
        run: Option<tokio::task::JoinHandle<()>>,
    ) -> BoxStream<'static, Result<StreamResponse, A2AError>> {
        let tasks = self.tasks.clone();
        let Viewed { task: first, seq } = first;
        let id = first.id.clone();
        let state = Follow {
            shown: crate::tasks::Shown::of(&first, seq),
            events,
            run,
            done: false,
            tasks,
            agent: self.agent.clone(),
            id,
            shutdown: self.shutdown.clone(),
        };
        let rest = stream::unfold(state, |mut state| async move {
            if state.done {
                return None;
            }
            let event = state.next_new().await?;
            if ends_stream(&event) {
                state.done = true;
            }
            Some((Ok(event), state))
        });
        stream::once(async move { Ok(StreamResponse::Task(first)) })
            .chain(rest)
            .boxed()
    }
}

enum Started {
    Message(Message),
    Existing {
        task: Box<Viewed>,
        events: Subscription,
    },
    Task {
        handle: TaskHandle,
        /// The task before the agent started on it.
        first: Box<Viewed>,
        events: Subscription,
        run: tokio::task::JoinHandle<()>,
    },
}

struct Follow {
    /// What the stream has shown.
    shown: crate::tasks::Shown,
    shutdown: CancellationToken,
    events: Subscription,
    run: Option<tokio::task::JoinHandle<()>>,
    done: bool,
    tasks: Arc<TaskManager>,
    agent: Arc<dyn Agent>,
    id: String,
}

impl Follow {
    /// The next event the stream has not shown yet (`tasks/shown.rs`).
    async fn next_new(&mut self) -> Option<StreamResponse> {
        loop {
            let announced = self.next().await?;
            if let Some(event) = self.shown.take(announced) {
                return Some(event);
            }
        }
    }

    /// The next event; after a lag, the task as callers read it stands in for what was
    /// missed, and only what is newer than it follows.
    /// Events come before the end of the run (`biased`), so nothing the run published
    /// is lost when it ends.
    async fn next(&mut self) -> Option<Announced> {
        loop {
            let received = match &mut self.run {
                Some(run) => tokio::select! {
                    biased;
                    received = self.events.recv() => received,
                    _ = run => {
                        self.run = None;
                        return None;
                    }
                    _ = self.shutdown.cancelled() => return None,
                },
                None => tokio::select! {
                    received = self.events.recv() => received,
                    _ = self.shutdown.cancelled() => return None,
                },
            };
            match received {
                Ok(event) => return Some(event),
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    if let Ok(Some(task)) = self.tasks.store().get(&self.id).await {
                        let Viewed { task, seq } = self.agent.shown(task).await;
                        self.shown.reread(seq);
                        return Some(Announced {
                            seq: None,
                            event: StreamResponse::Task(task),
                        });
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}

/// A stream ends at a status update to a terminal or interrupted state, or at a
/// terminal task snapshot. (A snapshot of a paused task, sent when a follow-up message
/// arrives, does not end it: the task is about to resume.)
fn ends_stream(event: &StreamResponse) -> bool {
    match event {
        StreamResponse::Task(t) => is_terminal(&t.status.state),
        StreamResponse::StatusUpdate(u) => {
            is_terminal(&u.status.state) || is_interrupted(&u.status.state)
        }
        _ => false,
    }
}

/// Refuses a message the protocol requires to be complete.
fn validate_message(message: Message) -> Result<Message, A2AError> {
    if message.message_id.trim().is_empty() && message.parts.is_empty() {
        return Err(A2AError::invalid_params(
            "params.message is required (messageId, role and parts)",
        ));
    }
    if message.message_id.trim().is_empty() {
        return Err(A2AError::invalid_params("message.messageId is required"));
    }
    if message.parts.is_empty() {
        return Err(A2AError::invalid_params(
            "message.parts must contain at least one part",
        ));
    }
    if message.role != Role::User {
        return Err(A2AError::invalid_params(
            "message.role must be ROLE_USER for a message sent to an agent",
        ));
    }
    Ok(message)
}

/// `task` without its history and artifacts: what a stream that shows only the end needs
/// of the task it starts with.
fn outline(task: &Task) -> Task {
    Task {
        id: task.id.clone(),
        context_id: task.context_id.clone(),
        status: task.status.clone(),
        artifacts: None,
        history: None,
        metadata: None,
    }
}

/// Keeps the last `length` messages of the history (`None` keeps all; 0 drops it).
fn trim_history(mut task: Task, length: Option<i32>) -> Task {
    if let (Some(length), Some(history)) = (length, task.history.as_mut()) {
        let keep = usize::try_from(length.max(0)).unwrap_or(0);
        if history.len() > keep {
            history.drain(..history.len() - keep);
        }
    }
    task
}

#[async_trait]
impl<A: Agent> RequestHandler for HostHandler<A> {
    async fn send_message(
        &self,
        params: &ServiceParams,
        req: SendMessageRequest,
    ) -> Result<SendMessageResponse, A2AError> {
        let config = req.configuration.clone();
        let history_length = config.as_ref().and_then(|c| c.history_length);
        let immediately = config
            .as_ref()
            .and_then(|c| c.return_immediately)
            .unwrap_or(false);
        // A blocking send waits for the end alone: no other event is built for it.
        match self.start(params, req, Watch::End).await? {
            Started::Message(m) => Ok(SendMessageResponse::Message(m)),
            Started::Existing { task, .. } => Ok(SendMessageResponse::Task(trim_history(
                task.task,
                history_length,
            ))),
            Started::Task {
                handle,
                first,
                events,
                run,
            } => {
                let ended = events.ended();
                if !immediately {
                    let mut stream = self.follow(*first, events, Some(run));
                    while stream.next().await.is_some() {}
                }
                // The task as it ended, when the stream saw it end; else as it stands,
                // as callers read it.
                // Taken, not copied, once the stream that set it is gone.
                let ended = match Arc::try_unwrap(ended) {
                    Ok(cell) => cell.into_inner(),
                    Err(shared) => shared.get().cloned(),
                };
                let task = match ended {
                    Some(task) => task,
                    None => {
                        let stored = handle.snapshot().await.map_err(crate::Error::into_a2a)?;
                        self.agent.shown(stored).await.task
                    }
                };
                Ok(SendMessageResponse::Task(trim_history(
                    task,
                    history_length,
                )))
            }
        }
    }

    async fn send_streaming_message(
        &self,
        params: &ServiceParams,
        req: SendMessageRequest,
    ) -> Result<BoxStream<'static, Result<StreamResponse, A2AError>>, A2AError> {
        match self.start(params, req, Watch::Everything).await? {
            Started::Message(m) => {
                Ok(stream::once(async move { Ok(StreamResponse::Message(m)) }).boxed())
            }
            Started::Existing { task, events } => {
                if is_terminal(&task.task.status.state) || is_interrupted(&task.task.status.state) {
                    Ok(stream::once(async move { Ok(StreamResponse::Task(task.task)) }).boxed())
                } else {
                    Ok(self.follow(*task, events, None))
                }
            }
            Started::Task {
                first, events, run, ..
            } => Ok(self.follow(*first, events, Some(run))),
        }
    }

    async fn get_task(
        &self,
        params: &ServiceParams,
        req: GetTaskRequest,
    ) -> Result<Task, A2AError> {
        if let Some(length) = req.history_length
            && length < 0
        {
            return Err(A2AError::invalid_params(
                "historyLength must not be negative",
            ));
        }
        let caller = RequestContext::from_params(params).caller;
        Ok(trim_history(
            self.get_for(&caller, &req.id).await?.task,
            req.history_length,
        ))
    }

    async fn list_tasks(
        &self,
        params: &ServiceParams,
        req: ListTasksRequest,
    ) -> Result<ListTasksResponse, A2AError> {
        let limit = match req.page_size {
            None | Some(0) => DEFAULT_PAGE_SIZE,
            Some(n) if n < 0 || n as usize > MAX_PAGE_SIZE => {
                return Err(A2AError::invalid_params(format!(
                    "pageSize must be 1-{MAX_PAGE_SIZE}"
                )));
            }
            Some(n) => n as usize,
        };
        if req.history_length.is_some_and(|h| h < 0) {
            return Err(A2AError::invalid_params(
                "historyLength must not be negative",
            ));
        }
        let after = match req.page_token.as_deref().filter(|t| !t.is_empty()) {
            None => None,
            Some(token) => Some(PageKey::from_token(token).ok_or_else(|| {
                A2AError::invalid_params(format!(
                    "pageToken {token:?} is not one this agent issued"
                ))
            })?),
        };
        let query = TaskQuery {
            context_id: req.context_id.clone().filter(|c| !c.is_empty()),
            state: req.status.clone().filter(|s| *s != TaskState::Unspecified),
            updated_after: req.status_timestamp_after,
            owner: self.owner_filter(params),
            after,
            limit,
        };
        let page = self
            .tasks
            .store()
            .list(&query)
            .await
            .map_err(crate::Error::into_a2a)?;
        let include_artifacts = req.include_artifacts.unwrap_or(false);
        let mut shown = Vec::with_capacity(page.tasks.len());
        for stored in page.tasks {
            shown.push(self.agent.shown(stored).await.task);
        }
        let tasks: Vec<Task> = shown
            .into_iter()
            .map(|mut t| {
                if !include_artifacts {
                    t.artifacts = None;
                }
                trim_history(t, req.history_length)
            })
            .collect();
        Ok(ListTasksResponse {
            page_size: limit as i32,
            total_size: page.total as i32,
            next_page_token: page.next.map(|key| key.token()).unwrap_or_default(),
            tasks,
        })
    }

    async fn cancel_task(
        &self,
        params: &ServiceParams,
        req: CancelTaskRequest,
    ) -> Result<Task, A2AError> {
        let caller = RequestContext::from_params(params).caller;
        let task = self.get_for(&caller, &req.id).await?.task;
        if task.status.state == TaskState::Canceled {
            Ok(task)
        } else if is_terminal(&task.status.state) {
            Err(A2AError::task_not_cancelable(&req.id))
        } else {
            self.agent
                .cancel(self.tasks.handle(&task.id, &task.context_id))
                .await
        }
    }

    async fn subscribe_to_task(
        &self,
        params: &ServiceParams,
        req: SubscribeToTaskRequest,
    ) -> Result<BoxStream<'static, Result<StreamResponse, A2AError>>, A2AError> {
        let caller = RequestContext::from_params(params).caller;
        let events = self
            .tasks
            .subscribe(&req.id)
            .map_err(crate::Error::into_a2a)?;
        let task = self.get_for(&caller, &req.id).await?;
        if is_terminal(&task.task.status.state) {
            return Err(A2AError::unsupported_operation(format!(
                "task {} is already in a terminal state; use GetTask",
                req.id
            )));
        }
        let task = self.followed(&caller, task, Watch::Everything).await?;
        if is_terminal(&task.task.status.state) {
            // It ended while its writer heard of this subscriber: the stream is its end.
            return Ok(stream::once(async move { Ok(StreamResponse::Task(task.task)) }).boxed());
        }
        Ok(self.follow(task, events, None))
    }

    async fn create_push_config(
        &self,
        _: &ServiceParams,
        _: sdk::TaskPushNotificationConfig,
    ) -> Result<sdk::TaskPushNotificationConfig, A2AError> {
        Err(A2AError::push_notification_not_supported())
    }

    async fn get_push_config(
        &self,
        _: &ServiceParams,
        _: sdk::GetTaskPushNotificationConfigRequest,
    ) -> Result<sdk::TaskPushNotificationConfig, A2AError> {
        Err(A2AError::push_notification_not_supported())
    }

    async fn list_push_configs(
        &self,
        _: &ServiceParams,
        _: sdk::ListTaskPushNotificationConfigsRequest,
    ) -> Result<sdk::ListTaskPushNotificationConfigsResponse, A2AError> {
        Err(A2AError::push_notification_not_supported())
    }

    async fn delete_push_config(
        &self,
        _: &ServiceParams,
        _: sdk::DeleteTaskPushNotificationConfigRequest,
    ) -> Result<(), A2AError> {
        Err(A2AError::push_notification_not_supported())
    }

    async fn get_extended_agent_card(
        &self,
        _: &ServiceParams,
        _: sdk::GetExtendedAgentCardRequest,
    ) -> Result<sdk::AgentCard, A2AError> {
        Err(A2AError::extended_card_not_configured())
    }
}
