//! The task derived from a journal against the task its progress wrote for the same run,
//! for sagas that complete, unwind, and wait for a person; and what makes the view one
//! of the journal alone (the same journal, the same task; a journal of another saga
//! refused).

use std::collections::VecDeque;

use agent_host::sdk::PartContent;
use agent_host::tasks::Announced;
use agent_host::{MemoryTaskStore, TaskManager};
use proptest::prelude::*;

use super::*;
use crate::driver::Reporter;
use crate::journal::JOURNAL_FORMAT;
use crate::progress::{TaskProgress, Unwritten};
use crate::saga::tests::supplier;
use crate::saga::{CallOutcome, FailureClass, Invocation, Target, Timer};

/// How the tools answer a run, call by call (the last answer again once spent), what a
/// person answers a pause, if anyone does, and after how many events the mandate
/// expires, if it does. Retries are due at once.
struct Script {
    answers: Vec<Outcome>,
    resolution: Option<Resolution>,
    expires_after: Option<usize>,
}

#[derive(Debug, Clone, Copy)]
enum Outcome {
    Succeeds,
    Transient,
    Permanent,
    Unknown,
}

fn outcome(of: Outcome) -> CallOutcome {
    let failed = |class| CallOutcome::Failed {
        reason: "declined".into(),
        failure: Some(class),
    };
    match of {
        // Every member any step of the plan binds from an earlier answer.
        Outcome::Succeeds => CallOutcome::Succeeded {
            response: json!({
                "vendorId": "v_1", "reservationId": "r_1", "tenantId": "t_1", "login": "admin",
                "status": "clear", "reference": "c_1", "captureId": "p_1", "amountMinor": 12000,
            }),
        },
        Outcome::Transient => failed(FailureClass::Transient),
        Outcome::Permanent => failed(FailureClass::Permanent),
        Outcome::Unknown => CallOutcome::Unknown {
            reason: "no answer".into(),
        },
    }
}

fn header(saga: &Saga) -> SagaHeader {
    SagaHeader {
        format: JOURNAL_FORMAT,
        saga_id: saga.spec.saga_id.clone(),
        plan_version: 1,
        task_id: "task-1".into(),
        context_id: "ctx-1".into(),
        plan: json!({"sagaId": saga.spec.saga_id}).into(),
        spec: saga.spec.clone(),
        registrations_read: None,
    }
}

/// The task as the accepting write creates it: the plan's message, `SUBMITTED`.
fn created(header: &SagaHeader) -> Task {
    let mut plan = agent_message("", Some(Value::clone(&header.plan)));
    plan.role = Role::User;
    plan.message_id = "the-plans-message".into();
    plan.task_id = Some(header.task_id.clone());
    plan.context_id = Some(header.context_id.clone());
    Task {
        id: header.task_id.clone(),
        context_id: header.context_id.clone(),
        status: TaskStatus {
            state: TaskState::Submitted,
            message: None,
            timestamp: None,
        },
        artifacts: None,
        history: Some(vec![plan]),
        metadata: Some([("owner".to_owned(), json!("planner"))].into()),
    }
}

