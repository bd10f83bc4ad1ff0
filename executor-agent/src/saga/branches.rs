//! Going forward over the plan's partial order: every step whose dependencies succeeded
//! is called, up to the saga's bound, so independent branches run at once. A plan
//! without `after` is a sequence, and runs one step at a time as it always did.
//!
//! The rule that keeps the rest of the engine sequential: **nothing but forward calls
//! runs beside forward calls**. A step that needs a person (an approval, or a failure
//! past the point of no return) and an unwind wait until no other forward step is under
//! way (a call out, a verification out, or a retry waiting): once told to unwind (a
//! definite failure, a cancel, an ended mandate), no step starts and no attempt is made
//! again, the calls out are awaited (and verified, where the step declares how), and
//! then every step that took effect is compensated, one at a time, in reverse order of
//! start (`Saga::started`).

use super::engine::Saga;
use super::model::{Command, Ending, Forward, Phase, Target};

impl Saga {
    /// Whether the call `(target, attempt)` is out: its answer is awaited.
    pub(super) fn is_out(&self, target: Target, attempt: u32) -> bool {
        self.calls_out().contains(&(target, attempt))
    }

    /// How many forward steps are under way, `besides` the one given: a call or its
    /// verification out, or a retry waiting for its timer.
    pub(super) fn under_way_besides(&self, besides: Option<usize>) -> usize {
        self.records
            .iter()
            .enumerate()
            .filter(|(i, r)| {
                Some(*i) != besides
                    && matches!(
                        r.forward,
                        Forward::Approved
                            | Forward::Running { .. }
                            | Forward::Verifying { .. }
                            | Forward::WaitingRetry { .. }
                    )
            })
            .count()
    }

    /// Whether every step step `i` waits for took effect (succeeded, or a person said so).
    fn dependencies_met(&self, i: usize) -> bool {
        self.spec.waits_for(i).into_iter().all(|d| {
            matches!(
                self.records.get(d).map(|r| &r.forward),
                Some(Forward::Succeeded { .. } | Forward::ResolvedManually)
            )
        })
    }

    /// The steps that may be called now, in plan order.
    fn ready(&self) -> Vec<usize> {
        (0..self.records.len())
            .filter(|&i| self.records[i].forward == Forward::Pending && self.dependencies_met(i))
            .collect()
    }

    /// The first step left failed or in doubt while the saga goes forward: a person
    /// decides about it once nothing else is under way.
    fn waits_for_a_person(&self) -> Option<(usize, String)> {
        self.records
            .iter()
            .enumerate()
            .find_map(|(i, r)| match &r.forward {
                Forward::Failed { reason } | Forward::Unknown { reason } => {
                    Some((i, reason.clone()))
                }
                _ => None,
            })
    }

    /// Goes forward: unwinds if told to and nothing is under way; stops for a person about
    /// a step left failed or in doubt; else calls every ready step, up to the bound (a step
    /// that needs an approval is asked for only when nothing else is under way); finishes
    /// when every step took effect.
    pub(super) fn advance(&mut self, now_ms: i64, out: &mut Vec<Command>) {
        let under_way = self.under_way_besides(None);
        if self.pending_unwind.is_some() && under_way > 0 {
            return; // the calls out are awaited first
        }
        if let Some(cause) = self.pending_unwind.take()
            && !self.past_no_return()
        {
            self.unwind(cause, now_ms, out);
            return;
        }
        if under_way == 0
            && let Some((i, reason)) = self.waits_for_a_person()
        {
            self.pause_forward_or_undo(Target::Forward(i), &reason, out);
            return;
        }
        let mut under_way = under_way;
        for i in self.ready() {
            if under_way >= self.spec.parallel_bound() {
                break;
            }
            let step = &self.spec.steps[i];
            if step.approval_timeout_ms.is_some() {
                if under_way > 0 {
                    continue; // asked once the steps under way have settled
                }
                self.phase = Phase::Forward { step: i };
                let reason = format!("step {} ({}) needs approval", step.id, step.call.skill);
                if self.ask_approval(i, reason, out) {
                    return;
                }
            }
            self.phase = Phase::Forward { step: i };
            self.invoke(Target::Forward(i), 1, now_ms, out);
            under_way = self.under_way_besides(None);
        }
        if self.under_way_besides(None) == 0
            && self.records.iter().all(|r| {
                matches!(
                    r.forward,
                    Forward::Succeeded { .. } | Forward::ResolvedManually
                )
            })
        {
            self.finish(out, Ending::Completed, "every step succeeded");
        }
    }

    /// Whether a pause about forward step `i` must wait: other forward steps are under
    /// way, and `advance` stops for it once they have settled.
    pub(super) fn pause_deferred(&self, i: usize, out: &mut Vec<Command>) -> bool {
        if self.under_way_besides(Some(i)) == 0 {
            return false;
        }
        out.push(Command::Report {
            step: self.spec.steps[i].id.clone(),
            what: "waits for a person once the steps under way have settled".into(),
        });
        true
    }
}
