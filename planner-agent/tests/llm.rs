//! The model backend against a scripted OpenAI-compatible server, one draft at a time (no
//! repairs): a good draft becomes the committed example plan with the model id and
//! prompt hash recorded; malformed JSON, an unknown skill, an authored compensation, a
//! bad ordering are refused, never repaired silently; an HTTP error and a timeout fail.
//! The repair loop is `llm_repair.rs`.

mod common;

use std::time::Duration;

use agent_host::sdk::TaskState;
use common::model::{API_KEY, Fixture, REPORTED_MODEL, Reply, ScriptedModel, example_draft};
use common::*;
use planner_agent::backend::PlanBackend;
use planner_agent::{Error, LlmBackend, LlmConfig};
use serde_json::{Value, json};
use shared_types::Plan;

const MODEL: &str = "test-model";

fn answer(content: &str) -> Reply {
    Reply::Content(content.to_owned())
}

async fn endpoint(reply: Reply) -> ScriptedModel {
    ScriptedModel::start(vec![reply], false).await
}

fn backend(server: &ScriptedModel, timeout: Duration) -> LlmBackend {
    LlmBackend::new(LlmConfig {
        api_key: Some(API_KEY.into()),
        timeout,
        max_repairs: 0,
        ..LlmConfig::new(format!("{}/v1/", server.url), MODEL)
    })
    .unwrap()
}

async fn plan_with(fixture: &Fixture, content: &str) -> Result<Plan, Error> {
    let server = endpoint(answer(content)).await;
    backend(&server, Duration::from_secs(10))
        .plan(fixture.request())
        .await
}

/// Why the one draft was refused (no repairs): the goal's summary, which lists the last
/// draft's refusals.
fn refused(result: Result<Plan, Error>) -> String {
    match result {
        Err(Error::DraftsRefused { summary, drafts }) => {
            assert_eq!(drafts.len(), 1, "{drafts:?}");
            summary
        }
        other => panic!("expected DraftsRefused, got {other:?}"),
    }
}

#[tokio::test]
async fn a_good_draft_becomes_the_example_plan_with_its_provenance() {
    let fixture = Fixture::new();
    let server = endpoint(answer(&example_draft().to_string())).await;
    let plan = backend(&server, Duration::from_secs(10))
        .plan(fixture.request())
        .await
        .unwrap();
    let example = Plan::from_value(&read("examples/plans/supplier-onboarding.json")).unwrap();
    assert_eq!(plan.steps, example.steps);
    assert_eq!(plan.pivot_index, Some(4));
    assert_eq!(
        plan.mandate,
        mandate_doc(),
        "the mandate is the principal's, unchanged"
    );
    assert_eq!(plan.authored_by.model, REPORTED_MODEL);
    assert_eq!(plan.authored_by.agent, "planner-test");
    assert_eq!(plan.authored_by.rejected_alternatives.len(), 1);

    // The hash is over the messages that were actually sent.
    let requests = server.received();
    assert_eq!(requests.len(), 1);
    let body = &requests[0].body;
    assert_eq!(body["model"], json!(MODEL));
    assert_eq!(body["response_format"], json!({"type": "json_object"}));
    let sent = &body["messages"];
    assert_eq!(sent, &LlmBackend::messages(&fixture.request()));
    let hash = LlmBackend::prompt_sha256(sent).unwrap();
    assert_eq!(
        plan.authored_by.prompt_sha256.as_deref(),
        Some(hash.as_str())
    );
    assert_eq!(hash.len(), 64);
    // The prompt carries the goal and the catalog's declarations, compensations
    // included (to order the steps by; the plan copies them from the catalog).
    let user: Value = serde_json::from_str(sent[1]["content"].as_str().unwrap()).unwrap();
    assert_eq!(user["goal"], json!(fixture.goal.text));
    assert_eq!(
        user["catalog"]["vendor-registry"]["skills"]["vendor.create"]["compensation"]["skill"],
        json!("vendor.archive")
    );
    assert_eq!(
        user["maxSpend"],
        json!({"currency": "EUR", "amountMinor": 25000})
    );
}

#[tokio::test]
async fn a_draft_may_repeat_the_catalogs_class_and_compensation_exactly() {
    let fixture = Fixture::new();
    let mut draft = example_draft();
    let example = read("examples/plans/supplier-onboarding.json");
    draft["steps"][0]["class"] = example["steps"][0]["class"].clone();
    draft["steps"][0]["compensation"] = example["steps"][0]["compensation"].clone();
    plan_with(&fixture, &draft.to_string()).await.unwrap();
}

#[tokio::test]
async fn malformed_json_is_refused() {
    let fixture = Fixture::new();
    // One fence around the object reads as the object (here: a draft without steps).
    let why = refused(plan_with(&fixture, "```json\n{\"steps\": []}\n```").await);
    assert!(
        why.contains("DRAFT_SHAPE -: the draft has no steps"),
        "{why}"
    );
    let why = refused(plan_with(&fixture, "{\"steps\": [], \"steps\": []}").await);
    assert!(why.contains("DRAFT_NOT_JSON"), "{why}");
    let why =
        refused(plan_with(&fixture, &format!("Here is the plan:\n{}", example_draft())).await);
    assert!(why.contains("not one JSON object"), "{why}");
    let why =
        refused(plan_with(&fixture, &json!({"steps": [], "pivotIndex": 4}).to_string()).await);
    assert!(
        why.contains("DRAFT_SHAPE") && why.contains("unknown field `pivotIndex`"),
        "{why}"
    );
}

