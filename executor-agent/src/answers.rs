//! A person's answer on a saga's task (docs/security.md): only an approver answers, and an
//! approval names what it approves — the saga, the step and the SHA-256 of the step's
//! arguments as they will be sent, shown on the task while it waits — with an expiry.
//! Everything here is checked before the answer is recorded on the task, so a refused
//! answer changes nothing; the engine checks the approval's binding once more when it
//! applies it (`saga::approval`).

use agent_host::sdk::{A2AError, Message, PartContent, Task, TaskState};
use serde::Deserialize;
use serde_json::Value;

use crate::saga::{Approval, Decider, Resolution, Withdrawal};

/// The caller is not one of the executor's approvers (a planner, for one).
pub const NOT_AN_APPROVER: &str = "NOT_AN_APPROVER";
/// An approver sent a plan: plans come from planners.
pub const NOT_A_PLANNER: &str = "NOT_A_PLANNER";
/// The message is not an answer the executor reads.
pub const RESOLUTION_INVALID: &str = "RESOLUTION_INVALID";
/// An `approve` without `approval` naming what it approves.
pub const APPROVAL_UNBOUND: &str = "APPROVAL_UNBOUND";
/// The task does not wait for an approval.
pub const NOT_AWAITING_APPROVAL: &str = "NOT_AWAITING_APPROVAL";
/// The approval names another saga, another step or other arguments.
pub const APPROVAL_MISMATCH: &str = "APPROVAL_MISMATCH";
/// The approval's `expiresAt` has passed.
pub const APPROVAL_EXPIRED: &str = "APPROVAL_EXPIRED";
/// A `withdraw` without `withdrawal` naming the approval it withdraws.
pub const WITHDRAWAL_UNBOUND: &str = "WITHDRAWAL_UNBOUND";
/// The step named has no approval waiting to be used: its call is out or made, or it was
/// never approved.
pub const NOT_WITHDRAWABLE: &str = "NOT_WITHDRAWABLE";

/// The furthest an approval's `expiresAt` may be from the moment it is sent: an approval
/// is given for the pause a person sees, not as a standing grant.
pub const MAX_APPROVAL_LIFETIME: chrono::Duration = chrono::Duration::hours(1);

/// What a message on a saga's task answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub resolution: Resolution,
    /// For `approve`: what it approves.
    pub approval: Option<Approval>,
    /// For `withdraw`: the approval it withdraws.
    pub withdrawal: Option<Withdrawal>,
}

impl Answer {
    /// Who decides, `by` the answer's sender, with what the answer names.
    pub fn decider(&self, by: String, message_id: Option<String>) -> Decider {
        Decider {
            by,
            approval: self.approval.clone(),
            withdrawal: self.withdrawal.clone(),
            message_id,
        }
    }
}

/// An approval as an approver sends it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SentApproval {
    saga_id: String,
    step_id: String,
    args_sha256: String,
    expires_at: String,
}

/// A withdrawal as an approver sends it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SentWithdrawal {
    saga_id: String,
    step_id: String,
}

/// A refusal: `CODE: reason`, one line.
fn refused(code: &str, reason: &str) -> A2AError {
    A2AError::invalid_params(format!("{code}: {reason}"))
}

/// The answer in `message`'s data part `{"resolution": …, "approval": {…}}`; `None`
/// when no data part has a `resolution`.
pub fn answer_of(message: &Message) -> Option<Result<Answer, A2AError>> {
    message.parts.iter().find_map(|p| match &p.content {
        PartContent::Data(v) => v
            .get("resolution")
            .map(|r| parse(r, v.get("approval"), v.get("withdrawal"))),
        _ => None,
    })
}

