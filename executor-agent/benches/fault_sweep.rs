//! The fault sweep (issue 42): what users can run to see how the executor behaves when
//! the tools it calls misbehave. Three `executor-agent` replicas on one PostgreSQL
//! database drive `FAULT_SWEEP_SAGAS` supplier-onboarding sagas (500 by default), sent
//! by a client that signs each plan under a principal's mandate and mints a planner JWT,
//! spread over the replicas; the third replica is SIGKILLed once a third of the sagas are
//! sent, and the others take its sagas over. The six tool agents (in this process) meet a
//! fault on `FAULT_SWEEP_RATE` of their calls (0.3): transient failures, timeouts after
//! the effect and before it, permanent failures, failing compensations, failing status
//! calls (`fault_sweep/chaos_tool.rs`). The capture is declared not idempotent, and its
//! tool applies each call of it afresh: an unknown outcome of it must be asked of the
//! status skill or put to a person, never retried. It runs twice: with the payments
//! agent's `verify` declared, and without it.
//!
//! Judged from the tool agents' own ledger (`fault_sweep/judge.rs`), every saga must end
//! completed (every step's effect in place, nothing undone), compensated (no charge,
//! every effect undone) or waiting for a person with a complete record (the step asked
//! about is the one in doubt, every other effect in place or undone as the record says);
//! no effect is applied twice (counted per key by the tools); no effect is left that
//! neither the task nor a person's queue accounts for. It prints what each run saw:
//! endings, violations, faults, and how many unknown outcomes the status skill settled
//! and how many went to a person. It exits 1 on a violation.
//!
//! `scripts/with-postgres cargo bench -p executor-agent --bench fault_sweep` (or
//! `FAULT_SWEEP_STORE=postgres://…`); `FAULT_SWEEP_SEED` repeats a run's draws;
//! `FAULT_SWEEP_MAX_ATTEMPTS=N` gives every skill N attempts instead of its card's policy
//! (with 1, no unknown outcome is settled by a retry under its key).

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_host::sdk::{SendMessageResponse, TaskState};
use agent_host::{AgentClient, OutboundCall, mint_jwt};
use futures::StreamExt;
use serde_json::{Value, json};

#[path = "fault_sweep/chaos_tool.rs"]
mod chaos_tool;
#[path = "fault_sweep/judge.rs"]
mod judge;
#[path = "whole_path/setup.rs"]
mod setup;
// For its results, shaped as the cards' `outputSchema`s (its agent is not used here).
#[allow(dead_code)]
#[path = "saga/tool_agent.rs"]
mod tool_agent;

use chaos_tool::{Chaos, Ledger, NOT_IDEMPOTENT};
use setup::{Executor, Keys};

pub(crate) const TOOL_TOKEN: &str = "tool-secret";

/// Each skill's timeout in the sweep's cards, and how long a timed-out call is held.
const TIMEOUT_MS: u64 = 400;
const HELD: Duration = Duration::from_millis(700);
/// How long the sagas may take to end once all are sent.
const PATIENCE: Duration = Duration::from_secs(180);

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// How one run ended.
#[derive(Debug, Default)]
struct Outcome {
    ended: BTreeMap<&'static str, usize>,
    violations: Vec<String>,
    seconds: f64,
    calls: u64,
    faults: BTreeMap<String, u64>,
    verified_applied: u64,
    verified_not_applied: u64,
    status_failed: u64,
    retried_after_timeout: u64,
    /// Calls of the capture (not idempotent) made again under a key that timed out.
    not_idempotent_again: u64,
    /// Captures applied, and keys applied more than once (each a violation).
    captures: u64,
    applied_twice: usize,
    /// Sagas waiting for a person about an unknown outcome (else a definite failure),
    /// and how many at each step.
    person_in_doubt: usize,
    in_doubt_at: BTreeMap<String, usize>,
}

fn main() {
    let Some(server) = std::env::var("FAULT_SWEEP_STORE")
        .ok()
        .or_else(|| std::env::var("SAGAPLANE_TEST_PG").ok())
        .filter(|url| !url.is_empty())
    else {
        eprintln!(
            "the fault sweep runs replicas on PostgreSQL: `scripts/with-postgres cargo bench -p executor-agent --bench fault_sweep`, or set FAULT_SWEEP_STORE=postgres://…"
        );
        std::process::exit(2);
    };
    let sagas: usize = env_or("FAULT_SWEEP_SAGAS", 500);
    let rate: f64 = env_or("FAULT_SWEEP_RATE", 0.3);
    let seed: u64 = env_or("FAULT_SWEEP_SEED", 42);
    let attempts: Option<u32> = std::env::var("FAULT_SWEEP_MAX_ATTEMPTS")
        .ok()
        .and_then(|n| n.parse().ok());
    println!(
        "fault sweep: {sagas} sagas over 3 replicas on PostgreSQL, the third SIGKILLed after {} are sent ({} of them to it); faults on {:.0}% of tool calls (seed {seed}); skills time out after {TIMEOUT_MS} ms; {}",
        sagas / 3,
        (0..sagas / 3).filter(|n| n % 3 == 2).count(),
        rate * 100.0,
        attempts.map_or(
            "each skill's attempts as its card declares".to_owned(),
            |n| format!("{n} attempt(s) per call")
        )
    );
    let mut failed = false;
    for verify in [true, false] {
        let outcome = sweep(&server, verify, attempts, sagas, rate, seed);
        failed |= !outcome.violations.is_empty();
        report(verify, &outcome);
    }
    if failed {
        std::process::exit(1);
    }
}

