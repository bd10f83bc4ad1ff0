//! The engine driven through every path of spec/reversibility-v1.md with scripted events: the exact
//! calls it asks for, in order, and how it ends. No network, no clock, no sleeps.

use std::collections::HashMap;

use serde_json::{Value, json};
use shared_types::Plan;

use super::event_tests::state;
use super::model::{Forward, Phase, Undo};
use super::*;

const T0: i64 = 1_800_000_000_000;

use test_kit::{read, supplier_catalog as catalog};

pub(crate) fn saga_from(plan: &str) -> Saga {
    let plan = Plan::from_value(&read(plan)).unwrap();
    Saga::new(SagaSpec::new(&plan, &catalog()).unwrap())
}

/// The supplier-onboarding saga, not started (the reporter's tests use it too).
pub(crate) fn supplier() -> Saga {
    saga_from("examples/plans/supplier-onboarding.json")
}

/// The supplier-onboarding saga as if no skill declared a verification: an unknown
/// outcome that retries cannot settle unwinds or goes to a person at once.
pub(crate) fn supplier_unverified() -> Saga {
    let mut saga = supplier();
    for step in &mut saga.spec_mut().steps {
        step.verification = None;
    }
    saga
}

/// A response for each forward skill, shaped like the real tools' outputs.
pub(crate) fn response(skill: &str) -> Value {
    match skill {
        "vendor.create" => json!({"vendorId": "v_1"}),
        "budget.reserve" => json!({"reservationId": "r_1"}),
        "sandbox.provision" => json!({"tenantId": "t_1", "login": "acme-admin"}),
        "compliance.check" | "compliance.review" => json!({"status": "clear", "reference": "c_1"}),
        "payments.capture" => json!({"captureId": "p_1", "amountMinor": 12000, "currency": "EUR"}),
        "email.send" => json!({"messageId": "m_1"}),
        other => json!({"ok": other}),
    }
}

/// What a scripted run saw: every invocation (skill, key, args) and the last command.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) calls: Vec<(String, String, Value)>,
    pub(crate) commands: Vec<Command>,
}

impl Run {
    pub(crate) fn skills(&self) -> Vec<&str> {
        self.calls.iter().map(|(s, _, _)| s.as_str()).collect()
    }

    pub(crate) fn last(&self) -> &Command {
        self.commands.last().unwrap()
    }

    /// How the saga ended, if this run ended it.
    pub(crate) fn ending(&self) -> Option<Ending> {
        match self.last() {
            Command::Finish { ending, .. } => Some(*ending),
            _ => None,
        }
    }
}

/// Drives the saga like a driver would: performs each invocation with `tool`, fires
/// each retry timer at once, and stops at a pause or the end.
pub(crate) fn drive(
    saga: &mut Saga,
    first: Event,
    tool: &mut dyn FnMut(&Invocation) -> CallOutcome,
) -> Run {
    let mut run = Run {
        calls: Vec::new(),
        commands: Vec::new(),
    };
    let mut queue = vec![first];
    let mut now = T0;
    while let Some(event) = queue.pop() {
        now += 10;
        for command in saga.step(event) {
            match &command {
                Command::Invoke(inv) => {
                    run.calls.push((
                        inv.call.skill.clone(),
                        inv.idempotency_key.clone(),
                        inv.args.clone(),
                    ));
                    let outcome = tool(inv);
                    queue.push(Event::Result {
                        target: inv.target,
                        attempt: inv.attempt,
                        outcome,
                        now_ms: now,
                    });
                }
                Command::StartTimer {
                    timer: timer @ Timer::Retry { .. },
                    ..
                } => queue.push(Event::TimerFired {
                    timer: *timer,
                    now_ms: now,
                }),
                _ => {}
            }
            run.commands.push(command);
        }
        // As the driver: an approved step is called once it has a slot (here at once).
        if queue.is_empty() && saga.awaits_slot_to_call() {
            queue.push(Event::Proceed { now_ms: now });
        }
    }
    run
}

