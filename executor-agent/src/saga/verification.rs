//! Asking a tool whether a call in doubt took effect. When a forward call's outcome is
//! unknown and no retry under its key will settle it (the skill is not idempotent, its
//! attempts are spent, or the saga was told to unwind), a step whose skill declares a
//! verification calls that read-only skill instead of putting the question to a person:
//! `applied` (with the response the call gave) and the step succeeded; `not-applied` and
//! it failed definitely, with nothing to undo; anything else, or the verification
//! failing, and the outcome stays unknown, as without one. The verification is a call
//! like any other for the journal: its intent is journaled before it is made, its answer
//! as the step's `Result`, and a process that stops while it is out asks again (it
//! changes nothing). Pure, as the rest of the engine.

use std::sync::Arc;

use serde_json::Value;
use shared_types::expr::{self, EvalContext};

use super::engine::Saga;
use super::model::{CallOutcome, Command, Forward, Invocation, Target, Undo};
use super::spec::VerificationSpec;

/// What a verification said about the call in doubt.
#[derive(Debug, PartialEq)]
enum Verdict {
    /// It took effect, and gave this response.
    Applied(Value),
    NotApplied,
    /// The tool could not say, or its answer could not be read: why.
    Unsettled(String),
}

/// How a compensation's dead letter ends when its verification said it did not take
/// effect (read by the metrics, which count that verdict apart).
pub const UNDO_NOT_APPLIED: &str = "verified: the compensation did not take effect";

/// The idempotency key of a verification call: its own, never the forward call's (a tool
/// replaying results by key would answer the verification with the call's result), and
/// one per attempt it verifies.
pub fn verification_key(forward_key: &str, attempt: u32) -> String {
    format!("{forward_key}:verify:{attempt}")
}

impl Saga {
    /// Forward step `i`'s attempt `attempt` has an unknown outcome that no retry under its
    /// key will settle: the tool is asked, if the step declares how; otherwise the outcome
    /// stays unknown (the saga unwinds if it still may, else a person decides).
    pub(super) fn forward_in_doubt(
        &mut self,
        i: usize,
        attempt: u32,
        reason: &str,
        now_ms: i64,
        out: &mut Vec<Command>,
    ) {
        let reason = match self.ask(
            i,
            self.verification_call(i, attempt),
            "outcome",
            reason,
            out,
        ) {
            Ok(()) => {
                self.records[i].forward = Forward::Verifying {
                    attempt,
                    reason: reason.to_owned(),
                };
                return;
            }
            Err(reason) => reason,
        };
        self.records[i].forward = Forward::Unknown {
            reason: reason.clone(),
        };
        out.push(Command::Report {
            step: self.spec.steps[i].id.clone(),
            what: format!("outcome unknown: {reason}"),
        });
        self.after_forward_failure(i, true, &reason, now_ms, out);
    }

    /// Makes `call`, the verification of step `i`'s `what` in doubt (`reason`), and says
    /// so; or why it cannot be made: the step declares none, or it cannot be bound.
    fn ask(
        &self,
        i: usize,
        call: Option<Result<Invocation, expr::Unresolved>>,
        what: &str,
        reason: &str,
        out: &mut Vec<Command>,
    ) -> Result<(), String> {
        match call {
            Some(Ok(invocation)) => {
                out.push(Command::Report {
                    step: self.spec.steps[i].id.clone(),
                    what: format!(
                        "{what} unknown ({reason}); asking {} whether it took effect",
                        invocation.call.skill
                    ),
                });
                out.push(Command::Invoke(invocation));
                Ok(())
            }
            Some(Err(unresolved)) => Err(format!(
                "{reason}; its verification cannot be bound: {unresolved}"
            )),
            None => Err(reason.to_owned()),
        }
    }

    /// The call asking whether forward step `i`'s attempt `attempt` took effect; `None`
    /// when the step declares no verification.
    pub(super) fn verification_call(
        &self,
        i: usize,
        attempt: u32,
    ) -> Option<Result<Invocation, expr::Unresolved>> {
        let step = &self.spec.steps[i];
        let verification = step.verification.as_ref()?;
        let request = self.records[i].request.as_deref();
        Some(self.asking(i, attempt, verification, &step.idempotency_key, request))
    }

    /// The call asking `verification` whether step `i`'s call under `key`, attempt
    /// `attempt`, sent with `request`, took effect: `$step.idempotencyKey` is that key.
    fn asking(
        &self,
        i: usize,
        attempt: u32,
        verification: &VerificationSpec,
        key: &str,
        request: Option<&Value>,
    ) -> Result<Invocation, expr::Unresolved> {
        let ctx = EvalContext {
            saga_id: Some(&self.spec.saga_id),
            step_id: Some(&self.spec.steps[i].id),
            idempotency_key: Some(key),
            request_body: request,
            ..EvalContext::default()
        };
        expr::bind(&verification.args, &ctx).map(|args| Invocation {
            target: Target::Verification(i),
            attempt,
            call: verification.call.clone(),
            args,
            idempotency_key: verification_key(key, attempt),
        })
    }

