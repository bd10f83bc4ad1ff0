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

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use agent_host::telemetry::{Exporter, new_span_id, saga_span_id, saga_trace_id, under_saga};
use async_trait::async_trait;
use opentelemetry::trace::{Span, SpanId, SpanKind, Status};
use opentelemetry::{Context, KeyValue};

use crate::driver::Reporter;
use crate::invoke::{CallContext, Invoker};
use crate::saga::{CallOutcome, Command, Ending, Invocation, Saga, Target};

/// Where the saga spans go.
#[derive(Debug)]
pub struct Traces {
    exporter: Exporter,
}

fn ms_to_time(ms: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64)
}

impl Traces {
    /// Sends spans to the OTLP/HTTP collector at `endpoint` (`Exporter::otlp`).
    pub fn otlp(endpoint: &str, service: &str) -> agent_host::Result<Self> {
        Ok(Self {
            exporter: Exporter::otlp(endpoint, service)?,
        })
    }

    /// Sends what is buffered, waiting at most a few seconds; at shutdown. Blocks.
    pub fn shut_down(&self) {
        self.exporter.shut_down();
    }

    /// Sends what is buffered now (tests). Blocks.
    pub fn flush(&self) {
        self.exporter.flush();
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
            Target::Verification(_) => ("verification", None),
        };
        let (outcome_name, status) = match outcome {
            CallOutcome::Succeeded { .. } => ("succeeded", Status::Ok),
            CallOutcome::Failed { reason, .. } => ("failed", Status::error(reason.clone())),
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
        let builder = self
            .exporter
            .span(format!("execute_tool {}", invocation.call.skill))
            .with_kind(SpanKind::Client)
            .with_start_time(started)
            .with_attributes(attributes);
        let mut span = self
            .exporter
            .build(builder, &under_saga(&context.saga_id), None, span_id);
        span.set_status(status);
        span.end();
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
        let builder = self
            .exporter
            .span(format!("invoke_workflow {saga_id}"))
            .with_kind(SpanKind::Internal)
            .with_start_time(started)
            .with_attributes(attributes);
        let trace = saga_trace_id(saga_id);
        let mut span = self.exporter.build(
            builder,
            &Context::new(),
            Some(&trace),
            saga_span_id(saga_id),
        );
        span.end();
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
        let span_id: SpanId = new_span_id();
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

impl TracedReporter {
    /// Sends the saga's span once `shown` has its end.
    fn span_ended(&self, shown: &[Command], saga: &Saga) {
        for command in shown {
            if let Command::Finish { ending, .. } = command {
                self.traces.saga_span(saga, self.started, *ending);
            }
        }
    }
}

#[async_trait]
impl Reporter for TracedReporter {
    async fn report(&self, command: &Command, saga: &Saga) {
        self.report_all(std::slice::from_ref(command), saga).await;
    }

    async fn report_all(&self, shown: &[Command], saga: &Saga) {
        self.span_ended(shown, saga);
        self.inner.report_all(shown, saga).await;
    }

    async fn begun(&self, shown: &[Command], saga: &Saga) {
        self.span_ended(shown, saga);
        self.inner.begun(shown, saga).await;
    }

    async fn written(
        &self,
        shown: &[Command],
        saga: &Saga,
        write: &crate::driver::StepWrite<'_>,
    ) -> crate::error::Result<()> {
        self.inner.written(shown, saga, write).await?;
        self.span_ended(shown, saga);
        Ok(())
    }
}
