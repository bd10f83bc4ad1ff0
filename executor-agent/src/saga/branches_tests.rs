//! Plans with parallel branches, driven with scripted events: what is called at once,
//! what waits, and the reverse-start order of an unwind; and a property over random
//! partial orders and random answers in random order.

use proptest::prelude::*;
use serde_json::json;

use super::model::{Forward, Phase, Undo};
use super::tests::{ok, response, supplier};
use super::*;

const T0: i64 = 1_800_000_000_000;

/// The supplier-onboarding saga as a diamond: s0 → {s1, s2} → s3 → s4 (pivot) → s5.
fn diamond() -> Saga {
    let mut saga = supplier();
    saga.spec_mut().steps[1].after = Some(vec![0]);
    saga.spec_mut().steps[2].after = Some(vec![0]);
    saga.spec_mut().steps[3].after = Some(vec![1, 2]);
    saga.spec_mut().max_parallel_steps = Some(8);
    saga
}

/// The skills of the forward calls among `commands`, in order.
fn invoked(commands: &[Command]) -> Vec<(Target, String)> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::Invoke(inv) => Some((inv.target, inv.call.skill.clone())),
            _ => None,
        })
        .collect()
}

fn answer(
    saga: &mut Saga,
    commands: &[Command],
    step: usize,
    outcome: CallOutcome,
) -> Vec<Command> {
    let attempt = commands
        .iter()
        .find_map(|c| match c {
            Command::Invoke(inv) if inv.target.step() == step => Some(inv.attempt),
            _ => None,
        })
        .unwrap_or(1);
    let target = commands
        .iter()
        .find_map(|c| match c {
            Command::Invoke(inv) if inv.target.step() == step => Some(inv.target),
            _ => None,
        })
        .unwrap_or(Target::Forward(step));
    saga.step(Event::Result {
        target,
        attempt,
        outcome,
        now_ms: T0 + 10,
    })
}

/// `answer` with the step's usual response.
fn answer_ok(saga: &mut Saga, commands: &[Command], step: usize) -> Vec<Command> {
    let outcome = succeeded(saga, step);
    answer(saga, commands, step, outcome)
}

fn succeeded(saga: &Saga, step: usize) -> CallOutcome {
    CallOutcome::Succeeded {
        response: response(&saga.spec.steps[step].call.skill),
    }
}

#[test]
fn independent_steps_are_called_at_once_and_a_join_waits_for_both() {
    let mut saga = diamond();
    let started = saga.step(Event::Start { now_ms: T0 });
    assert_eq!(
        invoked(&started),
        vec![(Target::Forward(0), "vendor.create".into())]
    );
    let after_s0 = answer_ok(&mut saga, &started, 0);
    assert_eq!(
        invoked(&after_s0),
        vec![
            (Target::Forward(1), "budget.reserve".into()),
            (Target::Forward(2), "sandbox.provision".into())
        ],
        "both branches start with one event"
    );
    assert_eq!(saga.calls_out().len(), 2);
    let after_s1 = answer_ok(&mut saga, &after_s0, 1);
    assert!(
        invoked(&after_s1).is_empty(),
        "s3 waits for s2 too: {after_s1:?}"
    );
    let after_s2 = answer_ok(&mut saga, &after_s0, 2);
    assert_eq!(
        invoked(&after_s2),
        vec![(Target::Forward(3), "compliance.check".into())]
    );
    // The rest is a sequence, and ends as one.
    let mut next = after_s2;
    for step in 3..6 {
        next = answer_ok(&mut saga, &next, step);
    }
    assert!(
        matches!(
            next.last(),
            Some(Command::Finish {
                ending: Ending::Completed,
                ..
            })
        ),
        "{next:?}"
    );
    assert_eq!(saga.started, vec![0, 1, 2, 3, 4, 5]);
}

