//! The executor side of the benchmark: catalog, invoker and journal (each timed), the
//! SQLite task store, and one saga run through a `Route` or the same six calls made
//! directly.

use executor_agent::journal::SagaLog;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agent_host::sdk::{Task, TaskState, TaskStatus};
use agent_host::{AgentClient, MemoryTaskStore, SqliteTaskStore, TaskHandle, TaskManager};
use async_trait::async_trait;
use executor_agent::driver::{Control, Driver, Reporter, begin};
use executor_agent::invoke::{A2aInvoker, CallContext, Endpoint, Invoker, trace_id};
use executor_agent::journal::{Around, Call, Entry, SagaHeader, SqliteJournal, Wrapped};
use executor_agent::progress::{TaskProgress, Unwritten};
use executor_agent::saga::model::Phase;
use executor_agent::saga::{CallOutcome, Command, Ending, Event, Invocation, Saga, SagaSpec};
use executor_agent::slots::{SlotHold, Slots};
use futures::future::BoxFuture;
use serde_json::{Value, json};
use shared_types::{Catalog, Plan};
use tokio::sync::mpsc;

use crate::tool_agent::tool_result;
use crate::{AGENTS, Route, STEPS, TOOL_TOKEN};

fn read_json(path: &str) -> Value {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let text = std::fs::read_to_string(root.join(path)).expect("read a repository file");
    shared_types::json::parse_strict(&text).expect("strict JSON")
}

/// Time spent waiting in each part of the executor, summed over every saga (read around
/// a saga run alone to split its end-to-end time).
#[derive(Debug, Default)]
pub(crate) struct Stopwatches {
    journal_nanos: AtomicU64,
    /// The part of `journal_nanos` spent on `begin` (the header with the first step).
    begin_nanos: AtomicU64,
    call_nanos: AtomicU64,
    task_store_nanos: AtomicU64,
}

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Waited {
    pub(crate) journal: Duration,
    pub(crate) begin: Duration,
    pub(crate) calls: Duration,
    pub(crate) task_store: Duration,
}

impl Stopwatches {
    fn add(counter: &AtomicU64, since: Instant) {
        counter.fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }

    pub(crate) fn read(&self) -> Waited {
        let read = |c: &AtomicU64| Duration::from_nanos(c.load(Ordering::Relaxed));
        Waited {
            journal: read(&self.journal_nanos),
            begin: read(&self.begin_nanos),
            calls: read(&self.call_nanos),
            task_store: read(&self.task_store_nanos),
        }
    }
}

impl Waited {
    pub(crate) fn since(self, before: Waited) -> Waited {
        Waited {
            journal: self.journal - before.journal,
            begin: self.begin - before.begin,
            calls: self.calls - before.calls,
            task_store: self.task_store - before.task_store,
        }
    }
}

/// The SQLite journal, timing how long the driver waits for each durable write.
pub(crate) type TimedJournal = Wrapped<SqliteJournal, JournalClock>;

/// What `TimedJournal` does around each call: the writes' waits on the stopwatches.
pub(crate) struct JournalClock {
    stopwatches: Arc<Stopwatches>,
}

impl Around for JournalClock {
    fn around<'a, T: Send + 'a>(
        &'a self,
        what: Call<'a>,
        call: BoxFuture<'a, executor_agent::Result<T>>,
    ) -> BoxFuture<'a, executor_agent::Result<T>> {
        if !matches!(
            what,
            Call::Begin { .. } | Call::Append { .. } | Call::End { .. }
        ) {
            return call;
        }
        Box::pin(async move {
            let started = Instant::now();
            let written = call.await;
            Stopwatches::add(&self.stopwatches.journal_nanos, started);
            if let Call::Begin { .. } = what {
                Stopwatches::add(&self.stopwatches.begin_nanos, started);
            }
            written
        })
    }
}

/// The A2A invoker, timing each call the driver makes.
struct TimedInvoker {
    inner: Arc<A2aInvoker>,
    stopwatches: Arc<Stopwatches>,
    calls_answered: Arc<AtomicU64>,
}