/// Starts the saga and drives it with `tool`.
pub(crate) fn start(saga: &mut Saga, tool: &mut dyn FnMut(&Invocation) -> CallOutcome) -> Run {
    drive(saga, Event::Start { now_ms: T0 }, tool)
}

pub(crate) fn ok(inv: &Invocation) -> CallOutcome {
    CallOutcome::Succeeded {
        response: response(&inv.call.skill),
    }
}

/// A tool that answers `outcome` for `skill` and succeeds for everything else.
fn fault_on(
    skill: &'static str,
    outcome: fn() -> CallOutcome,
) -> impl FnMut(&Invocation) -> CallOutcome {
    move |inv| {
        if inv.call.skill == skill {
            outcome()
        } else {
            ok(inv)
        }
    }
}

fn unknown() -> CallOutcome {
    CallOutcome::Unknown {
        reason: "timed out".into(),
    }
}

fn failed() -> CallOutcome {
    CallOutcome::failed("declined")
}

/// The supplier saga's forward skills, in plan order (the names the engine's tests use).
pub(crate) const FORWARD: [&str; 6] = [
    "vendor.create",
    "budget.reserve",
    "sandbox.provision",
    "compliance.check",
    "payments.capture",
    "email.send",
];

#[test]
fn happy_path_runs_every_step_once_in_order() {
    let mut saga = supplier();
    let run = start(&mut saga, &mut ok);
    assert_eq!(run.skills(), FORWARD);
    let keys: Vec<&str> = run.calls.iter().map(|(_, k, _)| k.as_str()).collect();
    assert_eq!(keys[0], "sg_demo_supplier_onboarding:s0");
    // Arguments are bound from earlier results.
    assert_eq!(run.calls[2].2, json!({"vendorId": "v_1"}));
    assert_eq!(
        run.calls[3].2,
        json!({"vendorId": "v_1", "tenantId": "t_1"})
    );
    assert_eq!(run.calls[5].2["login"], "acme-admin");
    assert_eq!(run.ending(), Some(Ending::Completed));
}

#[test]
fn compliance_timeouts_are_retried_then_everything_before_is_undone_in_reverse() {
    let mut saga = supplier();
    let run = start(&mut saga, &mut fault_on("compliance.check", unknown));
    assert_eq!(
        run.skills(),
        [
            "vendor.create",
            "budget.reserve",
            "sandbox.provision",
            "compliance.check",
            "compliance.check",
            "compliance.check",
            "sandbox.deprovision",
            "budget.release",
            "vendor.archive",
        ]
    );
    // The same key on every retry; compensations bind from the forward responses.
    assert!(
        run.calls[3..6]
            .iter()
            .all(|(_, k, _)| k == "sg_demo_supplier_onboarding:s3")
    );
    assert_eq!(run.calls[6].1, "sg_demo_supplier_onboarding:s2:undo");
    assert_eq!(run.calls[6].2, json!({"tenantId": "t_1"}));
    assert_eq!(run.calls[7].2, json!({"reservationId": "r_1"}));
    assert_eq!(run.calls[8].2, json!({"vendorId": "v_1"}));
    assert_eq!(run.ending(), Some(Ending::Compensated));
    // Backoff between attempts follows the declaration (250 ms, then 500 ms).
    let waits: Vec<u64> = run
        .commands
        .iter()
        .filter_map(|c| match c {
            Command::StartTimer {
                timer: Timer::Retry { .. },
                after_ms,
            } => Some(*after_ms),
            _ => None,
        })
        .collect();
    assert_eq!(waits, [250, 500]);
}

#[test]
fn a_declined_pivot_unwinds_and_is_not_itself_compensated() {
    let mut saga = supplier();
    let run = start(&mut saga, &mut fault_on("payments.capture", failed));
    assert_eq!(
        &run.skills()[4..],
        [
            "payments.capture",
            "sandbox.deprovision",
            "budget.release",
            "vendor.archive"
        ],
        "a definite failure is not retried"
    );
    assert_eq!(run.ending(), Some(Ending::Compensated));
}

