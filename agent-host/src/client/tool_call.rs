//! The call a saga makes to a tool agent, as the reversibility extension's specification
//! (`spec/reversibility-v1.md` §4) puts it: one data part `{"skill", "args"}`, the saga
//! context under the extension's URI in the message's metadata, the extension activated
//! on the message, and no history asked back. The executor sends it; `sagaplane tools
//! check` sends the same, so that what it checks is what a saga will send; and how the
//! tool's answer settles the call (`tool_answer`), which both read the same way.

use std::collections::HashMap;

use serde_json::{Value, json};
use shared_types::{FailureClass, REVERSIBILITY_EXTENSION_URI};

use crate::error::{Error, Result};
use crate::sdk::{
    Message, Part, PartContent, Role, SendMessageConfiguration, SendMessageRequest,
    SendMessageResponse, Task, TaskState, new_message_id,
};

/// Who a call is for: the saga context it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SagaContext {
    pub saga_id: String,
    pub step_id: String,
    /// The call's `Idempotency-Key`, also sent as a header.
    pub idempotency_key: String,
    /// For a compensation, the step whose failure started the unwind.
    pub caused_by: Option<String>,
    pub compensation: bool,
}

/// The `SendMessage` request calling `skill` with `args` in `context`.
pub fn tool_call(skill: &str, args: &Value, context: &SagaContext) -> SendMessageRequest {
    let saga_context = json!({
        "sagaId": context.saga_id, "stepId": context.step_id,
        "idempotencyKey": context.idempotency_key, "causedBy": context.caused_by,
        "compensation": context.compensation,
    });
    let message = Message {
        message_id: new_message_id(),
        context_id: None,
        task_id: None,
        role: Role::User,
        parts: vec![Part::data(json!({"skill": skill, "args": args}))],
        metadata: Some(HashMap::from([(
            REVERSIBILITY_EXTENSION_URI.to_owned(),
            saga_context,
        )])),
        extensions: Some(vec![REVERSIBILITY_EXTENSION_URI.to_owned()]),
        reference_task_ids: None,
    };
    SendMessageRequest {
        message,
        // The answer is read from the task's status and artifact: its history (the call,
        // echoed, and the tool's progress) would only be decoded and dropped.
        configuration: Some(SendMessageConfiguration {
            accepted_output_modes: None,
            task_push_notification_config: None,
            history_length: Some(0),
            return_immediately: None,
        }),
        metadata: None,
        tenant: None,
    }
}

/// Error codes that prove the tool refused a call before doing anything: JSON-RPC's
/// parse error, invalid request, unknown method and invalid params; A2A's unsupported
/// operation, content type, extension and version errors; and the hosting layer's
/// unauthenticated error (the credential was refused before any handler ran: `-31401`,
/// and `401` from agents on an older hosting layer). Every other error (internal
/// errors, `-32000`-range server errors, a JSON-RPC error carried by an HTTP 5xx, which
/// the SDK's transport passes on without looking at the status) proves nothing.
const REFUSED_BEFORE_ANY_EFFECT: [i32; 10] = [
    -32700,
    -32600,
    -32601,
    -32602,
    -32004,
    -32005,
    -32008,
    -32009,
    crate::auth::UNAUTHENTICATED_CODE,
    401,
];

/// How a tool's answer settles a call (the specification's §6), before anything is
/// decided from it: the executor and `sagaplane tools check` read answers this one way.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolAnswer {
    /// `TASK_STATE_COMPLETED`: the result, the first data part of its artifacts (or of
    /// an answering message); `{}` when it has none.
    Completed(Value),
    /// `TASK_STATE_FAILED`: nothing took effect; the class the tool marked, if any.
    Failed {
        reason: String,
        marked: Option<FailureClass>,
    },
    /// Refused before anything ran (`TASK_STATE_REJECTED`, `TASK_STATE_CANCELED`, a
    /// protocol refusal, a call that could not be sent): it will be refused again.
    Refused(String),
    /// No answer that settles it (a timeout, a dropped connection, a 5xx, another error,
    /// a task still running): it may have taken effect.
    Unknown(String),
}

/// How `sent`, the outcome of sending a tool call, settles it.
pub fn tool_answer(sent: Result<SendMessageResponse>) -> ToolAnswer {
    match sent {
        Ok(SendMessageResponse::Task(task)) => task_answer(task),
        Ok(SendMessageResponse::Message(message)) => match first_data(message.parts) {
            Some(result) => ToolAnswer::Completed(result),
            None => ToolAnswer::Unknown("the tool answered with a message and no result".into()),
        },
        Err(Error::Protocol(e)) if REFUSED_BEFORE_ANY_EFFECT.contains(&e.code) => {
            ToolAnswer::Refused(format!(
                "the tool refused the call: {} ({})",
                e.message, e.code
            ))
        }
        // Refused before anything was sent (a credential that cannot be a header).
        Err(Error::Config(reason)) => {
            ToolAnswer::Refused(format!("the call could not be sent: {reason}"))
        }
        Err(e) => ToolAnswer::Unknown(e.to_string()),
    }
}

fn first_data(parts: Vec<Part>) -> Option<Value> {
    parts.into_iter().find_map(|p| match p.content {
        PartContent::Data(v) => Some(v),
        _ => None,
    })
}

/// How a tool's task settles a call.
fn task_answer(task: Task) -> ToolAnswer {
    let reason = || {
        task.status
            .message
            .as_ref()
            .and_then(|m| m.parts.iter().find_map(|p| p.as_text().map(str::to_owned)))
            .unwrap_or_else(|| format!("{:?}", task.status.state))
    };
    match task.status.state {
        TaskState::Completed => {
            let result = task
                .artifacts
                .unwrap_or_default()
                .into_iter()
                .find_map(|a| first_data(a.parts))
                .unwrap_or_else(|| json!({}));
            ToolAnswer::Completed(result)
        }
        // The class, in the status message's metadata, else in the task's.
        TaskState::Failed => {
            let ours = |metadata: Option<&HashMap<String, Value>>| {
                metadata?
                    .get(REVERSIBILITY_EXTENSION_URI)
                    .and_then(FailureClass::marked_in)
            };
            let status = task
                .status
                .message
                .as_ref()
                .and_then(|m| m.metadata.as_ref());
            ToolAnswer::Failed {
                marked: ours(status).or_else(|| ours(task.metadata.as_ref())),
                reason: reason(),
            }
        }
        TaskState::Rejected | TaskState::Canceled => ToolAnswer::Refused(reason()),
        ref other => ToolAnswer::Unknown(format!(
            "the tool's task is still {other:?} after the call's timeout"
        )),
    }
}

/// A tool's status message for a definite failure: `text`, and the `class` it states
/// under the extension's URI, if any.
pub fn failure_message(text: &str, class: Option<FailureClass>) -> Message {
    let mut message = crate::agent_message(text, None);
    if let Some(class) = class {
        message.metadata = Some(HashMap::from([(
            REVERSIBILITY_EXTENSION_URI.to_owned(),
            json!({ "failure": class }),
        )]));
    }
    message
}
