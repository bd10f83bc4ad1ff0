//! Finding 3 of issue 19 and the planner's part of issue 20, against a running planner
//! (in front of the fake executor): it serves only authenticated callers, plans only
//! under a principal's mandate granted to it and within it (scope, per-saga cap,
//! window), and a goal's task is its sender's alone (another caller can neither see nor
//! cancel it).

mod common;

use std::sync::Arc;

use agent_host::sdk::{SendMessageResponse, TaskState};
use agent_host::{InboundAuth, JwtPolicy, OutboundCall, mint_jwt};
use common::*;
use futures::StreamExt;
use serde_json::{Value, json};
use shared_types::SigningIdentity;

const TOKEN: &str = "caller-token-0123456789";

fn bearer(token: &str) -> OutboundCall {
    OutboundCall {
        bearer: Some(token.to_owned()),
        ..OutboundCall::default()
    }
}

async fn token_planner(executor: &FakeExecutor, identity: SigningIdentity) -> RunningPlanner {
    let auth = InboundAuth::StaticBearer {
        name: "user".into(),
        token: TOKEN.into(),
    };
    start_full(&executor.url, identity, None, "executor", None, auth).await
}

/// A JSON-RPC `SendMessage` of the supplier goal, as raw JSON.
fn send_message_body() -> Value {
    json!({"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": {"message": {
        "messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": SUPPLIER_GOAL}]}}})
}

#[tokio::test]
async fn unauthenticated_goals_and_cancels_are_refused_and_plan_nothing() {
    let identity = planner_identity();
    let executor = FakeExecutor::start(Script::Complete, &identity).await;
    let planner = token_planner(&executor, identity).await;
    let http = reqwest::Client::new();
    for authorization in [None, Some("Bearer not-the-token-at-all")] {
        for body in [
            send_message_body(),
            json!({"jsonrpc": "2.0", "id": 8, "method": "CancelTask", "params": {"id": "t-1"}}),
        ] {
            let mut request = http
                .post(&planner.url)
                .header("A2A-Version", "1.0")
                .json(&body);
            if let Some(value) = authorization {
                request = request.header("Authorization", value);
            }
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 401, "{authorization:?} {body}");
        }
    }
    // Nothing was planned or submitted, and no task exists.
    assert!(executor.plans().is_empty());
    let listed = planner
        .client
        .list_tasks(&bearer(TOKEN), &all_tasks())
        .await
        .unwrap();
    assert_eq!(listed.tasks.len(), 0);

    // The token's holder is served.
    let SendMessageResponse::Task(task) = planner
        .client
        .send(&bearer(TOKEN), &goal_request(SUPPLIER_GOAL, None))
        .await
        .unwrap()
    else {
        panic!("a task");
    };
    let task = planner
        .client
        .get_task(&bearer(TOKEN), &task.id)
        .await
        .unwrap();
    assert_eq!(
        task.status.state,
        TaskState::Completed,
        "{}",
        status_text(&task)
    );
    assert_eq!(executor.plans().len(), 1);
}

async fn rejected(planner: &RunningPlanner, text: &str, data: Option<Value>) -> String {
    let SendMessageResponse::Task(task) = planner
        .client
        .send(&bearer(TOKEN), &goal_request(text, data))
        .await
        .unwrap()
    else {
        panic!("a task");
    };
    assert_eq!(
        task.status.state,
        TaskState::Rejected,
        "{}",
        status_text(&task)
    );
    assert!(plan_artifact(&task).is_none(), "no plan was recorded");
    status_text(&task)
}

