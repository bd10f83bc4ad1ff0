//! Faults injected by tool agents on loopback, seen through the whole executor: 5xx
//! answers, dropped connections, timeouts, definite failures, and compensations that
//! fail for a while or for good. Each test checks the executor's final task state, its
//! `saga-ledger` artifact, and what each tool agent was asked and applied: no effect
//! applied twice, every pre-pivot effect undone on failure (in reverse order), and
//! nothing past the pivot unwound.

mod common;

use std::io::{Read, Write};

use agent_host::sdk::{Task, TaskState};
use common::*;
use serde_json::{Value, json};

const PLAN: &str = "examples/plans/supplier-onboarding.json";
const SAGA: &str = "sg_demo_supplier_onboarding";

/// The idempotency keys of `steps` ("s1", or "s1:undo" for its compensation).
fn keys(steps: &[&str]) -> Vec<String> {
    steps.iter().map(|s| format!("{SAGA}:{s}")).collect()
}

/// Runs the supplier plan against tool agents with `faults` until the saga first stops.
async fn run(faults: &[(&str, Fault)]) -> (Harness, Task) {
    let harness = Harness::start(faults).await;
    let task = harness.send(harness.signed(PLAN), None).await;
    (harness, task)
}

/// The ledger, one line per step: `s1 succeeded/3 undo done/1` (state/attempts).
fn ledger_lines(task: &Task) -> Vec<String> {
    let ledger = ledger_of(task);
    assert_eq!(ledger["sagaId"], SAGA);
    ledger["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            format!(
                "{} {}/{} undo {}/{}",
                s["step"].as_str().unwrap(),
                s["forward"]["state"].as_str().unwrap(),
                s["attempts"],
                s["undo"]["state"].as_str().unwrap(),
                s["undoAttempts"],
            )
        })
        .collect()
}

/// The ledger's phase: `done completed`, `done compensated`, `paused`.
fn ledger_phase(task: &Task) -> String {
    let phase = &ledger_of(task)["phase"];
    let ending = phase["ending"].as_str().map(|e| format!(" {e}"));
    format!(
        "{}{}",
        phase["phase"].as_str().unwrap(),
        ending.unwrap_or_default()
    )
}

/// The idempotency key of every call `agent` received, in order.
fn calls(harness: &Harness, agent: &str) -> Vec<String> {
    let log = harness.log(agent);
    log.calls.iter().map(|c| c.0.clone()).collect()
}

/// Every compensation call any tool agent received.
fn undo_calls(harness: &Harness) -> Vec<String> {
    AGENTS
        .iter()
        .flat_map(|a| calls(harness, a))
        .filter(|k| k.ends_with(":undo"))
        .collect()
}

fn outcome(task: &Task) -> Option<Value> {
    task.metadata.as_ref()?.get("outcome").cloned()
}

/// The task ended FAILED with `metadata.outcome = "compensated"`.
fn assert_compensated(task: &Task) {
    assert_eq!(task.status.state, TaskState::Failed, "{:?}", task.status);
    assert_eq!(outcome(task), Some(json!("compensated")));
    assert_eq!(ledger_phase(task), "done compensated");
}

/// The task waits for a person (INPUT_REQUIRED), with the saga paused.
fn assert_escalated(task: &Task, step: &str) {
    assert_eq!(
        task.status.state,
        TaskState::InputRequired,
        "{:?}",
        task.status
    );
    assert!(
        format!("{:?}", task.status.message).contains(&format!("step {step}:")),
        "the escalation names {step}: {:?}",
        task.status.message
    );
    assert_eq!(outcome(task), None);
    assert_eq!(ledger_phase(task), "paused");
}

const ALL_SIX: [&str; 6] = ["s0", "s1", "s2", "s3", "s4", "s5"];

/// What `/metrics` counts of the payments agent's verifications with `outcome`.
async fn verifications(harness: &Harness, outcome: &str) -> Option<String> {
    verifications_of(harness, "payments", outcome).await
}

/// What `/metrics` counts of `agent`'s verifications with `outcome`.
async fn verifications_of(harness: &Harness, agent: &str, outcome: &str) -> Option<String> {
    let series =
        format!("sagaplane_verifications_total{{agent=\"{agent}\",outcome=\"{outcome}\"}}");
    metric(harness, &series).await
}

