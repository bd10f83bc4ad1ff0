//! What a person is asked and what they decided: the arguments an approval pause binds
//! (and names by their hash), the check that an approval is for exactly those, and the
//! decisions the ledger keeps. Pure, as the rest of the engine: the time is the event's.

use serde_json::{Value, json};
use shared_types::expr::{self, EvalContext};
use shared_types::json::canonical_sha256;

use super::engine::{Saga, response_of};
use super::model::{Decider, Decision, PauseOn, Phase, Resolution, StepRecord};

impl Saga {
    /// Step `i`'s arguments bound as they are sent: from the plan, the saga's context and
    /// the earlier steps' results (which no longer change once the step is reached).
    pub(super) fn bind_forward(&self, i: usize) -> Result<Value, expr::Unresolved> {
        let spec = &self.spec;
        let step = &spec.steps[i];
        let records = &self.records;
        let lookup = |id: &str| response_of(spec, records, id);
        let ctx = EvalContext {
            saga_id: Some(&spec.saga_id),
            step_id: Some(&step.id),
            idempotency_key: Some(&step.idempotency_key),
            step_responses: Some(&lookup),
            ..EvalContext::default()
        };
        expr::bind(&step.args, &ctx)
    }

    /// The hash of the arguments step `i` waits for approval with.
    fn approved_args_sha256(&self, i: usize) -> Option<String> {
        let args = self.records.get(i)?.request.as_deref()?;
        canonical_sha256(args).ok()
    }

    /// Whether an approval of step `i` may be applied: it names this saga, this step and
    /// the hash of the arguments bound at the pause, and has not expired at `now_ms`. The
    /// executor refuses any other before it reaches the saga; this holds the engine to the
    /// same even when the saga moved between that check and the answer. A resolution
    /// without a decider comes from a journal written before approvals were bound.
    pub(super) fn approval_applies(
        &self,
        i: usize,
        decider: Option<&Decider>,
        now_ms: i64,
    ) -> Result<(), &'static str> {
        let Some(decider) = decider else {
            return Ok(());
        };
        let Some(approval) = &decider.approval else {
            return Err("it names no step and arguments");
        };
        if approval.saga_id != self.spec.saga_id || approval.step_id != self.spec.steps[i].id {
            return Err("it is for another saga or step");
        }
        if Some(&approval.args_sha256) != self.approved_args_sha256(i).as_ref() {
            return Err("it is for other arguments");
        }
        if now_ms > approval.expires_at_ms {
            return Err("it has expired");
        }
        Ok(())
    }

    /// Records on step `i` that `decider` answered `resolution` at `now_ms`.
    pub(super) fn decided(
        &mut self,
        i: usize,
        resolution: Resolution,
        decider: Option<&Decider>,
        now_ms: i64,
    ) {
        let Some(decider) = decider else {
            return;
        };
        let args_sha256 = decider.approval.as_ref().map(|a| a.args_sha256.clone());
        self.records[i].decisions.push(Decision {
            by: decider.by.clone(),
            resolution,
            at_ms: now_ms,
            args_sha256,
        });
    }

    /// What the saga waits for a person about, for the data part of its INPUT_REQUIRED
    /// status: the step, its agent and skill, and for an approval the arguments it will
    /// be called with and their `argsSha256` (what an approval must name); `None` when
    /// the saga does not wait.
    pub fn awaiting(&self) -> Option<Value> {
        let Phase::Paused { on, .. } = &self.phase else {
            return None;
        };
        let (i, kind, resolutions) = match *on {
            PauseOn::Approval { step } => (step, "approval", &["approve", "compensate"][..]),
            // Unwinding is an answer only where the engine takes it: before the point of
            // no return, or at it (a person confirming the pivot did not happen).
            PauseOn::Forward { step }
                if self.spec.point_of_no_return.is_none_or(|p| step <= p)
                    && !self.retry_offered(step) =>
            {
                // Told to unwind while in doubt: it happened, or it did not; never again.
                (step, "escalation", &["resolved-manually", "compensate"][..])
            }
            PauseOn::Forward { step } if self.spec.point_of_no_return.is_none_or(|p| step <= p) => {
                (
                    step,
                    "escalation",
                    &["retry", "resolved-manually", "compensate"][..],
                )
            }
            PauseOn::Forward { step } => (step, "escalation", &["retry", "resolved-manually"][..]),
            PauseOn::Compensation { step, .. } => {
                (step, "compensation", &["retry", "resolved-manually"][..])
            }
        };
        let step = self.spec.steps.get(i)?;
        let mut about = json!({
            "sagaId": self.spec.saga_id,
            "stepId": step.id,
            "agent": step.call.agent,
            "skill": step.call.skill,
            "resolutions": resolutions,
        });
        if kind == "approval"
            && let (Some(args), Some(sha), Value::Object(members)) = (
                self.records[i].request.as_deref(),
                self.approved_args_sha256(i),
                &mut about,
            )
        {
            members.insert("args".to_owned(), args.clone());
            members.insert("argsSha256".to_owned(), json!(sha));
        }
        Some(json!({ kind: about }))
    }
}

/// A step's decisions as the ledger shows them: who, what, when (RFC 3339).
pub(super) fn ledger_decisions(record: &StepRecord) -> Value {
    let decisions = record.decisions.iter().map(|d| {
        let at = chrono::DateTime::from_timestamp_millis(d.at_ms)
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
        let mut shown = json!({"by": d.by, "resolution": d.resolution, "at": at});
        if let (Some(sha), Value::Object(members)) = (&d.args_sha256, &mut shown) {
            members.insert("argsSha256".to_owned(), json!(sha));
        }
        shown
    });
    Value::Array(decisions.collect())
}
