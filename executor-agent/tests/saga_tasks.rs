//! Nothing of a saga outlives it: its calls and timers (the mandate-expiry timer an hour
//! away, undo deadlines) end with its driver, so the runtime's live tasks come back to
//! where they were once the sagas have ended.

mod common;

use std::sync::{Arc, Mutex};

use common::{NeverRevoked, response, supplier_catalog, supplier_plan};
use executor_agent::driver::{Control, Driver, Reporter, Start, begin};
use executor_agent::invoke::{CallContext, Invoker};
use executor_agent::journal::{MemoryJournal, SagaHeader};
use executor_agent::saga::model::{CallOutcome, Phase};
use executor_agent::saga::{Command, Ending, Invocation, Saga, SagaSpec};
use executor_agent::slots::{SlotHold, Slots};
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const SAGAS: usize = 10_000;
/// Sagas driven at once.
const AT_ONCE: usize = 200;

/// Every tool answers at once, as it would on success.
struct Instant;

#[async_trait::async_trait]
impl Invoker for Instant {
    async fn invoke(&self, invocation: &Invocation, _: &CallContext) -> CallOutcome {
        CallOutcome::Succeeded {
            response: response(&invocation.call.skill),
        }
    }
}

/// Keeps how each saga ended.
#[derive(Default)]
struct Endings(Mutex<Vec<Ending>>);

#[async_trait::async_trait]
impl Reporter for Endings {
    async fn report(&self, command: &Command, _: &Saga) {
        if let Command::Finish { ending, .. } = command {
            self.0.lock().unwrap().push(*ending);
        }
    }
}

/// The supplier saga under a mandate that expires an hour from now, with undo deadlines.
fn spec(saga_id: &str) -> SagaSpec {
    static SUPPLIER: std::sync::LazyLock<SagaSpec> =
        std::sync::LazyLock::new(|| SagaSpec::new(&supplier_plan(), &supplier_catalog()).unwrap());
    let mut spec = SUPPLIER.clone();
    spec.saga_id = saga_id.to_owned();
    spec.expires_at_ms = chrono::Utc::now().timestamp_millis() + 3_600_000;
    spec
}

/// The supplier saga `saga_id`, begun in `journal`.
async fn begun(journal: &MemoryJournal, saga_id: &str) -> (Saga, Start) {
    let spec = spec(saga_id);
    let header = SagaHeader {
        format: executor_agent::journal::JOURNAL_FORMAT,
        saga_id: saga_id.to_owned(),
        plan_version: 1,
        task_id: format!("task-{saga_id}"),
        context_id: "c".into(),
        plan: json!({}).into(),
        spec: spec.clone().into(),
        registrations_read: None,
    };
    begin(journal, &header, Saga::new(spec)).await.unwrap()
}

async fn run_one(
    n: usize,
    journal: Arc<MemoryJournal>,
    endings: Arc<Endings>,
    slots: Arc<Slots>,
) -> Phase {
    let saga_id = format!("s-{n}");
    let (saga, start) = begun(&journal, &saga_id).await;
    let (_control, rx) = mpsc::channel::<Control>(1);
    Driver {
        saga_id,
        journal,
        invoker: Arc::new(Instant),
        reporter: endings,
        control: rx,
        stop: CancellationToken::new(),
        slot: SlotHold::new(slots, None),
        revocations: Arc::new(NeverRevoked),
    }
    .run(saga, start)
    .await
    .unwrap()
}

// One thread: a task that has returned is gone once this one yields to it, so the count
// below is exact and needs no wait.
#[tokio::test]
async fn ten_thousand_sagas_leave_no_task_behind() {
    let metrics = tokio::runtime::Handle::current().metrics();
    let baseline = metrics.num_alive_tasks();
    let journal = Arc::new(MemoryJournal::new());
    let endings = Arc::new(Endings::default());
    let slots = Slots::new(AT_ONCE);

    let mut next = 0;
    let mut driving = tokio::task::JoinSet::new();
    while next < SAGAS || !driving.is_empty() {
        while next < SAGAS && driving.len() < AT_ONCE {
            driving.spawn(run_one(
                next,
                journal.clone(),
                endings.clone(),
                slots.clone(),
            ));
            next += 1;
        }
        let phase = driving.join_next().await.unwrap().unwrap();
        assert!(
            matches!(phase, Phase::Done { .. }),
            "a saga ended {phase:?}"
        );
    }

    {
        let endings = endings.0.lock().unwrap();
        assert_eq!(endings.len(), SAGAS);
        assert!(endings.iter().all(|e| *e == Ending::Completed));
    }
    // Each saga is marked finished with its end, before its driver returns.
    assert_eq!(*journal.finishes().borrow(), SAGAS);
    // The calls and timers aborted with the last drivers are dropped once the scheduler
    // gets to them: a few turns of it, never a wait for time to pass.
    for _ in 0..AT_ONCE {
        if metrics.num_alive_tasks() <= baseline {
            break;
        }
        tokio::task::yield_now().await;
    }
    let alive = metrics.num_alive_tasks();
    assert!(
        alive <= baseline,
        "{alive} tasks alive after {SAGAS} sagas ended, {baseline} before"
    );
}

/// Panics at the first call of the first idempotent skill, then answers as `Instant`.
#[derive(Default)]
struct PanicsOnce {
    panicked: std::sync::atomic::AtomicBool,
    calls: Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl Invoker for PanicsOnce {
    async fn invoke(&self, invocation: &Invocation, _: &CallContext) -> CallOutcome {
        let skill = invocation.call.skill.clone();
        self.calls.lock().unwrap().push(skill.clone());
        if invocation.call.idempotent
            && !self
                .panicked
                .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            panic!("a bug in the invoker, at {skill}");
        }
        CallOutcome::Succeeded {
            response: response(&skill),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_that_panics_has_an_unknown_outcome_and_the_saga_goes_on() {
    let journal = Arc::new(MemoryJournal::new());
    let endings = Arc::new(Endings::default());
    let invoker = Arc::new(PanicsOnce::default());
    let (saga, start) = begun(&journal, "s-panic").await;
    let (_control, rx) = mpsc::channel::<Control>(1);
    // Time is paused: two hours pass at once if the saga waits for an answer that
    // never comes.
    let driven = Driver {
        saga_id: "s-panic".into(),
        journal,
        invoker: invoker.clone(),
        reporter: endings.clone(),
        control: rx,
        stop: CancellationToken::new(),
        slot: SlotHold::new(Slots::new(1), None),
        revocations: Arc::new(NeverRevoked),
    }
    .run(saga, start);
    let phase = tokio::time::timeout(std::time::Duration::from_secs(7200), driven)
        .await
        .expect("the saga goes on after the call that panicked")
        .unwrap();
    assert!(
        matches!(
            phase,
            Phase::Done {
                ending: Ending::Completed
            }
        ),
        "{phase:?}"
    );
    let calls = invoker.calls.lock().unwrap();
    let first = calls
        .iter()
        .position(|c| calls.iter().filter(|d| *d == c).count() == 2)
        .expect("the call that panicked is made again under its key");
    assert!(calls[first + 1..].contains(&calls[first]), "{calls:?}");
}