#[test]
fn an_unknown_pivot_escalates_and_unwinds_nothing() {
    let mut saga = supplier_unverified();
    let run = start(&mut saga, &mut fault_on("payments.capture", unknown));
    assert_eq!(&run.skills()[4..], ["payments.capture"; 3]);
    assert!(
        matches!(run.last(), Command::Pause { .. }),
        "{:?}",
        run.last()
    );
    assert!(
        run.skills()
            .iter()
            .all(|s| !s.ends_with("release") && !s.ends_with("archive"))
    );
    // "compensate" is allowed only because a person confirms the pivot did not happen.
    let run = drive(
        &mut saga,
        Event::Resolve {
            resolution: Resolution::Compensate,
            now_ms: T0 + 1000,
            decider: None,
        },
        &mut ok,
    );
    assert_eq!(
        run.skills(),
        ["sandbox.deprovision", "budget.release", "vendor.archive"]
    );
    assert_eq!(run.ending(), Some(Ending::Compensated));
}

#[test]
fn exhausted_retries_after_the_pivot_escalate_and_never_unwind() {
    let mut saga = supplier();
    let run = start(&mut saga, &mut fault_on("email.send", unknown));
    assert_eq!(&run.skills()[5..], ["email.send"; 5]);
    assert!(matches!(run.last(), Command::Pause { .. }));
    let refused = drive(
        &mut saga,
        Event::Resolve {
            resolution: Resolution::Compensate,
            now_ms: T0 + 1,
            decider: None,
        },
        &mut ok,
    );
    assert!(
        refused.calls.is_empty(),
        "nothing past the pivot is unwound"
    );
    let retried = drive(
        &mut saga,
        Event::Resolve {
            resolution: Resolution::Retry,
            now_ms: T0 + 2,
            decider: None,
        },
        &mut ok,
    );
    assert_eq!(retried.skills(), ["email.send"]);
    assert_eq!(
        retried.calls[0].1, "sg_demo_supplier_onboarding:s5",
        "the same key after a human retry"
    );
    assert_eq!(retried.ending(), Some(Ending::Completed));
}

#[test]
fn a_compensation_that_keeps_failing_is_dead_lettered_then_retried_by_a_person() {
    let mut saga = supplier();
    let mut release_failures = 0;
    let run = drive(
        &mut saga,
        Event::Start { now_ms: T0 },
        &mut |inv| match inv.call.skill.as_str() {
            "compliance.check" => failed(),
            "budget.release" => {
                release_failures += 1;
                unknown()
            }
            _ => ok(inv),
        },
    );
    assert_eq!(release_failures, 5, "all declared attempts");
    assert!(
        matches!(run.last(), Command::Pause { reason } if reason.contains("compensation failed 5 times"))
    );
    assert!(
        !run.skills().contains(&"vendor.archive"),
        "stops before unwinding further"
    );
    assert!(matches!(saga.records[1].undo, Undo::DeadLettered { .. }));
    let run = drive(
        &mut saga,
        Event::Resolve {
            resolution: Resolution::Retry,
            now_ms: T0 + 5,
            decider: None,
        },
        &mut ok,
    );
    assert_eq!(run.skills(), ["budget.release", "vendor.archive"]);
    assert_eq!(run.ending(), Some(Ending::Compensated));
}

#[test]
fn a_compensation_that_fails_twice_then_succeeds() {
    let mut saga = supplier();
    let mut failures = 0;
    let run = drive(
        &mut saga,
        Event::Start { now_ms: T0 },
        &mut |inv| match inv.call.skill.as_str() {
            "compliance.check" => failed(),
            "sandbox.deprovision" if failures < 2 => {
                failures += 1;
                failed()
            }
            _ => ok(inv),
        },
    );
    assert_eq!(
        &run.skills()[4..],
        [
            "sandbox.deprovision",
            "sandbox.deprovision",
            "sandbox.deprovision",
            "budget.release",
            "vendor.archive"
        ]
    );
    assert_eq!(run.ending(), Some(Ending::Compensated));
}

