//! The executor's benchmark (`cargo bench -p executor-agent --bench saga`): many concurrent
//! six-step supplier-onboarding sagas against in-process A2A tool agents on loopback, with
//! the durable SQLite journal (and, on the second route, the executor's A2A tasks kept
//! current with a status update and the `saga-ledger` artifact per step transition), both
//! in the executor's one state file with one group commit.
//! Prints throughput, added latency per step against calling the same tool agents
//! directly, fsyncs (group commits) per step, and executor CPU per step; and one saga
//! alone against its (steps + 1) durable journal writes and six calls, priced two ways:
//! from a write timed back to back, and as the same writes and calls made in sequence
//! without the executor, paired run by run.
//!
//! The tool agents are the A2A SDK's JSON-RPC binding in front of a minimal handler, on
//! their own runtime whose threads are named `tool-agent`, so the CPU they use can be read
//! per thread from `/proc/self/task/*/stat` and left out of the executor's.
//! `SAGA_BENCH_SECONDS` sets the length of each throughput run (default 4);
//! `SAGA_BENCH_ROUTE=driver` or `=tasks` runs one route only (for profiling);
//! `SAGA_BENCH_TASKS=memory` keeps the tasks in memory
//! instead of the SQLite task store.

/// The executor binary's allocator, so the benchmark measures what it runs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod cpu;
mod executor;
mod report;
mod tool_agent;

use executor_agent::journal::SagaLog;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use agent_host::TaskStore;
use agent_host::sdk::{Artifact, Part, Task};
use executor_agent::journal::{Entry, SagaHeader};
use executor_agent::saga::{CallOutcome, Command, Event, Saga};

use crate::cpu::{Commits, CpuUsed, sample_cpu};
use crate::executor::{Executor, Waited, tasks_in_memory};
use crate::report::{load_average, ms, per_step, print_alone, print_direct, print_load, quantile};
use crate::tool_agent::{start_tool_agent, tool_result};

pub(crate) use test_kit::AGENTS;
pub(crate) const STEPS: u64 = 6;
pub(crate) const TOOL_TOKEN: &str = "tool-secret";
/// Sagas run one at a time (each paired with the same six calls made directly).
const ALONE_RUNS: usize = 200;
/// Single durable writes timed to price one journal (or task store) write.
const SINGLE_WRITES: usize = 200;
/// The names the CPU accounting groups threads by (`comm`, at most 15 bytes).
pub(crate) const TOOL_THREADS: &str = "tool-agent";
pub(crate) const EXECUTOR_THREADS: &str = "executor";

/// Which parts of the executor a saga goes through.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Route {
    /// Journal + driver + invoker; progress reports go nowhere.
    Driver,
    /// As `Driver`, plus the saga's A2A task in the SQLite task store: created, then kept
    /// current (status updates and the `saga-ledger` artifact) by the executor's own
    /// `TaskReporter`; a saga ends once its reports are on the task.
    DriverAndTasks,
}

impl Route {
    fn short_name(self) -> &'static str {
        match self {
            Route::Driver => "driver",
            Route::DriverAndTasks => "tasks",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Route::Driver => "journal + driver + A2A calls",
            Route::DriverAndTasks => "journal + driver + A2A calls + A2A task store",
        }
    }
}

// ---------------------------------------------------------------------------------------
// The runs.
// ---------------------------------------------------------------------------------------

/// What a closed-loop run of many concurrent clients did in its measurement window.
pub(crate) struct Load {
    /// Calls answered (one per saga step) within the window.
    pub(crate) steps: u64,
    pub(crate) window: Duration,
    pub(crate) cpu: CpuUsed,
    pub(crate) commits: Commits,
    /// End to end, of the runs (sagas, or six direct calls) that ended within the window.
    pub(crate) run_latencies: Vec<Duration>,
}

impl Load {
    pub(crate) fn steps_per_second(&self) -> f64 {
        self.steps as f64 / self.window.as_secs_f64()
    }
}

/// Time for `concurrency` clients to fill the pipeline before the window opens.
const RAMP_UP: Duration = Duration::from_secs(1);

