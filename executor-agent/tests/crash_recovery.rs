//! Journal and recovery: a saga "crashes" after every possible number of journal writes,
//! is rebuilt from the journal, and carries on; it must end exactly as an uninterrupted
//! run does, and no tool may apply any idempotency key twice.

mod common;

use executor_agent::journal::{Ownership, SagaLog};
use std::collections::HashMap;

use common::{supplier_catalog, supplier_plan};
use executor_agent::journal::{Entry, SagaHeader, SqliteJournal};
use executor_agent::recovery::replay;
use executor_agent::saga::model::Phase;
use executor_agent::saga::{CallOutcome, Command, Event, Invocation, Saga, SagaSpec, Timer};
use serde_json::json;

const T0: i64 = 1_800_000_000_000;

fn spec() -> SagaSpec {
    SagaSpec::new(&supplier_plan(), &supplier_catalog()).unwrap()
}

/// Tools that honour Idempotency-Key: a repeated key replays the first result.
#[derive(Default)]
struct Tools {
    /// Effects actually applied, by idempotency key, in order.
    applied: Vec<String>,
    results: HashMap<String, CallOutcome>,
    /// The registry times out on its first two tries (a retried unknown outcome).
    registry_tries: u32,
    fail_registry: bool,
}

impl Tools {
    fn call(&mut self, inv: &Invocation) -> CallOutcome {
        if let Some(previous) = self.results.get(&inv.idempotency_key) {
            return previous.clone();
        }
        if inv.call.skill == "compliance.check" {
            self.registry_tries += 1;
            if self.fail_registry || self.registry_tries <= 2 {
                return CallOutcome::Unknown {
                    reason: "timed out".into(),
                };
            }
        }
        let response = json!({"vendorId": "v_1", "reservationId": "r_1", "tenantId": "t_1", "login": "l",
                              "status": "clear", "reference": "c_1", "captureId": "p_1", "messageId": "m_1"});
        let outcome = CallOutcome::Succeeded { response };
        self.applied.push(inv.idempotency_key.clone());
        self.results
            .insert(inv.idempotency_key.clone(), outcome.clone());
        outcome
    }
}

struct Crash;

/// A driver over an in-memory journal that crashes after `budget` writes.
struct Sim<'t> {
    journal: Vec<Entry>,
    budget: usize,
    tools: &'t mut Tools,
}

