//! What a caller reads of a saga's task, held field by field against recorded views
//! (`tests/views/*.json`): the task from GetTask, its entry in ListTasks, and the statuses
//! and tasks a stream of the plan carries, for each way a saga ends. Ids, timestamps and times are
//! replaced by placeholders first; everything else must match. The executor's tasks are to
//! become a view of the journal (issue 41), and a caller must not see the difference.
//!
//! `SAGAPLANE_RECORD_VIEWS=1` writes the views afresh instead of comparing: only when a
//! change to what callers see is meant, and reviewed in the diff.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use agent_host::OutboundCall;
use agent_host::sdk::{ListTasksRequest, PartContent, StreamResponse, Task, TaskState, TaskStatus};
use agent_host::store::TaskStore;
use common::*;
use executor_agent::journal::{Headers, SagaLog};
use executor_agent::task_view::saga_task;
use futures::StreamExt;
use serde_json::{Value, json};

const RECORD: &str = "SAGAPLANE_RECORD_VIEWS";

fn views_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/views")
}

/// Replaces what differs from run to run: ids the executor or the SDK mints, and times.
/// Each distinct id becomes `<kind-N>` in order of first appearance, so that which fields
/// name the same task or message still shows.
struct Placeholders {
    seen: BTreeMap<String, String>,
}

impl Placeholders {
    fn new() -> Self {
        Self {
            seen: BTreeMap::new(),
        }
    }

    fn id(&mut self, kind: &str, value: &str) -> Value {
        let n = self.seen.len();
        let placeholder = self
            .seen
            .entry(value.to_owned())
            .or_insert_with(|| format!("<{kind}-{n}>"));
        Value::String(placeholder.clone())
    }

    fn normalize(&mut self, value: &mut Value) {
        match value {
            Value::Object(map) => {
                for (key, member) in map.iter_mut() {
                    match (key.as_str(), &*member) {
                        (
                            "id" | "taskId" | "contextId" | "messageId" | "existingTaskId",
                            Value::String(s),
                        ) => {
                            let kind = key.trim_end_matches("Id").to_owned();
                            *member =
                                self.id(if kind.is_empty() { "id" } else { &kind }, &s.clone());
                        }
                        ("timestamp", _) => *member = json!("<time>"),
                        (k, Value::Number(_)) if is_time(k) => *member = json!("<ms>"),
                        (_, Value::String(s))
                            if chrono::DateTime::parse_from_rfc3339(s).is_ok() =>
                        {
                            *member = json!("<time>")
                        }
                        _ => self.normalize(member),
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.normalize(v)),
            Value::String(text) => *text = self.in_text(text),
            _ => {}
        }
    }

    /// Task ids and error ids named in a text.
    fn in_text(&mut self, text: &str) -> String {
        let mut out = text.to_owned();
        let known: Vec<(String, String)> = self.seen.clone().into_iter().collect();
        for (id, placeholder) in known {
            if id.len() >= 8 {
                out = out.replace(&id, &placeholder);
            }
        }
        out
    }
}

/// Whether a member named `key` holds a time in ms.
fn is_time(key: &str) -> bool {
    key.ends_with("Ms") || key.ends_with("_ms") || key.ends_with("At")
}

/// The views of one task, normalized together (one set of placeholders).
fn views(task: &Task, listed: &Task, streamed: &[StreamResponse]) -> Value {
    let views = json!({
        "getTask": serde_json::to_value(task).unwrap(),
        "listTasks": serde_json::to_value(listed).unwrap(),
        // How many artifact updates a stream carries depends on when it subscribed (one
        // with each step it sees): the statuses and tasks are compared, and the ledger as
        // it ends, in GetTask.
        "stream": streamed
            .iter()
            .filter(|e| !matches!(e, StreamResponse::ArtifactUpdate(_)))
            .map(|e| serde_json::to_value(e).unwrap())
            .collect::<Vec<_>>(),
    });
    // Members in one order (the task's metadata is a hash map), so that placeholders are
    // numbered, and the views written, the same way each time.
    let mut views = sorted(views);
    let mut placeholders = Placeholders::new();
    // Twice: a text naming an id met later in the walk is rewritten the second time.
    placeholders.normalize(&mut views);
    placeholders.normalize(&mut views);
    shared_types::json::normalize_integers(&mut views);
    views
}

/// `value` with every object's members in key order.
fn sorted(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let members: BTreeMap<String, Value> =
                map.into_iter().map(|(k, v)| (k, sorted(v))).collect();
            Value::Object(members.into_iter().collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}

/// Compares `views` with the recorded ones for `ending` (or records them).
fn holds(ending: &str, views: &Value) {
    let path = views_dir().join(format!("{ending}.json"));
    if std::env::var(RECORD).is_ok_and(|v| v == "1") {
        std::fs::create_dir_all(views_dir()).unwrap();
        let shown = serde_json::to_string_pretty(views).unwrap() + "\n";
        std::fs::write(&path, shown).unwrap();
        return;
    }
    let recorded = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; record it with {RECORD}=1 once what callers see is reviewed",
            path.display()
        )
    });
    let recorded: Value = serde_json::from_str(&recorded).unwrap();
    if let Some(difference) = first_difference("", &recorded, views) {
        panic!(
            "what a caller reads of a {ending} saga changed (recorded in {}): {difference}",
            path.display()
        );
    }
}