    /// Step `i`'s compensation, attempt `attempt`, has an unknown outcome that no retry
    /// under its key will settle (its skill is not idempotent, or its attempts are
    /// spent): the tool is asked, if the compensation skill declares how; otherwise a
    /// person decides, as without one. Asking never repeats the undo itself.
    pub(super) fn compensation_in_doubt(
        &mut self,
        i: usize,
        attempt: u32,
        reason: &str,
        out: &mut Vec<Command>,
    ) {
        let call = self.undo_verification_call(i, attempt);
        let reason = match self.ask(i, call, "compensation outcome", reason, out) {
            Ok(()) => {
                self.records[i].undo = Undo::Verifying {
                    attempt,
                    reason: reason.to_owned(),
                };
                return;
            }
            Err(reason) => reason,
        };
        self.records[i].undo = Undo::DeadLettered {
            reason: reason.clone(),
        };
        self.pause_forward_or_undo(Target::Compensation(i), &reason, out);
    }

    /// The call asking whether step `i`'s compensation, attempt `attempt`, took effect:
    /// `$step.idempotencyKey` is the compensation's own key, `$request.body` what it was
    /// sent. `None` when the compensation skill declares no verification.
    fn undo_verification_call(
        &self,
        i: usize,
        attempt: u32,
    ) -> Option<Result<Invocation, expr::Unresolved>> {
        let compensation = self.spec.steps[i].compensation.as_ref()?;
        let verification = compensation.verification.as_ref()?;
        let request = self.records[i].undo_request.as_deref();
        Some(self.asking(
            i,
            attempt,
            verification,
            &compensation.idempotency_key,
            request,
        ))
    }

    /// The verification of step `i`'s compensation answered `outcome`: applied, and the
    /// undo is done; otherwise a person decides (`retry` calls it again under its key).
    fn on_undo_verified(
        &mut self,
        i: usize,
        outcome: CallOutcome,
        now_ms: i64,
        out: &mut Vec<Command>,
    ) {
        let Undo::Verifying { reason: doubt, .. } = &self.records[i].undo else {
            return;
        };
        let doubt = doubt.clone();
        let compensation = self.spec.steps[i].compensation.as_ref();
        let schema = compensation
            .and_then(|c| c.verification.as_ref())
            .and_then(|v| v.response_schema.as_ref());
        let reason = match verdict(outcome, schema) {
            Verdict::Applied(response) => {
                self.records[i].undo = Undo::Done;
                self.records[i].undo_response = Some(Arc::new(response));
                out.push(Command::Report {
                    step: self.spec.steps[i].id.clone(),
                    what: "compensation verified: it took effect".into(),
                });
                self.continue_unwind(now_ms, out);
                return;
            }
            Verdict::NotApplied => format!("{doubt}; {UNDO_NOT_APPLIED}"),
            Verdict::Unsettled(why) => {
                format!("{doubt}; the verification did not settle it: {why}")
            }
        };
        self.records[i].undo = Undo::DeadLettered {
            reason: reason.clone(),
        };
        self.pause_forward_or_undo(Target::Compensation(i), &reason, out);
    }

    /// The verification of step `i`'s call in doubt answered `outcome`.
    pub(super) fn on_verified(
        &mut self,
        i: usize,
        outcome: CallOutcome,
        now_ms: i64,
        out: &mut Vec<Command>,
    ) {
        if matches!(self.records[i].undo, Undo::Verifying { .. }) {
            self.on_undo_verified(i, outcome, now_ms, out);
            return;
        }
        let Forward::Verifying { reason: doubt, .. } = &self.records[i].forward else {
            return;
        };
        let doubt = doubt.clone();
        let schema = self.spec.steps[i]
            .verification
            .as_ref()
            .and_then(|v| v.response_schema.as_ref());
        let id = self.spec.steps[i].id.clone();
        match verdict(outcome, schema) {
            Verdict::Applied(response) => {
                out.push(Command::Report {
                    step: id,
                    what: "verified: it took effect".into(),
                });
                self.forward_succeeded(i, response, now_ms, out);
            }
            Verdict::NotApplied => {
                let reason = format!("{doubt}; verified: it did not take effect");
                let what = "verified: it did not take effect".to_owned();
                self.forward_failed(i, reason, what, now_ms, out);
            }
            Verdict::Unsettled(why) => {
                let reason = format!("{doubt}; the verification did not settle it: {why}");
                self.records[i].forward = Forward::Unknown {
                    reason: reason.clone(),
                };
                out.push(Command::Report {
                    step: id,
                    what: format!("outcome unknown: {reason}"),
                });
                self.after_forward_failure(i, true, &reason, now_ms, out);
            }
        }
    }

