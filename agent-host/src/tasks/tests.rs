//! The task lifecycle against a store in memory: a step's statuses, metadata and artifact in
//! one write, each announced in order to whoever watches (the end alone to a watcher of the
//! end), an edit that cannot be made writing nothing, a task written elsewhere read again,
//! and a channel gone with its last subscriber.

use super::*;
use crate::agent_message;
use crate::sdk::Part;
use crate::store::MemoryTaskStore;

fn working_task(id: &str) -> Task {
    Task {
        id: id.into(),
        context_id: format!("ctx-{id}"),
        status: TaskStatus {
            state: TaskState::Working,
            message: None,
            timestamp: None,
        },
        artifacts: None,
        history: None,
        metadata: None,
    }
}

fn ledger(n: i64) -> Artifact {
    Artifact {
        artifact_id: "ledger".into(),
        name: None,
        description: None,
        parts: vec![Part::data(serde_json::json!({"n": n}))],
        metadata: None,
        extensions: None,
    }
}

fn said(text: &str) -> Option<Message> {
    Some(agent_message(text.to_owned(), None))
}

fn texts(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .filter_map(|m| m.parts.iter().find_map(|p| p.as_text().map(str::to_owned)))
        .collect()
}

/// The statuses, with the artifact `ledger` edited where it stands.
async fn edit_ledger(
    task: &TaskHandle,
    edit: impl FnOnce(&mut Artifact) -> std::result::Result<(), String>,
    statuses: Vec<(TaskState, Option<Message>)>,
) -> Result<()> {
    let change = |task: &mut Task| {
        edit_artifact(task, "ledger", edit)?;
        Ok(Some("ledger".to_owned()))
    };
    task.change_with_statuses(change, statuses, 0, None).await
}

/// The events received so far, one line each.
fn received(events: &mut Subscription) -> Vec<String> {
    let mut seen = Vec::new();
    while let Ok(announced) = events.try_recv() {
        seen.push(match announced.event {
            StreamResponse::ArtifactUpdate(a) => {
                let data: Vec<String> = a
                    .artifact
                    .parts
                    .iter()
                    .filter_map(|p| match &p.content {
                        crate::sdk::PartContent::Data(v) => Some(v.to_string()),
                        _ => None,
                    })
                    .collect();
                format!("artifact {} {}", a.artifact.artifact_id, data.join(" "))
            }
            StreamResponse::StatusUpdate(s) => format!(
                "{:?} {}",
                s.status.state,
                texts(s.status.message.as_slice()).join("")
            ),
            other => format!("{other:?}"),
        });
    }
    seen
}

#[tokio::test]
async fn a_watcher_of_the_end_gets_the_ending_status_alone_and_the_task_as_it_ended() {
    let manager = TaskManager::new(Arc::new(MemoryTaskStore::default()));
    let task = manager.create(working_task("t9")).await.unwrap();
    let mut end = manager.watch("t9", Watch::End).unwrap();
    task.set_statuses_with_artifact(
        Some(ledger(1)),
        vec![(TaskState::Working, said("s0: succeeded"))],
    )
    .await
    .unwrap();
    assert_eq!(
        received(&mut end),
        Vec::<String>::new(),
        "progress is not built for it"
    );
    let mut every = manager.subscribe("t9").unwrap();
    task.set_statuses_with_artifact(Some(ledger(2)), vec![(TaskState::Working, None)])
        .await
        .unwrap();
    assert_eq!(
        received(&mut every).len(),
        2,
        "a stream still gets every event"
    );
    drop(every);
    task.set_statuses_with_artifact(Some(ledger(3)), vec![(TaskState::Completed, said("done"))])
        .await
        .unwrap();
    // The end alone: none of what the stream got while it watched (a channel of its own,
    // whose buffer holds a few statuses, not a stream's).
    assert_eq!(received(&mut end), ["Completed done"]);
    let ended = end.ended().get().cloned().expect("the task as it ended");
    assert_eq!(ended.artifacts.unwrap(), [ledger(3)]);
    assert_eq!(ended.status.state, TaskState::Completed);
}