#[tokio::test]
async fn goals_over_the_mandates_cap_are_rejected_and_never_submitted() {
    let identity = planner_identity();
    let executor = FakeExecutor::start(Script::Complete, &identity).await;
    let planner = token_planner(&executor, identity).await;

    // The issue-19 goal: 999999 EUR, over the mandate's per-saga cap of 1000.00 EUR.
    let text = rejected(
        &planner,
        "Onboard supplier ACME GmbH, contact ops@acme.example, setup fee 999999 EUR",
        None,
    )
    .await;
    assert!(
        text.contains("MANDATE_EXCEEDED")
            && text.contains("99999900")
            && text.contains("per-saga cap of 100000")
            && text.contains("md_planner_tests"),
        "{text}"
    );
    // A maxSpend above what the mandate allows one saga, even for a small fee.
    let text = rejected(
        &planner,
        &format!("{SUPPLIER_GOAL}, max spend 5000 EUR"),
        None,
    )
    .await;
    assert!(text.contains("above what mandate"), "{text}");
    // Another currency, in maxSpend or in what the plan spends.
    let text = rejected(
        &planner,
        SUPPLIER_GOAL,
        Some(json!({"maxSpend": "100 USD"})),
    )
    .await;
    assert!(text.contains("USD") && text.contains("EUR only"), "{text}");
    let text = rejected(
        &planner,
        "Onboard supplier ACME GmbH, contact ops@acme.example, setup fee 120 USD",
        None,
    )
    .await;
    assert!(
        text.contains("MANDATE_EXCEEDED") && text.contains("USD") && text.contains("in EUR"),
        "{text}"
    );
    // A goal's maxSpend below what the plan spends narrows it.
    let text = rejected(
        &planner,
        &format!("{SUPPLIER_GOAL}, max spend 100 EUR"),
        None,
    )
    .await;
    assert!(text.contains("over maxSpend 10000"), "{text}");
    assert!(executor.plans().is_empty(), "nothing reached the executor");

    // Within the mandate: the plan embeds it exactly as the principal signed it.
    let task = planner
        .client
        .send(&bearer(TOKEN), &goal_request(SUPPLIER_GOAL, None))
        .await
        .unwrap();
    let SendMessageResponse::Task(task) = task else {
        panic!("a task")
    };
    let plans = executor.plans();
    assert_eq!(plans.len(), 1, "{}", status_text(&task));
    assert_eq!(plans[0].0["mandate"], test_mandate());
    assert_eq!(plans[0].1, vec![], "the executor's validator found nothing");
}

/// `edit` applied to the tests' mandate, signed by the tests' principal.
fn mandate_with(edit: impl FnOnce(&mut shared_types::Mandate)) -> Value {
    let mut mandate = mandate_doc();
    edit(&mut mandate);
    signed_mandate(&mandate)
}

