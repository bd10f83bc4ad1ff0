//! The worst-case timing model behind `UNDO_TTL_TOO_SHORT` and `MANDATE_EXPIRED`.
//!
//! All times are upper bounds in milliseconds, computed from declarations only:
//!
//! - one call of a skill takes at most `attempts × timeoutMs + Σ backoff(n)` for
//!   n = 1 … attempts − 1, where `backoff(n) = min(initialBackoffMs × 2^(n−1), maxBackoffMs)`
//!   (jitter only shortens a wait), plus `approvalTimeoutSeconds` when the skill
//!   `requiresApproval` (the human may answer at the last moment);
//! - a step's compensation takes at most one call of its compensation skill;
//! - a set of steps R, run as their `after` allows with at most k under way at once
//!   (k: the lower of the plan's `maxParallelSteps` and the executor's bound), each
//!   started as soon as its waits are over and a place is free, ends within
//!   `L + ⌈(W − L) / k⌉`, where W is the sum of their worst calls and L the longest
//!   chain of them (steps each waiting for the one before, directly or through others),
//!   by worst call (at every moment, either all k places are busy or a step of a longest
//!   chain still to run is under way). With k = 1, or when R is a chain, this is W;
//! - step `i`'s compensation may be needed as late as: every step up to the last one
//!   whose failure still unwinds (the pivot, or the last step when there is none) that
//!   `i` does not wait for, R(i), runs to its worst case, the last of them fails, and
//!   the compensations of R(i) run first (one at a time, in reverse order of start: any
//!   step of R(i) may have started after `i`) — the bound over R(i) plus the sum of
//!   those compensations must not exceed step `i`'s `undoTtlSeconds`. In a sequence,
//!   R(i) is the steps after `i` up to the last unwinding one;
//! - the whole plan, the bound over all its steps, must end before the mandate's
//!   `notAfter`.
//!
//! Waits for a step listed later (refused, `DEPENDENCY_ORDER` or `DEPENDENCY_CYCLE`)
//! count for who waits for whom, not for the length of chains.
//!
//! Sums saturate instead of overflowing: an absurd declaration yields "forever", which
//! then fails the checks, as it should.

use crate::dependencies::Dependencies;
use crate::reversibility::SkillDeclaration;

/// Worst-case duration of one call of a skill, approvals included.
pub fn call_worst_ms(declaration: &SkillDeclaration) -> u64 {
    let retry = declaration.retry();
    let attempts = u64::from(retry.max_attempts.max(1));
    let mut total = attempts.saturating_mul(declaration.timeout_ms());
    for n in 1..retry.max_attempts.max(1) {
        total = total.saturating_add(retry.backoff_cap_ms(n));
    }
    if declaration.requires_approval {
        let approval = declaration.approval_timeout_seconds.unwrap_or(0);
        total = total.saturating_add(approval.saturating_mul(1000));
    }
    total
}

/// For each step of a sequence, the worst-case time from its success until its
/// compensation is called.
///
/// `forward[k]` is step k's worst call, `undo[k]` its compensation's worst call (0 when it
/// has none), and `last_unwinding` the index of the last step whose failure unwinds.
pub fn undo_deadlines_ms(forward: &[u64], undo: &[u64], last_unwinding: usize) -> Vec<u64> {
    let n = forward.len();
    let mut out = vec![0u64; n];
    let mut later = 0u64;
    for i in (0..n).rev() {
        out[i] = if i < last_unwinding { later } else { 0 };
        if i <= last_unwinding {
            later = later.saturating_add(forward[i]).saturating_add(undo[i]);
        }
    }
    out
}

/// The worst-case time to run the steps marked in `members` (by position), at most
/// `max_parallel` at once: `L + ⌈(W − L) / k⌉` (see the module's documentation).
/// `forward[k]` is step k's worst call.
pub fn makespan_bound_ms(
    dependencies: &Dependencies,
    forward: &[u64],
    members: &[bool],
    max_parallel: u32,
) -> u64 {
    let k = u64::from(max_parallel.max(1));
    let mut total = 0u64;
    let mut longest = 0u64;
    // chain[i]: the longest chain of members ending with member i. Listed in order, a
    // step's waits come before it; a wait for a later step is left out.
    let mut chain = vec![0u64; forward.len()];
    for (i, (&worst, &member)) in forward.iter().zip(members).enumerate() {
        if !member {
            continue;
        }
        total = total.saturating_add(worst);
        let before = dependencies
            .waits_for(i)
            .iter()
            .filter(|&&j| j < i && members.get(j).copied().unwrap_or(false))
            .map(|&j| chain[j])
            .max()
            .unwrap_or(0);
        chain[i] = before.saturating_add(worst);
        longest = longest.max(chain[i]);
    }
    longest.saturating_add(total.saturating_sub(longest).div_ceil(k))
}

/// The worst-case time from step `step`'s success until its compensation is called,
/// over a partial order: the bound over R(step) plus the sum of R(step)'s compensations
/// (see the module's documentation). For a sequence, `undo_deadlines_ms` gives the same
/// for every step at once.
pub fn undo_deadline_ms(
    dependencies: &Dependencies,
    forward: &[u64],
    undo: &[u64],
    last_unwinding: usize,
    max_parallel: u32,
    step: usize,
) -> u64 {
    let waited_for = dependencies.ancestors(step);
    let members: Vec<bool> = (0..forward.len())
        .map(|j| j <= last_unwinding && j != step && !waited_for.get(j).copied().unwrap_or(false))
        .collect();
    let undos = undo
        .iter()
        .zip(&members)
        .filter(|(_, member)| **member)
        .fold(0u64, |sum, (u, _)| sum.saturating_add(*u));
    makespan_bound_ms(dependencies, forward, &members, max_parallel).saturating_add(undos)
}

