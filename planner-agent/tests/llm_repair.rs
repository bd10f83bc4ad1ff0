//! The model-backed planner against a scripted OpenAI-compatible server (a real HTTP
//! server on 127.0.0.1:0 that records every request): a refused draft goes back to the
//! model with its refusals and stays in the plan's audit record; a model that never
//! writes a valid draft has the goal REJECTED with every draft; a server without JSON
//! mode is asked without it (once per process) and its fenced answer read; base URLs
//! with or without `/v1`; what the model is shown; a draft whose `after` members form a
//! cycle is refused DEPENDENCY_CYCLE and a parallel repair runs.

mod common;

use agent_host::InboundAuth;
use agent_host::sdk::TaskState;
use common::model::*;
use common::*;
use planner_agent::backend::PlanBackend;
use planner_agent::{Error, LlmBackend, LlmConfig};
use serde_json::{Value, json};

/// A planner in front of a fake executor that validates and completes, asking `model`.
async fn planner_asking(model: &ScriptedModel, max_repairs: u32) -> (FakeExecutor, RunningPlanner) {
    let identity = planner_identity();
    let executor = FakeExecutor::start(Script::Complete, &identity).await;
    let planner = start_with(
        &executor.url,
        identity,
        None,
        "executor",
        Some(llm_config(&model.url, max_repairs)),
    )
    .await;
    (executor, planner)
}

fn goal() -> String {
    format!("{SUPPLIER_GOAL}, max spend 250 EUR")
}

/// Sends the goal to a planner asking `model` (two drafts at most) and expects it
/// COMPLETED with the plan the executor received, signed, which validated there: that
/// plan.
async fn repaired_plan(model: &ScriptedModel) -> Value {
    let (executor, planner) = planner_asking(model, 2).await;
    let task = send(&planner.client, &goal(), None).await;
    assert_eq!(
        task.status.state,
        TaskState::Completed,
        "{}",
        status_text(&task)
    );
    let received = executor.plans();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].1, vec![]);
    let plan = plan_artifact(&task).unwrap();
    assert_eq!(received[0].0, plan);
    plan
}