impl Sim<'_> {
    fn write(&mut self, entry: Entry) -> Result<(), Crash> {
        if self.budget == 0 {
            return Err(Crash);
        }
        self.budget -= 1;
        self.journal.push(entry);
        Ok(())
    }

    fn invoke(&mut self, inv: Invocation, queue: &mut Vec<Event>) -> Result<(), Crash> {
        self.write(Entry::Intent(inv.clone()))?;
        let outcome = self.tools.call(&inv);
        queue.push(Event::Result {
            target: inv.target,
            attempt: inv.attempt,
            outcome,
            now_ms: T0 + 1,
        });
        Ok(())
    }

    fn run(&mut self, saga: &mut Saga, mut queue: Vec<Event>) -> Result<(), Crash> {
        while let Some(event) = queue.pop() {
            self.write(Entry::Event(event.clone()))?;
            for command in saga.step(event) {
                match command {
                    Command::Invoke(inv) => self.invoke(inv, &mut queue)?,
                    Command::StartTimer {
                        timer: timer @ Timer::Retry { .. },
                        ..
                    } => queue.push(Event::TimerFired {
                        timer,
                        now_ms: T0 + 2,
                    }),
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

/// Runs with a crash after `budget` writes (`usize::MAX`: no crash), recovers, finishes.
fn run_with_crash(budget: usize, fail_registry: bool) -> (Saga, Tools, usize) {
    let mut tools = Tools {
        fail_registry,
        ..Tools::default()
    };
    let mut saga = Saga::new(spec());
    let mut sim = Sim {
        journal: Vec::new(),
        budget,
        tools: &mut tools,
    };
    let crashed = sim
        .run(&mut saga, vec![Event::Start { now_ms: T0 }])
        .is_err();
    let written = sim.journal.len();
    if crashed {
        let journal = std::mem::take(&mut sim.journal);
        let recovered = replay(spec(), &journal, T0 + 3).unwrap();
        saga = recovered.saga;
        let mut sim = Sim {
            journal,
            budget: usize::MAX,
            tools: &mut tools,
        };
        let mut queue = recovered.lost;
        // Not started (a crash before the first write): its driver starts it, as it
        // starts a plan accepted to wait for a slot.
        if saga.phase == Phase::NotStarted {
            queue.push(Event::Start { now_ms: T0 + 3 });
        }
        for inv in recovered.to_invoke {
            sim.invoke(inv, &mut queue)
                .unwrap_or_else(|_| unreachable!());
        }
        for (timer, _) in recovered.timers {
            if matches!(timer, Timer::Retry { .. }) {
                queue.push(Event::TimerFired {
                    timer,
                    now_ms: T0 + 4,
                });
            }
        }
        sim.run(&mut saga, queue).unwrap_or_else(|_| unreachable!());
    }
    (saga, tools, written)
}

fn check_every_crash_point(fail_registry: bool) {
    let (clean, clean_tools, writes) = run_with_crash(usize::MAX, fail_registry);
    assert!(
        writes > 10,
        "the uninterrupted run journals {writes} entries"
    );
    for budget in 0..writes {
        let (saga, tools, _) = run_with_crash(budget, fail_registry);
        assert_eq!(saga.phase, clean.phase, "crash after {budget} writes");
        assert_eq!(
            tools.applied, clean_tools.applied,
            "crash after {budget} writes: the same effects, once each"
        );
        let forward: Vec<_> = saga.records.iter().map(|r| (&r.forward, &r.undo)).collect();
        let expected: Vec<_> = clean
            .records
            .iter()
            .map(|r| (&r.forward, &r.undo))
            .collect();
        assert_eq!(
            format!("{forward:?}"),
            format!("{expected:?}"),
            "crash after {budget} writes"
        );
    }
}

#[test]
fn a_crash_at_any_journal_point_ends_like_an_uninterrupted_run() {
    check_every_crash_point(false);
}

#[test]
fn a_crash_during_compensation_ends_like_an_uninterrupted_run() {
    check_every_crash_point(true);
    let (saga, tools, _) = run_with_crash(usize::MAX, true);
    assert!(
        tools.applied.iter().any(|k| k.ends_with(":s0:undo")),
        "{:?}",
        tools.applied
    );
    assert!(format!("{:?}", saga.phase).contains("Compensated"));
}

fn header(saga_id: &str) -> SagaHeader {
    SagaHeader {
        format: executor_agent::journal::JOURNAL_FORMAT,
        saga_id: saga_id.into(),
        plan_version: 1,
        task_id: format!("task-{saga_id}"),
        context_id: format!("ctx-{saga_id}"),
        plan: json!({}).into(),
        spec: spec().into(),
        registrations_read: None,
    }
}

#[tokio::test]
async fn the_sqlite_journal_keeps_everything_across_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let header = header("sg_1");
    {
        let journal = SqliteJournal::open(&path).unwrap();
        let epoch = journal.begin(&header, &[]).await.unwrap();
        let (clean, _, _) = run_with_crash(usize::MAX, false);
        assert!(format!("{:?}", clean.phase).contains("Completed"));
        journal
            .append("sg_1", epoch, &[Entry::Event(Event::Start { now_ms: T0 })])
            .await
            .unwrap();
        let appends = (0..50).map(|i| {
            let journal = journal.clone();
            async move {
                journal
                    .append(
                        "sg_1",
                        epoch,
                        &[Entry::Event(Event::Cancel { now_ms: T0 + i })],
                    )
                    .await
            }
        });
        for result in futures_join(appends).await {
            result.unwrap();
        }
        assert_eq!(journal.unfinished().await.unwrap(), ["sg_1"]);
    }
    let journal = SqliteJournal::open(&path).unwrap();
    let (loaded, entries) = journal.load("sg_1").await.unwrap().unwrap();
    assert_eq!(loaded, header);
    assert_eq!(entries.len(), 51);
    assert_eq!(entries[0], Entry::Event(Event::Start { now_ms: T0 }));
    let epoch = journal
        .claim("sg_1", T0, executor_agent::journal::Claim::TakeOver)
        .await
        .unwrap()
        .expect("taken over");
    let ending = executor_agent::journal::Ending::default();
    journal
        .end("sg_1", epoch, &[], &ending, None)
        .await
        .unwrap();
    assert!(journal.unfinished().await.unwrap().is_empty());
    assert!(journal.load("nope").await.unwrap().is_none());
}

#[tokio::test]
async fn appends_load_in_order_and_single_entry_rows_still_load() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let header = header("sg_2");
    let event = |i: i64| Entry::Event(Event::Cancel { now_ms: T0 + i });
    {
        let journal = SqliteJournal::open(&path).unwrap();
        let epoch = journal.begin(&header, &[]).await.unwrap();
        journal
            .append("sg_2", epoch, &[event(0), event(1)])
            .await
            .unwrap();
    }
    // A row as journals wrote them before an append became one row: one entry, no array.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute(
        "INSERT INTO entries (saga_id, body) VALUES ('sg_2', ?1)",
        [serde_json::to_string(&event(2)).unwrap()],
    )
    .unwrap();
    drop(conn);
    // Opened again, as by the next start: it claims the saga before it writes.
    let journal = SqliteJournal::open(&path).unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    let epoch = journal
        .claim("sg_2", now, executor_agent::journal::Claim::TakeOver)
        .await
        .unwrap()
        .expect("an unfinished saga is claimed");
    journal
        .append("sg_2", epoch, &[event(3), event(4), event(5)])
        .await
        .unwrap();
    let (_, entries) = journal.load("sg_2").await.unwrap().unwrap();
    assert_eq!(entries, (0..6).map(event).collect::<Vec<_>>());
}

/// Runs futures concurrently (so their appends share commits) and collects the results.
async fn futures_join<F>(futures: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for handle in handles {
        out.push(handle.await.unwrap());
    }
    out
}

/// A journal written by an engine that bound a call otherwise: replay stops the saga for a
/// person with both argument sets, makes no call, and a retry sends the journaled call.
#[test]
fn a_call_replay_derives_otherwise_than_its_journal_stops_the_saga_and_is_resent_as_journaled() {
    use executor_agent::saga::Resolution;
    use executor_agent::saga::model::Phase;

    // The first step went out and the process died before its answer; the build that
    // wrote this bound the vendor's name otherwise than this one does.
    let mut writer = Saga::new(spec());
    let start = Event::Start { now_ms: T0 };
    let commands = writer.step(start.clone());
    let Some(Command::Invoke(sent)) = commands.iter().find(|c| matches!(c, Command::Invoke(_)))
    else {
        panic!("the first step is a call: {commands:?}");
    };
    let mut journaled = sent.clone();
    journaled.args = json!({"legalName": "Acme (as the older build bound it)"});
    let entries = vec![Entry::Event(start), Entry::Intent(journaled.clone())];

    let recovered = replay(spec(), &entries, T0 + 1_000).unwrap();
    assert!(recovered.to_invoke.is_empty(), "{:?}", recovered.to_invoke);
    let Some(Event::ReplayDiverged {
        journaled: told,
        derived_args,
        ..
    }) = recovered.lost.first()
    else {
        panic!("replay tells the engine first: {:?}", recovered.lost);
    };
    assert_eq!(**told, journaled);
    assert_eq!(*derived_args, sent.args);

    let mut saga = recovered.saga;
    let mut made = Vec::new();
    let mut reason = String::new();
    for event in recovered.lost {
        for command in saga.step(event) {
            match command {
                Command::Invoke(call) => made.push(call),
                Command::Pause { reason: why } => reason = why,
                _ => {}
            }
        }
    }
    assert!(made.is_empty(), "no call after the difference: {made:?}");
    assert!(
        matches!(saga.phase, Phase::Paused { .. }),
        "{:?}",
        saga.phase
    );
    assert!(
        reason.contains("as the older build bound it") && reason.contains(&sent.args.to_string()),
        "both argument sets are shown: {reason}"
    );

    // A person retries: the call goes as journaled, under its key, never re-bound.
    let commands = saga.step(Event::Resolve {
        resolution: Resolution::Retry,
        now_ms: T0 + 2_000,
        decider: None,
    });
    let resent: Vec<&Invocation> = commands
        .iter()
        .filter_map(|c| match c {
            Command::Invoke(call) => Some(call),
            _ => None,
        })
        .collect();
    assert_eq!(resent.len(), 1, "{commands:?}");
    assert_eq!(resent[0].args, journaled.args);
    assert_eq!(resent[0].idempotency_key, journaled.idempotency_key);

    // The difference is journaled with the saga: replayed again, it is not told twice.
    let mut again = entries.clone();
    again.push(Entry::Event(Event::ReplayDiverged {
        target: journaled.target,
        attempt: journaled.attempt,
        journaled: Box::new(journaled.clone()),
        derived_args: sent.args.clone(),
        derived_key: sent.idempotency_key.clone(),
        now_ms: T0 + 1_000,
    }));
    let replayed = replay(spec(), &again, T0 + 3_000).unwrap();
    assert!(
        !replayed
            .lost
            .iter()
            .any(|e| matches!(e, Event::ReplayDiverged { .. })),
        "{:?}",
        replayed.lost
    );
    assert!(matches!(replayed.saga.phase, Phase::Paused { .. }));
}
