//! The call a saga makes to a tool agent, as the reversibility extension's specification
//! (`spec/reversibility-v1.md` §4) puts it: one data part `{"skill", "args"}`, the saga
//! context under the extension's URI in the message's metadata, the extension activated
//! on the message, and no history asked back. The executor sends it; `sagaplane tools
//! check` sends the same, so that what it checks is what a saga will send.

use std::collections::HashMap;

use serde_json::{Value, json};
use shared_types::REVERSIBILITY_EXTENSION_URI;

use crate::sdk::{
    Message, Part, Role, SendMessageConfiguration, SendMessageRequest, new_message_id,
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