#[test]
fn an_unknown_compensable_step_is_compensated_through_its_idempotency_key() {
    let mut saga = supplier();
    let run = start(&mut saga, &mut fault_on("sandbox.provision", unknown));
    assert_eq!(
        &run.skills()[2..],
        [
            "sandbox.provision",
            "sandbox.provision",
            "sandbox.provision",
            "sandbox.deprovision",
            "budget.release",
            "vendor.archive"
        ]
    );
    // No response to bind from: argsWhenUnknown locates the work by the forward key.
    assert_eq!(
        run.calls[5].2,
        json!({"forwardKey": "sg_demo_supplier_onboarding:s2"})
    );
    assert_eq!(run.ending(), Some(Ending::Compensated));
}

#[test]
fn an_unresolvable_compensation_escalates_instead_of_calling_with_partial_arguments() {
    let mut saga = supplier();
    let run = drive(
        &mut saga,
        Event::Start { now_ms: T0 },
        &mut |inv| match inv.call.skill.as_str() {
            // The budget answered without a reservation id; the registry then fails.
            "budget.reserve" => CallOutcome::Succeeded {
                response: json!({"note": "no id"}),
            },
            "compliance.check" => failed(),
            _ => ok(inv),
        },
    );
    assert_eq!(
        &run.skills()[4..],
        ["sandbox.deprovision"],
        "budget.release is never called"
    );
    assert!(
        matches!(run.last(), Command::Pause { reason } if reason.contains("compensation unavailable"))
    );
    assert!(matches!(saga.records[1].undo, Undo::Unavailable { .. }));
    // A person releases it by hand; the unwind goes on.
    let run = drive(
        &mut saga,
        Event::Resolve {
            resolution: Resolution::ResolvedManually,
            now_ms: T0 + 1,
            decider: None,
        },
        &mut ok,
    );
    assert_eq!(run.skills(), ["vendor.archive"]);
}

#[test]
fn cancel_before_the_pivot_waits_for_the_call_in_flight_then_compensates() {
    let mut saga = supplier();
    let started = saga.step(Event::Start { now_ms: T0 });
    let Some(Command::Invoke(first)) = started
        .iter()
        .find(|c| matches!(c, Command::Invoke(_)))
        .cloned()
    else {
        panic!("expected an invocation");
    };
    assert_eq!(
        saga.step(Event::Cancel { now_ms: T0 + 1 }),
        [],
        "nothing to do while s0 is out"
    );
    let result = Event::Result {
        target: first.target,
        attempt: 1,
        outcome: ok(&first),
        now_ms: T0 + 2,
    };
    let run = drive(&mut saga, result, &mut ok);
    assert_eq!(
        run.skills(),
        ["vendor.archive"],
        "s1 never starts; s0 is undone"
    );
    assert_eq!(run.ending(), Some(Ending::Canceled));
}

#[test]
fn cancel_after_the_pivot_is_refused() {
    let mut saga = supplier();
    let run = start(&mut saga, &mut fault_on("email.send", unknown));
    assert!(matches!(run.last(), Command::Pause { .. }));
    let commands = saga.step(Event::Cancel { now_ms: T0 + 1 });
    assert!(
        matches!(&commands[..], [Command::RefuseCancel { .. }]),
        "{commands:?}"
    );
}

