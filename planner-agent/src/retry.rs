//! How long, and how often, the planner tries the executor again after a call whose
//! outcome is unknown (no connection, a server error, an answer lost on the way): waits
//! that double from `FIRST_WAIT` up to a cap, each with jitter so that planners that
//! lost the same executor do not come back at the same instant, within a time budget
//! (`--executor-retry-secs`) counted from the first try.

use std::time::Duration;

use tokio::time::Instant;

/// The executor's unavailability the planner rides out unless configured otherwise: a
/// restart, a deploy, a replica's failover.
pub const DEFAULT_EXECUTOR_RETRY: Duration = Duration::from_secs(30);

/// The first wait between tries.
const FIRST_WAIT: Duration = Duration::from_millis(100);
/// The longest wait between tries (a short budget caps it at an eighth of itself).
const MAX_WAIT: Duration = Duration::from_secs(5);

/// The tries of one call.
#[derive(Debug)]
pub(crate) struct Tries {
    deadline: Instant,
    cap: Duration,
    /// Tries made so far.
    made: u32,
}

impl Tries {
    /// Before the first try of a call that may be tried again for `budget`.
    pub(crate) fn new(budget: Duration) -> Self {
        Self {
            deadline: Instant::now() + budget,
            cap: (budget / 8).clamp(FIRST_WAIT, MAX_WAIT),
            made: 0,
        }
    }

    /// Counts a try that failed with an unknown outcome; returns how long to wait before
    /// the next one, or `None` once the budget is spent.
    pub(crate) fn failed(&mut self) -> Option<Duration> {
        self.made += 1;
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        let doubled = FIRST_WAIT.saturating_mul(1 << (self.made - 1).min(16));
        let wait = jittered(doubled.min(self.cap));
        Some(wait.min(left))
    }

    /// How many tries were made.
    pub(crate) fn made(&self) -> u32 {
        self.made
    }
}

/// Between half of `wait` and all of it.
fn jittered(wait: Duration) -> Duration {
    let half = wait / 2;
    let random = uuid::Uuid::new_v4().as_u128() as u64;
    let extra_ms = random % (half.as_millis() as u64 + 1);
    half + Duration::from_millis(extra_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn waits_double_with_jitter_up_to_the_cap_and_end_with_the_budget() {
        let mut tries = Tries::new(Duration::from_secs(30));
        let mut waited = Duration::ZERO;
        let mut waits = Vec::new();
        while let Some(wait) = tries.failed() {
            waits.push(wait);
            tokio::time::advance(wait).await;
            waited += wait;
        }
        assert!(waited >= Duration::from_secs(30), "{waited:?}");
        // 100 ms, then doubling: each wait is between half its step and the step.
        for (i, wait) in waits.iter().take(6).enumerate() {
            let step = (FIRST_WAIT * (1 << i)).min(Duration::from_millis(3750));
            assert!(*wait >= step / 2 && *wait <= step, "try {i}: {wait:?}");
        }
        assert!(waits.iter().all(|w| *w <= Duration::from_millis(3750)));
        assert_eq!(tries.made() as usize, waits.len() + 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_short_budget_keeps_the_waits_short() {
        let mut tries = Tries::new(Duration::from_secs(2));
        while let Some(wait) = tries.failed() {
            assert!(wait <= Duration::from_millis(250), "{wait:?}");
            tokio::time::advance(wait).await;
        }
    }
}