#[test]
fn a_failure_beside_a_call_out_waits_for_it_then_unwinds_what_took_effect() {
    let mut saga = diamond();
    let started = saga.step(Event::Start { now_ms: T0 });
    let branches = answer_ok(&mut saga, &started, 0);
    // s2 fails for good while s1 is out: nothing is compensated yet, nothing starts.
    let failed = answer(&mut saga, &branches, 2, CallOutcome::failed("no capacity"));
    assert!(invoked(&failed).is_empty(), "{failed:?}");
    assert!(matches!(saga.phase, Phase::Forward { .. }));
    // s1 answers: then s1 and s0 are compensated, s1 first (started later).
    let answered = answer_ok(&mut saga, &branches, 1);
    assert_eq!(
        invoked(&answered),
        vec![(Target::Compensation(1), "budget.release".into())]
    );
    let released = answer(
        &mut saga,
        &answered,
        1,
        CallOutcome::Succeeded {
            response: json!({"released": true}),
        },
    );
    assert_eq!(
        invoked(&released),
        vec![(Target::Compensation(0), "vendor.archive".into())]
    );
    let archived = answer(
        &mut saga,
        &released,
        0,
        CallOutcome::Succeeded {
            response: json!({}),
        },
    );
    assert!(
        matches!(
            archived.last(),
            Some(Command::Finish {
                ending: Ending::Compensated,
                ..
            })
        ),
        "{archived:?}"
    );
    assert_eq!(saga.records[2].undo, Undo::NothingToUndo);
}

#[test]
fn the_unwind_follows_the_reverse_of_the_order_steps_started_in_not_the_plans() {
    // s0 and s2 wait for nothing; s1 waits for s0, so it starts after s2.
    let mut saga = supplier();
    saga.spec_mut().steps[0].after = Some(vec![]);
    saga.spec_mut().steps[1].after = Some(vec![0]);
    saga.spec_mut().steps[2].after = Some(vec![]);
    saga.spec_mut().steps[2].args = json!({"vendorId": "v_literal"});
    saga.spec_mut().steps[3].after = Some(vec![1, 2]);
    saga.spec_mut().steps[3].args = json!({"vendorId": "v_literal", "tenantId": "t_literal"});
    saga.spec_mut().max_parallel_steps = Some(4);
    let started = saga.step(Event::Start { now_ms: T0 });
    assert_eq!(
        invoked(&started)
            .iter()
            .map(|(t, _)| *t)
            .collect::<Vec<_>>(),
        vec![Target::Forward(0), Target::Forward(2)]
    );
    let s2 = answer_ok(&mut saga, &started, 2);
    assert!(invoked(&s2).is_empty());
    let s0 = answer_ok(&mut saga, &started, 0);
    assert_eq!(
        invoked(&s0),
        vec![(Target::Forward(1), "budget.reserve".into())]
    );
    let s1 = answer_ok(&mut saga, &s0, 1);
    assert_eq!(saga.started, vec![0, 2, 1, 3]);
    // compliance.check fails for good: undone in reverse start order s1, s2, s0.
    let mut next = answer(&mut saga, &s1, 3, CallOutcome::failed("refused"));
    let mut undone = Vec::new();
    while let Some((Target::Compensation(i), _)) = invoked(&next).first().cloned() {
        undone.push(i);
        next = answer(
            &mut saga,
            &next,
            i,
            CallOutcome::Succeeded {
                response: json!({}),
            },
        );
    }
    assert_eq!(undone, vec![1, 2, 0]);
    assert!(matches!(
        saga.phase,
        Phase::Done {
            ending: Ending::Compensated
        }
    ));
}

#[test]
fn the_bound_keeps_branches_from_running_at_once() {
    let mut saga = diamond();
    saga.spec_mut().max_parallel_steps = Some(1);
    let started = saga.step(Event::Start { now_ms: T0 });
    let after_s0 = answer_ok(&mut saga, &started, 0);
    assert_eq!(
        invoked(&after_s0),
        vec![(Target::Forward(1), "budget.reserve".into())]
    );
    let after_s1 = answer_ok(&mut saga, &after_s0, 1);
    assert_eq!(
        invoked(&after_s1),
        vec![(Target::Forward(2), "sandbox.provision".into())]
    );
}

#[test]
fn a_cancel_while_two_branches_are_out_waits_for_both_then_compensates() {
    let mut saga = diamond();
    let started = saga.step(Event::Start { now_ms: T0 });
    let branches = answer_ok(&mut saga, &started, 0);
    let canceled = saga.step(Event::Cancel { now_ms: T0 + 20 });
    assert!(invoked(&canceled).is_empty());
    let first = answer_ok(&mut saga, &branches, 2);
    assert!(invoked(&first).is_empty(), "s1 is still out: {first:?}");
    let second = answer_ok(&mut saga, &branches, 1);
    assert_eq!(
        invoked(&second),
        vec![(Target::Compensation(2), "sandbox.deprovision".into())]
    );
}

