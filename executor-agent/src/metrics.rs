//! The executor's metrics in the OpenMetrics text format Prometheus scrapes
//! (`GET /metrics`): sagas begun, resumed and ended (by ending), tool calls answered (by
//! agent and outcome), compensations (by agent and outcome), verifications (by agent and
//! verdict), unknown outcomes (by agent and what settled them: a verification, a person,
//! or the unwind) and tools reporting an undo deadline earlier than their cards declare
//! (by agent) as they happen; sagas live, sagas
//! running and waiting for a slot, sagas waiting for a person, whether the state file
//! takes writes, and the undo handles open in unfinished sagas (and those expiring soon,
//! by agent), read at each scrape. No label names a saga.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::invoke::{CallContext, Invoker};
use crate::saga::deadline::{Reported, UndoDeadline, rfc3339};
use crate::saga::{CallOutcome, Ending, Invocation, Saga, Target};
use crate::sync;

mod reporter;

pub use reporter::MeteredReporter;

/// How far back the compensation outcomes behind the console's windowed rate go, and at
/// most how many are kept (a day of a busy executor's unwinding, about 5 MiB at most).
pub const RECENT_WINDOW_MS: i64 = 24 * 3600 * 1000;
const RECENT_COMPENSATIONS_KEPT: usize = 100_000;

/// `--undo-expiring-within-secs` unless set: an undo handle expiring within the hour.
pub const DEFAULT_UNDO_EXPIRING_WITHIN: Duration = Duration::from_secs(3600);

/// Counts by agent, then outcome: what the console's overview reads of the counters.
pub type ByLabels = BTreeMap<String, BTreeMap<String, f64>>;

/// The outcomes a tool call's answer is counted under.
const CALL_OUTCOMES: [&str; 3] = ["succeeded", "failed", "unknown"];
/// The outcomes a compensation is counted under.
const COMPENSATION_OUTCOMES: [&str; 4] = ["succeeded", "failed", "dead_lettered", "unavailable"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndLabels {
    ending: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    agent: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DoubtLabels {
    agent: String,
    settled_by: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AgentLabels {
    agent: String,
}

/// An undo handle open in an unfinished saga with a driver here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenHandle {
    pub step: String,
    pub agent: String,
    /// When the undo expires (ms since the epoch), if the step has a deadline.
    pub deadline_ms: Option<i64>,
}

/// The undo handles open in each unfinished saga with a driver here, by saga id.
type OpenHandles = HashMap<String, Vec<OpenHandle>>;

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
    /// The time of the scrape (ms since the epoch), for the undo handles expiring soon.
    pub at_ms: i64,
}

/// The executor's metrics. Cheap to share; every update is an atomic add.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    begun: Counter,
    resumed: Counter,
    ended: Family<EndLabels, Counter>,
    calls: Family<CallLabels, Counter>,
    compensations: Family<CallLabels, Counter>,
    verifications: Family<CallLabels, Counter>,
    unknown_outcomes: Family<DoubtLabels, Counter>,
    misdeclared: Family<AgentLabels, Counter>,
    undo_open: Family<AgentLabels, Gauge>,
    undo_expiring: Family<AgentLabels, Gauge>,
    undo_expiring_within: Gauge,
    expiring_within_ms: i64,
    open_handles: Mutex<OpenHandles>,
    /// Every agent the undo gauges have shown, so that one whose handles are all gone
    /// shows 0 rather than vanishing.
    undo_agents: Mutex<BTreeSet<String>>,
    /// Every agent a call or compensation was counted for: the label sets of `calls` and
    /// `compensations` (which the registry's families do not list), for reading them.
    counted_agents: Mutex<BTreeSet<String>>,
    /// Each compensation outcome of the last day, in order: (when, agent, outcome).
    recent_compensations: Mutex<std::collections::VecDeque<(i64, String, &'static str)>>,
    live: Gauge,
    running: Gauge,
    waiting_for_a_slot: Gauge,
    slots: Gauge,
    waiting: Gauge,
    writable: Gauge,
    /// Transactions the state file's writer committed (each one WAL fsync), and the
    /// writes they carried.
    commits: Gauge,
    writes: Gauge,
    /// CPU seconds by phase, when measured (`agent_host::cpu`).
    phase_cpu: Family<PhaseLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    phase: &'static str,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new(DEFAULT_UNDO_EXPIRING_WITHIN)
    }
}