/// What `/metrics` counts of `agent`'s unknown outcomes settled by `settled_by`
/// (verification, person, unwinding).
async fn unknown_outcomes(harness: &Harness, agent: &str, settled_by: &str) -> Option<String> {
    let series = format!(
        "sagaplane_unknown_outcomes_total{{agent=\"{agent}\",settled_by=\"{settled_by}\"}}"
    );
    metric(harness, &series).await
}

/// The value `/metrics` shows for `series` (name and labels), if it shows it.
async fn metric(harness: &Harness, series: &str) -> Option<String> {
    let text = reqwest::get(format!("{}/metrics", harness.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let series = format!("{series} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&series))
        .map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_5xx_is_retried_with_the_same_key_and_the_effect_applied_once() {
    // The budget tool reserves, but a gateway answers 503 twice: an unknown outcome.
    let (harness, task) = run(&[("budget.reserve", Fault::ServerError(2))]).await;
    assert_eq!(task.status.state, TaskState::Completed, "{:?}", task.status);
    assert_eq!(outcome(&task), None);
    assert_eq!(ledger_phase(&task), "done completed");
    assert_eq!(calls(&harness, "budget"), keys(&["s1", "s1", "s1"]));
    assert_eq!(effects_in_order(&harness.logs), keys(&ALL_SIX));
    assert_eq!(
        ledger_lines(&task),
        [
            "s0 succeeded/1 undo pending/0",
            "s1 succeeded/3 undo pending/0",
            "s2 succeeded/1 undo pending/0",
            "s3 succeeded/1 undo notNeeded/0",
            "s4 succeeded/1 undo notNeeded/0",
            "s5 succeeded/1 undo notNeeded/0",
        ]
    );
    assert!(undo_calls(&harness).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_at_the_pivot_is_retried_and_the_capture_happens_once() {
    // The payment is captured, then the connection closes without an answer.
    let (harness, task) = run(&[("payments.capture", Fault::DropConnection(1))]).await;
    assert_eq!(task.status.state, TaskState::Completed, "{:?}", task.status);
    assert_eq!(ledger_phase(&task), "done completed");
    assert_eq!(calls(&harness, "payments"), keys(&["s4", "s4"]));
    assert_eq!(effects_in_order(&harness.logs), keys(&ALL_SIX));
    assert_eq!(ledger_lines(&task)[4], "s4 succeeded/2 undo notNeeded/0");
    assert!(undo_calls(&harness).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_of_a_compensable_step_undoes_it_by_its_forward_key_then_the_rest_in_reverse() {
    let (harness, task) = run(&[("sandbox.provision", Fault::Hang)]).await;
    assert_compensated(&task);
    // Three tries with one key, each timed out; then the undo, since it may have happened.
    assert_eq!(
        calls(&harness, "sandbox"),
        keys(&["s2", "s2", "s2", "s2:undo"])
    );
    assert_eq!(
        harness.log("sandbox").results[&format!("{SAGA}:s2:undo")].0,
        json!({"forwardKey": format!("{SAGA}:s2")}),
        "an unknown outcome is undone with argsWhenUnknown"
    );
    assert_eq!(
        effects_in_order(&harness.logs),
        keys(&["s0", "s1", "s2:undo", "s1:undo", "s0:undo"])
    );
    assert_eq!(
        ledger_lines(&task),
        [
            "s0 succeeded/1 undo done/1",
            "s1 succeeded/1 undo done/1",
            "s2 unknown/3 undo done/1",
            "s3 pending/0 undo notNeeded/0",
            "s4 pending/0 undo notNeeded/0",
            "s5 pending/0 undo notNeeded/0",
        ]
    );
    // Before the point of no return the unwind settles it: nobody is asked.
    assert_eq!(
        unknown_outcomes(&harness, "sandbox", "unwinding")
            .await
            .as_deref(),
        Some("1")
    );
    assert_eq!(unknown_outcomes(&harness, "sandbox", "person").await, None);
    for agent in ["compliance-registry", "payments", "mailer"] {
        assert!(
            calls(&harness, agent).is_empty(),
            "{agent} was never called"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_whose_answers_are_always_lost_is_undone_although_the_executor_never_saw_it_succeed()
{
    // The sandbox is provisioned on the first try, but no answer ever arrives.
    let (harness, task) = run(&[("sandbox.provision", Fault::DropConnection(ALWAYS))]).await;
    assert_compensated(&task);
    assert_eq!(
        calls(&harness, "sandbox"),
        keys(&["s2", "s2", "s2", "s2:undo"])
    );
    assert_eq!(
        effects_in_order(&harness.logs),
        keys(&["s0", "s1", "s2", "s2:undo", "s1:undo", "s0:undo"])
    );
    assert_eq!(ledger_lines(&task)[2], "s2 unknown/3 undo done/1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_definite_failure_is_not_compensated_but_every_earlier_step_is_in_reverse() {
    let (harness, task) = run(&[("sandbox.provision", Fault::Decline)]).await;
    assert_compensated(&task);
    assert_eq!(
        calls(&harness, "sandbox"),
        keys(&["s2"]),
        "a definite failure is neither retried nor undone"
    );
    assert_eq!(
        effects_in_order(&harness.logs),
        keys(&["s0", "s1", "s1:undo", "s0:undo"])
    );
    assert_eq!(
        ledger_lines(&task),
        [
            "s0 succeeded/1 undo done/1",
            "s1 succeeded/1 undo done/1",
            "s2 failed/1 undo nothingToUndo/0",
            "s3 pending/0 undo notNeeded/0",
            "s4 pending/0 undo notNeeded/0",
            "s5 pending/0 undo notNeeded/0",
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compensation_that_fails_twice_is_retried_with_its_undo_key_and_applied_once() {
    let (harness, task) = run(&[
        ("compliance.check", Fault::Decline),
        ("budget.release", Fault::DeclineTimes(2)),
    ])
    .await;
    assert_compensated(&task);
    assert_eq!(
        calls(&harness, "budget"),
        keys(&["s1", "s1:undo", "s1:undo", "s1:undo"])
    );
    assert_eq!(
        effects_in_order(&harness.logs),
        keys(&["s0", "s1", "s2", "s2:undo", "s1:undo", "s0:undo"])
    );
    assert_eq!(
        ledger_lines(&task),
        [
            "s0 succeeded/1 undo done/1",
            "s1 succeeded/1 undo done/3",
            "s2 succeeded/1 undo done/1",
            "s3 failed/1 undo notNeeded/0",
            "s4 pending/0 undo notNeeded/0",
            "s5 pending/0 undo notNeeded/0",
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compensation_that_never_succeeds_is_dead_lettered_and_the_unwind_waits_for_a_person() {
    let (harness, task) = run(&[
        ("compliance.check", Fault::Decline),
        ("budget.release", Fault::Decline),
    ])
    .await;
    assert_escalated(&task, "s1");
    assert_eq!(
        calls(&harness, "budget"),
        keys(&["s1", "s1:undo", "s1:undo", "s1:undo", "s1:undo", "s1:undo"]),
        "every declared attempt of the compensation, one key"
    );
    // The unwind stops at the dead letter: the vendor, compensated after the budget in
    // reverse order, is still there until a person answers.
    assert_eq!(
        effects_in_order(&harness.logs),
        keys(&["s0", "s1", "s2", "s2:undo"])
    );
    assert_eq!(calls(&harness, "vendor-registry"), keys(&["s0"]));
    let lines = ledger_lines(&task);
    assert_eq!(
        lines,
        [
            "s0 succeeded/1 undo pending/0",
            "s1 succeeded/1 undo deadLettered/5",
            "s2 succeeded/1 undo done/1",
            "s3 failed/1 undo notNeeded/0",
            "s4 pending/0 undo notNeeded/0",
            "s5 pending/0 undo notNeeded/0",
        ]
    );

    // A person releases the budget by hand: the unwind goes on and ends compensated.
    let done = harness
        .resolve(json!({"resolution": "resolved-manually"}), &task.id)
        .await;
    assert_compensated(&done);
    assert_eq!(
        effects_in_order(&harness.logs),
        keys(&["s0", "s1", "s2", "s2:undo", "s0:undo"])
    );
    assert_eq!(calls(&harness, "budget").len(), 6, "no more tries");
    assert_eq!(ledger_lines(&done)[0], "s0 succeeded/1 undo done/1");
    assert_eq!(
        ledger_lines(&done)[1],
        "s1 succeeded/1 undo resolvedManually/5"
    );
    for agent in ["payments", "mailer"] {
        assert!(
            calls(&harness, agent).is_empty(),
            "{agent} was never called"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_pivot_a_failing_email_escalates_and_nothing_is_compensated() {
    // The mailer sends, but every answer is a 503, through the last declared attempt.
    let (harness, task) = run(&[("email.send", Fault::ServerError(ALWAYS))]).await;
    assert_escalated(&task, "s5");
    assert_eq!(calls(&harness, "mailer"), keys(&["s5"; 5]));
    assert_eq!(effects_in_order(&harness.logs), keys(&ALL_SIX));
    assert!(
        undo_calls(&harness).is_empty(),
        "{:?}",
        undo_calls(&harness)
    );
    let expected = [
        "s0 succeeded/1 undo pending/0",
        "s1 succeeded/1 undo pending/0",
        "s2 succeeded/1 undo pending/0",
        "s3 succeeded/1 undo notNeeded/0",
        "s4 succeeded/1 undo notNeeded/0",
        "s5 unknown/5 undo notNeeded/0",
    ];
    assert_eq!(ledger_lines(&task), expected);

    // Even a person asking for compensation cannot unwind past the pivot: the pause
    // does not offer it, and the answer is refused before anything is recorded.
    let refused = harness
        .client
        .send(
            &harness.as_approver(),
            &data_message(json!({"resolution": "compensate"}), Some(&task.id)),
        )
        .await;
    assert!(
        matches!(&refused, Err(agent_host::Error::Protocol(e)) if e.message.starts_with("RESOLUTION_INVALID")),
        "{refused:?}"
    );
    let still = harness
        .client
        .get_task(&harness.as_approver(), &task.id)
        .await
        .unwrap();
    assert_eq!(still.status.state, TaskState::InputRequired);
    assert!(
        undo_calls(&harness).is_empty(),
        "{:?}",
        undo_calls(&harness)
    );
    assert_eq!(ledger_lines(&still), expected);
}

/// The pivot captures, but its answers never say so, and the payments agent's status
/// skill cannot say either (it answers 503 too): the saga stops for a person and nothing
/// is unwound, neither the capture nor any step before it.
async fn assert_pivot_escalates_without_unwinding(fault: Fault) {
    let (harness, task) = run(&[
        ("payments.capture", fault),
        ("payments.status", Fault::ServerError(ALWAYS)),
    ])
    .await;
    assert_escalated(&task, "s4");
    assert_eq!(
        calls(&harness, "payments"),
        keys(&["s4", "s4", "s4", "s4:verify:3"])
    );
    assert_eq!(
        effects_in_order(&harness.logs),
        keys(&["s0", "s1", "s2", "s3", "s4"]),
        "captured once; nothing undone"
    );
    assert!(
        undo_calls(&harness).is_empty(),
        "{:?}",
        undo_calls(&harness)
    );
    assert!(calls(&harness, "mailer").is_empty());
    assert_eq!(ledger_lines(&task)[4], "s4 unknown/3 undo notNeeded/0");
    assert_eq!(
        verifications(&harness, "unsettled").await.as_deref(),
        Some("1")
    );
    // Declared, the verification could not settle it: a person does.
    assert_eq!(
        unknown_outcomes(&harness, "payments", "person")
            .await
            .as_deref(),
        Some("1")
    );
    assert_eq!(
        unknown_outcomes(&harness, "payments", "verification").await,
        None
    );
}

/// The demo's `--fail-at capture-unknown` against a payments agent whose card declares
/// no verification for the capture: the capture is applied, no answer comes, and once
/// its attempts are spent nobody can ask whether it happened. The saga stops for a
/// person, and `/metrics` counts an unknown outcome put to a person, and no verification.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pivot_in_doubt_without_a_verification_is_put_to_a_person_and_counted_so() {
    let unverified = |agent: &str, card: &mut Value| {
        if agent == "payments" {
            let capture = card
                .pointer_mut("/capabilities/extensions/0/params/skills/payments.capture")
                .and_then(Value::as_object_mut)
                .unwrap();
            assert!(capture.remove("verify").is_some(), "the card declared one");
        }
    };
    let harness = Harness::start_with_cards(
        &[("payments.capture", Fault::ApplyThenHang(ALWAYS))],
        300,
        executor_agent::agent::DEFAULT_MAX_RUNNING_SAGAS,
        &unverified,
    )
    .await;
    let task = harness.send(harness.signed(PLAN), None).await;
    assert_escalated(&task, "s4");
    assert_eq!(
        calls(&harness, "payments"),
        keys(&["s4", "s4", "s4"]),
        "nothing asked whether it happened"
    );
    assert_eq!(
        effects_in_order(&harness.logs),
        keys(&["s0", "s1", "s2", "s3", "s4"]),
        "captured once; nothing undone"
    );
    assert_eq!(ledger_lines(&task)[4], "s4 unknown/3 undo notNeeded/0");
    assert_eq!(
        unknown_outcomes(&harness, "payments", "person")
            .await
            .as_deref(),
        Some("1")
    );
    for verdict in ["applied", "not_applied", "unsettled"] {
        assert_eq!(verifications(&harness, verdict).await, None, "{verdict}");
    }
    assert_eq!(
        unknown_outcomes(&harness, "payments", "verification").await,
        None
    );
}

/// The pivot captures but every answer is a 503; once its attempts are spent, the
/// executor asks the payments agent's status skill, which says the capture took effect:
/// the saga completes with the one capture, and nobody is asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pivot_whose_answers_are_lost_is_verified_applied_and_the_saga_completes() {
    let (harness, task) = run(&[("payments.capture", Fault::ServerError(ALWAYS))]).await;
    assert_eq!(task.status.state, TaskState::Completed, "{:?}", task.status);
    assert_eq!(ledger_phase(&task), "done completed");
    assert_eq!(
        calls(&harness, "payments"),
        keys(&["s4", "s4", "s4", "s4:verify:3"])
    );
    assert_eq!(
        effects_in_order(&harness.logs),
        keys(&ALL_SIX),
        "captured once"
    );
    assert!(
        undo_calls(&harness).is_empty(),
        "{:?}",
        undo_calls(&harness)
    );
    assert_eq!(ledger_lines(&task)[4], "s4 succeeded/3 undo notNeeded/0");
    // The capture's result is what the status skill reported it gave.
    assert_eq!(
        ledger_of(&task)["steps"][4]["forward"]["response"],
        json!({"captureId": "p_1", "amountMinor": 12000, "currency": "EUR"})
    );
    assert_eq!(
        verifications(&harness, "applied").await.as_deref(),
        Some("1")
    );
    assert_eq!(
        unknown_outcomes(&harness, "payments", "verification")
            .await
            .as_deref(),
        Some("1")
    );
    assert_eq!(unknown_outcomes(&harness, "payments", "person").await, None);
}

/// The pivot's calls time out before the payments agent captures anything: the status
/// skill says nothing was captured, the step failed definitely, and the saga unwinds
/// everything before it, with no charge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pivot_never_applied_is_verified_not_applied_and_the_saga_unwinds() {
    let harness = Harness::start_timed(&[("payments.capture", Fault::Hang)], 300).await;
    let task = harness.send(harness.signed(PLAN), None).await;
    assert_compensated(&task);
    assert_eq!(
        calls(&harness, "payments"),
        keys(&["s4", "s4", "s4", "s4:verify:3"])
    );
    assert_eq!(
        effects_in_order(&harness.logs),
        keys(&["s0", "s1", "s2", "s3", "s2:undo", "s1:undo", "s0:undo"]),
        "nothing captured; the rest undone in reverse"
    );
    assert_eq!(ledger_lines(&task)[4], "s4 failed/3 undo notNeeded/0");
    assert_eq!(
        verifications(&harness, "not_applied").await.as_deref(),
        Some("1")
    );
    assert_eq!(
        unknown_outcomes(&harness, "payments", "verification")
            .await
            .as_deref(),
        Some("1")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pivot_answered_with_503s_escalates_without_unwinding_anything() {
    assert_pivot_escalates_without_unwinding(Fault::ServerError(ALWAYS)).await;
}

/// spec/reversibility-v1.md: a 5xx is an unknown outcome, whatever its body says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pivot_answered_with_500s_carrying_a_json_rpc_error_escalates_without_unwinding() {
    assert_pivot_escalates_without_unwinding(Fault::ServerErrorRpc(ALWAYS)).await;
}

/// The harness itself: a dropped connection answers nothing at all, where the same
/// request for another skill gets an HTTP answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dropped_connection_fault_closes_the_connection_without_a_byte() {
    let faults = [("budget.reserve".to_owned(), Fault::DropConnection(ALWAYS))];
    let url = start_tool(faults.into(), Default::default()).await;
    let address = url.trim_start_matches("http://").to_owned();
    let answer = |skill: &'static str| {
        let address = address.clone();
        tokio::task::spawn_blocking(move || {
            let body = json!({"jsonrpc": "2.0", "id": "1", "method": "SendMessage",
                "params": {"message": {"parts": [{"data": {"skill": skill, "args": {}}}]}}})
            .to_string();
            let mut socket = std::net::TcpStream::connect(address).unwrap();
            write!(
                socket,
                "POST / HTTP/1.1\r\nHost: tool\r\nContent-Type: application/json\r\n\
                 Connection: close\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            let mut answer = Vec::new();
            let _ = socket.read_to_end(&mut answer); // EOF or reset: both end the answer
            String::from_utf8_lossy(&answer).into_owned()
        })
    };
    assert_eq!(answer("budget.reserve").await.unwrap(), "");
    assert!(
        answer("budget.release")
            .await
            .unwrap()
            .starts_with("HTTP/1.1 ")
    );
}

/// Runs the supplier plan with the compliance check declined (so the saga unwinds) and
/// `release` injected in the budget's release, whose card is `release_verified`.
async fn unwind_with_release(release: Fault) -> (Harness, Task) {
    let faults = [
        ("compliance.check", Fault::Decline),
        ("budget.release", release),
    ];
    let harness = Harness::start_with_cards(
        &faults,
        300,
        executor_agent::agent::DEFAULT_MAX_RUNNING_SAGAS,
        &release_verified,
    )
    .await;
    let task = harness.send(harness.signed(PLAN), None).await;
    (harness, task)
}

/// Issue 42: a compensation whose answer is lost is not made again blindly. The
/// release (not idempotent) is applied but answered with a 503; the executor asks the
/// budget's status skill, which says it took effect, and the unwind goes on: one release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compensation_whose_answer_is_lost_is_verified_applied_and_not_made_again() {
    let (harness, task) = unwind_with_release(Fault::ServerError(ALWAYS)).await;
    assert_compensated(&task);
    assert_eq!(
        calls(&harness, "budget"),
        keys(&["s1", "s1:undo", "s1:undo:verify:1"])
    );
    let releases = harness
        .log("budget")
        .effects
        .iter()
        .filter(|e| e.1 == "budget.release")
        .count();
    assert_eq!(releases, 1, "released once");
    assert_eq!(ledger_lines(&task)[1], "s1 succeeded/1 undo done/1");
    assert_eq!(
        effects_in_order(&harness.logs),
        keys(&["s0", "s1", "s2", "s2:undo", "s1:undo", "s0:undo"]),
        "each effect once, the unwind in reverse"
    );
    assert_eq!(
        verifications_of(&harness, "budget", "applied")
            .await
            .as_deref(),
        Some("1")
    );
}

/// The release never reaches the ledger (the agent hangs): the status skill says it did
/// not take effect, and a person decides, with nothing made again and nothing further
/// unwound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compensation_verified_not_applied_waits_for_a_person_and_is_not_made_again() {
    let (harness, task) = unwind_with_release(Fault::Hang).await;
    assert_escalated(&task, "s1");
    let said = format!("{:?}", task.status.message);
    assert!(
        said.contains("verified: the compensation did not take effect"),
        "{said}"
    );
    assert_eq!(
        calls(&harness, "budget"),
        keys(&["s1", "s1:undo", "s1:undo:verify:1"])
    );
    assert!(!undo_calls(&harness).contains(&keys(&["s0:undo"])[0]));
    assert_eq!(
        verifications_of(&harness, "budget", "not_applied")
            .await
            .as_deref(),
        Some("1")
    );
}