fn report(verify: bool, o: &Outcome) {
    let ended = |what: &str| o.ended.get(what).copied().unwrap_or(0);
    println!(
        "\n{}: {:.0} s; completed {}, compensated {}, waiting for a person {}, not ended {}; violations {}",
        if verify {
            "with payments.capture's verify"
        } else {
            "without verify"
        },
        o.seconds,
        ended("completed"),
        ended("compensated"),
        ended("person"),
        ended("not ended"),
        o.violations.len()
    );
    for violation in o.violations.iter().take(10) {
        println!("  violation: {violation}");
    }
    let faults: Vec<String> = o.faults.iter().map(|(k, n)| format!("{k} {n}")).collect();
    println!("  tool calls {}; faults: {}", o.calls, faults.join(", "));
    println!(
        "  unknown outcomes: {} calls timed out; {} followed by a call under the same key (a retry, or the call sent again by the replica that took the saga over); {} asked of the status skill ({} applied, {} not applied; {} status calls failed); {} put to a person",
        o.faults.get("TimeoutAfterEffect").copied().unwrap_or(0)
            + o.faults.get("TimeoutBeforeEffect").copied().unwrap_or(0),
        o.retried_after_timeout,
        o.verified_applied + o.verified_not_applied,
        o.verified_applied,
        o.verified_not_applied,
        o.status_failed,
        o.person_in_doubt
    );
    println!(
        "  {NOT_IDEMPOTENT} (not idempotent): {} applied; {} called again under a key that timed out; effects applied more than once: {}",
        o.captures, o.not_idempotent_again, o.applied_twice
    );
    let at: Vec<String> = o
        .in_doubt_at
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    println!(
        "  sagas waiting for a person: {} about an unknown outcome ({}), {} about a definite failure past the pivot or of an undo",
        o.person_in_doubt,
        at.join(", "),
        ended("person") - o.person_in_doubt
    );
}

