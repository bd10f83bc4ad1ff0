//! A saga's A2A task as a view of its journal: the task as the accepting write created it
//! (the plan's message, and why it waits for a slot), then, for each journaled event in
//! order, the answer a person gave (a `resolve`) and the statuses the engine showed
//! stepping it; the ledger and the saga's metadata from the saga as replayed.
//!
//! The same journal always yields the same task: a status's message id comes from the
//! task's id and the place of its event among the saga's events (the reports name it so
//! too), its time from the event. A person's answer is shown under the id of the message
//! it came in, in the one form the contract publishes for it (its resolution, and an
//! approval's four members).
//!
//! The task's stored row is written only when its state changes, by the journal's write
//! of the step that changed it (`progress`): what a caller reads of an unfinished saga's
//! task is the stored task brought up to date here (`Executor::shown`); a finished saga's
//! task is what its finishing write stored.
//! `tests/task_views.rs` and this module's property test hold the view equal to the task
//! a saga's finishing write stores.

use std::collections::HashSet;

use agent_host::agent_message;
use agent_host::sdk::{Artifact, Message, Part, Role, Task, TaskState, TaskStatus};
use agent_host::tasks::put_artifact;
use chrono::DateTime;
use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::journal::{Entry, SagaHeader};
use crate::saga::{Command, Decider, Ending, Event, Resolution, Saga};

/// The id (and name) of the ledger artifact.
pub const LEDGER: &str = "saga-ledger";

/// The `saga-ledger` artifact the executor keeps on each saga's task.
pub fn ledger_artifact(ledger: Value) -> Artifact {
    Artifact {
        artifact_id: LEDGER.into(),
        name: Some(LEDGER.into()),
        description: Some("Per step: idempotency key, attempts, outcome, undo".into()),
        parts: vec![Part::data(ledger)],
        metadata: None,
        extensions: None,
    }
}

/// What a saga's task shows about the saga in its metadata, read from the saga's journal
/// header: the one source for a new saga and a resumed one, so that what a client sees
/// does not depend on whether the process died in between. (`outcome` joins it when the
/// saga ends other than completed, with the report of that end.)
pub fn saga_metadata(header: &SagaHeader) -> Vec<(String, Value)> {
    vec![("sagaId".to_owned(), json!(header.saga_id))]
}

/// Whether a step of the engine that showed `shown` ended the saga other than completed:
/// its task's metadata then says `outcome: compensated`.
pub fn unwound(shown: &[Command]) -> bool {
    shown
        .iter()
        .any(|c| matches!(c, Command::Finish { ending, .. } if *ending != Ending::Completed))
}

/// The task state and message a command shows (`saga`: as it stands after it). A pause
/// carries what it waits for as a data part (`Saga::awaiting`): for an approval, the
/// arguments and the `argsSha256` an approval must name.
pub fn status_of(command: &Command, saga: &Saga) -> Option<(TaskState, Option<Message>)> {
    let (state, text) = match command {
        Command::Report { step, what } => (TaskState::Working, format!("{step}: {what}")),
        Command::Pause { reason } => {
            let awaiting = saga.awaiting();
            let how = if awaiting
                .as_ref()
                .is_some_and(|a| a.get("approval").is_some())
            {
                "An approver answers with a data part {\"resolution\": \"approve\", \"approval\": {\"sagaId\", \"stepId\", \"argsSha256\", \"expiresAt\"}} naming the step and arguments in this status's data part, or {\"resolution\": \"compensate\"}".to_owned()
            } else {
                // The answers the pause takes (past the point of no return, no unwinding).
                let choices: Vec<String> = awaiting
                    .as_ref()
                    .and_then(|a| {
                        a.as_object()?
                            .values()
                            .next()?
                            .get("resolutions")?
                            .as_array()
                            .cloned()
                    })
                    .unwrap_or_default()
                    .iter()
                    .filter_map(Value::as_str)
                    .map(|r| format!("\"{r}\""))
                    .collect();
                format!(
                    "An approver answers with a data part {{\"resolution\": {}}}",
                    choices.join(" | ")
                )
            };
            let text = format!("{reason}. {how}");
            return Some((
                TaskState::InputRequired,
                Some(agent_message(text, awaiting)),
            ));
        }
        Command::Finish { ending, reason } => {
            let state = match ending {
                Ending::Completed => TaskState::Completed,
                Ending::Compensated => TaskState::Failed,
                Ending::Canceled => TaskState::Canceled,
            };
            (state, reason.clone())
        }
        _ => return None,
    };
    Some((state, Some(agent_message(text, None))))
}

/// The statuses one step of the engine showed on task `task_id` (`shown`, with the saga
/// as it stands after it), each message named as the view names it: by the step's event
/// (`Saga::events` counts it already) and its place among the statuses.
pub fn shown_statuses(
    task_id: &str,
    shown: &[Command],
    saga: &Saga,
) -> Vec<(TaskState, Option<Message>)> {
    let event = saga.events.saturating_sub(1);
    shown
        .iter()
        .filter_map(|c| status_of(c, saga))
        .enumerate()
        .map(|(n, (state, message))| {
            let message = message.map(|mut m| {
                m.message_id = status_message_id(task_id, event, n);
                m
            });
            (state, message)
        })
        .collect()
}

