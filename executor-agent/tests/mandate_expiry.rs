//! Issue 42, authority at the moment of effect: a mandate whose `notAfter` passes while
//! its saga waits for an approval before its pivot. The approver then approves; no
//! forward call is made after the expiry, and the steps made before it are undone, as
//! the tool agents' own ledgers show.
//!
//! A plan is accepted only if its worst case, the approval's whole wait included, ends
//! before its mandate expires, so a saga that starts when it is accepted always hears its
//! approval time out first. What lets the mandate expire during the wait is time spent
//! before the saga starts: here, waiting for the one saga slot, which another saga holds
//! (its sandbox call held by the tool) until just before the expiry.

mod common;

use std::time::{Duration, Instant};

use agent_host::sdk::{SendMessageResponse, StreamResponse, Task, TaskState};
use chrono::{DateTime, Utc};
use common::served::{approval, in_five_minutes};
use common::*;
use futures::StreamExt;
use serde_json::{Value, json};

const SAGA: &str = "sg_expiring";
/// How long the review's approval may be waited for (its card, as curated here).
const APPROVAL_WAIT_SECS: u64 = 5;
/// How long before the mandate expires the waiting saga gets its slot: it asks for the
/// approval well before the expiry, and its approval would time out well after it.
const STARTS_BEFORE_EXPIRY: Duration = Duration::from_secs(3);
/// Far longer than anything here takes.
const WAIT: Duration = Duration::from_secs(60);

/// The review's approval waits `APPROVAL_WAIT_SECS`; the sandbox's calls time out only
/// after `WAIT`, so that the holding saga keeps its slot while the tool holds its call.
fn curated(agent: &str, card: &mut Value) {
    let skills = "/capabilities/extensions/0/params/skills";
    let (skill, member, value) = match agent {
        "compliance-registry" => (
            "compliance.review",
            "approvalTimeoutSeconds",
            json!(APPROVAL_WAIT_SECS),
        ),
        "sandbox" => ("sandbox.provision", "timeoutMs", json!(WAIT.as_millis())),
        _ => return,
    };
    card.pointer_mut(&format!("{skills}/{skill}")).unwrap()[member] = value;
}

