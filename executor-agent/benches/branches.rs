//! Parallel branches on the path users take: one saga at a time, a signed plan under a
//! principal's mandate sent over A2A with a planner JWT to the real `executor-agent`
//! binary (on its SQLite file), answered when the task ends. The tools answer at once,
//! except `budget.reserve` and `sandbox.provision`, which take `BRANCHES_STEP_MS` (20)
//! each: the supplier-onboarding plan as a sequence, and as the diamond that lets those
//! two run side by side. `BRANCHES_SAGAS` (40) sagas of each shape, interleaved; prints
//! each shape's median and 90th-percentile latency, and their difference, which a
//! parallel run should bring down by about one slow step.
//!
//! `cargo bench -p executor-agent --bench branches`

use std::process::Command;
use std::time::{Duration, Instant};

use agent_host::sdk::{SendMessageResponse, TaskState};
use agent_host::{AgentClient, OutboundCall, mint_jwt};
use sagaplane_examples::supplier::AGENTS;
use serde_json::{Value, json};

// What the benches share; this one uses part of it.
#[allow(dead_code)]
#[path = "whole_path/setup.rs"]
mod setup;
// Its agent without delays is the other benches'.
#[allow(dead_code)]
#[path = "saga/tool_agent.rs"]
mod tool_agent;

use setup::{Executor, Keys};

pub(crate) const TOOL_TOKEN: &str = "tool-secret";

const SEQUENCE: (&str, &str) = (
    "examples/plans/supplier-onboarding.json",
    "sg_demo_supplier_onboarding",
);
const BRANCHES: (&str, &str) = (
    "examples/plans/supplier-onboarding-parallel.json",
    "sg_demo_supplier_parallel",
);

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let sagas: usize = env_or("BRANCHES_SAGAS", 40);
    let step = Duration::from_millis(env_or("BRANCHES_STEP_MS", 20));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let keys = Keys::generate();
    let slow = [("budget.reserve", step), ("sandbox.provision", step)];
    let urls: Vec<String> = AGENTS
        .iter()
        .map(|_| tool_agent::start_slow_tool_agent(&runtime, &slow))
        .collect();
    let executor = setup::spawn_executor(
        Command::new(env!("CARGO_BIN_EXE_executor-agent")),
        dir.path(),
        &keys,
        None,
        &[],
    );
    runtime.block_on(setup::register(
        &executor.url,
        &keys.platform,
        &urls,
        &|_, _| {},
    ));
    let shapes = [SEQUENCE, BRANCHES];
    let templates: Vec<String> = shapes
        .iter()
        .map(|(path, _)| setup::plan_template_of(&keys, "md_branches", path))
        .collect();
    let mut latencies: Vec<Vec<f64>> = vec![Vec::new(); shapes.len()];
    // One of each first, not counted: connections and caches warm.
    for n in 0..=sagas {
        for (k, ((_, id), template)) in shapes.iter().zip(&templates).enumerate() {
            let took = runtime.block_on(one_saga(&executor, &keys, template, id, n));
            if n > 0 {
                latencies[k].push(took.as_secs_f64() * 1000.0);
            }
        }
    }
    println!(
        "branches: {sagas} lone sagas of each shape, interleaved; budget.reserve and sandbox.provision take {} ms at their tools, the other four answer at once",
        step.as_millis()
    );
    let mut medians = Vec::new();
    for ((path, _), values) in shapes.iter().zip(&mut latencies) {
        values.sort_by(f64::total_cmp);
        let median = quantile(values, 0.5);
        medians.push(median);
        println!(
            "  {path}: median {median:.1} ms, p90 {:.1} ms",
            quantile(values, 0.9)
        );
    }
    println!(
        "  the branches save {:.1} ms of the median (one slow step is {} ms)",
        medians[0] - medians[1],
        step.as_millis()
    );
}

/// Sends the plan of `template` as saga `n` and waits for its task to end: how long it
/// took, seen by the client.
async fn one_saga(
    executor: &Executor,
    keys: &Keys,
    template: &str,
    id: &str,
    n: usize,
) -> Duration {
    let saga = format!("{id}_{n}");
    let mut plan: Value = serde_json::from_str(&template.replace(id, &saga)).expect("the plan");
    keys.planner.sign_in_place(&mut plan).expect("signed");
    let call = OutboundCall {
        bearer: Some(mint_jwt(&keys.planner, keys.planner.kid(), "executor", 60).expect("a JWT")),
        ..OutboundCall::default()
    };
    let request = agent_host::user_request(None, Some(json!({ "plan": plan })), None);
    let client = AgentClient::new(&executor.url).expect("a client");
    let sent = Instant::now();
    match client.send(&call, &request).await {
        Ok(SendMessageResponse::Task(task)) if task.status.state == TaskState::Completed => {
            sent.elapsed()
        }
        other => panic!("saga {saga}: {other:?}"),
    }
}

fn quantile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let at = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}
