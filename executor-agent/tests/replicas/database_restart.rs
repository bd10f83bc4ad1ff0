//! The database restarted under replicas: with calls out, nothing is lost or done twice;
//! plans accepted meanwhile each begin or end; a replica is not ready while it is away.

use super::*;

/// `GET /readyz` of a replica: its status code.
async fn readiness(replica: &Executor) -> u16 {
    reqwest::get(format!("{}/readyz", replica.url))
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_restarted_under_replicas_with_calls_out_loses_nothing_and_does_nothing_twice()
{
    let _alone = ONE_AT_A_TIME.lock().await;
    const RESTART_SAGAS: usize = 100;
    // A cluster of its own: the one `scripts/test` starts is shared by every test. Where
    // that one is not there, PostgreSQL tests check nothing (and fail under CI=true).
    if scratch_database("replicas_database_restart")
        .await
        .is_none()
    {
        return;
    }
    let cluster = Cluster::start().unwrap();
    let url = cluster.url();
    let world = World::new();
    let held = [(HELD_SKILL, Fault::ApplyThenGate(RESTART_SAGAS as u32))];
    let (cards, logs) =
        start_tools_timed(&held, &world.platform, PATIENCE.as_millis() as u64).await;
    let mut replicas: Vec<Executor> = (0..REPLICAS)
        .map(|_| Executor::replica(&world, &url, "warn", &[]))
        .collect();
    register(&replicas[0], &cards).await;
    let sent = futures::stream::iter(0..RESTART_SAGAS)
        .map(|n| {
            let (world, replicas) = (&world, &replicas);
            async move { send_plan(world, &replicas[n % REPLICAS], n).await }
        })
        .buffered(16);
    let tasks: Vec<Task> = sent.collect().await;
    tokio::time::timeout(
        PATIENCE,
        until_applied(&logs, "compliance-registry", RESTART_SAGAS),
    )
    .await
    .expect("every saga reaches its held call");

    // The database goes away (`pg_ctl restart -m fast`, in its two halves) with every
    // saga's call out: each replica sees it, and says it is not ready.
    cluster.stop_fast().unwrap();
    for replica in &mut replicas {
        tokio::time::timeout(
            PATIENCE,
            replica.said("lost the connection listening for task events"),
        )
        .await
        .expect("the replica notices the database is away");
        assert_eq!(readiness(replica).await, 503, "not ready while it is away");
    }
    // The held calls answer while it is away: their journal writes wait for it.
    logs["compliance-registry"].lock().unwrap().gate.open();
    cluster.start_server().unwrap();

    let every: Vec<&Executor> = replicas.iter().collect();
    all_completed(&world, &every, tasks).await;
    each_key_applied_once(&logs, RESTART_SAGAS);
    for replica in &replicas {
        assert_eq!(readiness(replica).await, 200, "ready once it is back");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plans_accepted_while_the_database_restarts_each_begin_or_end() {
    let _alone = ONE_AT_A_TIME.lock().await;
    const PLANS: usize = 300;
    /// After the database is back, how long the accepted plans may take to end.
    const BOUND: std::time::Duration = std::time::Duration::from_secs(120);
    if scratch_database("replicas_accept_during_restart")
        .await
        .is_none()
    {
        return;
    }
    let cluster = Arc::new(Cluster::start().unwrap());
    let url = cluster.url();
    let world = World::new();
    let (cards, logs) = start_tools_timed(&[], &world.platform, 5_000).await;
    let replicas: Vec<Executor> = (0..REPLICAS)
        .map(|_| Executor::replica(&world, &url, "warn", &[]))
        .collect();
    register(&replicas[0], &cards).await;

    // Plans sent round-robin, 16 at a time; once 100 have been answered, the database
    // restarts (`pg_ctl restart -m fast`, in its two halves) while the rest arrive.
    let (answered, mut answers) = tokio::sync::watch::channel(0usize);
    let restarted = {
        let cluster = cluster.clone();
        tokio::spawn(async move {
            answers.wait_for(|n| *n >= 100).await.unwrap();
            tokio::task::spawn_blocking(move || {
                cluster.stop_fast().unwrap();
                cluster.start_server().unwrap();
            })
            .await
            .unwrap();
            Instant::now()
        })
    };
    let sent: Vec<(usize, Option<Task>)> = futures::stream::iter(0..PLANS)
        .map(|n| {
            let (world, replicas, answered) = (&world, &replicas, &answered);
            async move {
                let sent = replicas[n % REPLICAS]
                    .client()
                    .send(&as_planner(world), &plan_request(world, n))
                    .await;
                answered.send_modify(|count| *count += 1);
                match sent {
                    Ok(SendMessageResponse::Task(task)) => (n, Some(task)),
                    // Refused while the database was away: not accepted, nothing promised.
                    _ => (n, None),
                }
            }
        })
        .buffered(16)
        .collect()
        .await;
    let back = restarted.await.unwrap();
    let accepted: Vec<(usize, Task)> = sent
        .into_iter()
        .filter_map(|(n, task)| task.map(|t| (n, t)))
        .collect();
    eprintln!(
        "{} of {PLANS} plans accepted across the restart",
        accepted.len()
    );
    assert!(accepted.len() >= 200, "the restart was not in the middle");

    // Every accepted plan's task ends within the bound: completed, or failed with why.
    let ended = tokio::time::timeout(
        BOUND,
        futures::future::join_all(accepted.iter().map(|(n, task)| {
            let (world, replica) = (&world, &replicas[n % REPLICAS]);
            async move { (*n, settle(world, replica, task.clone()).await) }
        })),
    )
    .await
    .expect("every accepted plan's task ends within the bound after the database is back");
    eprintln!(
        "the last accepted plan ended {} ms after the database was back",
        back.elapsed().as_millis()
    );
    let mut completed = Vec::new();
    for (n, task) in &ended {
        match task.status.state {
            TaskState::Completed => completed.push(*n),
            TaskState::Failed => {
                let said = format!("{:?}", task.status.message);
                assert!(
                    said.contains("failed"),
                    "saga {n} failed without a reason: {said}"
                );
            }
            _ => panic!("saga {n} did not end: {:?}", task.status),
        }
    }
    eprintln!(
        "{} completed, {} failed",
        completed.len(),
        ended.len() - completed.len()
    );
    // Judged from the tools' own ledgers: every completed saga's six steps applied, and
    // no key applied twice.
    for (agent, keys) in no_key_applied_twice(&logs) {
        for n in &completed {
            let prefix = format!("{}:", saga_id(*n));
            assert!(
                keys.iter().any(|k| k.starts_with(&prefix)),
                "{agent} applied nothing of completed saga {n}"
            );
        }
    }
}
