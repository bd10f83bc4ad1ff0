//! What a saga costs in durable writes on the executor's state file: its begin (which
//! creates its task), one write per step after the first, and its end (which carries the
//! last step, the finish mark and the task's last state). Counted on the state file's commits,
//! which are the process's: this file runs one saga in a process of its own.

mod common;

use agent_host::sdk::TaskState;
use common::{Harness, plan_as};
use executor_agent::agent::DEFAULT_MAX_RUNNING_SAGAS;
use executor_agent::state::STATE_FILE_NAME;
use sagaplane_storage::sqlite::commits;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_six_step_saga_alone_makes_seven_durable_writes() {
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