#[tokio::test]
async fn statuses_of_one_step_are_one_write_and_each_is_announced_in_order() {
    let manager = TaskManager::new(Arc::new(MemoryTaskStore::default()));
    let task = manager.create(working_task("t1")).await.unwrap();
    let mut events = manager.subscribe("t1").unwrap();
    task.set_statuses_with_artifact(
        Some(ledger(1)),
        vec![
            (TaskState::Working, said("s0: succeeded")),
            (TaskState::Completed, said("done")),
        ],
    )
    .await
    .unwrap();
    assert_eq!(
        received(&mut events),
        [
            r#"artifact ledger {"n":1}"#,
            "Working s0: succeeded",
            "Completed done"
        ]
    );
    let stored = manager.store().get("t1").await.unwrap().unwrap();
    assert_eq!(stored.status.state, TaskState::Completed);
    assert_eq!(
        texts(stored.history.as_deref().unwrap_or_default()),
        ["s0: succeeded", "done"]
    );
    assert_eq!(stored.artifacts.unwrap(), [ledger(1)]);
}

#[tokio::test]
async fn metadata_and_a_status_are_one_write_announced_as_the_task_then_the_status() {
    let manager = TaskManager::new(Arc::new(MemoryTaskStore::default()));
    let task = manager.create(working_task("t4")).await.unwrap();
    let mut events = manager.subscribe("t4").unwrap();
    let metadata = vec![
        ("outcome".to_owned(), serde_json::json!("compensated")),
        (
            "executorState".to_owned(),
            serde_json::json!("TASK_STATE_FAILED"),
        ),
    ];
    let ended = task
        .set_metadata_and_status(metadata, TaskState::Failed, said("unwound"))
        .await
        .unwrap();
    let announced: Vec<StreamResponse> = std::iter::from_fn(|| events.try_recv().ok())
        .map(|announced| announced.event)
        .collect();
    let [
        StreamResponse::Task(edited),
        StreamResponse::StatusUpdate(status),
    ] = &announced[..]
    else {
        panic!("expected the task, then the status: {announced:?}");
    };
    // The task as the metadata left it, still at its earlier status.
    assert_eq!(edited.status.state, TaskState::Working);
    assert_eq!(edited.metadata, ended.metadata);
    assert_eq!(status.status.state, TaskState::Failed);
    let stored = manager.store().get("t4").await.unwrap().unwrap();
    assert_eq!(stored.status.state, TaskState::Failed);
    let members = stored.metadata.unwrap_or_default();
    assert_eq!(
        members.get("outcome"),
        Some(&serde_json::json!("compensated"))
    );
    assert_eq!(
        members.get("executorState"),
        Some(&serde_json::json!("TASK_STATE_FAILED"))
    );
    assert_eq!(
        texts(stored.history.as_deref().unwrap_or_default()),
        ["unwound"]
    );
}

#[tokio::test]
async fn unwatched_updates_are_stored_the_same() {
    let manager = TaskManager::new(Arc::new(MemoryTaskStore::default()));
    let task = manager.create(working_task("t2")).await.unwrap();
    for n in 0..3 {
        task.set_statuses_with_artifact(
            Some(ledger(n)),
            vec![(TaskState::Working, said(&format!("step {n}")))],
        )
        .await
        .unwrap();
    }
    let stored = manager.store().get("t2").await.unwrap().unwrap();
    assert_eq!(
        texts(stored.history.as_deref().unwrap_or_default()),
        ["step 0", "step 1", "step 2"]
    );
    assert_eq!(stored.artifacts.unwrap(), [ledger(2)]);
    let empty = task.set_statuses_with_artifact(None, Vec::new()).await;
    assert!(empty.is_err());
}

#[tokio::test]
async fn an_artifact_edited_in_place_is_stored_and_announced_as_edited() {
    let manager = TaskManager::new(Arc::new(MemoryTaskStore::default()));
    let task = manager.create(working_task("t3")).await.unwrap();
    task.set_statuses_with_artifact(Some(ledger(1)), vec![(TaskState::Working, None)])
        .await
        .unwrap();
    let mut events = manager.subscribe("t3").unwrap();
    edit_ledger(
        &task,
        |artifact| {
            artifact.parts = vec![Part::data(serde_json::json!({"n": 2}))];
            Ok(())
        },
        vec![
            (TaskState::Working, said("s1: started")),
            (TaskState::Working, None),
            (TaskState::InputRequired, said("approve?")),
        ],
    )
    .await
    .unwrap();
    assert_eq!(
        received(&mut events),
        [
            r#"artifact ledger {"n":2}"#,
            "Working s1: started",
            "Working ",
            "InputRequired approve?"
        ]
    );
    let stored = manager.store().get("t3").await.unwrap().unwrap();
    assert_eq!(stored.artifacts.unwrap(), [ledger(2)]);
    assert_eq!(
        texts(stored.history.as_deref().unwrap_or_default()),
        ["s1: started", "approve?"]
    );
    assert_eq!(texts(stored.status.message.as_slice()), ["approve?"]);
}

