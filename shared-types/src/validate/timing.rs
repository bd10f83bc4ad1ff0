//! The worst-case timing model behind `UNDO_TTL_TOO_SHORT` and `MANDATE_EXPIRED`.
//!
//! All times are upper bounds in milliseconds, computed from declarations only:
//!
//! - one call of a skill takes at most `attempts × timeoutMs + Σ backoff(n)` for
//!   n = 1 … attempts − 1, where `backoff(n) = min(initialBackoffMs × 2^(n−1), maxBackoffMs)`
//!   (jitter only shortens a wait), plus `approvalTimeoutSeconds` when the skill
//!   `requiresApproval` (the human may answer at the last moment);
//! - a step's compensation takes at most one call of its compensation skill;
//! - step `i`'s compensation may be needed as late as: every later step up to the last
//!   one whose failure still unwinds (the pivot, or the last step when there is none)
//!   runs to its worst case, the last of them fails, and the compensations of those
//!   later steps run first (reverse order) — the sum of those forward calls and
//!   compensations must not exceed step `i`'s `undoTtlSeconds`;
//! - the whole forward path, every step at its worst, must end before the mandate's
//!   `expiresAt`.
//!
//! Sums saturate instead of overflowing: an absurd declaration yields "forever", which
//! then fails the checks, as it should.

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

/// For each step, the worst-case time from its success until its compensation is called.
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
}
