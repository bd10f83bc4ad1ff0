//! The executor as it is served (`service::build`): its A2A endpoint takes only planner
//! JWTs for this executor, and a plan that is not exactly what a trusted planner signed
//! against the curated registry is refused before any tool is called.

mod common;

use agent_host::mint_jwt;
use agent_host::sdk::TaskState;
use common::served::*;
use serde_json::Value;
use shared_types::SigningIdentity;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_planner_jwt_for_this_executor_may_submit_a_plan() {
    let served = serve().await;
    let plan = signed_by(&served.planner, "examples/plans/supplier-onboarding.json");

    let card = reqwest::get(format!("{}/.well-known/agent-card.json", served.url))
        .await
        .unwrap();
    assert_eq!(card.status(), 200, "the card is public");
    let card: Value = card.json().await.unwrap();
    assert_eq!(card["skills"][0]["id"], "execute-plan");
    assert_eq!(
        card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["bearerFormat"],
        "JWT"
    );

    let none = refusal(send(&served, None, plan.clone()).await);
    assert!(
        none.contains("requires Authorization"),
        "no credential: {none}"
    );
    let admin = refusal(send(&served, Some(ADMIN_TOKEN.into()), plan.clone()).await);
    assert!(admin.contains("not a JWT"), "the admin token: {admin}");
    let elsewhere = refusal(send(&served, planner_jwt(&served, "other"), plan.clone()).await);
    assert!(
        elsewhere.contains("refused"),
        "another audience: {elsewhere}"
    );
    let stranger = SigningIdentity::from_seed([43; 32], Some("planner-1".into()));
    let forged = Some(mint_jwt(&stranger, "planner-1", "executor", 60).unwrap());
    let forged = refusal(send(&served, forged, plan.clone()).await);
    assert!(
        forged.contains("refused"),
        "a JWT not signed by the planner: {forged}"
    );
    assert_eq!(calls_seen(&served), 0, "no tool was called");

    let jwt = planner_jwt(&served, "executor");
    let task = send(&served, jwt.clone(), plan.clone()).await.unwrap();
    assert_eq!(task.status.state, TaskState::Completed, "{:?}", task.status);
    let replayed = refusal(send(&served, jwt, plan).await);
    assert!(
        replayed.contains("already used"),
        "a replayed JWT: {replayed}"
    );
    assert_eq!(calls_seen(&served), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_not_signed_by_a_trusted_planner_or_unlike_the_registry_runs_nothing() {
    let served = serve().await;
    let stranger = SigningIdentity::from_seed([44; 32], Some("stranger".into()));
    let cases = [
        (
            signed_by(&stranger, "examples/plans/supplier-onboarding.json"),
            "SIGNER_UNTRUSTED",
        ),
        (
            signed_by(
                &served.planner,
                "examples/plans/invalid/compensation-not-declared.json",
            ),
            "COMPENSATION_NOT_DECLARED",
        ),
        (
            tampered(signed_by(
                &served.planner,
                "examples/plans/supplier-onboarding.json",
            )),
            "SIGNATURE_INVALID",
        ),
    ];
    for (plan, code) in cases {
        let task = send(&served, planner_jwt(&served, "executor"), plan)
            .await
            .unwrap();
        assert_eq!(task.status.state, TaskState::Rejected, "{code}");
        let message = format!("{:?}", task.status.message);
        assert!(message.contains(code), "{code} in {message}");
    }
    assert_eq!(calls_seen(&served), 0, "no tool was called");
}

/// A signed plan whose mandate was raised after signing.
fn tampered(mut plan: Value) -> Value {
    plan["mandate"]["perSaga"]["amountMinor"] = serde_json::json!(999_999);
    plan
}
