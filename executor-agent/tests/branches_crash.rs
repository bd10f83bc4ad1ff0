//! A saga with parallel branches, the real `executor-agent` binary killed with SIGKILL
//! at every journal point (both branches out at once among them) and while both
//! branches' tools hold answers to calls they applied: the restart ends as the
//! uninterrupted run does, each effect applied once.

mod common;

use agent_host::sdk::TaskState;
use common::Fault;
use common::crash::*;
use common::process::*;

const PARALLEL: &str = "examples/plans/supplier-onboarding-parallel.json";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_at_every_journal_point_of_a_saga_with_branches_changes_nothing() {
    // The header and start with s0's intent; s0's answer with both branches' intents
    // (from here until the second answer, both calls are out); each branch's answer (the
    // second with s3's intent); s3; s4; s5 with the end.
    let world = World::with_plan(PARALLEL);
    sweep_world(&world, &[], &|_, _| {}, TaskState::Completed, 7).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_at_every_journal_point_of_an_unwinding_with_branches_changes_nothing() {
    // The pivot declines: s2 and s1 are undone in reverse start order (s2's call was
    // made after s1's, in the same step), then s0; the last undo's answer is the end.
    let world = World::with_plan(PARALLEL);
    let declined = [("payments.capture", Fault::Decline)];
    sweep_world(&world, &declined, &|_, _| {}, TaskState::Failed, 9).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_while_both_branches_hold_answers_repeats_each_under_its_key() {
    let world = World::with_plan(PARALLEL);
    let (reference, _) = run(&world, &[], Crash::Never).await;
    assert_eq!(reference.state, TaskState::Completed, "{reference:?}");
    // Both branch tools apply and never answer; the executor is killed once the second
    // has applied (the first applied already: both calls were out at once).
    let hung = [
        ("budget.reserve", Fault::ApplyThenHang(1)),
        ("sandbox.provision", Fault::ApplyThenHang(1)),
    ];
    for (agent, step) in [("budget", "s1"), ("sandbox", "s2")] {
        let key = format!("sg_demo_supplier_parallel:{step}");
        let crash = Crash::AfterApplied { agent, key: &key };
        let (ending, crashed) = run(&world, &hung, crash).await;
        assert!(crashed, "{key} was never applied");
        assert_eq!(
            ending, reference,
            "after a kill with {key} applied, unanswered"
        );
    }
}