/// A vendor, its compliance review (which requires approval) and the payment (the
/// pivot), under a mandate of the test principal that expires at `not_after`.
fn expiring_plan(setup: &Harness, not_after: DateTime<Utc>) -> Value {
    let key = |step: &str| json!(format!("{SAGA}:{step}"));
    let mut mandate = grant_for(&setup.planner);
    // Another window is another grant: it needs an id of its own.
    mandate["mandateId"] = json!(format!("md_tests_expiring_{}", not_after.timestamp()));
    mandate["notAfter"] = json!(not_after.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    principal().sign_in_place(&mut mandate).unwrap();
    let supplier = read("examples/plans/supplier-onboarding.json");
    let mut vendor = supplier["steps"][0].clone();
    vendor["idempotencyKey"] = key("s0");
    let mut plan = json!({
        "sagaId": SAGA,
        "planVersion": 1,
        "goal": "Onboard a vendor after a compliance review, and take its setup fee",
        "createdAt": supplier["createdAt"],
        "authoredBy": supplier["authoredBy"],
        "mandate": mandate,
        "pivotIndex": 2,
        "steps": [
            vendor,
            {"id": "s0r", "agent": "compliance-registry", "skill": "compliance.review",
             "args": {"vendorId": "$steps.s0.response.body#/vendorId"},
             "class": "retriable", "idempotencyKey": key("s0r")},
            {"id": "s4", "agent": "payments", "skill": "payments.capture",
             "args": {"vendorId": "$steps.s0.response.body#/vendorId", "amountMinor": 12000,
                      "currency": "EUR",
                      "complianceReference": "$steps.s0r.response.body#/reference"},
             "class": "irreversible", "idempotencyKey": key("s4")},
        ],
    });
    setup.planner.sign_in_place(&mut plan).unwrap();
    plan
}

fn ended(state: &TaskState) -> bool {
    matches!(
        state,
        TaskState::Completed | TaskState::Failed | TaskState::Canceled | TaskState::Rejected
    )
}

/// Task `id` once `wanted` holds of its state: read, then followed until a status says
/// so (a stream may end at a pause, and then it is read again).
async fn until(setup: &Harness, id: &str, wanted: impl Fn(&TaskState) -> bool) -> Task {
    tokio::time::timeout(WAIT, async {
        loop {
            let task = setup
                .client
                .get_task(&setup.as_approver(), id)
                .await
                .unwrap();
            if wanted(&task.status.state) {
                return task;
            }
            assert!(
                !ended(&task.status.state),
                "task {id} ended: {:?}",
                task.status
            );
            // Refused when the task ended in between: then it is read again.
            if let Ok(mut events) = setup.client.subscribe(&setup.as_approver(), id).await {
                while let Some(event) = events.next().await {
                    let state = match event {
                        Ok(StreamResponse::Task(task)) => task.status.state,
                        Ok(StreamResponse::StatusUpdate(update)) => update.status.state,
                        _ => continue,
                    };
                    if wanted(&state) || ended(&state) {
                        break;
                    }
                }
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("task {id} never got there"))
}

/// Returns once the wall clock is past `at` (the executor reads the same clock).
async fn until_past(at: DateTime<Utc>) {
    while Utc::now() <= at {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_after_the_mandate_expired_makes_no_effect_and_the_earlier_steps_are_undone() {
    let held = [("sandbox.provision", Fault::ApplyThenHold(1))];
    let setup = Harness::start_with_cards(&held, 300, 1, &curated).await;

    // Another saga takes the one slot and holds it at its sandbox.
    let applied = setup.log("sandbox").applied.clone();
    let holder = plan_as(&setup, "sg_holder", Utc::now() + chrono::Duration::hours(1));
    let client = agent_host::AgentClient::new(&setup.url).unwrap();
    let planner = setup.as_planner();
    let holding =
        tokio::spawn(async move { client.send(&planner, &data_message(holder, None)).await });
    tokio::time::timeout(WAIT, applied.notified())
        .await
        .expect("the holding saga never reached its sandbox");

    // The plan fits its mandate when accepted: its worst case, the approval's whole wait
    // and the other calls' (about 3 s at these timeouts) included, ends before the
    // mandate expires, a whole second after that at least. It waits for the slot.
    let not_after = Utc::now()
        + chrono::Duration::seconds(APPROVAL_WAIT_SECS as i64 + 4)
        + chrono::Duration::milliseconds(999);
    let not_after = DateTime::from_timestamp(not_after.timestamp(), 0).unwrap();
    let request = answered_at_once(data_message(expiring_plan(&setup, not_after), None));
    let task = match setup.client.send(&setup.as_planner(), &request).await {
        Ok(SendMessageResponse::Task(task)) => task,
        other => panic!("expected a task, got {other:?}"),
    };
    assert_eq!(task.status.state, TaskState::Submitted, "{:?}", task.status);

    // Shortly before the expiry the slot is given back: the saga creates the vendor and
    // waits for the approval, which would time out only after the mandate expired.
    let starts = not_after - chrono::Duration::from_std(STARTS_BEFORE_EXPIRY).unwrap();
    until_past(starts).await;
    setup.log("sandbox").release.notify_one();
    let paused = until(&setup, &task.id, |s| *s == TaskState::InputRequired).await;
    assert!(
        Utc::now() < not_after,
        "the saga asked for its approval only after its mandate expired: the machine is too \
         slow for this test's margins"
    );
    let holder = holding.await.unwrap().unwrap();
    assert!(
        matches!(holder, SendMessageResponse::Task(t) if t.status.state == TaskState::Completed)
    );

    until_past(not_after).await;
    let expired = Instant::now();
    // The approver approves after the expiry: the saga may have unwound already (then
    // nothing waits for the answer), or not yet (then the call is checked before it is
    // made); either way nothing is called.
    let answer = data_message(approval(&paused, in_five_minutes()), Some(&task.id));
    let approved = setup.client.send(&setup.as_approver(), &answer).await;
    let done = until(&setup, &task.id, ended).await;
    assert_eq!(
        done.status.state,
        TaskState::Failed,
        "{:?} (the approval answered {approved:?})",
        done.status
    );
    assert_eq!(
        done.metadata.as_ref().and_then(|m| m.get("outcome")),
        Some(&json!("compensated"))
    );
    let said = format!("{:?}", done.status.message);
    assert!(
        said.contains("the mandate expired; every completed step was compensated"),
        "{said}"
    );

    // The tools' own ledgers: the vendor was created and then archived; the review and
    // the payment were never called; nothing but undos reached a tool after the expiry.
    let mine = |agent: &str| {
        let log = setup.log(agent);
        log.calls
            .iter()
            .zip(&log.called_at)
            .filter(|((key, ..), _)| key.starts_with(&format!("{SAGA}:")))
            .map(|((key, skill, ..), at)| (key.clone(), skill.clone(), *at))
            .collect::<Vec<_>>()
    };
    let vendor: Vec<(String, String)> = mine("vendor-registry")
        .into_iter()
        .map(|(key, skill, _)| (key, skill))
        .collect();
    assert_eq!(
        vendor,
        [
            (format!("{SAGA}:s0"), "vendor.create".to_owned()),
            (format!("{SAGA}:s0:undo"), "vendor.archive".to_owned()),
        ]
    );
    for agent in ["compliance-registry", "payments"] {
        assert_eq!(mine(agent), [], "{agent} was called");
    }
    for agent in AGENTS {
        for (key, skill, at) in mine(agent) {
            assert!(
                at < expired || key.ends_with(":undo"),
                "{agent} got {skill} under {key} after the mandate expired"
            );
        }
    }
    let effects = effects_in_order(&setup.logs);
    let effects: Vec<&String> = effects.iter().filter(|k| k.starts_with(SAGA)).collect();
    assert_eq!(effects, [&format!("{SAGA}:s0"), &format!("{SAGA}:s0:undo")]);
}