#[test]
fn a_step_that_needs_an_approval_is_asked_for_once_nothing_else_is_under_way() {
    let mut saga = diamond();
    saga.spec_mut().steps[2].approval_timeout_ms = Some(60_000);
    let started = saga.step(Event::Start { now_ms: T0 });
    // s1 starts; s2 (needing approval) waits while s1 is out.
    let after_s0 = answer_ok(&mut saga, &started, 0);
    assert_eq!(
        invoked(&after_s0),
        vec![(Target::Forward(1), "budget.reserve".into())]
    );
    assert!(!after_s0.iter().any(|c| matches!(c, Command::Pause { .. })));
    // Once s1 answers, the saga pauses for s2's approval; once approved, s2 is called.
    let after_s1 = answer_ok(&mut saga, &after_s0, 1);
    assert!(
        matches!(after_s1.last(), Some(Command::Pause { .. })),
        "{after_s1:?}"
    );
    let decider = super::tests::approval_of_pause(&saga, "alice", T0 + 60_000);
    let approved = saga.step(Event::Resolve {
        resolution: Resolution::Approve,
        now_ms: T0 + 30,
        decider: Some(decider),
    });
    assert!(
        invoked(&approved).is_empty(),
        "called only once it has a slot"
    );
    let approved = saga.step(Event::Proceed { now_ms: T0 + 31 });
    assert_eq!(
        invoked(&approved),
        vec![(Target::Forward(2), "sandbox.provision".into())]
    );
}

#[test]
fn past_the_pivot_a_failed_branch_waits_for_the_other_then_a_person_decides() {
    // s5 and a copy of it, s6, both wait for the pivot s4.
    let mut saga = supplier();
    let mut s6 = saga.spec.steps[5].clone();
    s6.id = "s6".into();
    s6.idempotency_key = "sg_demo_supplier_onboarding:s6".into();
    s6.after = Some(vec![4]);
    saga.spec_mut().steps.push(s6);
    saga.spec_mut().max_parallel_steps = Some(4);
    let mut saga = Saga::new(saga.spec);
    let mut next = saga.step(Event::Start { now_ms: T0 });
    for step in 0..5 {
        next = answer_ok(&mut saga, &next, step);
    }
    assert_eq!(
        invoked(&next).iter().map(|(t, _)| *t).collect::<Vec<_>>(),
        vec![Target::Forward(5), Target::Forward(6)]
    );
    let branches = next;
    let failed = answer(
        &mut saga,
        &branches,
        5,
        CallOutcome::Failed {
            reason: "mailbox full".into(),
            failure: Some(FailureClass::Permanent),
        },
    );
    assert!(
        !failed.iter().any(|c| matches!(c, Command::Pause { .. })),
        "no pause while s6 is out: {failed:?}"
    );
    let answered = answer_ok(&mut saga, &branches, 6);
    assert!(
        matches!(answered.last(), Some(Command::Pause { reason }) if reason.contains("s5")),
        "{answered:?}"
    );
    assert!(matches!(saga.phase, Phase::Paused { .. }));
    // Resolved by hand, the saga completes.
    let resolved = saga.step(Event::Resolve {
        resolution: Resolution::ResolvedManually,
        now_ms: T0 + 40,
        decider: None,
    });
    assert!(
        matches!(
            resolved.last(),
            Some(Command::Finish {
                ending: Ending::Completed,
                ..
            })
        ),
        "{resolved:?}"
    );
}

