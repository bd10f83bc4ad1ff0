//! The saga engine: a pure state machine. Events in (results, timers, a human's
//! resolution, cancellation, recovery), commands out (invoke, wait, report, pause,
//! finish). No I/O and no clock: the driver journals each event before feeding it and
//! performs each command, so replaying the journal rebuilds the exact state.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use shared_types::expr::{self, EvalContext};

use super::model::{
    CallOutcome, Cause, Command, Ending, Event, FailureClass, Forward, Invocation, PauseOn, Phase,
    StepRecord, Target, Timer, Undo,
};
use super::spec::{CallSpec, SagaSpec};

/// The whole state: the spec, the phase and the ledger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Saga {
    /// Shared with the journal's header, and with every copy of the saga (a view, a
    /// replay): a plan's spec is built once, when it is taken in.
    pub spec: Arc<SagaSpec>,
    pub phase: Phase,
    pub records: Vec<StepRecord>,
    /// A cancel or expiry that arrived while a call was in flight; acted on at its result.
    pub pending_unwind: Option<Cause>,
    /// Calls whose journaled intent differed from what replay derived: made again, if
    /// they are, with the journaled arguments and key, never with the derived ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pinned: Vec<Invocation>,
    /// How many events it has stepped: the place, among the saga's journaled events, of
    /// the next one (what it shows is named by it: `task_view::status_message_id`).
    #[serde(default)]
    pub events: u64,
    /// The steps whose forward calls have been made, in the order they were first made:
    /// the saga unwinds in the reverse of it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub started: Vec<usize>,
}

impl Saga {
    /// The spec, to change in a test (a copy of its own when shared).
    #[cfg(test)]
    pub fn spec_mut(&mut self) -> &mut SagaSpec {
        Arc::make_mut(&mut self.spec)
    }

    pub fn new(spec: impl Into<Arc<SagaSpec>>) -> Self {
        let spec = spec.into();
        let records = spec
            .steps
            .iter()
            .map(|s| StepRecord {
                forward: Forward::Pending,
                attempts: 0,
                request: None,
                undo: if s.compensation.is_some() {
                    Undo::Pending
                } else {
                    Undo::NotNeeded
                },
                undo_attempts: 0,
                undo_request: None,
                undo_response: None,
                decisions: Vec::new(),
                started_at_ms: None,
                undo_deadline: None,
            })
            .collect();
        Self {
            spec,
            phase: Phase::NotStarted,
            records,
            pending_unwind: None,
            pinned: Vec::new(),
            events: 0,
            started: Vec::new(),
        }
    }

    /// Whether the saga has gone past the point where it may unwind.
    pub(super) fn past_no_return(&self) -> bool {
        let Some(p) = self.spec.point_of_no_return else {
            return false;
        };
        !matches!(
            self.records[p].forward,
            Forward::Pending | Forward::AwaitingApproval | Forward::Approved
        )
    }