/// `concurrency` clients each run sagas through `route` (or, with `None`, the six calls
/// directly) back to back. After `RAMP_UP`, a window of `length` counts the calls
/// answered, CPU and commits; then the clients finish what they started and stop.
async fn load(
    executor: &Arc<Executor>,
    route: Option<Route>,
    concurrency: usize,
    length: Duration,
) -> Load {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients: Vec<_> = (0..concurrency)
        .map(|_| {
            let (executor, stop) = (executor.clone(), stop.clone());
            tokio::spawn(async move {
                let mut runs = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    match route {
                        Some(route) => {
                            executor.run_saga(route).await;
                        }
                        None => executor.call_directly().await,
                    }
                    runs.push((Instant::now(), started.elapsed()));
                }
                runs
            })
        })
        .collect();
    // The window is a span of time to measure over, not a wait for any event.
    tokio::time::sleep(RAMP_UP).await;
    let (cpu_before, commits_before) = (sample_cpu(), Commits::now());
    let calls_before = executor.calls_answered.load(Ordering::Relaxed);
    let opened = Instant::now();
    tokio::time::sleep(length).await;
    let calls = executor.calls_answered.load(Ordering::Relaxed) - calls_before;
    let window = opened.elapsed();
    let (cpu_after, commits_after) = (sample_cpu(), Commits::now());
    let closed = Instant::now();
    stop.store(true, Ordering::Relaxed);
    let mut run_latencies = Vec::new();
    for client in clients {
        let runs = client.await.expect("a client");
        run_latencies.extend(
            runs.into_iter()
                .filter(|(ended, _)| *ended >= opened && *ended <= closed)
                .map(|(_, latency)| latency),
        );
    }
    Load {
        steps: calls,
        window,
        cpu: CpuUsed::between(&cpu_before, &cpu_after),
        commits: commits_after.since(commits_before),
        run_latencies,
    }
}

/// One saga at a time through `route`, each followed by the same six calls made directly.
pub(crate) struct Alone {
    pub(crate) saga: Vec<Duration>,
    pub(crate) direct: Vec<Duration>,
    /// Per pair: (saga − direct) / 6.
    pub(crate) added_per_step: Vec<Duration>,
    /// The saga's durable writes and calls in sequence without the executor, one per run
    /// (`Executor::write_ahead_directly`).
    pub(crate) write_ahead: Vec<Duration>,
    /// Each journal append of those sequences (the first write, with the header, apart).
    pub(crate) appends_in_sequence: Vec<Duration>,
    pub(crate) commits: Commits,
    /// Summed over the sagas: where the driver waited, and the CPU the sagas used.
    pub(crate) waited: Waited,
    pub(crate) cpu: CpuUsed,
}

async fn alone(executor: &Arc<Executor>, route: Route, runs: usize) -> Alone {
    let mut commits = Commits(0);
    let (mut saga, mut direct, mut added_per_step) = (Vec::new(), Vec::new(), Vec::new());
    let mut write_ahead = Vec::new();
    let mut appends_in_sequence = Vec::new();
    let mut waited = Waited::default();
    let mut cpu = CpuUsed::default();
    for _ in 0..runs {
        let runner = executor.clone();
        let (cpu_before, waited_before) = (sample_cpu(), executor.stopwatches.read());
        let commits_before = Commits::now();
        let started = Instant::now();
        tokio::spawn(async move { runner.run_saga(route).await })
            .await
            .expect("a saga");
        let saga_time = started.elapsed();
        cpu.add(&CpuUsed::between(&cpu_before, &sample_cpu()));
        let this_saga = executor.stopwatches.read().since(waited_before);
        waited.journal += this_saga.journal;
        waited.begin += this_saga.begin;
        waited.calls += this_saga.calls;
        waited.task_store += this_saga.task_store;
        let runner = executor.clone();
        let started = Instant::now();
        tokio::spawn(async move { runner.call_directly().await })
            .await
            .expect("direct calls");
        let direct_time = started.elapsed();
        // The saga's commits only: the direct calls write nothing, and the saga's finish
        // mark (off its path) has landed during them.
        commits.0 += Commits::now().since(commits_before).0;
        let runner = executor.clone();
        let (bare, writes) = tokio::spawn(async move { runner.write_ahead_directly().await })
            .await
            .expect("the write-ahead sequence");
        appends_in_sequence.extend(writes.into_iter().skip(1));
        write_ahead.push(bare);
        saga.push(saga_time);
        direct.push(direct_time);
        added_per_step.push(saga_time.saturating_sub(direct_time) / STEPS as u32);
    }
    Alone {
        saga,
        direct,
        added_per_step,
        write_ahead,
        appends_in_sequence,
        commits,
        waited,
        cpu,
    }
}

