//! The real `executor-agent` binary killed with SIGKILL right after an approval is
//! journaled, before the approved step was called (an approval is journaled on its own;
//! the step is called once the saga has a slot): the restart calls the approved step
//! once, under the approval journaled, and the saga completes as it would have.

mod common;

use agent_host::OutboundCall;
use agent_host::sdk::{SendMessageResponse, TaskState};
use common::process::*;
use common::served::{approval, approval_plan_by, in_five_minutes};
use common::{answered_at_once, calls_of, data_message, ledger_of, start_tools_with};
use shared_types::SigningIdentity;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_after_an_approval_is_journaled_calls_the_approved_step_once_after_the_restart() {
    let world = World::new();
    let approver = SigningIdentity::from_seed([45; 32], Some("approver".into()));
    let key = world.path("approver.pub.jwk");
    std::fs::write(&key, serde_json::to_string(&approver.public_jwk()).unwrap()).unwrap();
    let flag = format!("approver={}", key.display());
    let as_approver = OutboundCall {
        bearer: Some(agent_host::mint_jwt(&approver, "approver", "executor", 60).unwrap()),
        ..OutboundCall::default()
    };
    let data = tempfile::tempdir().unwrap();
    let (cards, logs) = start_tools_with(&[], &world.platform, 300, &|_, _| {}).await;
    // Journal writes: the begin with s0's intent; s0's answer with the pause for the
    // review's approval; the approval. The executor stops writing after the third.
    let mut executor =
        Executor::start_logging(&world, data.path(), Some(3), "warn", &["--approver", &flag]);
    register(&executor, &cards).await;
    let plan = approval_plan_by(&world.planner, "sg_approved_then_killed");
    let paused = match executor
        .client()
        .send(&as_planner(&world), &data_message(plan, None))
        .await
        .unwrap()
    {
        SendMessageResponse::Task(task) => task,
        other => panic!("expected a task, got {other:?}"),
    };
    assert_eq!(
        paused.status.state,
        TaskState::InputRequired,
        "{:?}",
        paused.status
    );
    let answer = answered_at_once(data_message(
        approval(&paused, in_five_minutes()),
        Some(&paused.id),
    ));
    executor.client().send(&as_approver, &answer).await.unwrap();
    assert!(
        executor.paused().await,
        "the approval's write was never reached"
    );
    let reviews = || calls_of(&logs, "compliance-registry", "compliance.review");
    assert_eq!(reviews(), 0, "killed before the review was called");
    executor.kill();

    let executor =
        Executor::start_logging(&world, data.path(), None, "warn", &["--approver", &flag]);
    // The restart's view of the task: the approval taken, the review not called yet or
    // under way; followed to its end.
    let now = executor
        .client()
        .get_task(&as_planner(&world), &paused.id)
        .await
        .unwrap();
    assert_ne!(
        now.status.state,
        TaskState::InputRequired,
        "{:?}",
        now.status
    );
    let ended = settle(&world, &executor, now).await;
    assert_eq!(
        ended.status.state,
        TaskState::Completed,
        "{:?}",
        ended.status
    );
    assert_eq!(
        reviews(),
        1,
        "the approved review was called once, after the restart"
    );
    let decisions = &ledger_of(&ended)["steps"][1]["decisions"];
    assert_eq!(decisions.as_array().map(Vec::len), Some(1), "{decisions}");
    assert_eq!(decisions[0]["resolution"], "approve");
    // Every effect once.
    for (agent, log) in &logs {
        let log = log.lock().unwrap();
        let mut keys: Vec<&String> = log.effects.iter().map(|(key, _)| key).collect();
        let all = keys.len();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), all, "{agent} applied a key twice");
    }
}