    /// The engine's one entry point. An event that does not apply to the saga as it
    /// stands changes nothing and is answered with `Command::Ignored`, saying why.
    pub fn step(&mut self, event: Event) -> Vec<Command> {
        self.events += 1;
        let kind = event.kind();
        let ignored = |why: &str| Command::Ignored {
            event: kind.to_owned(),
            why: why.to_owned(),
        };
        if let Some(why) = self.unknown_step(&event) {
            return vec![ignored(&why)];
        }
        let mut out = Vec::new();
        match event {
            Event::Start { now_ms } => {
                if self.phase != Phase::NotStarted {
                    out.push(ignored("the saga has started already"));
                } else {
                    let until = self.spec.expires_at_ms.saturating_sub(now_ms);
                    if until <= 0 {
                        self.finish(
                            &mut out,
                            Ending::Compensated,
                            "the mandate had expired before the saga started",
                        );
                    } else {
                        out.push(Command::StartTimer {
                            timer: Timer::MandateExpiry,
                            after_ms: until as u64,
                        });
                        self.advance(now_ms, &mut out);
                    }
                }
            }
            Event::Result {
                target,
                attempt,
                outcome,
                now_ms,
            } => {
                if self.is_out(target, attempt) {
                    self.on_result(target, attempt, outcome, now_ms, &mut out);
                } else {
                    out.push(ignored(
                        "that call is not out (a late answer, or one the saga gave up on)",
                    ));
                }
            }
            Event::TimerFired { timer, now_ms } => self.on_timer(timer, now_ms, &mut out),
            Event::Resolve {
                resolution,
                now_ms,
                decider,
            } => self.on_resolution(resolution, decider.as_ref(), now_ms, &mut out),
            Event::Cancel { now_ms } => self.on_cancel(now_ms, &mut out),
            Event::Proceed { now_ms } => self.on_proceed(now_ms, &mut out),
            Event::MandateRevoked { now_ms } => {
                self.on_mandate_ended(Cause::MandateRevoked, "mandate revoked", now_ms, &mut out)
            }
            Event::ReplayDiverged {
                target,
                attempt,
                journaled,
                derived_args,
                derived_key,
                ..
            } => self.on_divergence(
                target,
                attempt,
                *journaled,
                &derived_args,
                &derived_key,
                &mut out,
            ),
            Event::InFlightLost {
                target,
                attempt,
                now_ms,
            } => {
                if self.is_out(target, attempt) {
                    let idempotent = self.call_of(target).idempotent;
                    let verifies = self.spec.steps[target.step()].verification.is_some();
                    let lapsed = match target {
                        Target::Forward(i) => self.approval_current(i, now_ms).err(),
                        _ => None,
                    };
                    match target {
                        // Asking changes nothing: asked again.
                        Target::Verification(_) => self.invoke(target, attempt, now_ms, &mut out),
                        Target::Forward(i) if self.pending_unwind.is_some() => {
                            // The saga was told to unwind before the stop: no attempt
                            // starts again, and what the lost one did is unknown.
                            self.forward_abandoned(i, now_ms, &mut out);
                        }
                        Target::Forward(i) if lapsed.is_some() => {
                            let why = lapsed.unwrap_or_default();
                            // Sent again, the call could be the effect, which its approval
                            // no longer allows; what the lost one did is unknown.
                            let reason =
                                format!("the executor stopped during this call, and {why}");
                            self.forward_in_doubt(i, attempt, &reason, now_ms, &mut out);
                        }
                        // Same key again: the tool replays its result or does the work once.
                        _ if idempotent => self.invoke(target, attempt, now_ms, &mut out),
                        Target::Forward(i) if verifies => {
                            let reason = "the executor stopped during this call and the skill \
                                          is not idempotent";
                            self.forward_in_doubt(i, attempt, reason, now_ms, &mut out);
                        }
                        Target::Compensation(i) => {
                            let reason = "the executor stopped during this call and the skill \
                                          is not idempotent; its outcome is unknown";
                            self.compensation_in_doubt(i, attempt, reason, &mut out);
                        }
                        _ => {
                            // Never guess about a non-idempotent effect: a person decides.
                            let reason = "the executor stopped during this call and the skill \
                                          is not idempotent; its outcome is unknown";
                            self.mark_unknown(target, reason);
                            self.pause_forward_or_undo(target, reason, &mut out);
                        }
                    }
                } else {
                    out.push(ignored("that call is not out"));
                }
            }
        }
        out
    }

    /// The call `target` was out when the process stopped, and nobody knows what it did.
    pub(super) fn mark_unknown(&mut self, target: Target, reason: &str) {
        let reason = reason.to_owned();
        match target {
            Target::Verification(i) if self.verifying_undo(i) => {
                self.records[i].undo = Undo::DeadLettered { reason }
            }
            Target::Forward(i) | Target::Verification(i) => {
                self.records[i].forward = Forward::Unknown { reason }
            }
            Target::Compensation(i) => self.records[i].undo = Undo::DeadLettered { reason },
        }
    }

    /// Pins the journaled call, and stops the saga for a person (unless it has ended or
    /// waits for one already): the call out, if any, has an unknown outcome.
    fn on_divergence(
        &mut self,
        target: Target,
        attempt: u32,
        journaled: Invocation,
        derived_args: &Value,
        derived_key: &str,
        out: &mut Vec<Command>,
    ) {
        let step = target.step();
        if step >= self.records.len() {
            return; // not a step of this saga: nothing to pin
        }
        if let Target::Forward(i) = target {
            self.records[i].request = Some(Arc::new(journaled.args.clone()));
        }
        let reason = format!(
            "after a restart, replay derived call {} (attempt {attempt}) otherwise than its \
             journal: journaled {} under key {}, derived now {} under key {derived_key}; the \
             journaled call is what is sent again, if it is",
            journaled.call.skill, journaled.args, journaled.idempotency_key, derived_args,
        );
        self.pinned.retain(|p| p.target != target);
        self.pinned.push(journaled);
        if matches!(self.phase, Phase::Done { .. } | Phase::Paused { .. }) {
            return;
        }
        let stopped_on = match self.in_flight() {
            Some((running, _)) => {
                self.mark_unknown(running, &reason);
                running
            }
            None => target,
        };
        self.pause_forward_or_undo(stopped_on, &reason, out);
    }

