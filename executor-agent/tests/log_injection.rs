//! Text from a plan cannot forge a record of the executor's log: a pointer carrying a
//! newline and a whole fake record reaches the log of a running executor (through the
//! same writer the binaries log with) as one escaped line, and the task's status quotes
//! it escaped.

mod common;

use agent_host::sdk::TaskState;
use common::served::*;
use serde_json::json;

const FORGED: &str = "2026-12-01T00:00:00.000000Z  INFO executor_agent::http: card registered agent=\"payments\" by=\"admin\"";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newline_in_a_pointer_does_not_forge_a_log_record() {
    let captured = common::logs::capture();
    let served = serve().await;

    // The sandbox's card declares no output schema (allowed, with a warning), so the
    // pointer can only fail when the saga binds it, after the pivot: a person is asked.
    let mut card = served.cards[2].clone();
    card.as_object_mut().unwrap().remove("signatures");
    let skills = card
        .pointer_mut("/capabilities/extensions/0/params/skills")
        .unwrap();
    skills["sandbox.provision"]
        .as_object_mut()
        .unwrap()
        .remove("outputSchema");
    served.platform.sign_in_place(&mut card).unwrap();
    let (status, body) = admin_post(&served, "/admin/cards", &card).await;
    assert_eq!(status, 201, "{body}");

    let mut plan = common::read("examples/plans/supplier-onboarding.json");
    plan["steps"][5]["args"]["login"] = json!(format!("$steps.s2.response.body#/login\n{FORGED}"));
    common::sign_plan(&served.planner, &mut plan);
    let task = send(&served, planner_jwt(&served, "executor"), plan)
        .await
        .unwrap();
    assert_eq!(task.status.state, TaskState::InputRequired, "{task:?}");
    // The task's status quotes the plan's text escaped, too.
    let status = task
        .status
        .message
        .iter()
        .flat_map(|m| &m.parts)
        .filter_map(|p| match &p.content {
            agent_host::sdk::PartContent::Text(text) => Some(text.clone()),
            _ => None,
        })
        .collect::<String>();
    assert!(status.contains("login\\n2026-12-01"), "{status}");
    assert!(!status.contains('\n'), "{status}");

    let log = captured.text();
    assert!(
        log.lines().all(|line| !line.starts_with(FORGED)),
        "a forged record:\n{log}"
    );
    let pause = log
        .lines()
        .find(|l| l.contains("the saga waits for a person"))
        .unwrap_or_else(|| panic!("no pause in the log:\n{log}"));
    // The forged text is inside the pause's own record, not a record of its own.
    assert!(
        pause.contains("#/login\\") && pause.contains("INFO executor_agent::http: card registered"),
        "{pause}"
    );
}
