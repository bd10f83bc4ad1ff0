//! Principals' mandates against a running executor, over A2A with planner JWTs: what no
//! planner can grant itself is refused with its code before any tool is called and
//! without reserving anything; a budget is a running total across sagas, also for plans
//! sent at the same moment; what a compensated saga did not spend is given back; a
//! revoked mandate accepts nothing more.

mod common;

use agent_host::sdk::{Task, TaskState};
use common::served::*;
use common::{post_revocation, principal, read};
use serde_json::{Value, json};
use shared_types::SigningIdentity;

/// The example plan as saga `saga_id`, under `mandate` (a signed document), signed by
/// the served executor's planner.
fn plan_under(served: &Served, saga_id: &str, mandate: Value) -> Value {
    let text = read("examples/plans/supplier-onboarding.json")
        .to_string()
        .replace("sg_demo_supplier_onboarding", saga_id);
    let mut plan: Value = serde_json::from_str(&text).unwrap();
    plan["mandate"] = mandate;
    served.planner.sign_in_place(&mut plan).unwrap();
    plan
}

/// A mandate `id` of the test principal for the served planner, changed by `change`
/// before the principal signs it.
fn mandate(served: &Served, id: &str, change: impl FnOnce(&mut Value)) -> Value {
    let mut m = read("examples/mandates/test-mandate.json");
    m["mandateId"] = json!(id);
    m["grantees"] = json!([served.planner.kid()]);
    change(&mut m);
    principal().sign_in_place(&mut m).unwrap();
    m
}

/// The example plan's worst case: payments.capture of 12,000 minor units.
const ONE_SAGA: u64 = 12_000;

async fn submit(served: &Served, plan: Value) -> Task {
    send(served, planner_jwt(served, "executor"), plan)
        .await
        .unwrap()
}