/// Runs the supplier saga by `script`, journaling every event and intent as the driver
/// does, each step through its progress (`Reporter::written`, on a journal in memory, the
/// task written after it); the journal and the task the progress wrote. A person's answer
/// comes with the step that takes it, as the driver gives it.
/// A run's journal, the task its reports wrote, and what they announced.
async fn run(script: &Script) -> (SagaHeader, Vec<Entry>, Task, Vec<Announced>) {
    use crate::journal::SagaLog;
    let mut saga = supplier();
    let header = header(&saga);
    let tasks = TaskManager::new(std::sync::Arc::new(MemoryTaskStore::new()));
    let task = tasks.create(created(&header)).await.unwrap();
    let mut subscription = tasks.subscribe("task-1").unwrap();
    let mut announced = Vec::new();
    let (reporter, mut stops_written) = TaskProgress::start(
        task.clone(),
        Unwritten::metadata(saga_metadata(&header)),
        false,
    );
    let memory = crate::journal::MemoryJournal::new();
    memory.begin(&header, &[]).await.unwrap();
    // The message of the answer the next step takes.
    let mut answer: Option<Message> = None;
    let mut journal = Vec::new();
    let mut answers = script.answers.iter().copied();
    let mut last = Outcome::Succeeds;
    let mut events = VecDeque::from([Event::Start { now_ms: 1_000 }]);
    let mut now_ms = 1_000;
    let mut answered = false;
    // Pauses and ends shown, and how many of them the task shows.
    let mut stops_shown = 0;
    while let Some(event) = events.pop_front() {
        now_ms += 10;
        if script.expires_after == Some(journal.len()) {
            events.push_back(Event::TimerFired {
                timer: Timer::MandateExpiry,
                now_ms,
            });
        }
        let first = journal.len();
        let taken = match event {
            Event::Resolve { .. } => answer.take(),
            _ => None,
        };
        journal.push(Entry::Event(event.clone()));
        let commands = saga.step(event);
        for command in &commands {
            match command {
                Command::Invoke(invocation) => {
                    journal.push(Entry::Intent(invocation.clone()));
                    last = answers.next().unwrap_or(last);
                    events.push_back(result(invocation, last, now_ms));
                }
                Command::StartTimer {
                    timer: timer @ Timer::Retry { .. },
                    ..
                } => events.push_back(Event::TimerFired {
                    timer: *timer,
                    now_ms,
                }),
                _ => {}
            }
        }
        let shown: Vec<Command> = commands.into_iter().filter(Command::is_shown).collect();
        let paused = shown.iter().any(|c| matches!(c, Command::Pause { .. }));
        stops_shown += shown
            .iter()
            .filter(|c| matches!(c, Command::Pause { .. } | Command::Finish { .. }))
            .count() as u64;
        let write = crate::driver::StepWrite {
            journal: &memory,
            saga_id: &header.saga_id,
            epoch: 1,
            entries: &journal[first..],
            ending: shown
                .iter()
                .any(|c| matches!(c, Command::Finish { .. }))
                .then(crate::journal::Ending::default),
            answer: taken.as_ref(),
            unrevoked: None,
        };
        reporter.written(&shown, &saga, &write).await.unwrap();
        announced.extend(std::iter::from_fn(|| subscription.try_recv().ok()));
        if paused
            && !answered
            && let Some(resolution) = script.resolution
        {
            // A person answers what the task shows.
            answered = true;
            stops_written.wait_for(|n| *n >= stops_shown).await.unwrap();
            let mut message = answer_message(
                resolution,
                &Decider {
                    by: "approver".into(),
                    approval: None,
                    withdrawal: None,
                    message_id: None,
                },
            );
            message.message_id = agent_host::sdk::new_message_id();
            message.task_id = Some(header.task_id.clone());
            let decider = Decider {
                by: "approver".into(),
                approval: None,
                withdrawal: None,
                message_id: Some(message.message_id.clone()),
            };
            answer = Some(message);
            events.push_back(Event::Resolve {
                resolution,
                now_ms,
                decider: Some(decider),
            });
        }
    }
    drop(reporter);
    let reported = tasks.store().get("task-1").await.unwrap().unwrap();
    (header, journal, reported, announced)
}

fn result(invocation: &Invocation, answer: Outcome, now_ms: i64) -> Event {
    Event::Result {
        target: invocation.target,
        attempt: invocation.attempt,
        outcome: outcome(answer),
        now_ms,
    }
}

/// What a caller reads of a task, times aside.
fn seen(task: &Task) -> Value {
    let message = |m: &Message| {
        let parts: Vec<Value> = m
            .parts
            .iter()
            .map(|p| match &p.content {
                PartContent::Text(text) => json!({ "text": text }),
                PartContent::Data(data) => json!({ "data": data }),
                _ => json!("other"),
            })
            .collect();
        json!({"id": m.message_id, "role": format!("{:?}", m.role), "parts": parts, "taskId": m.task_id, "contextId": m.context_id})
    };
    json!({
        "state": format!("{:?}", task.status.state),
        "status": task.status.message.as_ref().map(message),
        "history": task.history.iter().flatten().map(message).collect::<Vec<_>>(),
        "artifacts": serde_json::to_value(&task.artifacts).unwrap(),
        "metadata": task.metadata,
    })
}

async fn derived_is_reported(script: Script) -> (Task, Task) {
    let (header, journal, reported, announced) = run(&script).await;
    let derived = saga_task(&created(&header), &header, &journal).unwrap();
    assert_eq!(seen(&derived), seen(&reported));
    sequences_tell_what_a_view_shows(&header, &journal, &announced);
    (derived, reported)
}

/// A stream drops an announced event whose sequence the task it started from reaches
/// (`agent_host::tasks::Shown`): for that to drop exactly what the task shows, a status
/// announced at sequence `s` must be in the view of every journal prefix that reaches
/// `s`, and in none other. Checked for the view of every prefix a read can find (a
/// journal is read whole up to an event; a step's intents follow its event).
fn sequences_tell_what_a_view_shows(
    header: &SagaHeader,
    journal: &[Entry],
    announced: &[Announced],
) {
    let statuses: Vec<(u64, &str)> = announced
        .iter()
        .filter_map(|a| match &a.event {
            agent_host::sdk::StreamResponse::StatusUpdate(update) => Some((
                a.seq.expect("a saga's reports tag every event"),
                update.status.message.as_ref()?.message_id.as_str(),
            )),
            _ => None,
        })
        .collect();
    assert!(!statuses.is_empty(), "the run announced statuses");
    let ends = (0..=journal.len())
        .filter(|&k| k == journal.len() || matches!(journal[k], Entry::Event(_)));
    for k in ends {
        let view = view(&created(header), header, &journal[..k]).unwrap();
        let shown: std::collections::HashSet<&str> = view
            .task
            .history
            .iter()
            .flatten()
            .map(|m| m.message_id.as_str())
            .collect();
        for (seq, id) in &statuses {
            assert_eq!(
                *seq <= view.seq,
                shown.contains(id),
                "a status announced at {seq}, against the view of {k} entries at {}",
                view.seq
            );
        }
    }
}

