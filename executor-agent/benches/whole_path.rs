//! Benchmark of the path users take (issue 21): the real `executor-agent` binary as a
//! process with its default SQLite state, six loopback A2A tool agents (in this process,
//! on threads of their own), and load clients that, for every saga, sign a fresh plan (a
//! unique saga id) under a principal's mandate, mint a fresh planner JWT and wait for the
//! saga's end as a planner does: a blocking `SendMessage`, or `SendStreamingMessage` read
//! to its end. It prints sagas/s, steps/s, latency, CPU per saga of the executor process,
//! of the tool agents' threads and of the clients' threads (from `/proc`), the state
//! file's writes and commits (fsyncs) per saga, the executor's resident memory and what
//! it grew by per finished saga, and, from a second executor that measures them, the
//! executor's CPU per saga by phase.
//!
//! `cargo bench -p executor-agent --bench whole_path`. `WHOLE_PATH_SECONDS` (5 by default)
//! per round; `WHOLE_PATH_LEVELS` (`1,64,256`) and `WHOLE_PATH_MODES`
//! (`blocking,streaming`) choose the rounds; `WHOLE_PATH_EXECUTOR` measures another
//! build of the binary (an earlier commit's, to compare the two in one sitting);
//! `WHOLE_PATH_STORE=postgres://…` runs the executor on that database (`--store`)
//! instead of its SQLite file (the write and fsync columns then read 0: they count the
//! state file's writer), as `WHOLE_PATH_REPLICAS` replicas (1 by default), the clients
//! spread over them in turn and the executor columns summed over them. The run makes a
//! database of its own on that server (`whole_path_PID`, left there) and prints, for each
//! round, the database's commits, WAL fsyncs and postgres CPU per step, and then one
//! saga's own sequence of commits and tool calls made without the executor.
//! `WHOLE_PATH_INTERLEAVED=N` with it also starts a SQLite executor and runs N pairs of
//! rounds per level, one on each set-up in turn (`whole_path/interleaved.rs`).
//! `WHOLE_PATH_LEVEL_PAIRS=N` runs N pairs of rounds at the two levels of
//! `WHOLE_PATH_LEVELS` in turn instead, each round on a fresh executor
//! (`whole_path/levels.rs`).
//! `WHOLE_PATH_CALLGRIND=1` runs the measured executors under valgrind's callgrind and
//! prints, per round, their instructions per step: a count that holds on a noisy machine
//! (`whole_path/callgrind.rs`).

use std::collections::HashMap;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_host::sdk::{SendMessageResponse, StreamResponse, TaskState};
use agent_host::{AgentClient, OutboundCall, mint_jwt};
use futures::StreamExt;
use sagaplane_examples::supplier::AGENTS;
use serde_json::{Value, json};
use setup::{ADMIN_TOKEN, Executor, Keys, plan_template, register};
use shared_types::SigningIdentity;

#[path = "whole_path/callgrind.rs"]
mod callgrind;
#[path = "whole_path/console.rs"]
mod console;
#[path = "whole_path/database.rs"]
mod database;
#[path = "whole_path/interleaved.rs"]
mod interleaved;
#[path = "whole_path/levels.rs"]
mod levels;
#[path = "whole_path/setup.rs"]
mod setup;
#[path = "saga/tool_agent.rs"]
mod tool_agent;

pub(crate) const TOOL_TOKEN: &str = "tool-secret";
const STEPS: u64 = 6;
const TOOL_THREADS: &str = "tool-agent";
const CLIENT_THREADS: &str = "load-client";
/// The executor's state file writer (`{name}-writer`, sagaplane-storage's sqlite.rs).
const WRITER_THREAD: &str = "executor-writer";

/// utime + stime, in ticks, of a `/proc/.../stat` line.
fn ticks(stat: &str) -> u64 {
    let Some(close) = stat.rfind(')') else {
        return 0;
    };
    let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    field(11) + field(12)
}

