//! What the saga shows without changing: its ledger (the `saga-ledger` artifact), the
//! call out, the undo handles still open, the step whose failure started the unwind, and
//! whether an event can be about it at all. Read by the driver, the task's progress and
//! view, and the metrics; the state machine itself is `engine.rs`.

use serde_json::{Value, json};

use super::engine::Saga;
use super::model::{Event, Forward, Phase, Target, Timer, Undo};

impl Saga {
    /// What an ended saga spent: each step that spends and took effect (or may have), unless
    /// its compensation undid it. A step whose outcome nobody knows counts as spent.
    pub fn spent_minor(&self) -> u64 {
        let Some(hold) = &self.spec.mandate else {
            return 0;
        };
        self.records
            .iter()
            .zip(&hold.spend_minor)
            .filter(|(record, _)| {
                let took_effect = !matches!(
                    record.forward,
                    Forward::Pending
                        | Forward::AwaitingApproval
                        | Forward::Approved
                        | Forward::Failed { .. }
                );
                let undone = matches!(record.undo, Undo::Done | Undo::NothingToUndo);
                took_effect && !undone
            })
            .fold(0, |total, (_, spend)| total.saturating_add(*spend))
    }

    /// The undo handles still open, as (step index, deadline in ms): steps that succeeded
    /// and whose undo is still to run (pending, under way, or dead-lettered and waiting for
    /// a person to retry it), while the saga can still unwind: also while its point of no
    /// return's call is out or in doubt (it may yet unwind). None once it has ended or is
    /// committed: those undos will never be posted back.
    pub fn open_undo_handles(&self) -> Vec<(usize, Option<i64>)> {
        if matches!(self.phase, Phase::Done { .. }) || self.committed() {
            return Vec::new();
        }
        self.records
            .iter()
            .enumerate()
            .filter(|(_, r)| {
                matches!(r.forward, Forward::Succeeded { .. })
                    && matches!(
                        r.undo,
                        Undo::Pending
                            | Undo::Running { .. }
                            | Undo::WaitingRetry { .. }
                            | Undo::Verifying { .. }
                            | Undo::DeadLettered { .. }
                    )
            })
            .map(|(i, r)| (i, r.undo_deadline.as_ref().and_then(|d| d.at_ms)))
            .collect()
    }

    /// Why `event` cannot be about this saga at all (it names a step the saga does not
    /// have), if it cannot: from a journal, that journal is inconsistent.
    pub fn unknown_step(&self, event: &Event) -> Option<String> {
        let steps = self.spec.steps.len();
        let index = |target: &Target| target.step();
        let named: Vec<usize> = match event {
            Event::Result { target, .. } | Event::InFlightLost { target, .. } => {
                vec![index(target)]
            }
            Event::ReplayDiverged {
                target, journaled, ..
            } => vec![index(target), index(&journaled.target)],
            Event::TimerFired {
                timer: Timer::Retry { target, .. },
                ..
            } => vec![index(target)],
            Event::TimerFired {
                timer: Timer::ApprovalTimeout { step, .. },
                ..
            } => vec![*step],
            _ => Vec::new(),
        };
        named.into_iter().find(|i| *i >= steps).map(|i| {
            format!(
                "the event names step {} of a saga of {steps} step(s)",
                i + 1
            )
        })
    }

    /// The step whose failure started the unwind, if one did (for `sagaplane.caused-by`).
    pub fn failed_step(&self) -> Option<&str> {
        self.spec
            .steps
            .iter()
            .zip(&self.records)
            .find(|(_, r)| matches!(r.forward, Forward::Failed { .. } | Forward::Unknown { .. }))
            .map(|(s, _)| s.id.as_str())
    }

    /// The first call out, if any (in plan order).
    pub fn in_flight(&self) -> Option<(Target, u32)> {
        self.calls_out().first().copied()
    }

    /// Whether a step is approved and not called yet, and the saga goes on (it neither
    /// ended nor waits for a person): the driver sends `Event::Proceed` once it holds a
    /// slot.
    pub fn awaits_slot_to_call(&self) -> bool {
        !matches!(self.phase, Phase::Paused { .. } | Phase::Done { .. })
            && self.records.iter().any(|r| r.forward == Forward::Approved)
    }