/// The task of the saga `header` names, from `snapshot` (its task as the accepting write
/// created it, or as it was written since) and the saga's journal `entries`, in order:
/// what the journal shows that the snapshot lacks is added to it, in journal order (each
/// message is known by its id). A journal whose events name a step the saga does not have
/// is refused (`Error::Journal`).
pub fn saga_task(snapshot: &Task, header: &SagaHeader, entries: &[Entry]) -> Result<Task> {
    Ok(view(snapshot, header, entries)?.task)
}

/// What a saga shows on its task's history, in order: a status the engine showed, or a
/// person's answer (as it came, or as the journal holds it).
#[derive(Debug, Clone, PartialEq)]
pub enum Shown {
    Status(TaskState, Option<Message>),
    Answer(Message),
}

/// A saga's task as its journal shows it, what it shows that the snapshot it was
/// derived from lacked, in order, and how many of the saga's events it shows: the
/// sequence the reports tag their events with (`agent_host::tasks::Seq`), so that a stream
/// starting from this task drops what it shows already.
pub struct View {
    pub task: Task,
    pub added: Vec<Shown>,
    pub seq: u64,
}

/// `saga_task`, with what it added to `snapshot`.
pub fn view(snapshot: &Task, header: &SagaHeader, entries: &[Entry]) -> Result<View> {
    let mut task = snapshot.clone();
    let mut added = Vec::new();
    let shown: HashSet<String> = snapshot
        .history
        .iter()
        .flatten()
        .map(|m| m.message_id.clone())
        .collect();
    let mut saga = Saga::new(header.spec.clone());
    let history = task.history.get_or_insert_with(Vec::new);
    let mut status = None;
    let mut outcome = false;
    for (seq, entry) in entries.iter().enumerate() {
        let Entry::Event(event) = entry else { continue };
        if let Some(why) = saga.unknown_step(event) {
            return Err(Error::Journal(format!(
                "saga {}: entry {} ({}): {why}",
                header.saga_id,
                seq + 1,
                event.kind()
            )));
        }
        let index = saga.events;
        if let Event::Resolve {
            resolution,
            decider: Some(decider),
            ..
        } = event
        {
            let mut message = answer_message(*resolution, decider);
            message.message_id = decider
                .message_id
                .clone()
                .unwrap_or_else(|| message_id(&header.task_id, index, "answer", 0));
            message.task_id = Some(header.task_id.clone());
            if !shown.contains(&message.message_id) {
                history.push(message.clone());
                added.push(Shown::Answer(message));
            }
        }
        let at = DateTime::from_timestamp_millis(event.now_ms());
        let commands = saga.step(event.clone());
        outcome |= unwound(&commands);
        let statuses = commands.iter().filter_map(|c| status_of(c, &saga));
        for (n, (state, message)) in statuses.enumerate() {
            let message = message.map(|mut m| {
                m.message_id = status_message_id(&header.task_id, index, n);
                m.task_id = Some(header.task_id.clone());
                m.context_id = Some(header.context_id.clone());
                m
            });
            if message
                .as_ref()
                .is_some_and(|m| !shown.contains(&m.message_id))
            {
                history.extend(message.clone());
                added.push(Shown::Status(state.clone(), message.clone()));
            }
            status = Some(TaskStatus {
                state,
                message,
                timestamp: at,
            });
        }
    }
    if let Some(status) = status {
        task.status = status;
        put_artifact(&mut task, ledger_artifact(saga.ledger()));
    }
    let metadata = task.metadata.get_or_insert_with(Default::default);
    let mut members = saga_metadata(header);
    if outcome {
        members.push(("outcome".to_owned(), json!("compensated")));
    }
    metadata.extend(members);
    Ok(View {
        task,
        added,
        seq: saga.events,
    })
}

/// The id of the `n`th status shown on task `task_id` by the `event`th event its saga
/// stepped (counted from 0, as `Saga::events` counts them): the same wherever and whenever
/// the journal is read, and whoever reports it, so that a status shown again is known.
pub fn status_message_id(task_id: &str, event: u64, n: usize) -> String {
    message_id(task_id, event, "status", n)
}

fn message_id(task_id: &str, event: u64, kind: &str, n: usize) -> String {
    uuid::Uuid::new_v5(
        &uuid::Uuid::NAMESPACE_URL,
        format!("sagaplane:task/{task_id}/event/{event}/{kind}/{n}").as_bytes(),
    )
    .to_string()
}

/// A person's answer as the contract publishes it (`spec/schemas/answer.schema.json`).
fn answer_message(resolution: Resolution, decider: &Decider) -> Message {
    let mut answer = json!({ "resolution": resolution });
    if let Some(approval) = &decider.approval {
        let expires_at = DateTime::from_timestamp_millis(approval.expires_at_ms)
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true));
        answer["approval"] = json!({
            "sagaId": approval.saga_id,
            "stepId": approval.step_id,
            "argsSha256": approval.args_sha256,
            "expiresAt": expires_at,
        });
    }
    if let Some(withdrawal) = &decider.withdrawal {
        answer["withdrawal"] = json!({
            "sagaId": withdrawal.saga_id,
            "stepId": withdrawal.step_id,
        });
    }
    Message {
        message_id: String::new(),
        context_id: None,
        task_id: None,
        role: Role::User,
        parts: vec![Part::data(answer)],
        metadata: None,
        extensions: None,
        reference_task_ids: None,
    }
}

#[cfg(test)]
mod tests;