/// The worst-case time of the whole plan, every step at its worst, at most
/// `max_parallel` at once.
pub fn worst_path_ms(dependencies: &Dependencies, forward: &[u64], max_parallel: u32) -> u64 {
    makespan_bound_ms(
        dependencies,
        forward,
        &vec![true; forward.len()],
        max_parallel,
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn decl(value: serde_json::Value) -> SkillDeclaration {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn call_budget_counts_attempts_backoffs_and_approvals() {
        let d = decl(json!({"class": "retriable", "timeoutMs": 1000,
            "retry": {"maxAttempts": 4, "initialBackoffMs": 100, "maxBackoffMs": 250}}));
        // 4 attempts × 1000 + backoffs 100, 200, 250 (capped)
        assert_eq!(call_worst_ms(&d), 4550);
        let d = decl(
            json!({"class": "retriable", "requiresApproval": true, "approvalTimeoutSeconds": 60}),
        );
        // default 30 s timeout, one attempt, plus the approval wait
        assert_eq!(call_worst_ms(&d), 90_000);
        let d = decl(json!({"class": "retriable", "timeoutMs": u64::MAX,
            "retry": {"maxAttempts": 3, "initialBackoffMs": u64::MAX, "maxBackoffMs": u64::MAX}}));
        assert_eq!(call_worst_ms(&d), u64::MAX);
    }

    #[test]
    fn deadlines_sum_later_steps_up_to_the_last_unwinding_one() {
        let forward = [10, 20, 30, 40];
        let undo = [1, 2, 3, 0];
        // Step 3 is past the last unwinding step (2): it never matters.
        assert_eq!(
            undo_deadlines_ms(&forward, &undo, 2),
            vec![20 + 2 + 30 + 3, 30 + 3, 0, 0]
        );
        assert_eq!(undo_deadlines_ms(&forward, &undo, 3), vec![95, 73, 40, 0]);
    }

    use crate::dependencies::order;

    #[test]
    fn the_bound_is_the_longest_chain_plus_the_rest_shared_out() {
        // s0 → {s1, s2, s3} → s4.
        let d = order(&[
            None,
            Some(&["s0"]),
            Some(&["s0"]),
            Some(&["s0"]),
            Some(&["s1", "s2", "s3"]),
        ]);
        let forward = [10, 40, 30, 21, 5];
        let all = [true; 5];
        // W = 106, L = 10 + 40 + 5 = 55: 55 + ⌈51 / k⌉.
        assert_eq!(makespan_bound_ms(&d, &forward, &all, 1), 106);
        assert_eq!(makespan_bound_ms(&d, &forward, &all, 2), 55 + 26);
        assert_eq!(makespan_bound_ms(&d, &forward, &all, 3), 55 + 17);
        assert_eq!(
            makespan_bound_ms(&d, &forward, &all, 0),
            106,
            "k is at least 1"
        );
        assert_eq!(worst_path_ms(&d, &forward, 64), 55 + 1);
        // Only members count, and chains only through members.
        let sides = [false, true, true, true, false];
        assert_eq!(makespan_bound_ms(&d, &forward, &sides, 3), 40 + 17);
        // Saturating.
        assert_eq!(worst_path_ms(&d, &[u64::MAX, 1, 1, 1, 1], 2), u64::MAX);
    }

    #[test]
    fn a_partial_order_undo_waits_for_every_step_it_does_not_wait_for() {
        // s0 → {s1, s2} → s3 (last unwinding) → s4.
        let d = crate::dependencies::diamond();
        let forward = [10, 20, 30, 40, 50];
        let undo = [1, 2, 3, 0, 0];
        // s1's undo may wait for s2 (alongside it) and s3, and s2's undo: with k = 2,
        // L = 30 + 40 over {s2, s3}, W = 70.
        assert_eq!(undo_deadline_ms(&d, &forward, &undo, 3, 2, 1), 70 + 3);
        // s0 waits for the diamond's rest: L = 30 + 40, W = 90, ⌈20 / 2⌉.
        assert_eq!(undo_deadline_ms(&d, &forward, &undo, 3, 2, 0), 80 + 5);
        assert_eq!(undo_deadline_ms(&d, &forward, &undo, 3, 1, 0), 90 + 5);
        // The last unwinding step and those after it wait for nothing.
        assert_eq!(undo_deadline_ms(&d, &forward, &undo, 3, 2, 3), 0);
        assert_eq!(undo_deadline_ms(&d, &forward, &undo, 3, 2, 4), 0);
    }

    proptest::proptest! {
        /// Over a sequence, the partial-order model is the sequential one, for any k.
        #[test]
        fn a_sequence_is_timed_as_before(
            steps in proptest::collection::vec((0u64..1 << 40, 0u64..1 << 40), 1..12),
            last in 0usize..12,
            k in 1u32..10,
        ) {
            let (forward, undo): (Vec<u64>, Vec<u64>) = steps.into_iter().unzip();
            let last = last.min(forward.len() - 1);
            let d = order(&vec![None; forward.len()]);
            let sequential = undo_deadlines_ms(&forward, &undo, last);
            for (i, expected) in sequential.into_iter().enumerate() {
                proptest::prop_assert_eq!(undo_deadline_ms(&d, &forward, &undo, last, k, i), expected);
            }
            proptest::prop_assert_eq!(
                worst_path_ms(&d, &forward, k),
                forward.iter().fold(0, |a: u64, b| a.saturating_add(*b))
            );
        }
    }
}