#[tokio::test]
async fn goals_whose_mandate_does_not_hold_are_rejected_and_never_submitted() {
    let identity = planner_identity();
    let executor = FakeExecutor::start(Script::Complete, &identity).await;
    let planner = token_planner(&executor, identity.clone()).await;
    let with = |mandate: Value| Some(json!({"mandate": mandate}));

    // Granted to another planner.
    let other = mandate_with(|m| m.grantees = vec!["planner-other".into()]);
    let text = rejected(&planner, SUPPLIER_GOAL, with(other)).await;
    assert!(
        text.contains("not granted to this planner") && text.contains("planner-other"),
        "{text}"
    );
    // Signed by the planner's own key: a planner cannot grant itself a mandate.
    let own = mandate_doc().signed_by(&identity).unwrap();
    let text = rejected(&planner, SUPPLIER_GOAL, with(own)).await;
    assert!(text.contains("this planner's own key"), "{text}");
    // Unsigned.
    let mut unsigned = test_mandate();
    unsigned.as_object_mut().unwrap().remove("signatures");
    let text = rejected(&planner, SUPPLIER_GOAL, with(unsigned)).await;
    assert!(text.contains("no signature"), "{text}");
    // A skill outside its scope.
    let no_mail = mandate_with(|m| m.scope.retain(|s| s.agent != "mailer"));
    let text = rejected(&planner, SUPPLIER_GOAL, with(no_mail)).await;
    assert!(
        text.contains("MANDATE_SCOPE") && text.contains("email.send"),
        "{text}"
    );
    // Past notAfter, and a window that ends before the worst-case path would.
    let now = chrono::Utc::now();
    let past = mandate_with(|m| {
        m.not_before = now - chrono::TimeDelta::days(2);
        m.not_after = now - chrono::TimeDelta::days(1);
    });
    let text = rejected(&planner, SUPPLIER_GOAL, with(past)).await;
    assert!(
        text.contains("MANDATE_EXPIRED") && text.contains("expired at"),
        "{text}"
    );
    let short = mandate_with(|m| m.not_after = now + chrono::TimeDelta::seconds(30));
    let text = rejected(&planner, SUPPLIER_GOAL, with(short)).await;
    assert!(
        text.contains("MANDATE_EXPIRED") && text.contains("worst-case path"),
        "{text}"
    );
    // Not a mandate at all (the old planner-written shape).
    let text = rejected(
        &planner,
        SUPPLIER_GOAL,
        with(json!({"maxSpend": {"currency": "EUR", "amountMinor": 25000}})),
    )
    .await;
    assert!(text.contains("not a mandate document"), "{text}");
    // A goal cannot set its own expiry: the mandate's window governs.
    for data in [
        json!({"expiresInSeconds": 3600}),
        json!({"expiresAt": "2099-01-01T00:00:00Z"}),
    ] {
        let text = rejected(&planner, SUPPLIER_GOAL, Some(data)).await;
        assert!(text.contains("mandate's window"), "{text}");
    }
    assert!(executor.plans().is_empty(), "nothing reached the executor");
}

#[tokio::test]
async fn a_goals_own_mandate_takes_precedence_and_none_at_all_is_refused() {
    let identity = planner_identity();
    let executor = FakeExecutor::start(Script::Complete, &identity).await;
    let auth = InboundAuth::StaticBearer {
        name: "user".into(),
        token: TOKEN.into(),
    };
    let planner = start_under(&executor.url, identity, None, "executor", None, auth, None).await;

    let text = rejected(&planner, SUPPLIER_GOAL, None).await;
    assert!(text.contains("no mandate"), "{text}");
    assert!(executor.plans().is_empty());

    let own = mandate_with(|m| m.mandate_id = "md_for_this_goal".into());
    let SendMessageResponse::Task(task) = planner
        .client
        .send(
            &bearer(TOKEN),
            &goal_request(SUPPLIER_GOAL, Some(json!({"mandate": own}))),
        )
        .await
        .unwrap()
    else {
        panic!("a task");
    };
    assert_eq!(
        task.status.state,
        TaskState::Completed,
        "{}",
        status_text(&task)
    );
    let plans = executor.plans();
    assert_eq!(plans.len(), 1);
    // Through A2A its numbers travelled as doubles; the plan carries it as signed.
    assert_eq!(plans[0].0["mandate"], own);
    assert_eq!(plans[0].1, vec![]);
}

/// Two callers, each with a key of its own (JWTs for the planner's id as audience).
struct Callers {
    alice: SigningIdentity,
    mallory: SigningIdentity,
}

impl Callers {
    fn new() -> Self {
        Self {
            alice: SigningIdentity::generate(Some("alice".into())).unwrap(),
            mallory: SigningIdentity::generate(Some("mallory".into())).unwrap(),
        }
    }

    fn auth(&self) -> InboundAuth {
        let issuers = [
            ("alice".to_owned(), self.alice.public_jwk()),
            ("mallory".to_owned(), self.mallory.public_jwk()),
        ];
        InboundAuth::Jwt(Arc::new(JwtPolicy::new("planner-test", &issuers).unwrap()))
    }

    fn as_(who: &SigningIdentity) -> OutboundCall {
        bearer(&mint_jwt(who, who.kid(), "planner-test", 60).unwrap())
    }
}