    fn call_of(&self, target: Target) -> &CallSpec {
        match target {
            Target::Forward(i) => &self.spec.steps[i].call,
            Target::Compensation(i) => match &self.spec.steps[i].compensation {
                Some(c) => &c.call,
                None => &self.spec.steps[i].call,
            },
            Target::Verification(i) => {
                let step = &self.spec.steps[i];
                let verification = if self.verifying_undo(i) {
                    step.compensation
                        .as_ref()
                        .and_then(|c| c.verification.as_ref())
                } else {
                    step.verification.as_ref()
                };
                verification.map_or(&step.call, |v| &v.call)
            }
        }
    }

    /// Whether step `i`'s call being verified is its compensation (else its forward call).
    pub(super) fn verifying_undo(&self, i: usize) -> bool {
        matches!(self.records[i].undo, Undo::Verifying { .. })
    }
}

/// Reports a retry and asks for the timer that triggers it: the capped backoff after
/// `attempt` (the driver adds jitter below the cap).
fn retry_later(
    target: Target,
    attempt: u32,
    call: &CallSpec,
    step: String,
    what: String,
    out: &mut Vec<Command>,
) {
    out.push(Command::Report { step, what });
    out.push(Command::StartTimer {
        timer: Timer::Retry {
            target,
            attempt: attempt + 1,
        },
        after_ms: call.retry.backoff_cap_ms(attempt),
    });
}

/// An earlier step's result, for `$steps.<id>.response.body` bindings.
pub(super) fn response_of<'a>(
    spec: &'a SagaSpec,
    records: &'a [StepRecord],
    id: &str,
) -> Option<&'a Value> {
    let i = spec.steps.iter().position(|s| s.id == id)?;
    match &records[i].forward {
        Forward::Succeeded { response, .. } => Some(response.as_ref()),
        _ => None,
    }
}

impl Saga {
    /// Binds the arguments and emits the invocation.
    pub(super) fn invoke(
        &mut self,
        target: Target,
        attempt: u32,
        now_ms: i64,
        out: &mut Vec<Command>,
    ) {
        let (i, forward) = match target {
            Target::Forward(i) => (i, true),
            Target::Compensation(i) => (i, false),
            Target::Verification(i) if self.verifying_undo(i) => {
                let reason = match &self.records[i].undo {
                    Undo::Verifying { reason, .. } => reason.clone(),
                    _ => String::new(),
                };
                self.compensation_in_doubt(i, attempt, &reason, out);
                return;
            }
            Target::Verification(i) => {
                // Asked (again) as a call in doubt is: `forward_in_doubt`.
                let reason = match &self.records[i].forward {
                    Forward::Verifying { reason, .. } => reason.clone(),
                    _ => String::new(),
                };
                self.forward_in_doubt(i, attempt, &reason, now_ms, out);
                return;
            }
        };
        let spec = &self.spec;
        let step = &spec.steps[i];
        let records = &self.records;
        let lookup = |id: &str| response_of(spec, records, id);
        let bound = if forward {
            self.bind_forward(i)
                .map(|args| (args, step.idempotency_key.clone(), step.call.clone()))
        } else {
            let Some(comp) = &step.compensation else {
                return;
            };
            let record = &self.records[i];
            let (template, response) = match &record.forward {
                Forward::Succeeded { response, .. } => (Some(&comp.args), Some(response.as_ref())),
                _ => (comp.args_when_unknown.as_ref(), None),
            };
            match template {
                None => Err(expr::Unresolved {
                    expr: "argsWhenUnknown".into(),
                    reason: "the outcome is unknown and no argsWhenUnknown is declared".into(),
                }),
                Some(template) => {
                    let ctx = EvalContext {
                        saga_id: Some(&spec.saga_id),
                        step_id: Some(&step.id),
                        idempotency_key: Some(&step.idempotency_key),
                        request_body: record.request.as_deref(),
                        response_body: response,
                        step_responses: Some(&lookup),
                    };
                    expr::bind(template, &ctx)
                        .map(|args| (args, comp.idempotency_key.clone(), comp.call.clone()))
                }
            }
        };
        // A call replay found journaled otherwise is made as journaled.
        let bound = match self.pinned.iter().find(|p| p.target == target) {
            Some(pinned) => Ok((
                pinned.args.clone(),
                pinned.idempotency_key.clone(),
                pinned.call.clone(),
            )),
            None => bound,
        };
        match bound {
            Ok((args, idempotency_key, call)) => {
                let record = &mut self.records[i];
                if forward {
                    if record.started_at_ms.is_none() {
                        self.started.push(i);
                    }
                    let record = &mut self.records[i];
                    record.forward = Forward::Running { attempt };
                    record.attempts = attempt;
                    record.started_at_ms.get_or_insert(now_ms);
                    record.request = Some(Arc::new(args.clone()));
                } else {
                    record.undo = Undo::Running { attempt };
                    record.undo_attempts = attempt;
                    record.undo_request = Some(Arc::new(args.clone()));
                }
                let what = if forward { "started" } else { "compensating" };
                out.push(Command::Report {
                    step: self.spec.steps[i].id.clone(),
                    what: format!("{what} (attempt {attempt})"),
                });
                out.push(Command::Invoke(Invocation {
                    target,
                    attempt,
                    call,
                    args,
                    idempotency_key,
                }));
            }
            Err(unresolved) => {
                let reason = format!("cannot bind arguments: {unresolved}");
                if forward {
                    // The step never ran: a definite failure with nothing to undo.
                    self.on_result(target, attempt, CallOutcome::failed(reason), now_ms, out);
                } else {
                    self.records[i].undo = Undo::Unavailable {
                        reason: reason.clone(),
                    };
                    self.pause_forward_or_undo(
                        target,
                        &format!("compensation unavailable: {reason}"),
                        out,
                    );
                }
            }
        }
    }