    /// The calls out, whose answers are awaited, in plan order: forward calls of branches
    /// under way at once, or one compensation or verification.
    pub fn calls_out(&self) -> Vec<(Target, u32)> {
        self.records
            .iter()
            .enumerate()
            .filter_map(|(i, r)| match (&r.forward, &r.undo) {
                (Forward::Running { attempt }, _) => Some((Target::Forward(i), *attempt)),
                (Forward::Verifying { attempt, .. }, _) => {
                    Some((Target::Verification(i), *attempt))
                }
                (_, Undo::Running { attempt }) => Some((Target::Compensation(i), *attempt)),
                (_, Undo::Verifying { attempt, .. }) => Some((Target::Verification(i), *attempt)),
                _ => None,
            })
            .collect()
    }

    /// The `saga-ledger` artifact: per step, key, attempts, outcome and undo.
    pub fn ledger(&self) -> Value {
        let open: Vec<usize> = self.open_undo_handles().iter().map(|(i, _)| *i).collect();
        let steps: Vec<Value> = (0..self.records.len())
            .map(|i| {
                let mut entry = self.ledger_step(i);
                // People are shown a deadline while the undo it bounds may still be run.
                if let Some(Value::Object(deadline)) = entry.get_mut("undoDeadline") {
                    deadline.insert("open".to_owned(), Value::Bool(open.contains(&i)));
                }
                entry
            })
            .collect();
        // Built by hand: `json!` would copy the steps again by serializing them.
        let mut ledger = json!({"sagaId": self.spec.saga_id});
        if let Value::Object(members) = &mut ledger {
            members.insert("phase".to_owned(), self.ledger_phase());
            members.insert(
                "pointOfNoReturn".to_owned(),
                self.ledger_point_of_no_return(),
            );
            members.insert("steps".to_owned(), Value::Array(steps));
        }
        ledger
    }

    /// The ledger's `pointOfNoReturn`: the first step the saga cannot unwind past, whether
    /// it is the plan's pivot (an irreversible step) or a retriable step that changes
    /// something (which has no undo either), and whether the saga has gone past it.
    /// `null` when every step can be unwound.
    fn ledger_point_of_no_return(&self) -> Value {
        let Some(p) = self.spec.point_of_no_return else {
            return Value::Null;
        };
        let step = &self.spec.steps[p];
        let pivot = step.class == shared_types::reversibility::ReversibilityClass::Irreversible;
        let why = if pivot {
            "the pivot: an irreversible step"
        } else {
            "a retriable step that changes something and has no undo"
        };
        json!({"step": step.id, "skill": step.call.skill, "pivot": pivot, "why": why,
            "passed": self.past_no_return()})
    }

    /// The ledger's `phase` member.
    pub fn ledger_phase(&self) -> Value {
        serde_json::to_value(&self.phase).unwrap_or(Value::Null)
    }

    /// The ledger's entry for step `index` (`Null` past the last step).
    pub fn ledger_step(&self, index: usize) -> Value {
        let (Some(s), Some(r)) = (self.spec.steps.get(index), self.records.get(index)) else {
            return Value::Null;
        };
        let mut entry = json!({
            "step": s.id, "skill": s.call.skill, "idempotencyKey": s.idempotency_key,
            "attempts": r.attempts, "forward": r.forward, "undo": r.undo, "undoAttempts": r.undo_attempts,
        });
        if let Value::Object(members) = &mut entry {
            if !r.decisions.is_empty() {
                members.insert("decisions".to_owned(), super::approval::ledger_decisions(r));
            }
            if let Some(deadline) = &r.undo_deadline {
                members.insert("undoDeadline".to_owned(), deadline.ledger());
            }
            // What it waited for, when the plan says (else the step before it).
            if let Some(after) = &s.after {
                let ids: Vec<&str> = after
                    .iter()
                    .filter_map(|&d| self.spec.steps.get(d).map(|s| s.id.as_str()))
                    .collect();
                members.insert("after".to_owned(), json!(ids));
            }
            // What the compensation was sent, and what it answered.
            if let Some(comp) = &s.compensation {
                members.insert("undoSkill".to_owned(), json!(comp.call.skill));
            }
            if let Some(request) = &r.undo_request {
                members.insert("undoRequest".to_owned(), request.as_ref().clone());
            }
            if let Some(response) = &r.undo_response {
                members.insert("undoResponse".to_owned(), response.as_ref().clone());
            }
        }
        entry
    }
}
