//! Saga traces over OTLP/HTTP: an executor given `otlp_endpoint` (`--otlp-endpoint`)
//! sends a compensated saga as one trace to a collector (here a receiver in the test):
//! the saga's span at the root, a child per forward call and per compensation, each with
//! its attributes, and each tool saw its call's span as the parent in `traceparent`.

mod common;

use agent_host::sdk::TaskState;
use common::Fault;
use common::served::*;
use serde_json::Value;
use test_kit::otlp::{attribute, receiver, spans};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compensated_saga_is_one_trace_with_a_span_per_call_under_the_sagas() {
    let (collector, bodies) = receiver().await;
    let served = serve_configured(
        executor_agent::http::RegistrationHosts::any(),
        &[("payments.capture", Fault::Decline)],
        |settings| settings.otlp_endpoint = Some(collector.clone()),
    )
    .await;
    let plan = supplier_plan(&served, "sg_traced");
    let task = send(&served, planner_jwt(&served, "executor"), plan)
        .await
        .unwrap();
    assert_eq!(task.status.state, TaskState::Failed, "{:?}", task.status);
    let traces = served.traces.clone().expect("traces are on");
    // Sends what the batch holds, and returns once it is sent.
    tokio::task::spawn_blocking(move || traces.flush())
        .await
        .unwrap();

    let spans = spans(&bodies);
    let trace = executor_agent::invoke::trace_id("sg_traced");
    assert!(
        spans.iter().all(|s| s["traceId"] == trace.as_str()),
        "{spans:#?}"
    );
    let roots: Vec<&Value> = spans
        .iter()
        .filter(|s| s["parentSpanId"].as_str().unwrap_or_default().is_empty())
        .collect();
    assert_eq!(roots.len(), 1, "{spans:#?}");
    let root = roots[0];
    assert_eq!(root["name"], "invoke_workflow sg_traced");
    assert_eq!(attribute(root, "gen_ai.operation.name"), "invoke_workflow");
    assert_eq!(attribute(root, "sagaplane.saga.id"), "sg_traced");
    assert_eq!(attribute(root, "sagaplane.ending"), "compensated");

    let mut calls: Vec<&Value> = spans.iter().filter(|s| *s != root).collect();
    calls.sort_by_key(|s| {
        s["startTimeUnixNano"]
            .as_str()
            .unwrap_or("0")
            .parse::<u128>()
            .unwrap_or(0)
    });
    assert!(
        calls.iter().all(|s| s["parentSpanId"] == root["spanId"]),
        "every call is a child of the saga's span: {calls:#?}"
    );
    let shown: Vec<(String, String, String, String)> = calls
        .iter()
        .map(|s| {
            (
                attribute(s, "sagaplane.call"),
                attribute(s, "sagaplane.step.id"),
                attribute(s, "gen_ai.tool.name"),
                attribute(s, "sagaplane.outcome"),
            )
        })
        .collect();
    let row = |call: &str, step: &str, tool: &str, outcome: &str| {
        (
            call.to_owned(),
            step.to_owned(),
            tool.to_owned(),
            outcome.to_owned(),
        )
    };
    assert_eq!(
        shown,
        vec![
            row("forward", "s0", "vendor.create", "succeeded"),
            row("forward", "s1", "budget.reserve", "succeeded"),
            row("forward", "s2", "sandbox.provision", "succeeded"),
            row("forward", "s3", "compliance.check", "succeeded"),
            row("forward", "s4", "payments.capture", "failed"),
            row("compensation", "s2", "sandbox.deprovision", "succeeded"),
            row("compensation", "s1", "budget.release", "succeeded"),
            row("compensation", "s0", "vendor.archive", "succeeded"),
        ],
        "{calls:#?}"
    );
    for span in &calls {
        assert_eq!(attribute(span, "gen_ai.operation.name"), "execute_tool");
        assert_eq!(attribute(span, "sagaplane.saga.id"), "sg_traced");
        assert_eq!(attribute(span, "sagaplane.attempt"), "1");
        let step = attribute(span, "sagaplane.step.id");
        let key = attribute(span, "sagaplane.idempotency_key");
        if attribute(span, "sagaplane.call") == "compensation" {
            assert_eq!(key, format!("sg_traced:{step}:undo"));
            assert_eq!(attribute(span, "sagaplane.compensation_of"), step);
        } else {
            assert_eq!(key, format!("sg_traced:{step}"));
        }
        assert!(!attribute(span, "sagaplane.class").is_empty(), "{span:#}");
    }
    assert_eq!(
        calls[4]["status"]["code"], 2,
        "the declined capture is an error"
    );

    // Each tool saw its call's span as the parent of the trace context it was sent.
    let seen: Vec<String> = served
        .logs
        .values()
        .flat_map(|log| log.lock().unwrap().traceparents.clone())
        .collect();
    assert_eq!(seen.len(), calls.len(), "{seen:?}");
    for span in &calls {
        let expected = format!("00-{trace}-{}-01", span["spanId"].as_str().unwrap());
        assert!(seen.contains(&expected), "no tool saw {expected}: {seen:?}");
    }
}