#[async_trait]
impl Invoker for TimedInvoker {
    async fn invoke(&self, invocation: &Invocation, context: &CallContext) -> CallOutcome {
        let started = Instant::now();
        let outcome = self.inner.invoke(invocation, context).await;
        Stopwatches::add(&self.stopwatches.call_nanos, started);
        self.calls_answered.fetch_add(1, Ordering::Relaxed);
        outcome
    }
}

pub(crate) struct Executor {
    plan: Value,
    catalog: Catalog,
    pub(crate) journal: Arc<TimedJournal>,
    /// The driver's invoker: `direct_invoker`, timed.
    invoker: Arc<TimedInvoker>,
    /// The same clients, called directly.
    direct_invoker: Arc<A2aInvoker>,
    pub(crate) stopwatches: Arc<Stopwatches>,
    /// Calls answered, by the driver or directly (each is one saga step).
    pub(crate) calls_answered: Arc<AtomicU64>,
    /// The sagas' tasks: in `task_store`, or in memory (`SAGA_BENCH_TASKS=memory`).
    pub(crate) tasks: Arc<TaskManager>,
    /// The SQLite task store (also timed alone, whichever store the sagas use).
    pub(crate) task_store: SqliteTaskStore,
    /// The six forward invocations of a completed saga, for the direct calls.
    pub(crate) direct_template: Vec<Invocation>,
    next_saga: AtomicU64,
    /// One stop for every driver, as the executor shares its shutdown token.
    stop: tokio_util::sync::CancellationToken,
    /// The executor's saga slots, as many as by default (more than the sagas run here).
    slots: Arc<Slots>,
    /// The mandates' tables, which the driver reads at the moment of effect (these
    /// sagas hold no mandate, so it reads nothing).
    mandates: executor_agent::mandates::MandateBook,
    _data_dir: tempfile::TempDir,
}

impl Executor {
    pub(crate) fn new(tool_urls: &[String]) -> Self {
        let mut catalog = Catalog::default();
        let mut invoker = A2aInvoker::new();
        for (agent, url) in AGENTS.iter().zip(tool_urls) {
            catalog
                .add_card(&read_json(&format!("agent-cards/{agent}.json")))
                .expect("a curated card");
            invoker.add(
                *agent,
                Endpoint {
                    client: AgentClient::new(url).expect("an A2A client"),
                    bearer: Some(TOOL_TOKEN.into()),
                },
            );
        }
        let data_dir = tempfile::tempdir().expect("a temporary directory");
        // One state file for journal and tasks, as the executor keeps them.
        let db = executor_agent::state::open(data_dir.path()).expect("the state file");
        let journal = SqliteJournal::on(&db).expect("journal");
        let task_store = SqliteTaskStore::on(&db).expect("task store");
        let mandates = executor_agent::mandates::MandateBook::on(&db, Default::default())
            .expect("the mandates' tables");
        let stopwatches = Arc::new(Stopwatches::default());
        let calls_answered = Arc::new(AtomicU64::new(0));
        let direct_invoker = Arc::new(invoker);
        let mut executor = Self {
            plan: read_json("examples/plans/supplier-onboarding.json"),
            catalog,
            journal: Arc::new(Wrapped {
                inner: Arc::new(journal),
                around: JournalClock {
                    stopwatches: stopwatches.clone(),
                },
            }),
            invoker: Arc::new(TimedInvoker {
                inner: direct_invoker.clone(),
                stopwatches: stopwatches.clone(),
                calls_answered: calls_answered.clone(),
            }),
            direct_invoker,
            stopwatches,
            calls_answered,
            tasks: TaskManager::new(if tasks_in_memory() {
                Arc::new(MemoryTaskStore::new())
            } else {
                Arc::new(task_store.clone())
            }),
            task_store,
            direct_template: Vec::new(),
            next_saga: AtomicU64::new(0),
            stop: tokio_util::sync::CancellationToken::new(),
            slots: Slots::new(executor_agent::agent::DEFAULT_MAX_RUNNING_SAGAS),
            mandates,
            _data_dir: data_dir,
        };
        executor.direct_template = forward_invocations(executor.spec("sg_template").1);
        executor
    }

