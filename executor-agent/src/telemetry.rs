//! Traces of sagas over OTLP/HTTP (`--otlp-endpoint`; off unless given): one
//! `invoke_workflow` span per saga, and an `execute_tool` child per forward call and per
//! compensation, in the saga's W3C trace (`invoke::trace_id`). The call's span id is the
//! parent id of the `traceparent` sent to the tool, so the tool's own spans join the
//! saga's trace under the call that caused them.
//!
//! The saga's span id is derived from its id, like its trace id: a saga resumed by a
//! restart or another replica keeps its parent, and its span is sent once, by whoever
//! ends it, starting from its first call. Names and attributes follow the OpenTelemetry
//! GenAI conventions where they fit (`gen_ai.operation.name`, `gen_ai.tool.name`), and
//! `sagaplane.*` for the rest. Nothing is sent before a saga's call or end, and nothing
//! here runs at all when traces are off: the invoker and reporter are not wrapped.

use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
    Tracer, TracerProvider,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SdkTracer, SdkTracerProvider};

use crate::driver::Reporter;
use crate::invoke::{CallContext, Invoker};
use crate::saga::{CallOutcome, Command, Ending, Invocation, Saga, Target};

/// Why traces cannot be sent.
#[derive(Debug, thiserror::Error)]
#[error("--otlp-endpoint: {0}")]
pub struct TraceError(String);

/// Where the saga spans go.
pub struct Traces {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

impl std::fmt::Debug for Traces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Traces").finish_non_exhaustive()
    }
}

thread_local! {
    /// The ids the next span built on this thread takes (`with_ids`).
    static PLANNED: Cell<(Option<TraceId>, Option<SpanId>)> = const { Cell::new((None, None)) };
}

/// Random ids, except where a span's ids are planned: the SDK takes a span's ids from
/// its generator, and a saga's span must have the ids its calls already named.
#[derive(Debug, Default)]
struct PlannedIds(RandomIdGenerator);

impl IdGenerator for PlannedIds {
    fn new_trace_id(&self) -> TraceId {
        let (trace, span) = PLANNED.with(Cell::get);
        PLANNED.with(|p| p.set((None, span)));
        trace.unwrap_or_else(|| self.0.new_trace_id())
    }

    fn new_span_id(&self) -> SpanId {
        let (trace, span) = PLANNED.with(Cell::get);
        PLANNED.with(|p| p.set((trace, None)));
        span.unwrap_or_else(|| self.0.new_span_id())
    }
}

/// Runs `build` (which builds one span, synchronously) with the ids that span takes.
fn with_ids<T>(trace: Option<TraceId>, span: SpanId, build: impl FnOnce() -> T) -> T {
    PLANNED.with(|p| p.set((trace, Some(span))));
    let built = build();
    PLANNED.with(|p| p.set((None, None)));
    built
}

/// The saga's trace id, as `invoke::trace_id` writes it (32 hex digits).
fn trace_of(trace_id: &str) -> TraceId {
    TraceId::from_hex(trace_id).unwrap_or(TraceId::INVALID)
}

/// The span id of saga `saga_id`'s own span: derived from its id, never zero.
pub fn saga_span_id(saga_id: &str) -> SpanId {
    let (high, _) =
        uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, saga_id.as_bytes()).as_u64_pair();
    SpanId::from_bytes(high.max(1).to_be_bytes())
}

/// A new span id for a call, never zero.
pub fn call_span_id() -> SpanId {
    SpanId::from_bytes(uuid::Uuid::new_v4().as_u64_pair().0.max(1).to_be_bytes())
}

/// The saga's span as a remote parent of its calls' spans.
fn saga_parent(trace_id: &str, saga_id: &str) -> Context {
    Context::new().with_remote_span_context(SpanContext::new(
        trace_of(trace_id),
        saga_span_id(saga_id),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    ))
}

fn ms_to_time(ms: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64)
}

