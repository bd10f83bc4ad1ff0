//! What people do to a running saga: a cancel (which unwinds it, before its point of no
//! return), and the answer to a pause (an approval, a retry, a step resolved by hand, an
//! unwind). Pure, as the rest of the engine: the time is the event's.

use super::engine::Saga;
use super::model::{
    Cause, Command, Decider, Ending, Forward, PauseOn, Phase, Resolution, Target, Undo,
};

impl Saga {
    pub(super) fn on_cancel(&mut self, now_ms: i64, out: &mut Vec<Command>) {
        match self.phase {
            Phase::Done { .. } => out.push(Command::RefuseCancel {
                reason: "the saga has already ended".into(),
            }),
            // Accepted, waiting for a slot: it made no call.
            Phase::NotStarted => self.finish(
                out,
                Ending::Canceled,
                "canceled before it started: nothing ran",
            ),
            _ if self.past_no_return() => out.push(Command::RefuseCancel {
                reason: "the saga is past its pivot; it can no longer be unwound".into(),
            }),
            Phase::Unwinding { .. } => out.push(Command::Ignored {
                event: "cancel".into(),
                why: "the saga unwinds already".into(),
            }),
            _ => self.request_unwind(Cause::Canceled, now_ms, out),
        }
    }

    pub(super) fn on_resolution(
        &mut self,
        resolution: Resolution,
        decider: Option<&Decider>,
        now_ms: i64,
        out: &mut Vec<Command>,
    ) {
        if resolution == Resolution::Withdraw {
            self.on_withdrawal(decider, now_ms, out);
            return;
        }
        let Phase::Paused { on, .. } = self.phase else {
            out.push(Command::Ignored {
                event: "resolve".into(),
                why: "the saga does not wait for a person".into(),
            });
            return;
        };
        match (on, resolution) {
            (PauseOn::Approval { step }, Resolution::Approve) => {
                if let Err(why) = self.approval_applies(step, decider, now_ms) {
                    out.push(Command::Pause {
                        reason: format!(
                            "{} (the approval was not applied: {why})",
                            self.pause_reason()
                        ),
                    });
                    return;
                }
                self.decided(step, resolution, decider, now_ms);
                self.phase = Phase::Forward { step };
                // Called on `Proceed`, once the driver has a slot: until then the approval
                // may be withdrawn, and nothing of the step exists to undo.
                self.records[step].forward = Forward::Approved;
                let by = decider.map_or("a person", |d| d.by.as_str());
                out.push(Command::Report {
                    step: self.spec.steps[step].id.clone(),
                    what: format!("approved by {by}; called once the saga has a slot"),
                });
            }
            (PauseOn::Approval { step }, Resolution::Compensate) => {
                self.decided(step, resolution, decider, now_ms);
                self.request_unwind(Cause::Failure, now_ms, out)
            }
            (PauseOn::Forward { step }, Resolution::Retry) if !self.retry_offered(step) => {
                out.push(Command::Pause {
                    reason: format!(
                        "{} (a retry does not apply here: the saga was told to unwind, and no \
                         attempt of this step may start again)",
                        self.pause_reason()
                    ),
                });
            }
            (PauseOn::Forward { step }, Resolution::Retry)
                if self.records[step].forward == Forward::Approved =>
            {
                // Stopped after its approval and before its call (a replay divergence):
                // called as any approved step, only if its approval still stands.
                self.decided(step, resolution, decider, now_ms);
                self.phase = Phase::Forward { step };
                self.on_proceed(now_ms, out);
            }
            (PauseOn::Forward { step }, Resolution::Retry) => {
                self.decided(step, resolution, decider, now_ms);
                self.phase = Phase::Forward { step };
                self.invoke(
                    Target::Forward(step),
                    self.records[step].attempts + 1,
                    now_ms,
                    out,
                );
            }
            (PauseOn::Forward { step }, Resolution::ResolvedManually) => {
                self.decided(step, resolution, decider, now_ms);
                self.records[step].forward = Forward::ResolvedManually;
                if self.records[step].undo == Undo::Pending {
                    self.records[step].undo = Undo::NothingToUndo;
                }
                self.advance(now_ms, out);
            }
            (PauseOn::Forward { step }, Resolution::Compensate) => {
                // Allowed only where unwinding is: before the point of no return, or at it
                // when a person confirms the pivot did not happen.
                let allowed = self.spec.point_of_no_return.is_none_or(|p| step <= p);
                if allowed {
                    self.decided(step, resolution, decider, now_ms);
                    if step == self.spec.point_of_no_return.unwrap_or(usize::MAX) {
                        self.records[step].forward = Forward::Failed {
                            reason: "confirmed not done by a person".into(),
                        };
                        self.records[step].undo = Undo::NothingToUndo;
                    }
                    let cause = self.pending_unwind.take().unwrap_or(Cause::Failure);
                    self.unwind(cause, now_ms, out);
                } else {
                    out.push(Command::Report {
                        step: self.spec.steps[step].id.clone(),
                        what: "cannot compensate past the pivot".into(),
                    });
                    out.push(Command::Pause {
                        reason: self.pause_reason(),
                    });
                }
            }
            (PauseOn::Compensation { step, cause }, Resolution::Retry) => {
                self.decided(step, resolution, decider, now_ms);
                self.phase = Phase::Unwinding { cause };
                self.records[step].undo = Undo::Pending;
                self.invoke(Target::Compensation(step), 1, now_ms, out);
            }
            (PauseOn::Compensation { step, cause }, Resolution::ResolvedManually) => {
                self.decided(step, resolution, decider, now_ms);
                self.records[step].undo = Undo::ResolvedManually;
                self.phase = Phase::Unwinding { cause };
                self.continue_unwind(now_ms, out);
            }
            _ => out.push(Command::Pause {
                reason: format!(
                    "{} (resolution {resolution:?} does not apply here)",
                    self.pause_reason()
                ),
            }),
        }
    }
}
