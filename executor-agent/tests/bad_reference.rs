//! Issue 19, finding 5: a misspelt pointer into an earlier step's result is refused when
//! the plan arrives (`BAD_REFERENCE`), not found unresolved after the payment is captured;
//! a curated card whose bound-from skills declare no `outputSchema` is accepted with a
//! warning in the registration's answer.

mod common;

use std::sync::Arc;

use agent_host::InboundAuth;
use agent_host::sdk::TaskState;
use common::*;
use executor_agent::registry::Registry;
use serde_json::{Value, json};
use shared_types::{SigningIdentity, TrustStore};

fn calls_seen(setup: &Harness) -> usize {
    setup
        .logs
        .values()
        .map(|l| l.lock().unwrap().calls.len())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misspelt_pointer_after_the_pivot_is_rejected_before_any_call() {
    let setup = Harness::start(&[]).await;
    // s5 (email.send) runs after s4 (payments.capture, the pivot) and reads s2's login.
    let mut plan = read("examples/plans/supplier-onboarding.json");
    assert_eq!(
        plan["steps"][5]["args"]["login"],
        "$steps.s2.response.body#/login"
    );
    plan["steps"][5]["args"]["login"] = json!("$steps.s2.response.body#/logn");
    common::sign_plan(&setup.planner, &mut plan);

    let task = setup.send(plan, None).await;
    assert_eq!(task.status.state, TaskState::Rejected, "{:?}", task.status);
    let text = format!("{:?}", task.status.message);
    for needle in ["BAD_REFERENCE", "s5", "logn", "login", "tenantId"] {
        assert!(text.contains(needle), "{needle} in {text}");
    }
    assert_eq!(calls_seen(&setup), 0, "no tool agent saw any call");

    // The same plan spelt right runs to the end.
    let task = setup
        .send(
            setup.signed("examples/plans/supplier-onboarding.json"),
            None,
        )
        .await;
    assert_eq!(task.status.state, TaskState::Completed, "{:?}", task.status);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_card_without_an_output_schema_is_registered_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let platform = SigningIdentity::from_seed([51; 32], Some("platform".into()));
    let mut keys = TrustStore::new();
    keys.add_jwk(&platform.public_jwk()).unwrap();
    let registry = Registry::open(&dir.path().join("registry.db"), keys).unwrap();
    let admin = InboundAuth::StaticBearer {
        name: "admin".into(),
        token: "admin-secret".into(),
    };
    let state = executor_agent::http::Admin {
        registry,
        mcp: Arc::default(),
        hosts: Default::default(),
    };
    let routes = executor_agent::http::routes(state, admin.clone(), admin);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, routes).await });
    let register = |card: Value| {
        let url = url.clone();
        async move {
            let response = reqwest::Client::new()
                .post(format!("{url}/admin/cards"))
                .bearer_auth("admin-secret")
                .json(&card)
                .send()
                .await
                .unwrap();
            (
                response.status().as_u16(),
                response.json::<Value>().await.unwrap(),
            )
        }
    };

    let mut card = read("agent-cards/sandbox.json");
    platform.sign_in_place(&mut card).unwrap();
    let (status, body) = register(card).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(
        body["warnings"],
        json!([]),
        "the demo card declares its results"
    );

    let mut card = read("agent-cards/sandbox.json");
    let skills = &mut card["capabilities"]["extensions"][0]["params"]["skills"];
    for skill in ["sandbox.provision", "sandbox.deprovision"] {
        skills[skill]
            .as_object_mut()
            .unwrap()
            .remove("outputSchema");
    }
    platform.sign_in_place(&mut card).unwrap();
    let (status, body) = register(card).await;
    assert_eq!(status, 201, "accepted: {body}");
    let warnings = body["warnings"].as_array().unwrap();
    // sandbox.deprovision is only sandbox.provision's undo: nothing binds from it.
    assert_eq!(warnings.len(), 1, "{body}");
    assert!(
        warnings[0]
            .as_str()
            .unwrap()
            .starts_with("sandbox.provision declares no outputSchema"),
        "{body}"
    );
}
