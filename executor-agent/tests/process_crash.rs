//! The real `executor-agent` binary killed with SIGKILL at every journal point of the
//! six-step supplier saga (before a call, after a call whose result was not journaled
//! yet, during compensation), then restarted on the same data directory: the saga must
//! end exactly as an uninterrupted run does, and no tool may apply an effect twice. And
//! stopped with SIGTERM while a call is out, it waits for the answer, journals it, and
//! exits; the restart goes on from there without repeating the call. A plan whose task
//! was created just before a kill is taken in at the restart. A saga that needs a person
//! says so in the log.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use agent_host::sdk::{Task, TaskState, TaskStatus};
use agent_host::{SqliteTaskStore, TaskStore};
use common::crash::*;
use common::process::*;
use common::*;
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_at_every_journal_point_of_a_completed_saga_changes_nothing() {
    // Header + start + s0's intent, five answers + the next intent, s5's answer (the
    // end; the finish mark after it may be reached too).
    sweep(&[], TaskState::Completed, 7).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_at_every_journal_point_of_an_unwound_saga_changes_nothing() {
    // Header + start + s0's intent, four answers + the next intent, the declined capture
    // + s2's undo intent (s3 changed nothing), two undo answers + the next undo intent,
    // the last undo's answer (the end; the finish mark after it may be reached too).
    sweep(
        &[("payments.capture", Fault::Decline)],
        TaskState::Failed,
        9,
    )
    .await;
}

/// The capture's answers are lost (503s) and its status skill says it took effect: a
/// kill after each journal write, the verification's among them (its intent, then its
/// answer), ends as the uninterrupted run: completed, one capture.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_at_every_journal_point_of_a_verified_capture_changes_nothing() {
    // Header + start + s0's intent, four answers + the next intent, three unknown
    // captures (each with its retry's timer, then the next intent; the last with the
    // verification's intent), the verification's answer + s5's intent, s5's answer.
    sweep(
        &[("payments.capture", Fault::ServerError(ALWAYS))],
        TaskState::Completed,
        10,
    )
    .await;
}

/// The status skill answers but the answer never reaches the executor, which is killed
/// then: the restart asks again (asking changes nothing) and the saga completes as the
/// uninterrupted run, with one capture.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_while_a_verification_is_out_asks_again_and_changes_nothing() {
    let world = World::new();
    let lost = [("payments.capture", Fault::ServerError(ALWAYS))];
    let (reference, _) = run(&world, &lost, Crash::Never).await;
    assert_eq!(reference.state, TaskState::Completed, "{reference:?}");
    let faults = [lost[0], ("payments.status", Fault::ApplyThenHang(1))];
    let key = "sg_demo_supplier_onboarding:s4:verify:3";
    let crash = Crash::AfterCalled {
        agent: "payments",
        key,
    };
    let (ending, crashed) = run(&world, &faults, crash).await;
    assert!(crashed, "{key} was never asked");
    assert_eq!(ending, reference, "after a crash with {key} out");
}

/// The saga unwinds (its compliance check declined); the budget's release answers are
/// lost (503s) until its attempts are spent, and its status skill says it took effect: a
/// kill after each journal write, the verification's among them, ends as the
/// uninterrupted run: compensated, the release applied once. (The release is idempotent
/// here: killed with a call out, a release that is not is asked about rather than sent
/// again, and one found not applied then waits for a person: see `faults.rs`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_at_every_journal_point_of_a_verified_compensation_changes_nothing() {
    // Header + start + s0's intent, three answers + the next intent, the declined check +
    // s2's undo intent, s2's undo answer + s1's undo intent, five unknown releases (each
    // with its retry timer, the last with its verification's intent), the verification's
    // answer + s0's undo intent, s0's undo answer (the end).
    sweep_with_cards(
        &[
            ("compliance.check", Fault::Decline),
            ("budget.release", Fault::ServerError(ALWAYS)),
        ],
        &|agent: &str, card: &mut Value| release_verified_as(true, agent, card),
        TaskState::Failed,
        13,
    )
    .await;
}

