//! The replay cache of accepted JWTs: each `(issuer, jti)` is accepted once, and
//! remembered for as long as its token could still be presented (until `exp` plus the
//! clock skew). Entries leave in expiry order through a min-heap kept beside the set, so
//! a request costs O(log n) amortised (each entry is pushed and popped once), never a
//! scan of the cache. Each issuer may hold at most `per_issuer_cap` unexpired entries:
//! a flood of valid tokens cannot grow memory without bound, and past the cap a new token
//! is refused (never accepted unrecorded) until older ones expire. The cap is per issuer
//! so that one trusted caller filling its share does not lock the others out.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};
use std::sync::Arc;

/// One accepted token: its issuer (an index into the policy's trusted issuers) and jti.
#[derive(Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Entry {
    issuer: usize,
    jti: Box<str>,
}

/// What the cache says about a token whose signature and claims were checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// First use: recorded, and the request may go on.
    Fresh,
    /// The `(issuer, jti)` was already accepted and has not expired.
    Replayed,
    /// The issuer already has `per_issuer_cap` unexpired tokens recorded.
    Full,
}

#[derive(Debug)]
pub(crate) struct ReplayCache {
    seen: HashSet<Arc<Entry>>,
    /// `(forget after, entry)`, earliest first.
    by_expiry: BinaryHeap<Reverse<(i64, Arc<Entry>)>>,
    per_issuer: Vec<usize>,
    per_issuer_cap: usize,
    skew: i64,
}

impl ReplayCache {
    /// A cache for `issuers` issuers; a token is remembered until `exp + skew`.
    pub(crate) fn new(issuers: usize, per_issuer_cap: usize, skew: i64) -> Self {
        Self {
            seen: HashSet::new(),
            by_expiry: BinaryHeap::new(),
            per_issuer: vec![0; issuers],
            per_issuer_cap,
            skew,
        }
    }

    /// Records the token `(issuer, jti)`, valid until `exp`, at time `now`, unless it was
    /// already used or its issuer is at the cap. Expired entries are dropped first.
    pub(crate) fn admit(&mut self, issuer: usize, jti: &str, exp: i64, now: i64) -> Admission {
        self.forget_expired(now);
        let entry = Entry {
            issuer,
            jti: jti.into(),
        };
        if self.seen.contains(&entry) {
            return Admission::Replayed;
        }
        let Some(count) = self.per_issuer.get_mut(issuer) else {
            return Admission::Full;
        };
        if *count >= self.per_issuer_cap {
            return Admission::Full;
        }
        *count += 1;
        let entry = Arc::new(entry);
        self.seen.insert(entry.clone());
        self.by_expiry
            .push(Reverse((exp.saturating_add(self.skew), entry)));
        Admission::Fresh
    }

    /// Drops the entries whose tokens can no longer be presented (`exp + skew < now`).
    fn forget_expired(&mut self, now: i64) {
        while let Some(Reverse((until, _))) = self.by_expiry.peek() {
            if *until >= now {
                break;
            }
            let Some(Reverse((_, entry))) = self.by_expiry.pop() else {
                break;
            };
            self.seen.remove(&*entry);
            if let Some(count) = self.per_issuer.get_mut(entry.issuer) {
                *count = count.saturating_sub(1);
            }
        }
    }

    /// How many tokens are remembered.
    pub(crate) fn len(&self) -> usize {
        self.seen.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_accepted_once_until_it_expires() {
        let mut cache = ReplayCache::new(1, 10, 30);
        assert_eq!(cache.admit(0, "a", 1_000, 900), Admission::Fresh);
        assert_eq!(cache.admit(0, "a", 1_000, 901), Admission::Replayed);
        // Still presentable at exp + skew: still remembered.
        assert_eq!(cache.admit(0, "a", 1_000, 1_030), Admission::Replayed);
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn expired_entries_are_evicted_in_expiry_order() {
        let mut cache = ReplayCache::new(2, 10, 30);
        // Inserted out of expiry order.
        assert_eq!(cache.admit(0, "late", 2_000, 900), Admission::Fresh);
        assert_eq!(cache.admit(1, "early", 1_000, 900), Admission::Fresh);
        assert_eq!(cache.admit(0, "middle", 1_500, 900), Admission::Fresh);
        assert_eq!(cache.len(), 3);

        // Past early's exp + skew: only it goes.
        assert_eq!(cache.admit(1, "x", 1_100, 1_031), Admission::Fresh);
        assert_eq!(cache.len(), 3, "early evicted, x added");
        assert!(!cache.seen.contains(&Entry {
            issuer: 1,
            jti: "early".into()
        }));
        assert_eq!(cache.per_issuer, vec![2, 1]);

        // Far in the future: everything is gone, and the jti may be seen anew (its old
        // token is expired, so it cannot be replayed any more).
        assert_eq!(cache.admit(0, "late", 9_000, 5_000), Admission::Fresh);
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.by_expiry.len(), 1);
        assert_eq!(cache.per_issuer, vec![1, 0]);
    }

    #[test]
    fn the_cap_refuses_new_tokens_and_never_forgets_a_live_one() {
        let mut cache = ReplayCache::new(2, 3, 30);
        for jti in ["a", "b", "c"] {
            assert_eq!(cache.admit(0, jti, 1_000, 900), Admission::Fresh);
        }
        assert_eq!(cache.admit(0, "d", 1_000, 900), Admission::Full);
        // A replay at the cap is still a replay, and still refused.
        assert_eq!(cache.admit(0, "a", 1_000, 900), Admission::Replayed);
        // The other issuer has its own share.
        assert_eq!(cache.admit(1, "a", 1_000, 900), Admission::Fresh);
        assert_eq!(cache.len(), 4);
        // Once the first three expire, issuer 0 may go on.
        assert_eq!(cache.admit(0, "d", 2_000, 1_031), Admission::Fresh);
        assert_eq!(cache.admit(0, "a", 2_000, 1_031), Admission::Fresh);
    }

    #[test]
    fn an_unknown_issuer_index_is_refused() {
        let mut cache = ReplayCache::new(1, 3, 30);
        assert_eq!(cache.admit(5, "a", 1_000, 900), Admission::Full);
        assert_eq!(cache.len(), 0);
    }
}
