//! A saga's timeline, read off its journal: one bar per call (each forward attempt and
//! each compensation attempt), in the order the calls were made, and the waits (a
//! retry's back-off, a person's answer). Pure: the journal's entries in, bars out.
//!
//! Each bar is one call's own: it starts at the event that decided the call and ends at
//! the answer to that call (its target and attempt), whatever else happened meanwhile.
//! An intent carries no time of its own, but the driver journals an event and the calls
//! it decided in one write, so the event before an intent is the one that decided it.
//! Calls of parallel branches decided by one event start together, and their bars
//! overlap until each has its answer. Waits are per call too: a retry's back-off starts
//! at the answer to its step's call that asked for it (`Timer::Retry` is armed there),
//! not at whatever another branch's call answered meanwhile. A person's wait starts at
//! the event before it: the engine stops for a person only once no other call is out.

use std::collections::HashMap;

use serde::Serialize;

use crate::journal::Entry;
use crate::saga::{CallOutcome, Event, SagaSpec, Target, Timer};

/// Whether a bar is a step's forward call or its compensation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Kind {
    Forward,
    Compensation,
    /// Asking whether a forward call in doubt took effect.
    Verification,
}

/// One call on the timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Bar {
    pub step: String,
    pub agent: String,
    pub skill: String,
    pub kind: Kind,
    pub attempt: u32,
    pub start_ms: i64,
    /// `None` while the call is out.
    pub end_ms: Option<i64>,
    /// `succeeded`, `failed`, `unknown` (no answer to trust), `lost` (out when the
    /// executor stopped) or `out`.
    pub outcome: &'static str,
    pub idempotency_key: String,
}

/// A wait on the timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Wait {
    pub start_ms: i64,
    /// `None` while it lasts.
    pub end_ms: Option<i64>,
    pub why: String,
}

/// The bars and waits of a saga whose spec is `spec` and whose journal holds `entries`;
/// `paused` when the saga waits for a person now.
pub fn timeline(spec: &SagaSpec, entries: &[Entry], paused: bool) -> (Vec<Bar>, Vec<Wait>) {
    let mut bars: Vec<(Target, Bar)> = Vec::new();
    let mut waits = Vec::new();
    let mut last_ms: Option<i64> = None;
    // When a call of each step (by position) was last answered.
    let mut answered: HashMap<usize, i64> = HashMap::new();
    let step_id = |target: &Target| {
        spec.steps
            .get(target.step())
            .map(|s| s.id.clone())
            .unwrap_or_default()
    };
    for entry in entries {
        match entry {
            Entry::Intent(call) => bars.push((
                call.target,
                Bar {
                    step: step_id(&call.target),
                    agent: call.call.agent.clone(),
                    skill: call.call.skill.clone(),
                    kind: match call.target {
                        Target::Forward(_) => Kind::Forward,
                        Target::Compensation(_) => Kind::Compensation,
                        Target::Verification(_) => Kind::Verification,
                    },
                    attempt: call.attempt,
                    start_ms: last_ms.unwrap_or_default(),
                    end_ms: None,
                    outcome: "out",
                    idempotency_key: call.idempotency_key.clone(),
                },
            )),
            Entry::Event(event) => {
                let now_ms = event.now_ms();
                if let Event::Result { target, .. } | Event::InFlightLost { target, .. } = event {
                    answered.insert(target.step(), now_ms);
                }
                match event {
                    Event::Result {
                        target,
                        attempt,
                        outcome,
                        ..
                    } => end(
                        &mut bars,
                        *target,
                        *attempt,
                        now_ms,
                        match outcome {
                            CallOutcome::Succeeded { .. } => "succeeded",
                            CallOutcome::Failed { .. } => "failed",
                            CallOutcome::Unknown { .. } => "unknown",
                        },
                    ),
                    Event::InFlightLost {
                        target, attempt, ..
                    } => end(&mut bars, *target, *attempt, now_ms, "lost"),
                    Event::TimerFired {
                        timer: Timer::Retry { target, attempt },
                        ..
                    } => waits.push(Wait {
                        // The answer that asked for the retry: with branches, other
                        // calls may have answered since.
                        start_ms: answered
                            .get(&target.step())
                            .copied()
                            .or(last_ms)
                            .unwrap_or(now_ms),
                        end_ms: Some(now_ms),
                        why: format!(
                            "back-off before attempt {attempt} of {} {}",
                            step_id(target),
                            match target {
                                Target::Forward(_) => "forward",
                                Target::Compensation(_) => "compensation",
                                Target::Verification(_) => "verification",
                            }
                        ),
                    }),
                    Event::Resolve {
                        resolution,
                        decider,
                        ..
                    } => waits.push(Wait {
                        start_ms: last_ms.unwrap_or(now_ms),
                        end_ms: Some(now_ms),
                        why: format!(
                            "waited for a person; answered {} by {}",
                            serde_json::to_value(resolution)
                                .ok()
                                .and_then(|v| v.as_str().map(str::to_owned))
                                .unwrap_or_default(),
                            decider.as_ref().map(|d| d.by.as_str()).unwrap_or("someone")
                        ),
                    }),
                    _ => {}
                }
                last_ms = Some(now_ms);
            }
        }
    }
    if paused && let Some(start_ms) = last_ms {
        waits.push(Wait {
            start_ms,
            end_ms: None,
            why: "waiting for a person".into(),
        });
    }
    (bars.into_iter().map(|(_, bar)| bar).collect(), waits)
}