/// The release's verification is answered but the answer never reaches the executor,
/// which is killed then: the restart asks again, the release is not made again, and the
/// saga ends as the uninterrupted run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_while_a_compensations_verification_is_out_asks_again_and_changes_nothing() {
    let world = World::new();
    let unwinding = [
        ("compliance.check", Fault::Decline),
        ("budget.release", Fault::ServerError(ALWAYS)),
    ];
    let (reference, _) = run_with_cards(&world, &unwinding, Crash::Never, &release_verified).await;
    assert_eq!(reference.state, TaskState::Failed, "{reference:?}");
    let faults = [
        unwinding[0],
        unwinding[1],
        ("budget.status", Fault::ApplyThenHang(1)),
    ];
    let key = "sg_demo_supplier_onboarding:s1:undo:verify:1";
    let crash = Crash::AfterCalled {
        agent: "budget",
        key,
    };
    let (ending, crashed) = run_with_cards(&world, &faults, crash, &release_verified).await;
    assert!(crashed, "{key} was never asked");
    assert_eq!(ending, reference, "after a crash with {key} out");
}

/// For each call of the saga: the tool applies it and holds its answer, the executor is
/// killed, restarts, repeats the call with the same key (the tool replays its result),
/// and the saga ends as the uninterrupted one did.
async fn kill_with_an_answer_in_flight(
    declined: &[(&str, Fault)],
    calls: &[(&str, &str, &str)],
    expected_state: TaskState,
) {
    let world = World::new();
    let (reference, _) = run(&world, declined, Crash::Never).await;
    assert_eq!(reference.state, expected_state, "{reference:?}");
    for (agent, skill, step) in calls {
        let mut faults = declined.to_vec();
        faults.push((skill, Fault::ApplyThenHang(1)));
        let key = format!("sg_demo_supplier_onboarding:{step}");
        let crash = Crash::AfterApplied { agent, key: &key };
        let (ending, crashed) = run(&world, &faults, crash).await;
        assert!(crashed, "{key} was never applied");
        assert_eq!(
            ending, reference,
            "after a crash with {key} applied but unanswered"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_after_each_call_before_its_result_is_journaled_changes_nothing() {
    let calls = [
        ("vendor-registry", "vendor.create", "s0"),
        ("budget", "budget.reserve", "s1"),
        ("sandbox", "sandbox.provision", "s2"),
        ("compliance-registry", "compliance.check", "s3"),
        ("payments", "payments.capture", "s4"),
        ("mailer", "email.send", "s5"),
    ];
    kill_with_an_answer_in_flight(&[], &calls, TaskState::Completed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_after_each_compensation_before_its_result_is_journaled_changes_nothing() {
    let calls = [
        ("sandbox", "sandbox.deprovision", "s2:undo"),
        ("budget", "budget.release", "s1:undo"),
        ("vendor-registry", "vendor.archive", "s0:undo"),
    ];
    let declined = [("payments.capture", Fault::Decline)];
    kill_with_an_answer_in_flight(&declined, &calls, TaskState::Failed).await;
}

/// The tools for the stop tests: `sandbox.provision` holds its first answer until released,
/// and no call times out while a test waits.
async fn tools_with_a_held_sandbox(
    world: &World,
) -> (Vec<Value>, HashMap<String, Arc<Mutex<ToolLog>>>) {
    let held = [("sandbox.provision", Fault::ApplyThenHold(1))];
    start_tools_timed(&held, &world.platform, STUCK.as_millis() as u64).await
}

/// How many calls `agent` received under `key`.
fn calls_of(logs: &HashMap<String, Arc<Mutex<ToolLog>>>, agent: &str, key: &str) -> usize {
    let log = logs[agent].lock().unwrap();
    log.calls.iter().filter(|(k, ..)| k == key).count()
}

/// Starts the executor (with `args`), submits the plan without waiting for its answer, and
/// waits until the sandbox holds the answer of the call it applied.
async fn until_the_sandbox_holds(
    world: &World,
    data: &Path,
    args: &[&str],
) -> (Executor, HashMap<String, Arc<Mutex<ToolLog>>>) {
    let (cards, logs) = tools_with_a_held_sandbox(world).await;
    let executor = Executor::start_logging(world, data, None, "info", args);
    register(&executor, &cards).await;
    let (client, call, request) = (executor.client(), as_planner(world), plan_message(world));
    // Answered when the executor stops; the test follows the task after the restart.
    tokio::spawn(async move { client.send(&call, &request).await });
    applied(&logs, "sandbox", HELD_KEY).await;
    (executor, logs)
}

const HELD_KEY: &str = "sg_demo_supplier_onboarding:s2";

/// Waits for a stopped executor to exit, which it must do successfully.
fn exits_cleanly(mut executor: Executor) {
    let exited = tokio::task::block_in_place(|| executor.child.wait()).unwrap();
    assert!(exited.success(), "{exited:?}");
}

/// Starts the executor again on `data` and follows the saga (the plan resubmitted finds
/// its task) until it completes.
async fn restarted_to_completion(world: &World, data: &Path) -> Task {
    let executor = Executor::start(world, data, None);
    let task = submit(world, &executor).await;
    let task = settle(world, &executor, task).await;
    assert_eq!(task.status.state, TaskState::Completed);
    task
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_signal_waits_for_the_call_out_and_the_restart_repeats_no_call() {
    let world = World::new();
    let data = tempfile::tempdir().unwrap();
    let (mut executor, logs) = until_the_sandbox_holds(&world, data.path(), &[]).await;

    executor.terminate();
    assert!(
        executor.said("stopping: waiting").await,
        "the executor exited without waiting for the call out"
    );
    assert!(
        executor.said("stopping: still waiting").await,
        "a long wait says what it waits for"
    );
    let release = logs["sandbox"].lock().unwrap().release.clone();
    release.notify_one();
    exits_cleanly(executor);
    assert!(
        logs["compliance-registry"].lock().unwrap().calls.is_empty(),
        "nothing after the answer out was started"
    );

    let task = restarted_to_completion(&world, data.path()).await;
    assert_eq!(
        calls_of(&logs, "sandbox", HELD_KEY),
        1,
        "the answered call was not repeated"
    );
    assert_eq!(
        calls_of(
            &logs,
            "compliance-registry",
            "sg_demo_supplier_onboarding:s3"
        ),
        1
    );
    assert_eq!(ending(&task, &logs).effects.len(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_that_cannot_wait_says_which_sagas_had_a_call_out_and_the_restart_repeats_it() {
    let world = World::new();
    let data = tempfile::tempdir().unwrap();
    let (mut executor, logs) =
        until_the_sandbox_holds(&world, data.path(), &["--drain-secs", "0"]).await;

    executor.terminate();
    assert!(executor.said("stopped with tool calls still out").await);
    exits_cleanly(executor);

    // As after a crash: the idempotent call is repeated under its key, the tool answers
    // with the effect it applied, and the saga completes with every effect once.
    let task = restarted_to_completion(&world, data.path()).await;
    assert_eq!(
        calls_of(&logs, "sandbox", HELD_KEY),
        2,
        "repeated once, after the restart"
    );
    assert_eq!(ending(&task, &logs).effects.len(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saga_that_waits_for_a_person_says_so_in_the_log() {
    let world = World::new();
    let data = tempfile::tempdir().unwrap();
    // Past the pivot, the mailer never answers: the saga stops for a person.
    let (cards, _logs) = start_tools(&[("email.send", Fault::Hang)], &world.platform).await;
    let slots = ["--max-running-sagas", "1"];
    let mut executor = Executor::start_logging(&world, data.path(), None, "warn", &slots);
    register(&executor, &cards).await;
    let task = submit(&world, &executor).await;
    assert_eq!(
        task.status.state,
        TaskState::InputRequired,
        "{:?}",
        task.status
    );
    let metrics = reqwest::get(format!("{}/metrics", executor.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.lines().any(|l| l == "sagaplane_saga_slots 1"),
        "the flag sets the slots: {metrics}"
    );
    let line = tokio::time::timeout(STUCK, executor.line_saying("waits for a person"))
        .await
        .ok()
        .flatten()
        .expect("a warning that the saga waits for a person");
    assert!(line.contains("WARN"), "{line}");
    assert!(line.contains(&task.id), "names the task: {line}");
    assert!(line.contains("s5"), "says why: {line}");
}

/// Writes into the stopped executor's state file what an earlier release left when it
/// stopped between a task's creation and its saga's first journal write (a plan waiting
/// for a slot, or a kill): the task `task_id`, SUBMITTED, with the signed plan as its
/// first message, its planner as its owner, and no saga. This release creates a plan's
/// task in the write that journals its saga, and leaves no such task.
async fn created_but_not_begun(world: &World, data: &Path, task_id: &str) {
    let db = executor_agent::state::open(data).unwrap();
    let store = SqliteTaskStore::on(&db).unwrap();
    let context_id = format!("context-of-{task_id}");
    let mut message = plan_message(world).message;
    message.task_id = Some(task_id.into());
    message.context_id = Some(context_id.clone());
    let task = Task {
        id: task_id.into(),
        context_id,
        status: TaskStatus {
            state: TaskState::Submitted,
            message: None,
            timestamp: Some(chrono::Utc::now()),
        },
        artifacts: None,
        history: Some(vec![message]),
        metadata: Some(
            [(
                agent_host::OWNER_METADATA.to_owned(),
                serde_json::json!("planner-1"),
            )]
            .into(),
        ),
    };
    store
        .put(&task, agent_host::store::Expected::Absent)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_an_earlier_release_left_without_a_saga_ends_failed_and_its_plan_runs_when_sent_again()
 {
    let world = World::new();
    let data = tempfile::tempdir().unwrap();
    let (cards, logs) = start_tools(&[], &world.platform).await;
    let executor = Executor::start(&world, data.path(), None);
    register(&executor, &cards).await;
    executor.kill();

    let left = "task-left-by-an-earlier-release";
    created_but_not_begun(&world, data.path(), left).await;

    let executor = Executor::start(&world, data.path(), None);
    let task = executor
        .client()
        .get_task(&as_planner(&world), left)
        .await
        .unwrap();
    assert_eq!(task.status.state, TaskState::Failed, "{:?}", task.status);
    let said = serde_json::to_string(&task.status.message).unwrap();
    assert!(said.contains("send the plan again"), "{said}");
    assert!(ending(&task, &logs).effects.is_empty(), "nothing ran");

    let again = submit(&world, &executor).await;
    assert_ne!(again.id, left, "a task of its own");
    let again = settle(&world, &executor, again).await;
    assert_eq!(
        again.status.state,
        TaskState::Completed,
        "{:?}",
        again.status
    );
    assert_eq!(ending(&again, &logs).effects.len(), 6);
}

/// Makes every saga in the state file at `data` look finished `days` ago, with a plan
/// whose mandate expired long before.
async fn aged(data: &Path, days: i64) {
    let db = executor_agent::state::open(data).unwrap();
    let finished = (chrono::Utc::now() - chrono::Duration::days(days)).timestamp_millis();
    db.submit(move |tx| {
        tx.execute(
            "UPDATE sagas SET finished = 1, finished_ms = ?1,
                 header = json_set(header, '$.plan.mandate.notAfter', '2020-01-01T00:00:00Z')",
            [finished],
        )
        .map(|_| ())
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_retention_the_start_deletes_the_sagas_finished_longer_ago() {
    let world = World::new();
    let data = tempfile::tempdir().unwrap();
    let (cards, _logs) = start_tools(&[], &world.platform).await;
    let executor = Executor::start(&world, data.path(), None);
    register(&executor, &cards).await;
    let task = submit(&world, &executor).await;
    let task = settle(&world, &executor, task).await;
    assert_eq!(task.status.state, TaskState::Completed);
    executor.kill();
    aged(data.path(), 3).await;

    // Without a retention, nothing is deleted however old.
    let executor = Executor::start(&world, data.path(), None);
    let kept = executor
        .client()
        .get_task(&as_planner(&world), &task.id)
        .await;
    assert_eq!(kept.unwrap().status.state, TaskState::Completed);
    executor.kill();

    let extra = ["--retention-days", "1"];
    let mut executor = Executor::start_logging(&world, data.path(), None, "info", &extra);
    let said = tokio::time::timeout(STUCK, executor.line_saying("deleted the journal"))
        .await
        .expect("the start's sweep reports what it deleted")
        .expect("a line before the process ended");
    assert!(said.contains("sagas=1"), "{said}");
    let gone = executor
        .client()
        .get_task(&as_planner(&world), &task.id)
        .await
        .unwrap_err();
    assert!(gone.to_string().contains("not found"), "{gone}");
}

/// The one task in the stopped executor's state file at `data`.
async fn the_only_task(data: &Path) -> Task {
    let db = executor_agent::state::open(data).unwrap();
    let store = SqliteTaskStore::on(&db).unwrap();
    let page = store
        .list(&agent_host::store::TaskQuery {
            limit: 10,
            ..agent_host::store::TaskQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(page.tasks.len(), 1, "{:?}", page.tasks);
    page.tasks.into_iter().next().unwrap()
}

fn metadata_of(task: &Task, key: &str) -> Option<Value> {
    task.metadata.as_ref().and_then(|m| m.get(key).cloned())
}

/// Issue 25, finding 1: killed once a saga's start is in the journal and before its first
/// step was reported, the executor resumes the saga at the restart, and its task shows
/// the saga's id, as a task whose executor never died does: in the state file (the begin
/// creates the task working, with the id, in the same write), at the first read after the
/// restart, and at its end (with the outcome, for a saga that unwound).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saga_killed_before_its_first_report_shows_its_id_from_the_restart_on() {
    let world = World::new();
    let declined = [("payments.capture", Fault::Decline)];
    type Run<'a> = (&'a [(&'a str, Fault)], TaskState, Option<Value>);
    let runs: [Run; 2] = [
        (&[], TaskState::Completed, None),
        (&declined, TaskState::Failed, Some(json!("compensated"))),
    ];
    for (faults, state, outcome) in runs {
        let data = tempfile::tempdir().unwrap();
        let (cards, logs) = start_tools(faults, &world.platform).await;
        let mut executor = Executor::start(&world, data.path(), Some(1));
        register(&executor, &cards).await;
        let (client, call, request) = (executor.client(), as_planner(&world), plan_message(&world));
        tokio::spawn(async move { client.send(&call, &request).await });
        // Journal write 1 is the saga's header with its start and first intent.
        assert!(executor.paused().await, "the executor never began the saga");
        executor.kill();

        let left = the_only_task(data.path()).await;
        assert_eq!(left.status.state, TaskState::Working, "{:?}", left.status);
        assert_eq!(
            left.history.as_deref().map_or(0, <[_]>::len),
            2,
            "the plan, and what the begin's step shows"
        );
        assert_eq!(
            metadata_of(&left, "sagaId"),
            Some(json!("sg_demo_supplier_onboarding")),
            "the begin's write carries the saga's id"
        );

        let executor = Executor::start(&world, data.path(), None);
        let first_read = executor
            .client()
            .get_task(&as_planner(&world), &left.id)
            .await
            .unwrap();
        assert_eq!(
            metadata_of(&first_read, "sagaId"),
            Some(json!("sg_demo_supplier_onboarding")),
            "at the first read after the restart: {:?}",
            first_read.metadata
        );
        let ended = settle(&world, &executor, first_read).await;
        assert_eq!(ended.status.state, state, "{:?}", ended.status);
        assert_eq!(
            metadata_of(&ended, "sagaId"),
            Some(json!("sg_demo_supplier_onboarding")),
            "{:?}",
            ended.metadata
        );
        assert_eq!(metadata_of(&ended, "outcome"), outcome);
        let (reference, _) = run(&world, faults, Crash::Never).await;
        assert_eq!(
            ending(&ended, &logs),
            reference,
            "as an uninterrupted run ends"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_undo_expiring_threshold_is_a_flag_shown_on_the_metrics() {
    let world = World::new();
    let data = tempfile::tempdir().unwrap();
    let metrics = |executor: &Executor| {
        let url = format!("{}/metrics", executor.url);
        async move { reqwest::get(url).await.unwrap().text().await.unwrap() }
    };
    let executor = Executor::start(&world, data.path(), None);
    let text = metrics(&executor).await;
    assert!(
        text.lines()
            .any(|l| l == "sagaplane_undo_expiring_within_seconds 3600"),
        "the default is an hour: {text}"
    );
    executor.kill();
    let extra = ["--undo-expiring-within-secs", "60"];
    let executor = Executor::start_logging(&world, data.path(), None, "warn", &extra);
    let text = metrics(&executor).await;
    assert!(
        text.lines()
            .any(|l| l == "sagaplane_undo_expiring_within_seconds 60"),
        "{text}"
    );
    executor.kill();
    // More than a year is refused before anything starts.
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_executor-agent"))
        .args(["--undo-expiring-within-secs", "31536001", "--data"])
        .arg(data.path())
        .arg("--platform-key")
        .arg(world.path("platform.pub.jwk"))
        .arg("--planner")
        .arg(world.path("planner.pub.jwk"))
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("--undo-expiring-within-secs"), "{stderr}");
}

/// Rewrites the stopped executor's task `task_id` as an earlier release could leave it
/// when it stopped after journaling the saga's steps and before writing its task: as the
/// saga's begin created it, `WORKING`, with the plan's message alone.
async fn as_created(data: &Path, task_id: &str) {
    let db = executor_agent::state::open(data).unwrap();
    let store = SqliteTaskStore::on(&db).unwrap();
    let stored = store.read(task_id).await.unwrap().unwrap();
    let mut task = stored.task;
    task.status = TaskStatus {
        state: TaskState::Working,
        message: None,
        timestamp: Some(chrono::Utc::now()),
    };
    task.history.as_mut().unwrap().truncate(1);
    task.artifacts = None;
    store
        .put(&task, agent_host::store::Expected::Version(stored.version))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_saga_whose_task_an_earlier_release_left_working_is_listed_waiting_from_the_restart_on()
 {
    let world = World::new();
    let data = tempfile::tempdir().unwrap();
    // Past the pivot, the mailer never answers: the saga stops for a person.
    let (cards, _logs) = start_tools(&[("email.send", Fault::Hang)], &world.platform).await;
    let executor = Executor::start(&world, data.path(), None);
    register(&executor, &cards).await;
    let paused = submit(&world, &executor).await;
    assert_eq!(paused.status.state, TaskState::InputRequired);
    executor.kill();
    as_created(data.path(), &paused.id).await;

    let executor = Executor::start(&world, data.path(), None);
    let waiting = executor
        .client()
        .list_tasks(
            &as_planner(&world),
            &first_hundred(Some(TaskState::InputRequired)),
        )
        .await
        .unwrap();
    let listed: Vec<&str> = waiting.tasks.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        listed,
        [paused.id.as_str()],
        "written waiting at the restart"
    );
    // Its row holds what the journal shows, each status once.
    executor.kill();
    let db = executor_agent::state::open(data.path()).unwrap();
    let row = SqliteTaskStore::on(&db)
        .unwrap()
        .get(&paused.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.status.state, TaskState::InputRequired);
    each_message_once(&row);
    assert_eq!(
        row.history.as_ref().map(Vec::len),
        paused.history.as_ref().map(Vec::len)
    );
}