    pub(crate) fn new_saga_id(&self) -> String {
        format!(
            "sg_bench_{}",
            self.next_saga.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// The supplier plan under `saga_id` (its idempotency keys follow), and its spec.
    pub(crate) fn spec(&self, saga_id: &str) -> (Value, SagaSpec) {
        let mut plan = self.plan.clone();
        plan["sagaId"] = json!(saga_id);
        for step in plan["steps"].as_array_mut().expect("steps") {
            let key = format!("{saga_id}:{}", step["id"].as_str().expect("a step id"));
            step["idempotencyKey"] = json!(key);
        }
        let typed = Plan::from_value(&plan).expect("the supplier plan");
        let spec = SagaSpec::new(&typed, &self.catalog).expect("a spec");
        (plan, spec)
    }

    /// Runs one new saga to its end through `route`; returns its id.
    pub(crate) async fn run_saga(&self, route: Route) -> String {
        let saga_id = self.new_saga_id();
        let (plan, spec) = self.spec(&saga_id);
        let reporter: Arc<dyn Reporter> = match route {
            Route::Driver => Arc::new(Unreported),
            Route::DriverAndTasks => {
                let started = Instant::now();
                let task = self.new_task(&saga_id).await;
                Stopwatches::add(&self.stopwatches.task_store_nanos, started);
                let metadata = vec![("sagaId".to_owned(), json!(saga_id))];
                TaskProgress::start(task, Unwritten::metadata(metadata), !tasks_in_memory()).0
            }
        };
        let (task_id, context_id) = match route {
            Route::Driver => ("t".to_owned(), "c".to_owned()),
            Route::DriverAndTasks => (format!("task-{saga_id}"), format!("ctx-{saga_id}")),
        };
        let header = SagaHeader {
            format: executor_agent::journal::JOURNAL_FORMAT,
            saga_id: saga_id.clone(),
            plan_version: 1,
            task_id,
            context_id,
            plan: plan.into(),
            spec: spec.clone().into(),
            registrations_read: None,
        };
        let (saga, start) = begin(self.journal.as_ref(), &header, Saga::new(spec))
            .await
            .expect("begin");
        let (_control, control_rx) = mpsc::channel::<Control>(1);
        let phase = Driver {
            saga_id: saga_id.clone(),
            journal: self.journal.clone(),
            invoker: self.invoker.clone(),
            reporter,
            control: control_rx,
            stop: self.stop.clone(),
            slot: SlotHold::new(self.slots.clone(), None),
            revocations: Arc::new(self.mandates.clone()),
        }
        .run(saga, start)
        .await
        .expect("the driver runs");
        assert_eq!(
            phase,
            Phase::Done {
                ending: Ending::Completed
            }
        );
        saga_id
    }

    /// The saga's A2A task as the executor creates it for a saga that begins at once:
    /// working.
    pub(crate) async fn new_task(&self, saga_id: &str) -> TaskHandle {
        let task = Task {
            id: format!("task-{saga_id}"),
            context_id: format!("ctx-{saga_id}"),
            status: TaskStatus {
                state: TaskState::Working,
                message: None,
                timestamp: Some(chrono::Utc::now()),
            },
            artifacts: None,
            history: None,
            metadata: None,
        };
        self.tasks.create(task).await.expect("create the task")
    }

    /// The same six calls as a saga, made directly with the same invoker (and so the same
    /// HTTP clients), under fresh idempotency keys.
    pub(crate) async fn call_directly(&self) {
        let saga_id = self.new_saga_id();
        let trace_id = trace_id(&saga_id);
        for template in &self.direct_template {
            let mut invocation = template.clone();
            let step_id = template
                .idempotency_key
                .rsplit(':')
                .next()
                .expect("a key")
                .to_owned();
            invocation.idempotency_key = format!("{saga_id}:{step_id}");
            let context = CallContext {
                saga_id: saga_id.clone(),
                step_id,
                caused_by: None,
                trace_id: trace_id.clone(),
                span_id: None,
                class: None,
            };
            let outcome = self.direct_invoker.invoke(&invocation, &context).await;
            self.calls_answered.fetch_add(1, Ordering::Relaxed);
            assert!(
                matches!(outcome, CallOutcome::Succeeded { .. }),
                "{outcome:?}"
            );
        }
    }
}

impl Executor {
    /// The header of a new saga journaled without an A2A task.
    pub(crate) fn untasked_header(&self) -> SagaHeader {
        let saga_id = self.new_saga_id();
        let (plan, spec) = self.spec(&saga_id);
        SagaHeader {
            format: executor_agent::journal::JOURNAL_FORMAT,
            saga_id,
            plan_version: 1,
            task_id: "t".into(),
            context_id: "c".into(),
            plan: plan.into(),
            spec: spec.into(),
            registrations_read: None,
        }
    }

    /// What a saga's path holds at the least, without the executor: its (steps + 1)
    /// durable journal writes (the header with the first intent; then each result with
    /// the next intent; the last result) and its six calls, in sequence, with the same
    /// journal and the same HTTP clients. A new saga id each run; the plan and its spec
    /// are built before the clock starts. Returns the sequence's time, and each write's.
    pub(crate) async fn write_ahead_directly(&self) -> (Duration, Vec<Duration>) {
        let header = self.untasked_header();
        let saga_id = header.saga_id.clone();
        let invocations = forward_invocations(SagaSpec::clone(&header.spec));
        let trace_id = trace_id(&saga_id);
        let mut writes = Vec::with_capacity(invocations.len() + 1);
        let started = Instant::now();
        let first = Entry::Intent(invocations[0].clone());
        let epoch = self
            .journal
            .inner
            .begin(&header, std::slice::from_ref(&first))
            .await
            .expect("begin");
        writes.push(started.elapsed());
        for (i, invocation) in invocations.iter().enumerate() {
            let context = CallContext {
                saga_id: saga_id.clone(),
                step_id: header.spec.steps[i].id.clone(),
                caused_by: None,
                trace_id: trace_id.clone(),
                span_id: None,
                class: None,
            };
            let outcome = self.direct_invoker.invoke(invocation, &context).await;
            self.calls_answered.fetch_add(1, Ordering::Relaxed);
            assert!(
                matches!(outcome, CallOutcome::Succeeded { .. }),
                "{outcome:?}"
            );
            let mut entries = vec![Entry::Event(Event::Result {
                target: invocation.target,
                attempt: invocation.attempt,
                outcome,
                now_ms: 0,
            })];
            entries.extend(invocations.get(i + 1).cloned().map(Entry::Intent));
            let write = Instant::now();
            self.journal
                .inner
                .append(&saga_id, epoch, &entries)
                .await
                .expect("append");
            writes.push(write.elapsed());
        }
        (started.elapsed(), writes)
    }
}

/// The forward invocations the engine decides for `spec` when every call succeeds with
/// the tool agents' fixed results (the pure engine, no I/O).
fn forward_invocations(spec: SagaSpec) -> Vec<Invocation> {
    let mut saga = Saga::new(spec);
    let mut invocations = Vec::new();
    let mut commands = saga.step(Event::Start { now_ms: 0 });
    while let Some(invocation) = commands.iter().find_map(|c| match c {
        Command::Invoke(i) => Some(i.clone()),
        _ => None,
    }) {
        let response = tool_result(&invocation.call.skill);
        commands = saga.step(Event::Result {
            target: invocation.target,
            attempt: invocation.attempt,
            outcome: CallOutcome::Succeeded { response },
            now_ms: 0,
        });
        invocations.push(invocation);
    }
    assert_eq!(invocations.len() as u64, STEPS);
    invocations
}

struct Unreported;

#[async_trait]
impl Reporter for Unreported {
    async fn report(&self, _: &Command, _: &Saga) {}
}

/// Whether the sagas' tasks live in memory (`SAGA_BENCH_TASKS=memory`), to tell the task
/// store's durable writes apart from the rest of keeping a task current.
pub(crate) fn tasks_in_memory() -> bool {
    std::env::var("SAGA_BENCH_TASKS").is_ok_and(|v| v == "memory")
}
