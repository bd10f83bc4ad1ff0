//! A saga's timeline, read off its journal: one bar per call (each forward attempt and
//! each compensation attempt), in the order the calls were made, and the waits between
//! them (a retry's back-off, a person's answer). Pure: the journal's entries in, bars
//! out. An intent carries no time of its own; its bar starts at the event that led to it,
//! which is when the engine decided to make the call.

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
                        start_ms: last_ms.unwrap_or(now_ms),
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
    use crate::saga::{Invocation, Resolution};
    use serde_json::json;

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
        type Shown<'a> = (&'a str, Kind, u32, i64, Option<i64>, &'a str);
        let shown: Vec<Shown> = bars
            .iter()
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
            .collect();
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
}