/// The answer of one data part, in the one form `spec/schemas/answer.schema.json`
/// publishes: the resolution a string, the approval a JSON object, its `expiresAt` RFC
/// 3339. serde's derive alone would also read the resolution as a one-member object
/// (`{"retry": null}`) and the approval as the array of its four values; both are
/// refused here, so the schema and this reading accept the same answers.
fn parse(
    resolution: &Value,
    approval: Option<&Value>,
    withdrawal: Option<&Value>,
) -> Result<Answer, A2AError> {
    let resolution = resolution
        .as_str()
        // The names are `Resolution`'s serde names, so the wire has one spelling of each.
        .and_then(|name| serde_json::from_value::<Resolution>(Value::from(name)).ok())
        .ok_or_else(|| {
            refused(
                RESOLUTION_INVALID,
                "resolution is not one of the strings approve, retry, resolved-manually, compensate, withdraw",
            )
        })?;
    let approval = match (resolution, approval) {
        (Resolution::Approve, None) => {
            return Err(refused(
                APPROVAL_UNBOUND,
                "an approve must carry approval {sagaId, stepId, argsSha256, expiresAt} naming what it approves (the task's status shows them)",
            ));
        }
        (Resolution::Approve, Some(sent)) => Some(approval_of(sent)?),
        (_, None) => None,
        (_, Some(_)) => {
            return Err(refused(
                RESOLUTION_INVALID,
                "only an approve carries an approval",
            ));
        }
    };
    let withdrawal = match (resolution, withdrawal) {
        (Resolution::Withdraw, Some(sent)) => Some(withdrawal_of(sent)?),
        (Resolution::Withdraw, None) => {
            return Err(refused(
                WITHDRAWAL_UNBOUND,
                "a withdraw must carry withdrawal {sagaId, stepId} naming the approval it withdraws",
            ));
        }
        (_, None) => None,
        (_, Some(_)) => {
            return Err(refused(
                RESOLUTION_INVALID,
                "only a withdraw carries a withdrawal",
            ));
        }
    };
    Ok(Answer {
        resolution,
        approval,
        withdrawal,
    })
}

fn withdrawal_of(sent: &Value) -> Result<Withdrawal, A2AError> {
    let malformed = || {
        refused(
            WITHDRAWAL_UNBOUND,
            "withdrawal must be the object {sagaId, stepId} (strings)",
        )
    };
    // Only an object, as for an approval.
    if !sent.is_object() {
        return Err(malformed());
    }
    let sent: SentWithdrawal = serde_json::from_value(sent.clone()).map_err(|_| malformed())?;
    Ok(Withdrawal {
        saga_id: sent.saga_id,
        step_id: sent.step_id,
    })
}

fn approval_of(sent: &Value) -> Result<Approval, A2AError> {
    let malformed = || {
        refused(
            APPROVAL_UNBOUND,
            "approval must be the object {sagaId, stepId, argsSha256, expiresAt} (strings; expiresAt in RFC 3339)",
        )
    };
    // Only an object: `SentApproval`'s derive would also take `[sagaId, stepId, ...]`.
    if !sent.is_object() {
        return Err(malformed());
    }
    let sent: SentApproval = serde_json::from_value(sent.clone()).map_err(|_| malformed())?;
    // The contract's date-time rule (shared with plans and mandates), not chrono's, which
    // also reads a space for `T` and U+2212 for the offset's minus.
    let expires_at = shared_types::json::parse_rfc3339(&sent.expires_at).ok_or_else(|| {
        refused(
            APPROVAL_UNBOUND,
            "approval.expiresAt is not an RFC 3339 time (e.g. 2026-11-29T10:30:00Z)",
        )
    })?;
    Ok(Approval {
        saga_id: sent.saga_id,
        step_id: sent.step_id,
        args_sha256: sent.args_sha256,
        expires_at_ms: expires_at.timestamp_millis(),
    })
}

/// Who decides, once `caller`'s `answer` on `task` is one the executor takes at
/// `now_ms`: `caller` is an approver, and an approval names the saga, the step and the
/// arguments the task waits for approval of, and has not expired.
pub fn check(
    caller: &str,
    is_approver: bool,
    task: &Task,
    answer: Answer,
    now_ms: i64,
) -> Result<Decider, A2AError> {
    if !is_approver {
        return Err(refused(
            NOT_AN_APPROVER,
            "only an approver answers a saga (approve, retry, resolved-manually, compensate); a planner never decides",
        ));
    }
    if let Some(withdrawal) = &answer.withdrawal {
        withdrawable(task, withdrawal)?;
        return Ok(answer.decider(caller.to_owned(), None));
    }
    if task.status.state != TaskState::InputRequired {
        return Err(refused(
            RESOLUTION_INVALID,
            "the saga does not wait for a person now; nothing was recorded",
        ));
    }
    let sent = resolution_name(answer.resolution);
    if let Some(offered) = offered(task)
        && !offered.contains(&sent)
    {
        return Err(refused(
            RESOLUTION_INVALID,
            &format!(
                "this pause takes {}, not {sent}; nothing was recorded",
                offered.join(" or ")
            ),
        ));
    }
    if let Some(approval) = &answer.approval {
        let Some(waiting) = awaiting_approval(task) else {
            return Err(refused(
                NOT_AWAITING_APPROVAL,
                "the task does not wait for an approval",
            ));
        };
        let same = |key: &str, sent: &str| waiting.get(key).and_then(Value::as_str) == Some(sent);
        if !same("sagaId", &approval.saga_id) || !same("stepId", &approval.step_id) {
            return Err(refused(
                APPROVAL_MISMATCH,
                "the approval names another saga or step than the one the task waits for",
            ));
        }
        if !same("argsSha256", &approval.args_sha256) {
            return Err(refused(
                APPROVAL_MISMATCH,
                "the approval's argsSha256 is not that of the arguments the step waits with",
            ));
        }
        if approval.expires_at_ms < now_ms {
            return Err(refused(APPROVAL_EXPIRED, "the approval has expired"));
        }
        if approval.expires_at_ms > now_ms.saturating_add(MAX_APPROVAL_LIFETIME.num_milliseconds())
        {
            return Err(refused(
                APPROVAL_UNBOUND,
                "approval.expiresAt is more than an hour away; an approval lasts at most an hour",
            ));
        }
    }
    Ok(answer.decider(caller.to_owned(), None))
}