/// The executor's account of mandate `id` (`GET /admin/mandates/{id}`).
async fn account(served: &Served, id: &str) -> Value {
    let response = reqwest::Client::new()
        .get(format!("{}/admin/mandates/{id}", served.url))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

/// The codes of a refused task's violations.
fn codes(task: &Task) -> Vec<String> {
    let text = format!("{:?}", task.status.message);
    [
        "MANDATE_UNTRUSTED",
        "MANDATE_SCOPE",
        "MANDATE_EXPIRED",
        "MANDATE_EXCEEDED",
        "MANDATE_EXHAUSTED",
        "MANDATE_REVOKED",
        "SIGNATURE_INVALID",
    ]
    .into_iter()
    .filter(|code| text.contains(code))
    .map(str::to_owned)
    .collect()
}

/// Nothing was reserved under `id`: the executor holds no saga against it.
async fn nothing_reserved(served: &Served, id: &str) {
    let shown = account(served, id).await;
    for m in shown["mandates"].as_array().unwrap() {
        assert_eq!(m["reservedMinor"], 0, "{shown}");
        assert_eq!(m["sagas"], json!([]), "{shown}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planner_cannot_grant_raise_or_stretch_a_mandate_and_nothing_is_reserved() {
    let served = serve().await;
    let planner = served.planner.clone();

    let mut own = mandate(&served, "md_own", |_| {});
    planner.sign_in_place(&mut own).unwrap();

    let mut raised = mandate(&served, "md_raised", |_| {});
    raised["perSaga"]["amountMinor"] = json!(9_000_000);

    let not_granted = mandate(&served, "md_other", |m| {
        m["grantees"] = json!(["planner-2"])
    });

    let narrow = mandate(&served, "md_narrow", |m| {
        let scope: Vec<Value> = m["scope"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["agent"] != "mailer")
            .cloned()
            .collect();
        m["scope"] = Value::Array(scope);
    });

    let past = mandate(&served, "md_past", |m| {
        m["notBefore"] = json!("2020-01-01T00:00:00Z");
        m["notAfter"] = json!("2021-01-01T00:00:00Z");
    });

    let cases = [
        ("md_own", own, "MANDATE_UNTRUSTED", "planner key"),
        ("md_raised", raised, "MANDATE_UNTRUSTED", "does not match"),
        (
            "md_other",
            not_granted,
            "MANDATE_UNTRUSTED",
            "not granted to planner key",
        ),
        (
            "md_narrow",
            narrow,
            "MANDATE_SCOPE",
            "does not allow email.send",
        ),
        ("md_past", past, "MANDATE_EXPIRED", "expired"),
    ];
    for (id, grant, code, words) in cases {
        let task = submit(&served, plan_under(&served, &format!("sg_{id}"), grant)).await;
        assert_eq!(task.status.state, TaskState::Rejected, "{id}: {task:?}");
        assert_eq!(codes(&task), vec![code.to_owned()], "{id}: {task:?}");
        let text = format!("{:?}", task.status.message);
        assert!(text.contains(words), "{id}: {text}");
        nothing_reserved(&served, id).await;
    }
    assert_eq!(calls_seen(&served), 0, "no tool agent saw any call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_mandate_accepts_no_plan_and_reserves_nothing() {
    let served = serve().await;
    let grant = mandate(&served, "md_revoked", |_| {});
    let revocation = json!({
        "revokedMandateId": "md_revoked",
        "revokedAt": "2026-12-01T00:00:00Z",
        "reason": "moved to another budget",
    });

    // Only the principal's signature revokes: unsigned, or signed by the planner, nothing.
    let http = reqwest::Client::new();
    let revoke = |body: Value| {
        let http = http.clone();
        let url = format!("{}/mandates/revocations", served.url);
        async move { http.post(url).json(&body).send().await.unwrap() }
    };
    let unsigned = revoke(revocation.clone()).await;
    assert_eq!(unsigned.status(), 422);
    let mut by_planner = revocation.clone();
    served.planner.sign_in_place(&mut by_planner).unwrap();
    assert_eq!(revoke(by_planner).await.status(), 422);
    let before = submit(&served, plan_under(&served, "sg_before", grant.clone())).await;
    assert_eq!(before.status.state, TaskState::Completed, "{before:?}");

    let mut signed = revocation.clone();
    principal().sign_in_place(&mut signed).unwrap();
    let answer = revoke(signed.clone()).await;
    assert_eq!(answer.status(), 200);
    let answer: Value = answer.json().await.unwrap();
    assert_eq!(answer["revoked"], "md_revoked");
    // Sent again, it changes nothing.
    assert_eq!(revoke(signed).await.status(), 200);

    let calls = calls_seen(&served);
    let task = submit(&served, plan_under(&served, "sg_after", grant)).await;
    assert_eq!(task.status.state, TaskState::Rejected, "{task:?}");
    assert_eq!(codes(&task), vec!["MANDATE_REVOKED".to_owned()]);
    assert_eq!(calls_seen(&served), calls, "no tool was called");
    let shown = account(&served, "md_revoked").await;
    let m = &shown["mandates"][0];
    assert_eq!(m["revoked"], true);
    assert_eq!(
        m["sagas"].as_array().unwrap().len(),
        1,
        "only the saga before: {shown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_plans_sent_at_once_under_a_mandate_that_fits_ten_run_ten() {
    let served = serve().await;
    let grant = mandate(&served, "md_ten", |m| {
        m["budget"]["amountMinor"] = json!(10 * ONE_SAGA);
        m.as_object_mut().unwrap().remove("perSaga");
    });
    let plans: Vec<Value> = (0..50)
        .map(|i| plan_under(&served, &format!("sg_ten_{i:02}"), grant.clone()))
        .collect();
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(plans.len()));
    let sent = plans.into_iter().map(|plan| {
        let barrier = barrier.clone();
        let served = &served;
        async move {
            barrier.wait().await;
            submit(served, plan).await
        }
    });
    let tasks = futures::future::join_all(sent).await;
    let completed = tasks
        .iter()
        .filter(|t| t.status.state == TaskState::Completed)
        .count();
    let exhausted: Vec<&Task> = tasks
        .iter()
        .filter(|t| t.status.state == TaskState::Rejected)
        .collect();
    assert_eq!(completed, 10, "exactly ten run");
    assert_eq!(exhausted.len(), 40);
    for task in exhausted {
        assert_eq!(
            codes(task),
            vec!["MANDATE_EXHAUSTED".to_owned()],
            "{task:?}"
        );
    }
    let shown = account(&served, "md_ten").await;
    let m = &shown["mandates"][0];
    assert_eq!(m["sagas"].as_array().unwrap().len(), 10, "{shown}");
    assert_eq!(
        m["reservedMinor"].as_u64().unwrap() + m["spentMinor"].as_u64().unwrap(),
        10 * ONE_SAGA,
        "{shown}"
    );
    assert_eq!(m["remainingMinor"], 0);
    // Counted by key: a call that timed out on a loaded machine is made again under its
    // key, and the tool applies it once.
    let log = served.logs["payments"].lock().unwrap();
    let keys: std::collections::HashSet<&str> =
        log.calls.iter().map(|(key, ..)| key.as_str()).collect();
    assert_eq!(keys.len(), 10, "ten payments, no more");
    assert_eq!(log.effects.len(), 10, "each applied once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compensated_saga_gives_its_reservation_back() {
    // Compliance declines every check: each saga unwinds before its payment.
    let served = serve_faulty(
        executor_agent::http::RegistrationHosts::any(),
        &[("compliance.check", common::Fault::Decline)],
    )
    .await;
    let grant = mandate(&served, "md_one", |m| {
        m["budget"]["amountMinor"] = json!(ONE_SAGA);
        m.as_object_mut().unwrap().remove("perSaga");
    });
    let first = submit(&served, plan_under(&served, "sg_first", grant.clone())).await;
    assert_eq!(first.status.state, TaskState::Failed, "{first:?}");
    // The end is settled just after the task shows it: wait for the account to say so.
    let mut shown = account(&served, "md_one").await;
    for _ in 0..200 {
        if shown["mandates"][0]["sagas"][0]["state"] == "ended" {
            break;
        }
        tokio::task::yield_now().await;
        shown = account(&served, "md_one").await;
    }
    let m = &shown["mandates"][0];
    assert_eq!(m["sagas"][0]["spentMinor"], 0, "{shown}");
    assert_eq!(m["remainingMinor"], ONE_SAGA, "{shown}");

    // The whole budget is there again: a second plan that needs all of it is accepted
    // (and unwinds too, compliance still declining).
    let second = submit(&served, plan_under(&served, "sg_second", grant.clone())).await;
    assert_ne!(second.status.state, TaskState::Rejected, "{second:?}");
    assert_eq!(second.status.state, TaskState::Failed);
    assert_eq!(
        calls_seen_by(&served, "payments"),
        0,
        "nothing was ever paid"
    );
}

fn calls_seen_by(served: &Served, agent: &str) -> usize {
    served.logs[agent].lock().unwrap().calls.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saga_before_its_pivot_unwinds_when_its_mandate_is_revoked() {
    // The sandbox holds its answer until told: the saga is at s2, before its pivot.
    let held = [("sandbox.provision", common::Fault::ApplyThenHold(1))];
    let setup = common::Harness::start_timed(&held, 30_000).await;
    let plan = setup.signed("examples/plans/supplier-onboarding.json");
    let mandate_id = plan["mandate"]["mandateId"].as_str().unwrap().to_owned();
    let client = agent_host::AgentClient::new(&setup.url).unwrap();
    let request = common::data_message(plan, None);
    let call = setup.as_planner();
    let mut sent = tokio::spawn(async move { client.send(&call, &request).await });
    let applied = setup.log("sandbox").applied.clone();
    tokio::select! {
        () = applied.notified() => {}
        ended = &mut sent => panic!("the saga ended before the sandbox held its answer: {ended:?}"),
    }

    let mut revocation = json!({
        "revokedMandateId": mandate_id,
        "revokedAt": "2026-12-01T00:00:00Z",
    });
    principal().sign_in_place(&mut revocation).unwrap();
    let (revoked, heard) = setup.executor.revoke(&revocation).await.unwrap();
    assert_eq!(revoked.principal_key, "test-principal");
    assert_eq!(heard.unwinding, 1, "the running saga unwinds: {heard:?}");
    assert_eq!(
        heard.held_at_pivot + heard.finishing + heard.not_yet_heard,
        0
    );
    setup.log("sandbox").release.notify_one();

    let task = match sent.await.unwrap().unwrap() {
        agent_host::sdk::SendMessageResponse::Task(task) => task,
        other => panic!("expected a task, got {other:?}"),
    };
    assert_eq!(task.status.state, TaskState::Failed, "{:?}", task.status);
    assert_eq!(
        task.metadata.as_ref().and_then(|m| m.get("outcome")),
        Some(&json!("compensated"))
    );
    let said = format!("{:?}", task.status.message);
    assert!(said.contains("mandate was revoked"), "{said}");
    // Everything done was undone, in reverse; nothing was paid.
    let effects = common::effects_in_order(&setup.logs);
    assert!(effects.iter().all(|e| !e.contains(":s4")), "{effects:?}");
    let undone: Vec<&String> = effects.iter().filter(|e| e.ends_with(":undo")).collect();
    assert_eq!(undone.len(), 3, "{effects:?}");
}

#[tokio::test]
async fn a_planners_or_approvers_key_is_refused_as_a_principal_at_start() {
    use executor_agent::service::{Settings, build};
    let planner = SigningIdentity::from_seed([42; 32], Some("planner-1".into()));
    let person = SigningIdentity::from_seed([44; 32], Some("approver-1".into()));
    let dir = tempfile::tempdir().unwrap();
    let settings = |principal: &SigningIdentity| Settings {
        planners: vec![("planner-1".into(), planner.public_jwk())],
        approvers: vec![("approver-1".into(), person.public_jwk())],
        principals: vec![principal.public_jwk()],
        ..test_settings(dir.path().join("data"), "http://127.0.0.1:1")
    };
    let shutdown = tokio_util::sync::CancellationToken::new();
    for (who, key) in [("planner-1", &planner), ("approver-1", &person)] {
        let refused = build(settings(key), shutdown.clone()).await.err();
        let refused = refused.map(|e| e.to_string()).unwrap_or_default();
        assert!(
            refused.contains(&format!("is also the key of planner or approver {who}")),
            "{who}: {refused:?}"
        );
    }
    assert!(build(settings(&principal()), shutdown).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_that_is_not_json_or_too_large_is_refused_and_records_nothing() {
    let served = serve().await;
    let http = reqwest::Client::new();
    let url = format!("{}/mandates/revocations", served.url);
    let answer = http
        .post(&url)
        .body("{\"revokedMandateId\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 400);
    let duplicate = r#"{"revokedMandateId": "md_a", "revokedMandateId": "md_b", "revokedAt": "2026-12-01T00:00:00Z"}"#;
    assert_eq!(
        http.post(&url)
            .body(duplicate)
            .send()
            .await
            .unwrap()
            .status(),
        400
    );
    assert_eq!(
        declared_length_status(&served, "/mandates/revocations", 2 * 1024 * 1024).await,
        413
    );
    // A principal's signature over a bad id is still refused.
    let mut bad_id = json!({"revokedMandateId": "has space", "revokedAt": "2026-12-01T00:00:00Z"});
    principal().sign_in_place(&mut bad_id).unwrap();
    assert_eq!(
        http.post(&url).json(&bad_id).send().await.unwrap().status(),
        422
    );
    // Nothing was revoked: a plan under the example's mandate still runs.
    let task = submit(
        &served,
        plan_under(
            &served,
            "sg_still_granted",
            mandate(&served, "md_a", |_| {}),
        ),
    )
    .await;
    assert_eq!(task.status.state, TaskState::Completed, "{task:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planner_cannot_submit_another_planners_plan_and_spend_its_mandate() {
    let served = serve().await;
    // planner-1's plan under planner-1's mandate, sent by planner-2.
    let plan = plan_under(
        &served,
        "sg_not_yours",
        mandate(&served, "md_not_yours", |_| {}),
    );
    let refused = send(&served, other_planner_jwt(&served), plan.clone()).await;
    let Err(agent_host::Error::Protocol(e)) = refused else {
        panic!("expected a refusal, got {refused:?}");
    };
    assert!(e.message.starts_with("PLANNER_MISMATCH"), "{}", e.message);
    assert_eq!(calls_seen(&served), 0, "no tool was called");
    assert_eq!(
        account(&served, "md_not_yours").await["mandates"],
        json!([])
    );
    // Its own planner may still send it.
    let task = submit(&served, plan).await;
    assert_eq!(task.status.state, TaskState::Completed, "{task:?}");
}

/// The text of a task's status message and its data part (what it waits for).
fn status_of(task: &Task) -> (String, Value) {
    let mut text = String::new();
    let mut data = Value::Null;
    for part in task.status.message.iter().flat_map(|m| m.parts.iter()) {
        match &part.content {
            agent_host::sdk::PartContent::Text(t) => text.push_str(t),
            agent_host::sdk::PartContent::Data(d) => data = d.clone(),
            _ => {}
        }
    }
    (text, data)
}

/// The times at which the payments agent received a capture.
fn captures_received(served: &Served) -> Vec<std::time::Instant> {
    let log = served.logs["payments"].lock().unwrap();
    log.calls
        .iter()
        .zip(&log.called_at)
        .filter(|((_, skill, ..), _)| skill == "payments.capture")
        .map(|(_, at)| *at)
        .collect()
}

/// The capture never answers (nothing applied): each attempt times out after 300 ms, and
/// the card allows three. The mandate is revoked while the first is out; `status` is the
/// fault of the payments agent's status skill. Returns the agents, the task its send
/// answered, and when the revocation was acknowledged.
async fn pivot_hangs_and_is_revoked(
    status: Option<common::Fault>,
) -> (Served, agent_host::sdk::Task, std::time::Instant) {
    let mut faults = vec![("payments.capture", common::Fault::Hang)];
    faults.extend(status.map(|fault| ("payments.status", fault)));
    let served = serve_faulty(executor_agent::http::RegistrationHosts::any(), &faults).await;
    let grant = mandate(&served, "md_pivot_revoked", |_| {});
    let plan = plan_under(&served, "sg_pivot_revoked", grant);
    let called = served.logs["payments"].lock().unwrap().called.clone();
    let sending = {
        let url = served.url.clone();
        let bearer = planner_jwt(&served, "executor");
        tokio::spawn(async move {
            let call = agent_host::OutboundCall {
                bearer,
                ..agent_host::OutboundCall::default()
            };
            let client = agent_host::AgentClient::new(&url).unwrap();
            client.send(&call, &common::data_message(plan, None)).await
        })
    };
    called.notified().await;
    assert_eq!(
        captures_received(&served).len(),
        1,
        "the first attempt is out"
    );

    let answer = post_revocation(&served.url, "md_pivot_revoked").await;
    assert_eq!(answer.status(), 200);
    let answer: Value = answer.json().await.unwrap();
    let acknowledged = std::time::Instant::now();
    assert_eq!(answer["heldAtPivot"], 1, "{answer}");
    assert_eq!(
        answer["unwinding"], 0,
        "only sagas that will unwind: {answer}"
    );

    let task = match sending.await.unwrap().unwrap() {
        agent_host::sdk::SendMessageResponse::Task(task) => task,
        other => panic!("expected a task, got {other:?}"),
    };
    (served, task, acknowledged)
}

/// No capture was received after `acknowledged`.
fn no_capture_after(served: &Served, acknowledged: std::time::Instant) {
    let after: Vec<_> = captures_received(served)
        .into_iter()
        .filter(|at| *at > acknowledged)
        .collect();
    assert!(
        after.is_empty(),
        "{} capture(s) after the revocation",
        after.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_while_the_pivot_hangs_stops_its_retries_and_a_person_decides() {
    // The status skill cannot say either (it declines), so the outcome stays unknown.
    let (served, task, acknowledged) =
        pivot_hangs_and_is_revoked(Some(common::Fault::Decline)).await;
    // The saga ends up waiting for a person, and no capture was sent after the
    // acknowledgement (before the fix, attempts 2 and 3 were).
    assert_eq!(
        task.status.state,
        TaskState::InputRequired,
        "{:?}",
        task.status
    );
    let (said, waits_for) = status_of(&task);
    assert!(
        said.contains("the mandate was revoked while this step's outcome is unknown"),
        "{said}"
    );
    assert_eq!(
        waits_for["escalation"]["resolutions"],
        json!(["resolved-manually", "compensate"]),
        "no retry is offered: {waits_for}"
    );
    no_capture_after(&served, acknowledged);

    // A person confirms it did not happen: the saga unwinds, and still no capture.
    let call = agent_host::OutboundCall {
        bearer: approver_jwt(&served),
        ..agent_host::OutboundCall::default()
    };
    let resolved = agent_host::AgentClient::new(&served.url)
        .unwrap()
        .send(
            &call,
            &common::data_message(json!({"resolution": "compensate"}), Some(&task.id)),
        )
        .await
        .unwrap();
    let agent_host::sdk::SendMessageResponse::Task(ended) = resolved else {
        panic!("expected a task, got {resolved:?}")
    };
    assert_eq!(ended.status.state, TaskState::Failed, "{:?}", ended.status);
    let (said, _) = status_of(&ended);
    assert!(said.contains("the mandate was revoked"), "{said}");
    assert!(
        captures_received(&served)
            .iter()
            .all(|at| *at <= acknowledged)
    );
    let undone = common::effects_in_order(&served.logs)
        .into_iter()
        .filter(|e| e.ends_with(":undo"))
        .count();
    assert_eq!(undone, 3, "s2, s1 and s0 were compensated");
}

/// As above, but the payments agent's status skill answers: asked (it changes nothing),
/// it says the capture did not happen, and the saga unwinds for the revocation without a
/// person, still with no capture after the acknowledgement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_while_the_pivot_hangs_unwinds_once_the_tool_says_it_did_not_capture() {
    let (served, task, acknowledged) = pivot_hangs_and_is_revoked(None).await;
    assert_eq!(task.status.state, TaskState::Failed, "{:?}", task.status);
    let (said, _) = status_of(&task);
    assert!(
        said.contains("the mandate was revoked; every completed step was compensated"),
        "{said}"
    );
    no_capture_after(&served, acknowledged);
    let asked: Vec<String> = served.logs["payments"]
        .lock()
        .unwrap()
        .calls
        .iter()
        .filter(|(_, skill, ..)| skill == "payments.status")
        .map(|(key, ..)| key.clone())
        .collect();
    assert_eq!(asked, ["sg_pivot_revoked:s4:verify:1"]);
}

/// Sends `plan` and returns its task as soon as the executor has it (the plan may wait for
/// a saga slot).
async fn submit_at_once(served: &Served, plan: Value) -> Task {
    let call = agent_host::OutboundCall {
        bearer: planner_jwt(served, "executor"),
        ..agent_host::OutboundCall::default()
    };
    let request = common::answered_at_once(common::data_message(plan, None));
    match agent_host::AgentClient::new(&served.url)
        .unwrap()
        .send(&call, &request)
        .await
        .unwrap()
    {
        agent_host::sdk::SendMessageResponse::Task(task) => task,
        other => panic!("expected a task, got {other:?}"),
    }
}

/// Waits until the account of mandate `id` shows `reserved` minor units reserved.
async fn until_reserved(served: &Served, id: &str, reserved: u64) -> Value {
    let mut shown = account(served, id).await;
    for _ in 0..200 {
        if shown["mandates"][0]["reservedMinor"] == reserved {
            return shown;
        }
        tokio::task::yield_now().await;
        shown = account(served, id).await;
    }
    panic!("never {reserved} reserved: {shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_waiting_for_a_saga_slot_has_reserved_its_budget_until_it_is_canceled() {
    // One slot, taken by the first saga, held at the sandbox's answer.
    let served = serve_configured(
        executor_agent::http::RegistrationHosts::any(),
        &[("sandbox.provision", common::Fault::ApplyThenHold(1))],
        |settings| settings.max_running_sagas = 1,
    )
    .await;
    let grant = mandate(&served, "md_two", |m| {
        m["budget"]["amountMinor"] = json!(2 * ONE_SAGA);
        m.as_object_mut().unwrap().remove("perSaga");
    });
    let running = submit_at_once(&served, plan_under(&served, "sg_running", grant.clone())).await;
    let applied = served.logs["sandbox"].lock().unwrap().applied.clone();
    while served.logs["sandbox"].lock().unwrap().effects.is_empty() {
        applied.notified().await;
    }

    // Accepted with every slot taken: it has not started, and holds its worst case.
    let waiting = submit_at_once(&served, plan_under(&served, "sg_waiting", grant.clone())).await;
    assert_eq!(waiting.status.state, TaskState::Submitted, "{waiting:?}");
    assert!(
        format!("{:?}", waiting.status.message).contains("waiting for a saga slot"),
        "{waiting:?}"
    );
    let shown = until_reserved(&served, "md_two", 2 * ONE_SAGA).await;
    assert_eq!(shown["mandates"][0]["remainingMinor"], 0, "{shown}");
    // So a third plan does not fit, though only one saga has started.
    let third = submit(&served, plan_under(&served, "sg_third", grant.clone())).await;
    assert_eq!(third.status.state, TaskState::Rejected, "{third:?}");
    assert_eq!(codes(&third), vec!["MANDATE_EXHAUSTED".to_owned()]);

    // Canceled before it started: nothing ran, and its reservation is given back.
    let call = agent_host::OutboundCall {
        bearer: planner_jwt(&served, "executor"),
        ..agent_host::OutboundCall::default()
    };
    let canceled = agent_host::AgentClient::new(&served.url)
        .unwrap()
        .cancel_task(&call, &waiting.id)
        .await
        .unwrap();
    assert_eq!(canceled.status.state, TaskState::Canceled, "{canceled:?}");
    until_reserved(&served, "md_two", ONE_SAGA).await;
    let fourth = submit_at_once(&served, plan_under(&served, "sg_fourth", grant)).await;
    assert_eq!(fourth.status.state, TaskState::Submitted, "{fourth:?}");
    until_reserved(&served, "md_two", 2 * ONE_SAGA).await;
    assert_eq!(calls_seen_by(&served, "payments"), 0, "{running:?}");
    let sandbox_keys: Vec<String> = served.logs["sandbox"]
        .lock()
        .unwrap()
        .calls
        .iter()
        .map(|(key, ..)| key.clone())
        .collect();
    assert!(
        sandbox_keys
            .iter()
            .all(|key| key.starts_with("sg_running:")),
        "only the running saga reached a tool: {sandbox_keys:?}"
    );
}

/// Issue 42, the sanction gate: a saga waits for an approval before its pivot (step s1, a
/// compliance review); the principal revokes the mandate; the approver then approves.
/// Nothing is called after the revocation, and the steps made before it are undone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_after_the_revocation_makes_no_effect_and_the_earlier_steps_are_undone() {
    let served = serve().await;
    let task = paused_for_approval(&served, "sg_gate").await;
    let mandate = approval_plan(&served, "sg_gate")["mandate"]["mandateId"]
        .as_str()
        .unwrap()
        .to_owned();
    let answer = post_revocation(&served.url, &mandate).await;
    assert_eq!(answer.status(), 200);
    let acknowledged = std::time::Instant::now();

    let approved = answer_approval(&served, &task).await;
    assert!(
        approved.is_err(),
        "the approval finds no saga to approve: {approved:?}"
    );
    let ended = task_when_ended(&served, &task.id).await;
    assert_eq!(ended.status.state, TaskState::Failed, "{:?}", ended.status);
    let (said, _) = status_of(&ended);
    assert!(
        said.contains("the mandate was revoked; every completed step was compensated"),
        "{said}"
    );
    // Only undos after the acknowledgement; the review was never called.
    for (agent, log) in &served.logs {
        let log = log.lock().unwrap();
        for ((key, skill, ..), at) in log.calls.iter().zip(&log.called_at) {
            assert!(
                *at < acknowledged || key.ends_with(":undo"),
                "{agent} got {skill} under {key} after the revocation"
            );
            assert_ne!(skill, "compliance.review", "the approved step was called");
        }
    }
}

/// The approver's approval of what `task` waits for.
async fn answer_approval(served: &Served, task: &Task) -> Result<Task, agent_host::sdk::A2AError> {
    let approval = approval(task, in_five_minutes());
    answer(served, approver_jwt(served), &task.id, approval).await
}

/// The task once it has ended: the revocation unwinds the saga after it is acknowledged,
/// so the task is followed (its stream ends with the task) before it is read.
async fn task_when_ended(served: &Served, id: &str) -> Task {
    use futures::StreamExt;
    let call = agent_host::OutboundCall {
        bearer: approver_jwt(served),
        ..agent_host::OutboundCall::default()
    };
    let client = agent_host::AgentClient::new(&served.url).unwrap();
    // A task that has already ended cannot be subscribed to: then it is read at once.
    match client.subscribe(&call, id).await {
        Ok(mut events) => {
            let drained = async { while events.next().await.is_some() {} };
            tokio::time::timeout(std::time::Duration::from_secs(30), drained)
                .await
                .unwrap_or_else(|_| panic!("task {id} did not end"));
        }
        Err(refused) => assert!(refused.to_string().contains("terminal state"), "{refused}"),
    }
    task_now(served, id).await
}

/// The task as the executor shows it now.
async fn task_now(served: &Served, id: &str) -> Task {
    agent_host::AgentClient::new(&served.url)
        .unwrap()
        .get_task(
            &agent_host::OutboundCall {
                bearer: approver_jwt(served),
                ..agent_host::OutboundCall::default()
            },
            id,
        )
        .await
        .unwrap()
}
