//! Runs of the real `executor-agent` binary killed with SIGKILL at a chosen point
//! (`Crash`) and restarted on the same data directory, and sweeps of every journal point
//! of a saga: each run must end as the uninterrupted one does.

use serde_json::Value;

use super::process::*;
use super::{Fault, start_tools_with};
use agent_host::sdk::TaskState;

/// Where a run kills the executor.
#[derive(Debug, Clone, Copy)]
pub enum Crash<'a> {
    Never,
    /// Right after its `n`-th durable journal write.
    AfterJournalWrite(u64),
    /// Once the tool agent `agent` has applied the effect with this idempotency key, whose
    /// answer it holds back: the executor made the call but never journaled its result.
    AfterApplied {
        agent: &'a str,
        key: &'a str,
    },
    /// Once the tool agent `agent` has received a call under this key, whose answer it
    /// holds back (a verification: it applies nothing).
    AfterCalled {
        agent: &'a str,
        key: &'a str,
    },
}

/// One run: the plan is submitted, the executor killed as `crash` says (if it gets
/// there), restarted, and the saga followed to its end. Returns the ending, and whether
/// the crash happened.
pub async fn run(world: &World, faults: &[(&str, Fault)], crash: Crash<'_>) -> (Ending, bool) {
    run_with_cards(world, faults, crash, &|_, _| {}).await
}

/// `run`, with the tool agents' cards changed by `tweak(agent, card)`.
pub async fn run_with_cards(
    world: &World,
    faults: &[(&str, Fault)],
    crash: Crash<'_>,
    tweak: &dyn Fn(&str, &mut Value),
) -> (Ending, bool) {
    let data = tempfile::tempdir().unwrap();
    let (cards, logs) = start_tools_with(faults, &world.platform, 300, tweak).await;
    let pause = match crash {
        Crash::AfterJournalWrite(n) => Some(n),
        _ => None,
    };
    let mut executor = Executor::start(world, data.path(), pause);
    register(&executor, &cards).await;
    let crashed = if let Crash::Never = crash {
        false
    } else {
        let client = executor.client();
        let (call, request) = (as_planner(world), plan_message(world));
        let mut sent = tokio::spawn(async move { client.send(&call, &request).await });
        let reached = match crash {
            Crash::AfterApplied { agent, key } => tokio::select! {
                _ = applied(&logs, agent, key) => true,
                _ = &mut sent => false,
            },
            Crash::AfterCalled { agent, key } => tokio::select! {
                _ = called(&logs, agent, key) => true,
                _ = &mut sent => false,
            },
            _ => tokio::select! {
                paused = executor.paused() => paused,
                _ = &mut sent => false,
            },
        };
        if reached {
            executor.kill();
            executor = Executor::start(world, data.path(), None);
        }
        reached
    };
    let task = submit(world, &executor).await;
    let task = settle(world, &executor, task).await;
    (ending(&task, &logs), crashed)
}

/// Kills the executor after each journal write in turn; every run must end like the
/// uninterrupted one. `points` is how many journal writes the saga makes: each event is
/// journaled together with the intents of the calls it leads to, so a six-step saga
/// writes its header with its start and the first intent, one write per answer (with the
/// next intent, if any), its end, then the mark that it finished. The sweep stops at the
/// first run that ends without pausing; the finish mark is made once the end is reported,
/// so it races the test's reading of the answer, and `points` counts the writes up to and
/// including the end.
pub async fn sweep(faults: &[(&str, Fault)], expected_state: TaskState, points: usize) {
    sweep_with_cards(faults, &|_, _| {}, expected_state, points).await;
}

/// `sweep`, with the tool agents' cards changed by `tweak(agent, card)`.
pub async fn sweep_with_cards(
    faults: &[(&str, Fault)],
    tweak: &dyn Fn(&str, &mut Value),
    expected_state: TaskState,
    points: usize,
) {
    sweep_world(&World::new(), faults, tweak, expected_state, points).await;
}

/// `sweep_with_cards` in `world` (whose plan its runs submit).
pub async fn sweep_world(
    world: &World,
    faults: &[(&str, Fault)],
    tweak: &dyn Fn(&str, &mut Value),
    expected_state: TaskState,
    points: usize,
) {
    let (reference, _) = run_with_cards(world, faults, Crash::Never, tweak).await;
    assert_eq!(reference.state, expected_state, "{reference:?}");
    let mut crashes = 0;
    // Past the last journal write a run ends without pausing.
    for n in 1..=500 {
        let (ending, crashed) =
            run_with_cards(world, faults, Crash::AfterJournalWrite(n), tweak).await;
        if !crashed {
            break;
        }
        crashes += 1;
        assert_eq!(ending, reference, "after a crash at journal write {n}");
    }
    eprintln!("{crashes} journal points, each killed and recovered");
    assert!(
        crashes >= points,
        "only {crashes} journal points were reached, expected at least {points}"
    );
}