#[tokio::test]
async fn a_completed_saga_derives_the_task_its_reports_wrote() {
    let (derived, _) = derived_is_reported(Script {
        answers: vec![Outcome::Succeeds],
        resolution: None,
        expires_after: None,
    })
    .await;
    assert_eq!(derived.status.state, TaskState::Completed);
}

#[tokio::test]
async fn an_unwound_saga_derives_the_task_its_reports_wrote() {
    use Outcome::*;
    let (derived, _) = derived_is_reported(Script {
        answers: vec![Succeeds, Succeeds, Succeeds, Transient, Permanent, Succeeds],
        resolution: None,
        expires_after: None,
    })
    .await;
    assert_eq!(derived.status.state, TaskState::Failed);
    assert_eq!(derived.metadata.unwrap()["outcome"], json!("compensated"));
}

#[tokio::test]
async fn a_saga_answered_by_a_person_derives_the_answer_and_what_followed() {
    use Outcome::*;
    let (derived, _) = derived_is_reported(Script {
        answers: vec![Succeeds, Succeeds, Succeeds, Succeeds, Succeeds, Permanent],
        resolution: Some(Resolution::ResolvedManually),
        expires_after: None,
    })
    .await;
    assert_eq!(derived.status.state, TaskState::Completed);
    let history = derived.history.unwrap();
    // The plan's message is the first from a user; the answer the last.
    let answer = history.iter().rfind(|m| m.role == Role::User);
    assert!(answer.is_some_and(
        |m| m.parts[0].content == PartContent::Data(json!({"resolution": "resolved-manually"}))
    ));
}

#[tokio::test]
async fn the_same_journal_derives_the_same_task_ids_and_times_included() {
    use Outcome::*;
    let (header, journal, _, _) = run(&Script {
        answers: vec![Succeeds, Unknown, Succeeds],
        resolution: Some(Resolution::Retry),
        expires_after: None,
    })
    .await;
    let created = created(&header);
    let once = saga_task(&created, &header, &journal).unwrap();
    let again = saga_task(&created, &header, &journal).unwrap();
    assert_eq!(once, again);
    let ids: std::collections::HashSet<&str> = once
        .history
        .iter()
        .flatten()
        .map(|m| m.message_id.as_str())
        .collect();
    assert_eq!(
        ids.len(),
        once.history.as_ref().unwrap().len(),
        "every message has an id of its own"
    );
    assert_eq!(
        once.status.timestamp,
        DateTime::from_timestamp_millis(journal_last_ms(&journal))
    );
}

fn journal_last_ms(journal: &[Entry]) -> i64 {
    journal
        .iter()
        .rev()
        .find_map(|entry| match entry {
            Entry::Event(event) => Some(event.now_ms()),
            Entry::Intent(_) => None,
        })
        .unwrap_or_default()
}

#[test]
fn a_journal_naming_a_step_the_saga_lacks_is_refused() {
    let saga = supplier();
    let header = header(&saga);
    let journal = [
        Entry::Event(Event::Start { now_ms: 1 }),
        Entry::Event(Event::TimerFired {
            timer: Timer::Retry {
                target: Target::Forward(42),
                attempt: 1,
            },
            now_ms: 2,
        }),
    ];
    match saga_task(&created(&header), &header, &journal) {
        Err(Error::Journal(why)) => assert!(why.contains("entry 2"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_plan_not_started_shows_its_creation_and_the_saga() {
    let saga = supplier();
    let header = header(&saga);
    let task = saga_task(&created(&header), &header, &[]).unwrap();
    assert_eq!(task.status.state, TaskState::Submitted);
    assert_eq!(task.artifacts, None);
    assert_eq!(task.history.map(|h| h.len()), Some(1));
    assert_eq!(task.metadata.unwrap()["sagaId"], json!(saga.spec.saga_id));
}

fn outcomes() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        4 => Just(Outcome::Succeeds),
        1 => Just(Outcome::Transient),
        1 => Just(Outcome::Permanent),
        1 => Just(Outcome::Unknown),
    ]
}

fn resolutions() -> impl Strategy<Value = Option<Resolution>> {
    prop_oneof![
        Just(None),
        Just(Some(Resolution::Retry)),
        Just(Some(Resolution::ResolvedManually)),
        Just(Some(Resolution::Compensate)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever the tools answer and a person decides, the task derived from the journal
    /// is the one the reports wrote.
    #[test]
    fn any_run_derives_the_task_its_reports_wrote(
        answers in proptest::collection::vec(outcomes(), 1..12),
        resolution in resolutions(),
        expires_after in proptest::option::of(0usize..30),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(derived_is_reported(Script { answers, resolution, expires_after }));
    }
}
