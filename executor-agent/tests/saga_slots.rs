//! Saga slots in the executor as an A2A agent: accepted plans beyond `max_running_sagas`
//! are journaled, wait with their tasks `SUBMITTED` and run in the order they came; a saga
//! waiting for a person gives its slot back; a waiting plan can be canceled, one left
//! waiting at a stop waits again at the next start, and one sent again gets its task
//! back; a saga a person answered gets the next slot ahead of new plans. A plan's task is
//! given out once its begin is durable, and a cancel then unwinds its saga.

mod common;

use executor_agent::journal::SagaLog;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use agent_host::sdk::{Task, TaskState};
use agent_host::store::TaskStore;
use agent_host::{Agent, AgentClient, SqliteTaskStore, TaskManager};
use common::*;
use executor_agent::agent::{Executor, ExecutorAgent, ExecutorConfig};
use serde_json::{Value, json};
use shared_types::TrustStore;

/// Far longer than anything here takes; only a saga that never gets its slot reaches it.
const WAIT: Duration = Duration::from_secs(30);

/// One saga slot; the sandbox applies its first call and holds the answer (no call
/// times out while the test holds one).
async fn one_slot_held_at_the_sandbox() -> Harness {
    let held = [("sandbox.provision", Fault::ApplyThenHold(1))];
    Harness::start_with(&held, WAIT.as_millis() as u64, 1).await
}

fn plan(setup: &Harness, saga_id: &str) -> Value {
    plan_as(
        setup,
        saga_id,
        chrono::Utc::now() + chrono::Duration::hours(1),
    )
}

/// Sends `plan` and returns its task at once, without waiting for the saga.
async fn send_now(setup: &Harness, plan: Value) -> Task {
    let request = answered_at_once(data_message(plan, None));
    match setup.client.send(&setup.as_planner(), &request).await {
        Ok(agent_host::sdk::SendMessageResponse::Task(task)) => task,
        other => panic!("expected a task, got {other:?}"),
    }
}

async fn task_of(setup: &Harness, id: &str) -> Task {
    setup
        .client
        .get_task(&setup.as_planner(), id)
        .await
        .unwrap()
}

/// Waits until `n` plans wait for a slot.
async fn until_waiting(setup: &Harness, n: usize) {
    let mut waiting = setup.executor.slots().watch_waiting();
    tokio::time::timeout(WAIT, waiting.wait_for(|w| *w == n))
        .await
        .unwrap_or_else(|_| panic!("{n} plans never waited for a slot"))
        .unwrap();
}

/// Waits until `n` sagas are marked finished in the journal (after their ends are on
/// their tasks).
async fn until_finished(setup: &Harness, n: u32) {
    let mut finishes = setup.journal.finishes.subscribe();
    tokio::time::timeout(WAIT, finishes.wait_for(|f| *f >= n))
        .await
        .unwrap_or_else(|_| panic!("{n} sagas never finished"))
        .unwrap();
}

/// Releases the sandbox call held.
fn release_the_sandbox(setup: &Harness) {
    let release = setup.log("sandbox").release.clone();
    release.notify_one();
}

async fn wait_until_the_sandbox_holds(setup: &Harness) {
    wait_until_the_sandbox_applied(setup, 1).await;
}

/// Waits until the sandbox has applied `n` effects (the last of them may be held).
async fn wait_until_the_sandbox_applied(setup: &Harness, n: usize) {
    let applied = setup.log("sandbox").applied.clone();
    while setup.log("sandbox").effects.len() < n {
        applied.notified().await;
    }
}

/// The calls any tool saw under saga `saga_id`'s idempotency keys.
fn calls_of(setup: &Harness, saga_id: &str) -> usize {
    let prefix = format!("{saga_id}:");
    setup
        .logs
        .values()
        .map(|log| {
            let log = log.lock().unwrap();
            log.calls
                .iter()
                .filter(|c| c.0.starts_with(&prefix))
                .count()
        })
        .sum()
}

fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_the_slots_plans_wait_submitted_and_run_one_after_another_in_order() {
    let setup = one_slot_held_at_the_sandbox().await;
    let first = send_now(&setup, plan(&setup, "sg_first")).await;
    wait_until_the_sandbox_holds(&setup).await;
    let second = send_now(&setup, plan(&setup, "sg_second")).await;
    until_waiting(&setup, 1).await;
    let third = send_now(&setup, plan(&setup, "sg_third")).await;
    until_waiting(&setup, 2).await;

    for (waiting, ahead) in [(&second, 0), (&third, 1)] {
        let task = task_of(&setup, &waiting.id).await;
        assert_eq!(task.status.state, TaskState::Submitted, "{:?}", task.status);
        let shown = format!("{:?}", task.status.message);
        let why = format!("waiting for a saga slot: all 1 are taken, {ahead} plan(s) waiting");
        assert!(shown.contains(&why), "{shown}");
    }
    assert_eq!(
        calls_of(&setup, "sg_second") + calls_of(&setup, "sg_third"),
        0
    );
    let text = setup.executor.metrics_text().await.unwrap();
    assert_eq!(metric(&text, "sagaplane_sagas_waiting_for_a_slot"), 2.0);
    assert_eq!(metric(&text, "sagaplane_sagas_running"), 1.0);
    assert_eq!(metric(&text, "sagaplane_saga_slots"), 1.0);

    release_the_sandbox(&setup);
    until_finished(&setup, 3).await;
    for id in [&first.id, &second.id, &third.id] {
        assert_eq!(task_of(&setup, id).await.status.state, TaskState::Completed);
    }
    // One saga at a time, in the order the plans came: each saga's six effects together.
    let sagas: Vec<String> = effects_in_order(&setup.logs)
        .iter()
        .map(|key| key.split(':').next().unwrap().to_owned())
        .collect();
    let expected: Vec<&str> = ["sg_first", "sg_second", "sg_third"]
        .iter()
        .flat_map(|s| [*s; 6])
        .collect();
    assert_eq!(sagas, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saga_waiting_for_a_person_gives_its_slot_to_the_next() {
    // The mailer answers 503 five times: the first saga escalates after the pivot.
    let setup = Harness::start_with(&[("email.send", Fault::ServerError(5))], 300, 1).await;
    let escalated = setup.send(plan(&setup, "sg_escalated"), None).await;
    assert_eq!(escalated.status.state, TaskState::InputRequired);

    let next = tokio::time::timeout(WAIT, setup.send(plan(&setup, "sg_next"), None))
        .await
        .expect("the paused saga gave its slot back");
    assert_eq!(next.status.state, TaskState::Completed, "{:?}", next.status);

    let resolved = setup
        .resolve(json!({"resolution": "retry"}), &escalated.id)
        .await;
    assert_eq!(
        resolved.status.state,
        TaskState::Completed,
        "{:?}",
        resolved.status
    );
    assert_eq!(setup.executor.slots().in_use(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saga_answered_by_a_person_gets_the_next_slot_before_a_plan_that_waited_longer() {
    // One slot. The mailer declines its first call, so the first saga pauses after the
    // pivot, its mail not sent, and gives its slot back. The sandbox holds its first two calls: the first
    // saga's is let go at once, the second saga's is held while it keeps the slot.
    let faults = [
        ("sandbox.provision", Fault::ApplyThenHold(2)),
        ("email.send", Fault::DeclineTimes(1)),
    ];
    let setup = Harness::start_with(&faults, WAIT.as_millis() as u64, 1).await;
    release_the_sandbox(&setup);
    let paused = setup.send(plan(&setup, "sg_answered"), None).await;
    assert_eq!(paused.status.state, TaskState::InputRequired);

    send_now(&setup, plan(&setup, "sg_holding")).await;
    wait_until_the_sandbox_applied(&setup, 2).await;
    send_now(&setup, plan(&setup, "sg_new")).await;
    until_waiting(&setup, 1).await;

    // The person answers while the only slot is taken: the answered saga waits too,
    // after the new plan came, and must still go first.
    let answer = {
        let (client, id) = (AgentClient::new(&setup.url).unwrap(), paused.id.clone());
        let approver = setup.as_approver();
        tokio::spawn(async move {
            let request = data_message(json!({"resolution": "retry"}), Some(&id));
            client.send(&approver, &request).await
        })
    };
    until_waiting(&setup, 2).await;
    assert_eq!(calls_of(&setup, "sg_new"), 0);

    release_the_sandbox(&setup);
    match answer.await.unwrap() {
        Ok(agent_host::sdk::SendMessageResponse::Task(task)) => {
            assert_eq!(task.status.state, TaskState::Completed, "{:?}", task.status);
        }
        other => panic!("expected the answered saga's task, got {other:?}"),
    }
    until_finished(&setup, 3).await;
    // The answered saga's mail, sent on the retry, came before any effect of the plan
    // that waited longer for the slot.
    let sagas: Vec<String> = effects_in_order(&setup.logs)
        .iter()
        .map(|key| key.split(':').next().unwrap().to_owned())
        .collect();
    let answered_last = sagas.iter().rposition(|s| s == "sg_answered").unwrap();
    let new_first = sagas.iter().position(|s| s == "sg_new").unwrap();
    assert!(answered_last < new_first, "{sagas:?}");
    assert_eq!(
        sagas.iter().filter(|s| *s == "sg_answered").count(),
        6,
        "{sagas:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_sent_again_while_it_waits_for_a_slot_gets_its_task_back() {
    let setup = one_slot_held_at_the_sandbox().await;
    send_now(&setup, plan(&setup, "sg_first")).await;
    wait_until_the_sandbox_holds(&setup).await;
    let waiting_plan = plan(&setup, "sg_waiting");
    let waiting = send_now(&setup, waiting_plan.clone()).await;
    until_waiting(&setup, 1).await;

    // A client sending the plan again (after a timeout, say) gets the same task, and
    // the plan does not wait a second time.
    let again = send_now(&setup, waiting_plan).await;
    assert_eq!(again.id, waiting.id);
    assert_eq!(setup.executor.slots().waiting(), 1);
    // The same saga with other content is refused at once, without waiting.
    let later = chrono::Utc::now() + chrono::Duration::hours(2);
    let refused =
        tokio::time::timeout(WAIT, setup.send(plan_as(&setup, "sg_waiting", later), None))
            .await
            .expect("a conflicting plan is answered without waiting for a slot");
    assert_eq!(refused.status.state, TaskState::Rejected);
    let text = format!("{:?}", refused.status.message);
    assert!(text.contains("PLAN_CONFLICT"), "{text}");
    assert_eq!(setup.executor.slots().waiting(), 1);

    release_the_sandbox(&setup);
    until_finished(&setup, 2).await;
    let task = task_of(&setup, &waiting.id).await;
    assert_eq!(task.status.state, TaskState::Completed, "{:?}", task.status);
    let keys: Vec<String> = effects_in_order(&setup.logs)
        .into_iter()
        .filter(|k| k.starts_with("sg_waiting:"))
        .collect();
    assert_eq!(keys.len(), 6, "every effect once: {keys:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_canceled_while_it_waits_for_a_slot_never_runs() {
    let setup = one_slot_held_at_the_sandbox().await;
    send_now(&setup, plan(&setup, "sg_first")).await;
    wait_until_the_sandbox_holds(&setup).await;
    let waiting = send_now(&setup, plan(&setup, "sg_canceled")).await;
    until_waiting(&setup, 1).await;

    let canceled = setup
        .client
        .cancel_task(&setup.as_planner(), &waiting.id)
        .await
        .unwrap();
    assert_eq!(canceled.status.state, TaskState::Canceled);
    let text = format!("{:?}", canceled.status.message);
    assert!(text.contains("nothing ran"), "{text}");
    until_waiting(&setup, 0).await;

    release_the_sandbox(&setup);
    until_finished(&setup, 1).await;
    // The slot is free again, and goes to the next plan, not to the canceled one.
    let next = setup.send(plan(&setup, "sg_next"), None).await;
    assert_eq!(next.status.state, TaskState::Completed);
    assert_eq!(calls_of(&setup, "sg_canceled"), 0);
    // Accepted, then canceled before its start: journaled, and finished.
    let (_, entries) = setup.journal.load("sg_canceled").await.unwrap().unwrap();
    assert_eq!(entries.len(), 1, "its cancel alone: {entries:?}");
    assert!(
        !setup
            .journal
            .unfinished()
            .await
            .unwrap()
            .contains(&"sg_canceled".to_owned())
    );
    let after = task_of(&setup, &waiting.id).await;
    assert_eq!(after.status.state, TaskState::Canceled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_left_waiting_at_a_stop_is_started_at_the_next_start() {
    let setup = one_slot_held_at_the_sandbox().await;
    let first = send_now(&setup, plan(&setup, "sg_first")).await;
    wait_until_the_sandbox_holds(&setup).await;
    let waiting = send_now(&setup, plan(&setup, "sg_waiting")).await;
    until_waiting(&setup, 1).await;

    setup.shutdown.cancel();
    release_the_sandbox(&setup);
    let left = setup.executor.stopped(WAIT).await;
    assert!(
        left.is_empty(),
        "nothing waits for the plan with no slot: {left:?}"
    );
    assert_eq!(
        task_of(&setup, &waiting.id).await.status.state,
        TaskState::Submitted
    );
    // Accepted: journaled with no entry, to start once it has a slot.
    let (_, entries) = setup.journal.load("sg_waiting").await.unwrap().unwrap();
    assert!(entries.is_empty(), "{entries:?}");
    assert_eq!(calls_of(&setup, "sg_waiting"), 0);

    // The next start on the same state file: both sagas resume, the first one where it
    // stood and the waiting one not started, and with one slot they run one after the
    // other.
    let (restarted, tasks) = restart(&setup);
    let finished_before = *setup.journal.finishes.borrow();
    assert_eq!(restarted.recover().await.unwrap(), 2);
    until_finished(&setup, finished_before + 2).await;
    for id in [&first.id, &waiting.id] {
        let task = tasks.store().get(id).await.unwrap().unwrap();
        assert_eq!(task.status.state, TaskState::Completed, "{:?}", task.status);
    }
    for saga in ["sg_first", "sg_waiting"] {
        let keys: Vec<String> = effects_in_order(&setup.logs)
            .into_iter()
            .filter(|k| k.starts_with(&format!("{saga}:")))
            .collect();
        assert_eq!(keys.len(), 6, "{saga}: every effect once: {keys:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plans_task_is_given_out_only_once_its_begin_is_durable_and_a_cancel_then_unwinds_it() {
    // s2's answer is held, so the cancel reaches the saga before its pivot, whatever the
    // scheduling.
    let setup = Harness::start(&[("sandbox.provision", Fault::ApplyThenHold(1))]).await;
    setup.journal.hold_begins();
    let sending = {
        let plan = plan(&setup, "sg_canceled_early");
        let (client, planner) = (AgentClient::new(&setup.url).unwrap(), setup.as_planner());
        let request = answered_at_once(data_message(plan, None));
        tokio::spawn(async move { client.send(&planner, &request).await })
    };
    setup.journal.begin_reached.notified().await;
    // The begin carries the task's creation: until it is durable there is no task, and
    // the request that sent the plan is not answered (a task id given out is a task
    // stored).
    let store = SqliteTaskStore::on(&setup.db).unwrap();
    let listed = store
        .list(&agent_host::store::TaskQuery {
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.total, 0, "no task before its begin is durable");
    assert!(!sending.is_finished(), "the request waits for the begin");
    setup.journal.begin_release.notify_one();
    let task = match sending.await.unwrap() {
        Ok(agent_host::sdk::SendMessageResponse::Task(task)) => task,
        other => panic!("expected a task, got {other:?}"),
    };
    // Its saga has begun: the task is created working.
    assert_eq!(task.status.state, TaskState::Working);
    assert!(store.get(&task.id).await.unwrap().is_some(), "stored");

    let applied = setup.log("sandbox").applied.clone();
    while setup.log("sandbox").effects.is_empty() {
        applied.notified().await;
    }
    // Canceled while s2's answer is held; the answer goes once the cancel is journaled.
    let mut cancels = setup.journal.cancels.subscribe();
    let (client, planner, task_id) = (
        AgentClient::new(&setup.url).unwrap(),
        setup.as_planner(),
        task.id.clone(),
    );
    let cancel = tokio::spawn(async move { client.cancel_task(&planner, &task_id).await });
    cancels.wait_for(|n| *n >= 1).await.unwrap();
    setup.log("sandbox").release.notify_one();
    let canceled = cancel.await.unwrap().unwrap();
    assert_eq!(
        canceled.status.state,
        TaskState::Canceled,
        "{:?}",
        canceled.status
    );
    // What the saga did before the cancel reached it (s1, s2) is undone, and nothing
    // after it ran.
    assert!(setup.log("compliance-registry").effects.is_empty());
    for (agent, log) in &setup.logs {
        let effects = log.lock().unwrap().effects.clone();
        let done = effects
            .iter()
            .filter(|(k, _)| !k.ends_with(":undo"))
            .count();
        let undone = effects.len() - done;
        assert_eq!(done, undone, "{agent}: {effects:?}");
    }
}

/// An executor started again on the harness's state file, journal and tools (one slot),
/// not serving; and its task manager.
fn restart(setup: &Harness) -> (Arc<Executor>, Arc<TaskManager>) {
    let mut planner_keys = TrustStore::new();
    planner_keys.add_jwk(&setup.planner.public_jwk()).unwrap();
    let credentials: HashMap<String, String> = AGENTS
        .iter()
        .map(|a| (a.to_string(), TOOL_TOKEN.to_owned()))
        .collect();
    let tasks = TaskManager::new(Arc::new(SqliteTaskStore::on(&setup.db).unwrap()));
    let restarted = Executor::new(
        ExecutorConfig {
            registry: setup.registry.clone(),
            planner_keys,
            planner_key_ids: [("planner".to_owned(), setup.planner.kid().to_owned())].into(),
            mandates: executor_agent::mandates::MandateBook::on(&setup.db, common::principals())
                .unwrap(),
            approvers: ["approver".to_owned()].into(),
            journal: setup.journal.clone(),
            tasks_beside_journal: true,
            credentials,
            mcp: setup.mcp.clone(),
            max_running_sagas: 1,
            max_parallel_steps: executor_agent::saga::spec::DEFAULT_MAX_PARALLEL_STEPS,
            undo_expiring_within: executor_agent::metrics::DEFAULT_UNDO_EXPIRING_WITHIN,
            forwarding: None,
            traces: None,
            shutdown: tokio_util::sync::CancellationToken::new(),
        },
        tasks.clone(),
    );
    (restarted, tasks)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_while_recovery_resumes_the_saga_is_refused_and_one_after_it_unwinds_the_saga() {
    let held = [
        ("sandbox.provision", Fault::ApplyThenHold(1)),
        ("compliance.check", Fault::ApplyThenHold(1)),
    ];
    let setup = Harness::start_with(&held, WAIT.as_millis() as u64, 1).await;
    let first = send_now(&setup, plan(&setup, "sg_first")).await;
    wait_until_the_sandbox_holds(&setup).await;
    setup.shutdown.cancel();
    release_the_sandbox(&setup);
    assert!(setup.executor.stopped(WAIT).await.is_empty());

    // The next start, held while recovery reads the saga: the saga is in the journal,
    // unfinished, and no driver of this process has it yet.
    setup.journal.hold_loads();
    let (restarted, tasks) = restart(&setup);
    let recovering = tokio::spawn({
        let restarted = restarted.clone();
        async move { restarted.recover().await }
    });
    setup.journal.load_reached.notified().await;
    let agent = ExecutorAgent(restarted.clone());
    let task = tasks.handle(&first.id, &first.context_id);
    let refused = agent.cancel(task.clone()).await.unwrap_err();
    assert_eq!(
        refused.code,
        agent_host::sdk::error_code::TASK_NOT_CANCELABLE
    );
    assert!(
        refused
            .message
            .contains("this executor process does not drive it"),
        "{}",
        refused.message
    );
    assert_eq!(
        task.snapshot().await.unwrap().status.state,
        TaskState::Working
    );

    // Once `recover` returns, the saga is live: a cancel reaches its driver and unwinds it.
    setup.journal.load_release.notify_one();
    assert_eq!(recovering.await.unwrap().unwrap(), 1);
    // The compliance call is out and held; it answers once the cancel is journaled, so
    // the saga cannot pass its pivot first.
    let mut cancels = setup.journal.cancels.subscribe();
    let canceling = tokio::spawn(async move { agent.cancel(task).await });
    tokio::time::timeout(WAIT, cancels.wait_for(|n| *n >= 1))
        .await
        .expect("the cancel reaches the saga")
        .unwrap();
    let release = setup.log("compliance-registry").release.clone();
    release.notify_one();
    let canceled = tokio::time::timeout(WAIT, canceling)
        .await
        .expect("the cancel is answered")
        .unwrap()
        .unwrap();
    assert_eq!(
        canceled.status.state,
        TaskState::Canceled,
        "{:?}",
        canceled.status
    );
    let skills: Vec<String> = effects_with_skills(&setup.logs)
        .into_iter()
        .filter(|(key, _)| key.starts_with("sg_first:"))
        .map(|(_, skill)| skill)
        .collect();
    assert_eq!(
        skills[skills.len() - 3..],
        ["sandbox.deprovision", "budget.release", "vendor.archive"],
        "the undos, in reverse order, after {skills:?}"
    );
    assert!(!skills.iter().any(|s| s == "payments.capture"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saga_journaled_in_a_format_this_executor_does_not_know_is_refused_not_resumed() {
    let setup = Harness::start(&[]).await;
    let spec = executor_agent::saga::SagaSpec::new(&supplier_plan(), &supplier_catalog()).unwrap();
    let header = executor_agent::journal::SagaHeader {
        format: executor_agent::journal::JOURNAL_FORMAT + 1,
        saga_id: "sg_newer".into(),
        plan_version: 1,
        task_id: "t_newer".into(),
        context_id: "c_newer".into(),
        plan: json!({}).into(),
        spec: spec.into(),
        registrations_read: None,
    };
    setup.journal.begin(&header, &[]).await.unwrap();
    setup.shutdown.cancel();
    let (restarted, _) = restart(&setup);
    let refused = restarted.recover().await.unwrap_err().to_string();
    assert!(
        refused.contains("saga sg_newer was journaled in format 2")
            && refused.contains("reads journal format 1 only"),
        "{refused}"
    );
    assert_eq!(restarted.running(), 0);
    assert!(effects_in_order(&setup.logs).is_empty());
}