#[tokio::test]
async fn an_edit_that_cannot_be_made_writes_nothing() {
    let manager = TaskManager::new(Arc::new(MemoryTaskStore::default()));
    let task = manager.create(working_task("t4")).await.unwrap();
    let absent = edit_ledger(&task, |_| Ok(()), vec![(TaskState::Completed, None)]).await;
    assert!(
        absent
            .unwrap_err()
            .to_string()
            .contains("no artifact ledger")
    );
    task.set_statuses_with_artifact(Some(ledger(1)), vec![(TaskState::Working, None)])
        .await
        .unwrap();
    let refused = edit_ledger(
        &task,
        |_| Err("not a ledger".into()),
        vec![(TaskState::Completed, said("done"))],
    )
    .await;
    assert!(refused.unwrap_err().to_string().contains("not a ledger"));
    let stored = manager.store().get("t4").await.unwrap().unwrap();
    assert_eq!(stored.status.state, TaskState::Working);
    assert_eq!(stored.artifacts.unwrap(), [ledger(1)]);
    assert!(stored.history.unwrap_or_default().is_empty());
}

#[tokio::test]
async fn a_task_written_elsewhere_meanwhile_is_read_again_when_its_work_resumes_here() {
    let store: Arc<dyn TaskStore> = Arc::new(MemoryTaskStore::default());
    let here = TaskManager::new(store.clone());
    let elsewhere = TaskManager::new(store.clone());
    for id in ["t6", "t7"] {
        let task = here.create(working_task(id)).await.unwrap();
        task.set_status(TaskState::Working, said("s0: done here"))
            .await
            .unwrap();
        // Another process drives the task for a while (a replica that took it over).
        elsewhere
            .handle(id, &format!("ctx-{id}"))
            .set_status(TaskState::Working, said("s1: done elsewhere"))
            .await
            .unwrap();
    }

    // Taken up again here: the next write builds on what the store holds.
    here.resumed("t6", "ctx-t6")
        .await
        .set_status(TaskState::Completed, said("s2: done here again"))
        .await
        .unwrap();
    let stored = store.get("t6").await.unwrap().unwrap();
    assert_eq!(stored.status.state, TaskState::Completed);
    assert_eq!(
        texts(stored.history.as_deref().unwrap_or_default()),
        ["s0: done here", "s1: done elsewhere", "s2: done here again"]
    );

    // Written from the copy this manager holds, the write is refused, not lost silently.
    let stale = here
        .handle("t7", "ctx-t7")
        .set_status(TaskState::Completed, said("s2: stale"))
        .await;
    assert!(matches!(stale, Err(Error::Conflict { .. })), "{stale:?}");
}

#[tokio::test]
async fn a_channel_goes_with_its_last_subscriber() {
    let feed = Arc::new(InProcessFeed::new());
    let manager = TaskManager::with_feed(Arc::new(MemoryTaskStore::default()), feed.clone());
    let channels = |_: &TaskManager| feed.channels();
    let task = manager.create(working_task("t4")).await.unwrap();
    task.set_status(TaskState::Completed, said("done"))
        .await
        .unwrap();

    // Subscribers of a task that is never written again (here: one that ended).
    let first = manager.subscribe("t4").unwrap();
    let second = manager.subscribe("t4").unwrap();
    let waiting = manager.watch("t4", Watch::End).unwrap();
    drop(first);
    assert_eq!(channels(&manager), 1, "a subscriber is left");
    drop(second);
    assert_eq!(channels(&manager), 1, "one waits for the end");
    drop(waiting);
    assert_eq!(channels(&manager), 0);

    // A subscription whose channel went with the task's last event leaves the newer
    // channel, and its subscriber, alone.
    let live = manager.create(working_task("t5")).await.unwrap();
    let old = manager.subscribe("t5").unwrap();
    live.set_status(TaskState::InputRequired, said("approve?"))
        .await
        .unwrap();
    live.set_status(TaskState::Completed, said("done"))
        .await
        .unwrap();
    let mut newer = manager.subscribe("t5").unwrap();
    drop(old);
    assert_eq!(channels(&manager), 1);
    assert!(newer.try_recv().is_err());
    drop(newer);
    assert_eq!(channels(&manager), 0);
}

