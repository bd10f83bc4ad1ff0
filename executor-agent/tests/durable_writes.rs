//! What a saga costs in durable writes on the executor's state file: its begin (which
//! creates its task), one write per step after the first, and its end (which carries the
//! last step, the finish mark and the task's last state); a step that changes the state its
//! task shows carries the task's write. Counted on the state file's commits, which are the
//! process's: the tests of this file run one saga at a time.

mod common;

use agent_host::sdk::TaskState;
use common::served::*;
use common::{Harness, each_message_once, first_hundred, plan_as};
use executor_agent::agent::DEFAULT_MAX_RUNNING_SAGAS;
use executor_agent::state::STATE_FILE_NAME;
use sagaplane_storage::sqlite::commits;

/// Held while a test counts commits: the counter is the process's.
static ONE_SAGA_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_six_step_saga_alone_makes_seven_durable_writes() {
    let _alone = ONE_SAGA_AT_A_TIME.lock().await;
    // Progress is not written while the task's state stays working: the end carries it.
    let setup = Harness::start_with(&[], 300, DEFAULT_MAX_RUNNING_SAGAS).await;
    let before = commits(STATE_FILE_NAME);
    let expires = chrono::Utc::now() + chrono::Duration::hours(1);
    let task = setup.send(plan_as(&setup, "sg_alone", expires), None).await;
    assert_eq!(task.status.state, TaskState::Completed);
    // The begin (the task's creation, the first call's intent and the mandate's
    // reservation), five appends (a step's result with the next call's intent), and the
    // end (the sixth result, the finish mark, the settlement and the task's last state).
    assert_eq!(commits(STATE_FILE_NAME) - before, 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_and_going_on_after_it_each_ride_their_step_s_append() {
    let _alone = ONE_SAGA_AT_A_TIME.lock().await;
    let served = serve().await;
    let before = commits(STATE_FILE_NAME);
    // Seven steps, the second waiting for an approval.
    let task = paused_for_approval(&served, "sg_paused_writes").await;
    // The begin, and s0's result with the pause, which writes the task INPUT_REQUIRED.
    assert_eq!(commits(STATE_FILE_NAME) - before, 2);
    let done = approved(&served, &task).await;
    assert_eq!(done.status.state, TaskState::Completed, "{:?}", done.status);
    // The answer, which writes the task WORKING again with the answer's message (an
    // approval is journaled on its own, so that it may be withdrawn before its call);
    // the review's intent once the saga has a slot; five appends; the end.
    assert_eq!(commits(STATE_FILE_NAME) - before, 2 + 1 + 1 + 5 + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_step_that_waits_for_an_approval_is_shown_by_the_begin_s_write() {
    let _alone = ONE_SAGA_AT_A_TIME.lock().await;
    let served = serve().await;
    let before = commits(STATE_FILE_NAME);
    let task = send(
        &served,
        planner_jwt(&served, "executor"),
        approval_first_plan(&served, "sg_first_waits"),
    )
    .await
    .unwrap();
    assert_eq!(
        task.status.state,
        TaskState::InputRequired,
        "{:?}",
        task.status
    );
    // The begin alone: it created the task waiting, with the pause's status.
    assert_eq!(commits(STATE_FILE_NAME) - before, 1);
    // Listed by its row's state: waiting.
    assert_eq!(waiting(&served).await, std::slice::from_ref(&task.id));
    let done = approved(&served, &task).await;
    assert_eq!(done.status.state, TaskState::Completed, "{:?}", done.status);
    // The answer; the review's intent; six appends; the end.
    assert_eq!(commits(STATE_FILE_NAME) - before, 1 + 1 + 1 + 6 + 1);
    each_message_once(&done);
}

/// The tasks listed `INPUT_REQUIRED` (by their rows' state), as an approver lists them.
async fn waiting(served: &Served) -> Vec<String> {
    let listed = agent_host::AgentClient::new(&served.url)
        .unwrap()
        .list_tasks(
            &agent_host::OutboundCall {
                bearer: approver_jwt(served),
                ..agent_host::OutboundCall::default()
            },
            &first_hundred(Some(TaskState::InputRequired)),
        )
        .await
        .unwrap();
    listed.tasks.into_iter().map(|t| t.id).collect()
}