impl Metrics {
    /// The metrics, counting an open undo handle as expiring once its deadline is at most
    /// `undo_expiring_within` away (or past).
    pub fn new(undo_expiring_within: Duration) -> Self {
        let mut metrics = Self {
            registry: Registry::with_prefix("sagaplane"),
            begun: Counter::default(),
            resumed: Counter::default(),
            ended: Family::default(),
            calls: Family::default(),
            compensations: Family::default(),
            verifications: Family::default(),
            unknown_outcomes: Family::default(),
            misdeclared: Family::default(),
            undo_open: Family::default(),
            undo_expiring: Family::default(),
            undo_expiring_within: Gauge::default(),
            expiring_within_ms: i64::try_from(undo_expiring_within.as_millis()).unwrap_or(i64::MAX),
            open_handles: Mutex::default(),
            undo_agents: Mutex::default(),
            counted_agents: Mutex::default(),
            recent_compensations: Mutex::default(),
            live: Gauge::default(),
            running: Gauge::default(),
            waiting_for_a_slot: Gauge::default(),
            slots: Gauge::default(),
            waiting: Gauge::default(),
            writable: Gauge::default(),
            commits: Gauge::default(),
            writes: Gauge::default(),
            phase_cpu: Family::default(),
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
        r.register(
            "compensations",
            "Compensations, by agent and outcome: succeeded and failed attempts; dead_lettered \
             (attempts exhausted) and unavailable (its undo expired or could not be bound), \
             each then put to a person",
            metrics.compensations.clone(),
        );
        r.register(
            "verifications",
            "Unknown outcomes a tool was asked to settle (a skill's verification), by agent \
             and outcome: applied and not_applied settled them; unsettled left them unknown \
             (the saga unwinds if it may, else a person decides). A compensation verified \
             not_applied goes to a person too",
            metrics.verifications.clone(),
        );
        r.register(
            "unknown_outcomes",
            "Forward calls whose outcome was unknown once retries under their key could not \
             settle it, by agent and by what settled it: verification (the skill's \
             verification answered applied or not_applied), person (the saga stopped for a \
             person about it: the skill declares no verification, or it did not settle it) or \
             unwinding (before the point of no return the saga unwound over it, its \
             compensation bound with argsWhenUnknown, asking nobody)",
            metrics.unknown_outcomes.clone(),
        );
        r.register(
            "undo_deadline_misdeclared",
            "Results whose reported undo deadline comes before the undoTtlSeconds their \
             card declares, by agent",
            metrics.misdeclared.clone(),
        );
        r.register(
            "undo_handles_open",
            "Undo handles open in unfinished sagas that can still unwind, by agent",
            metrics.undo_open.clone(),
        );
        r.register(
            "undo_handles_expiring",
            "Open undo handles whose deadline is within --undo-expiring-within-secs \
             (or past), by agent",
            metrics.undo_expiring.clone(),
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
        r.register(
            "state_file_commits",
            "Transactions the state file's writer has committed since start (each one fsync of its write-ahead log; concurrent writes share one)",
            metrics.commits.clone(),
        );
        r.register(
            "state_file_writes",
            "Writes the state file's writer has committed since start (in its commits)",
            metrics.writes.clone(),
        );
        if agent_host::cpu::enabled() {
            r.register(
                "phase_cpu_seconds",
                "CPU seconds spent in each phase of the work since start (SAGAPLANE_CPU_PHASES=1)",
                metrics.phase_cpu.clone(),
            );
        }
        r.register(
            "undo_expiring_within_seconds",
            "How near its deadline an open undo handle counts as expiring \
             (--undo-expiring-within-secs)",
            metrics.undo_expiring_within.clone(),
        );
        metrics
            .undo_expiring_within
            .set(metrics.expiring_within_ms / 1000);
        metrics
    }

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

    /// A verification of a call of `agent`'s ended with `verdict`.
    fn verified(&self, agent: &str, verdict: &'static str) {
        self.count_agent(agent);
        let labels = CallLabels {
            agent: agent.to_owned(),
            outcome: verdict,
        };
        self.verifications.get_or_create(&labels).inc();
    }

    /// An unknown outcome of a forward call of `agent`'s was settled by `settled_by`.
    fn unknown_outcome(&self, agent: &str, settled_by: &'static str) {
        let labels = DoubtLabels {
            agent: agent.to_owned(),
            settled_by,
        };
        self.unknown_outcomes.get_or_create(&labels).inc();
    }

    fn call_answered(&self, agent: &str, outcome: &CallOutcome) {
        let outcome = match outcome {
            CallOutcome::Succeeded { .. } => "succeeded",
            CallOutcome::Failed { .. } => "failed",
            CallOutcome::Unknown { .. } => "unknown",
        };
        self.count_agent(agent);
        let labels = CallLabels {
            agent: agent.to_owned(),
            outcome,
        };
        self.calls.get_or_create(&labels).inc();
    }

    fn count_agent(&self, agent: &str) {
        let mut agents = sync::lock(&self.counted_agents);
        if !agents.contains(agent) {
            agents.insert(agent.to_owned());
        }
    }

    /// The tool calls answered since start, by agent and outcome, as `/metrics` counts
    /// them (`sagaplane_tool_calls_total`).
    pub fn calls(&self) -> ByLabels {
        self.by_agent(&self.calls, &CALL_OUTCOMES)
    }

    /// The compensations since start, by agent and outcome, as `/metrics` counts them
    /// (`sagaplane_compensations_total`).
    pub fn compensations(&self) -> ByLabels {
        self.by_agent(&self.compensations, &COMPENSATION_OUTCOMES)
    }

    fn by_agent(
        &self,
        family: &Family<CallLabels, Counter>,
        outcomes: &[&'static str],
    ) -> ByLabels {
        let agents = sync::lock(&self.counted_agents).clone();
        let mut by = ByLabels::new();
        for agent in agents {
            for &outcome in outcomes {
                let labels = CallLabels {
                    agent: agent.clone(),
                    outcome,
                };
                if let Some(count) = family.get(&labels) {
                    by.entry(agent.clone())
                        .or_default()
                        .insert(outcome.to_owned(), count.get() as f64);
                }
            }
        }
        by
    }

    fn compensation(&self, agent: &str, outcome: &'static str) {
        self.count_agent(agent);
        let labels = CallLabels {
            agent: agent.to_owned(),
            outcome,
        };
        self.compensations.get_or_create(&labels).inc();
        let now_ms = chrono::Utc::now().timestamp_millis();
        let mut recent = sync::lock(&self.recent_compensations);
        recent.push_back((now_ms, agent.to_owned(), outcome));
        while recent.len() > RECENT_COMPENSATIONS_KEPT
            || recent
                .front()
                .is_some_and(|(at, ..)| *at < now_ms - RECENT_WINDOW_MS)
        {
            recent.pop_front();
        }
    }

    /// The compensation outcomes since `since_ms` (at most a day back), by agent and
    /// outcome: the console's rate over a window.
    pub fn compensations_since(&self, since_ms: i64) -> BTreeMap<String, BTreeMap<String, f64>> {
        let mut by: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
        for (_, agent, outcome) in sync::lock(&self.recent_compensations)
            .iter()
            .filter(|(at, ..)| *at >= since_ms)
        {
            *by.entry(agent.clone())
                .or_default()
                .entry((*outcome).to_owned())
                .or_default() += 1.0;
        }
        by
    }

    /// Replaces what saga `saga_id` holds open (nothing: it is gone).
    fn hold_undo_handles(&self, saga_id: &str, handles: Vec<OpenHandle>) {
        if !handles.is_empty() {
            let mut agents = sync::lock(&self.undo_agents);
            for handle in &handles {
                if !agents.contains(&handle.agent) {
                    agents.insert(handle.agent.clone());
                }
            }
        }
        let mut open = sync::lock(&self.open_handles);
        if handles.is_empty() {
            open.remove(saga_id);
        } else {
            open.insert(saga_id.to_owned(), handles);
        }
    }

    /// The undo handles open now, each with its saga's id: those with a deadline first,
    /// the soonest first (the console's list of undos to watch).
    pub fn open_undo_handles(&self) -> Vec<(String, OpenHandle)> {
        let mut handles: Vec<(String, OpenHandle)> = sync::lock(&self.open_handles)
            .iter()
            .flat_map(|(saga_id, handles)| handles.iter().map(|h| (saga_id.clone(), h.clone())))
            .collect();
        handles
            .sort_by_key(|(saga_id, h)| (h.deadline_ms.is_none(), h.deadline_ms, saga_id.clone()));
        handles
    }

    /// How near its deadline an open undo handle counts as expiring, in seconds.
    pub fn expiring_within_secs(&self) -> i64 {
        self.expiring_within_ms / 1000
    }

    /// The undo handles open at `at_ms`, and those expiring by then, by agent (every
    /// agent that has held one, at 0 once it holds none).
    pub fn undo_handle_counts(&self, at_ms: i64) -> BTreeMap<String, (i64, i64)> {
        let soon = at_ms.saturating_add(self.expiring_within_ms);
        let mut counts: BTreeMap<String, (i64, i64)> = sync::lock(&self.undo_agents)
            .iter()
            .map(|agent| (agent.clone(), (0, 0)))
            .collect();
        for handle in sync::lock(&self.open_handles).values().flatten() {
            let count = counts.entry(handle.agent.clone()).or_default();
            count.0 += 1;
            if handle.deadline_ms.is_some_and(|at| at <= soon) {
                count.1 += 1;
            }
        }
        counts
    }

    /// Sets the undo gauges for a scrape at `at_ms`.
    fn count_undo_handles(&self, at_ms: i64) {
        for (agent, (open, expiring)) in self.undo_handle_counts(at_ms) {
            let labels = AgentLabels { agent };
            self.undo_open.get_or_create(&labels).set(open);
            self.undo_expiring.get_or_create(&labels).set(expiring);
        }
    }

    /// What a compensable step's result said about its undo deadline: logged when it is
    /// unusable (the TTL alone decides), logged and counted when it is earlier than the
    /// card declares.
    fn undo_deadline_read(&self, saga: &Saga, step: usize, deadline: &UndoDeadline) {
        let spec = &saga.spec.steps[step];
        if let Reported::Unreadable { reason } = &deadline.reported {
            tracing::warn!(
                saga = ?saga.spec.saga_id, step = ?spec.id, agent = ?spec.call.agent,
                skill = ?spec.call.skill, ?reason, until = ?rfc3339(deadline.at_ms),
                "the tool's result states no usable undo deadline; undoTtlSeconds alone decides"
            );
        }
        if deadline.earlier_than_declared {
            let reported = match deadline.reported {
                Reported::At { at_ms } => rfc3339(Some(at_ms)),
                _ => String::new(),
            };
            tracing::warn!(
                saga = ?saga.spec.saga_id, step = ?spec.id, agent = ?spec.call.agent,
                skill = ?spec.call.skill, ?reported,
                declared_ttl_ms = ?spec.undo_ttl_ms,
                "the tool reported an undo deadline earlier than its card's undoTtlSeconds: \
                 the card misdeclares it; the reported deadline is used"
            );
            let labels = AgentLabels {
                agent: spec.call.agent.clone(),
            };
            self.misdeclared.get_or_create(&labels).inc();
        }
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
        let name = crate::state::STATE_FILE_NAME;
        let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.commits
            .set(count(sagaplane_storage::sqlite::commits(name)));
        self.writes
            .set(count(sagaplane_storage::sqlite::writes(name)));
        for (phase, seconds) in agent_host::cpu::spent_seconds() {
            self.phase_cpu
                .get_or_create(&PhaseLabels {
                    phase: phase.name(),
                })
                .set(seconds);
        }
        self.count_undo_handles(now.at_ms);
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
        let agent = &invocation.call.agent;
        self.metrics.call_answered(agent, &outcome);
        if let Target::Compensation(_) = invocation.target {
            let attempt = match outcome {
                CallOutcome::Succeeded { .. } => "succeeded",
                CallOutcome::Failed { .. } | CallOutcome::Unknown { .. } => "failed",
            };
            self.metrics.compensation(agent, attempt);
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_windowed_compensations_are_those_since_the_window_began_by_agent_and_outcome() {
        let metrics = Metrics::default();
        let before = chrono::Utc::now().timestamp_millis() - 1;
        metrics.compensation("vendor-registry", "failed");
        metrics.compensation("vendor-registry", "succeeded");
        metrics.compensation("budget", "dead_lettered");
        let all = metrics.compensations_since(before);
        assert_eq!(all["vendor-registry"]["failed"], 1.0);
        assert_eq!(all["vendor-registry"]["succeeded"], 1.0);
        assert_eq!(all["budget"]["dead_lettered"], 1.0);
        // A window that begins after them holds none.
        let later = chrono::Utc::now().timestamp_millis() + 1_000;
        assert!(metrics.compensations_since(later).is_empty());
        // The counters /metrics shows count the same outcomes.
        let text = metrics.encode(Now::default()).unwrap();
        assert!(
            text.contains(
                "sagaplane_compensations_total{agent=\"budget\",outcome=\"dead_lettered\"} 1"
            ),
            "{text}"
        );
    }

    #[test]
    fn the_overview_reads_the_counts_a_scrape_shows() {
        let metrics = Metrics::default();
        let succeeded = CallOutcome::Succeeded {
            response: serde_json::json!({}),
        };
        metrics.call_answered("budget", &succeeded);
        metrics.call_answered("budget", &succeeded);
        metrics.call_answered(
            "email",
            &CallOutcome::Unknown {
                reason: "timeout".into(),
            },
        );
        metrics.compensation("budget", "unavailable");
        let calls = metrics.calls();
        assert_eq!(
            calls["budget"],
            BTreeMap::from([("succeeded".to_owned(), 2.0)])
        );
        assert_eq!(
            calls["email"],
            BTreeMap::from([("unknown".to_owned(), 1.0)])
        );
        let compensations = metrics.compensations();
        assert_eq!(
            compensations,
            BTreeMap::from([(
                "budget".to_owned(),
                BTreeMap::from([("unavailable".to_owned(), 1.0)])
            )])
        );
        let text = metrics.encode(Now::default()).unwrap();
        for line in [
            "sagaplane_tool_calls_total{agent=\"budget\",outcome=\"succeeded\"} 2",
            "sagaplane_tool_calls_total{agent=\"email\",outcome=\"unknown\"} 1",
            "sagaplane_compensations_total{agent=\"budget\",outcome=\"unavailable\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in {text}");
        }
    }
}