/// Where `now` first differs from `recorded`, and how.
fn first_difference(at: &str, recorded: &Value, now: &Value) -> Option<String> {
    match (recorded, now) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            keys.into_iter().find_map(|k| {
                let (x, y) = (
                    a.get(k).unwrap_or(&Value::Null),
                    b.get(k).unwrap_or(&Value::Null),
                );
                first_difference(&format!("{at}/{k}"), x, y)
            })
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => a
            .iter()
            .zip(b)
            .enumerate()
            .find_map(|(i, (x, y))| first_difference(&format!("{at}/{i}"), x, y)),
        (a, b) if a == b => None,
        (a, b) => Some(format!("at {at}: recorded {a}, now {b}")),
    }
}

/// The task as the accepting write created it, read back from what GetTask shows: the
/// plan's message and, when the plan waited for a slot, the status that said so.
fn creation_of(task: &Task) -> Task {
    let history = task.history.clone().unwrap_or_default();
    let waited = history
        .get(1)
        .filter(|m| {
            matches!(&m.parts[0].content, PartContent::Text(text) if text.starts_with("waiting for a saga slot"))
        })
        .cloned();
    let mut metadata = task.metadata.clone();
    if let Some(members) = &mut metadata {
        members.remove("outcome");
    }
    Task {
        id: task.id.clone(),
        context_id: task.context_id.clone(),
        status: TaskStatus {
            state: TaskState::Submitted,
            message: waited.clone(),
            timestamp: None,
        },
        artifacts: None,
        history: Some(history.into_iter().take(1).chain(waited).collect()),
        metadata,
    }
}

