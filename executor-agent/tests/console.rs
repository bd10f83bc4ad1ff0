//! The console's API on an executor as `main` serves it: who may log in (operators and
//! approvers; never a planner, nobody anonymous), what each refusal says, that no answer
//! shows a tool credential, and that an approver's answer from the console moves a saga
//! as the same answer over A2A would.

mod common;

use common::TOOL_TOKEN;
use common::served::*;
use futures::StreamExt;
use serde_json::{Value, json};

const CONSOLE_API: &str = "/console/api";

fn http() -> reqwest::Client {
    reqwest::Client::new()
}

/// `POST api/session` with `bearer`: the status and the JSON answer.
async fn log_in(served: &Served, bearer: Option<&str>) -> (u16, Value) {
    let mut request = http().post(format!("{}{CONSOLE_API}/session", served.url));
    if let Some(token) = bearer {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// A session opened with `bearer`, which must open one.
async fn session(served: &Served, bearer: &str) -> String {
    let (status, body) = log_in(served, Some(bearer)).await;
    assert_eq!(status, 201, "{body}");
    body["session"].as_str().unwrap().to_owned()
}

async fn get(served: &Served, session: Option<&str>, path: &str) -> (u16, String) {
    let mut request = http().get(format!("{}{CONSOLE_API}{path}", served.url));
    if let Some(session) = session {
        request = request.bearer_auth(session);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

async fn post(served: &Served, session: &str, path: &str, body: &str) -> (u16, Value) {
    let response = http()
        .post(format!("{}{CONSOLE_API}{path}", served.url))
        .bearer_auth(session)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn message(body: &Value) -> &str {
    body["error"]["message"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn planners_anonymous_callers_and_made_up_tokens_get_no_session_and_no_page() {
    let served = serve().await;

    let (status, body) = log_in(&served, None).await;
    assert_eq!(status, 401, "{body}");
    let planner = planner_jwt(&served, "executor").unwrap();
    let (status, body) = log_in(&served, Some(&planner)).await;
    assert_eq!(status, 401, "{body}");
    assert!(message(&body).contains("planner"), "{body}");
    for made_up in ["not-a-token", "a.b.c", &"x".repeat(20_000), TOOL_TOKEN] {
        let (status, body) = log_in(&served, Some(made_up)).await;
        assert_eq!(status, 401, "{made_up:.20}: {body}");
    }
    // A JWT for another audience is not the executor's, whoever signed it.
    let elsewhere = mint_approver_jwt(&served, "planner");
    let (status, _) = log_in(&served, Some(&elsewhere)).await;
    assert_eq!(status, 401);

    for path in ["/overview", "/sagas", "/waiting", "/sagas/anything"] {
        assert_eq!(get(&served, None, path).await.0, 401, "{path}");
        assert_eq!(
            get(&served, Some("made-up-session"), path).await.0,
            401,
            "{path}"
        );
        // A credential that opens a session is not itself a session.
        assert_eq!(get(&served, Some(ADMIN_TOKEN), path).await.0, 401, "{path}");
    }

    // A session ends at its logout.
    let id = session(&served, ADMIN_TOKEN).await;
    assert_eq!(get(&served, Some(&id), "/overview").await.0, 200);
    let response = http()
        .delete(format!("{}{CONSOLE_API}/session", served.url))
        .bearer_auth(&id)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 204);
    assert_eq!(get(&served, Some(&id), "/overview").await.0, 401);
}

fn mint_approver_jwt(served: &Served, audience: &str) -> String {
    agent_host::mint_jwt(&served.approver, "approver-1", audience, 60).unwrap()
}

#[tokio::test]
async fn the_page_loads_nothing_from_elsewhere_and_the_api_keeps_nothing_in_caches() {
    let served = serve().await;
    let page = http()
        .get(format!("{}/console/", served.url))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(csp.contains("default-src 'self'"), "{csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    let html = page.text().await.unwrap();
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "{html}"
    );
    for asset in ["console.js", "console.css"] {
        let response = http()
            .get(format!("{}/console/{asset}", served.url))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{asset}");
        // The SVG namespace is a name, not an address anything is loaded from.
        let text = response
            .text()
            .await
            .unwrap()
            .replace("http://www.w3.org/2000/svg", "");
        assert!(
            !text.contains("http://") && !text.contains("https://"),
            "{asset} names an outside address"
        );
    }
    let id = session(&served, ADMIN_TOKEN).await;
    let response = http()
        .get(format!("{}{CONSOLE_API}/overview", served.url))
        .bearer_auth(&id)
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["cache-control"], "no-store");
}

#[tokio::test]
async fn an_operator_reads_every_page_and_none_shows_a_tool_credential_but_cannot_answer() {
    let served = serve().await;
    let task = paused_for_approval(&served, "sg_console_read").await;
    let id = session(&served, ADMIN_TOKEN).await;

    let mut seen = String::new();
    for path in [
        "/overview".to_owned(),
        "/sagas".to_owned(),
        "/waiting".to_owned(),
        "/sagas/sg_console_read".to_owned(),
        format!("/sagas/{}", task.id),
        "/sagas?q=sg_console_read:s0r".to_owned(),
    ] {
        let (status, body) = get(&served, Some(&id), &path).await;
        assert_eq!(status, 200, "{path}: {body}");
        seen.push_str(&body);
    }
    assert!(
        !seen.contains(TOOL_TOKEN),
        "a console answer shows a tool credential"
    );

    let (_, listed) = get(&served, Some(&id), "/sagas?q=sg_console_read:s0r").await;
    let listed: Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(listed["sagas"][0]["sagaId"], "sg_console_read", "{listed}");
    assert_eq!(listed["sagas"][0]["state"], "waitingForAPerson");

    let (_, waiting) = get(&served, Some(&id), "/waiting").await;
    let waiting: Value = serde_json::from_str(&waiting).unwrap();
    let row = &waiting["sagas"][0];
    assert_eq!(row["sagaId"], "sg_console_read", "{waiting}");
    assert_eq!(row["on"], "approval");
    let choices: Vec<&str> = row["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["resolution"].as_str().unwrap())
        .collect();
    assert_eq!(choices, ["approve", "compensate"]);

    let (status, body) = post(
        &served,
        &id,
        "/sagas/sg_console_read/answer",
        r#"{"resolution": "compensate"}"#,
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(message(&body).contains("NOT_AN_APPROVER"), "{body}");

    let (status, body) = get(&served, Some(&id), "/sagas?state=exploded").await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = get(&served, Some(&id), "/overview?windowSecs=5").await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = get(&served, Some(&id), "/overview?windowSecs=3600").await;
    assert_eq!(status, 200, "{body}");
    let overview: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(overview["since"], "the last 1 h", "{overview}");
    assert_eq!(overview["windowSecs"], 3600);
    let (status, _) = get(&served, Some(&id), "/sagas/no-such-saga").await;
    assert_eq!(status, 404);
}

/// A plan made when the planner planned a goal again: the saga's page names the saga it
/// supersedes, and why that one unwound, as the signed plan says (data, never markup).
#[tokio::test]
async fn a_saga_shows_the_saga_its_plan_supersedes() {
    let served = serve().await;
    let mut plan = supplier_as("sg_console_second");
    plan["supersedes"] = json!({"sagaId": "sg_console_first", "executorTaskId": "t-first",
        "failedStep": "s3", "reason": "s3 failed: <img src=x onerror=alert(1)>"});
    common::sign_plan(&served.planner, &mut plan);
    send(&served, planner_jwt(&served, "executor"), plan)
        .await
        .unwrap();
    let id = session(&served, ADMIN_TOKEN).await;
    let (status, body) = get(&served, Some(&id), "/sagas/sg_console_second").await;
    assert_eq!(status, 200, "{body}");
    let saga: Value = serde_json::from_str(&body).unwrap();
    let supersedes = &saga["audit"]["supersedes"];
    assert_eq!(supersedes["sagaId"], "sg_console_first", "{saga}");
    assert_eq!(supersedes["failedStep"], "s3");
    assert_eq!(
        supersedes["reason"],
        "s3 failed: <img src=x onerror=alert(1)>"
    );
    // A first plan supersedes nothing.
    let first = supplier_plan(&served, "sg_console_plain");
    send(&served, planner_jwt(&served, "executor"), first)
        .await
        .unwrap();
    let (_, body) = get(&served, Some(&id), "/sagas/sg_console_plain").await;
    let saga: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(saga["audit"]["supersedes"], Value::Null, "{saga}");

    // The list finds the sagas planned to replace one: this one only.
    let (status, body) = get(&served, Some(&id), "/sagas?supersedes=sg_console_first").await;
    assert_eq!(status, 200, "{body}");
    let listed: Value = serde_json::from_str(&body).unwrap();
    let ids: Vec<&str> = listed["sagas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["sagaId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["sg_console_second"], "{listed}");
    let (status, body) = get(
        &served,
        Some(&id),
        &format!("/sagas?supersedes={}", "x".repeat(65)),
    )
    .await;
    assert_eq!(status, 400, "{body}");
}

/// Reads the saga's live stream until its state in the console is `state`.
async fn until_state(served: &Served, session: &str, id: &str, state: &str) -> Value {
    let response = http()
        .get(format!("{}{CONSOLE_API}/sagas/{id}/events", served.url))
        .bearer_auth(session)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut changes = response.bytes_stream();
    loop {
        let (_, body) = get(served, Some(session), &format!("/sagas/{id}")).await;
        let saga: Value = serde_json::from_str(&body).unwrap();
        if saga["state"] == state {
            return saga;
        }
        // The next change (a guard, not a wait: the stream says when to look again).
        tokio::time::timeout(std::time::Duration::from_secs(60), changes.next())
            .await
            .unwrap_or_else(|_| panic!("no change while the saga is {}", saga["state"]))
            .expect("the stream ended before the saga was {state}")
            .unwrap();
    }
}

#[tokio::test]
async fn an_approvers_answer_from_the_console_is_checked_as_over_a2a_and_moves_the_saga() {
    let served = serve().await;
    paused_for_approval(&served, "sg_console_answer").await;
    let approver = session(&served, &mint_approver_jwt(&served, "executor")).await;
    let (_, waiting) = get(&served, Some(&approver), "/waiting").await;
    let waiting: Value = serde_json::from_str(&waiting).unwrap();
    let approval = waiting["sagas"][0]["approval"].clone();
    let in_five_minutes = (chrono::Utc::now() + chrono::Duration::minutes(5)).to_rfc3339();

    // Refused as over A2A: bound to other arguments, unbound, not JSON, too large.
    let mut other = approval.clone();
    other["argsSha256"] = json!("0".repeat(64));
    other["expiresAt"] = json!(in_five_minutes);
    let path = "/sagas/sg_console_answer/answer";
    let (status, body) = post(
        &served,
        &approver,
        path,
        &json!({"resolution": "approve", "approval": other}).to_string(),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert!(message(&body).contains("APPROVAL_MISMATCH"), "{body}");
    let (status, body) = post(&served, &approver, path, r#"{"resolution": "approve"}"#).await;
    assert_eq!(status, 422, "{body}");
    assert!(message(&body).contains("APPROVAL_UNBOUND"), "{body}");
    let (status, _) = post(&served, &approver, path, "{not json").await;
    assert_eq!(status, 400);
    let huge = json!({"resolution": "retry", "note": "x".repeat(8 * 1024)}).to_string();
    let (status, _) = post(&served, &approver, path, &huge).await;
    assert_eq!(status, 413);
    let (_, saga) = get(&served, Some(&approver), "/sagas/sg_console_answer").await;
    assert!(
        saga.contains("\"waitingForAPerson\""),
        "a refused answer moved the saga: {saga}"
    );

    let mut bound = approval.clone();
    bound["expiresAt"] = json!(in_five_minutes);
    let (status, body) = post(
        &served,
        &approver,
        path,
        &json!({"resolution": "approve", "approval": bound}).to_string(),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let saga = until_state(&served, &approver, "sg_console_answer", "completed").await;

    // The decision is the approver's, in the ledger, and the timeline shows every call.
    let decisions = &saga["ledger"]["steps"][1]["decisions"];
    assert_eq!(decisions[0]["by"], "approver-1", "{saga}");
    assert_eq!(decisions[0]["resolution"], "approve");
    assert_eq!(saga["timelineFrom"], "journal");
    let forwards: Vec<&str> = saga["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["kind"] == "forward" && b["outcome"] == "succeeded")
        .map(|b| b["step"].as_str().unwrap())
        .collect();
    let steps: Vec<&str> = saga["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap())
        .collect();
    assert_eq!(forwards, steps, "{saga}");
    assert_eq!(saga["audit"]["signerKeyId"], served.planner.kid());
    let waits = saga["waits"].as_array().unwrap();
    assert!(
        waits.iter().any(|w| w["why"]
            .as_str()
            .unwrap()
            .contains("answered approve by approver-1")),
        "{saga}"
    );

    // An answer to a saga that no longer waits is refused.
    let (status, body) = post(&served, &approver, path, r#"{"resolution": "retry"}"#).await;
    assert_eq!(status, 409, "{body}");
}

/// The steps whose undo deadlines the saga's page lists.
fn deadline_steps(saga: &Value) -> Vec<&str> {
    saga["undoDeadlines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["step"].as_str().unwrap())
        .collect()
}

/// The saga's page as the console's API shows it.
async fn saga_page(served: &Served, session: &str, id: &str) -> Value {
    let (status, body) = get(served, Some(session), &format!("/sagas/{id}")).await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// Issue 42: what a person sees. A point of no return that is no declared pivot (a
/// retriable step that changes something) is shown as such, and an undo deadline only
/// while the undo it bounds may still be run: not once it ran, nor once the saga passed
/// its point of no return or ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saga_shows_a_point_of_no_return_that_is_no_pivot_and_undo_deadlines_only_while_open() {
    // The first compliance check is declined, and the budget's release always is: the
    // first saga unwinds, undoes the sandbox, and waits for a person at the budget.
    let served = serve_faulty(
        executor_agent::http::RegistrationHosts::any(),
        &[
            ("compliance.check", common::Fault::DeclineTimes(1)),
            ("budget.release", common::Fault::Decline),
        ],
    )
    .await;
    let operator = session(&served, ADMIN_TOKEN).await;
    let planner = || planner_jwt(&served, "executor");
    let waiting = send(
        &served,
        planner(),
        no_pivot_plan(&served, "sg_console_undo_ran"),
    )
    .await
    .unwrap();
    assert_eq!(
        waiting.status.state,
        agent_host::sdk::TaskState::InputRequired,
        "{:?}",
        waiting.status
    );
    let saga = saga_page(&served, &operator, "sg_console_undo_ran").await;
    assert_eq!(saga["pivot"], Value::Null, "the plan declares none");
    assert_eq!(
        saga["pointOfNoReturn"],
        json!({"step": "s5", "skill": "email.send", "pivot": false,
            "why": "a retriable step that changes something and has no undo", "passed": false})
    );
    // The sandbox's undo ran: its deadline bounds nothing. The budget's may still be run
    // (a person decides): it is listed, until the deadline its ledger shows. The vendor's
    // declares none.
    assert_eq!(deadline_steps(&saga), ["s1"], "{saga}");
    assert_eq!(saga["undoDeadlines"][0]["agent"], "budget");
    let budget = ledger_step(&saga, "s1");
    let at = chrono::DateTime::parse_from_rfc3339(budget["undoDeadline"]["at"].as_str().unwrap())
        .unwrap();
    assert_eq!(
        saga["undoDeadlines"][0]["deadlineMs"],
        json!(at.timestamp_millis())
    );
    assert_eq!(budget["undoDeadline"]["open"], true);
    let sandbox = ledger_step(&saga, "s2");
    assert_eq!(sandbox["undo"]["state"], "done", "{saga}");
    assert_eq!(sandbox["undoDeadline"]["open"], false, "{saga}");

    // The same plan again completes: past its point of no return no undo may be run, and
    // no deadline is listed, though the ledger still holds them.
    let done = send(
        &served,
        planner(),
        no_pivot_plan(&served, "sg_console_no_pivot"),
    )
    .await
    .unwrap();
    assert_eq!(
        done.status.state,
        agent_host::sdk::TaskState::Completed,
        "{:?}",
        done.status
    );
    let saga = saga_page(&served, &operator, "sg_console_no_pivot").await;
    assert_eq!(saga["pointOfNoReturn"]["step"], "s5");
    assert_eq!(saga["pointOfNoReturn"]["passed"], true, "{saga}");
    assert_eq!(deadline_steps(&saga), Vec::<&str>::new(), "{saga}");
    for step in ["s1", "s2"] {
        assert_eq!(
            ledger_step(&saga, step)["undoDeadline"]["open"],
            false,
            "{saga}"
        );
    }

    // A declared pivot is the point of no return, shown as the pivot.
    let pivoted = send(
        &served,
        planner(),
        supplier_plan(&served, "sg_console_pivot"),
    )
    .await
    .unwrap();
    assert_eq!(pivoted.status.state, agent_host::sdk::TaskState::Completed);
    let saga = saga_page(&served, &operator, "sg_console_pivot").await;
    assert_eq!(saga["pivot"], "s4");
    assert_eq!(saga["pointOfNoReturn"]["step"], "s4");
    assert_eq!(saga["pointOfNoReturn"]["pivot"], true);
    assert_eq!(
        saga["pointOfNoReturn"]["why"],
        "the pivot: an irreversible step"
    );

    // The person releases the budget by hand: the unwind ends, and with it the deadline.
    let answered = answer(
        &served,
        approver_jwt(&served),
        &waiting.id,
        json!({"resolution": "resolved-manually"}),
    )
    .await;
    assert!(answered.is_ok(), "{answered:?}");
    let saga = until_state(&served, &operator, "sg_console_undo_ran", "compensated").await;
    assert_eq!(saga["pointOfNoReturn"]["passed"], false);
    assert_eq!(deadline_steps(&saga), Vec::<&str>::new(), "{saga}");
}

/// Step `id`'s record in the saga page's ledger.
fn ledger_step<'a>(saga: &'a Value, id: &str) -> &'a Value {
    saga["ledger"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["step"] == id)
        .unwrap_or_else(|| panic!("no step {id} in {saga}"))
}
