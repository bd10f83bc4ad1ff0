//! Following the executor's task: each status update relayed as a WORKING update on the
//! planner's own task, a dropped stream re-attached (GetTask, then SubscribeToTask), and
//! the planner's task ended as the executor's ends: COMPLETED, FAILED (with
//! `metadata.outcome` copied), CANCELED or REJECTED (with the violations). While the
//! executor's task waits for a person, the planner's task shows AUTH_REQUIRED: A2A's
//! state for a task that waits for authorization from someone other than its client.
//! The decision is an approver's, on the executor's task (a planner never decides,
//! docs/security.md), so its status names that task and where it is, and the planner
//! keeps following it and moves on when it does. INPUT_REQUIRED would invite the client
//! to answer here, which the planner refuses.
//!
//! Relayed progress gathers (`Gathered`, `--gather-progress-ms`) and goes to the planner's
//! task in one durable write, or just before whatever the planner writes next; an end
//! (its metadata and status) is one write.

use std::time::Duration;

use agent_host::TaskHandle;
use agent_host::sdk::{
    A2AError, Message, PartContent, StreamResponse, Task, TaskState, TaskStatusUpdateEvent,
};
use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::{Value, json};

use crate::agent::{
    META_EXECUTOR_STATE, META_EXECUTOR_TASK_ID, META_OUTCOME, Planner, agent_message, logged,
};

/// Consecutive failures to re-attach to the executor's task before giving up.
const MAX_REATTACH: u32 = 8;
/// Executor tasks pointing at another before the planner stops following pointers.
const MAX_POINTERS: u32 = 4;

/// How long relayed progress gathers by default: short beside a person watching, long
/// beside the steps of a saga, whose statuses then cost the planner a write or two.
pub const GATHER_PROGRESS: Duration = Duration::from_millis(100);

/// Relayed progress not yet written: it gathers from its first status for the planner's
/// `gather_progress`, then goes to the task in one durable write (subscribers still get
/// each status, in order), or before whatever the planner writes next, so nothing the
/// executor said is written out of order.
#[derive(Default)]
struct Gathered {
    statuses: Vec<(TaskState, Option<Message>)>,
    due: Option<tokio::time::Instant>,
}

impl Gathered {
    async fn relay(&mut self, task: &TaskHandle, text: String, gather: Duration) {
        self.statuses
            .push((TaskState::Working, Some(agent_message(text, None))));
        if gather.is_zero() {
            return self.write(task).await;
        }
        self.due
            .get_or_insert_with(|| tokio::time::Instant::now() + gather);
    }

    async fn write(&mut self, task: &TaskHandle) {
        self.due = None;
        let statuses = std::mem::take(&mut self.statuses);
        if !statuses.is_empty() {
            logged(task, task.set_statuses_with_artifact(None, statuses).await);
        }
    }

    /// Resolves when the gathered progress is due (never while nothing gathers).
    async fn due(&self) {
        match self.due {
            Some(due) => tokio::time::sleep_until(due).await,
            None => std::future::pending().await,
        }
    }
}

/// Whether the planner stops following at this executor state.
pub(crate) fn final_state(state: &TaskState) -> bool {
    state.is_terminal()
}

/// Whether the executor's task waits for a person.
fn waiting(state: &TaskState) -> bool {
    matches!(state, TaskState::InputRequired | TaskState::AuthRequired)
}