/// Whether the approval `withdrawal` names may be withdrawn, as `task`'s ledger shows the
/// saga: its step is approved and not called yet, or waits to be tried again, and the latest of its approvals and
/// withdrawals is an approval. The saga checks it again when the withdrawal reaches it.
fn withdrawable(task: &Task, withdrawal: &Withdrawal) -> Result<(), A2AError> {
    let ledger = task
        .artifacts
        .iter()
        .flatten()
        .flat_map(|a| &a.parts)
        .find_map(|p| match &p.content {
            PartContent::Data(v) if v.get("steps").is_some() => Some(v),
            _ => None,
        });
    let Some(ledger) = ledger.filter(|l| l["sagaId"] == withdrawal.saga_id.as_str()) else {
        return Err(refused(
            NOT_WITHDRAWABLE,
            "the withdrawal names another saga than the task's; nothing was recorded",
        ));
    };
    let step = ledger["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["step"] == withdrawal.step_id.as_str());
    let Some(step) = step else {
        return Err(refused(
            NOT_WITHDRAWABLE,
            "the saga has no step of that id; nothing was recorded",
        ));
    };
    let unused =
        step["forward"]["state"] == "approved" || step["forward"]["state"] == "waitingRetry";
    let standing = step["decisions"]
        .as_array()
        .into_iter()
        .flatten()
        .rev()
        .find(|d| d["resolution"] == "approve" || d["resolution"] == "withdraw");
    if !unused || standing.is_none_or(|d| d["resolution"] != "approve") {
        return Err(refused(
            NOT_WITHDRAWABLE,
            "the step has no approval waiting to be used (an approval is withdrawn while its step waits to be called or tried again; its call is out or made, or it was not approved); nothing was recorded",
        ));
    }
    Ok(())
}

/// A resolution as the wire names it.
fn resolution_name(resolution: Resolution) -> String {
    serde_json::to_value(resolution)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// The resolutions the task's pause takes: `resolutions` in the data part of its
/// INPUT_REQUIRED status (`Saga::awaiting`); `None` when the status names none.
fn offered(task: &Task) -> Option<Vec<String>> {
    let message = task.status.message.as_ref()?;
    let about = message.parts.iter().find_map(|p| match &p.content {
        PartContent::Data(Value::Object(members)) => members.values().next().cloned(),
        _ => None,
    })?;
    let offered = about.get("resolutions")?.as_array()?;
    Some(
        offered
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
    )
}

/// What the task waits for approval of: the `approval` member of the data part of its
/// INPUT_REQUIRED status (`Saga::awaiting`).
pub fn awaiting_approval(task: &Task) -> Option<&Value> {
    if task.status.state != TaskState::InputRequired {
        return None;
    }
    let message = task.status.message.as_ref()?;
    message.parts.iter().find_map(|p| match &p.content {
        PartContent::Data(v) => v.get("approval"),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// `parse` of a data part, as `answer_of` calls it; the refusal's `CODE: reason`.
    fn parsed(data: &Value) -> Result<Answer, String> {
        let resolution = data.get("resolution").unwrap_or(&Value::Null);
        parse(resolution, data.get("approval"), data.get("withdrawal")).map_err(|e| e.message)
    }

    fn approve(approval: Value) -> Value {
        json!({"resolution": "approve", "approval": approval})
    }

    fn bound(expires_at: &str) -> Value {
        json!({"sagaId": "sg_1", "stepId": "s4", "argsSha256": "ab", "expiresAt": expires_at})
    }

    #[test]
    fn answers_in_their_one_form_are_read() {
        for (name, resolution) in [
            ("retry", Resolution::Retry),
            ("resolved-manually", Resolution::ResolvedManually),
            ("compensate", Resolution::Compensate),
        ] {
            let answer = parsed(&json!({ "resolution": name }));
            assert_eq!(
                answer,
                Ok(Answer {
                    resolution,
                    approval: None,
                    withdrawal: None,
                }),
                "{name}"
            );
        }
        let answer = parsed(&approve(bound("2026-11-29t11:30:00.5+01:30"))).expect("an approval");
        assert_eq!(answer.resolution, Resolution::Approve);
        assert_eq!(
            answer.approval,
            Some(Approval {
                saga_id: "sg_1".into(),
                step_id: "s4".into(),
                args_sha256: "ab".into(),
                expires_at_ms: 1_795_946_400_500,
            })
        );
    }

    #[test]
    fn a_withdrawal_names_the_approval_it_withdraws_in_its_one_form() {
        let named = json!({"sagaId": "sg_1", "stepId": "s4"});
        let answer = parsed(&json!({"resolution": "withdraw", "withdrawal": named}));
        assert_eq!(
            answer,
            Ok(Answer {
                resolution: Resolution::Withdraw,
                approval: None,
                withdrawal: Some(Withdrawal {
                    saga_id: "sg_1".into(),
                    step_id: "s4".into()
                }),
            })
        );
        let cases = [
            (json!({"resolution": "withdraw"}), WITHDRAWAL_UNBOUND),
            (
                json!({"resolution": "withdraw", "withdrawal": ["sg_1", "s4"]}),
                WITHDRAWAL_UNBOUND,
            ),
            (
                json!({"resolution": "withdraw", "withdrawal": {"sagaId": "sg_1"}}),
                WITHDRAWAL_UNBOUND,
            ),
            (
                json!({"resolution": "withdraw", "withdrawal": {"sagaId": "sg_1", "stepId": "s4", "by": "me"}}),
                WITHDRAWAL_UNBOUND,
            ),
            (
                json!({"resolution": "retry", "withdrawal": named}),
                RESOLUTION_INVALID,
            ),
        ];
        for (data, code) in cases {
            let why = parsed(&data).expect_err("refused");
            assert!(why.starts_with(&format!("{code}: ")), "{data}: {why}");
        }
    }

    #[test]
    fn answers_in_serdes_other_forms_are_refused() {
        let cases = [
            (json!({"resolution": {"retry": null}}), RESOLUTION_INVALID),
            (json!({"resolution": {"approve": null}}), RESOLUTION_INVALID),
            (json!({"resolution": ["retry"]}), RESOLUTION_INVALID),
            (
                json!({"resolution": "resolved_manually"}),
                RESOLUTION_INVALID,
            ),
            (json!({"resolution": null}), RESOLUTION_INVALID),
            (
                json!({"resolution": "retry", "approval": null}),
                RESOLUTION_INVALID,
            ),
            (
                approve(json!(["sg_1", "s4", "ab", "2026-11-29T10:30:00Z"])),
                APPROVAL_UNBOUND,
            ),
            (approve(Value::Null), APPROVAL_UNBOUND),
            (json!({"resolution": "approve"}), APPROVAL_UNBOUND),
            (approve(bound("2026-11-29 10:30:00Z")), APPROVAL_UNBOUND),
            (
                approve(bound("2026-11-29T10:30:00\u{2212}01:00")),
                APPROVAL_UNBOUND,
            ),
            (approve(bound("2026-11-29T10:30:00+0100")), APPROVAL_UNBOUND),
            (approve(bound("tomorrow")), APPROVAL_UNBOUND),
        ];
        for (data, code) in cases {
            let why = parsed(&data).expect_err("refused");
            assert!(why.starts_with(&format!("{code}: ")), "{data}: {why}");
        }
        let mut extra = bound("2026-11-29T10:30:00Z");
        extra["by"] = json!("me");
        let why = parsed(&approve(extra)).expect_err("an unknown member");
        assert!(why.starts_with("APPROVAL_UNBOUND: "), "{why}");
    }
}
