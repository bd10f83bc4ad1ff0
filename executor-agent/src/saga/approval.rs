//! What a person is asked and what they decided: the arguments an approval pause binds
//! (and names by their hash), the check that an approval is for exactly those, and the
//! decisions the ledger keeps. Pure, as the rest of the engine: the time is the event's.

use std::sync::Arc;

use serde_json::{Value, json};
use shared_types::expr::{self, EvalContext};
use shared_types::json::canonical_sha256;

use super::engine::{Saga, response_of};
use super::model::{
    Command, Decider, Decision, Forward, PauseOn, Phase, Resolution, StepRecord, Target, Timer,
};

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

    /// The arguments step `i`'s next forward call is sent with: the journaled call replay
    /// pinned, if there is one (`Saga::invoke` sends that), else those bound now. What an
    /// approval is asked for and checked against, so that it names the call made.
    fn next_forward_args(&self, i: usize) -> Result<Value, expr::Unresolved> {
        let pinned = self.pinned.iter().find(|p| p.target == Target::Forward(i));
        match pinned {
            Some(pinned) => Ok(pinned.args.clone()),
            None => self.bind_forward(i),
        }
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
            expires_at_ms: decider.approval.as_ref().map(|a| a.expires_at_ms),
        });
    }

    /// Puts step `i` to a person for approval, with `reason` as the pause's: its
    /// arguments bound as they will be sent (what the approver sees and approves by their
    /// hash), and its approval timeout started. False, and nothing changed, when the step
    /// needs no approval or its arguments cannot be bound (the call then fails on its own).
    pub(super) fn ask_approval(
        &mut self,
        i: usize,
        reason: String,
        out: &mut Vec<Command>,
    ) -> bool {
        let Some(timeout) = self.spec.steps[i].approval_timeout_ms else {
            return false;
        };
        let Ok(args) = self.next_forward_args(i) else {
            return false;
        };
        self.records[i].request = Some(Arc::new(args));
        self.records[i].forward = Forward::AwaitingApproval;
        out.push(Command::StartTimer {
            timer: Timer::ApprovalTimeout {
                step: i,
                round: self.approvals_given(i),
            },
            after_ms: timeout,
        });
        self.phase = Phase::Paused {
            on: PauseOn::Approval { step: i },
            reason: reason.clone(),
        };
        out.push(Command::Pause { reason });
        true
    }

    /// How many approvals step `i` was given (each wait for one is a round).
    pub(super) fn approvals_given(&self, i: usize) -> u32 {
        let given = self.records[i].decisions.iter();
        let given = given
            .filter(|d| d.resolution == Resolution::Approve)
            .count();
        u32::try_from(given).unwrap_or(u32::MAX)
    }

    /// The approval of step `i` that stands: its latest approval, unless withdrawn since.
    fn standing_approval(&self, i: usize) -> Option<&Decision> {
        self.records[i]
            .decisions
            .iter()
            .rev()
            .find(|d| matches!(d.resolution, Resolution::Approve | Resolution::Withdraw))
    }

    /// Whether step `i` may be called at `now_ms` as far as its approval goes: it needs
    /// none, or the approval it was given still stands (not withdrawn), has not expired,
    /// and is for the arguments about to be sent. Why not, otherwise. A step approved in a
    /// journal from before approvals were bound (no decision kept) is allowed, as then.
    pub(super) fn approval_current(&self, i: usize, now_ms: i64) -> Result<(), String> {
        if self.spec.steps[i].approval_timeout_ms.is_none() {
            return Ok(());
        }
        let Some(standing) = self.standing_approval(i) else {
            return Ok(());
        };
        if standing.resolution == Resolution::Withdraw {
            return Err(format!("its approval was withdrawn by {}", standing.by));
        }
        if let Some(expires_at_ms) = standing.expires_at_ms
            && now_ms > expires_at_ms
        {
            let at = chrono::DateTime::from_timestamp_millis(expires_at_ms)
                .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
                .unwrap_or_default();
            return Err(format!("its approval by {} expired at {at}", standing.by));
        }
        if let Some(approved) = &standing.args_sha256 {
            let about_to_send = self.next_forward_args(i).ok();
            let about_to_send = about_to_send.and_then(|args| canonical_sha256(&args).ok());
            if about_to_send.as_ref() != Some(approved) {
                return Err("the arguments it would be sent are not those approved".into());
            }
        }
        Ok(())
    }

    /// Step `i`, waiting to be tried again, may not be: its approval lapsed or was
    /// withdrawn (`why`). If its last attempt failed definitely, nothing of it took
    /// effect, and it is put to a person for approval again; if its outcome is unknown,
    /// the tool is asked whether it took effect, as for any call in doubt.
    pub(super) fn approval_lapsed(
        &mut self,
        i: usize,
        why: &str,
        now_ms: i64,
        out: &mut Vec<Command>,
    ) {
        if let Forward::WaitingRetry {
            attempt,
            in_doubt: true,
        } = self.records[i].forward
        {
            let reason = format!("its retry was not made: {why}");
            self.forward_in_doubt(i, attempt, &reason, now_ms, out);
            return;
        }
        let step = &self.spec.steps[i];
        let reason = format!(
            "step {} ({}) needs approval again: {why}",
            step.id, step.call.skill
        );
        if !self.ask_approval(i, reason, out) {
            let what = format!("not called again: {why}");
            self.forward_failed(i, why.to_owned(), what, now_ms, out);
        }
    }

    /// The driver holds a slot for the approved step: it is called now if its approval
    /// still stands (it may have expired while the step waited for a slot), and asked for
    /// again otherwise (`approval_lapsed`).
    pub(super) fn on_proceed(&mut self, now_ms: i64, out: &mut Vec<Command>) {
        let approved = self
            .records
            .iter()
            .position(|r| r.forward == Forward::Approved);
        let Some(i) = approved.filter(|_| self.awaits_slot_to_call()) else {
            out.push(Command::Ignored {
                event: "proceed".into(),
                why: "no approved step waits to be called (or the saga waits for a person)".into(),
            });
            return;
        };
        match self.approval_current(i, now_ms) {
            // Asked again after a withdrawal: the attempts go on from the last.
            Ok(()) => self.invoke(
                Target::Forward(i),
                self.records[i].attempts + 1,
                now_ms,
                out,
            ),
            Err(why) => self.approval_lapsed(i, &why, now_ms, out),
        }
    }

    /// Whether step `i` is approved and waits for an approval's use: approved and not yet
    /// called, or waiting to be tried again.
    fn approval_unused(&self, i: usize) -> bool {
        matches!(
            self.records[i].forward,
            Forward::Approved | Forward::WaitingRetry { .. }
        )
    }

    /// A person withdraws the approval of a step not yet called, or waiting to be tried
    /// again: that call is not made (`approval_lapsed`). A withdrawal of any other
    /// approval (its step's call is out or made, or it was never approved) changes
    /// nothing; the executor refuses those before they reach the saga, unless it moved in
    /// between.
    pub(super) fn on_withdrawal(
        &mut self,
        decider: Option<&Decider>,
        now_ms: i64,
        out: &mut Vec<Command>,
    ) {
        let ignored = |why: &str| Command::Ignored {
            event: "resolve".into(),
            why: why.into(),
        };
        let named = decider.and_then(|d| d.withdrawal.as_ref()).and_then(|w| {
            let steps = &self.spec.steps;
            (w.saga_id == self.spec.saga_id)
                .then(|| steps.iter().position(|s| s.id == w.step_id))
                .flatten()
        });
        let Some(i) = named else {
            out.push(ignored("the withdrawal names no step of this saga"));
            return;
        };
        let standing = self.standing_approval(i).map(|d| d.resolution);
        if !self.approval_unused(i) || standing != Some(Resolution::Approve) {
            out.push(ignored(
                "the step has no approval waiting to be used: its call is out or made, or it was not approved",
            ));
            return;
        }
        self.decided(i, Resolution::Withdraw, decider, now_ms);
        let by = decider.map(|d| d.by.as_str()).unwrap_or_default();
        out.push(Command::Report {
            step: self.spec.steps[i].id.clone(),
            what: format!("approval withdrawn by {by}"),
        });
        // Told to unwind already: the retry is abandoned when its timer fires.
        if self.pending_unwind.is_none() {
            let why = format!("its approval was withdrawn by {by}");
            self.approval_lapsed(i, &why, now_ms, out);
        }
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
            "question": self.question(i, kind, resolutions),
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

impl Saga {
    /// What a waiting saga asks, in words for people (the data part beside it keeps the
    /// protocol's shape): what happened at step `i`, and what each answer `resolutions`
    /// offers does.
    fn question(&self, i: usize, kind: &str, resolutions: &[&str]) -> String {
        let step = &self.spec.steps[i];
        let (agent, skill) = (&step.call.agent, &step.call.skill);
        let reason = self.pause_reason();
        // The pause's reason names the step; the question names it already.
        let prefix = format!("step {}: ", step.id);
        let reason = reason.strip_prefix(&prefix).unwrap_or(&reason);
        let asked = match kind {
            // Asked again: the reason says why the first approval no longer holds.
            "approval" if self.approvals_given(i) > 0 => format!(
                "May {agent} run {skill} (step {}) with the arguments shown? Asked again: {reason}.",
                step.id
            ),
            "approval" => format!(
                "May {agent} run {skill} (step {}) with the arguments shown?",
                step.id
            ),
            "compensation" => {
                let undo = step.compensation.as_ref().map_or(skill, |c| &c.call.skill);
                format!(
                    "The undo of step {} ({undo} on {agent}) did not complete: {reason}.",
                    step.id
                )
            }
            _ if matches!(self.records[i].forward, Forward::Unknown { .. }) => format!(
                "Did {skill} on {agent} (step {}) take effect? Nobody knows: {reason}.",
                step.id
            ),
            _ => format!(
                "{skill} on {agent} (step {}) did not complete: {reason}.",
                step.id
            ),
        };
        let does = |resolution: &str| match (kind, resolution) {
            ("approval", "approve") => "approve to let it run",
            ("approval", "compensate") => {
                "compensate to refuse: what the saga did is undone and it ends"
            }
            ("compensation", "retry") => {
                "retry to call the undo again under the same idempotency key"
            }
            ("compensation", "resolved-manually") => {
                "resolved-manually once you have undone it by hand"
            }
            (_, "retry") => "retry to call it again under the same idempotency key",
            (_, "resolved-manually") => {
                "resolved-manually if it took effect, or once you have completed it by hand"
            }
            (_, "compensate") => {
                "compensate if it did not take effect: what the saga did is undone and it ends"
            }
            _ => "",
        };
        let answers: Vec<&str> = resolutions.iter().map(|r| does(r)).collect();
        let past =
            self.past_no_return() && kind != "approval" && !resolutions.contains(&"compensate");
        let note = if past {
            " The saga is past its point of no return: it cannot be undone, only completed."
        } else {
            ""
        };
        format!("{asked} Answer {}.{note}", answers.join(", or "))
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
