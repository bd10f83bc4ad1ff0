//! Issue 42, the sanction gate (c), across replicas: three replicas on one PostgreSQL
//! database. B and C each drive a saga paused just before its pivot: every step before
//! the capture done, the capture waiting for an approval. The principal's revocation goes
//! to A, which drives neither, so no driver is told of it; the approver then approves
//! both. Each of B and C reads the mandate when the pivot is about to be called, makes no
//! forward call, and unwinds. Judged from the tool agents' own ledgers.

use std::time::Instant;

use agent_host::sdk::PartContent;
use serde_json::json;

use super::*;
use crate::common::served::{approval, in_five_minutes};

/// The pivot (`payments.capture`) waits for an approval, so a saga pauses in front of it
/// with every earlier step done: the "held" of the sanction gate's vector.
fn capture_needs_approval(agent: &str, card: &mut Value) {
    if agent != "payments" {
        return;
    }
    let capture = card
        .pointer_mut("/capabilities/extensions/0/params/skills/payments.capture")
        .unwrap();
    capture["requiresApproval"] = json!(true);
    // Within the sandbox's one-hour undo, which must outlive the wait.
    capture["approvalTimeoutSeconds"] = json!(600);
}

/// Every call a tool received at or after `since`: (agent, key, skill).
fn calls_since(
    logs: &HashMap<String, Arc<Mutex<ToolLog>>>,
    since: Instant,
) -> Vec<(String, String, String)> {
    let mut calls = Vec::new();
    for (agent, log) in logs {
        let log = log.lock().unwrap();
        for ((key, skill, ..), at) in log.calls.iter().zip(&log.called_at) {
            if *at >= since {
                calls.push((agent.clone(), key.clone(), skill.clone()));
            }
        }
    }
    calls
}

/// The text of a task's status message.
fn said(task: &Task) -> String {
    let parts = task.status.message.iter().flat_map(|m| &m.parts);
    parts
        .filter_map(|p| match &p.content {
            PartContent::Text(text) => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_through_one_replica_stops_the_pivots_two_others_are_paused_in_front_of() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let Some(url) = scratch_database("replicas_revoked").await else {
        return;
    };
    let world = World::new();
    let (cards, logs) =
        start_tools_with(&[], &world.platform, 5_000, &capture_needs_approval).await;
    let approver = SigningIdentity::from_seed([42; 32], Some("approver".into()));
    let [a, b, c] = ["warn"; 3].map(|log| replica_with_approver(&world, &approver, &url, log));
    register(&b, &cards).await;

    // Saga 0 driven by B, saga 1 by C: each paused in front of its pivot, s4.
    let mut paused = Vec::new();
    for (n, replica) in [(0, &b), (1, &c)] {
        let task = settle(&world, replica, send_plan(&world, replica, n).await).await;
        let asked = executor_agent::answers::awaiting_approval(&task)
            .unwrap_or_else(|| panic!("saga {n} waits for an approval: {:?}", task.status));
        assert_eq!(
            asked["stepId"], "s4",
            "saga {n} waits in front of its pivot"
        );
        assert_eq!(effects_of(&logs, n), set(&["s0", "s1", "s2", "s3"]));
        paused.push((n, replica, task));
    }

    // Revoked through A, which drives no saga under the mandate: it tells no driver.
    let mandate = signed_plan(&world, 0)["mandate"]["mandateId"]
        .as_str()
        .unwrap()
        .to_owned();
    let answer = post_revocation(&a.url, &mandate).await;
    assert_eq!(answer.status(), 200);
    let acknowledged = Instant::now();
    let heard: Value = answer.json().await.unwrap();
    for told in ["unwinding", "heldAtPivot", "finishing", "notYetHeard"] {
        assert_eq!(
            heard[told], 0,
            "A drives no saga under the mandate: {heard}"
        );
    }
    // B and C heard nothing: both sagas still wait for the approval.
    for (n, replica, task) in &paused {
        let now = replica
            .client()
            .get_task(&as_planner(&world), &task.id)
            .await
            .unwrap();
        assert_eq!(now.status.state, TaskState::InputRequired, "saga {n}");
    }

    // The approver approves each where it is driven: its driver reads the revocation
    // at the moment of effect, and unwinds instead of calling the pivot.
    let as_approver = OutboundCall {
        bearer: Some(mint_jwt(&approver, "approver", "executor", 60).unwrap()),
        ..OutboundCall::default()
    };
    for (n, replica, task) in &paused {
        let approved = data_message(approval(task, in_five_minutes()), Some(&task.id));
        let answered =
            match tokio::time::timeout(PATIENCE, replica.client().send(&as_approver, &approved))
                .await
                .expect("the approval is answered")
                .unwrap()
            {
                SendMessageResponse::Task(task) => task,
                other => panic!("saga {n}: expected a task, got {other:?}"),
            };
        let ended = settle(&world, replica, answered).await;
        assert_eq!(
            ended.status.state,
            TaskState::Failed,
            "saga {n}: {:?}",
            ended.status
        );
        assert_eq!(
            ended.metadata.as_ref().and_then(|m| m.get("outcome")),
            Some(&Value::from("compensated"))
        );
        let why = said(&ended);
        assert!(why.contains("the mandate was revoked"), "saga {n}: {why}");
        // The pivot was stopped by the check before its call, on the replica driving it.
        let pivot = &ledger_of(&ended)["steps"][4];
        assert_eq!(pivot["forward"]["state"], "failed", "saga {n}: {pivot}");
        let reason = pivot["forward"]["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains("not made: the mandate was revoked before the call"),
            "saga {n}: {pivot}"
        );
        // The steps before the pivot undone, each once; nothing past them done.
        assert_eq!(
            effects_of(&logs, *n),
            set(&["s0", "s1", "s2", "s3", "s0:undo", "s1:undo", "s2:undo"]),
            "saga {n}"
        );
    }

    // From the tools' ledgers: after the acknowledgement, no replica made a forward call
    // for the mandate; only the compensations reached a tool.
    let after = calls_since(&logs, acknowledged);
    for (agent, key, skill) in &after {
        assert!(
            key.ends_with(":undo"),
            "{agent} got {skill} under {key} after the revocation was acknowledged"
        );
    }
    assert_eq!(after.len(), 6, "three undos of each saga: {after:?}");
    for agent in ["payments", "mailer"] {
        let calls = logs[agent].lock().unwrap().calls.len();
        assert_eq!(calls, 0, "{agent} was called");
    }
}