/// A saga of `n` compensable steps (built from the supplier's first three) whose
/// dependencies are `after`, with literal arguments.
fn random_saga(after: &[Vec<usize>], bound: u32) -> Saga {
    let template = supplier();
    let mut saga = template.clone();
    saga.spec_mut().steps = after
        .iter()
        .enumerate()
        .map(|(k, waits)| {
            let mut step = template.spec.steps[k % 3].clone();
            step.id = format!("s{k}");
            step.idempotency_key = format!("sg:s{k}");
            step.args = json!({"legalName": "ACME", "contactEmail": "a@example.com", "vendorId": "v", "amountMinor": 1, "currency": "EUR"});
            step.approval_timeout_ms = None;
            step.verification = None;
            step.undo_ttl_ms = None;
            step.undo_expires_at = None;
            if let Some(c) = &mut step.compensation {
                c.idempotency_key = format!("sg:s{k}:undo");
                c.verification = None;
            }
            step.after = Some(waits.clone());
            step
        })
        .collect();
    saga.spec_mut().point_of_no_return = None;
    saga.spec_mut().mandate = None;
    saga.spec_mut().max_parallel_steps = Some(bound);
    Saga::new(saga.spec)
}

fn dags() -> impl Strategy<Value = Vec<Vec<usize>>> {
    (1usize..7).prop_flat_map(|n| {
        (0..n)
            .map(|k| {
                proptest::collection::btree_set(0..k.max(1), 0..=k.min(3))
                    .prop_map(move |s| s.into_iter().filter(|&d| d < k).collect::<Vec<_>>())
            })
            .collect::<Vec<_>>()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// For random partial orders, bounds, answers and orders of answering: no step is
    /// called before the steps it waits for succeeded, none starts after a definite
    /// failure, no more than the bound are under way, and the unwind compensates exactly
    /// the steps that took effect, in reverse order of start.
    #[test]
    fn branches_run_after_their_dependencies_and_unwind_in_reverse_start_order(
        after in dags(),
        bound in 1u32..4,
        fails in proptest::collection::vec(0u8..10, 7),
        picks in proptest::collection::vec(any::<prop::sample::Index>(), 64),
    ) {
        let mut saga = random_saga(&after, bound);
        let n = after.len();
        let mut out: Vec<Invocation> = Vec::new();
        let mut succeeded = vec![false; n];
        let mut forward_started = Vec::new();
        let mut failed_once = false;
        let mut compensated = Vec::new();
        let mut pick = picks.into_iter().cycle();
        let mut commands = saga.step(Event::Start { now_ms: T0 });
        let mut now = T0;
        loop {
            for c in &commands {
                if let Command::Invoke(inv) = c {
                    match inv.target {
                        Target::Forward(i) => {
                            prop_assert!(!failed_once, "step {} started after a definite failure", i);
                            for &d in &after[i] {
                                prop_assert!(succeeded[d], "step {} called before {} succeeded", i, d);
                            }
                            forward_started.push(i);
                        }
                        Target::Compensation(i) => compensated.push(i),
                        Target::Verification(_) => {}
                    }
                    out.push(inv.clone());
                }
            }
            let forward_out = out.iter().filter(|i| matches!(i.target, Target::Forward(_))).count();
            prop_assert!(forward_out <= bound as usize, "{} under way, bound {}", forward_out, bound);
            if out.is_empty() {
                break;
            }
            let inv = out.remove(pick.next().unwrap().index(out.len()));
            now += 5;
            let outcome = match inv.target {
                Target::Forward(i) if fails[i] == 0 => {
                    failed_once = true;
                    CallOutcome::Failed { reason: "no".into(), failure: Some(FailureClass::Permanent) }
                }
                Target::Forward(i) => {
                    succeeded[i] = true;
                    ok(&inv)
                }
                _ => ok(&inv),
            };
            commands = saga.step(Event::Result { target: inv.target, attempt: inv.attempt, outcome, now_ms: now });
        }
        let ended = match saga.phase {
            Phase::Done { ending } => ending,
            ref other => panic!("did not end: {:?}", other),
        };
        if failed_once {
            prop_assert_eq!(ended, Ending::Compensated);
            let expected: Vec<usize> = forward_started.iter().rev().copied().filter(|&i| succeeded[i]).collect();
            prop_assert_eq!(compensated, expected);
            for (i, record) in saga.records.iter().enumerate() {
                let shown = matches!(record.forward, Forward::Succeeded { .. });
                prop_assert_eq!(shown, succeeded[i], "step {} as the ledger shows it", i);
            }
        } else {
            prop_assert_eq!(ended, Ending::Completed);
            prop_assert!(compensated.is_empty());
            prop_assert_eq!(forward_started.len(), n);
        }
    }
}
