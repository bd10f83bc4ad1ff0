//! The executor's metrics in the OpenMetrics text format Prometheus scrapes
//! (`GET /metrics`): sagas begun, resumed and ended (by ending), tool calls answered (by
//! agent and outcome) as they happen; sagas live, sagas running and waiting for a slot,
//! sagas waiting for a person, and whether the state file takes writes, read at each
//! scrape.

use std::sync::Arc;

use async_trait::async_trait;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::invoke::{CallContext, Invoker};
use crate::saga::{CallOutcome, Ending, Invocation};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndLabels {
    ending: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    agent: String,
    outcome: &'static str,
}

/// What the gauges show, read when scraped.
#[derive(Debug, Clone, Copy, Default)]
pub struct Now {
    /// Sagas with a driver: running, or paused for a person.
    pub live: usize,
    /// Sagas holding a slot, and sagas waiting for one; the slots there are.
    pub running: usize,
    pub waiting_for_a_slot: usize,
    pub slots: usize,
    /// Sagas whose task waits for a person (`INPUT_REQUIRED`).
    pub waiting_for_a_person: usize,
    /// The state file's last write landed.
    pub state_file_writable: bool,
}

/// The executor's metrics. Cheap to share; every update is an atomic add.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    begun: Counter,
    resumed: Counter,
    ended: Family<EndLabels, Counter>,
    calls: Family<CallLabels, Counter>,
    live: Gauge,
    running: Gauge,
    waiting_for_a_slot: Gauge,
    slots: Gauge,
    waiting: Gauge,
    writable: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut metrics = Self {
            registry: Registry::with_prefix("sagaplane"),
            begun: Counter::default(),
            resumed: Counter::default(),
            ended: Family::default(),
            calls: Family::default(),
            live: Gauge::default(),
            running: Gauge::default(),
            waiting_for_a_slot: Gauge::default(),
            slots: Gauge::default(),
            waiting: Gauge::default(),
            writable: Gauge::default(),
        };
        let r = &mut metrics.registry;
        r.register(
            "sagas_begun",
            "Sagas begun from accepted plans",
            metrics.begun.clone(),
        );
        r.register(
            "sagas_resumed",
            "Unfinished sagas resumed from the journal at start",
            metrics.resumed.clone(),
        );
        r.register(
            "sagas_ended",
            "Sagas ended, by ending (completed, compensated, canceled)",
            metrics.ended.clone(),
        );
        r.register(
            "tool_calls",
            "Tool calls answered, by agent and outcome (succeeded, failed, unknown)",
            metrics.calls.clone(),
        );
        let gauges = [
            (
                "sagas_live",
                "Sagas with a driver: running, or paused for a person",
                &metrics.live,
            ),
            (
                "sagas_running",
                "Sagas holding a saga slot: acting, not waiting for a person",
                &metrics.running,
            ),
            (
                "sagas_waiting_for_a_slot",
                "Accepted sagas waiting for a free saga slot (their tasks SUBMITTED)",
                &metrics.waiting_for_a_slot,
            ),
            (
                "saga_slots",
                "How many sagas may act at once (--max-running-sagas)",
                &metrics.slots,
            ),
            (
                "sagas_waiting_for_a_person",
                "Sagas whose task is INPUT_REQUIRED: an escalation or an approval",
                &metrics.waiting,
            ),
            (
                "state_file_writable",
                "1 when the state file's last write landed, 0 when it was refused (a full disk)",
                &metrics.writable,
            ),
        ];
        for (name, help, gauge) in gauges {
            r.register(name, help, gauge.clone());
        }
        metrics
    }
}

impl Metrics {
    pub fn saga_begun(&self) {
        self.begun.inc();
    }

    pub fn saga_resumed(&self) {
        self.resumed.inc();
    }

    pub fn saga_ended(&self, ending: Ending) {
        let ending = match ending {
            Ending::Completed => "completed",
            Ending::Compensated => "compensated",
            Ending::Canceled => "canceled",
        };
        self.ended.get_or_create(&EndLabels { ending }).inc();
    }

    fn call_answered(&self, agent: &str, outcome: &CallOutcome) {
        let outcome = match outcome {
            CallOutcome::Succeeded { .. } => "succeeded",
            CallOutcome::Failed { .. } => "failed",
            CallOutcome::Unknown { .. } => "unknown",
        };
        let labels = CallLabels {
            agent: agent.to_owned(),
            outcome,
        };
        self.calls.get_or_create(&labels).inc();
    }

    /// Every metric, the gauges set to `now`, as OpenMetrics text.
    pub fn encode(&self, now: Now) -> Result<String, std::fmt::Error> {
        let gauge =
            |gauge: &Gauge, value: usize| gauge.set(i64::try_from(value).unwrap_or(i64::MAX));
        gauge(&self.live, now.live);
        gauge(&self.running, now.running);
        gauge(&self.waiting_for_a_slot, now.waiting_for_a_slot);
        gauge(&self.slots, now.slots);
        gauge(&self.waiting, now.waiting_for_a_person);
        self.writable.set(i64::from(now.state_file_writable));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)?;
        Ok(text)
    }
}

/// An invoker that counts the answers of the one it wraps.
pub struct CountedInvoker {
    pub inner: Arc<dyn Invoker>,
    pub metrics: Arc<Metrics>,
}

#[async_trait]
impl Invoker for CountedInvoker {
    async fn invoke(&self, invocation: &Invocation, context: &CallContext) -> CallOutcome {
        let outcome = self.inner.invoke(invocation, context).await;
        self.metrics.call_answered(&invocation.call.agent, &outcome);
        outcome
    }
}
