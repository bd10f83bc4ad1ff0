//! Traces over OTLP/HTTP for the agents that send them (`--otlp-endpoint`): the exporter,
//! and the ids a saga's trace is made of. Every agent derives a saga's trace id and the
//! id of the saga's own span from the saga id alone, so the planner's span, the
//! executor's spans and the tools' spans (through `traceparent`) join one tree, whoever
//! sends first and whatever restarts in between.

use std::cell::Cell;
use std::time::Duration;

use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, TracerProvider,
};
use opentelemetry::{Context, trace::SpanBuilder, trace::Tracer};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SdkTracer, SdkTracerProvider};

use crate::error::{Error, Result};

/// The W3C trace id (32 hex digits) of saga `saga_id`: every span of one saga, and
/// every `traceparent` its calls carry, belongs to it.
pub fn saga_trace_id(saga_id: &str) -> String {
    uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_URL, saga_id.as_bytes())
        .simple()
        .to_string()
}

/// The id of saga `saga_id`'s own span (the executor's `invoke_workflow`): derived from
/// its id, never zero.
pub fn saga_span_id(saga_id: &str) -> SpanId {
    let (high, _) =
        uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, saga_id.as_bytes()).as_u64_pair();
    SpanId::from_bytes(high.max(1).to_be_bytes())
}

/// A new span id, never zero.
pub fn new_span_id() -> SpanId {
    SpanId::from_bytes(uuid::Uuid::new_v4().as_u64_pair().0.max(1).to_be_bytes())
}

fn trace_of(saga_id: &str) -> TraceId {
    TraceId::from_hex(&saga_trace_id(saga_id)).unwrap_or(TraceId::INVALID)
}

/// The saga's span, as the parent of a span of one of its parts (a call, the planning).
pub fn under_saga(saga_id: &str) -> Context {
    Context::new().with_remote_span_context(SpanContext::new(
        trace_of(saga_id),
        saga_span_id(saga_id),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    ))
}

thread_local! {
    /// The ids the next span built on this thread takes (`Exporter::build`).
    static PLANNED: Cell<(Option<TraceId>, Option<SpanId>)> = const { Cell::new((None, None)) };
}

/// Random ids, except where a span's ids are planned: the SDK takes a span's ids from
/// its generator, and a saga's spans must have the ids its other parts already named.
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

/// Where an agent's spans go.
pub struct Exporter {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exporter").finish_non_exhaustive()
    }
}

impl Exporter {
    /// Sends spans to the OTLP/HTTP collector at `endpoint` (its base URL, as
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`: `/v1/traces` is added; JSON), as service `service`,
    /// in batches from a thread of the exporter's own.
    pub fn otlp(endpoint: &str, service: &str) -> Result<Self> {
        use opentelemetry_otlp::{Protocol, WithExportConfig};
        let refused = |why: String| Error::Config(format!("--otlp-endpoint: {why}"));
        let parsed = reqwest::Url::parse(endpoint)
            .map_err(|e| refused(format!("{endpoint:?} is not a URL: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(refused(format!("{endpoint:?} is not an http(s) URL")));
        }
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpJson)
            .with_endpoint(format!("{}/v1/traces", endpoint.trim_end_matches('/')))
            .with_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| refused(e.to_string()))?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_id_generator(PlannedIds::default())
            .with_resource(
                opentelemetry_sdk::Resource::builder()
                    .with_service_name(service.to_owned())
                    .build(),
            )
            .build();
        let tracer = provider.tracer("sagaplane");
        Ok(Self { provider, tracer })
    }

    /// Starts the span `builder` describes under `parent`, with span id `span` and, for a
    /// root, trace id `trace`.
    pub fn build(
        &self,
        builder: SpanBuilder,
        parent: &Context,
        trace: Option<&str>,
        span: SpanId,
    ) -> opentelemetry_sdk::trace::Span {
        let trace = trace.and_then(|t| TraceId::from_hex(t).ok());
        PLANNED.with(|p| p.set((trace, Some(span))));
        let built = self.tracer.build_with_context(builder, parent);
        PLANNED.with(|p| p.set((None, None)));
        built
    }

    /// A span builder named `name`.
    pub fn span(&self, name: String) -> SpanBuilder {
        self.tracer.span_builder(name)
    }

    /// Sends what is buffered, waiting at most a few seconds; at shutdown. Blocks.
    pub fn shut_down(&self) {
        if let Err(e) = self.provider.shutdown_with_timeout(Duration::from_secs(5)) {
            tracing::warn!(error = %e, "traces buffered at shutdown could not all be sent");
        }
    }

    /// Sends what is buffered now, and returns once it is sent (tests). Blocks.
    pub fn flush(&self) {
        let _ = self.provider.force_flush();
    }
}
