//! The published contract against the code: the executor serves the schemas it was built
//! with, and the call it really sends a tool (body and headers, captured by a server on
//! loopback) validates against `spec/schemas/tool-call.schema.json`, as does the answer
//! that settles it against `tool-answer.schema.json`. Tool answers marked transient or
//! permanent are read as such.

mod common;

use std::sync::{Arc, Mutex};

use agent_host::AgentClient;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use common::served::*;
use executor_agent::invoke::{A2aInvoker, CallContext, Endpoint, Invoker};
use executor_agent::saga::spec::CallSpec;
use executor_agent::saga::{CallOutcome, FailureClass, Invocation, Target};
use serde_json::{Value, json};
use shared_types::reversibility::RetryPolicy;

fn workspace() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A validator of the published schema `name`, every schema registered by its `$id`.
fn validator(name: &str) -> jsonschema::Validator {
    let dir = workspace().join("spec/schemas");
    let read = |file: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(dir.join(file)).unwrap()).unwrap()
    };
    let resources = executor_agent::spec_routes::SCHEMAS
        .iter()
        .map(|(file, _)| {
            let schema = read(file);
            (schema["$id"].as_str().unwrap().to_owned(), schema)
        });
    let registry = jsonschema::Registry::new()
        .draft(jsonschema::Draft::Draft202012)
        .extend(resources)
        .and_then(|builder| builder.prepare())
        .unwrap();
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .with_registry(&registry)
        .offline()
        .build(&read(name))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_executor_serves_the_schemas_it_was_built_with_without_a_credential() {
    let served = serve().await;
    let http = reqwest::Client::new();
    let list: Value = http
        .get(format!("{}/spec/v1/schemas", served.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let listed = list["schemas"].as_array().unwrap();
    assert_eq!(listed.len(), 7, "{list}");
    for path in listed {
        let path = path.as_str().unwrap();
        let response = http
            .get(format!("{}{path}", served.url))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{path}");
        assert_eq!(
            response.headers()["content-type"],
            "application/schema+json"
        );
        let file = path.rsplit('/').next().unwrap();
        let on_disk = std::fs::read_to_string(workspace().join("spec/schemas").join(file)).unwrap();
        assert_eq!(response.text().await.unwrap(), on_disk, "{file}");
    }
    let missing = http
        .get(format!(
            "{}/spec/v1/schemas/..%2F..%2FCargo.toml",
            served.url
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
}

/// What the fake tool saw of each call: its headers and its body.
type Seen = Arc<Mutex<Vec<(HeaderMap, Value)>>>;

/// A tool that records each request and answers `answer` (a JSON-RPC `result`).
async fn recording_tool(answer: Value) -> (String, Seen) {
    let seen: Seen = Arc::default();
    async fn handle(
        State((seen, answer)): State<(Seen, Value)>,
        headers: HeaderMap,
        body: Bytes,
    ) -> axum::response::Response {
        let body: Value = serde_json::from_slice(&body).unwrap();
        let id = body["id"].clone();
        seen.lock().unwrap().push((headers, body));
        axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": answer})).into_response()
    }
    let app = Router::new()
        .fallback(handle)
        .with_state((seen.clone(), answer));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

fn task(state: &str, extra: Value) -> Value {
    let mut task = json!({"task": {"id": "t_1", "contextId": "c_1", "status": {"state": state}}});
    if let (Value::Object(task), Value::Object(extra)) = (&mut task["task"], extra) {
        task.extend(extra);
    }
    task
}

async fn call_once(answer: Value, target: Target) -> (CallOutcome, HeaderMap, Value) {
    let (url, seen) = recording_tool(answer).await;
    let mut invoker = A2aInvoker::new();
    invoker.add(
        "contacts",
        Endpoint {
            client: AgentClient::new(&url).unwrap(),
            bearer: Some("tool-credential".into()),
        },
    );
    let key = match target {
        Target::Forward(_) => "sg_1:s0",
        Target::Compensation(_) => "sg_1:s0:undo",
        Target::Verification(_) => "sg_1:s0:verify:1",
    };
    let invocation = Invocation {
        target,
        attempt: 1,
        call: CallSpec {
            agent: "contacts".into(),
            skill: "contacts.add".into(),
            idempotent: true,
            timeout_ms: 5_000,
            retry: RetryPolicy::default(),
        },
        args: json!({"name": "Jane Roe", "email": "jane@example.com"}),
        idempotency_key: key.into(),
    };
    let context = CallContext {
        saga_id: "sg_1".into(),
        step_id: "s0".into(),
        caused_by: matches!(target, Target::Compensation(_)).then(|| "s1".into()),
        trace_id: executor_agent::invoke::trace_id("sg_1"),
        span_id: None,
        class: Some(shared_types::ReversibilityClass::Retriable),
    };
    let outcome = invoker.invoke(&invocation, &context).await;
    let (headers, body) = seen.lock().unwrap().pop().expect("the tool was called");
    (outcome, headers, body)
}

#[tokio::test]
async fn the_call_the_executor_sends_and_the_answers_that_settle_it_follow_the_schemas() {
    let calls = validator("tool-call.schema.json");
    let answers = validator("tool-answer.schema.json");
    let completed = task(
        "TASK_STATE_COMPLETED",
        json!({"artifacts": [{"artifactId": "result", "parts": [{"data": {"contactId": "c_1"}}]}]}),
    );
    assert!(answers.is_valid(&completed), "{completed}");
    for target in [Target::Forward(0), Target::Compensation(0)] {
        let (outcome, headers, body) = call_once(completed.clone(), target).await;
        assert_eq!(
            outcome,
            CallOutcome::Succeeded {
                response: json!({"contactId": "c_1"})
            }
        );
        let errors: Vec<String> = calls
            .iter_errors(&body["params"])
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{errors:#?}\n{body:#}");
        assert_eq!(body["method"], "SendMessage");
        let header = |name: &str| headers[name].to_str().unwrap().to_owned();
        assert_eq!(header("authorization"), "Bearer tool-credential");
        assert_eq!(
            header("idempotency-key"),
            body["params"]["message"]["metadata"]["urn:sagaplane:ext:reversibility:v1"]["idempotencyKey"]
        );
        assert_eq!(header("a2a-version"), "1.0");
        assert_eq!(
            header("a2a-extensions"),
            "urn:sagaplane:ext:reversibility:v1"
        );
        assert!(header("traceparent").starts_with("00-"));
        assert!(header("baggage").contains("sagaplane.saga=sg_1"));
    }

    // A failure marked transient or permanent is read as marked; unmarked, a retriable
    // skill's forward call is transient, a compensation's is unstated.
    let marked = |class: &str| {
        task(
            "TASK_STATE_FAILED",
            json!({"status": {"state": "TASK_STATE_FAILED", "message": {
                "messageId": "m_1", "role": "ROLE_AGENT", "parts": [{"text": "busy"}],
                "metadata": {"urn:sagaplane:ext:reversibility:v1": {"failure": class}}}}}),
        )
    };
    for (answer, target, expected) in [
        (
            marked("transient"),
            Target::Forward(0),
            Some(FailureClass::Transient),
        ),
        (
            marked("permanent"),
            Target::Forward(0),
            Some(FailureClass::Permanent),
        ),
        (
            task("TASK_STATE_FAILED", json!({})),
            Target::Forward(0),
            Some(FailureClass::Transient),
        ),
        (
            task("TASK_STATE_FAILED", json!({})),
            Target::Compensation(0),
            None,
        ),
        (
            task("TASK_STATE_REJECTED", json!({})),
            Target::Forward(0),
            Some(FailureClass::Permanent),
        ),
    ] {
        assert!(answers.is_valid(&answer), "{answer}");
        let (outcome, ..) = call_once(answer.clone(), target).await;
        let CallOutcome::Failed { failure, .. } = outcome else {
            panic!("{answer}: {outcome:?}")
        };
        assert_eq!(failure, expected, "{answer}");
    }
}
