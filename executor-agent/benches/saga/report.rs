//! The benchmark's report: durations in milliseconds, per-step figures, nearest-rank
//! quantiles, and the printed summary of each kind of run.

use std::time::Duration;

use crate::{Alone, Load, STEPS, TOOL_THREADS};

/// The `p`-quantile (0..=1) of `samples` (nearest rank).
pub(crate) fn quantile(samples: &[Duration], p: f64) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

pub(crate) fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

pub(crate) fn per_step(d: Duration, steps: u64) -> String {
    ms(d / steps.max(1) as u32)
}

pub(crate) fn print_load(name: &str, load: &Load, direct: Option<&Load>) {
    let steps = load.steps;
    println!(
        "  {name}: {:.0} steps/s ({steps} steps in a {:.2} s window); saga end to end p50 {}, p99 {} ({} sagas ended in the window)",
        load.steps_per_second(),
        load.window.as_secs_f64(),
        ms(quantile(&load.run_latencies, 0.5)),
        ms(quantile(&load.run_latencies, 0.99)),
        load.run_latencies.len(),
    );
    println!(
        "    fsyncs (group commits of journal and task store) per step: {:.3}",
        load.commits.0 as f64 / steps as f64,
    );
    println!(
        "    CPU per step: executor {} (process {} minus tool agents {})",
        per_step(load.cpu.executor(), steps),
        per_step(load.cpu.process, steps),
        per_step(load.cpu.group(TOOL_THREADS), steps),
    );
    if let Some(direct) = direct {
        let client_per_call = direct.cpu.executor() / direct.steps.max(1) as u32;
        let executor_per_step = load.cpu.executor() / steps.max(1) as u32;
        println!(
            "    CPU per step beyond the calls themselves: {} (executor per step {} minus the calling side's {} per direct call)",
            ms(executor_per_step.saturating_sub(client_per_call)),
            ms(executor_per_step),
            ms(client_per_call),
        );
    }
    let breakdown: Vec<String> = load
        .cpu
        .by_group
        .iter()
        .map(|(group, d)| format!("{group} {}", per_step(*d, steps)))
        .collect();
    println!("    CPU per step by thread: {}", breakdown.join(", "));
    println!("    {}", load.cpu.machine_line(load.window));
}

pub(crate) fn print_direct(name: &str, direct: &Load) {
    let calls = direct.steps;
    println!(
        "  {name}: {:.0} calls/s ({calls} calls in a {:.2} s window); six calls p50 {}, p99 {}",
        direct.steps_per_second(),
        direct.window.as_secs_f64(),
        ms(quantile(&direct.run_latencies, 0.5)),
        ms(quantile(&direct.run_latencies, 0.99)),
    );
    println!(
        "    CPU per call: calling side {}, tool agents {}",
        per_step(direct.cpu.executor(), calls),
        per_step(direct.cpu.group(TOOL_THREADS), calls),
    );
    println!("    {}", direct.cpu.machine_line(direct.window));
}

pub(crate) fn print_alone(alone: &Alone, journal_write: Duration) {
    let runs = alone.saga.len() as u64;
    let saga_p50 = quantile(&alone.saga, 0.5);
    let direct_p50 = quantile(&alone.direct, 0.5);
    let reference = journal_write * (STEPS as u32 + 1) + direct_p50;
    println!(
        "  one saga alone ({runs} runs, each paired with the six calls made directly): saga p50 {}, p99 {}; direct p50 {}, p99 {}",
        ms(saga_p50),
        ms(quantile(&alone.saga, 0.99)),
        ms(direct_p50),
        ms(quantile(&alone.direct, 0.99)),
    );
    println!(
        "    added latency per step, (saga - direct) / 6: p50 {}, p99 {}",
        ms(quantile(&alone.added_per_step, 0.5)),
        ms(quantile(&alone.added_per_step, 0.99)),
    );
    println!(
        "    end to end vs (steps + 1) journal writes priced as one timed back to back + direct calls = 7 x {} + {} = {}: {:.2}x",
        ms(journal_write),
        ms(direct_p50),
        ms(reference),
        saga_p50.as_secs_f64() / reference.as_secs_f64(),
    );
    // Per run: the saga's time over its own write-ahead sequence's.
    let mut over: Vec<f64> = (alone.saga.iter().zip(&alone.write_ahead))
        .map(|(saga, bare)| saga.as_secs_f64() / bare.as_secs_f64())
        .collect();
    over.sort_by(f64::total_cmp);
    println!(
        "    end to end vs the same (steps + 1) journal writes and six calls made in sequence without the executor (each run paired): that sequence p50 {}, p99 {}; saga over it, per pair: p50 {:.2}x, p90 {:.2}x",
        ms(quantile(&alone.write_ahead, 0.5)),
        ms(quantile(&alone.write_ahead, 0.99)),
        over.get(over.len() / 2).copied().unwrap_or(0.0),
        over.get(over.len() * 9 / 10).copied().unwrap_or(0.0),
    );
    println!(
        "      a journal append in that sequence (after a call, as in a saga): p50 {}, p99 {}",
        ms(quantile(&alone.appends_in_sequence, 0.5)),
        ms(quantile(&alone.appends_in_sequence, 0.99)),
    );
    let steps = runs * STEPS;
    println!(
        "    fsyncs (group commits of journal and task store) per step: {:.3}",
        alone.commits.0 as f64 / steps as f64,
    );
    let total: Duration = alone.saga.iter().sum();
    let waited = alone.waited;
    let rest = total.saturating_sub(waited.journal + waited.calls + waited.task_store);
    println!(
        "    mean saga alone {} = waiting for the journal {} (the first write, header + first step, {}) + tool calls {} + task-store waits (creating the task, then the reports still queued at the saga's end) {} + the rest (engine, ledger, spawns, wake-ups) {}; {} commits per saga",
        ms(total / runs as u32),
        ms(waited.journal / runs as u32),
        ms(waited.begin / runs as u32),
        ms(waited.calls / runs as u32),
        ms(waited.task_store / runs as u32),
        ms(rest / runs as u32),
        alone.commits.0 as f64 / runs as f64,
    );
    println!(
        "    CPU per step alone: executor {} (tool agents {})",
        per_step(alone.cpu.executor(), steps),
        per_step(alone.cpu.group(TOOL_THREADS), steps),
    );
    println!("    {}", alone.cpu.machine_line(total));
}

pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
