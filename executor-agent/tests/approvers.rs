//! People decide, planners do not; each planner sees its own sagas (docs/security.md). Each
//! test sends its requests over A2A to the executor as `main` serves it, with two
//! planners (`planner-1`, `planner-2`) and one approver (`approver-1`) trusted, and
//! checks the refusal, and that the saga did not move: the same task, the same journal,
//! no tool call.

mod common;

use agent_host::sdk::{A2AError, StreamResponse, Task, TaskState};
use agent_host::{AgentClient, OutboundCall};
use common::served::*;
use common::{Harness, data_message, ledger_of};
use executor_agent::http::RegistrationHosts;
use executor_agent::journal::SagaLog;
use futures::StreamExt;
use serde_json::{Value, json};

fn call(bearer: Option<String>) -> OutboundCall {
    OutboundCall {
        bearer,
        ..OutboundCall::default()
    }
}

fn client(served: &Served) -> AgentClient {
    AgentClient::new(&served.url).unwrap()
}

/// The task as the approver reads it.
async fn task_now(served: &Served, id: &str) -> Task {
    client(served)
        .get_task(&call(approver_jwt(served)), id)
        .await
        .unwrap()
}

/// The entries in the executor's journal (every event and every call's intent).
fn journal_entries(served: &Served) -> i64 {
    let db = rusqlite::Connection::open_with_flags(
        served.state_file(),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    db.query_row("SELECT count(*) FROM entries", [], |row| row.get(0))
        .unwrap()
}

/// What must not change when an answer is refused.
#[derive(Debug, PartialEq)]
struct Standing {
    state: TaskState,
    status: Option<Value>,
    history: usize,
    ledger: Value,
    journal: i64,
    calls: usize,
}

async fn standing(served: &Served, id: &str) -> Standing {
    let task = task_now(served, id).await;
    Standing {
        state: task.status.state.clone(),
        status: task
            .status
            .message
            .as_ref()
            .map(|m| serde_json::to_value(&m.parts).unwrap()),
        history: task.history.as_ref().map_or(0, Vec::len),
        ledger: ledger_of(&task),
        journal: journal_entries(served),
        calls: calls_seen(served),
    }
}

/// How many times the compliance registry was asked for a review.
fn reviews_of(served: &Served) -> usize {
    common::calls_of(&served.logs, "compliance-registry", "compliance.review")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planners_resolution_is_refused_and_the_saga_does_not_move() {
    let served = serve().await;
    let task = paused_for_approval(&served, "sg_planner_answers").await;
    let shown = awaiting(&task);
    assert_eq!(shown["skill"], "compliance.review");
    assert_eq!(shown["stepId"], "s0r");
    let before = standing(&served, &task.id).await;
    assert_eq!(
        before.calls, 1,
        "only vendor.create ran before the approval"
    );

    // The saga's own planner, with every answer there is (an approval bound correctly).
    for data in [
        approval(&task, in_five_minutes()),
        json!({"resolution": "resolved-manually"}),
        json!({"resolution": "compensate"}),
        json!({"resolution": "retry"}),
    ] {
        let refused = answer(
            &served,
            planner_jwt(&served, "executor"),
            &task.id,
            data.clone(),
        )
        .await
        .expect_err("a planner's answer is refused");
        assert!(
            refused.message.starts_with("NOT_AN_APPROVER: "),
            "{data}: {}",
            refused.message
        );
        assert!(
            !refused.message.contains('\n'),
            "one line: {}",
            refused.message
        );
        assert_eq!(
            standing(&served, &task.id).await,
            before,
            "{data}: nothing moved"
        );
    }

    // The approver's answer moves it: the review runs with the arguments shown, and the
    // ledger says who approved which arguments.
    let approved = approval(&task, in_five_minutes());
    let done = answer(&served, approver_jwt(&served), &task.id, approved.clone())
        .await
        .unwrap();
    assert_eq!(done.status.state, TaskState::Completed, "{:?}", done.status);
    // On the task's history once, as it came, right after the pause it answered; none of
    // the refused answers is.
    let history = done.history.clone().unwrap_or_default();
    let answers: Vec<usize> = history
        .iter()
        .enumerate()
        .filter(|(_, m)| m.role == agent_host::sdk::Role::User)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(answers.len(), 2, "the plan and the approval: {history:?}");
    let recorded = &history[answers[1]];
    assert_eq!(
        recorded.parts[0].content,
        agent_host::sdk::PartContent::Data(approved),
    );
    assert_eq!(
        history[answers[1] - 1].message_id,
        task.status.message.as_ref().unwrap().message_id,
        "after the pause"
    );
    let sent = served.logs["compliance-registry"].lock().unwrap().results["sg_planner_answers:s0r"]
        .0
        .clone();
    assert_eq!(
        sent, shown["args"],
        "the review ran with the arguments approved"
    );
    let ledger = ledger_of(&task_now(&served, &task.id).await);
    let decisions = &ledger["steps"][1]["decisions"];
    assert_eq!(decisions.as_array().map(Vec::len), Some(1), "{ledger}");
    assert_eq!(decisions[0]["by"], "approver-1");
    assert_eq!(decisions[0]["resolution"], "approve");
    assert_eq!(decisions[0]["argsSha256"], shown["argsSha256"]);
    assert!(
        decisions[0]["at"]
            .as_str()
            .is_some_and(|t| chrono::DateTime::parse_from_rfc3339(t).is_ok())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_for_other_arguments_another_step_or_expired_is_refused() {
    let served = serve().await;
    let task = paused_for_approval(&served, "sg_bound_approvals").await;
    let before = standing(&served, &task.id).await;
    let good = approval(&task, in_five_minutes());
    let with = |pointer: &str, value: Value| {
        let mut data = good.clone();
        *data.pointer_mut(pointer).unwrap() = value;
        data
    };
    let other_args = shared_types::json::canonical_sha256(&json!({"vendorId": "v-other"})).unwrap();
    let past = (chrono::Utc::now() - chrono::Duration::seconds(1)).to_rfc3339();
    let cases = [
        (
            with("/approval/argsSha256", json!(other_args)),
            "APPROVAL_MISMATCH: ",
        ),
        (with("/approval/stepId", json!("s0")), "APPROVAL_MISMATCH: "),
        (
            with("/approval/sagaId", json!("sg_another")),
            "APPROVAL_MISMATCH: ",
        ),
        (
            with("/approval/expiresAt", json!(past)),
            "APPROVAL_EXPIRED: ",
        ),
        (
            with("/approval/expiresAt", json!("tomorrow")),
            "APPROVAL_UNBOUND: ",
        ),
        (json!({"resolution": "approve"}), "APPROVAL_UNBOUND: "),
        (json!({"resolution": "maybe"}), "RESOLUTION_INVALID: "),
    ];
    for (data, code) in cases {
        let refused = answer(&served, approver_jwt(&served), &task.id, data.clone())
            .await
            .expect_err("refused");
        assert!(
            refused.message.starts_with(code),
            "{data}: {}",
            refused.message
        );
        assert_eq!(
            standing(&served, &task.id).await,
            before,
            "{data}: nothing moved"
        );
    }
    // An escalation answer is not an approval: it names nothing more.
    let compensated = answer(
        &served,
        approver_jwt(&served),
        &task.id,
        json!({"resolution": "compensate"}),
    )
    .await
    .unwrap();
    assert_eq!(
        compensated.status.state,
        TaskState::Failed,
        "{:?}",
        compensated.status
    );
    let ledger = ledger_of(&task_now(&served, &task.id).await);
    assert_eq!(ledger["steps"][1]["decisions"][0]["by"], "approver-1");
    assert_eq!(
        ledger["steps"][1]["decisions"][0]["resolution"],
        "compensate"
    );
}

/// `ListTasks` as `bearer`: the ids of every task listed.
async fn listed(served: &Served, bearer: Option<String>, state: Option<TaskState>) -> Vec<String> {
    client(served)
        .list_tasks(&call(bearer), &common::first_hundred(state))
        .await
        .unwrap()
        .tasks
        .into_iter()
        .map(|t| t.id)
        .collect()
}

fn is_not_found(result: Result<impl std::fmt::Debug, agent_host::Error>) -> bool {
    matches!(result, Err(agent_host::Error::Protocol(e)) if e.code == A2AError::task_not_found("").code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_planner_cannot_get_list_subscribe_to_cancel_or_answer_a_saga() {
    let served = serve().await;
    let task = paused_for_approval(&served, "sg_planner_one").await;
    let before = standing(&served, &task.id).await;
    let other = || call(other_planner_jwt(&served));

    assert!(is_not_found(
        client(&served).get_task(&other(), &task.id).await
    ));
    assert!(is_not_found(
        client(&served)
            .subscribe(&other(), &task.id)
            .await
            .map(|_| ())
    ));
    assert!(is_not_found(
        client(&served).cancel_task(&other(), &task.id).await
    ));
    let on_task = client(&served)
        .send(
            &other(),
            &data_message(json!({"resolution": "compensate"}), Some(&task.id)),
        )
        .await;
    assert!(is_not_found(on_task));
    // Planner-1's plan sent again by planner-2 is not answered with planner-1's task.
    let again = send(
        &served,
        other_planner_jwt(&served),
        approval_plan(&served, "sg_planner_one"),
    )
    .await;
    // It is refused for being another planner's plan, before any saga is looked up.
    match again {
        Err(agent_host::Error::Protocol(e)) => {
            assert!(e.message.starts_with("PLANNER_MISMATCH"), "{}", e.message)
        }
        other => panic!("the same plan from another planner: {other:?}"),
    }
    assert!(
        !listed(&served, other_planner_jwt(&served), None)
            .await
            .contains(&task.id)
    );
    assert_eq!(standing(&served, &task.id).await, before, "nothing moved");

    // Its own planner and the approver see it; the approver lists every saga that
    // waits for a person, and may follow and cancel it.
    assert_eq!(
        listed(&served, planner_jwt(&served, "executor"), None).await,
        vec![task.id.clone()]
    );
    assert!(
        listed(
            &served,
            approver_jwt(&served),
            Some(TaskState::InputRequired)
        )
        .await
        .contains(&task.id)
    );
    let mut stream = client(&served)
        .subscribe(&call(approver_jwt(&served)), &task.id)
        .await
        .unwrap();
    match stream.next().await {
        Some(Ok(StreamResponse::Task(t))) => assert_eq!(t.id, task.id),
        other => panic!("expected the task first, got {other:?}"),
    }
    drop(stream);
    let canceled = client(&served)
        .cancel_task(&call(approver_jwt(&served)), &task.id)
        .await
        .expect("the approver may cancel it");
    // CancelTask answers once the saga, paused for a person when it came, has unwound.
    assert_eq!(
        canceled.status.state,
        TaskState::Canceled,
        "{:?}",
        canceled.status
    );
    assert_eq!(
        task_now(&served, &task.id).await.status.state,
        TaskState::Canceled
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approver_submits_no_plan() {
    let served = serve().await;
    let plan = approval_plan(&served, "sg_approver_plans");
    let refused = send(&served, approver_jwt(&served), plan).await;
    match refused {
        Err(agent_host::Error::Protocol(e)) => {
            assert!(e.message.starts_with("NOT_A_PLANNER: "), "{}", e.message)
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(calls_seen(&served), 0);
    assert_eq!(journal_entries(&served), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_decision_is_journaled_with_who_took_it_and_rebuilt_after_a_restart() {
    let setup = Harness::start(&[]).await;
    let saga_id = "sg_decisions_journaled";
    let task = setup
        .send(approval_plan_by(&setup.planner, saga_id), None)
        .await;
    assert_eq!(
        task.status.state,
        TaskState::InputRequired,
        "{:?}",
        task.status
    );
    let done = setup
        .resolve(approval(&task, in_five_minutes()), &task.id)
        .await;
    assert_eq!(done.status.state, TaskState::Completed, "{:?}", done.status);
    let shown = ledger_of(&done);
    assert_eq!(shown["steps"][1]["decisions"][0]["by"], "approver");

    // What a restart rebuilds the saga from: its journal alone.
    let (header, entries) = setup.journal.load(saga_id).await.unwrap().unwrap();
    let recovered = executor_agent::recovery::replay(
        header.spec,
        &entries,
        chrono::Utc::now().timestamp_millis(),
    )
    .unwrap();
    let mut rebuilt = recovered.saga.ledger();
    shared_types::json::normalize_integers(&mut rebuilt);
    assert_eq!(
        rebuilt["steps"][1]["decisions"],
        shown["steps"][1]["decisions"]
    );
    assert_eq!(
        rebuilt["steps"][1]["decisions"][0]["argsSha256"],
        awaiting(&task)["argsSha256"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_from_before_owners_is_seen_by_approvers_only() {
    use agent_host::store::TaskStore;
    let setup = Harness::start(&[]).await;
    // A task as the executor stored it before tasks had owners: no `owner` in metadata.
    let ownerless = Task {
        id: "task-before-owners".into(),
        context_id: "ctx-before-owners".into(),
        status: agent_host::sdk::TaskStatus {
            state: TaskState::Completed,
            message: None,
            timestamp: Some(chrono::Utc::now()),
        },
        artifacts: None,
        history: None,
        metadata: Some([("sagaId".to_owned(), json!("sg_before_owners"))].into()),
    };
    agent_host::SqliteTaskStore::on(&setup.db)
        .unwrap()
        .put(&ownerless, agent_host::store::Expected::Absent)
        .await
        .unwrap();
    let as_planner = setup
        .client
        .get_task(&setup.as_planner(), &ownerless.id)
        .await;
    assert!(is_not_found(as_planner));
    let as_approver = setup
        .client
        .get_task(&setup.as_approver(), &ownerless.id)
        .await;
    assert_eq!(as_approver.unwrap().id, ownerless.id);
}

#[tokio::test]
async fn a_name_or_key_of_both_a_planner_and_an_approver_is_refused_at_start() {
    use executor_agent::service::{Settings, build};
    let planner = shared_types::SigningIdentity::from_seed([42; 32], Some("planner-1".into()));
    let person = shared_types::SigningIdentity::from_seed([44; 32], Some("approver-1".into()));
    let dir = tempfile::tempdir().unwrap();
    let settings = |approver: (&str, &shared_types::SigningIdentity)| Settings {
        planners: vec![("planner-1".into(), planner.public_jwk())],
        approvers: vec![(approver.0.into(), approver.1.public_jwk())],
        ..test_settings(dir.path().join("data"), "http://127.0.0.1:1")
    };
    let shutdown = tokio_util::sync::CancellationToken::new();
    for (name, key) in [("planner-1", &person), ("approver-1", &planner)] {
        let refused = build(settings((name, key)), shutdown.clone()).await.err();
        let refused = refused.map(|e| e.to_string()).unwrap_or_default();
        assert!(
            refused.contains("a planner must not decide its own sagas"),
            "{name}: {refused:?}"
        );
    }
    assert!(
        build(settings(("approver-1", &person)), shutdown)
            .await
            .is_ok()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_the_pause_does_not_offer_or_an_approval_for_years_is_refused_and_nothing_recorded()
 {
    let served = serve().await;
    let task = paused_for_approval(&served, "sg_not_offered").await;
    assert_eq!(
        awaiting(&task)["resolutions"],
        json!(["approve", "compensate"])
    );
    let before = standing(&served, &task.id).await;
    // The pause offers approve or compensate: retry and resolved-manually are refused
    // before anything is recorded (they grew the history by six messages before).
    for resolution in ["retry", "resolved-manually"] {
        let refused = answer(
            &served,
            approver_jwt(&served),
            &task.id,
            json!({"resolution": resolution}),
        )
        .await
        .expect_err("an answer the pause does not offer");
        assert!(
            refused.message.starts_with("RESOLUTION_INVALID")
                && refused.message.contains("approve or compensate"),
            "{resolution}: {}",
            refused.message
        );
    }
    // An approval valid until 2099 is no standing grant: refused.
    let mut for_years = approval(&task, in_five_minutes());
    for_years["approval"]["expiresAt"] = json!("2099-01-01T00:00:00Z");
    let refused = answer(&served, approver_jwt(&served), &task.id, for_years)
        .await
        .expect_err("an approval for decades");
    assert!(
        refused.message.contains("at most an hour"),
        "{}",
        refused.message
    );
    assert_eq!(
        standing(&served, &task.id).await,
        before,
        "nothing moved or was recorded"
    );
    // What the pause offers still works.
    let approved = answer(
        &served,
        approver_jwt(&served),
        &task.id,
        approval(&task, in_five_minutes()),
    )
    .await
    .unwrap();
    assert_eq!(
        approved.status.state,
        TaskState::Completed,
        "{:?}",
        approved.status
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_planner_cannot_cancel_or_read_a_plan_waiting_for_a_saga_slot() {
    // One slot, taken by planner-1's first saga, whose sandbox answer is held.
    let held = [("sandbox.provision", common::Fault::ApplyThenHold(1))];
    let served = serve_timed(RegistrationHosts::any(), &held, 30_000, |settings| {
        settings.max_running_sagas = 1;
    })
    .await;
    let as_planner = || call(planner_jwt(&served, "executor"));
    let at_once = |plan| common::answered_at_once(data_message(plan, None));
    let started = |response| match response {
        Ok(agent_host::sdk::SendMessageResponse::Task(task)) => task,
        other => panic!("expected a task, got {other:?}"),
    };
    let first = started(
        client(&served)
            .send(
                &as_planner(),
                &at_once(supplier_plan(&served, "sg_slot_holder")),
            )
            .await,
    );
    let sandbox = served.logs["sandbox"].clone();
    let applied = sandbox.lock().unwrap().applied.clone();
    while sandbox.lock().unwrap().effects.is_empty() {
        applied.notified().await;
    }
    let waiting = started(
        client(&served)
            .send(
                &as_planner(),
                &at_once(supplier_plan(&served, "sg_slot_waiter")),
            )
            .await,
    );
    assert_eq!(
        waiting.status.state,
        TaskState::Submitted,
        "{:?}",
        waiting.status
    );
    let calls = calls_seen(&served);

    // Planner-2 is told there is no such task, by every route; nothing moves.
    let other = || call(other_planner_jwt(&served));
    assert!(is_not_found(
        client(&served).cancel_task(&other(), &waiting.id).await
    ));
    assert!(is_not_found(
        client(&served).get_task(&other(), &waiting.id).await
    ));
    let on_task = client(&served)
        .send(
            &other(),
            &data_message(json!({"resolution": "compensate"}), Some(&waiting.id)),
        )
        .await;
    assert!(is_not_found(on_task));
    let still = client(&served)
        .get_task(&as_planner(), &waiting.id)
        .await
        .unwrap();
    assert_eq!(
        still.status.state,
        TaskState::Submitted,
        "{:?}",
        still.status
    );
    assert_eq!(calls_seen(&served), calls, "no call was made meanwhile");

    // Once the slot is free, the plan runs as accepted.
    sandbox.lock().unwrap().release.notify_one();
    for task in [&first, &waiting] {
        // Followed to its end (refused when it has ended already).
        if let Ok(mut events) = client(&served).subscribe(&as_planner(), &task.id).await {
            while events.next().await.is_some() {}
        }
        let ended = client(&served)
            .get_task(&as_planner(), &task.id)
            .await
            .unwrap();
        assert_eq!(
            ended.status.state,
            TaskState::Completed,
            "{:?}",
            ended.status
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_planners_copy_of_a_plan_is_never_matched_with_the_first_planners_task() {
    let served = serve().await;
    let first = send(
        &served,
        planner_jwt(&served, "executor"),
        supplier_plan(&served, "sg_copied"),
    )
    .await
    .unwrap();
    assert_eq!(
        first.status.state,
        TaskState::Completed,
        "{:?}",
        first.status
    );
    // The same content, signed by planner-2 (under planner-1's mandate, as copied).
    let mut copy = supplier_plan(&served, "sg_copied");
    copy.as_object_mut().unwrap().remove("signatures");
    served.other_planner.sign_in_place(&mut copy).unwrap();
    let calls = calls_seen(&served);
    let answered = client(&served)
        .send(&call(other_planner_jwt(&served)), &data_message(copy, None))
        .await;
    let said = format!("{answered:?}");
    assert!(
        !said.contains(&first.id),
        "planner-2 was told planner-1's task id: {said}"
    );
    let Ok(agent_host::sdk::SendMessageResponse::Task(copied)) = answered else {
        panic!("expected a task of planner-2's own: {said}")
    };
    assert_ne!(copied.id, first.id);
    assert_eq!(
        copied.status.state,
        TaskState::Rejected,
        "{:?}",
        copied.status
    );
    assert!(said.contains("PLAN_CONFLICT"), "{said}");
    assert_eq!(calls_seen(&served), calls, "nothing was called");
}

/// Issue 42, the sanction gate (b): an approval withdrawn before its step runs. The
/// approved review fails once (transient) and waits a minute to be tried again; the
/// approver withdraws the approval meanwhile. The review is not called again: the saga
/// asks for approval anew, refuses every withdrawal it cannot take (from a planner, of
/// another saga, of an approval no longer standing) without recording it, and unwinds
/// when told to, with the review called once in all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_withdrawn_while_its_step_waits_to_retry_makes_no_call_of_that_step() {
    use common::Fault;
    let served = serve_faulty(
        RegistrationHosts::any(),
        &[("compliance.review", Fault::FailTransient(1))],
    )
    .await;
    // The review waits a minute before its second attempt: the withdrawal comes first.
    let mut card = served.cards[3].clone();
    assert_eq!(card["name"], "compliance-registry");
    card.as_object_mut().unwrap().remove("signatures");
    let review = "/capabilities/extensions/0/params/skills/compliance.review/retry";
    let retry = card.pointer_mut(review).unwrap();
    retry["initialBackoffMs"] = json!(60_000);
    retry["maxBackoffMs"] = json!(60_000);
    served.platform.sign_in_place(&mut card).unwrap();
    let (status, body) = admin_post(&served, "/admin/cards", &card).await;
    assert!(body.contains(r#""kind":"changed""#), "{status}: {body}");

    let task = paused_for_approval(&served, "sg_withdrawn").await;
    let mut followed = client(&served)
        .subscribe(&call(planner_jwt(&served, "executor")), &task.id)
        .await
        .unwrap();
    let withdrawal = json!({"resolution": "withdraw",
        "withdrawal": {"sagaId": "sg_withdrawn", "stepId": "s0r"}});
    let approving = approved(&served, &task);
    let withdrawing = async {
        // Its first attempt failed; the saga shows that it waits to try again.
        while let Some(event) = followed.next().await {
            if let Ok(StreamResponse::StatusUpdate(update)) = event
                && serde_json::to_string(&update.status.message)
                    .unwrap()
                    .contains("retrying after a transient failure")
            {
                break;
            }
        }
        // A planner never decides; nothing is recorded.
        let before = standing(&served, &task.id).await;
        let refused = answer(
            &served,
            planner_jwt(&served, "executor"),
            &task.id,
            withdrawal.clone(),
        )
        .await
        .unwrap_err();
        assert!(
            refused.message.starts_with("NOT_AN_APPROVER: "),
            "{refused:?}"
        );
        let elsewhere = json!({"resolution": "withdraw",
            "withdrawal": {"sagaId": "sg_other", "stepId": "s0r"}});
        let refused = answer(&served, approver_jwt(&served), &task.id, elsewhere)
            .await
            .unwrap_err();
        assert!(
            refused.message.starts_with("NOT_WITHDRAWABLE: "),
            "{refused:?}"
        );
        assert_eq!(standing(&served, &task.id).await, before);
        let withdrawn = answer(&served, approver_jwt(&served), &task.id, withdrawal.clone())
            .await
            .unwrap();
        (withdrawn, std::time::Instant::now())
    };
    let (_, (withdrawn, acknowledged)) = tokio::join!(approving, withdrawing);

    // Asked again, for the same arguments; the review was called once.
    assert_eq!(
        withdrawn.status.state,
        TaskState::InputRequired,
        "{:?}",
        withdrawn.status
    );
    let said = serde_json::to_string(&withdrawn.status.message).unwrap();
    assert!(
        said.contains("needs approval again: its approval was withdrawn by approver-1"),
        "{said}"
    );
    assert_eq!(awaiting(&withdrawn)["stepId"], "s0r");
    let decisions = &ledger_of(&withdrawn)["steps"][1]["decisions"];
    assert_eq!(decisions[1]["resolution"], "withdraw", "{decisions}");
    assert_eq!(decisions[1]["by"], "approver-1", "{decisions}");
    // The approval no longer stands: a second withdrawal is refused, and not recorded.
    let before = standing(&served, &task.id).await;
    let refused = answer(&served, approver_jwt(&served), &task.id, withdrawal)
        .await
        .unwrap_err();
    assert!(
        refused.message.starts_with("NOT_WITHDRAWABLE: "),
        "{refused:?}"
    );
    assert_eq!(standing(&served, &task.id).await, before);

    let compensate = json!({"resolution": "compensate"});
    let ended = answer(&served, approver_jwt(&served), &task.id, compensate)
        .await
        .unwrap();
    assert_eq!(ended.status.state, TaskState::Failed, "{:?}", ended.status);
    let reviews = reviews_of(&served);
    assert_eq!(
        reviews, 1,
        "the review was called once, before the withdrawal"
    );
    for (agent, log) in &served.logs {
        let log = log.lock().unwrap();
        for ((key, skill, ..), at) in log.calls.iter().zip(&log.called_at) {
            assert!(
                *at < acknowledged || key.ends_with(":undo"),
                "{agent} got {skill} under {key} after the withdrawal"
            );
        }
    }
}

/// Issue 42, the sanction gate (b), before any call of the step: an approved step is
/// called only once its saga has a slot, so an approval given while every slot is taken
/// can be withdrawn before its step was ever called. One slot, held by another saga
/// whose sandbox answer is held; the approval and its withdrawal are each answered at
/// once (nobody waits for the slot) and journaled with who sent them; the review is
/// never called under the withdrawn approval, and is called once approved again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_withdrawn_while_its_step_waits_for_a_saga_slot_makes_no_call_of_that_step() {
    let held = [("sandbox.provision", common::Fault::ApplyThenHold(1))];
    let served = serve_timed(RegistrationHosts::any(), &held, 30_000, |settings| {
        settings.max_running_sagas = 1;
    })
    .await;
    let reviews = || reviews_of(&served);
    // The review is the plan's first step: the saga pauses before any call.
    let paused = send(
        &served,
        planner_jwt(&served, "executor"),
        approval_first_plan(&served, "sg_withdrawn_early"),
    )
    .await
    .unwrap();
    assert_eq!(paused.status.state, TaskState::InputRequired);
    assert_eq!(calls_seen(&served), 0);

    // Another saga takes the one slot, and holds it on its sandbox answer.
    let as_planner = || call(planner_jwt(&served, "executor"));
    let holder = match client(&served)
        .send(
            &as_planner(),
            &common::answered_at_once(data_message(supplier_plan(&served, "sg_slot_holder"), None)),
        )
        .await
    {
        Ok(agent_host::sdk::SendMessageResponse::Task(task)) => task,
        other => panic!("expected a task, got {other:?}"),
    };
    let sandbox = served.logs["sandbox"].clone();
    let applied = sandbox.lock().unwrap().applied.clone();
    while sandbox.lock().unwrap().effects.is_empty() {
        applied.notified().await;
    }

    // Approved (a send that does not wait for the saga to stop again): WORKING, the
    // step shown approved and not called.
    let mut followed = client(&served)
        .subscribe(&as_planner(), &paused.id)
        .await
        .unwrap();
    let approval = approval(&paused, in_five_minutes());
    client(&served)
        .send(
            &call(approver_jwt(&served)),
            &common::answered_at_once(data_message(approval, Some(&paused.id))),
        )
        .await
        .unwrap();
    while let Some(event) = followed.next().await {
        if let Ok(StreamResponse::StatusUpdate(update)) = event
            && update.status.state == TaskState::Working
        {
            break;
        }
    }
    let first = task_now(&served, &paused.id).await;
    assert_eq!(first.status.state, TaskState::Working, "{:?}", first.status);
    let said = serde_json::to_string(&first.status.message).unwrap();
    assert!(
        said.contains("approved by approver-1; called once the saga has a slot"),
        "{said}"
    );
    let review = &ledger_of(&first)["steps"][0];
    assert_eq!(review["forward"]["state"], "approved", "{review}");
    assert_eq!(reviews(), 0);

    // Withdrawn before the slot came: asked again, journaled with who.
    let withdrawal = json!({"resolution": "withdraw",
        "withdrawal": {"sagaId": "sg_withdrawn_early", "stepId": "s0r"}});
    let withdrawn = answer(&served, approver_jwt(&served), &paused.id, withdrawal)
        .await
        .unwrap();
    assert_eq!(
        withdrawn.status.state,
        TaskState::InputRequired,
        "{:?}",
        withdrawn.status
    );
    let said = serde_json::to_string(&withdrawn.status.message).unwrap();
    assert!(
        said.contains("needs approval again: its approval was withdrawn by approver-1"),
        "{said}"
    );
    let decisions = &ledger_of(&withdrawn)["steps"][0]["decisions"];
    assert_eq!(decisions[0]["resolution"], "approve", "{decisions}");
    assert_eq!(decisions[1]["resolution"], "withdraw", "{decisions}");
    assert_eq!(decisions[1]["by"], "approver-1", "{decisions}");

    // The slot comes back: the holder completes, and the withdrawn approval calls nothing.
    sandbox.lock().unwrap().release.notify_one();
    if let Ok(mut events) = client(&served).subscribe(&as_planner(), &holder.id).await {
        while events.next().await.is_some() {}
    }
    let holder = task_now(&served, &holder.id).await;
    assert_eq!(holder.status.state, TaskState::Completed);
    let still = task_now(&served, &paused.id).await;
    assert_eq!(still.status.state, TaskState::InputRequired);
    assert_eq!(reviews(), 0, "the review was never called");

    // Approved again, with a slot free: called once, and the saga completes.
    let again = approved(&served, &still).await;
    let ended = if again.status.state == TaskState::Completed {
        again
    } else {
        if let Ok(mut events) = client(&served).subscribe(&as_planner(), &paused.id).await {
            while events.next().await.is_some() {}
        }
        task_now(&served, &paused.id).await
    };
    assert_eq!(
        ended.status.state,
        TaskState::Completed,
        "{:?}",
        ended.status
    );
    assert_eq!(reviews(), 1);
}