    fn on_result(
        &mut self,
        target: Target,
        attempt: u32,
        outcome: CallOutcome,
        now_ms: i64,
        out: &mut Vec<Command>,
    ) {
        let call = self.call_of(target).clone();
        match target {
            Target::Verification(i) => self.on_verified(i, outcome, now_ms, out),
            Target::Forward(i) => {
                let id = self.spec.steps[i].id.clone();
                // The same key again, per the skill's policy: an unknown outcome of an
                // idempotent skill, or a failure the tool (or the skill's class) says is
                // transient. No attempt starts once the saga was told to unwind (a
                // cancel, or its mandate ended while this call was out).
                let retry_after = match &outcome {
                    CallOutcome::Unknown { reason } if call.idempotent => {
                        Some(format!("retrying after: {reason}"))
                    }
                    CallOutcome::Failed {
                        reason,
                        failure: Some(FailureClass::Transient),
                    } => Some(format!("retrying after a transient failure: {reason}")),
                    _ => None,
                };
                if let Some(what) = retry_after
                    && attempt < call.retry.max_attempts
                    && self.pending_unwind.is_none()
                {
                    let in_doubt = matches!(outcome, CallOutcome::Unknown { .. });
                    self.records[i].forward = Forward::WaitingRetry { attempt, in_doubt };
                    retry_later(target, attempt, &call, id, what, out);
                    return;
                }
                match outcome {
                    CallOutcome::Succeeded { response } => {
                        self.forward_succeeded(i, response, now_ms, out);
                    }
                    CallOutcome::Failed { reason, .. } => {
                        let what = format!("failed: {reason}");
                        self.forward_failed(i, reason, what, now_ms, out);
                    }
                    CallOutcome::Unknown { reason } => {
                        self.forward_in_doubt(i, attempt, &reason, now_ms, out);
                    }
                }
            }
            Target::Compensation(i) => {
                let id = self.spec.steps[i].id.clone();
                match outcome {
                    CallOutcome::Succeeded { response } => {
                        self.records[i].undo = Undo::Done;
                        self.records[i].undo_response = Some(Arc::new(response));
                        out.push(Command::Report {
                            step: id,
                            what: "compensated".into(),
                        });
                        self.continue_unwind(now_ms, out);
                    }
                    CallOutcome::Failed { reason, failure } => {
                        let permanent = failure == Some(FailureClass::Permanent);
                        self.compensation_failed(i, attempt, &call, reason, permanent, out);
                    }
                    // The same key again only where that is safe and attempts are left.
                    CallOutcome::Unknown { reason }
                        if call.idempotent && attempt < call.retry.max_attempts =>
                    {
                        self.compensation_failed(i, attempt, &call, reason, false, out);
                    }
                    CallOutcome::Unknown { reason } => {
                        let reason = if call.idempotent {
                            format!("compensation failed {attempt} times: {reason}")
                        } else {
                            format!(
                                "compensation outcome unknown and the skill is not idempotent: {reason}"
                            )
                        };
                        self.compensation_in_doubt(i, attempt, &reason, out);
                    }
                }
            }
        }
    }