pub(crate) fn text_of(message: Option<&Message>) -> String {
    message
        .map(|m| {
            m.parts
                .iter()
                .filter_map(|p| match &p.content {
                    PartContent::Text(t) => Some(t.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

fn data_of(message: Option<&Message>) -> Option<Value> {
    message?.parts.iter().find_map(|p| match &p.content {
        PartContent::Data(v) => Some(v.clone()),
        _ => None,
    })
}

/// The task the executor points at from `ended`: a task REJECTED because the same plan
/// runs on that one (a plan sent again, after an unknown outcome, while the first copy
/// was still being taken in).
fn pointed_at(ended: &Task) -> Option<String> {
    if ended.status.state != TaskState::Rejected {
        return None;
    }
    let data = data_of(ended.status.message.as_ref())?;
    let existing = data.get("existingTaskId")?.as_str()?;
    (existing != ended.id).then(|| existing.to_owned())
}

/// The state's wire name (`TASK_STATE_COMPLETED`).
fn wire_name(state: &TaskState) -> Value {
    serde_json::to_value(state).unwrap_or(Value::Null)
}

/// Ends the planner's task as the executor's task `ended` stands.
pub(crate) async fn finish(planner: &Planner, task: &TaskHandle, ended: &Task) {
    finish_with(planner, task, ended, Vec::new(), None).await;
}

/// `finish`, with more metadata in the same write and `note` after the status text.
pub(crate) async fn finish_with(
    planner: &Planner,
    task: &TaskHandle,
    ended: &Task,
    extra: Vec<(String, Value)>,
    note: Option<String>,
) {
    let id = &ended.id;
    let status = &ended.status;
    let text = text_of(status.message.as_ref());
    let mut said = if text.is_empty() {
        String::new()
    } else {
        format!(": {text}")
    };
    if let Some(note) = note {
        said.push_str(&format!("\n{note}"));
    }
    let outcome = ended
        .metadata
        .as_ref()
        .and_then(|m| m.get(META_OUTCOME))
        .cloned();
    let mut metadata: Vec<(String, Value)> = outcome
        .iter()
        .map(|outcome| (META_OUTCOME.to_owned(), outcome.clone()))
        .collect();
    metadata.push((META_EXECUTOR_STATE.to_owned(), wire_name(&status.state)));
    metadata.extend(extra);
    let outcome_note = outcome
        .as_ref()
        .and_then(Value::as_str)
        .map(|o| format!(" ({o})"))
        .unwrap_or_default();
    let (state, message) = match status.state {
        TaskState::Completed => (
            TaskState::Completed,
            agent_message(format!("the executor completed its task {id}{said}"), None),
        ),
        TaskState::Failed => (
            TaskState::Failed,
            agent_message(
                format!("the executor's task {id} failed{outcome_note}{said}"),
                None,
            ),
        ),
        TaskState::Canceled => (
            TaskState::Canceled,
            agent_message(
                format!("the executor's task {id} was canceled{outcome_note}{said}"),
                None,
            ),
        ),
        TaskState::Rejected => (
            TaskState::Rejected,
            agent_message(
                format!("the executor rejected the plan (its task {id}){said}"),
                data_of(status.message.as_ref()),
            ),
        ),
        TaskState::InputRequired | TaskState::AuthRequired => {
            let url = planner.executor().url();
            let how = if text.contains("resolution") {
                String::new()
            } else {
                " with a data part {\"resolution\": \"approve\" | \"retry\" | \"resolved-manually\" | \"compensate\"}".to_owned()
            };
            (
                TaskState::AuthRequired,
                agent_message(
                    format!(
                        "waiting for an approver: the executor's task {id} at {url} needs a person's decision{said}\n\
                         An approver answers on the executor's task {id} (SendMessage{how}; `sagaplane task resolve --approver-key`). A planner never decides: this task takes no answer, and moves on when the executor's task does."
                    ),
                    // What the executor's task waits for (an approval: the step and the
                    // arguments the approver approves), as the executor shows it.
                    Some(match data_of(status.message.as_ref()) {
                        Some(awaiting) => {
                            json!({"executorTaskId": id, "executorUrl": url, "awaiting": awaiting})
                        }
                        None => json!({"executorTaskId": id, "executorUrl": url}),
                    }),
                ),
            )
        }
        _ => {
            for (key, value) in metadata {
                logged(task, task.set_metadata(&key, value).await);
            }
            return;
        }
    };
    logged(
        task,
        task.set_metadata_and_status(metadata, state, Some(message))
            .await,
    );
}

/// Follows executor task `executor_task` on `stream` (or, without one, by re-attaching)
/// until it is terminal or interrupted, relaying its progress, and returns it as it
/// ended, for the caller to end the planner's task with (`finish`) or to plan again.
/// `None` at shutdown (the task is left for `Planner::recover`) or when contact was lost
/// for good (the planner's task then ended FAILED, saying so).
pub(crate) async fn follow(
    planner: &Planner,
    task: &TaskHandle,
    executor_task: &str,
    stream: Option<BoxStream<'static, Result<StreamResponse, A2AError>>>,
) -> Option<Task> {
    let executor = planner.executor();
    let shutdown = planner.shutdown();
    let mut stream = stream;
    let mut failures: u32 = 0;
    let mut executor_task = executor_task.to_owned();
    let mut pointers: u32 = 0;
    // Whether the planner's task already shows the executor's wait for a person.
    let mut shown_waiting = false;
    let mut gathered = Gathered::default();
    loop {
        let event = match stream.as_mut() {
            Some(s) => tokio::select! {
                event = s.next() => event,
                () = gathered.due() => {
                    gathered.write(task).await;
                    continue;
                }
                _ = shutdown.cancelled() => {
                    gathered.write(task).await;
                    return None;
                }
            },
            None => None,
        };
        // Progress gathers; whatever else the planner writes goes after it.
        if let Some(Ok(StreamResponse::StatusUpdate(update))) = &event
            && !waiting(&update.status.state)
            && !final_state(&update.status.state)
        {
            failures = 0;
            shown_waiting = false;
            let text = text_of(update.status.message.as_ref());
            if !text.is_empty() {
                gathered.relay(task, text, planner.gather_progress()).await;
            }
            continue;
        }
        if !matches!(
            event,
            Some(Ok(
                StreamResponse::ArtifactUpdate(_) | StreamResponse::Message(_)
            ))
        ) {
            gathered.write(task).await;
        }
        match event {
            Some(Ok(StreamResponse::Task(t))) => {
                failures = 0;
                if final_state(&t.status.state) {
                    if let Some(next) = pointed_at(&t).filter(|_| pointers < MAX_POINTERS) {
                        pointers += 1;
                        stream = follow_instead(planner, task, &next).await;
                        executor_task = next;
                        continue;
                    }
                    return Some(t);
                }
                if waiting(&t.status.state) && !shown_waiting {
                    shown_waiting = true;
                    finish(planner, task, &t).await;
                }
            }
            Some(Ok(StreamResponse::StatusUpdate(update))) => {
                failures = 0;
                if waiting(&update.status.state) {
                    if !shown_waiting {
                        shown_waiting = true;
                        let paused = match executor.get_task(&executor_task).await {
                            Ok(t) => t,
                            Err(_) => as_updated(&executor_task, &update),
                        };
                        finish(planner, task, &paused).await;
                    }
                    continue;
                }
                // Final: the task carries what the update does not (metadata.outcome).
                let ended = match executor.get_task(&executor_task).await {
                    Ok(t) if final_state(&t.status.state) => t,
                    _ => as_updated(&executor_task, &update),
                };
                if let Some(next) = pointed_at(&ended).filter(|_| pointers < MAX_POINTERS) {
                    pointers += 1;
                    stream = follow_instead(planner, task, &next).await;
                    executor_task = next;
                    continue;
                }
                return Some(ended);
            }
            Some(Ok(_)) => {}
            Some(Err(_)) | None => {
                // The stream ended before the task did: look at the task, then follow
                // it again.
                failures += 1;
                if failures > MAX_REATTACH {
                    logged(
                        task,
                        task.set_metadata_and_status(
                            vec![(META_OUTCOME.to_owned(), json!("unknown"))],
                            TaskState::Failed,
                            Some(agent_message(
                                format!(
                                    "lost contact with the executor; its task {executor_task} at {} may still be running: follow it there",
                                    executor.url()
                                ),
                                None,
                            )),
                        )
                        .await,
                    );
                    return None;
                }
                if failures > 1 && !planner.pause(failures - 1).await {
                    return None;
                }
                match executor.get_task(&executor_task).await {
                    Ok(t) if final_state(&t.status.state) => {
                        if let Some(next) = pointed_at(&t).filter(|_| pointers < MAX_POINTERS) {
                            pointers += 1;
                            stream = follow_instead(planner, task, &next).await;
                            executor_task = next;
                            continue;
                        }
                        return Some(t);
                    }
                    Ok(t) if waiting(&t.status.state) && !shown_waiting => {
                        shown_waiting = true;
                        finish(planner, task, &t).await;
                        stream = executor.subscribe(&executor_task).await.ok();
                    }
                    Ok(_) => stream = executor.subscribe(&executor_task).await.ok(),
                    Err(e) => {
                        tracing::warn!(task = task.id(), error = %e, "cannot reach the executor");
                        stream = None;
                    }
                }
            }
        }
    }
}

/// The executor's task as a status update shows it, when the task cannot be read.
fn as_updated(executor_task: &str, update: &TaskStatusUpdateEvent) -> Task {
    Task {
        id: executor_task.to_owned(),
        context_id: update.context_id.clone(),
        status: update.status.clone(),
        artifacts: None,
        history: None,
        metadata: update.metadata.clone(),
    }
}

/// Moves the planner's task on to executor task `next`, on which the plan runs, and
/// opens a stream on it (`None`: the loop re-attaches).
async fn follow_instead(
    planner: &Planner,
    task: &TaskHandle,
    next: &str,
) -> Option<BoxStream<'static, Result<StreamResponse, A2AError>>> {
    tracing::info!(task = task.id(), executor_task = ?next, "the plan runs on another executor task: following it");
    logged(
        task,
        task.set_metadata_and_status(
            vec![(META_EXECUTOR_TASK_ID.to_owned(), json!(next))],
            TaskState::Working,
            Some(agent_message(
                format!("the executor runs the plan as its task {next}: following that task"),
                None,
            )),
        )
        .await,
    );
    planner.executor().subscribe(next).await.ok()
}