#[test]
fn mandate_expiry_before_the_pivot_unwinds_and_after_it_is_ignored() {
    let mut saga = supplier();
    let commands = saga.step(Event::Start { now_ms: T0 });
    assert!(commands.iter().any(|c| matches!(
        c,
        Command::StartTimer {
            timer: Timer::MandateExpiry,
            ..
        }
    )));
    let Some(Command::Invoke(first)) = commands
        .iter()
        .find(|c| matches!(c, Command::Invoke(_)))
        .cloned()
    else {
        panic!()
    };
    saga.step(Event::TimerFired {
        timer: Timer::MandateExpiry,
        now_ms: T0 + 1,
    });
    let run = drive(
        &mut saga,
        Event::Result {
            target: first.target,
            attempt: 1,
            outcome: ok(&first),
            now_ms: T0 + 2,
        },
        &mut ok,
    );
    assert_eq!(run.skills(), ["vendor.archive"]);
    assert!(
        matches!(run.last(), Command::Finish { ending: Ending::Compensated, reason } if reason.contains("mandate"))
    );

    let mut saga = supplier();
    start(&mut saga, &mut fault_on("email.send", unknown));
    assert!(matches!(
        saga.step(Event::TimerFired {
            timer: Timer::MandateExpiry,
            now_ms: T0 + 1
        })
        .as_slice(),
        [Command::Ignored { .. }]
    ));
}

#[test]
fn after_a_restart_idempotent_calls_are_repeated_with_the_same_key_others_escalate() {
    let mut saga = supplier();
    let commands = saga.step(Event::Start { now_ms: T0 });
    let Some(Command::Invoke(first)) = commands
        .iter()
        .find(|c| matches!(c, Command::Invoke(_)))
        .cloned()
    else {
        panic!()
    };
    let again = saga.step(Event::InFlightLost {
        target: first.target,
        attempt: 1,
        now_ms: T0 + 5,
    });
    let Some(Command::Invoke(repeat)) = again.iter().find(|c| matches!(c, Command::Invoke(_)))
    else {
        panic!("{again:?}")
    };
    assert_eq!(repeat.idempotency_key, first.idempotency_key);
    assert_eq!(repeat.args, first.args);

    // The same saga with a skill that is not idempotent: a person decides.
    let mut saga = supplier();
    saga.spec_mut().steps[0].call.idempotent = false;
    saga.step(Event::Start { now_ms: T0 });
    let commands = saga.step(Event::InFlightLost {
        target: Target::Forward(0),
        attempt: 1,
        now_ms: T0 + 5,
    });
    assert!(
        !commands
            .iter()
            .any(|c| matches!(c, Command::Invoke(inv) if inv.target == Target::Forward(0)))
    );
    assert!(
        matches!(saga.phase, Phase::Paused { .. })
            || matches!(saga.phase, Phase::Unwinding { .. } | Phase::Done { .. })
    );
    assert!(matches!(saga.records[0].forward, Forward::Unknown { .. }));
}

#[test]
fn approvals_pause_until_a_person_answers_and_expire_into_an_unwind() {
    let mut saga = saga_from("examples/plans/invalid/undo-ttl-too-short.json");
    let run = start(&mut saga, &mut ok);
    assert_eq!(run.skills(), ["vendor.create", "budget.reserve"]);
    assert!(matches!(run.last(), Command::Pause { reason } if reason.contains("needs approval")));
    let run = drive(
        &mut saga,
        Event::Resolve {
            resolution: Resolution::Approve,
            now_ms: T0 + 100,
            decider: None,
        },
        &mut ok,
    );
    assert_eq!(run.skills()[0], "compliance.review");
    assert_eq!(run.ending(), Some(Ending::Completed));

    let mut saga = saga_from("examples/plans/invalid/undo-ttl-too-short.json");
    start(&mut saga, &mut ok);
    // (The driver fires the timer when it is due; the engine takes the time it is given.)
    let run = drive(
        &mut saga,
        Event::TimerFired {
            timer: Timer::ApprovalTimeout { step: 2, round: 0 },
            now_ms: T0 + 1000,
        },
        &mut ok,
    );
    assert_eq!(run.skills(), ["budget.release", "vendor.archive"]);
    assert_eq!(run.ending(), Some(Ending::Compensated));
}

