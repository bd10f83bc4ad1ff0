//! The driver against real A2A tool agents on loopback: every effect once, compensations
//! in reverse order, the saga context on every call, and faults injected on the tool side.

mod common;

use executor_agent::journal::{Ownership, SagaLog};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use common::*;

use agent_host::AgentClient;
use executor_agent::driver::{Control, Driver, Reporter, begin};
use executor_agent::invoke::{A2aInvoker, Endpoint};
use executor_agent::journal::{Entry, SagaHeader, SqliteJournal};
use executor_agent::recovery::replay;
use executor_agent::saga::model::Phase;
use executor_agent::saga::{Command, Ending, Event, Saga, SagaSpec, Target};
use executor_agent::slots::{SlotHold, Slots};
use serde_json::json;
use shared_types::{Catalog, Plan};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Far longer than a saga takes to give back its slot here.
const SLOT_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

struct Log(mpsc::UnboundedSender<Command>);

#[async_trait::async_trait]
impl Reporter for Log {
    async fn report(&self, command: &Command, _: &Saga) {
        let _ = self.0.send(command.clone());
    }
}

/// A saga running in the background, stopped at a pause or its end.
struct Stopped {
    last: Command,
    logs: HashMap<String, Arc<Mutex<ToolLog>>>,
    control: mpsc::Sender<Control>,
    reports: mpsc::UnboundedReceiver<Command>,
    saga: tokio::task::JoinHandle<executor_agent::Result<Phase>>,
    journal: Arc<SqliteJournal>,
    saga_id: String,
    spec: SagaSpec,
    /// The saga slots, one, which the saga shares with nobody unless a test takes it.
    slots: Arc<Slots>,
    _journal_dir: tempfile::TempDir,
}

impl Stopped {
    /// Waits for the next pause or the end.
    async fn next_stop(&mut self) -> Command {
        loop {
            let command = self
                .reports
                .recv()
                .await
                .expect("the saga reports until it ends");
            if matches!(command, Command::Pause { .. } | Command::Finish { .. }) {
                return command;
            }
        }
    }
}

/// A saga's journal entries as they stand.
async fn journaled(journal: &SqliteJournal, saga_id: &str) -> Vec<Entry> {
    let (_, entries) = journal.load(saga_id).await.unwrap().unwrap();
    entries
}

/// Starts the supplier saga against six tool agents with `faults`, and waits for its
/// first pause or its end.
async fn start(faults: &[(&str, Fault)]) -> Stopped {
    let mut stopped = launch(faults, CancellationToken::new(), 0..0, Slots::new(1)).await;
    stopped.last = stopped.next_stop().await;
    stopped
}

/// Starts the supplier saga against six tool agents with `faults`, told to stop by `stop`;
/// the journal's appends numbered in `failing` fail; it takes one of `slots` to act.
async fn launch(
    faults: &[(&str, Fault)],
    stop: CancellationToken,
    failing: Range<u32>,
    slots: Arc<Slots>,
) -> Stopped {
    let mut catalog = Catalog::default();
    let mut invoker = A2aInvoker::new();
    let mut logs = HashMap::new();
    for agent in AGENTS {
        catalog
            .add_card(&read(&format!("agent-cards/{agent}.json")))
            .unwrap();
        let log = Arc::new(Mutex::new(ToolLog::default()));
        let faults = faults.iter().map(|(s, f)| (s.to_string(), *f)).collect();
        let url = start_tool(faults, log.clone()).await;
        invoker.add(
            agent,
            Endpoint {
                client: AgentClient::new(&url).unwrap(),
                bearer: Some("tool-secret".into()),
            },
        );
        logs.insert(agent.to_owned(), log);
    }
    let plan = Plan::from_value(&read("examples/plans/supplier-onboarding.json")).unwrap();
    let mut spec = SagaSpec::new(&plan, &catalog).unwrap();
    for step in &mut spec.steps {
        step.call.timeout_ms = step.call.timeout_ms.min(300); // keep hanging calls short here
        step.call.retry.max_backoff_ms = step.call.retry.max_backoff_ms.min(100);
        step.call.retry.initial_backoff_ms = step.call.retry.initial_backoff_ms.min(100);
    }
    let dir = tempfile::tempdir().unwrap();
    let journal = Arc::new(SqliteJournal::open(&dir.path().join("journal.db")).unwrap());
    let header = SagaHeader {
        format: executor_agent::journal::JOURNAL_FORMAT,
        saga_id: plan.saga_id.clone(),
        plan_version: 1,
        task_id: "t".into(),
        context_id: "c".into(),
        plan: json!({}).into(),
        spec: spec.into(),
        registrations_read: None,
    };
    let (saga, start) = begin(journal.as_ref(), &header, Saga::new(header.spec.clone()))
        .await
        .unwrap();
    let (reports_tx, reports) = mpsc::unbounded_channel();
    let (control, rx) = mpsc::channel::<Control>(4);
    let saga = tokio::spawn(
        Driver {
            saga_id: plan.saga_id.clone(),
            journal: Arc::new(flaky(journal.clone(), failing)),
            invoker: Arc::new(invoker),
            reporter: Arc::new(Log(reports_tx)),
            control: rx,
            stop,
            slot: SlotHold::new(slots.clone(), None),
            revocations: Arc::new(common::NeverRevoked),
        }
        .run(saga, start),
    );
    Stopped {
        last: Command::Pause {
            reason: String::new(),
        },
        logs,
        control,
        reports,
        saga,
        journal,
        saga_id: plan.saga_id.clone(),
        spec: SagaSpec::clone(&header.spec),
        slots,
        _journal_dir: dir,
    }
}

