//! What an agent implements to stand on the hosting layer.

use async_trait::async_trait;

use crate::sdk::{A2AError, Message, Task, TaskState};
use crate::tasks::TaskHandle;

/// How the agent answers a message.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A direct answer: no task is created.
    Message(Message),
    /// Work on a task (new, or the one the message continues); `Agent::run` follows.
    Task,
}

/// An A2A agent's behaviour. The host does the protocol, storage and streaming.
#[async_trait]
pub trait Agent: Send + Sync + 'static {
    /// Decides how to answer `message` (for `task`, when it continues one). Runs inside
    /// the request: refuse bad input here with an A2A error, before any task exists.
    async fn accept(&self, _message: &Message, _task: Option<&Task>) -> Result<Reply, A2AError> {
        Ok(Reply::Task)
    }

    /// Works on the task. Runs on its own tokio task, and may outlive the request; it
    /// reports progress through `task` and should leave the task terminal or interrupted.
    async fn run(&self, task: TaskHandle, message: Message);

    /// Cancels a task that is not terminal. The default marks it canceled at once.
    async fn cancel(&self, task: TaskHandle) -> Result<Task, A2AError> {
        task.set_status(TaskState::Canceled, None)
            .await
            .map_err(crate::Error::into_a2a)
    }
}