#[tokio::test]
async fn a_draft_outside_the_catalog_is_sent_back_and_the_repaired_plan_runs() {
    let model = ScriptedModel::start(
        vec![
            Reply::draft(&draft_outside_the_catalog()),
            Reply::draft(&example_draft()),
        ],
        false,
    )
    .await;
    // The executor received the repaired plan, signed, and it validates.
    let plan = repaired_plan(&model).await;
    let skills: Vec<&str> = plan["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["skill"].as_str().unwrap())
        .collect();
    assert_eq!(skills[5], "email.send");

    // The refused draft and its refusal are in the audit record, before the model's note.
    let authored = &plan["authoredBy"];
    assert_eq!(authored["model"], json!(REPORTED_MODEL));
    let alternatives = authored["rejectedAlternatives"].as_array().unwrap();
    assert_eq!(alternatives.len(), 2, "{alternatives:#?}");
    assert_eq!(alternatives[0]["draft"], draft_outside_the_catalog());
    assert_eq!(codes(&alternatives[0]), ["UNKNOWN_SKILL"]);
    let refusal = &alternatives[0]["refusals"][0];
    assert_eq!(refusal["step"], json!("s5"));
    assert!(
        refusal["message"]
            .as_str()
            .unwrap()
            .contains("\"crm.contacts.add\""),
        "{refusal}"
    );
    assert_eq!(
        alternatives[1],
        json!("capture the fee first: irreversible before the checks")
    );

    // The second request is the conversation: the draft, then its refusals.
    let requests = model.received();
    assert_eq!(requests.len(), 2);
    let second = requests[1].body["messages"].as_array().unwrap();
    assert_eq!(second.len(), 4);
    assert_eq!(
        second[..2],
        requests[0].body["messages"].as_array().unwrap()[..]
    );
    assert_eq!(second[2]["role"], json!("assistant"));
    assert_eq!(
        second[2]["content"],
        json!(draft_outside_the_catalog().to_string())
    );
    assert_eq!(second[3]["role"], json!("user"));
    let repair = second[3]["content"].as_str().unwrap();
    assert!(repair.contains("- UNKNOWN_SKILL s5: "), "{repair}");
    // The recorded hash is the prompt that produced the plan: the whole conversation.
    assert_eq!(
        authored["promptSha256"],
        json!(LlmBackend::prompt_sha256(&requests[1].body["messages"]).unwrap())
    );
    for request in &requests {
        assert_eq!(request.path, "/v1/chat/completions");
        assert_eq!(
            request.authorization.as_deref(),
            Some(format!("Bearer {API_KEY}").as_str())
        );
    }
}

/// `example_draft` with these `after` members, by step index.
fn draft_with_after(after: &[(usize, Value)]) -> Value {
    let mut draft = example_draft();
    for (i, waits) in after {
        draft["steps"][*i]["after"] = waits.clone();
    }
    draft
}

/// Parallel branches in a draft: the model is told what `after` means; a draft whose
/// steps wait for each other is sent back with DEPENDENCY_CYCLE among its refusals, and
/// the repair, budget and sandbox side by side after the vendor, is the plan that runs.
#[tokio::test]
async fn a_draft_whose_steps_wait_for_each_other_is_refused_and_the_parallel_repair_runs() {
    // s1 and s2 each wait for the other (and for s0, whose vendorId they read).
    let cycle = draft_with_after(&[(1, json!(["s0", "s2"])), (2, json!(["s0", "s1"]))]);
    let parallel = draft_with_after(&[
        (1, json!(["s0"])),
        (2, json!(["s0"])),
        (3, json!(["s1", "s2"])),
    ]);
    let model =
        ScriptedModel::start(vec![Reply::draft(&cycle), Reply::draft(&parallel)], false).await;
    let plan = repaired_plan(&model).await;

    // The system message says what `after` is.
    let requests = model.received();
    assert_eq!(requests.len(), 2);
    let system = requests[0].body["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains("\"after\"") && system.contains("[] waits for nothing"),
        "{system}"
    );

    // The cycle went back to the model with its refusal.
    let repair = requests[1].body["messages"][3]["content"].as_str().unwrap();
    assert!(repair.contains("- DEPENDENCY_CYCLE s1: "), "{repair}");

    // The plan the executor received is the parallel one.
    let after: Vec<&Value> = plan["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| &s["after"])
        .collect();
    assert_eq!(
        after,
        [
            &Value::Null,
            &json!(["s0"]),
            &json!(["s0"]),
            &json!(["s1", "s2"]),
            &Value::Null,
            &Value::Null
        ]
    );

    // The refused draft is in the audit record with DEPENDENCY_CYCLE.
    let alternatives = plan["authoredBy"]["rejectedAlternatives"]
        .as_array()
        .unwrap();
    assert_eq!(alternatives[0]["draft"], cycle);
    assert!(
        codes(&alternatives[0]).contains(&"DEPENDENCY_CYCLE".to_owned()),
        "{:?}",
        codes(&alternatives[0])
    );
}

#[tokio::test]
async fn a_model_that_never_drafts_a_valid_plan_has_the_goal_rejected_with_every_draft() {
    let mut out_of_order = example_draft();
    out_of_order["steps"].as_array_mut().unwrap().swap(1, 4);
    let model = ScriptedModel::start(
        vec![
            Reply::Content("I would onboard them step by step.".into()),
            Reply::draft(&draft_outside_the_catalog()),
            Reply::draft(&out_of_order),
        ],
        false,
    )
    .await;
    let (executor, planner) = planner_asking(&model, 2).await;
    let task = send(&planner.client, &goal(), None).await;
    assert_eq!(
        task.status.state,
        TaskState::Rejected,
        "{}",
        status_text(&task)
    );
    let text = status_text(&task);
    assert!(
        text.contains("wrote 3 draft(s)") && text.contains("(2 repair(s) allowed"),
        "{text}"
    );
    assert!(text.contains("PIVOT_ORDERING s"), "{text}");
    assert!(!text.contains(API_KEY));

    let data = status_data(&task).unwrap();
    let drafts = data["rejectedAlternatives"].as_array().unwrap();
    assert_eq!(drafts.len(), 3, "{data:#}");
    assert_eq!(
        drafts[0]["draft"],
        json!("I would onboard them step by step.")
    );
    assert_eq!(codes(&drafts[0]), ["DRAFT_NOT_JSON"]);
    assert_eq!(drafts[1]["draft"], draft_outside_the_catalog());
    assert_eq!(codes(&drafts[1]), ["UNKNOWN_SKILL"]);
    assert_eq!(drafts[2]["draft"], out_of_order);
    assert!(codes(&drafts[2]).contains(&"PIVOT_ORDERING".to_owned()));

    assert_eq!(model.received().len(), 3, "1 + N drafts, no more");
    assert!(executor.plans().is_empty(), "nothing was submitted");
    assert!(plan_artifact(&task).is_none());

    // With no repairs, the first refusal ends it.
    let model = ScriptedModel::start(vec![Reply::draft(&draft_outside_the_catalog())], false).await;
    let (_executor, planner) = planner_asking(&model, 0).await;
    let task = send(&planner.client, &goal(), None).await;
    assert_eq!(task.status.state, TaskState::Rejected);
    assert_eq!(
        status_data(&task).unwrap()["rejectedAlternatives"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(model.received().len(), 1);
}

#[tokio::test]
async fn a_server_without_json_mode_is_asked_without_it_once_it_says_so() {
    let fenced = format!("```json\n{:#}\n```", example_draft());
    let model = ScriptedModel::start(vec![Reply::Content(fenced)], true).await;
    let backend = LlmBackend::new(llm_config(&model.url, 0)).unwrap();
    let fixture = Fixture::new();
    let plan = backend.plan(fixture.request()).await.unwrap();
    assert_eq!(plan.steps.len(), 6);
    assert!(!backend.json_mode());
    // The next goal goes without JSON mode at once: one request, not two.
    backend.plan(fixture.request()).await.unwrap();
    let modes: Vec<bool> = model.received().iter().map(Received::json_mode).collect();
    assert_eq!(modes, [true, false, false]);
    // The same messages were asked again, without response_format only.
    let requests = model.received();
    assert_eq!(requests[0].body["messages"], requests[1].body["messages"]);

    // Text around the JSON is refused, recorded as the text it was, and repaired.
    let chatty = format!(
        "Sure! Here is the plan:\n```json\n{}\n```\nLet me know if you need anything else.",
        example_draft()
    );
    let model = ScriptedModel::start(
        vec![
            Reply::Content(chatty.clone()),
            Reply::Content(format!("```\n{}\n```", example_draft())),
        ],
        true,
    )
    .await;
    let backend = LlmBackend::new(llm_config(&model.url, 1)).unwrap();
    let plan = backend.plan(fixture.request()).await.unwrap();
    let refused = &plan.authored_by.rejected_alternatives[0];
    assert_eq!(refused["draft"], json!(chatty));
    assert_eq!(codes(refused), ["DRAFT_NOT_JSON"]);
    assert!(
        refused["refusals"][0]["message"]
            .as_str()
            .unwrap()
            .contains("no text before or after it"),
        "{refused}"
    );
    let requests = model.received();
    assert_eq!(
        requests.len(),
        3,
        "JSON mode refused, the chatty draft, the repair"
    );
    assert!(requests[2].prompt().contains("- DRAFT_NOT_JSON -: "));

    // A 400 about something else is the server's failure, not a missing JSON mode.
    let model = ScriptedModel::start(
        vec![Reply::Status(
            400,
            r#"{"error": {"message": "context length exceeded"}}"#.into(),
        )],
        false,
    )
    .await;
    let backend = LlmBackend::new(llm_config(&model.url, 2)).unwrap();
    match backend.plan(fixture.request()).await {
        Err(Error::Backend(why)) => assert!(
            why.contains("400") && why.contains("context length"),
            "{why}"
        ),
        other => panic!("{other:?}"),
    }
    assert!(backend.json_mode());
    assert_eq!(model.received().len(), 1);
}

#[tokio::test]
async fn a_base_url_with_or_without_v1_reaches_chat_completions() {
    let model = ScriptedModel::start(vec![Reply::draft(&example_draft())], false).await;
    let fixture = Fixture::new();
    for base in [
        model.url.clone(),
        format!("{}/", model.url),
        format!("{}/v1", model.url),
        format!("{}/v1/", model.url),
        format!("{}/v1/chat/completions", model.url),
    ] {
        let backend = LlmBackend::new(llm_config(&base, 0)).unwrap();
        assert_eq!(backend.url(), format!("{}/v1/chat/completions", model.url));
        backend
            .plan(fixture.request())
            .await
            .unwrap_or_else(|e| panic!("{base}: {e}"));
    }
    let paths: Vec<String> = model.received().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, vec!["/v1/chat/completions"; 5]);

    for bad in ["127.0.0.1:11434/v1", "http://key:sk-x@127.0.0.1/v1"] {
        assert!(
            matches!(
                LlmBackend::new(LlmConfig::new(bad, "m")),
                Err(Error::Config(_))
            ),
            "{bad}"
        );
    }
    // At most MAX_REPAIRS_LIMIT repairs.
    let too_many = LlmConfig {
        max_repairs: planner_agent::llm::MAX_REPAIRS_LIMIT + 1,
        ..LlmConfig::new(&model.url, "m")
    };
    assert!(matches!(LlmBackend::new(too_many), Err(Error::Config(_))));
}

#[tokio::test]
async fn the_model_sees_only_the_skills_the_mandate_grants_and_no_secret() {
    // A mandate without the mailer agent and without compliance.review.
    let mut mandate = mandate_doc();
    mandate.scope.retain(|s| s.agent != "mailer");
    for scope in &mut mandate.scope {
        scope.skills.retain(|k| k != "compliance.review");
    }
    let mut draft = example_draft();
    draft["steps"].as_array_mut().unwrap().truncate(5);
    let model = ScriptedModel::start(vec![Reply::draft(&draft)], false).await;
    let identity = planner_identity();
    let private_key = identity.private_jwk().d.unwrap();
    let executor = FakeExecutor::start(Script::Complete, &identity).await;
    let planner = start_under(
        &executor.url,
        identity,
        None,
        "executor",
        Some(llm_config(&model.url, 0)),
        InboundAuth::Open,
        Some(signed_mandate(&mandate)),
    )
    .await;
    let task = send(&planner.client, &goal(), None).await;
    assert_eq!(
        task.status.state,
        TaskState::Completed,
        "{}",
        status_text(&task)
    );

    let requests = model.received();
    assert_eq!(requests.len(), 1);
    let prompt = requests[0].prompt();
    let user: Value =
        serde_json::from_str(requests[0].body["messages"][1]["content"].as_str().unwrap()).unwrap();
    let shown: Vec<String> = user["catalog"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(agent, a)| {
            a["skills"]
                .as_object()
                .unwrap()
                .keys()
                .map(move |s| format!("{agent}/{s}"))
        })
        .collect();
    assert_eq!(
        shown,
        [
            "budget/budget.reserve",
            "compliance-registry/compliance.check",
            "payments/payments.capture",
            "sandbox/sandbox.provision",
            "vendor-registry/vendor.create",
        ]
    );
    for absent in ["mailer", "email.send", "compliance.review"] {
        assert!(!prompt.contains(absent), "{absent} shown:\n{prompt}");
    }
    // Declarations are shown: classes, compensations, schemas.
    let create = &user["catalog"]["vendor-registry"]["skills"]["vendor.create"];
    assert_eq!(create["class"], json!("compensable"));
    assert_eq!(create["compensation"]["skill"], json!("vendor.archive"));
    assert!(create["inputSchema"]["properties"]["legalName"].is_object());
    // No secret: not the API key, not the planner's private key, not the mandate's
    // signature or anything else of the signed documents.
    for secret in [API_KEY, private_key.as_str(), "signatures", "protected"] {
        assert!(!prompt.contains(secret), "{secret} in the prompt");
    }
    assert!(!requests[0].body.to_string().contains(API_KEY));
}

#[tokio::test]
async fn the_deterministic_planner_says_how_to_turn_the_model_on() {
    let identity = planner_identity();
    let executor = FakeExecutor::start(Script::Complete, &identity).await;
    let planner = start_planner(&executor.url, identity, None, "executor").await;
    let task = send(
        &planner.client,
        "Add contact Jane Roe jane@example.com and tell sales",
        None,
    )
    .await;
    assert_eq!(task.status.state, TaskState::Rejected);
    let text = status_text(&task);
    assert!(text.contains("no goal template matches"), "{text}");
    assert!(
        text.contains("--llm-url URL --llm-model NAME") && text.contains("to plan any goal"),
        "{text}"
    );
}