async fn run(
    faults: &[(&str, Fault)],
) -> (Phase, HashMap<String, Arc<Mutex<ToolLog>>>, Vec<Command>) {
    let stopped = start(faults).await;
    assert!(
        matches!(stopped.last, Command::Finish { .. }),
        "expected the end, got {:?}",
        stopped.last
    );
    let phase = stopped.saga.await.unwrap().unwrap();
    (phase, stopped.logs, vec![stopped.last])
}

fn effects(logs: &HashMap<String, Arc<Mutex<ToolLog>>>) -> Vec<String> {
    let mut all: Vec<String> = AGENTS
        .iter()
        .flat_map(|a| {
            logs[*a]
                .lock()
                .unwrap()
                .effects
                .iter()
                .map(|(k, _)| k.clone())
                .collect::<Vec<_>>()
        })
        .collect();
    all.sort();
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_happy_path_applies_every_effect_once_with_the_saga_context() {
    let (phase, logs, reported) = run(&[]).await;
    assert_eq!(reported.len(), 1);
    assert_eq!(
        phase,
        Phase::Done {
            ending: Ending::Completed
        }
    );
    let keys: Vec<String> = (0..6)
        .map(|i| format!("sg_demo_supplier_onboarding:s{i}"))
        .collect();
    assert_eq!(effects(&logs), keys);
    let calls = &logs["budget"].lock().unwrap().calls;
    let (key, skill, caller, traced, baggage) = &calls[0];
    assert_eq!(
        (key.as_str(), skill.as_str(), caller.as_str()),
        (
            "sg_demo_supplier_onboarding:s1",
            "budget.reserve",
            "executor"
        )
    );
    assert!(traced);
    assert_eq!(
        baggage,
        "sagaplane.saga=sg_demo_supplier_onboarding,sagaplane.step=s1"
    );
    assert!(matches!(
        reported.last(),
        Some(Command::Finish {
            ending: Ending::Completed,
            ..
        })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_that_hangs_unwinds_vendor_budget_and_sandbox_in_reverse() {
    let (phase, logs, _) = run(&[("compliance.check", Fault::Hang)]).await;
    assert_eq!(
        phase,
        Phase::Done {
            ending: Ending::Compensated
        }
    );
    assert_eq!(
        logs["compliance-registry"].lock().unwrap().calls.len(),
        3,
        "three tries with one key"
    );
    let undo_order: Vec<String> = ["sandbox", "budget", "vendor-registry"]
        .iter()
        .map(|a| logs[*a].lock().unwrap().effects.last().unwrap().0.clone())
        .collect();
    assert_eq!(
        undo_order,
        [
            "sg_demo_supplier_onboarding:s2:undo",
            "sg_demo_supplier_onboarding:s1:undo",
            "sg_demo_supplier_onboarding:s0:undo"
        ]
    );
    let compensation_baggage = &logs["sandbox"].lock().unwrap().calls[1].4;
    assert!(
        compensation_baggage.contains("sagaplane.caused-by=s3"),
        "{compensation_baggage}"
    );
    assert!(
        logs["payments"].lock().unwrap().effects.is_empty(),
        "nothing after the failure ran"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declined_capture_unwinds_and_a_hanging_email_escalates() {
    let (phase, logs, _) = run(&[("payments.capture", Fault::Decline)]).await;
    assert_eq!(
        phase,
        Phase::Done {
            ending: Ending::Compensated
        }
    );
    assert!(logs["payments"].lock().unwrap().effects.is_empty());
    assert_eq!(
        logs["vendor-registry"].lock().unwrap().effects.len(),
        2,
        "created, then archived"
    );

    // The mailer never answers: after the pivot, the saga stops and waits for a person,
    // refuses to be canceled, and completes when the person says the email went out.
    let mut stopped = start(&[("email.send", Fault::Hang)]).await;
    assert!(
        matches!(&stopped.last, Command::Pause { reason } if reason.contains("s5")),
        "{:?}",
        stopped.last
    );
    assert_eq!(
        stopped.logs["mailer"].lock().unwrap().calls.len(),
        5,
        "every declared attempt, one key"
    );
    assert_eq!(
        stopped.logs["payments"].lock().unwrap().effects.len(),
        1,
        "the capture stands"
    );
    // Waiting for a person, the saga gives back its slot, the only one: another saga
    // takes it. The cancel then waits for the slot too.
    let other = tokio::time::timeout(SLOT_WAIT, stopped.slots.take())
        .await
        .expect("the paused saga gives its slot back");
    let (reply, refused) = tokio::sync::oneshot::channel();
    stopped.control.send(Control::Cancel(reply)).await.unwrap();
    let mut waiting = stopped.slots.watch_waiting();
    waiting.wait_for(|n| *n == 1).await.unwrap();
    drop(other);
    assert!(refused.await.unwrap().is_err(), "no cancel past the pivot");
    stopped
        .control
        .send(Control::Resolve {
            resolution: executor_agent::saga::Resolution::ResolvedManually,
            decider: None,
            message: None,
        })
        .await
        .unwrap();
    assert!(matches!(
        stopped.next_stop().await,
        Command::Finish {
            ending: Ending::Completed,
            ..
        }
    ));
    assert_eq!(
        stopped.saga.await.unwrap().unwrap(),
        Phase::Done {
            ending: Ending::Completed
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saga_without_a_slot_calls_nothing_until_it_gets_one_and_a_stop_meanwhile_ends_it() {
    let slots = Slots::new(1);
    let taken = slots.take().await;
    let mut waiting = slots.watch_waiting();
    let mut stopped = launch(&[], CancellationToken::new(), 0..0, slots.clone()).await;
    waiting.wait_for(|n| *n == 1).await.unwrap();
    let calls: usize = stopped
        .logs
        .values()
        .map(|l| l.lock().unwrap().calls.len())
        .sum();
    assert_eq!(calls, 0, "no call before the slot");
    drop(taken);
    assert!(matches!(
        stopped.next_stop().await,
        Command::Finish {
            ending: Ending::Completed,
            ..
        }
    ));
    assert_eq!(effects(&stopped.logs).len(), 6);

    // Told to stop while it waits for a slot, a saga returns having done nothing.
    let taken = slots.take().await;
    let stop = CancellationToken::new();
    let stopped = launch(&[], stop.clone(), 0..0, slots.clone()).await;
    waiting.wait_for(|n| *n == 1).await.unwrap();
    stop.cancel();
    let phase = stopped.saga.await.unwrap().unwrap();
    assert_eq!(phase, Phase::Forward { step: 0 });
    assert!(effects(&stopped.logs).is_empty());
    assert_eq!(slots.waiting(), 0);
    drop(taken);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn told_to_stop_the_driver_journals_the_answer_out_and_leaves_the_next_call_to_recovery() {
    let stop = CancellationToken::new();
    let mut stopped = launch(
        &[("sandbox.provision", Fault::ApplyThenHold(1))],
        stop.clone(),
        0..0,
        Slots::new(1),
    )
    .await;
    let held = stopped.logs["sandbox"].lock().unwrap().applied.clone();
    held.notified().await;
    stop.cancel();
    // The driver waits for the answer of the call it has out.
    let release = stopped.logs["sandbox"].lock().unwrap().release.clone();
    release.notify_one();
    let phase = stopped.saga.await.unwrap().unwrap();
    assert_eq!(
        phase,
        Phase::Forward { step: 3 },
        "stopped before s3, not ended"
    );
    // Its lease is given up: another owner may claim it now, not after the lease lapses.
    let now = chrono::Utc::now().timestamp_millis();
    assert_eq!(
        stopped.journal.claimable(now, 10).await.unwrap(),
        [stopped.saga_id.clone()],
        "released at the stop"
    );

    let applied = effects(&stopped.logs);
    assert_eq!(
        applied,
        [
            "sg_demo_supplier_onboarding:s0",
            "sg_demo_supplier_onboarding:s1",
            "sg_demo_supplier_onboarding:s2"
        ],
        "nothing after the answer out was acted on"
    );
    assert!(
        stopped.logs["compliance-registry"]
            .lock()
            .unwrap()
            .calls
            .is_empty()
    );
    // What the answer led to was shown.
    let mut shown = Vec::new();
    while let Ok(command) = stopped.reports.try_recv() {
        shown.push(command);
    }
    assert!(
        shown
            .iter()
            .any(|c| matches!(c, Command::Report { step, .. } if step == "s2")),
        "{shown:?}"
    );

    // The answer is journaled, the next call is not: recovery makes it, as a decision
    // never acted on, rather than treating it as a call lost in flight.
    let entries = journaled(&stopped.journal, &stopped.saga_id).await;
    assert!(
        matches!(
            entries.last(),
            Some(Entry::Event(Event::Result {
                target: Target::Forward(2),
                ..
            }))
        ),
        "{:?}",
        entries.last()
    );
    let recovered = replay(stopped.spec.clone(), &entries, 0).unwrap();
    let to_invoke: Vec<_> = recovered
        .to_invoke
        .iter()
        .map(|i| (i.target, i.attempt))
        .collect();
    assert_eq!(to_invoke, [(Target::Forward(3), 1)]);
    assert!(recovered.lost.is_empty(), "{:?}", recovered.lost);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_that_cannot_be_written_for_a_while_holds_the_saga_back_and_loses_nothing() {
    // The answers of s0 and s1 cannot be journaled at first (appends 0 to 3 fail).
    let mut stopped = launch(&[], CancellationToken::new(), 0..4, Slots::new(1)).await;
    let last = stopped.next_stop().await;
    assert!(
        matches!(
            last,
            Command::Finish {
                ending: Ending::Completed,
                ..
            }
        ),
        "{last:?}"
    );
    assert_eq!(
        stopped.saga.await.unwrap().unwrap(),
        Phase::Done {
            ending: Ending::Completed
        }
    );
    let keys: Vec<String> = (0..6)
        .map(|i| format!("sg_demo_supplier_onboarding:s{i}"))
        .collect();
    assert_eq!(effects(&stopped.logs), keys, "every effect once");
    for agent in AGENTS {
        assert_eq!(
            stopped.logs[agent].lock().unwrap().calls.len(),
            1,
            "{agent} was called once: nothing was acted on before its journal write landed"
        );
    }
    let entries = journaled(&stopped.journal, &stopped.saga_id).await;
    let results = entries
        .iter()
        .filter(|e| matches!(e, Entry::Event(Event::Result { .. })))
        .count();
    assert_eq!(results, 6, "each answer journaled once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_whose_saga_was_taken_over_stops_at_its_first_refused_write_and_calls_nothing_more()
 {
    let stopped = launch(
        &[("sandbox.provision", Fault::ApplyThenHold(1))],
        CancellationToken::new(),
        0..0,
        Slots::new(1),
    )
    .await;
    let sandbox = stopped.logs["sandbox"].clone();
    let applied = sandbox.lock().unwrap().applied.clone();
    while sandbox.lock().unwrap().effects.is_empty() {
        applied.notified().await;
    }
    // Another owner takes the saga over while the sandbox's answer is out.
    let other = stopped.journal.as_other_owner();
    let now = chrono::Utc::now().timestamp_millis();
    let taken = other
        .claim(
            &stopped.saga_id,
            now,
            executor_agent::journal::Claim::TakeOver,
        )
        .await
        .unwrap();
    assert_eq!(taken, Some(2));
    let before = journaled(&stopped.journal, &stopped.saga_id).await.len();

    let release = sandbox.lock().unwrap().release.clone();
    release.notify_one();
    let ended = tokio::time::timeout(std::time::Duration::from_secs(30), stopped.saga)
        .await
        .expect("the driver stops")
        .unwrap();
    assert!(
        matches!(ended, Err(executor_agent::Error::Fenced { epoch: 1, .. })),
        "{ended:?}"
    );
    assert_eq!(
        journaled(&stopped.journal, &stopped.saga_id).await.len(),
        before,
        "nothing journaled under the old claim"
    );
    for agent in ["compliance-registry", "payments", "mailer"] {
        assert!(
            stopped.logs[agent].lock().unwrap().calls.is_empty(),
            "{agent} was called after the takeover"
        );
    }
}