/// The time of one durable write when nothing else is writing: a journal append of an
/// intent, and a task-store put of a saga's task as it stands mid-run.
async fn single_writes(executor: &Arc<Executor>) -> (Vec<Duration>, Vec<Duration>) {
    let header = executor.untasked_header();
    let saga_id = header.saga_id.clone();
    let epoch = executor
        .journal
        .inner
        .begin(&header, &[])
        .await
        .expect("begin");
    let intent = Entry::Intent(executor.direct_template[3].clone());
    let mut journal_writes = Vec::new();
    for _ in 0..SINGLE_WRITES {
        let started = Instant::now();
        executor
            .journal
            .inner
            .append(&saga_id, epoch, std::slice::from_ref(&intent))
            .await
            .expect("append");
        journal_writes.push(started.elapsed());
    }
    let task = executor.new_task(&saga_id).await;
    let ledger_artifact = Artifact {
        artifact_id: "saga-ledger".into(),
        name: None,
        description: None,
        parts: vec![Part::data(Saga::new(header.spec.clone()).ledger())],
        metadata: None,
        extensions: None,
    };
    let mut task = task
        .add_artifact(ledger_artifact, false, true)
        .await
        .expect("artifact");
    let mut task_writes = Vec::new();
    let mut version = executor
        .task_store
        .read(&task.id)
        .await
        .expect("read")
        .expect("the task")
        .version;
    for _ in 0..SINGLE_WRITES {
        task.status.timestamp = Some(chrono::Utc::now());
        let started = Instant::now();
        version = executor
            .task_store
            .put(&task, agent_host::store::Expected::Version(version))
            .await
            .expect("put");
        task_writes.push(started.elapsed());
    }
    (journal_writes, task_writes)
}

/// The executor's own work without any I/O, on one thread: what the driver does for a
/// saga besides waiting (the spec from the plan, the JSON of every journal entry, the
/// engine's steps, the ledger built for every report).
#[derive(Debug, Default)]
struct PureWork {
    sagas: u64,
    spec: Duration,
    journal_json: Duration,
    engine: Duration,
    ledger: Duration,
    reports: u64,
}

fn pure_work(executor: &Executor, sagas: u64) -> PureWork {
    let mut work = PureWork {
        sagas,
        ..PureWork::default()
    };
    for _ in 0..sagas {
        let saga_id = executor.new_saga_id();
        let started = Instant::now();
        let (plan, spec) = executor.spec(&saga_id);
        work.spec += started.elapsed();
        let header = SagaHeader {
            format: executor_agent::journal::JOURNAL_FORMAT,
            saga_id,
            plan_version: 1,
            task_id: "t".into(),
            context_id: "c".into(),
            plan: plan.into(),
            spec: spec.clone().into(),
            registrations_read: None,
        };
        let started = Instant::now();
        std::hint::black_box(serde_json::to_string(&header).expect("header JSON"));
        work.journal_json += started.elapsed();
        let mut saga = Saga::new(spec);
        let mut events = std::collections::VecDeque::from([Event::Start { now_ms: 0 }]);
        while let Some(event) = events.pop_front() {
            let started = Instant::now();
            std::hint::black_box(serde_json::to_string(&Entry::Event(event.clone())).ok());
            work.journal_json += started.elapsed();
            let started = Instant::now();
            let commands = saga.step(event);
            work.engine += started.elapsed();
            for command in commands {
                match command {
                    Command::Invoke(invocation) => {
                        let started = Instant::now();
                        let entry = Entry::Intent(invocation.clone());
                        std::hint::black_box(serde_json::to_string(&entry).ok());
                        work.journal_json += started.elapsed();
                        events.push_back(Event::Result {
                            target: invocation.target,
                            attempt: invocation.attempt,
                            outcome: CallOutcome::Succeeded {
                                response: tool_result(&invocation.call.skill),
                            },
                            now_ms: 0,
                        });
                    }
                    Command::Report { .. } | Command::Pause { .. } | Command::Finish { .. } => {
                        let started = Instant::now();
                        std::hint::black_box(saga.ledger());
                        work.ledger += started.elapsed();
                        work.reports += 1;
                    }
                    _ => {}
                }
            }
        }
    }
    work
}