fn process_ticks(pid: u32) -> u64 {
    ticks(&std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default())
}

/// Ticks of the threads of process `pid` (or `self`) whose name starts with `prefix`.
fn thread_ticks(pid: &str, prefix: &str) -> u64 {
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| {
            std::fs::read_to_string(e.path().join("comm"))
                .is_ok_and(|name| name.trim_end().starts_with(prefix))
        })
        .map(|e| ticks(&std::fs::read_to_string(e.path().join("stat")).unwrap_or_default()))
        .sum()
}

/// The resident set of a process, in KiB (`VmRSS` in `/proc/PID/status`).
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|kib| kib.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// `/proc` counts CPU in ticks of 10 ms.
fn ms(ticks: u64) -> f64 {
    ticks as f64 * 10.0
}

/// The executor's `/metrics`, by sample name with its labels (`name{label="value"}`).
async fn scrape(url: &str) -> HashMap<String, f64> {
    let Ok(answer) = reqwest::get(format!("{url}/metrics")).await else {
        return HashMap::new();
    };
    let text = answer.text().await.unwrap_or_default();
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            Some((name.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// The database the executor runs on (`WHOLE_PATH_STORE`), if not its SQLite file.
/// A database of its own, made for this run on that server: saga ids and registered cards
/// of an earlier run are not there.
fn store() -> Option<String> {
    static FRESH: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    FRESH
        .get_or_init(|| {
            let url = std::env::var("WHOLE_PATH_STORE")
                .ok()
                .filter(|url| !url.is_empty())?;
            let name = format!("whole_path_{}", std::process::id());
            Some(setup::fresh_database(&url, &name))
        })
        .clone()
}

/// An executor on `store` (`--store`), or on a SQLite file in `dir` when `None`; under
/// callgrind when asked (`WHOLE_PATH_CALLGRIND`), unless it measures its phases.
fn start_executor(
    dir: &std::path::Path,
    keys: &Keys,
    phases: bool,
    store: Option<&str>,
) -> Executor {
    let mut command = if callgrind::wanted() && !phases {
        callgrind::command(&executor_binary(), dir)
    } else {
        Command::new(executor_binary())
    };
    command.env("SAGAPLANE_CPU_PHASES", if phases { "1" } else { "0" });
    setup::spawn_executor(command, dir, keys, store, &[])
}

/// The rounds to run, in order: each way of waiting (`WHOLE_PATH_MODES`, `blocking,streaming`
/// by default) at each concurrency level (`WHOLE_PATH_LEVELS`, `1,64,256` by default).
fn rounds() -> Vec<(Mode, usize)> {
    let list = |name: &str, default: &str| -> Vec<String> {
        std::env::var(name)
            .unwrap_or_else(|_| default.to_owned())
            .split(',')
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect()
    };
    let levels: Vec<usize> = list("WHOLE_PATH_LEVELS", "1,64,256")
        .iter()
        .map(|l| {
            l.parse()
                .expect("WHOLE_PATH_LEVELS: numbers of clients, comma-separated")
        })
        .collect();
    let modes: Vec<Mode> = list("WHOLE_PATH_MODES", "blocking,streaming")
        .iter()
        .map(|m| match m.as_str() {
            "blocking" => Mode::Blocking,
            "streaming" => Mode::Streaming,
            other => panic!("WHOLE_PATH_MODES: {other:?} is neither blocking nor streaming"),
        })
        .collect();
    modes
        .iter()
        .flat_map(|mode| levels.iter().map(move |level| (*mode, *level)))
        .collect()
}

/// The binary to measure: this checkout's, or `WHOLE_PATH_EXECUTOR` (another build, to
/// compare two commits in one sitting).
fn executor_binary() -> std::path::PathBuf {
    std::env::var_os("WHOLE_PATH_EXECUTOR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_executor-agent").into())
}

/// One concurrency level's figures.
struct Round {
    mode: Mode,
    clients: usize,
    sagas: u64,
    seconds: f64,
    latencies_ms: Vec<f64>,
    executor_ms: f64,
    tools_ms: f64,
    client_ms: f64,
    /// The executor's state file writer thread.
    writer_ms: f64,
    /// The executor's metrics before and after the round.
    before: HashMap<String, f64>,
    after: HashMap<String, f64>,
    /// The executor's resident set before and after the round, in KiB.
    rss_before_kib: u64,
    rss_after_kib: u64,
    /// Under callgrind: the executors' instructions per step, and the steps counted.
    instructions: Option<(f64, f64)>,
}

const COMMITS: &str = "sagaplane_state_file_commits";
const WRITES: &str = "sagaplane_state_file_writes";

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() {
    let seconds: u64 = std::env::var("WHOLE_PATH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let keys = Keys::generate();
    let tools = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(TOOL_THREADS)
        .enable_all()
        .build()
        .expect("the tool agents' runtime");
    let tool_urls: Vec<String> = AGENTS
        .iter()
        .map(|_| tool_agent::start_tool_agent(&tools))
        .collect();
    let client = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(CLIENT_THREADS)
        .enable_all()
        .build()
        .expect("the client's runtime");
    let template = plan_template(&keys, "md_whole_path");
    let length = Duration::from_secs(seconds);
    if let Some(pairs) = levels::wanted() {
        assert!(
            store().is_none(),
            "WHOLE_PATH_LEVEL_PAIRS runs on SQLite: leave WHOLE_PATH_STORE unset"
        );
        levels::compare(
            &client,
            dir.path(),
            &keys,
            &tool_urls,
            &template,
            pairs,
            length,
        );
        return;
    }
    let replicas: usize = std::env::var("WHOLE_PATH_REPLICAS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    assert!(
        replicas == 1 || store().is_some(),
        "WHOLE_PATH_REPLICAS needs WHOLE_PATH_STORE: replicas share a database"
    );
    let executors: Vec<Executor> = (0..replicas.max(1))
        .map(|n| {
            let dir = dir.path().join(format!("measured-{n}"));
            start_executor(&dir, &keys, false, store().as_deref())
        })
        .collect();
    let executor = &executors[0];
    // Registered on one replica: the others read the registry before their next plan.
    client.block_on(register(
        &executor.url,
        &keys.platform,
        &tool_urls,
        &|_, _| {},
    ));
    println!(
        "whole path: {} (pid {}, {}) <- clients on loopback that each sign a plan (a unique saga id, under a principal's mandate) and mint a planner JWT per saga, then wait for its end; six A2A tool agents in the bench's process; {seconds} s per round after a {WARM_UP_SECONDS} s warm-up at 64 clients",
        executor_binary().display(),
        executor.child.id(),
        match (store(), executors.len()) {
            (Some(_), 1) => "PostgreSQL state (WHOLE_PATH_STORE), one replica".to_owned(),
            (Some(_), n) =>
                format!("PostgreSQL state (WHOLE_PATH_STORE), {n} replicas; the pid is the first's"),
            (None, _) => "SQLite state, fresh data directory".to_owned(),
        }
    );
    client.block_on(warm_up(usize::MAX, &executors, &keys.planner, &template));
    print_header();
    let db = store().map(|url| {
        sagaplane_storage::postgres::Postgres::connect(&url, 2).expect("WHOLE_PATH_STORE")
    });
    let mut database_lines = Vec::new();
    for (index, (mode, clients)) in rounds().into_iter().enumerate() {
        let before = db
            .as_ref()
            .map(|db| client.block_on(database::counters(db)));
        let round = client.block_on(run_round(
            index,
            mode,
            &executors,
            &keys.planner,
            &template,
            clients,
            length,
        ));
        print_round(&round);
        if let (Some(db), Some(before)) = (&db, before) {
            let used = client.block_on(database::counters(db)).since(before);
            database_lines.push(database_line(&round, used));
        }
    }
    println!(
        "CPU in ms, from /proc (10 ms ticks): exec = the executor process, tool = the tool agents' threads, clnt = the client's threads (signing and minting included). write/saga = durable writes per saga; fsync/saga = the state file's commits per saga (/metrics sagaplane_state_file_commits; each is one fsync of its WAL under synchronous=FULL; '-' when the binary does not report it). rss MiB = the executor's resident set at the round's end (VmRSS); KiB/saga = how much it grew over the round, per finished saga (what a finished saga leaves behind, with the allocator's and SQLite's caches). Every saga COMPLETED, or the bench stops."
    );
    if let Some(db) = &db {
        println!(
            "\nthe database, per round (pg_stat_database, pg_stat_wal, /proc; the replicas' idle renewals during the {} s read after each round included):",
            database::STATS_SETTLE.as_secs_f64()
        );
        for line in &database_lines {
            println!("{line}");
        }
        if let Some(pairs) = interleaved::wanted() {
            let sqlite = [start_executor(
                &dir.path().join("interleaved-sqlite"),
                &keys,
                false,
                None,
            )];
            client.block_on(register(
                &sqlite[0].url,
                &keys.platform,
                &tool_urls,
                &|_, _| {},
            ));
            client.block_on(interleaved::compare(
                &sqlite,
                &executors,
                &keys.planner,
                &template,
                pairs,
                length,
            ));
        }
        let (_, task) = client.block_on(lone_saga(&executors[0], &keys.planner, &template, 0));
        let plan: Value = serde_json::from_str(&template).expect("the plan");
        let tools: Vec<(&str, String)> = AGENTS
            .iter()
            .copied()
            .zip(tool_urls.iter().cloned())
            .collect();
        let sequence = client.block_on(database::Sequence::prepare(
            db, &plan, &task, &tools, TOOL_TOKEN,
        ));
        // One saga through the executor, then its sequence, in turn: both see the machine
        // as it is at that moment (its speed drifts by more than their difference).
        let (mut sagas, mut sequences) = (Vec::new(), Vec::new());
        let started = Instant::now();
        while started.elapsed() < length * 2 {
            let n = sagas.len() as u64 + 1;
            let (took, _) = client.block_on(lone_saga(&executors[0], &keys.planner, &template, n));
            sagas.push(took.as_secs_f64() * 1000.0);
            sequences.push(client.block_on(sequence.run(n)).as_secs_f64() * 1000.0);
        }
        let ratios: Vec<f64> = sagas.iter().zip(&sequences).map(|(a, b)| a / b).collect();
        println!(
            "
one saga alone through the executor against its own sequence without the executor ({} commits, {STEPS} tool calls, one after another on one connection, this process), in turn, {} pairs: saga p50 {:.2} ms, sequence p50 {:.2} ms, ratio of each pair p50 {:.2}x (p10 {:.2}x, p90 {:.2}x)",
            database::Sequence::COMMITS,
            sagas.len(),
            p50(&sagas),
            p50(&sequences),
            p50(&ratios),
            quantile(&ratios, 0.1),
            quantile(&ratios, 0.9),
        );
    }
    if let Some(wanted) = console::wanted() {
        let http = reqwest::Client::new();
        let session = client.block_on(console::log_in(&http, &executors[0].url, ADMIN_TOKEN));
        let mut held = client.block_on(console::finished(&http, &executors[0].url, &session));
        // Each round's saga ids are its own (the index names them): new sagas every time.
        for fill in 1_000_000.. {
            if held >= wanted {
                break;
            }
            eprintln!("the store holds {held} finished sagas; sending more until {wanted}");
            client.block_on(run_round(
                fill,
                Mode::Blocking,
                &executors,
                &keys.planner,
                &template,
                256,
                length,
            ));
            held = client.block_on(console::finished(&http, &executors[0].url, &session));
        }
        client.block_on(console::measure(&executors[0].url, ADMIN_TOKEN, held));
    }
    drop(executors);
    // 0 skips the breakdown.
    let clients = std::env::var("WHOLE_PATH_PHASE_CLIENTS")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(64);
    if clients == 0 {
        return;
    }
    let executor = [start_executor(
        &dir.path().join("phases"),
        &keys,
        true,
        store().as_deref(),
    )];
    client.block_on(register(
        &executor[0].url,
        &keys.platform,
        &tool_urls,
        &|_, _| {},
    ));
    client.block_on(run_round(
        usize::MAX - 2,
        Mode::Blocking,
        &executor,
        &keys.planner,
        &template,
        clients,
        Duration::from_secs(WARM_UP_SECONDS),
    ));
    let round = client.block_on(run_round(
        usize::MAX - 1,
        Mode::Blocking,
        &executor,
        &keys.planner,
        &template,
        clients,
        length,
    ));
    print_phases(&round);
}

fn p50(latencies_ms: &[f64]) -> f64 {
    quantile(latencies_ms, 0.5)
}

/// What the database did for a round, per step.
fn database_line(round: &Round, used: database::Counters) -> String {
    let steps = (round.sagas.max(1) * STEPS) as f64;
    format!(
        "{:>9} {:>4} clients: {:>6} commits ({:.2}/step, {:.1}/saga), {:>6} WAL fsyncs ({:.2}/step), postgres CPU {:.3} ms/step; executors {:.3} ms/step",
        format!("{:?}", round.mode).to_lowercase(),
        round.clients,
        used.commits,
        used.commits as f64 / steps,
        used.commits as f64 * STEPS as f64 / steps,
        used.wal_syncs,
        used.wal_syncs as f64 / steps,
        ms(used.postgres_ticks) / steps,
        round.executor_ms / steps,
    )
}

/// One saga sent alone and waited for (blocking): how long it took, and the task as the
/// executor ended it.
async fn lone_saga(
    executor: &Executor,
    planner: &SigningIdentity,
    template: &str,
    n: u64,
) -> (Duration, Value) {
    let agent = AgentClient::new(&executor.url).expect("a client");
    let sent = Instant::now();
    let saga = format!("sg_wp_lone_{n}");
    let mut plan: Value =
        serde_json::from_str(&template.replace("sg_demo_supplier_onboarding", &saga))
            .expect("the plan");
    planner.sign_in_place(&mut plan).expect("signed");
    let call = OutboundCall {
        bearer: Some(mint_jwt(planner, planner.kid(), "executor", 60).expect("a JWT")),
        ..OutboundCall::default()
    };
    let request = agent_host::user_request(None, Some(json!({ "plan": plan })), None);
    match agent.send(&call, &request).await {
        Ok(SendMessageResponse::Task(task)) if task.status.state == TaskState::Completed => {
            (sent.elapsed(), serde_json::to_value(task).expect("a task"))
        }
        other => panic!("the lone saga {saga}: {other:?}"),
    }
}

fn quantile(values: &[f64], p: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    percentile(&sorted, p)
}

/// Unreported: connections opened, pools and the heap grown, before the first round.
const WARM_UP_SECONDS: u64 = 2;

/// An unreported round of `WARM_UP_SECONDS` at 64 blocking clients (saga ids named by
/// `round`, as `run_round`'s), before the measured ones.
async fn warm_up(round: usize, executors: &[Executor], planner: &SigningIdentity, template: &str) {
    let length = Duration::from_secs(WARM_UP_SECONDS);
    run_round(
        round,
        Mode::Blocking,
        executors,
        planner,
        template,
        64,
        length,
    )
    .await;
}

/// The count environment variable `name` sets, if it sets one above 0.
fn count_in(name: &str) -> Option<usize> {
    std::env::var(name).ok()?.parse().ok().filter(|n| *n > 0)
}

/// The column names above the rounds' lines (`print_round`).
fn print_header() {
    println!(
        "{:>9} {:>7} {:>6} {:>7} {:>7} {:>7} {:>7} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10} {:>7} {:>8}",
        "mode",
        "clients",
        "sagas",
        "sagas/s",
        "steps/s",
        "p50 ms",
        "p99 ms",
        "exec/saga",
        "exec/step",
        "tool/saga",
        "clnt/saga",
        "write/saga",
        "fsync/saga",
        "rss MiB",
        "KiB/saga"
    );
}

fn print_round(round: &Round) {
    let mut sorted = round.latencies_ms.clone();
    sorted.sort_by(f64::total_cmp);
    let sagas = round.sagas.max(1) as f64;
    let per_saga = |name: &str| match (round.before.get(name), round.after.get(name)) {
        (Some(before), Some(after)) => format!("{:.2}", (after - before) / sagas),
        _ => "-".into(),
    };
    println!(
        "{:>9} {:>7} {:>6} {:>7.0} {:>7.0} {:>7.1} {:>7.1} {:>9.2} {:>9.3} {:>9.2} {:>9.2} {:>10} {:>10} {:>7.1} {:>8.2}",
        format!("{:?}", round.mode).to_lowercase(),
        round.clients,
        round.sagas,
        round.sagas as f64 / round.seconds,
        (round.sagas * STEPS) as f64 / round.seconds,
        percentile(&sorted, 0.5),
        percentile(&sorted, 0.99),
        round.executor_ms / sagas,
        round.executor_ms / (sagas * STEPS as f64),
        round.tools_ms / sagas,
        round.client_ms / sagas,
        per_saga(WRITES),
        per_saga(COMMITS),
        round.rss_after_kib as f64 / 1024.0,
        (round.rss_after_kib as f64 - round.rss_before_kib as f64) / sagas,
    );
    if let Some((per_step, steps)) = round.instructions {
        println!("{}", callgrind::line(per_step, steps));
    }
}

/// The executor's CPU per saga by phase, from its own counters (thread CPU time per
/// phase, nested phases exclusive) and its threads in `/proc`.
fn print_phases(round: &Round) {
    let sagas = round.sagas.max(1) as f64;
    println!(
        "\nexecutor CPU per saga by phase: a second executor with SAGAPLANE_CPU_PHASES=1, after its own warm-up; blocking, {} clients (WHOLE_PATH_PHASE_CLIENTS), {} sagas, {:.2} ms/saga in all (from /proc)",
        round.clients,
        round.sagas,
        round.executor_ms / sagas
    );
    let phases: Vec<(&str, f64)> = agent_host::cpu::Phase::ALL
        .iter()
        .map(|phase| phase.name())
        .filter_map(|phase| {
            let name = format!("sagaplane_phase_cpu_seconds{{phase=\"{phase}\"}}");
            let after = round.after.get(&name)?;
            let before = round.before.get(&name).copied().unwrap_or(0.0);
            Some((phase, (after - before) * 1000.0 / sagas))
        })
        .collect();
    if phases.is_empty() {
        println!("  (this binary does not report phases)");
        return;
    }
    let writer = round.writer_ms / sagas;
    let measured: f64 = phases.iter().map(|(_, ms)| ms).sum();
    let total = round.executor_ms / sagas;
    let row = |name: &str, ms: f64| {
        println!(
            "  {name:<58} {ms:>7.3} ms {:>5.1}%",
            100.0 * ms / total.max(1e-9)
        );
    };
    for (phase, ms) in &phases {
        row(phase, *ms);
    }
    row(
        "state file writer thread (SQL and commits, from /proc)",
        writer,
    );
    row(
        "the rest (blocking-pool reads, runtime, timers; by difference)",
        (total - measured - writer).max(0.0),
    );
}

/// How a client waits for its saga's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// A blocking `SendMessage`: the answer is the ended task.
    Blocking,
    /// `SendStreamingMessage`, read until the stream ends.
    Streaming,
}

async fn run_round(
    round: usize,
    mode: Mode,
    executors: &[Executor],
    planner: &SigningIdentity,
    template: &str,
    clients: usize,
    length: Duration,
) -> Round {
    let executor = &executors[0];
    let pid = executor.child.id();
    let pids: Vec<u32> = executors.iter().map(|e| e.child.id()).collect();
    let all_ticks = || pids.iter().map(|pid| process_ticks(*pid)).sum::<u64>();
    let all_rss = || pids.iter().map(|pid| rss_kib(*pid)).sum::<u64>();
    let urls: Vec<String> = executors.iter().map(|e| e.url.clone()).collect();
    let before = scrape(&executor.url).await;
    let rss_before_kib = all_rss();
    let (executor_before, tools_before, client_before, writer_before) = (
        all_ticks(),
        thread_ticks("self", TOOL_THREADS),
        thread_ticks("self", CLIENT_THREADS),
        thread_ticks(&pid.to_string(), WRITER_THREAD),
    );
    let window = callgrind::Window::open(executors).await;
    let started = Instant::now();
    let deadline = started + length;
    let template = Arc::new(template.to_owned());
    let workers = (0..clients).map(|worker| {
        let (template, planner, url) = (
            template.clone(),
            planner.clone(),
            urls[worker % urls.len()].clone(),
        );
        tokio::spawn(async move {
            let agent = AgentClient::new(&url).expect("a client");
            let mut latencies = Vec::new();
            let mut n = 0u64;
            while Instant::now() < deadline {
                // Unique across rounds: a saga id sent again is answered with its existing task.
                let saga = format!("sg_wp_{round}_{worker}_{n}");
                n += 1;
                let sent = Instant::now();
                let mut plan: Value =
                    serde_json::from_str(&template.replace("sg_demo_supplier_onboarding", &saga))
                        .expect("the plan");
                planner.sign_in_place(&mut plan).expect("signed");
                let call = OutboundCall {
                    bearer: Some(mint_jwt(&planner, planner.kid(), "executor", 60).expect("a JWT")),
                    ..OutboundCall::default()
                };
                let request = agent_host::user_request(None, Some(json!({ "plan": plan })), None);
                let ended = match mode {
                    Mode::Blocking => match agent.send(&call, &request).await {
                        Ok(SendMessageResponse::Task(task)) => {
                            if task.status.state != TaskState::Completed {
                                panic!("saga {saga} did not complete: {:?}", task.status);
                            }
                            Some(task.status.state)
                        }
                        other => panic!("saga {saga}: {other:?}"),
                    },
                    Mode::Streaming => {
                        let mut events = agent.stream(&call, &request).await.expect("a stream");
                        let mut last = None;
                        while let Some(event) = events.next().await {
                            last = match event.expect("an event") {
                                StreamResponse::Task(task) => Some(task.status.state),
                                StreamResponse::StatusUpdate(update) => Some(update.status.state),
                                _ => last,
                            };
                        }
                        last
                    }
                };
                if ended != Some(TaskState::Completed) {
                    panic!("saga {saga} did not complete: it ended {ended:?}");
                }
                latencies.push(sent.elapsed().as_secs_f64() * 1000.0);
            }
            latencies
        })
    });
    let mut latencies_ms = Vec::new();
    for worker in futures::future::join_all(workers).await {
        latencies_ms.extend(worker.expect("a client task"));
    }
    let seconds = started.elapsed().as_secs_f64();
    let instructions = match window {
        Some(window) => Some(window.close(executors).await),
        None => None,
    };
    Round {
        instructions,
        clients,
        sagas: latencies_ms.len() as u64,
        seconds,
        latencies_ms,
        executor_ms: ms(all_ticks() - executor_before),
        tools_ms: ms(thread_ticks("self", TOOL_THREADS) - tools_before),
        client_ms: ms(thread_ticks("self", CLIENT_THREADS) - client_before),
        writer_ms: ms(thread_ticks(&pid.to_string(), WRITER_THREAD) - writer_before),
        after: scrape(&executor.url).await,
        before,
        rss_before_kib,
        rss_after_kib: all_rss(),
        mode,
    }
}
