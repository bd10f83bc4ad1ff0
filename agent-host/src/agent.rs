//! What an agent implements to stand on the hosting layer.

use std::any::Any;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::sdk::{A2AError, Message, ServiceParams, Task, TaskState};
use crate::tasks::TaskHandle;

/// The header through which the authentication middleware tells the handler who called;
/// any value a client sends under this name is removed first.
pub const CALLER_HEADER: &str = "x-sagaplane-caller";

/// Task metadata: the caller that created the task, recorded by the hosting layer when
/// the agent scopes its tasks to their callers (`Agent::scopes_tasks_to_callers`).
pub const OWNER_METADATA: &str = "owner";

/// What the agent learns about the request a message came with.
#[derive(Debug, Clone, Default)]
pub struct RequestContext {
    /// Who called (the JWT issuer, the static token's name, or "anonymous").
    pub caller: String,
    /// `Idempotency-Key`, when the caller sent one.
    pub idempotency_key: Option<String>,
    /// W3C `traceparent` and `baggage`, when sent.
    pub traceparent: Option<String>,
    pub baggage: Option<String>,
    /// `A2A-Extensions`, when sent: the extensions the caller activates.
    pub extensions: Option<String>,
    /// What `Agent::accept` made of the message, for `Agent::run`.
    pub accepted: Accepted,
}

/// What `Agent::accept` made of a message that `Agent::run` needs (a plan it read and
/// verified, say), handed to `run` with the request's context so that the message is read
/// once. Empty in a context built elsewhere (a request forwarded from another replica):
/// `run` then reads the message itself. When `accept` keeps something for a message that
/// opens a new task, `run` gets that message without its parts: they move to the task's
/// history rather than being copied there (a plan can be most of a request).
#[derive(Clone, Default)]
pub struct Accepted(Arc<Mutex<Option<Box<dyn Any + Send>>>>);

impl Accepted {
    /// Keeps `value` for `run` (replacing what was kept).
    pub fn keep<T: Any + Send>(&self, value: T) {
        if let Ok(mut kept) = self.0.lock() {
            *kept = Some(Box::new(value));
        }
    }

    /// Whether `accept` kept something, not taken yet.
    pub fn holds(&self) -> bool {
        self.0.lock().is_ok_and(|kept| kept.is_some())
    }

    /// Takes what `accept` kept, if it is a `T` (anything else stays).
    pub fn take<T: Any>(&self) -> Option<T> {
        let mut kept = self.0.lock().ok()?;
        if !kept.as_ref()?.is::<T>() {
            return None;
        }
        kept.take()?.downcast::<T>().ok().map(|value| *value)
    }
}

impl std::fmt::Debug for Accepted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kept = self.0.lock().map(|k| k.is_some()).unwrap_or(false);
        f.debug_struct("Accepted").field("kept", &kept).finish()
    }
}

impl RequestContext {
    /// Reads the context from the request headers the SDK hands over (lower-cased names).
    pub fn from_params(params: &ServiceParams) -> Self {
        let first = |name: &str| params.get(name).and_then(|v| v.first()).cloned();
        Self {
            caller: first(CALLER_HEADER).unwrap_or_else(|| "anonymous".into()),
            idempotency_key: first("idempotency-key"),
            traceparent: first("traceparent"),
            baggage: first("baggage"),
            extensions: first("a2a-extensions"),
            accepted: Accepted::default(),
        }
    }
}

/// How the agent answers a message.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A direct answer: no task is created.
    Message(Message),
    /// Work on a task (new, or the one the message continues); `Agent::run` follows.
    Task,
    /// Work on the task the message continues, without recording the message on it
    /// here: the agent's run records it, with the write that takes it in (the executor:
    /// the journal write of the saga's step that takes a person's answer, by whichever
    /// replica drives the saga). `Agent::run` follows. For a message that starts a task,
    /// the same as `Task`.
    RecordedByRun,
    /// Work on a new task that `Agent::run` creates with its first durable write: a
    /// write of the agent's own that carries it (`TaskHandle::create_written_by`), or
    /// any change of the task. The request is answered once the task exists; a run
    /// that ends before it does answers the request with an error, and nothing was
    /// promised; a run that finds the same work under way on another task answers the
    /// request with that task instead (`TaskHandle::answered_by`), as `Existing` does. For
    /// a message that continues a task, the same as `Task`.
    CreatedByRun,
    /// The message repeats one already handled: answer with that task, start nothing.
    Existing { task_id: String },
}