    /// Compensation `i` failed (or its outcome is unknown): tried again per its policy,
    /// unless the tool said it will fail again; then a person decides.
    fn compensation_failed(
        &mut self,
        i: usize,
        attempt: u32,
        call: &CallSpec,
        reason: String,
        permanent: bool,
        out: &mut Vec<Command>,
    ) {
        let target = Target::Compensation(i);
        let id = self.spec.steps[i].id.clone();
        if attempt < call.retry.max_attempts && !permanent {
            self.records[i].undo = Undo::WaitingRetry { attempt };
            let what = format!("compensation retrying after: {reason}");
            retry_later(target, attempt, call, id, what, out);
        } else {
            let reason = if permanent {
                format!("compensation failed for good (the tool says it will fail again): {reason}")
            } else {
                format!("compensation failed {attempt} times: {reason}")
            };
            self.records[i].undo = Undo::DeadLettered {
                reason: reason.clone(),
            };
            self.pause_forward_or_undo(target, &reason, out);
        }
    }

    /// A forward step failed for good: unwind if that is still allowed, else pause.
    pub(super) fn after_forward_failure(
        &mut self,
        i: usize,
        unknown: bool,
        reason: &str,
        now_ms: i64,
        out: &mut Vec<Command>,
    ) {
        let no_return = self.spec.point_of_no_return;
        let unwindable = match no_return {
            None => true,
            Some(p) if i < p => true,
            // The pivot itself: a definite failure left nothing done; an unknown one may have.
            Some(p) if i == p => !unknown,
            Some(_) => false,
        };
        if unwindable {
            let cause = self.pending_unwind.take().unwrap_or(Cause::Failure);
            if self.under_way_besides(Some(i)) > 0 {
                // The other branches' calls are awaited first (`advance` unwinds).
                self.pending_unwind = Some(cause);
                return;
            }
            self.unwind(cause, now_ms, out);
        } else {
            // The unwind stays pending: a person's answer must not start the call again.
            let reason = match self.pending_unwind {
                Some(cause @ (Cause::MandateRevoked | Cause::MandateExpired)) => {
                    format!(
                        "{} while this step's outcome is unknown; it is not attempted again \
                         ({reason})",
                        cause.what_ended()
                    )
                }
                _ => reason.to_owned(),
            };
            self.pause_forward_or_undo(Target::Forward(i), &reason, out);
        }
    }

    pub(super) fn pause_forward_or_undo(
        &mut self,
        target: Target,
        reason: &str,
        out: &mut Vec<Command>,
    ) {
        let forward = match target {
            Target::Forward(i) => Some(i),
            Target::Verification(i) if !self.verifying_undo(i) => Some(i),
            _ => None,
        };
        if let Some(i) = forward
            && self.pause_deferred(i, out)
        {
            return;
        }
        let (on, what) = match target {
            Target::Verification(i) if !self.verifying_undo(i) => {
                (PauseOn::Forward { step: i }, "escalated")
            }
            Target::Forward(i) => (PauseOn::Forward { step: i }, "escalated"),
            Target::Compensation(i) | Target::Verification(i) => {
                let cause = match self.phase {
                    Phase::Unwinding { cause } => cause,
                    _ => Cause::Failure,
                };
                (
                    PauseOn::Compensation { step: i, cause },
                    "escalated during compensation",
                )
            }
        };
        let i = target.step();
        let reason = format!("step {}: {reason}", self.spec.steps[i].id);
        out.push(Command::Report {
            step: self.spec.steps[i].id.clone(),
            what: what.into(),
        });
        self.phase = Phase::Paused {
            on,
            reason: reason.clone(),
        };
        out.push(Command::Pause { reason });
    }

    pub(super) fn unwind(&mut self, cause: Cause, now_ms: i64, out: &mut Vec<Command>) {
        self.phase = Phase::Unwinding { cause };
        self.continue_unwind(now_ms, out);
    }

