//! When the saga's authority ends (its mandate revoked or expired) and when it is told to
//! unwind. The rule: once told, **no forward attempt starts again**, at or before the
//! point of no return. Before it, the saga unwinds (once the call out answers). At it,
//! the answer of the call out decides: a success commits the saga, which finishes (its
//! remaining steps complete a commitment already made); a definite failure unwinds; an
//! unknown outcome goes to a person, who may say it happened (`resolved-manually`) or
//! did not (`compensate`), but not `retry`. Past it, nothing changes.

use super::engine::Saga;
use super::model::{Cause, Command, Ending, Forward, PauseOn, Phase, Undo};

/// What an ended mandate does to a saga, as it stands once the event was stepped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MandateEndEffect {
    /// It unwinds, or will once the call out answers.
    Unwinds,
    /// Its point of no return is out or in doubt: no attempt starts again, and its
    /// answer (or a person) decides whether it finishes or unwinds.
    HeldAtPivot,
    /// Past its point of no return (or ended): it finishes.
    Finishes,
}

impl Cause {
    /// What ended the saga's authority or started its unwind, for people.
    pub fn what_ended(self) -> &'static str {
        match self {
            Self::Failure => "a step failed",
            Self::Canceled => "the saga was canceled",
            Self::MandateExpired => "the mandate expired",
            Self::MandateRevoked => "the mandate was revoked",
        }
    }
}

impl Saga {
    /// Whether the point of no return's call took effect (it succeeded, or a person said
    /// it did): the saga is committed and finishes.
    pub(super) fn committed(&self) -> bool {
        self.spec.point_of_no_return.is_some_and(|p| {
            matches!(
                self.records[p].forward,
                Forward::Succeeded { .. } | Forward::ResolvedManually
            )
        })
    }

    /// The point of no return, if its call is out, waits to be retried or has an unknown
    /// outcome: made, but not known to have taken effect.
    fn pivot_in_doubt(&self) -> Option<usize> {
        let p = self.spec.point_of_no_return?;
        matches!(
            self.records[p].forward,
            Forward::Running { .. }
                | Forward::Verifying { .. }
                | Forward::WaitingRetry { .. }
                | Forward::Unknown { .. }
        )
        .then_some(p)
    }

    /// Whether a person may answer `retry` to the pause at forward step `step`: not once
    /// the saga was told to unwind (it waits at its point of no return, in doubt).
    pub(super) fn retry_offered(&self, step: usize) -> bool {
        self.pending_unwind.is_none() || self.spec.point_of_no_return.is_some_and(|p| step > p)
    }

    /// What an ended mandate does to the saga as it stands now.
    pub fn mandate_end_effect(&self) -> MandateEndEffect {
        if matches!(
            self.phase,
            Phase::Done {
                ending: Ending::Completed
            }
        ) || self.committed()
        {
            MandateEndEffect::Finishes
        } else if self.pivot_in_doubt().is_some() {
            MandateEndEffect::HeldAtPivot
        } else {
            MandateEndEffect::Unwinds
        }
    }

    /// The mandate ended (expired or revoked). Before the point of no return the saga
    /// unwinds; at it, nothing starts again and the call out decides (see the module);
    /// past it, or when it ends, unwinds or waits for a person about an undo already,
    /// nothing changes.
    pub(super) fn on_mandate_ended(
        &mut self,
        cause: Cause,
        what: &str,
        now_ms: i64,
        out: &mut Vec<Command>,
    ) {
        let told_already = matches!(
            self.pending_unwind,
            Some(Cause::MandateExpired | Cause::MandateRevoked)
        );
        if told_already
            || self.committed()
            || matches!(
                self.phase,
                Phase::Done { .. }
                    | Phase::Unwinding { .. }
                    | Phase::Paused {
                        on: PauseOn::Compensation { .. },
                        ..
                    }
            )
        {
            out.push(Command::Ignored {
                event: what.into(),
                why: "the saga has ended, unwinds already, was told already, or is past its pivot"
                    .into(),
            });
            return;
        }
        out.push(Command::Report {
            step: String::new(),
            what: what.into(),
        });
        let Some(p) = self.pivot_in_doubt() else {
            self.request_unwind(cause, now_ms, out);
            return;
        };
        self.pending_unwind = Some(cause);
        match self.records[p].forward {
            // Its answer decides (`on_result`): no retry follows it.
            Forward::Running { .. } | Forward::Verifying { .. } => {}
            Forward::WaitingRetry { .. } => self.forward_abandoned(p, now_ms, out),
            // Waits for a person already: asked again, without `retry`.
            _ => {
                let reason = format!(
                    "{} ({} while it waited; a retry is no longer offered)",
                    self.pause_reason(),
                    cause.what_ended()
                );
                if let Phase::Paused { reason: shown, .. } = &mut self.phase {
                    shown.clone_from(&reason);
                }
                out.push(Command::Pause { reason });
            }
        }
    }

    /// Forward step `i` will not be attempted again: the saga was told to unwind while
    /// the step waited to retry, or while its call was out when the process stopped.
    /// What its attempts did is unknown: unwind if that is still allowed, else a person
    /// decides.
    pub(super) fn forward_abandoned(&mut self, i: usize, now_ms: i64, out: &mut Vec<Command>) {
        if let Forward::WaitingRetry {
            in_doubt: false, ..
        } = self.records[i].forward
        {
            // Every attempt failed definitely: nothing of it took effect.
            let what = "retry abandoned; its attempts failed, so nothing of it took effect";
            self.forward_failed(i, "retry abandoned".into(), what.into(), now_ms, out);
            return;
        }
        let attempt = self.records[i].attempts;
        self.forward_in_doubt(i, attempt, "retry abandoned", now_ms, out);
    }

    /// Unwinds now if nothing is in flight; otherwise when the in-flight call answers.
    pub(super) fn request_unwind(&mut self, cause: Cause, now_ms: i64, out: &mut Vec<Command>) {
        let waiting_retry = self
            .records
            .iter()
            .any(|r| matches!(r.forward, Forward::WaitingRetry { .. }));
        if self.in_flight().is_some() || waiting_retry {
            self.pending_unwind = Some(cause);
        } else {
            // A step waiting for its approval, or approved and not called, did nothing.
            for record in &mut self.records {
                if matches!(
                    record.forward,
                    Forward::AwaitingApproval | Forward::Approved
                ) {
                    record.forward = Forward::Pending;
                    if record.undo == Undo::Pending {
                        record.undo = Undo::NothingToUndo;
                    }
                }
            }
            self.unwind(cause, now_ms, out);
        }
    }
}