#[tokio::test]
async fn an_announcement_builds_its_artifact_only_for_who_hears_everything_and_writes_nothing() {
    let manager = TaskManager::new(Arc::new(MemoryTaskStore::default()));
    let task = manager.create(working_task("t1")).await.unwrap();
    let built = std::sync::atomic::AtomicU32::new(0);
    let artifact = || {
        built.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Some(ledger(2))
    };
    let step = [(TaskState::Working, said("s1: succeeded"))];
    // Nobody listening, then one waiting for the end alone.
    task.announce(artifact, &step, 1);
    let mut end = manager.watch("t1", Watch::End).unwrap();
    task.announce(artifact, &step, 2);
    task.announce(artifact, &[(TaskState::InputRequired, said("asks"))], 3);
    assert_eq!(built.load(std::sync::atomic::Ordering::SeqCst), 0);
    assert_eq!(received(&mut end), ["InputRequired asks"]);

    let mut everything = manager.subscribe("t1").unwrap();
    task.announce(artifact, &step, 4);
    assert_eq!(built.load(std::sync::atomic::Ordering::SeqCst), 1);
    let tagged: Vec<_> = std::iter::from_fn(|| everything.try_recv().ok())
        .map(|announced| announced.seq)
        .collect();
    assert_eq!(tagged, [Some(4), Some(4)], "each event with its sequence");
    task.announce(artifact, &step, 5);
    assert_eq!(
        received(&mut everything),
        [r#"artifact ledger {"n":2}"#, "Working s1: succeeded"]
    );
    let stored = manager.store().get("t1").await.unwrap().unwrap();
    assert!(stored.history.is_none(), "announced, not written");
}

#[tokio::test]
async fn a_prepared_task_whose_creation_failed_stays_as_prepared_and_is_created_whole_next() {
    let manager = TaskManager::new(Arc::new(MemoryTaskStore::new()));
    let mut task = working_task("t-prepared");
    task.status.state = TaskState::Submitted;
    task.history = Some(vec![agent_message("the request".to_owned(), None)]);
    let (handle, _stored) = manager.prepare(task).await.unwrap();
    // A change that adds to the history, as a saga's begin adds its first step's status.
    let working = |task: &mut Task| {
        task.status.state = TaskState::Working;
        let started = agent_message("s0: started".to_owned(), None);
        task.history.get_or_insert_with(Vec::new).push(started);
    };
    let failed: std::result::Result<(), Error> = handle
        .create_written_by(working, |creation| async move {
            assert!(creation.is_some(), "a prepared task's creation is carried");
            Err(Error::store("disk full"))
        })
        .await;
    assert!(failed.is_err());
    let prepared = handle.snapshot().await.unwrap();
    assert_eq!(prepared.status.state, TaskState::Submitted, "unchanged");
    assert_eq!(texts(prepared.history.as_deref().unwrap()), ["the request"]);

    let written = std::sync::Mutex::new(None);
    handle
        .create_written_by(working, |creation| async {
            *written.lock().unwrap() = creation;
            Ok::<_, Error>(())
        })
        .await
        .unwrap();
    let creation = written.lock().unwrap().take().unwrap();
    assert_eq!(creation.state, "TASK_STATE_WORKING");
    assert!(creation.body.contains("the request"), "{}", creation.body);
    let created = handle.snapshot().await.unwrap();
    assert_eq!(created.status.state, TaskState::Working);
    assert_eq!(
        texts(created.history.as_deref().unwrap()),
        ["the request", "s0: started"],
        "what the failed attempt added is not kept"
    );
    assert_eq!(handle.state().await.unwrap(), TaskState::Working);
}
