//! The manual's "getting started" run as written: every `sh` block of
//! `docs/getting-started.md`, in order, in one bash, with the workspace's own binaries
//! (`sagaplane`, `executor-agent`, `planner-agent`, `supplier-tool`, `checkout-mcp`) first
//! on `PATH`. Blocks fenced `sh-notest` are shown to the reader and not run. Judged from
//! what the commands print: each demo ended as its mode must, the goal sent to the served
//! demo completed, the saga that waited for a person was answered by the approver and
//! completed, and the console's API answered.

use std::time::Instant;

use sagaplane_e2e::{demo_binaries, run_blocks, shell_blocks, workspace_root};

const PAGE: &str = "docs/getting-started.md";

/// Runs the page's blocks: what they printed (stdout and stderr).
fn run_page() -> String {
    let bin = demo_binaries();
    let page = std::fs::read_to_string(workspace_root().join(PAGE)).unwrap();
    let mut blocks = shell_blocks(&page, None);
    assert!(blocks.len() >= 8, "{PAGE} lost its commands: {blocks:#?}");
    // One stream, in the order things happened: the checks below read it in order.
    blocks.insert(0, "exec 2>&1".to_owned());
    let started = Instant::now();
    let (ok, said) = run_blocks(&blocks, &bin, &[], "", 300);
    let took = started.elapsed();
    assert!(ok, "{PAGE} failed after {took:?}:\n{said}");
    // Seen with --nocapture.
    eprintln!("{said}\n{PAGE} ran in {took:?}");
    said
}

/// Asserts that `said` holds each of `lines`, in that order.
fn in_order(said: &str, lines: &[&str]) {
    let mut rest = said;
    for line in lines {
        let Some(at) = rest.find(line) else {
            panic!("{PAGE} did not print {line:?} where expected:\n{said}");
        };
        rest = &rest[at + line.len()..];
    }
}

#[test]
fn getting_started_runs_as_written() {
    let said = run_page();
    in_order(
        &said,
        &[
            // The demo: every step once.
            "as expected: COMPLETED, every effect exactly once, every compensated effect undone",
            // --fail-at compliance: three attempts, then the three steps undone in reverse.
            "s3: started (attempt 3)",
            "s2: compensated",
            "s1: compensated",
            "s0: compensated",
            "as expected: FAILED, every effect exactly once, every compensated effect undone",
            // --crash-executor-at s3: killed, restarted, completed.
            "executor killed with SIGKILL while s3 was in flight; restarted on the same journal",
            "as expected: COMPLETED, every effect exactly once",
            // demo checkout: without and with the server's recovery metadata.
            "reservations: res_0001 2 x MUG-RED HELD    reservations: res_0001 2 x MUG-RED released",
            "payments:     pay_0001 4200 EUR CAPTURED   payments:     pay_0001 4200 EUR refunded",
            // demo --serve: a goal of our own, completed.
            "agents up",
            "the executor completed its task",
            "COMPLETED",
            "console: http://127.0.0.1:",
            // --dry-run: the signed plan only.
            "\"sagaId\"",
            // A goal over the mandate's per-saga cap: refused by the planner.
            "REJECTED",
            // The executor's task, read with the planner's key.
            "vendor.create          succeeded",
            // The console's API, scripted.
            "\"role\":\"operator\"",
            "\"state\":\"completed\"",
            // The mandate's account: one saga spent 80.00 EUR.
            "spent 8000",
            // demo --serve --fail-at email: the saga waits for a person...
            "exit status 3: waiting for a person",
            "INPUT_REQUIRED",
            // ... the approver answers, and it completes.
            "resolvedManually",
            "COMPLETED",
        ],
    );
}