/// One run: fresh database, tool agents and replicas; `sagas` sent and waited for.
fn sweep(
    server: &str,
    verify: bool,
    attempts: Option<u32>,
    sagas: usize,
    rate: f64,
    seed: u64,
) -> Outcome {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let name = format!(
        "fault_sweep_{}_{}",
        std::process::id(),
        if verify { "verify" } else { "plain" }
    );
    let store = setup::fresh_database(server, &name);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let keys = Keys::generate();
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let chaos = Arc::new(Chaos {
        rate,
        seed: AtomicU64::new(seed),
        hold: HELD,
    });
    let urls: Vec<String> = runtime.block_on(async {
        let mut urls = Vec::new();
        for _ in 0..6 {
            urls.push(chaos_tool::start(ledger.clone(), chaos.clone()).await);
        }
        urls
    });
    let binary = env!("CARGO_BIN_EXE_executor-agent");
    let mut replicas: Vec<Executor> = (0..3)
        .map(|n| {
            setup::spawn_executor(
                Command::new(binary),
                &dir.path().join(format!("replica-{n}")),
                &keys,
                Some(&store),
                &["--lease-ms", "2000", "--renew-ms", "500"],
            )
        })
        .collect();
    let tweak = move |_: &str, card: &mut Value| {
        let skills = "/capabilities/extensions/0/params/skills";
        let declared = card.pointer_mut(skills).and_then(Value::as_object_mut);
        for declaration in declared.into_iter().flat_map(|d| d.values_mut()) {
            declaration["timeoutMs"] = json!(TIMEOUT_MS);
            if let Some(retry) = declaration.get_mut("retry") {
                retry["initialBackoffMs"] = json!(20);
                retry["maxBackoffMs"] = json!(50);
                if let Some(n) = attempts {
                    retry["maxAttempts"] = json!(n);
                }
            }
            if !verify && let Some(members) = declaration.as_object_mut() {
                members.remove("verify");
            }
        }
        // The capture as its tool behaves: a call made again is a charge made again.
        if let Some(capture) = card.pointer_mut(&format!("{skills}/{NOT_IDEMPOTENT}")) {
            capture["idempotent"] = json!(false);
        }
    };
    runtime.block_on(setup::register(
        &replicas[0].url,
        &keys.platform,
        &urls,
        &tweak,
    ));
    let template = setup::plan_template(&keys, "md_fault_sweep");
    let started = Instant::now();
    let urls: Vec<String> = replicas.iter().map(|r| r.url.clone()).collect();
    // Sent in thirds: the third replica dies after the first.
    let mut sent = Vec::new();
    for third in 0..3 {
        let range = (third * sagas / 3)..((third + 1) * sagas / 3);
        let alive = if third == 0 { 3 } else { 2 };
        sent.extend(runtime.block_on(send_all(range, &urls[..alive], &keys, &template)));
        if third == 0 {
            // SIGKILL: its sagas are taken over once its lease lapses.
            let _ = replicas[2].child.kill();
        }
    }
    let tasks = runtime.block_on(wait_all(&sent, &urls[..2], &keys));
    let seconds = started.elapsed().as_secs_f64();
    let ledger = ledger.lock().expect("the ledger");
    let mut outcome = judge::judge(&tasks, &ledger);
    outcome.seconds = seconds;
    outcome.calls = ledger.calls;
    outcome.faults = ledger
        .faults
        .iter()
        .map(|(k, n)| (format!("{k:?}"), *n))
        .collect();
    outcome.retried_after_timeout = ledger.retried_after_timeout;
    outcome.not_idempotent_again = ledger.not_idempotent_again;
    outcome.captures = ledger
        .applications
        .iter()
        .filter(|(key, _)| ledger.effects[*key].0 == NOT_IDEMPOTENT)
        .map(|(_, n)| u64::from(*n))
        .sum();
    outcome.verified_applied = ledger.verified_applied;
    outcome.verified_not_applied = ledger.verified_not_applied;
    outcome.status_failed = ledger
        .faults
        .get(&chaos_tool::Fault::StatusFails)
        .copied()
        .unwrap_or(0);
    drop(replicas);
    outcome
}

fn planner_call(keys: &Keys) -> OutboundCall {
    OutboundCall {
        bearer: Some(mint_jwt(&keys.planner, keys.planner.kid(), "executor", 600).expect("a JWT")),
        ..OutboundCall::default()
    }
}

/// Sends the sagas numbered `range`, 32 at a time, each to a replica of `urls` in turn
/// (the next one when it cannot be reached), answered once its task exists: (saga id,
/// task id).
async fn send_all(
    range: std::ops::Range<usize>,
    urls: &[String],
    keys: &Keys,
    template: &str,
) -> Vec<(String, String)> {
    futures::stream::iter(range)
        .map(|n| async move {
            let saga = format!("sg_sweep_{n:05}");
            let mut plan: Value =
                serde_json::from_str(&template.replace("sg_demo_supplier_onboarding", &saga))
                    .expect("the plan");
            keys.planner.sign_in_place(&mut plan).expect("signed");
            let mut request = agent_host::user_request(None, Some(json!({ "plan": plan })), None);
            request.configuration = Some(agent_host::sdk::SendMessageConfiguration {
                accepted_output_modes: None,
                task_push_notification_config: None,
                history_length: None,
                return_immediately: Some(true),
            });
            for attempt in 0..urls.len() {
                let url = &urls[(n + attempt) % urls.len()];
                let client = AgentClient::new(url).expect("a client");
                if let Ok(SendMessageResponse::Task(task)) =
                    client.send(&planner_call(keys), &request).await
                {
                    return (saga, task.id);
                }
            }
            panic!("no replica took saga {saga}");
        })
        .buffer_unordered(32)
        .collect()
        .await
}

/// Each sent saga's task once it ended or waits for a person (read through the live
/// replicas), or as it stands when `PATIENCE` ran out.
async fn wait_all(
    sent: &[(String, String)],
    urls: &[String],
    keys: &Keys,
) -> Vec<(String, Option<agent_host::sdk::Task>)> {
    let deadline = Instant::now() + PATIENCE;
    futures::stream::iter(sent.iter().cloned())
        .map(|(saga, task_id)| async move {
            let mut last = None;
            loop {
                let client = AgentClient::new(&urls[0]).expect("a client");
                if let Ok(task) = client.get_task(&planner_call(keys), &task_id).await {
                    let settled = task.status.state.is_terminal()
                        || task.status.state == TaskState::InputRequired;
                    last = Some(task);
                    if settled {
                        break;
                    }
                }
                if Instant::now() > deadline {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            (saga, last)
        })
        .buffer_unordered(64)
        .collect()
        .await
}
