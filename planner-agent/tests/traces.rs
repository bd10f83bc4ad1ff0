//! The planner's span over OTLP/HTTP: a planner given `otlp_endpoint`
//! (`--otlp-endpoint`) sends the making of each plan as one span in the saga's trace,
//! under the saga's own span, whose ids every agent derives from the saga id.

mod common;

use agent_host::telemetry::{saga_span_id, saga_trace_id};
use common::*;
use planner_agent::service::Settings;
use serde_json::Value;
use test_kit::otlp::{attribute, receiver, spans};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plans_making_is_a_span_under_its_sagas_in_the_sagas_trace() {
    let (collector, received) = receiver().await;
    let identity = planner_identity();
    let executor = FakeExecutor::start(Script::Complete, &identity).await;
    let planner = start_configured(|url| Settings {
        data_dir: None,
        identity: identity.clone(),
        executor_urls: vec![executor.url.clone()],
        executor_id: "executor".into(),
        public_url: url.to_owned(),
        auth: agent_host::InboundAuth::Open,
        mandate: Some(test_mandate()),
        llm: None,
        templates: planner_agent::Templates::builtin(),
        executor_retry: planner_agent::DEFAULT_EXECUTOR_RETRY,
        gather_progress: planner_agent::GATHER_PROGRESS,
        max_replans: planner_agent::replan::DEFAULT_MAX_REPLANS,
        otlp_endpoint: Some(collector.clone()),
    })
    .await;
    stream(&planner.client, SUPPLIER_GOAL, None).await;
    let plans = executor.plans();
    let saga_id = plans[0].0["sagaId"].as_str().unwrap().to_owned();
    let traces = planner.traces.clone().expect("traces are on");
    tokio::task::spawn_blocking(move || traces.flush())
        .await
        .unwrap();

    let spans = spans(&received);
    assert_eq!(spans.len(), 1, "{spans:#?}");
    let span: &Value = &spans[0];
    assert_eq!(span["name"], "invoke_agent planner-test");
    assert_eq!(span["traceId"], saga_trace_id(&saga_id).as_str());
    assert_eq!(
        span["parentSpanId"],
        saga_span_id(&saga_id).to_string().as_str()
    );
    assert_eq!(attribute(span, "gen_ai.operation.name"), "invoke_agent");
    assert_eq!(attribute(span, "gen_ai.agent.name"), "planner-test");
    assert_eq!(attribute(span, "sagaplane.saga.id"), saga_id);
    assert_eq!(attribute(span, "sagaplane.plan.steps"), "6");
    assert!(
        !attribute(span, "gen_ai.request.model").is_empty(),
        "{span:#}"
    );
}