/// The saga's A2A task as it ends: its JSON size, and one encode + decode of it (each
/// task write encodes the whole task; a read decodes it).
async fn task_json_cost(executor: &Executor, saga_id: &str) -> (usize, Duration) {
    let task = executor
        .tasks
        .store()
        .get(&format!("task-{saga_id}"))
        .await
        .expect("read the task")
        .expect("the task");
    const ROUNDS: u32 = 200;
    let mut bytes = 0;
    let started = Instant::now();
    for _ in 0..ROUNDS {
        let text = serde_json::to_string(&task).expect("encode the task");
        bytes = text.len();
        std::hint::black_box(serde_json::from_str::<Task>(&text).expect("decode the task"));
    }
    (bytes, started.elapsed() / ROUNDS)
}

fn main() {
    let length = Duration::from_secs_f64(
        std::env::var("SAGA_BENCH_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(4.0),
    );
    let tool_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(TOOL_THREADS)
        .enable_all()
        .build()
        .expect("the tool agents' runtime");
    let executor_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(EXECUTOR_THREADS)
        .enable_all()
        .build()
        .expect("the executor's runtime");
    let tool_urls: Vec<String> = AGENTS
        .iter()
        .map(|_| start_tool_agent(&tool_runtime))
        .collect();

    executor_runtime.block_on(async {
        let executor = Arc::new(Executor::new(&tool_urls));
        println!(
            "Sagaplane executor benchmark: six-step supplier-onboarding sagas, six in-process A2A tool agents on loopback, SQLite WAL synchronous=FULL with group commit"
        );
        println!(
            "  {} CPUs, load average {}; throughput counted over a {:.1} s window after a 1 s ramp-up, per run",
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            load_average(),
            length.as_secs_f64()
        );

        // Warm up: open connections to every tool agent, fill allocators and SQLite pages.
        load(&executor, None, 256, Duration::from_millis(200)).await;
        load(&executor, Some(Route::Driver), 64, Duration::from_millis(200)).await;

        println!("\nDirect calls (the same six A2A calls per run, same client, no executor):");
        let mut direct_by_concurrency = HashMap::new();
        for concurrency in [256, 64] {
            let direct = load(&executor, None, concurrency, length / 2).await;
            print_direct(&format!("{concurrency} concurrent"), &direct);
            direct_by_concurrency.insert(concurrency, direct);
        }

        let work = pure_work(&executor, 500);
        let steps = work.sagas * STEPS;
        println!(
            "\nThe executor's own work without I/O, one thread, per step: spec from the plan {}, journal entries to JSON {}, engine {}, ledger for the reports {} ({:.1} reports per step); total {}",
            per_step(work.spec, steps),
            per_step(work.journal_json, steps),
            per_step(work.engine, steps),
            per_step(work.ledger, steps),
            work.reports as f64 / steps as f64,
            per_step(work.spec + work.journal_json + work.engine + work.ledger, steps),
        );
        let finished = executor.run_saga(Route::DriverAndTasks).await;
        let (task_bytes, task_round_trip) = task_json_cost(&executor, &finished).await;
        println!(
            "  a finished saga's A2A task is {task_bytes} bytes of JSON; one encode + decode of it takes {} (each task write encodes the whole task; a saga's task is written when its state changes and at its end)",
            ms(task_round_trip),
        );

        let only = std::env::var("SAGA_BENCH_ROUTE").ok();
        for route in [Route::DriverAndTasks, Route::Driver] {
            if only.as_deref().is_some_and(|o| o != route.short_name()) {
                continue;
            }
            let in_memory = route == Route::DriverAndTasks && tasks_in_memory();
            let note = if in_memory { " (tasks in memory)" } else { "" };
            println!("\n{}{note}:", route.label());
            for concurrency in [256, 64] {
                let run = load(&executor, Some(route), concurrency, length).await;
                print_load(
                    &format!("{concurrency} concurrent sagas"),
                    &run,
                    direct_by_concurrency.get(&concurrency),
                );
            }
            let (journal_writes, task_writes) = single_writes(&executor).await;
            let journal_write = quantile(&journal_writes, 0.5);
            println!(
                "  one durable write alone ({SINGLE_WRITES} each, just before): journal append p50 {}, p99 {}; task-store put p50 {}, p99 {}",
                ms(journal_write),
                ms(quantile(&journal_writes, 0.99)),
                ms(quantile(&task_writes, 0.5)),
                ms(quantile(&task_writes, 0.99)),
            );
            let alone = alone(&executor, route, ALONE_RUNS).await;
            print_alone(&alone, journal_write);
        }
        let commits = Commits::now();
        println!(
            "\nGroup commits on the state file in this process: {}; load average at the end: {}",
            commits.0,
            load_average()
        );
    });
}