#[tokio::test]
async fn another_caller_can_neither_see_nor_cancel_a_goal() {
    let identity = planner_identity();
    let executor = FakeExecutor::start(Script::Hold, &identity).await;
    let callers = Callers::new();
    let planner = start_full(
        &executor.url,
        identity,
        None,
        "executor",
        None,
        callers.auth(),
    )
    .await;
    let alice = || Callers::as_(&callers.alice);
    let mallory = || Callers::as_(&callers.mallory);

    // Alice's goal, submitted and held WORKING by the executor.
    let mut events = planner
        .client
        .stream(&alice(), &goal_request(SUPPLIER_GOAL, None))
        .await
        .unwrap();
    let mut task_id = None;
    while let Some(Ok(event)) = events.next().await {
        if let agent_host::sdk::StreamResponse::Task(task) = event
            && metadata(&task, "executorTaskId").is_some()
        {
            task_id = Some(task.id);
            break;
        }
    }
    let task_id = task_id.expect("the planner's task names the executor's task");

    // Mallory: the task does not exist for her, whatever she tries.
    let error = planner
        .client
        .cancel_task(&mallory(), &task_id)
        .await
        .unwrap_err();
    assert!(not_found(&error), "{error}");
    let error = planner
        .client
        .get_task(&mallory(), &task_id)
        .await
        .unwrap_err();
    assert!(not_found(&error), "{error}");
    let Err(error) = planner.client.subscribe(&mallory(), &task_id).await else {
        panic!("mallory subscribed to alice's task");
    };
    assert!(not_found(&error), "{error}");
    let mut continuing = goal_request("cancel it", None);
    continuing.message.task_id = Some(task_id.clone());
    let error = planner
        .client
        .send(&mallory(), &continuing)
        .await
        .unwrap_err();
    assert!(not_found(&error), "{error}");
    let listed = planner
        .client
        .list_tasks(&mallory(), &all_tasks())
        .await
        .unwrap();
    assert!(
        listed.tasks.is_empty() && listed.total_size == 0,
        "{listed:?}"
    );

    // Nothing was relayed: the executor's task still runs, and so does Alice's.
    let held = executor.seen.lock().unwrap().held[0].clone();
    assert_eq!(
        held.snapshot().await.unwrap().status.state,
        TaskState::Working
    );
    let mine = planner.client.get_task(&alice(), &task_id).await.unwrap();
    assert_eq!(mine.status.state, TaskState::Working);
    assert_eq!(metadata(&mine, "owner"), Some(json!("alice")));
    let listed = planner
        .client
        .list_tasks(&alice(), &all_tasks())
        .await
        .unwrap();
    assert_eq!(listed.tasks.len(), 1);

    // The saga goes on to its end, seen by Alice.
    executor.complete_held().await;
    // Follow it to its end: a subscription ends with the task, and one opened just
    // after the end is refused, so read the task again after each.
    let mut ended = planner.client.get_task(&alice(), &task_id).await.unwrap();
    for _ in 0..10 {
        if ended.status.state.is_terminal() {
            break;
        }
        if let Ok(mut updates) = planner.client.subscribe(&alice(), &task_id).await {
            while updates.next().await.is_some() {}
        }
        ended = planner.client.get_task(&alice(), &task_id).await.unwrap();
    }
    assert_eq!(
        ended.status.state,
        TaskState::Completed,
        "{}",
        status_text(&ended)
    );
}

fn all_tasks() -> agent_host::sdk::ListTasksRequest {
    agent_host::sdk::ListTasksRequest {
        context_id: None,
        status: None,
        page_size: None,
        page_token: None,
        history_length: None,
        status_timestamp_after: None,
        include_artifacts: None,
        tenant: None,
    }
}

fn not_found(error: &agent_host::Error) -> bool {
    matches!(error, agent_host::Error::Protocol(e)
        if e.code == agent_host::sdk::A2AError::task_not_found("").code)
}