/// An approver's approval of what `saga` waits for (as its pause shows it), valid until
/// `expires_at_ms`.
pub(crate) fn approval_of_pause(saga: &Saga, by: &str, expires_at_ms: i64) -> Decider {
    let awaiting = saga.awaiting().expect("the saga waits");
    let shown = &awaiting["approval"];
    Decider {
        by: by.into(),
        approval: Some(Approval {
            saga_id: shown["sagaId"].as_str().unwrap().into(),
            step_id: shown["stepId"].as_str().unwrap().into(),
            args_sha256: shown["argsSha256"].as_str().unwrap().into(),
            expires_at_ms,
        }),
        withdrawal: None,
        message_id: None,
    }
}

#[test]
fn an_approval_pause_shows_the_bound_arguments_and_their_hash() {
    let mut saga = saga_from("examples/plans/invalid/undo-ttl-too-short.json");
    start(&mut saga, &mut ok);
    let awaiting = saga.awaiting().expect("the saga waits for an approval");
    let shown = &awaiting["approval"];
    assert_eq!(shown["stepId"], saga.spec.steps[2].id);
    assert_eq!(shown["skill"], "compliance.review");
    assert_eq!(shown["agent"], saga.spec.steps[2].call.agent);
    // Bound (no runtime expression left), and hashed as RFC 8785 canonical JSON.
    let args = &shown["args"];
    assert!(!args.to_string().contains("$steps"), "{args}");
    assert_eq!(
        shown["argsSha256"],
        shared_types::json::canonical_sha256(args).unwrap()
    );
    // What the approved call is then sent with is exactly what was shown.
    let decider = approval_of_pause(&saga, "alice", T0 + 60_000);
    let run = drive(
        &mut saga,
        Event::Resolve {
            resolution: Resolution::Approve,
            now_ms: T0 + 100,
            decider: Some(decider),
        },
        &mut ok,
    );
    assert_eq!(&run.calls[0].2, args);
    assert_eq!(run.ending(), Some(Ending::Completed));
    let decisions = &saga.ledger()["steps"][2]["decisions"];
    assert_eq!(decisions[0]["by"], "alice");
    assert_eq!(decisions[0]["resolution"], "approve");
    assert_eq!(decisions[0]["argsSha256"], shown["argsSha256"]);
    assert_eq!(decisions[0]["at"], "2027-01-15T08:00:00.100Z");
}

#[test]
fn an_approval_for_other_arguments_another_step_or_expired_moves_nothing() {
    let mut saga = saga_from("examples/plans/invalid/undo-ttl-too-short.json");
    start(&mut saga, &mut ok);
    let good = approval_of_pause(&saga, "alice", T0 + 60_000);
    let mut other_args = good.clone();
    if let Some(a) = other_args.approval.as_mut() {
        a.args_sha256 = shared_types::json::canonical_sha256(&json!({"other": 1})).unwrap();
    }
    let mut other_step = good.clone();
    if let Some(a) = other_step.approval.as_mut() {
        a.step_id = saga.spec.steps[1].id.clone();
    }
    let unbound = Decider {
        by: "alice".into(),
        approval: None,
        withdrawal: None,
        message_id: None,
    };
    let expired = approval_of_pause(&saga, "alice", T0 + 50);
    for decider in [other_args, other_step, unbound, expired] {
        let before = saga.clone();
        let run = drive(
            &mut saga,
            Event::Resolve {
                resolution: Resolution::Approve,
                now_ms: T0 + 100,
                decider: Some(decider.clone()),
            },
            &mut ok,
        );
        assert!(run.calls.is_empty(), "{decider:?}");
        assert!(
            matches!(run.last(), Command::Pause { reason } if reason.contains("not applied")),
            "{decider:?}"
        );
        assert_eq!(state(&saga), state(&before), "{decider:?}");
    }
}

