//! The person the demo plays: the approver who answers a saga waiting on the executor.

use agent_host::sdk::Task;
use serde_json::{Value, json};

use crate::commands::{Answer, answer_for};

/// The answer to executor task `task`, which waits for a person, and how the demo names
/// it: an approval, bound to the step and the arguments the task shows, when it waits
/// for one; otherwise, for an escalation, `resolved-manually`.
pub fn answer(task: &Task) -> (Value, &'static str) {
    let approve = Answer {
        resolution: "approve",
        step: None,
    };
    match answer_for(task, approve, 300) {
        Ok(approval) => (approval, "approve (bound to the step and arguments shown)"),
        Err(_) => (
            json!({"resolution": "resolved-manually"}),
            "resolved-manually",
        ),
    }
}
