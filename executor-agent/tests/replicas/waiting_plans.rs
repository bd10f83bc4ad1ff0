//! Plans waiting for a saga slot across replicas: each is a saga journaled under its
//! replica's lease and not started, so when that replica dies, or is paused past its
//! lease, another takes them over and runs each once.

use super::*;

/// Waits until the task shows on `replica` that its plan waits for a saga slot.
async fn until_waiting_for_a_slot(world: &World, replica: &Executor, task_id: &str) {
    until_status_says(world, replica, task_id, "waiting for a saga slot").await;
}

/// How many plans wait for the one saga slot of the holder in `plans_waiting_for_the_slot`.
const WAITING: usize = 5;

/// Plans waiting for a slot on one replica (`holder`), and another replica (`taker`).
struct Waiting {
    world: World,
    logs: HashMap<String, Arc<Mutex<ToolLog>>>,
    holder: Executor,
    taker: Executor,
    /// Saga 0's task, then the waiting plans'.
    tasks: Vec<Task>,
}

/// The holder has one saga slot: saga 0 takes it and is held at s3 (the gate of
/// `compliance-registry` closed), and `WAITING` plans sent after it wait, each a saga
/// journaled under the holder's lease and not started. `None` without a database (said on
/// stderr).
async fn plans_waiting_for_the_slot(database: &str, holder_log: &str) -> Option<Waiting> {
    let url = scratch_database(database).await?;
    let world = World::new();
    let held = [(HELD_SKILL, Fault::ApplyThenGate(1))];
    let (cards, logs) =
        start_tools_timed(&held, &world.platform, PATIENCE.as_millis() as u64).await;
    let holder = Executor::replica(&world, &url, holder_log, &["--max-running-sagas", "1"]);
    let taker = Executor::replica(&world, &url, "info", &[]);
    register(&holder, &cards).await;
    let mut tasks = vec![send_plan(&world, &holder, 0).await];
    tokio::time::timeout(PATIENCE, until_applied(&logs, "compliance-registry", 1))
        .await
        .expect("saga 0 reaches its held call");
    for n in 1..=WAITING {
        let task = send_plan(&world, &holder, n).await;
        until_waiting_for_a_slot(&world, &holder, &task.id).await;
        tasks.push(task);
    }
    Some(Waiting {
        world,
        logs,
        holder,
        taker,
        tasks,
    })
}

/// The taker says it took over saga 0 and every waiting plan (their leases lapsed alike),
/// and each ends COMPLETED on it, each tool applying each key once.
async fn all_taken_over_and_completed(
    world: &World,
    logs: &HashMap<String, Arc<Mutex<ToolLog>>>,
    taker: &mut Executor,
    tasks: &[Task],
) {
    let mut taken = 0;
    while taken < WAITING + 1 {
        let line = tokio::time::timeout(PATIENCE, taker.stderr.recv())
            .await
            .unwrap_or_else(|_| panic!("the taker took over {taken} sagas of {}", WAITING + 1))
            .expect("the taker still runs");
        if line.contains("took over sagas whose owner's lease lapsed") {
            eprintln!("taker: {line}");
            taken += sagas_in(&line);
        }
    }
    assert_eq!(
        taken,
        WAITING + 1,
        "saga 0 and the waiting plans, each once"
    );
    for (n, task) in tasks.iter().enumerate() {
        let ended = settle(world, taker, task.clone()).await;
        assert_eq!(
            ended.status.state,
            TaskState::Completed,
            "saga {n}: {:?}",
            ended.status
        );
    }
    each_key_applied_once(logs, WAITING + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plans_waiting_for_a_slot_on_a_replica_that_died_are_taken_over_by_another() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let Some(Waiting {
        world,
        logs,
        holder: owner,
        mut taker,
        tasks,
    }) = plans_waiting_for_the_slot("replicas_waiting_plans", "warn").await
    else {
        return;
    };
    // Nothing of the waiting plans has run: their saga has not started anywhere.
    assert_eq!(logs["vendor-registry"].lock().unwrap().effects.len(), 1);
    owner.kill();
    logs["compliance-registry"].lock().unwrap().gate.open();

    // Saga 0 and the waiting plans come back alike, each under its saga's lease.
    all_taken_over_and_completed(&world, &logs, &mut taker, &tasks).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_paused_past_its_lease_on_waiting_plans_leaves_them_to_the_one_that_took_them_over()
 {
    let _alone = ONE_AT_A_TIME.lock().await;
    let Some(Waiting {
        world,
        logs,
        mut holder,
        mut taker,
        tasks,
    }) = plans_waiting_for_the_slot("replicas_paused_holder", "info").await
    else {
        return;
    };

    // Paused past its lease: the other takes saga 0 and the waiting plans over, and ends
    // them all.
    signal(&holder, "STOP");
    logs["compliance-registry"].lock().unwrap().gate.open();
    all_taken_over_and_completed(&world, &logs, &mut taker, &tasks).await;
    let calls_before: HashMap<String, usize> = AGENTS
        .iter()
        .map(|agent| (agent.to_string(), logs[*agent].lock().unwrap().calls.len()))
        .collect();

    // Woken: saga 0's next write is refused, which frees the slot; each waiting plan then
    // takes the slot in turn, and the write that would start it is refused too.
    signal(&holder, "CONT");
    let mut fenced = 0;
    while fenced < WAITING + 1 {
        let line = tokio::time::timeout(PATIENCE, holder.stderr.recv())
            .await
            .unwrap_or_else(|_| panic!("fenced out {fenced} of {}", WAITING + 1))
            .expect("the woken replica still runs");
        eprintln!("executor: {line}");
        if line.contains("another replica took the saga over") {
            assert!(line.contains("refused a write"), "{line}");
            fenced += 1;
        }
    }
    // Nothing more reached a tool, and every task still reads COMPLETED, on both.
    for agent in AGENTS {
        assert_eq!(
            logs[agent].lock().unwrap().calls.len(),
            calls_before[agent],
            "{agent} was called by the woken replica"
        );
    }
    for replica in [&holder, &taker] {
        for task in &tasks {
            let read = replica
                .client()
                .get_task(&as_planner(&world), &task.id)
                .await
                .unwrap();
            assert_eq!(read.status.state, TaskState::Completed, "{:?}", read.status);
        }
    }
    each_key_applied_once(&logs, WAITING + 1);
}