#[test]
fn escalation_answers_are_recorded_with_who_gave_them_and_replayed() {
    let mut saga = supplier();
    let run = start(&mut saga, &mut fault_on("payments.capture", unknown));
    assert!(matches!(run.last(), Command::Pause { .. }));
    assert_eq!(
        saga.awaiting().unwrap()["escalation"]["skill"],
        "payments.capture"
    );
    let answer = Event::Resolve {
        resolution: Resolution::ResolvedManually,
        now_ms: T0 + 500,
        decider: Some(Decider {
            by: "bob".into(),
            approval: None,
            withdrawal: None,
            message_id: None,
        }),
    };
    let mut replayed = saga.clone();
    drive(&mut saga, answer.clone(), &mut ok);
    replayed.step(answer);
    let capture = saga
        .spec
        .steps
        .iter()
        .position(|s| s.call.skill == "payments.capture")
        .unwrap();
    let decisions = &saga.ledger()["steps"][capture]["decisions"];
    assert_eq!(decisions[0]["by"], "bob");
    assert_eq!(decisions[0]["resolution"], "resolved-manually");
    assert!(decisions[0].get("argsSha256").is_none());
    assert_eq!(
        replayed.ledger()["steps"][capture]["decisions"],
        *decisions,
        "the journal's event rebuilds the decision"
    );
}

#[test]
fn an_expired_undo_is_not_attempted() {
    // Everything succeeds until the registry, which fails two hours later: the
    // sandbox's one-hour undo has expired by then, so it is not attempted.
    let mut late = supplier();
    late.step(Event::Start { now_ms: T0 });
    for (i, skill) in ["vendor.create", "budget.reserve", "sandbox.provision"]
        .iter()
        .enumerate()
    {
        late.step(Event::Result {
            target: Target::Forward(i),
            attempt: 1,
            outcome: CallOutcome::Succeeded {
                response: response(skill),
            },
            now_ms: T0,
        });
    }
    let commands = late.step(Event::Result {
        target: Target::Forward(3),
        attempt: 1,
        outcome: failed(),
        now_ms: T0 + 2 * 3_600_000,
    });
    assert!(
        matches!(commands.last(), Some(Command::Pause { reason }) if reason.contains("undo expired")),
        "{commands:?}"
    );
}

#[test]
fn stale_results_are_ignored() {
    let mut saga = supplier();
    saga.step(Event::Start { now_ms: T0 });
    let before = saga.clone();
    let stale = saga.step(Event::Result {
        target: Target::Forward(3),
        attempt: 1,
        outcome: CallOutcome::Succeeded {
            response: json!({}),
        },
        now_ms: T0 + 1,
    });
    assert!(
        matches!(stale.as_slice(), [Command::Ignored { why, .. }] if why.contains("not out")),
        "{stale:?}"
    );
    assert_eq!(state(&saga), state(&before));
}

#[test]
fn replaying_the_journal_rebuilds_the_same_state() {
    let mut saga = supplier();
    let mut journal = vec![Event::Start { now_ms: T0 }];
    let mut pending = vec![Event::Start { now_ms: T0 }];
    let mut failures: HashMap<String, u32> = HashMap::new();
    while let Some(event) = pending.pop() {
        for command in saga.step(event) {
            let next = match command {
                Command::Invoke(inv) => {
                    let n = failures.entry(inv.call.skill.clone()).or_default();
                    *n += 1;
                    let outcome = if inv.call.skill == "compliance.check" && *n < 3 {
                        unknown()
                    } else {
                        ok(&inv)
                    };
                    Event::Result {
                        target: inv.target,
                        attempt: inv.attempt,
                        outcome,
                        now_ms: T0 + 7,
                    }
                }
                Command::StartTimer {
                    timer: timer @ Timer::Retry { .. },
                    ..
                } => Event::TimerFired {
                    timer,
                    now_ms: T0 + 9,
                },
                _ => continue,
            };
            journal.push(next.clone());
            pending.push(next);
        }
    }
    assert!(matches!(
        saga.phase,
        Phase::Done {
            ending: Ending::Completed
        }
    ));
    let mut replayed = supplier();
    for event in journal {
        replayed.step(event);
    }
    assert_eq!(replayed, saga);
    assert_eq!(replayed.ledger(), saga.ledger());
    assert_eq!(saga.ledger()["steps"][3]["attempts"], 3);
}
