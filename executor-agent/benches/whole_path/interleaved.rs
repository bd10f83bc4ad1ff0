//! The SQLite executor and the PostgreSQL replicas in turn (`WHOLE_PATH_INTERLEAVED=N`):
//! N pairs of rounds at each level of `WHOLE_PATH_LEVELS`, one round on each set-up, the
//! order swapped from one pair to the next. This machine's speed drifts by more than the
//! set-ups differ over the minute that two separate runs take; rounds in turn see it
//! drift alike, and the ratio of each pair is read from rounds seconds apart.

use std::time::Duration;

use shared_types::SigningIdentity;

use super::{Executor, Round, STEPS, database, ms, quantile, rounds, run_round};

/// What a round cost per step, in ms of CPU (from `/proc`): the executors, the tool agents
/// and clients of this process, and the postgres processes.
struct Cost {
    executors: f64,
    tools_and_clients: f64,
    postgres: f64,
}

impl Cost {
    fn of(round: &Round, postgres_ticks: u64) -> Self {
        let steps = (round.sagas.max(1) * STEPS) as f64;
        Self {
            executors: round.executor_ms / steps,
            tools_and_clients: (round.tools_ms + round.client_ms) / steps,
            postgres: ms(postgres_ticks) / steps,
        }
    }

    fn total(&self) -> f64 {
        self.executors + self.tools_and_clients + self.postgres
    }
}

/// How many pairs of rounds each level gets, if asked for.
pub fn wanted() -> Option<usize> {
    super::count_in("WHOLE_PATH_INTERLEAVED")
}

/// Runs the pairs and prints each, then each level's summary.
pub async fn compare(
    sqlite: &[Executor],
    replicas: &[Executor],
    planner: &SigningIdentity,
    template: &str,
    pairs: usize,
    length: Duration,
) {
    // Warm, as the replicas are: connections, pools, the heap.
    super::warm_up(usize::MAX - 3, sqlite, planner, template).await;
    println!(
        "\nthe SQLite executor and the {} replicas in turn, {} s a round, {pairs} pairs per level (the order swapped each pair):",
        replicas.len(),
        length.as_secs()
    );
    // Saga ids are unique per round index: these start past the other rounds'.
    let mut index = 1_000;
    for (mode, clients) in rounds() {
        let (mut on_sqlite, mut on_replicas, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for pair in 0..pairs {
            let mut steps_per_second = [0.0; 2];
            let mut costs = [None, None];
            let order: [usize; 2] = if pair % 2 == 0 { [0, 1] } else { [1, 0] };
            for which in order {
                let executors = if which == 0 { sqlite } else { replicas };
                let postgres_before = database::postgres_ticks();
                let round =
                    run_round(index, mode, executors, planner, template, clients, length).await;
                let postgres = database::postgres_ticks().saturating_sub(postgres_before);
                index += 1;
                steps_per_second[which] = (round.sagas * STEPS) as f64 / round.seconds;
                // The SQLite executor uses no database: what postgres did meanwhile (the
                // replicas' idle renewals, autovacuum) is not its cost.
                let postgres = if which == 0 { 0 } else { postgres };
                costs[which] = Some(Cost::of(&round, postgres));
            }
            let [s, r] = steps_per_second;
            let [Some(on_s), Some(on_r)] = costs else {
                unreachable!("both rounds ran")
            };
            println!(
                "{:>9} {clients:>4} clients, pair {}: SQLite {s:>6.0} steps/s, replicas {r:>6.0} steps/s, ratio {:.2}; CPU per step, SQLite {:.3} ms (executor {:.3}, tools and clients {:.3}), replicas {:.3} ms (executors {:.3}, postgres {:.3}, tools and clients {:.3})",
                format!("{mode:?}").to_lowercase(),
                pair + 1,
                r / s,
                on_s.total(),
                on_s.executors,
                on_s.tools_and_clients,
                on_r.total(),
                on_r.executors,
                on_r.postgres,
                on_r.tools_and_clients,
            );
            on_sqlite.push(s);
            on_replicas.push(r);
            ratios.push(r / s);
        }
        let total = |v: &[f64]| v.iter().sum::<f64>();
        println!(
            "{:>9} {clients:>4} clients, {pairs} pairs: SQLite p50 {:.0} steps/s, replicas p50 {:.0} steps/s; ratio of each pair p50 {:.2} (lowest {:.2}, highest {:.2}); ratio of the totals {:.2}",
            format!("{mode:?}").to_lowercase(),
            quantile(&on_sqlite, 0.5),
            quantile(&on_replicas, 0.5),
            quantile(&ratios, 0.5),
            quantile(&ratios, 0.0),
            quantile(&ratios, 1.0),
            total(&on_replicas) / total(&on_sqlite),
        );
    }
}
