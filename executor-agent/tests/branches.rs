//! Plans with parallel branches against a running executor, over A2A with real tool
//! agents: the diamond of the supplier plan (s0 → {s1, s2} → s3 → s4, the pivot → s5)
//! has both branches out at once, judged from the tool agents' own ledgers; a branch that
//! fails while the other is out unwinds once the other has answered, in reverse order of
//! start; and every bad partial order is refused with its code before any call.

mod common;

use std::time::Duration;

use agent_host::sdk::{SendMessageResponse, StreamResponse, TaskState};
use common::*;
use futures::StreamExt;
use serde_json::{Value, json};

const PARALLEL: &str = "examples/plans/supplier-onboarding-parallel.json";
const SAGA: &str = "sg_demo_supplier_parallel";

/// A bound on waits that should end at once: a run that hangs fails instead.
const PATIENCE: Duration = Duration::from_secs(30);

fn key(step: &str) -> String {
    format!("{SAGA}:{step}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn independent_branches_are_out_at_once_and_the_saga_completes() {
    // Both branch tools apply their effect and hold the answer until told.
    let held = [
        ("budget.reserve", Fault::ApplyThenHold(1)),
        ("sandbox.provision", Fault::ApplyThenHold(1)),
    ];
    let setup = Harness::start_timed(&held, PATIENCE.as_millis() as u64).await;
    let request = data_message(setup.signed(PARALLEL), None);
    let (client, call) = (
        agent_host::AgentClient::new(&setup.url).unwrap(),
        setup.as_planner(),
    );
    let sent = tokio::spawn(async move { client.send(&call, &request).await });

    // Each tool has applied its effect and holds its answer: a sequence would never
    // call the second while the first holds.
    let budget = setup.log("budget").applied.clone();
    let sandbox = setup.log("sandbox").applied.clone();
    tokio::time::timeout(PATIENCE, async {
        budget.notified().await;
        sandbox.notified().await;
    })
    .await
    .expect("both branches are called before either answers");
    assert!(
        setup.log("compliance-registry").calls.is_empty(),
        "the join waits for both branches"
    );
    setup.log("budget").release.notify_one();
    setup.log("sandbox").release.notify_one();

    let task = match sent.await.unwrap().unwrap() {
        SendMessageResponse::Task(task) => task,
        other => panic!("expected a task, got {other:?}"),
    };
    assert_eq!(task.status.state, TaskState::Completed, "{:?}", task.status);
    let effects = effects_in_order(&setup.logs);
    for step in ["s0", "s1", "s2", "s3", "s4", "s5"] {
        let applied = effects.iter().filter(|e| **e == key(step)).count();
        assert_eq!(applied, 1, "{step} applied once: {effects:?}");
    }
    // The join and the pivot came after both branches.
    let at = |k: &str| effects.iter().position(|e| e == k).unwrap();
    assert!(at(&key("s3")) > at(&key("s1")) && at(&key("s3")) > at(&key("s2")));
    // The ledger shows what each step waited for.
    let ledger = ledger_of(&task);
    assert_eq!(ledger["steps"][3]["after"], json!(["s1", "s2"]), "{ledger}");
    assert_eq!(ledger["steps"][2]["after"], json!(["s0"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_branch_failing_while_the_other_is_out_unwinds_once_it_answers_in_reverse_start_order() {
    let faults = [
        ("budget.reserve", Fault::ApplyThenHold(1)),
        ("sandbox.provision", Fault::Decline),
    ];
    let setup = Harness::start_timed(&faults, PATIENCE.as_millis() as u64).await;
    let request = data_message(setup.signed(PARALLEL), None);
    let mut events = setup
        .client
        .stream(&setup.as_planner(), &request)
        .await
        .unwrap();
    // The sandbox declined and the executor has journaled it, while the budget holds s1.
    let says = |status: &agent_host::sdk::TaskStatus, words: &str| {
        serde_json::to_string(&status.message)
            .unwrap_or_default()
            .contains(words)
    };
    tokio::time::timeout(PATIENCE, async {
        while let Some(event) = events.next().await {
            match event.unwrap() {
                StreamResponse::StatusUpdate(update) if says(&update.status, "s2: failed") => {
                    return;
                }
                _ => {}
            }
        }
        panic!("the stream ended before s2 failed");
    })
    .await
    .expect("s2 fails while s1 is out");
    assert!(
        effects_in_order(&setup.logs)
            .iter()
            .all(|e| !e.ends_with(":undo")),
        "nothing is undone while s1 is out"
    );
    setup.log("budget").release.notify_one();

    let mut ended = None;
    while let Some(event) = tokio::time::timeout(PATIENCE, events.next())
        .await
        .expect("the saga ends")
    {
        if let StreamResponse::StatusUpdate(update) = event.unwrap()
            && matches!(update.status.state, TaskState::Failed)
        {
            ended = Some(update.status);
        }
    }
    let ended = ended.expect("the task failed, compensated");
    assert!(
        says(&ended, "every completed step was compensated"),
        "{ended:?}"
    );
    // s1 answered, then was undone before s0 (it started later); s2 left nothing.
    assert_eq!(
        effects_in_order(&setup.logs),
        vec![key("s0"), key("s1"), key("s1:undo"), key("s0:undo")]
    );
}

/// The parallel plan with `change` made, signed.
fn changed(setup: &Harness, change: impl FnOnce(&mut Value)) -> Value {
    let mut plan = read(PARALLEL);
    change(&mut plan);
    sign_plan(&setup.planner, &mut plan);
    plan
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_partial_order_is_refused_with_its_code_and_nothing_runs() {
    let setup = Harness::start(&[]).await;
    type Change = Box<dyn FnOnce(&mut Value)>;
    let cases: Vec<(&str, Change)> = vec![
        (
            "UNKNOWN_DEPENDENCY",
            Box::new(|p| p["steps"][2]["after"] = json!(["s9"])),
        ),
        (
            "UNKNOWN_DEPENDENCY",
            Box::new(|p| p["steps"][2]["after"] = json!(["s2"])),
        ),
        (
            "DEPENDENCY_CYCLE",
            Box::new(|p| {
                p["steps"][1]["after"] = json!(["s2"]);
                p["steps"][2]["after"] = json!(["s1"]);
            }),
        ),
        (
            "DEPENDENCY_ORDER",
            Box::new(|p| p["steps"][1]["after"] = json!(["s0", "s2"])),
        ),
        // s3 reads s2's tenant but no longer waits for it, even through others.
        (
            "BAD_REFERENCE",
            Box::new(|p| p["steps"][3]["after"] = json!(["s1"])),
        ),
        // s1 runs alongside the pivot: nothing orders the budget before the capture.
        (
            "PIVOT_ORDERING",
            Box::new(|p| p["steps"][3]["after"] = json!(["s2"])),
        ),
    ];
    for (code, change) in cases {
        let plan = changed(&setup, change);
        let task = setup.send(plan, None).await;
        assert_eq!(
            task.status.state,
            TaskState::Rejected,
            "{code}: {:?}",
            task.status
        );
        let said = format!("{:?}", task.status.message);
        assert!(said.contains(code), "{code} in {said}");
    }
    let calls: usize = setup
        .logs
        .values()
        .map(|l| l.lock().unwrap().calls.len())
        .sum();
    assert_eq!(calls, 0, "no tool agent saw a call");
}
