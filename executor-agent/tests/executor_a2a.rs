//! The executor as an A2A agent: a signed plan in, every check before any effect, the
//! saga run against real tool agents, and the task lifecycle a client sees.

mod common;

use agent_host::sdk::{StreamResponse, TaskState};
use common::*;
use executor_agent::journal::SagaLog;
use futures::StreamExt;
use serde_json::json;
use shared_types::SigningIdentity;

/// Far longer than a stop takes here; only a driver that never stops reaches it.
const STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

fn applied(setup: &Harness) -> usize {
    setup
        .logs
        .values()
        .map(|l| l.lock().unwrap().effects.len())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_plan_runs_to_completion_and_a_resubmission_returns_the_same_task() {
    let setup = Harness::start(&[]).await;
    let plan = setup.signed("examples/plans/supplier-onboarding.json");
    let task = setup.send(plan.clone(), None).await;
    assert_eq!(task.status.state, TaskState::Completed, "{task:?}");
    let ledger = task
        .artifacts
        .as_ref()
        .unwrap()
        .iter()
        .find(|a| a.artifact_id == "saga-ledger")
        .unwrap();
    assert!(format!("{ledger:?}").contains("sg_demo_supplier_onboarding:s5"));
    assert_eq!(applied(&setup), 6);

    let again = setup.send(json!({"plan": plan}), None).await;
    assert_eq!(
        again.id, task.id,
        "an identical plan returns the existing task"
    );
    assert_eq!(applied(&setup), 6, "and runs nothing again");

    let mut conflicting = read("examples/plans/invalid/plan-conflict.json");
    common::sign_plan(&setup.planner, &mut conflicting);
    let refused = setup.send(conflicting, None).await;
    assert_eq!(refused.status.state, TaskState::Rejected);
    assert!(format!("{:?}", refused.status.message).contains("PLAN_CONFLICT"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_plan_is_taken_in_with_no_read_and_the_same_plan_again_finds_its_task() {
    use std::sync::atomic::Ordering;
    let setup = Harness::start(&[]).await;
    let plan = setup.signed("examples/plans/supplier-onboarding.json");
    let task = setup.send(plan.clone(), None).await;
    assert_eq!(task.status.state, TaskState::Completed, "{task:?}");
    // No lookup of the saga id: the accepting write's key is the arbiter.
    assert_eq!(setup.journal.headers_read.load(Ordering::SeqCst), 0);
    // The same plan sent again is refused by that key, then looked up once, and the
    // request is answered with the task it ran on; no other task is stored.
    let again = setup.send(plan, None).await;
    assert_eq!(again.id, task.id);
    assert_eq!(again.status.state, TaskState::Completed);
    assert_eq!(setup.journal.headers_read.load(Ordering::SeqCst), 1);
    assert_eq!(applied(&setup), 6, "and runs nothing again");
    let listed = listed(&setup).await;
    assert_eq!(listed.len(), 1, "one task: {listed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_plan_sent_eight_times_at_once_runs_once_and_each_request_gets_its_task() {
    let setup = Harness::start(&[]).await;
    let plan = setup.signed("examples/plans/supplier-onboarding.json");
    let sent = futures::future::join_all((0..8).map(|_| setup.send(plan.clone(), None))).await;
    let first = &sent[0].id;
    assert!(
        sent.iter().all(|task| &task.id == first),
        "every request answered with the one task: {:?}",
        sent.iter()
            .map(|t| (&t.id, &t.status.state))
            .collect::<Vec<_>>()
    );
    // The request whose plan began waits for the end; the others get the task as it
    // stands when their accepting write is refused.
    assert!(
        sent.iter()
            .any(|task| task.status.state == TaskState::Completed)
    );
    assert_eq!(applied(&setup), 6, "each step applied once");
    let listed = listed(&setup).await;
    assert_eq!(listed.len(), 1, "no other task was stored: {listed:?}");
}

/// Every task the planner may list.
async fn listed(setup: &Harness) -> Vec<agent_host::sdk::Task> {
    setup
        .client
        .list_tasks(&setup.as_planner(), &first_hundred(None))
        .await
        .unwrap()
        .tasks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_plan_is_rejected_with_every_violation_before_any_effect() {
    let setup = Harness::start(&[]).await;
    let task = setup
        .send(setup.signed("examples/plans/five-violations.json"), None)
        .await;
    assert_eq!(task.status.state, TaskState::Rejected);
    let text = format!("{:?}", task.status.message);
    for code in [
        "IDEMPOTENCY_KEY_MISMATCH",
        "ARGS_INVALID",
        "BAD_REFERENCE",
        "MANDATE_EXCEEDED",
        "CLASS_MISMATCH",
    ] {
        assert!(text.contains(code), "{code} in {text}");
    }
    // A plan signed by someone else is refused too.
    let mut forged = read("examples/plans/supplier-onboarding.json");
    SigningIdentity::from_seed([99; 32], Some("mallory".into()))
        .sign_in_place(&mut forged)
        .unwrap();
    let task = setup.send(forged, None).await;
    assert_eq!(task.status.state, TaskState::Rejected);
    assert!(format!("{:?}", task.status.message).contains("SIGNER_UNTRUSTED"));
    assert_eq!(applied(&setup), 0, "nothing ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_before_the_pivot_ends_failed_with_outcome_compensated() {
    let setup = Harness::start(&[("compliance.check", Fault::Hang)]).await;
    let task = setup
        .send(
            setup.signed("examples/plans/supplier-onboarding.json"),
            None,
        )
        .await;
    assert_eq!(task.status.state, TaskState::Failed);
    assert_eq!(task.metadata.as_ref().unwrap()["outcome"], "compensated");
    for agent in ["vendor-registry", "budget", "sandbox"] {
        let effects = setup.logs[agent].lock().unwrap().effects.clone();
        assert_eq!(
            effects.len(),
            2,
            "{agent}: the effect and its undo: {effects:?}"
        );
        assert!(effects[1].0.ends_with(":undo"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_escalation_waits_for_a_person_and_cannot_be_canceled_past_the_pivot() {
    let setup = Harness::start(&[("email.send", Fault::Hang)]).await;
    let task = setup
        .send(
            setup.signed("examples/plans/supplier-onboarding.json"),
            None,
        )
        .await;
    assert_eq!(
        task.status.state,
        TaskState::InputRequired,
        "{:?}",
        task.status
    );
    let err = setup
        .client
        .cancel_task(&setup.as_planner(), &task.id)
        .await
        .unwrap_err();
    assert!(err.to_string().to_lowercase().contains("cancel"), "{err}");
    let done = setup
        .resolve(json!({"resolution": "resolved-manually"}), &task.id)
        .await;
    assert_eq!(done.status.state, TaskState::Completed, "{:?}", done.status);
}

/// A saga streamed to its client, its task's id, and the rest of its events.
type Streamed = (
    Harness,
    String,
    futures::stream::BoxStream<'static, Result<StreamResponse, agent_host::sdk::A2AError>>,
);

/// Runs the supplier plan, streamed, until the sandbox has applied s2 and holds its
/// answer (no call times out while the test holds one).
async fn held_at_the_sandbox() -> Streamed {
    let held = [("sandbox.provision", Fault::ApplyThenHold(1))];
    let setup = Harness::start_timed(&held, STOP_WAIT.as_millis() as u64).await;
    let request = data_message(
        setup.signed("examples/plans/supplier-onboarding.json"),
        None,
    );
    let mut events = setup
        .client
        .stream(&setup.as_planner(), &request)
        .await
        .unwrap();
    let task_id = match events.next().await {
        Some(Ok(StreamResponse::Task(task))) => task.id,
        other => panic!("expected the task first, got {other:?}"),
    };
    let held = setup.log("sandbox").applied.clone();
    held.notified().await;
    (setup, task_id, events)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saga_stopped_while_its_journal_cannot_be_written_is_left_to_recovery_not_failed() {
    let (setup, task_id, _events) = held_at_the_sandbox().await;
    // The disk fills up: s2's answer cannot be journaled, and the saga waits for it.
    setup.journal.fail_from_now();
    let release = setup.log("sandbox").release.clone();
    release.notify_one();
    setup.shutdown.cancel();
    let left = setup.executor.stopped(STOP_WAIT).await;
    assert!(left.is_empty(), "the driver stopped: {left:?}");

    let task = setup
        .client
        .get_task(&setup.as_planner(), &task_id)
        .await
        .unwrap();
    // The journal holds an unfinished saga, resumed at the next start: the task must not
    // say it ended.
    assert_eq!(task.status.state, TaskState::Working, "{:?}", task.status);
    assert!(setup.log("compliance-registry").calls.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_holds_the_saga_and_the_executor_is_not_ready_until_there_is_room() {
    let (setup, _task_id, mut events) = held_at_the_sandbox().await;

    // The disk fills up: the state file may not grow, and what it holds fills its pages
    // (rows far smaller than any journal entry), so the next journal entry needs a page.
    let cap = |pages: u32| {
        move |tx: &rusqlite::Transaction<'_>| {
            tx.execute_batch(&format!("PRAGMA max_page_count = {pages}"))
        }
    };
    // The filler rows belong to a saga of their own, finished: nothing resumes it.
    let filler_saga = |tx: &rusqlite::Transaction<'_>| {
        tx.execute(
            "INSERT INTO sagas (saga_id, header, finished) VALUES ('f', '{}', 1)",
            [],
        )
        .map(|_| ())
    };
    setup.db.submit(filler_saga).await.unwrap();
    setup.db.submit(cap(1)).await.unwrap();
    let mut filled = false;
    for _ in 0..10_000 {
        let filler = |tx: &rusqlite::Transaction<'_>| {
            tx.execute("INSERT INTO entries (saga_id, body) VALUES ('f', '[]')", [])
                .map(|_| ())
        };
        if let Err(e) = setup.db.submit(filler).await {
            assert!(e.to_string().contains("full"), "{e}");
            filled = true;
            break;
        }
    }
    assert!(filled, "the capped file took every row");
    let readiness = || async {
        let response = reqwest::get(format!("{}/readyz", setup.url)).await.unwrap();
        (
            response.status().as_u16(),
            response.json::<serde_json::Value>().await.unwrap(),
        )
    };

    // s2 answers; its result cannot be journaled, and the saga waits.
    setup.log("sandbox").release.notify_one();
    setup.journal.refused.notified().await;
    let (status, body) = readiness().await;
    assert_eq!(status, 503, "{body}");
    assert!(body["reasons"].to_string().contains("full"), "{body}");
    assert!(setup.log("compliance-registry").calls.is_empty());

    // Room again: the saga goes on from s2's answer and completes, no call made twice.
    setup.db.submit(cap(1_000_000)).await.unwrap();
    let mut last = None;
    let drained = tokio::time::timeout(STOP_WAIT, async {
        while let Some(event) = events.next().await {
            last = Some(event.unwrap());
        }
    })
    .await;
    assert!(drained.is_ok(), "the saga never went on: {last:?}");
    match last {
        Some(StreamResponse::StatusUpdate(update)) => {
            assert_eq!(
                update.status.state,
                TaskState::Completed,
                "{:?}",
                update.status
            )
        }
        other => panic!("expected the end, got {other:?}"),
    }
    assert_eq!(applied(&setup), 6);
    for agent in ["sandbox", "compliance-registry", "payments"] {
        assert_eq!(setup.log(agent).calls.len(), 1, "{agent}");
    }
    assert_eq!(readiness().await.0, 200);
}

/// Whether the executor's journal holds the saga `saga_id`.
async fn journaled(setup: &Harness, saga_id: &str) -> bool {
    setup.journal.load(saga_id).await.unwrap().is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_saga_is_forgotten_after_its_retention_once_its_plan_cannot_be_accepted() {
    let setup = Harness::start(&[]).await;
    let now = chrono::Utc::now();
    let hour = chrono::Duration::hours(1);
    let short = setup
        .send(plan_as(&setup, "sg_short_mandate", now + hour), None)
        .await;
    let long = setup
        .send(
            plan_as(&setup, "sg_long_mandate", now + hour * 24 * 30),
            None,
        )
        .await;
    assert_eq!(short.status.state, TaskState::Completed);
    assert_eq!(long.status.state, TaskState::Completed);
    // Both sagas are marked finished (bookkeeping after the end is on the task).
    let mut finishes = setup.journal.finishes.subscribe();
    finishes.wait_for(|n| *n >= 2).await.unwrap();

    let keep = |hours: u64| std::time::Duration::from_secs(hours * 3600);
    let two_hours_on = (now + hour * 2).timestamp_millis();
    let forgotten = setup.executor.forget_finished(keep(3), two_hours_on).await;
    assert_eq!(forgotten.unwrap(), 0, "both finished within the retention");
    // An hour's retention, two hours on: the short mandate has expired, the long has not.
    let forgotten = setup.executor.forget_finished(keep(1), two_hours_on).await;
    assert_eq!(forgotten.unwrap(), 1);
    let gone = setup
        .client
        .get_task(&setup.as_planner(), &short.id)
        .await
        .unwrap_err();
    assert!(gone.to_string().contains("not found"), "{gone}");
    assert!(!journaled(&setup, "sg_short_mandate").await);
    let kept = setup
        .client
        .get_task(&setup.as_planner(), &long.id)
        .await
        .unwrap();
    assert_eq!(kept.status.state, TaskState::Completed);
    assert!(journaled(&setup, "sg_long_mandate").await);

    // Once its mandate has expired too, the other goes.
    let later = (now + hour * 24 * 31).timestamp_millis();
    let forgotten = setup.executor.forget_finished(keep(1), later).await;
    assert_eq!(forgotten.unwrap(), 1);
    assert!(!journaled(&setup, "sg_long_mandate").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_sagas_by_ending_and_calls_by_agent_and_show_who_waits_for_a_person() {
    // The first sandbox call is declined (that saga unwinds); the mailer answers 503 to
    // its first five calls (that saga escalates after the pivot); the third saga completes.
    let setup = Harness::start(&[
        ("sandbox.provision", Fault::DeclineTimes(1)),
        ("email.send", Fault::ServerError(5)),
    ])
    .await;
    let expires = chrono::Utc::now() + chrono::Duration::hours(1);
    let mut states = Vec::new();
    for saga in ["sg_unwound", "sg_escalated", "sg_completed"] {
        let task = setup.send(plan_as(&setup, saga, expires), None).await;
        states.push(task.status.state);
    }
    assert_eq!(
        states,
        [
            TaskState::Failed,
            TaskState::InputRequired,
            TaskState::Completed
        ]
    );

    let response = reqwest::get(format!("{}/metrics", setup.url))
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "open, like the health probes");
    let kind = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(kind.starts_with("application/openmetrics-text"), "{kind}");
    let text = response.text().await.unwrap();
    let value = |series: &str| -> f64 {
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
            .parse()
            .unwrap()
    };
    assert_eq!(value("sagaplane_sagas_begun_total"), 3.0);
    assert_eq!(
        value("sagaplane_sagas_ended_total{ending=\"compensated\"}"),
        1.0
    );
    assert_eq!(
        value("sagaplane_sagas_ended_total{ending=\"completed\"}"),
        1.0
    );
    assert_eq!(value("sagaplane_sagas_waiting_for_a_person"), 1.0);
    assert!(
        value("sagaplane_sagas_live") >= 1.0,
        "the paused saga's driver"
    );
    assert_eq!(value("sagaplane_state_file_writable"), 1.0);
    let calls = |agent: &str, outcome: &str| {
        value(&format!(
            "sagaplane_tool_calls_total{{agent=\"{agent}\",outcome=\"{outcome}\"}}"
        ))
    };
    assert_eq!(calls("sandbox", "failed"), 1.0);
    assert_eq!(calls("sandbox", "succeeded"), 2.0);
    assert_eq!(calls("mailer", "unknown"), 5.0);
    assert_eq!(calls("mailer", "succeeded"), 1.0);
}