/// The last bar of `target`'s `attempt` still out ends at `now_ms` with `outcome`.
fn end(
    bars: &mut [(Target, Bar)],
    target: Target,
    attempt: u32,
    now_ms: i64,
    outcome: &'static str,
) {
    if let Some((_, bar)) = bars
        .iter_mut()
        .rev()
        .find(|(t, b)| *t == target && b.attempt == attempt && b.end_ms.is_none())
    {
        bar.end_ms = Some(now_ms);
        bar.outcome = outcome;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::saga::{Command, FailureClass, Invocation, Resolution, Saga};
    use serde_json::{Value, json};

    fn spec() -> SagaSpec {
        let step = |id: &str| {
            json!({"id": id, "call": {"agent": "vendor-registry", "skill": format!("do_{id}"),
                "idempotent": true, "timeoutMs": 1000,
                "retry": {"maxAttempts": 3, "initialBackoffMs": 10, "maxBackoffMs": 100}},
                "args": {}, "idempotencyKey": format!("sg:{id}"), "class": "compensable",
                "readOnly": false, "undoTtlMs": null, "approvalTimeoutMs": null,
                "compensation": null})
        };
        serde_json::from_value(json!({"sagaId": "sg", "steps": [step("s1"), step("s2")],
            "pointOfNoReturn": null, "expiresAtMs": 0}))
        .expect("a spec")
    }

    fn intent(spec: &SagaSpec, target: Target, attempt: u32) -> Entry {
        let i = target.step();
        let key = match target {
            Target::Forward(_) => spec.steps[i].idempotency_key.clone(),
            Target::Compensation(_) => format!("{}:undo", spec.steps[i].idempotency_key),
            Target::Verification(_) => {
                format!("{}:verify:{attempt}", spec.steps[i].idempotency_key)
            }
        };
        Entry::Intent(Invocation {
            target,
            attempt,
            call: spec.steps[i].call.clone(),
            args: json!({}),
            idempotency_key: key,
        })
    }

    fn result(target: Target, attempt: u32, outcome: CallOutcome, now_ms: i64) -> Entry {
        Entry::Event(Event::Result {
            target,
            attempt,
            outcome,
            now_ms,
        })
    }

    #[test]
    fn each_call_is_a_bar_from_the_event_that_led_to_it_to_its_answer_in_the_order_made() {
        let spec = spec();
        let ok = || CallOutcome::Succeeded {
            response: json!({}),
        };
        let failed = CallOutcome::failed("no");
        let entries = vec![
            Entry::Event(Event::Start { now_ms: 100 }),
            intent(&spec, Target::Forward(0), 1),
            result(Target::Forward(0), 1, ok(), 130),
            intent(&spec, Target::Forward(1), 1),
            result(Target::Forward(1), 1, failed.clone(), 150),
            Entry::Event(Event::TimerFired {
                timer: Timer::Retry {
                    target: Target::Forward(1),
                    attempt: 2,
                },
                now_ms: 170,
            }),
            intent(&spec, Target::Forward(1), 2),
            result(Target::Forward(1), 2, failed, 190),
            intent(&spec, Target::Compensation(0), 1),
            result(Target::Compensation(0), 1, ok(), 220),
        ];
        let (bars, waits) = timeline(&spec, &entries, false);
        let shown = spans(&bars);
        assert_eq!(
            shown,
            vec![
                ("s1", Kind::Forward, 1, 100, Some(130), "succeeded"),
                ("s2", Kind::Forward, 1, 130, Some(150), "failed"),
                ("s2", Kind::Forward, 2, 170, Some(190), "failed"),
                ("s1", Kind::Compensation, 1, 190, Some(220), "succeeded"),
            ]
        );
        assert_eq!(bars[3].idempotency_key, "sg:s1:undo");
        assert_eq!(waits.len(), 1);
        assert_eq!((waits[0].start_ms, waits[0].end_ms), (150, Some(170)));
        assert!(
            waits[0].why.contains("attempt 2 of s2 forward"),
            "{:?}",
            waits[0]
        );
    }

    #[test]
    fn a_verification_is_a_bar_of_its_own_kind_after_the_call_in_doubt() {
        let spec = spec();
        let entries = vec![
            Entry::Event(Event::Start { now_ms: 10 }),
            intent(&spec, Target::Forward(0), 1),
            result(
                Target::Forward(0),
                1,
                CallOutcome::Unknown {
                    reason: "timeout".into(),
                },
                40,
            ),
            intent(&spec, Target::Verification(0), 1),
            result(
                Target::Verification(0),
                1,
                CallOutcome::Succeeded {
                    response: json!({"status": "applied", "response": {}}),
                },
                55,
            ),
        ];
        let (bars, _) = timeline(&spec, &entries, false);
        let shown: Vec<(Kind, &str, i64, Option<i64>, &str)> = bars
            .iter()
            .map(|b| {
                (
                    b.kind,
                    b.outcome,
                    b.start_ms,
                    b.end_ms,
                    b.idempotency_key.as_str(),
                )
            })
            .collect();
        assert_eq!(
            shown,
            vec![
                (Kind::Forward, "unknown", 10, Some(40), "sg:s1"),
                (
                    Kind::Verification,
                    "succeeded",
                    40,
                    Some(55),
                    "sg:s1:verify:1"
                ),
            ]
        );
    }

    #[test]
    fn a_call_out_stays_open_and_a_pause_is_a_wait_until_the_answer() {
        let spec = spec();
        let entries = vec![
            Entry::Event(Event::Start { now_ms: 10 }),
            intent(&spec, Target::Forward(0), 1),
            result(
                Target::Forward(0),
                1,
                CallOutcome::Unknown {
                    reason: "timeout".into(),
                },
                40,
            ),
        ];
        let (bars, waits) = timeline(&spec, &entries, true);
        assert_eq!(bars[0].outcome, "unknown");
        assert_eq!(
            waits,
            vec![Wait {
                start_ms: 40,
                end_ms: None,
                why: "waiting for a person".into()
            }]
        );

        let mut answered = entries.clone();
        answered.push(Entry::Event(Event::Resolve {
            resolution: Resolution::Retry,
            now_ms: 90,
            decider: None,
        }));
        answered.push(intent(&spec, Target::Forward(0), 2));
        let (bars, waits) = timeline(&spec, &answered, false);
        assert_eq!(waits[0].end_ms, Some(90));
        assert!(waits[0].why.contains("answered retry"), "{:?}", waits[0]);
        assert_eq!(
            (bars[1].start_ms, bars[1].end_ms, bars[1].outcome),
            (90, None, "out")
        );
    }

    /// A spec of `after.len()` compensable steps `s0`, `s1`, … where step `i` waits for
    /// `after[i]` (`None`: the step before), up to four under way at once.
    fn branched(after: &[Option<Vec<usize>>]) -> SagaSpec {
        let call = |skill: String| {
            json!({"agent": "vendor-registry", "skill": skill, "idempotent": true,
                "timeoutMs": 1000,
                "retry": {"maxAttempts": 3, "initialBackoffMs": 10, "maxBackoffMs": 100}})
        };
        let steps: Vec<Value> = after
            .iter()
            .enumerate()
            .map(|(i, after)| {
                let id = format!("s{i}");
                json!({"id": id, "call": call(format!("do_{id}")), "args": {},
                    "idempotencyKey": format!("sg:{id}"), "class": "compensable",
                    "readOnly": false, "undoTtlMs": null, "approvalTimeoutMs": null,
                    "compensation": {"call": call(format!("undo_{id}")), "args": {},
                        "argsWhenUnknown": null, "idempotencyKey": format!("sg:{id}:undo")},
                    "after": after})
            })
            .collect();
        serde_json::from_value(json!({"sagaId": "sg", "steps": steps,
            "pointOfNoReturn": null, "expiresAtMs": 4_000_000_000_000_i64,
            "maxParallelSteps": 4}))
        .expect("a spec")
    }

    /// The journal the driver writes for `events`: each event, then the calls the
    /// engine decided on it (in one write).
    fn journaled(spec: &SagaSpec, events: Vec<Event>) -> Vec<Entry> {
        let mut saga = Saga::new(spec.clone());
        let mut entries = Vec::new();
        for event in events {
            let decided = saga.step(event.clone());
            entries.push(Entry::Event(event));
            entries.extend(decided.into_iter().filter_map(|c| match c {
                Command::Invoke(call) => Some(Entry::Intent(call)),
                _ => None,
            }));
        }
        entries
    }

    fn answer(target: Target, attempt: u32, outcome: CallOutcome, now_ms: i64) -> Event {
        Event::Result {
            target,
            attempt,
            outcome,
            now_ms,
        }
    }

    fn ok() -> CallOutcome {
        CallOutcome::Succeeded {
            response: json!({}),
        }
    }

    type Span<'a> = (&'a str, Kind, u32, i64, Option<i64>, &'a str);

    fn spans(bars: &[Bar]) -> Vec<Span<'_>> {
        bars.iter()
            .map(|b| {
                (
                    b.step.as_str(),
                    b.kind,
                    b.attempt,
                    b.start_ms,
                    b.end_ms,
                    b.outcome,
                )
            })
            .collect()
    }

    #[test]
    fn branches_decided_by_one_event_overlap_and_a_back_off_starts_at_its_own_answer() {
        // s0, then s1 and s2 at once.
        let spec = branched(&[None, Some(vec![0]), Some(vec![0])]);
        let transient = CallOutcome::Failed {
            reason: "busy".into(),
            failure: Some(FailureClass::Transient),
        };
        let entries = journaled(
            &spec,
            vec![
                Event::Start { now_ms: 100 },
                answer(Target::Forward(0), 1, ok(), 110),
                answer(Target::Forward(1), 1, transient, 120),
                answer(Target::Forward(2), 1, ok(), 130),
                Event::TimerFired {
                    timer: Timer::Retry {
                        target: Target::Forward(1),
                        attempt: 2,
                    },
                    now_ms: 150,
                },
                answer(Target::Forward(1), 2, ok(), 160),
            ],
        );
        // Both branches were decided by s0's answer, in one write.
        assert!(
            matches!(&entries[3..5], [Entry::Intent(a), Entry::Intent(b)]
                if a.target == Target::Forward(1) && b.target == Target::Forward(2)),
            "{entries:?}"
        );
        let (bars, waits) = timeline(&spec, &entries, false);
        assert_eq!(
            spans(&bars),
            vec![
                ("s0", Kind::Forward, 1, 100, Some(110), "succeeded"),
                ("s1", Kind::Forward, 1, 110, Some(120), "failed"),
                ("s2", Kind::Forward, 1, 110, Some(130), "succeeded"),
                ("s1", Kind::Forward, 2, 150, Some(160), "succeeded"),
            ]
        );
        // The two first calls of the branches were out at once.
        let (s1, s2) = (&bars[1], &bars[2]);
        let overlap = |a: &Bar, b: &Bar| {
            a.start_ms < b.end_ms.unwrap_or(i64::MAX) && b.start_ms < a.end_ms.unwrap_or(i64::MAX)
        };
        assert!(overlap(s1, s2), "{s1:?} and {s2:?} do not overlap");
        assert!(!overlap(&bars[0], s1), "s1 starts once s0 answered");
        // s1's back-off ran from its own failure, not from s2's answer after it.
        assert_eq!(waits.len(), 1, "{waits:?}");
        assert_eq!((waits[0].start_ms, waits[0].end_ms), (120, Some(150)));
        assert!(
            waits[0].why.contains("attempt 2 of s1 forward"),
            "{waits:?}"
        );
    }

    #[test]
    fn an_unwind_in_reverse_start_order_shows_its_compensations_in_the_order_made() {
        // s0 and s2 start together; s1 once s0 answered; s3 joins s1 and s2, and fails.
        // Started s0, s2, s1: undone s1, s2, s0 (not in reverse plan order).
        let spec = branched(&[None, Some(vec![0]), Some(vec![]), Some(vec![1, 2])]);
        let undo = Target::Compensation;
        let entries = journaled(
            &spec,
            vec![
                Event::Start { now_ms: 100 },
                answer(Target::Forward(0), 1, ok(), 110),
                answer(Target::Forward(2), 1, ok(), 120),
                answer(Target::Forward(1), 1, ok(), 130),
                answer(Target::Forward(3), 1, CallOutcome::failed("no"), 140),
                answer(undo(1), 1, ok(), 150),
                answer(undo(2), 1, ok(), 160),
                answer(undo(0), 1, ok(), 170),
            ],
        );
        let (bars, waits) = timeline(&spec, &entries, false);
        assert_eq!(
            spans(&bars),
            vec![
                ("s0", Kind::Forward, 1, 100, Some(110), "succeeded"),
                ("s2", Kind::Forward, 1, 100, Some(120), "succeeded"),
                ("s1", Kind::Forward, 1, 110, Some(130), "succeeded"),
                ("s3", Kind::Forward, 1, 130, Some(140), "failed"),
                ("s1", Kind::Compensation, 1, 140, Some(150), "succeeded"),
                ("s2", Kind::Compensation, 1, 150, Some(160), "succeeded"),
                ("s0", Kind::Compensation, 1, 160, Some(170), "succeeded"),
            ]
        );
        let keys: Vec<&str> = bars[4..]
            .iter()
            .map(|b| b.idempotency_key.as_str())
            .collect();
        assert_eq!(keys, ["sg:s1:undo", "sg:s2:undo", "sg:s0:undo"]);
        assert!(waits.is_empty(), "{waits:?}");
    }
}
