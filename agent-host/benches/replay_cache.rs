//! The JWT replay cache's cost at its cap: the memory of a full issuer share with
//! 128-byte jtis, and the time of an admission while filling it and in a steady state
//! where as many tokens expire as arrive. A figure, not an assertion.
//!
//! `cargo bench -p agent-host --bench replay_cache`

// The cache is private to the crate: its source is compiled in here as it is there.
#[allow(dead_code, unused_imports)]
#[path = "../src/replay.rs"]
mod replay;

use agent_host::auth::MAX_UNEXPIRED_TOKENS_PER_ISSUER;
use replay::{Admission, ReplayCache};

fn resident_bytes() -> usize {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<usize>().ok())
        .map_or(0, |pages| pages * 4096)
}

fn main() {
    let cap = MAX_UNEXPIRED_TOKENS_PER_ISSUER;
    let jti = |i: usize| format!("{i:0>128}");
    let before = resident_bytes();
    let mut cache = ReplayCache::new(1, cap, 30);
    let started = std::time::Instant::now();
    for i in 0..cap {
        // Lifetimes of 1..300 s, so entries expire out of insertion order.
        let exp = 1_000 + (i % 300) as i64;
        if cache.admit(0, &jti(i), exp, 0) != Admission::Fresh {
            eprintln!("token {i} was not admitted while filling: the cache's cap changed?");
            std::process::exit(1);
        }
    }
    let filled = started.elapsed();
    let after = resident_bytes();
    println!(
        "{cap} entries: {:.1} MiB resident, {:.0} ns per admission while filling",
        (after.saturating_sub(before)) as f64 / 1048576.0,
        filled.as_nanos() as f64 / cap as f64
    );
    // Steady state: each second a 1/300 of the entries expire and as many arrive.
    let started = std::time::Instant::now();
    let mut admitted = 0usize;
    for second in 0..300 {
        let now = 1_031 + second;
        for k in 0..cap / 300 {
            let i = cap + second as usize * (cap / 300) + k;
            if cache.admit(0, &jti(i), now + 300, now) == Admission::Fresh {
                admitted += 1;
            }
        }
    }
    println!(
        "steady state: {:.0} ns per admission ({admitted} admitted, {} held)",
        started.elapsed().as_nanos() as f64 / admitted.max(1) as f64,
        cache.len()
    );
}
