//! CPU time by phase of the work a request starts, for the executor's whole-path
//! benchmark: each phase is charged the thread CPU time spent in it, nested phases
//! exclusively (a phase entered inside another pauses the outer one). Off unless the
//! process starts with `SAGAPLANE_CPU_PHASES=1`; when off, measuring costs one relaxed
//! load.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

/// The phases, in the order they are reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Checking a request's bearer token (signature, claims, replay cache).
    Authentication,
    /// Checking a plan's planner signature.
    PlanVerification,
    /// Checking a plan against the catalog: its type, schemas, ordering, the mandate's
    /// grant (and its principal's signature).
    Validation,
    /// Creating a task and its first durable write.
    TaskCreation,
    /// The rest of taking a plan in: admission lookups, the accepting write, launching.
    Intake,
    /// Driving a saga: the engine, its journal appends, tool calls, progress on its task.
    Saga,
    /// The rest of each request: HTTP, JSON-RPC decoding, the answer's encoding.
    Serving,
}

impl Phase {
    pub const ALL: [Phase; 7] = [
        Phase::Authentication,
        Phase::PlanVerification,
        Phase::Validation,
        Phase::TaskCreation,
        Phase::Intake,
        Phase::Saga,
        Phase::Serving,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Phase::Authentication => "authentication",
            Phase::PlanVerification => "plan_verification",
            Phase::Validation => "validation",
            Phase::TaskCreation => "task_creation",
            Phase::Intake => "intake",
            Phase::Saga => "saga",
            Phase::Serving => "serving",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

static SPENT_NS: [AtomicU64; 7] = [const { AtomicU64::new(0) }; 7];

thread_local! {
    /// The phase this thread is in, and the thread's CPU time when it was entered.
    static CURRENT: Cell<Option<(Phase, u64)>> = const { Cell::new(None) };
}

/// Whether phases are measured in this process (`SAGAPLANE_CPU_PHASES=1`).
pub fn enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| std::env::var("SAGAPLANE_CPU_PHASES").is_ok_and(|v| v == "1"))
}

fn thread_cpu_ns() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    u64::try_from(now.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(now.tv_nsec).unwrap_or(0))
}

fn charge(phase: Phase, since: u64, now: u64) {
    SPENT_NS[phase.index()].fetch_add(now.saturating_sub(since), Ordering::Relaxed);
}

/// Runs `work` in `phase`.
pub fn measure<T>(phase: Phase, work: impl FnOnce() -> T) -> T {
    if !enabled() {
        return work();
    }
    let outer = enter(phase);
    let out = work();
    leave(phase, outer);
    out
}

fn enter(phase: Phase) -> Option<Phase> {
    let now = thread_cpu_ns();
    let outer = CURRENT.with(|current| current.replace(Some((phase, now))));
    if let Some((outer, since)) = outer {
        charge(outer, since, now);
    }
    outer.map(|(outer, _)| outer)
}

fn leave(phase: Phase, outer: Option<Phase>) {
    let now = thread_cpu_ns();
    if let Some((_, since)) = CURRENT.with(Cell::get) {
        charge(phase, since, now);
    }
    CURRENT.with(|current| current.set(outer.map(|outer| (outer, now))));
}

/// `future`, each of its polls measured in `phase`.
pub fn measured<F: Future>(phase: Phase, future: F) -> Measured<F> {
    Measured {
        phase,
        inner: Box::pin(future),
    }
}

/// A future whose polls are charged to a phase.
pub struct Measured<F> {
    phase: Phase,
    inner: Pin<Box<F>>,
}

impl<F: Future> Future for Measured<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let phase = self.phase;
        measure(phase, || self.inner.as_mut().poll(cx))
    }
}

/// CPU seconds spent in each phase so far, in `Phase::ALL`'s order.
pub fn spent_seconds() -> Vec<(Phase, f64)> {
    Phase::ALL
        .iter()
        .map(|p| {
            let ns = SPENT_NS[p.index()].load(Ordering::Relaxed);
            (*p, ns as f64 / 1e9)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn burn(ns: u64) {
        let start = thread_cpu_ns();
        let mut x = 0u64;
        while thread_cpu_ns() - start < ns {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        std::hint::black_box(x);
    }

    #[test]
    fn a_nested_phase_is_charged_to_itself_alone() {
        // Measured directly (the process-wide switch is read from the environment).
        let outer = enter(Phase::Serving);
        burn(2_000_000);
        let inner = enter(Phase::Authentication);
        burn(5_000_000);
        leave(Phase::Authentication, inner);
        burn(2_000_000);
        leave(Phase::Serving, outer);
        let spent: std::collections::HashMap<&str, f64> = spent_seconds()
            .into_iter()
            .map(|(p, s)| (p.name(), s))
            .collect();
        assert!(spent["authentication"] >= 0.005, "{spent:?}");
        assert!(spent["serving"] >= 0.004, "{spent:?}");
        // The outer phase was paused while the inner one ran.
        assert!(spent["serving"] < 0.005, "{spent:?}");
    }
}