impl Traces {
    /// Sends spans to the OTLP/HTTP collector at `endpoint` (its base URL, as
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`: `/v1/traces` is added), as service `service`.
    pub fn otlp(endpoint: &str, service: &str) -> Result<Self, TraceError> {
        use opentelemetry_otlp::{Protocol, WithExportConfig};
        let parsed = reqwest::Url::parse(endpoint)
            .map_err(|e| TraceError(format!("{endpoint:?} is not a URL: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(TraceError(format!("{endpoint:?} is not an http(s) URL")));
        }
        let url = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpJson)
            .with_endpoint(url)
            .with_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| TraceError(e.to_string()))?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_id_generator(PlannedIds::default())
            .with_resource(
                opentelemetry_sdk::Resource::builder()
                    .with_service_name(service.to_owned())
                    .build(),
            )
            .build();
        let tracer = provider.tracer("sagaplane-executor");
        Ok(Self { provider, tracer })
    }

    /// Sends what is buffered, waiting at most a few seconds; at shutdown.
    pub fn shut_down(&self) {
        if let Err(e) = self.provider.shutdown_with_timeout(Duration::from_secs(5)) {
            tracing::warn!(error = %e, "traces buffered at shutdown could not all be sent");
        }
    }

    /// Sends what is buffered now (tests).
    pub fn flush(&self) {
        let _ = self.provider.force_flush();
    }

    fn call_span(
        &self,
        invocation: &Invocation,
        context: &CallContext,
        span_id: SpanId,
        started: SystemTime,
        outcome: &CallOutcome,
    ) {
        let (kind, step_of) = match invocation.target {
            Target::Forward(_) => ("forward", None),
            Target::Compensation(_) => ("compensation", Some(context.step_id.clone())),
        };
        let (outcome_name, status) = match outcome {
            CallOutcome::Succeeded { .. } => ("succeeded", Status::Ok),
            CallOutcome::Failed { reason } => ("failed", Status::error(reason.clone())),
            CallOutcome::Unknown { reason } => ("unknown", Status::error(reason.clone())),
        };
        let mut attributes = vec![
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
            KeyValue::new("gen_ai.tool.name", invocation.call.skill.clone()),
            KeyValue::new("sagaplane.saga.id", context.saga_id.clone()),
            KeyValue::new("sagaplane.step.id", context.step_id.clone()),
            KeyValue::new("sagaplane.agent", invocation.call.agent.clone()),
            KeyValue::new("sagaplane.call", kind),
            KeyValue::new("sagaplane.attempt", i64::from(invocation.attempt)),
            KeyValue::new("sagaplane.outcome", outcome_name),
            KeyValue::new(
                "sagaplane.idempotency_key",
                invocation.idempotency_key.clone(),
            ),
        ];
        if let Some(class) = context.class {
            attributes.push(KeyValue::new("sagaplane.class", class.as_str()));
        }
        if let Some(step) = step_of {
            attributes.push(KeyValue::new("sagaplane.compensation_of", step));
        }
        if let Some(cause) = &context.caused_by {
            attributes.push(KeyValue::new("sagaplane.caused_by", cause.clone()));
        }
        let parent = saga_parent(&context.trace_id, &context.saga_id);
        let mut span = with_ids(None, span_id, || {
            self.tracer
                .span_builder(format!("execute_tool {}", invocation.call.skill))
                .with_kind(SpanKind::Client)
                .with_start_time(started)
                .with_attributes(attributes)
                .start_with_context(&self.tracer, &parent)
        });
        opentelemetry::trace::Span::set_status(&mut span, status);
        opentelemetry::trace::Span::end(&mut span);
    }

    fn saga_span(&self, saga: &Saga, started: SystemTime, ending: Ending) {
        let saga_id = &saga.spec.saga_id;
        let ending = match ending {
            Ending::Completed => "completed",
            Ending::Compensated => "compensated",
            Ending::Canceled => "canceled",
        };
        let attributes = vec![
            KeyValue::new("gen_ai.operation.name", "invoke_workflow"),
            KeyValue::new("sagaplane.saga.id", saga_id.clone()),
            KeyValue::new("sagaplane.ending", ending),
            KeyValue::new("sagaplane.steps", saga.spec.steps.len() as i64),
        ];
        let trace = trace_of(&crate::invoke::trace_id(saga_id));
        let mut span = with_ids(Some(trace), saga_span_id(saga_id), || {
            self.tracer
                .span_builder(format!("invoke_workflow {saga_id}"))
                .with_kind(SpanKind::Internal)
                .with_start_time(started)
                .with_attributes(attributes)
                .start_with_context(&self.tracer, &Context::new())
        });
        opentelemetry::trace::Span::end(&mut span);
    }
}

/// An invoker that makes a span of each call of the one it wraps.
pub struct TracedInvoker {
    pub inner: Arc<dyn Invoker>,
    pub traces: Arc<Traces>,
}

#[async_trait]
impl Invoker for TracedInvoker {
    async fn invoke(&self, invocation: &Invocation, context: &CallContext) -> CallOutcome {
        let span_id = call_span_id();
        let mut traced = context.clone();
        traced.span_id = Some(format!("{span_id}"));
        let started = SystemTime::now();
        let outcome = self.inner.invoke(invocation, &traced).await;
        self.traces
            .call_span(invocation, &traced, span_id, started, &outcome);
        outcome
    }
}

/// A reporter that sends the saga's span when it ends, then hands each report on.
pub struct TracedReporter {
    inner: Arc<dyn Reporter>,
    traces: Arc<Traces>,
    /// The saga's first call, or when this reporter was made if it has made none.
    started: SystemTime,
}

impl TracedReporter {
    pub fn new(inner: Arc<dyn Reporter>, traces: Arc<Traces>, saga: &Saga) -> Self {
        let started = saga
            .records
            .iter()
            .filter_map(|r| r.started_at_ms)
            .min()
            .map(ms_to_time)
            .unwrap_or_else(SystemTime::now);
        Self {
            inner,
            traces,
            started,
        }
    }
}

#[async_trait]
impl Reporter for TracedReporter {
    async fn report(&self, command: &Command, saga: &Saga) {
        self.report_all(std::slice::from_ref(command), saga).await;
    }

    async fn report_all(&self, shown: &[Command], saga: &Saga) {
        for command in shown {
            if let Command::Finish { ending, .. } = command {
                self.traces.saga_span(saga, self.started, *ending);
            }
        }
        self.inner.report_all(shown, saga).await;
    }

    async fn settled(&self) -> bool {
        self.inner.settled().await
    }
}