/// The task derived from its saga's journal (`task_view::saga_task`, from its creation)
/// reads as the task GetTask returned, times aside: the view the executor is to serve its
/// tasks from.
async fn derived_holds(setup: &Harness, task: &Task) {
    let (saga_id, _) = setup
        .journal
        .saga_of_task(&task.id)
        .await
        .unwrap()
        .expect("the task has a saga");
    let (header, entries) = setup.journal.load(&saga_id).await.unwrap().unwrap();
    let derived = saga_task(&creation_of(task), &header, &entries).unwrap();
    let normalized = |task: &Task| {
        let mut view = sorted(serde_json::to_value(task).unwrap());
        let mut placeholders = Placeholders::new();
        placeholders.normalize(&mut view);
        placeholders.normalize(&mut view);
        shared_types::json::normalize_integers(&mut view);
        view
    };
    if let Some(difference) = first_difference("", &normalized(task), &normalized(&derived)) {
        panic!("the task derived from the journal is not GetTask's: {difference}");
    }
    // Ids too: a status is named by its event, an answer by the message it came in.
    let ids = |task: &Task| {
        task.history
            .iter()
            .flatten()
            .map(|m| m.message_id.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(&derived), ids(task), "message ids");
}

/// Sends `plan` on a stream as the planner and reads every event to the stream's end;
/// then the task from GetTask and its entry in ListTasks.
async fn run(setup: &Harness, plan: Value) -> (Task, Task, Vec<StreamResponse>) {
    let request = data_message(plan, None);
    let mut events = setup
        .client
        .stream(&setup.as_planner(), &request)
        .await
        .unwrap();
    let mut streamed = Vec::new();
    while let Some(event) = events.next().await {
        streamed.push(event.unwrap());
    }
    let Some(StreamResponse::Task(first)) = streamed.first() else {
        panic!("a stream begins with the task: {streamed:?}");
    };
    let id = first.id.clone();
    let (task, listed) = read_back(setup, &id, || setup.as_planner()).await;
    (task, listed, streamed)
}

/// GetTask and ListTasks of the harness's executor, as `call` makes a credential for each
/// request.
async fn read_back(setup: &Harness, id: &str, call: impl Fn() -> OutboundCall) -> (Task, Task) {
    read_back_from(&setup.client, id, call).await
}

async fn read_back_from(
    client: &agent_host::AgentClient,
    id: &str,
    call: impl Fn() -> OutboundCall,
) -> (Task, Task) {
    let task = client.get_task(&call(), id).await.unwrap();
    let page = client
        .list_tasks(
            &call(),
            &ListTasksRequest {
                context_id: None,
                status: None,
                page_size: Some(100),
                page_token: None,
                history_length: None,
                status_timestamp_after: None,
                include_artifacts: Some(true),
                tenant: None,
            },
        )
        .await
        .unwrap();
    let listed = page
        .tasks
        .into_iter()
        .find(|t| t.id == id)
        .expect("the task is listed");
    (task, listed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completed_saga_reads_as_recorded() {
    let setup = Harness::start(&[]).await;
    let plan = setup.signed("examples/plans/supplier-onboarding.json");
    let (task, listed, streamed) = run(&setup, plan).await;
    assert_eq!(task.status.state, TaskState::Completed);
    holds("completed", &views(&task, &listed, &streamed));
    derived_holds(&setup, &task).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compensated_saga_reads_as_recorded() {
    let setup = Harness::start(&[("compliance.check", Fault::Decline)]).await;
    let plan = setup.signed("examples/plans/supplier-onboarding.json");
    let (task, listed, streamed) = run(&setup, plan).await;
    assert_eq!(task.status.state, TaskState::Failed);
    holds("compensated", &views(&task, &listed, &streamed));
    derived_holds(&setup, &task).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_plan_reads_as_recorded() {
    let setup = Harness::start(&[]).await;
    let plan = setup.signed("examples/plans/five-violations.json");
    let (task, listed, streamed) = run(&setup, plan).await;
    assert_eq!(task.status.state, TaskState::Rejected);
    holds("rejected", &views(&task, &listed, &streamed));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_escalated_saga_answered_by_a_person_reads_as_recorded() {
    // The welcome email is past the pivot: it is retried, then put to a person.
    let setup = Harness::start(&[("email.send", Fault::Decline)]).await;
    let plan = setup.signed("examples/plans/supplier-onboarding.json");
    let (paused, _, streamed) = run(&setup, plan).await;
    assert_eq!(paused.status.state, TaskState::InputRequired);
    let answered = setup
        .resolve(json!({"resolution": "resolved-manually"}), &paused.id)
        .await;
    assert!(answered.status.state.is_terminal(), "{answered:?}");
    let (task, listed) = read_back(&setup, &paused.id, || setup.as_approver()).await;
    holds("escalated-then-answered", &views(&task, &listed, &streamed));
    derived_holds(&setup, &task).await;
}

/// Longer than anything here takes: a held call never times out meanwhile.
const HELD: std::time::Duration = std::time::Duration::from_secs(30);

/// The supplier plan as saga `saga_id` under the file's own mandate, signed by the
/// harness's planner: the same bytes every run.
fn supplier_plan_as(setup: &Harness, saga_id: &str) -> Value {
    let text = serde_json::to_string(&read("examples/plans/supplier-onboarding.json"))
        .unwrap()
        .replace("sg_demo_supplier_onboarding", saga_id);
    let mut plan: Value = serde_json::from_str(&text).unwrap();
    sign_plan(&setup.planner, &mut plan);
    plan
}

/// Opens a stream of `plan` and reads its first event, the task.
async fn open(
    setup: &Harness,
    plan: Value,
) -> (
    String,
    Vec<StreamResponse>,
    futures::stream::BoxStream<'static, Result<StreamResponse, agent_host::sdk::A2AError>>,
) {
    let mut events = setup
        .client
        .stream(&setup.as_planner(), &data_message(plan, None))
        .await
        .unwrap();
    let first = events.next().await.unwrap().unwrap();
    let StreamResponse::Task(task) = &first else {
        panic!("a stream begins with the task: {first:?}");
    };
    (task.id.clone(), vec![first], events)
}

async fn rest_of(
    mut streamed: Vec<StreamResponse>,
    mut events: futures::stream::BoxStream<
        'static,
        Result<StreamResponse, agent_host::sdk::A2AError>,
    >,
) -> Vec<StreamResponse> {
    while let Some(event) = events.next().await {
        streamed.push(event.unwrap());
    }
    streamed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canceled_saga_reads_as_recorded() {
    let held = [("sandbox.provision", Fault::ApplyThenHold(1))];
    let setup = Harness::start_timed(&held, HELD.as_millis() as u64).await;
    let plan = setup.signed("examples/plans/supplier-onboarding.json");
    let (id, streamed, events) = open(&setup, plan).await;
    let applied = setup.log("sandbox").applied.clone();
    while setup.log("sandbox").effects.is_empty() {
        applied.notified().await;
    }
    // Canceled while s2's answer is held; the answer goes once the cancel is journaled.
    let mut cancels = setup.journal.cancels.subscribe();
    let client = agent_host::AgentClient::new(&setup.url).unwrap();
    let (call, task_id) = (setup.as_planner(), id.clone());
    let cancel = tokio::spawn(async move { client.cancel_task(&call, &task_id).await });
    cancels.wait_for(|n| *n >= 1).await.unwrap();
    setup.log("sandbox").release.notify_one();
    let canceled = cancel.await.unwrap().unwrap();
    assert_eq!(canceled.status.state, TaskState::Canceled);
    let streamed = rest_of(streamed, events).await;
    let (task, listed) = read_back(&setup, &id, || setup.as_planner()).await;
    holds("canceled", &views(&task, &listed, &streamed));
    derived_holds(&setup, &task).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saga_that_waited_for_a_slot_reads_as_recorded() {
    let held = [("sandbox.provision", Fault::ApplyThenHold(1))];
    let setup = Harness::start_with(&held, HELD.as_millis() as u64, 1).await;
    let (_, _, first) = open(&setup, supplier_plan_as(&setup, "sg_views_first")).await;
    let applied = setup.log("sandbox").applied.clone();
    while setup.log("sandbox").effects.is_empty() {
        applied.notified().await;
    }
    // The one slot is taken: the second plan waits, SUBMITTED, until the first ends.
    let mut waiting = setup.executor.slots().watch_waiting();
    let (id, streamed, events) = open(&setup, supplier_plan_as(&setup, "sg_views_second")).await;
    waiting.wait_for(|n| *n == 1).await.unwrap();
    setup.log("sandbox").release.notify_one();
    let streamed = rest_of(streamed, events).await;
    rest_of(Vec::new(), first).await;
    let (task, listed) = read_back(&setup, &id, || setup.as_planner()).await;
    assert_eq!(task.status.state, TaskState::Completed);
    holds("waited-for-a-slot", &views(&task, &listed, &streamed));
    derived_holds(&setup, &task).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_sagas_task_reads_as_far_as_its_journal_whatever_its_reports_wrote() {
    // The task's row is not written while its state stays working.
    let held = [("sandbox.provision", Fault::ApplyThenHold(1))];
    let setup = Harness::start_with(
        &held,
        HELD.as_millis() as u64,
        executor_agent::agent::DEFAULT_MAX_RUNNING_SAGAS,
    )
    .await;
    let plan = setup.signed("examples/plans/supplier-onboarding.json");
    let request = answered_at_once(data_message(plan, None));
    let task = match setup.client.send(&setup.as_planner(), &request).await {
        Ok(agent_host::sdk::SendMessageResponse::Task(task)) => task,
        other => panic!("expected a task, got {other:?}"),
    };
    let applied = setup.log("sandbox").applied.clone();
    while setup.log("sandbox").effects.is_empty() {
        applied.notified().await;
    }
    let texts = |task: &Task| -> Vec<String> {
        task.history
            .iter()
            .flatten()
            .filter_map(|m| match &m.parts[0].content {
                PartContent::Text(text) => Some(text.clone()),
                _ => None,
            })
            .collect()
    };
    let (read, listed) = read_back(&setup, &task.id, || setup.as_planner()).await;
    let mut events = setup
        .client
        .subscribe(&setup.as_planner(), &task.id)
        .await
        .unwrap();
    let Some(Ok(StreamResponse::Task(followed))) = events.next().await else {
        panic!("a subscription begins with the task");
    };
    for shown in [&read, &listed, &followed] {
        assert_eq!(shown.status.state, TaskState::Working, "{:?}", shown.status);
        assert_eq!(
            texts(shown)[..],
            [
                "s0: started (attempt 1)",
                "s0: succeeded",
                "s1: started (attempt 1)",
                "s1: succeeded",
                "s2: started (attempt 1)"
            ],
        );
        let ledger = ledger_of(shown);
        assert_eq!(
            ledger["steps"][1]["forward"]["state"],
            json!("succeeded"),
            "{ledger}"
        );
    }
    // What they show is the journal's: the stored row has none of the progress after
    // what the begin's step showed.
    let stored = agent_host::SqliteTaskStore::on(&setup.db)
        .unwrap()
        .get(&task.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.status.state, TaskState::Working);
    assert_eq!(texts(&stored), ["s0: started (attempt 1)"]);
    setup.log("sandbox").release.notify_one();
    while events.next().await.is_some() {}
    let ended = setup
        .client
        .get_task(&setup.as_planner(), &task.id)
        .await
        .unwrap();
    assert_eq!(
        ended.status.state,
        TaskState::Completed,
        "{:?}",
        ended.status
    );
    derived_holds(&setup, &ended).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saga_resumed_after_sigkill_reads_as_recorded() {
    use common::process;
    let world = process::World::new();
    let data = tempfile::tempdir().unwrap();
    let (cards, _logs) = start_tools(&[], &world.platform).await;
    let mut executor = process::Executor::start_logging(&world, data.path(), Some(3), "warn", &[]);
    process::register(&executor, &cards).await;
    let client = executor.client();
    let (call, request) = (process::as_planner(&world), process::plan_message(&world));
    let sent = tokio::spawn(async move { client.send(&call, &request).await });
    assert!(
        executor.paused().await,
        "the executor pauses after its third journal write (s1's answer, s2's intent)"
    );
    executor.kill();
    let _lost = sent.await;
    let executor = process::Executor::start_logging(&world, data.path(), None, "warn", &[]);
    // The same plan again: its task, the saga resumed on it.
    let task = process::submit(&world, &executor).await;
    let task = process::settle(&world, &executor, task).await;
    assert_eq!(task.status.state, TaskState::Completed, "{:?}", task.status);
    let client = executor.client();
    let (task, listed) = read_back_from(&client, &task.id, || process::as_planner(&world)).await;
    holds("resumed-after-sigkill", &views(&task, &listed, &[]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saga_taken_over_by_another_replica_reads_as_recorded() {
    use common::process;
    let test = "task_views_takeover";
    let Some(url) = sagaplane_storage::postgres::testing::scratch_database(test).await else {
        return;
    };
    let world = process::World::new();
    // s3's first call is applied and its answer held: its replica dies with it out.
    let held = [("compliance.check", Fault::ApplyThenHold(1))];
    let (cards, logs) = start_tools_timed(&held, &world.platform, HELD.as_millis() as u64).await;
    let extra = ["--lease-ms", "1000", "--renew-ms", "200"];
    let owner = process::Executor::replica(&world, &url, "warn", &extra);
    let taker = process::Executor::replica(&world, &url, "warn", &extra);
    process::register(&owner, &cards).await;
    let request = answered_at_once(process::plan_message(&world));
    let task = match owner
        .client()
        .send(&process::as_planner(&world), &request)
        .await
        .unwrap()
    {
        agent_host::sdk::SendMessageResponse::Task(task) => task,
        other => panic!("expected a task, got {other:?}"),
    };
    let applied = logs["compliance-registry"].lock().unwrap().applied.clone();
    while logs["compliance-registry"]
        .lock()
        .unwrap()
        .effects
        .is_empty()
    {
        applied.notified().await;
    }
    owner.kill();
    // The other replica takes the saga over once the lease lapses, and repeats s3 under
    // its key.
    let ended = process::settle(&world, &taker, task).await;
    assert_eq!(
        ended.status.state,
        TaskState::Completed,
        "{:?}",
        ended.status
    );
    let client = taker.client();
    let (task, listed) = read_back_from(&client, &ended.id, || process::as_planner(&world)).await;
    holds("taken-over-by-another-replica", &views(&task, &listed, &[]));
}
