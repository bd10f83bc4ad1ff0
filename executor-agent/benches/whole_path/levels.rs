//! Two concurrency levels in turn (`WHOLE_PATH_LEVEL_PAIRS=N`): N pairs of rounds, one at
//! each of the two levels `WHOLE_PATH_LEVELS` names (the clients waiting as the first of
//! `WHOLE_PATH_MODES` says), the order swapped from one pair to the next, each round on an
//! executor of its own (a fresh SQLite state file, warmed as the usual rounds are). The
//! usual rounds share one executor, so a later level meets a larger state file and a
//! warmer process; and the machine's speed drifts by as much as the levels differ. Here
//! neither favours a level: what is left is whether CPU per step rises with concurrency.

use std::path::Path;
use std::time::Duration;

use super::setup::{Keys, register};
use super::{
    Mode, Round, STEPS, WARM_UP_SECONDS, print_header, print_round, rounds, run_round,
    start_executor, warm_up,
};

/// How many pairs of rounds, if asked for.
pub fn wanted() -> Option<usize> {
    super::count_in("WHOLE_PATH_LEVEL_PAIRS")
}

/// The two levels to compare, lower first, and how the clients wait.
fn two_levels() -> (Mode, [usize; 2]) {
    let rounds = rounds();
    let mode = rounds.first().map_or(Mode::Blocking, |(mode, _)| *mode);
    let mut levels: Vec<usize> = rounds
        .iter()
        .filter(|(m, _)| *m == mode)
        .map(|(_, level)| *level)
        .collect();
    levels.sort_unstable();
    levels.dedup();
    match levels[..] {
        [lower, higher] => (mode, [lower, higher]),
        _ => panic!(
            "WHOLE_PATH_LEVEL_PAIRS compares two levels: set WHOLE_PATH_LEVELS to two numbers of clients (64,256), not {levels:?}"
        ),
    }
}

/// One round's figures as the comparison reads them.
#[derive(Default)]
struct Measured {
    cpu_per_saga: f64,
    steps_per_second: f64,
}

impl Measured {
    fn of(round: &Round) -> Self {
        Self {
            cpu_per_saga: round.executor_ms / round.sagas.max(1) as f64,
            steps_per_second: (round.sagas * STEPS) as f64 / round.seconds,
        }
    }
}

/// Runs the pairs, printing each round as the usual rounds are, then each pair and what
/// they add up to.
pub fn compare(
    client: &tokio::runtime::Runtime,
    dir: &Path,
    keys: &Keys,
    tool_urls: &[String],
    template: &str,
    pairs: usize,
    length: Duration,
) {
    let (mode, levels) = two_levels();
    println!(
        "{} and {} clients in turn, {pairs} pairs, {} s a round, each on a fresh executor warmed for {WARM_UP_SECONDS} s at 64 clients (the order swapped each pair):",
        levels[0],
        levels[1],
        length.as_secs()
    );
    print_header();
    let mut lines = Vec::new();
    let (mut cpu_higher, mut steps_not_fewer) = (0, 0);
    for pair in 0..pairs {
        let order = if pair % 2 == 0 { [0, 1] } else { [1, 0] };
        let mut measured = [Measured::default(), Measured::default()];
        for which in order {
            let clients = levels[which];
            // Saga ids are unique per round index, across the pairs: the tool agents are
            // the same throughout, and answer a key they saw from what they recorded.
            let index = 10_000 + 2 * pair + which;
            let executor = [start_executor(
                &dir.join(format!("levels-{pair}-{clients}")),
                keys,
                false,
                None,
            )];
            client.block_on(register(
                &executor[0].url,
                &keys.platform,
                tool_urls,
                &|_, _| {},
            ));
            client.block_on(warm_up(index + 100_000, &executor, &keys.planner, template));
            let round = client.block_on(run_round(
                index,
                mode,
                &executor,
                &keys.planner,
                template,
                clients,
                length,
            ));
            print_round(&round);
            measured[which] = Measured::of(&round);
        }
        let [lower, higher] = measured;
        let rise = higher.cpu_per_saga - lower.cpu_per_saga;
        cpu_higher += usize::from(rise > 0.0);
        steps_not_fewer += usize::from(higher.steps_per_second >= lower.steps_per_second);
        lines.push(format!(
            "  pair {} ({} first): executor CPU per saga {:.2} ms at {} clients, {:.2} at {} ({:+.2}); steps/s {:.0} and {:.0}",
            pair + 1,
            levels[order[0]],
            lower.cpu_per_saga,
            levels[0],
            higher.cpu_per_saga,
            levels[1],
            rise,
            lower.steps_per_second,
            higher.steps_per_second,
        ));
    }
    for line in &lines {
        println!("{line}");
    }
    println!(
        "  at {} clients against {}: CPU per saga higher in {cpu_higher} of {pairs} pairs; as many steps/s or more in {steps_not_fewer} of {pairs}",
        levels[1], levels[0]
    );
}