/// An A2A agent's behaviour. The host does the protocol, storage and streaming.
#[async_trait]
pub trait Agent: Send + Sync + 'static {
    /// Decides how to answer `message` (for `task`, when it continues one). Runs inside
    /// the request: refuse bad input here with an A2A error, before any task exists.
    async fn accept(
        &self,
        _ctx: &RequestContext,
        _message: &Message,
        _task: Option<&Task>,
    ) -> Result<Reply, A2AError> {
        Ok(Reply::Task)
    }

    /// Works on the task. Runs on its own tokio task, and may outlive the request; it
    /// reports progress through `task` and should leave the task terminal or interrupted.
    async fn run(&self, ctx: RequestContext, task: TaskHandle, message: Message);

    /// Whether each task belongs to the caller that created it: the hosting layer then
    /// records that caller in the task's metadata (`OWNER_METADATA`) and answers every
    /// other caller's GetTask, SubscribeToTask, CancelTask and message continuing the
    /// task with TaskNotFound, and lists only the caller's own tasks. The default: every
    /// authenticated caller sees every task.
    fn scopes_tasks_to_callers(&self) -> bool {
        false
    }

    /// Whether `caller` sees every task although the agent scopes tasks to their callers
    /// (the executor's approvers, who answer any saga that waits for a person). Such a
    /// caller also sees tasks that have no owner. The default: nobody.
    fn sees_every_task(&self, _caller: &str) -> bool {
        false
    }

    /// The task as callers read it (GetTask, ListTasks, the task a SubscribeToTask or a
    /// message continuing it starts from), from `stored`, the task as the store holds it:
    /// an agent whose tasks are views of a record of its own (the executor's journal)
    /// brings them up to date here, and says how far into that record the view reaches
    /// (`Viewed::seq`), as its writes' events do. The default: as stored.
    async fn shown(&self, stored: Task) -> Viewed {
        Viewed::stored(stored)
    }

    /// Cancels a task that is not terminal. The default marks it canceled at once.
    async fn cancel(&self, task: TaskHandle) -> Result<Task, A2AError> {
        task.set_status(TaskState::Canceled, None)
            .await
            .map_err(crate::Error::into_a2a)
    }
}

/// A task as callers read it (`Agent::shown`).
#[derive(Debug, Clone)]
pub struct Viewed {
    pub task: Task,
    /// The sequence of its agent's record the view reaches (`tasks::Seq`), when the
    /// agent keeps one: a stream starting from it drops the events of writes it reaches.
    pub seq: Option<crate::tasks::Seq>,
}

impl Viewed {
    /// A task that is its own record, as stored.
    pub fn stored(task: Task) -> Self {
        Self { task, seq: None }
    }
}

/// A message from an agent: a text part and, optionally, a data part.
pub fn agent_message(text: impl Into<String>, data: Option<serde_json::Value>) -> Message {
    let mut parts = vec![crate::sdk::Part::text(text.into())];
    if let Some(data) = data {
        parts.push(crate::sdk::Part::data(data));
    }
    Message {
        message_id: crate::sdk::new_message_id(),
        context_id: None,
        task_id: None,
        role: crate::sdk::Role::Agent,
        parts,
        metadata: None,
        extensions: None,
        reference_task_ids: None,
    }
}

/// A caller's request to an agent: a text part and a data part (each if given), on
/// `task_id` if given (an answer on a task that waits for one), with no configuration:
/// answered once the task ends or stops for input.
pub fn user_request(
    text: Option<&str>,
    data: Option<serde_json::Value>,
    task_id: Option<&str>,
) -> crate::sdk::SendMessageRequest {
    let mut parts = Vec::new();
    if let Some(text) = text {
        parts.push(crate::sdk::Part::text(text));
    }
    if let Some(data) = data {
        parts.push(crate::sdk::Part::data(data));
    }
    crate::sdk::SendMessageRequest {
        message: Message {
            message_id: crate::sdk::new_message_id(),
            context_id: None,
            task_id: task_id.map(str::to_owned),
            role: crate::sdk::Role::User,
            parts,
            metadata: None,
            extensions: None,
            reference_task_ids: None,
        },
        configuration: None,
        metadata: None,
        tenant: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_accept_keeps_reaches_run_once_and_only_as_its_own_type() {
        let accepting = RequestContext::default();
        accepting.accepted.keep(String::from("a verified plan"));
        // `run` gets the context itself, moved after `accept` saw it by reference.
        let running = accepting.clone();
        assert_eq!(running.accepted.take::<u32>(), None, "not a u32");
        assert_eq!(
            running.accepted.take::<String>().as_deref(),
            Some("a verified plan")
        );
        assert_eq!(running.accepted.take::<String>(), None, "taken once");
        assert_eq!(
            format!("{:?}", running.accepted),
            "Accepted { kept: false }"
        );
    }
}