    /// Compensates the latest step that still needs it; finishes when none is left.
    pub(super) fn continue_unwind(&mut self, now_ms: i64, out: &mut Vec<Command>) {
        let Phase::Unwinding { cause } = self.phase else {
            return;
        };
        let next = self.started.iter().rev().copied().find(|&i| {
            let r = &self.records[i];
            r.undo == Undo::Pending
                && matches!(
                    r.forward,
                    Forward::Succeeded { .. } | Forward::Unknown { .. }
                )
        });
        let Some(i) = next else {
            let (ending, reason) = match cause {
                Cause::Canceled => (
                    Ending::Canceled,
                    "canceled; every completed step was compensated",
                ),
                Cause::Failure => (
                    Ending::Compensated,
                    "a step failed; every completed step was compensated",
                ),
                Cause::MandateExpired => (
                    Ending::Compensated,
                    "the mandate expired; every completed step was compensated",
                ),
                Cause::MandateRevoked => (
                    Ending::Compensated,
                    "the mandate was revoked; every completed step was compensated",
                ),
            };
            self.finish(out, ending, reason);
            return;
        };
        if let (Some(deadline), Forward::Succeeded { .. }) =
            (&self.records[i].undo_deadline, &self.records[i].forward)
            && deadline.expired(now_ms)
        {
            // As for an undo that cannot be bound: a person decides, nothing is called.
            let reason = deadline.expiry_reason();
            self.records[i].undo = Undo::Unavailable {
                reason: reason.clone(),
            };
            self.pause_forward_or_undo(Target::Compensation(i), &reason, out);
            return;
        }
        self.invoke(Target::Compensation(i), 1, now_ms, out);
    }

    fn on_timer(&mut self, timer: Timer, now_ms: i64, out: &mut Vec<Command>) {
        match timer {
            Timer::Retry { target, attempt } => {
                let waiting = match target {
                    Target::Forward(i) => matches!(
                        self.records[i].forward,
                        Forward::WaitingRetry { attempt: waited, .. } if waited == attempt - 1
                    ),
                    Target::Compensation(i) => {
                        self.records[i].undo
                            == Undo::WaitingRetry {
                                attempt: attempt - 1,
                            }
                    }
                    // A verification is asked once: it is not retried on a timer.
                    Target::Verification(_) => false,
                };
                if waiting {
                    if let (Target::Forward(i), Some(_)) = (target, self.pending_unwind) {
                        // Told to unwind while waiting to retry: the retry never happens.
                        self.forward_abandoned(i, now_ms, out);
                        return;
                    }
                    if let Target::Forward(i) = target
                        && let Err(why) = self.approval_current(i, now_ms)
                    {
                        // Its approval lapsed or was withdrawn while it waited: not made.
                        self.approval_lapsed(i, &why, now_ms, out);
                        return;
                    }
                    self.invoke(target, attempt, now_ms, out);
                } else {
                    out.push(Command::Ignored {
                        event: "timerFired".into(),
                        why: "the retry it timed is no longer awaited".into(),
                    });
                }
            }
            Timer::ApprovalTimeout { step, round } => {
                if matches!(self.phase, Phase::Paused { on: PauseOn::Approval { step: s }, .. } if s == step)
                    && round == self.approvals_given(step)
                {
                    self.records[step].forward = Forward::Failed {
                        reason: "approval timed out".into(),
                    };
                    if self.records[step].undo == Undo::Pending {
                        self.records[step].undo = Undo::NothingToUndo;
                    }
                    out.push(Command::Report {
                        step: self.spec.steps[step].id.clone(),
                        what: "approval timed out".into(),
                    });
                    self.after_forward_failure(step, false, "approval timed out", now_ms, out);
                } else {
                    out.push(Command::Ignored {
                        event: "timerFired".into(),
                        why: "that approval no longer waits".into(),
                    });
                }
            }
            Timer::MandateExpiry => {
                self.on_mandate_ended(Cause::MandateExpired, "mandate expired", now_ms, out)
            }
        }
    }

    pub(super) fn pause_reason(&self) -> String {
        match &self.phase {
            Phase::Paused { reason, .. } => reason.clone(),
            _ => String::new(),
        }
    }

    pub(super) fn finish(&mut self, out: &mut Vec<Command>, ending: Ending, reason: &str) {
        self.phase = Phase::Done { ending };
        out.push(Command::Finish {
            ending,
            reason: reason.into(),
        });
    }
}