#[tokio::test]
async fn a_forged_compensation_is_refused() {
    let fixture = Fixture::new();
    let mut draft = example_draft();
    draft["steps"][1]["compensation"] =
        json!({"skill": "budget.release", "args": {"reservationId": "r_all"}});
    let why = refused(plan_with(&fixture, &draft.to_string()).await);
    assert!(
        why.contains("authors its own compensation for budget.reserve"),
        "{why}"
    );

    // A compensation for a step the catalog gives none is an authored undo too.
    let mut draft = example_draft();
    draft["steps"][4]["compensation"] =
        json!({"skill": "payments.refund", "args": {"captureId": "$response.body#/captureId"}});
    let why = refused(plan_with(&fixture, &draft.to_string()).await);
    assert!(why.contains("payments.capture"), "{why}");

    let mut draft = example_draft();
    draft["steps"][5]["class"] = json!("compensable");
    let why = refused(plan_with(&fixture, &draft.to_string()).await);
    assert!(why.contains("declares it retriable"), "{why}");
}

#[tokio::test]
async fn an_unknown_skill_is_refused() {
    let fixture = Fixture::new();
    let mut draft = example_draft();
    draft["steps"][5]["skill"] = json!("sms.send");
    let why = refused(plan_with(&fixture, &draft.to_string()).await);
    assert!(
        why.contains("UNKNOWN_SKILL s5") && why.contains("sms.send"),
        "{why}"
    );
}

#[tokio::test]
async fn a_draft_that_fails_validation_is_refused_with_its_violations() {
    let fixture = Fixture::new();
    let mut draft = example_draft();
    let steps = draft["steps"].as_array_mut().unwrap();
    steps.swap(1, 4); // the capture before the budget: past the pivot, a compensable step
    let why = refused(plan_with(&fixture, &draft.to_string()).await);
    assert!(
        why.contains("PIVOT_ORDERING") || why.contains("BAD_REFERENCE"),
        "{why}"
    );
}

#[tokio::test]
async fn endpoint_failures_and_timeouts_are_backend_errors() {
    let fixture = Fixture::new();
    let server = endpoint(Reply::Status(500, "overloaded".into())).await;
    match backend(&server, Duration::from_secs(10))
        .plan(fixture.request())
        .await
    {
        Err(Error::Backend(why)) => {
            assert!(why.contains("500") && why.contains("overloaded"), "{why}")
        }
        other => panic!("{other:?}"),
    }

    let late = Reply::After(
        Duration::from_secs(5),
        Box::new(answer(&example_draft().to_string())),
    );
    let server = endpoint(late).await;
    let started = std::time::Instant::now();
    match backend(&server, Duration::from_millis(300))
        .plan(fixture.request())
        .await
    {
        Err(Error::Backend(why)) => assert!(why.contains("did not answer within"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(4));

    // Without the key the server refuses (401): the key is sent as a bearer token.
    let server = endpoint(answer("{}")).await;
    let keyless = LlmBackend::new(LlmConfig {
        base_url: format!("{}/v1", server.url),
        ..LlmConfig::new("", MODEL)
    })
    .unwrap();
    assert!(matches!(
        keyless.plan(fixture.request()).await,
        Err(Error::Backend(_))
    ));
}

#[tokio::test]
async fn a_model_backed_planner_submits_the_draft_and_records_the_model() {
    let identity = planner_identity();
    let executor = FakeExecutor::start(Script::Complete, &identity).await;
    let server = endpoint(answer(&example_draft().to_string())).await;
    let planner = start_with(
        &executor.url,
        identity,
        None,
        "executor",
        Some(LlmConfig {
            api_key: Some(API_KEY.into()),
            max_repairs: 0,
            ..LlmConfig::new(format!("{}/v1", server.url), MODEL)
        }),
    )
    .await;
    let task = send(
        &planner.client,
        &format!("{SUPPLIER_GOAL}, max spend 250 EUR"),
        None,
    )
    .await;
    assert_eq!(
        task.status.state,
        TaskState::Completed,
        "{}",
        status_text(&task)
    );
    let plan = plan_artifact(&task).unwrap();
    assert_eq!(plan["authoredBy"]["model"], json!(REPORTED_MODEL));
    assert!(plan["authoredBy"]["promptSha256"].is_string());
    let received = executor.plans();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].1, vec![]);

    // A refused draft (no repairs allowed) refuses the goal and submits nothing.
    let server = endpoint(answer("not json")).await;
    let identity = planner_identity();
    let planner = start_with(
        &executor.url,
        identity,
        None,
        "executor",
        Some(LlmConfig {
            api_key: Some(API_KEY.into()),
            max_repairs: 0,
            ..LlmConfig::new(format!("{}/v1", server.url), MODEL)
        }),
    )
    .await;
    let task = send(&planner.client, SUPPLIER_GOAL, None).await;
    assert_eq!(task.status.state, TaskState::Rejected);
    assert!(
        status_text(&task).contains("not one JSON object"),
        "{}",
        status_text(&task)
    );
    assert!(plan_artifact(&task).is_none());
    assert_eq!(executor.plans().len(), 1);
}

#[test]
fn the_prompt_offers_only_what_the_mandate_allows() {
    let mut fixture = Fixture::new();
    fixture.ctx.mandate.scope.retain(|s| s.agent != "mailer");
    let messages = LlmBackend::messages(&fixture.request());
    let user: Value = serde_json::from_str(messages[1]["content"].as_str().unwrap()).unwrap();
    let catalog = &user["catalog"];
    assert!(catalog.get("mailer").is_none(), "{catalog}");
    assert!(
        catalog["payments"]["skills"]
            .get("payments.capture")
            .is_some()
    );
    // Compensations stay with the platform; the mandate does not list them as steps.
    assert!(catalog["budget"]["skills"].get("budget.release").is_none());
}