    /// Forward step `i` failed definitely (`reason`), shown as `what`: nothing of it is
    /// left to undo, and the saga unwinds if it still may.
    pub(super) fn forward_failed(
        &mut self,
        i: usize,
        reason: String,
        what: String,
        now_ms: i64,
        out: &mut Vec<Command>,
    ) {
        self.records[i].forward = Forward::Failed {
            reason: reason.clone(),
        };
        if self.records[i].undo == Undo::Pending {
            self.records[i].undo = Undo::NothingToUndo;
        }
        out.push(Command::Report {
            step: self.spec.steps[i].id.clone(),
            what,
        });
        self.after_forward_failure(i, false, &reason, now_ms, out);
    }

    /// Forward step `i` took effect with `response`: its undo deadline starts, and the
    /// saga goes on.
    pub(super) fn forward_succeeded(
        &mut self,
        i: usize,
        response: Value,
        now_ms: i64,
        out: &mut Vec<Command>,
    ) {
        let step = &self.spec.steps[i];
        if step.compensation.is_some() {
            let started = self.records[i].started_at_ms.unwrap_or(now_ms);
            self.records[i].undo_deadline = Some(super::deadline::UndoDeadline::of(
                step, &response, started, now_ms,
            ));
        }
        self.records[i].forward = Forward::Succeeded {
            response: Arc::new(response),
            at_ms: now_ms,
        };
        out.push(Command::Report {
            step: step.id.clone(),
            what: "succeeded".into(),
        });
        self.advance(now_ms, out);
    }
}

/// Reads a verification's answer: `{"status": "applied", "response": …}` (the response
/// meeting `schema`, when the skill declares one), `{"status": "not-applied"}`, or
/// anything else, which settles nothing.
fn verdict(outcome: CallOutcome, schema: Option<&Value>) -> Verdict {
    let mut answer = match outcome {
        CallOutcome::Succeeded { response } => response,
        CallOutcome::Failed { reason, .. } => {
            return Verdict::Unsettled(format!("the verification failed: {reason}"));
        }
        CallOutcome::Unknown { reason } => {
            return Verdict::Unsettled(format!("the verification got no answer: {reason}"));
        }
    };
    match answer.get("status").and_then(Value::as_str) {
        Some("applied") => {
            let Some(response) = answer.get_mut("response").map(Value::take) else {
                return Verdict::Unsettled(
                    "it answered applied without the response the call gave".into(),
                );
            };
            if let Some(schema) = schema {
                match jsonschema::validator_for(schema) {
                    Ok(validator) if validator.is_valid(&response) => {}
                    Ok(_) => {
                        return Verdict::Unsettled(
                            "it answered applied with a response that does not meet the skill's outputSchema"
                                .into(),
                        );
                    }
                    Err(e) => {
                        return Verdict::Unsettled(format!(
                            "the skill's outputSchema cannot check the response: {e}"
                        ));
                    }
                }
            }
            Verdict::Applied(response)
        }
        Some("not-applied") => Verdict::NotApplied,
        Some("unknown") => Verdict::Unsettled("the tool does not know".into()),
        _ => Verdict::Unsettled(
            "it answered no status among applied, not-applied and unknown".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answered(response: Value) -> CallOutcome {
        CallOutcome::Succeeded { response }
    }

    #[test]
    fn a_verdict_is_read_from_the_status_and_the_response_meets_the_schema() {
        let schema = json!({"type": "object", "required": ["captureId"]});
        assert_eq!(
            verdict(
                answered(json!({"status": "applied", "response": {"captureId": "c1"}})),
                Some(&schema)
            ),
            Verdict::Applied(json!({"captureId": "c1"}))
        );
        assert_eq!(
            verdict(answered(json!({"status": "not-applied"})), Some(&schema)),
            Verdict::NotApplied
        );
        for unsettling in [
            json!({"status": "unknown"}),
            json!({"status": "applied"}),
            json!({"status": "applied", "response": {"other": 1}}),
            json!({"status": "maybe"}),
            json!("applied"),
            json!({}),
        ] {
            assert!(
                matches!(
                    verdict(answered(unsettling.clone()), Some(&schema)),
                    Verdict::Unsettled(_)
                ),
                "{unsettling}"
            );
        }
        assert!(matches!(
            verdict(CallOutcome::failed("503"), None),
            Verdict::Unsettled(_)
        ));
        assert!(matches!(
            verdict(
                CallOutcome::Unknown {
                    reason: "timeout".into()
                },
                None
            ),
            Verdict::Unsettled(_)
        ));
    }
}
