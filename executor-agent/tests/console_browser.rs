//! The console in a real browser: Debian's Chromium, driven by Playwright
//! (`tests/console/browser.mjs`), against an executor as `main` serves it with the six
//! tool agents. Sagas are run first: one whose payment is declined at the pivot (its
//! vendor, budget and sandbox undone, in reverse order), one whose email is declined
//! after the pivot (it waits for a person), one of the parallel plan
//! (s0 → {s1, s2} → s3 → s4 → s5), which completes, and one with no irreversible step,
//! which completes too. The script checks the refusals, the overview against
//! `/metrics`, the compensated saga's timeline, the parallel saga's branches
//! (overlapping bars, the steps each waits for), the point of no return shown when it
//! is no declared pivot (and only then), and answers the waiting saga as the approver
//! by clicking; this test then checks that the saga completed. `scripts/test` installs
//! Chromium and playwright-core (`scripts/setup-interop`); without them the test says so
//! and checks nothing, and under `CI=true` it fails.

mod common;

use std::path::PathBuf;
use std::process::Command;

use agent_host::sdk::{StreamResponse, TaskState};
use common::Fault;
use common::served::*;
use futures::StreamExt;
use serde_json::Value;

/// The parallel plan (`examples/plans/supplier-onboarding-parallel.json`) as saga
/// `saga_id`, signed by planner-1.
fn parallel_plan(served: &Served, saga_id: &str) -> Value {
    let text = serde_json::to_string(&common::read(
        "examples/plans/supplier-onboarding-parallel.json",
    ))
    .unwrap()
    .replace("sg_demo_supplier_parallel", saga_id);
    let mut plan = serde_json::from_str(&text).unwrap();
    common::sign_plan(&served.planner, &mut plan);
    plan
}

fn workspace() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// What the browser test needs and is missing, if anything.
fn missing() -> Option<String> {
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    if !std::path::Path::new(&chromium).exists() {
        return Some(format!("no Chromium at {chromium}"));
    }
    if !workspace()
        .join("tests/console/node_modules/playwright-core")
        .exists()
    {
        return Some("tests/console has no node_modules (npm ci there)".into());
    }
    match Command::new("node").arg("--version").output() {
        Ok(out) if out.status.success() => None,
        _ => Some("no node on PATH".into()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_in_chromium_shows_the_undos_in_reverse_and_an_approver_answers_by_clicking() {
    if let Some(what) = missing() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "the console's browser test cannot run under CI: {what}"
        );
        eprintln!("SKIPPED the console's browser test: {what}; scripts/test installs it");
        return;
    }
    let served = serve_faulty(
        executor_agent::http::RegistrationHosts::any(),
        &[
            ("payments.capture", Fault::DeclineTimes(1)),
            ("email.send", Fault::DeclineTimes(1)),
        ],
    )
    .await;
    let compensated = send(
        &served,
        planner_jwt(&served, "executor"),
        supplier_plan(&served, "sg_console_compensated"),
    )
    .await
    .unwrap();
    assert_eq!(
        compensated.status.state,
        TaskState::Failed,
        "{:?}",
        compensated.status
    );
    let escalated = send(
        &served,
        planner_jwt(&served, "executor"),
        supplier_plan(&served, "sg_console_escalated"),
    )
    .await
    .unwrap();
    assert_eq!(
        escalated.status.state,
        TaskState::InputRequired,
        "{:?}",
        escalated.status
    );
    // Paused for an approval before its pivot: its vendor's undo is open, and listed.
    paused_for_approval(&served, "sg_console_undo_open").await;
    // Both declines were taken by the sagas above: the parallel saga completes, its
    // budget and sandbox called at once.
    let parallel = send(
        &served,
        planner_jwt(&served, "executor"),
        parallel_plan(&served, "sg_console_parallel"),
    )
    .await
    .unwrap();
    assert_eq!(
        parallel.status.state,
        TaskState::Completed,
        "{:?}",
        parallel.status
    );
    // No step is irreversible: its point of no return is the email, a retriable step.
    let no_pivot = send(
        &served,
        planner_jwt(&served, "executor"),
        no_pivot_plan(&served, "sg_console_no_pivot"),
    )
    .await
    .unwrap();
    assert_eq!(
        no_pivot.status.state,
        TaskState::Completed,
        "{:?}",
        no_pivot.status
    );

    let as_planner = || agent_host::OutboundCall {
        bearer: planner_jwt(&served, "executor"),
        ..agent_host::OutboundCall::default()
    };
    let client = agent_host::AgentClient::new(&served.url).unwrap();
    // Followed from before the click: the stream then holds every status after it.
    let mut followed = client
        .subscribe(&as_planner(), &escalated.id)
        .await
        .unwrap();

    let screenshots = std::env::var("CONSOLE_SCREENSHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir().join("sagaplane-console-screenshots"));
    std::fs::create_dir_all(&screenshots).unwrap();
    let approver = agent_host::mint_jwt(&served.approver, "approver-1", "executor", 300).unwrap();
    let script = workspace().join("tests/console/browser.mjs");
    let run = tokio::process::Command::new("node")
        .arg(&script)
        .env("CONSOLE_URL", format!("{}/console/", served.url))
        .env("METRICS_URL", format!("{}/metrics", served.url))
        .env("OPERATOR_TOKEN", ADMIN_TOKEN)
        .env("APPROVER_TOKEN", approver)
        .env("PLANNER_TOKEN", planner_jwt(&served, "executor").unwrap())
        .env("COMPENSATED_SAGA", "sg_console_compensated")
        .env("ESCALATED_SAGA", "sg_console_escalated")
        .env("ESCALATED_RESOLUTION", "retry")
        .env("PARALLEL_SAGA", "sg_console_parallel")
        .env("NO_PIVOT_SAGA", "sg_console_no_pivot")
        .env("SCREENSHOT_DIR", &screenshots)
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&run.stderr));
    assert!(run.status.success(), "the browser test failed: {stdout}");
    assert!(stdout.contains("checks passed"), "{stdout}");
    for page in [
        "overview", "sagas", "saga", "waiting", "timeline", "parallel",
    ] {
        let png = screenshots.join(format!("{page}.png"));
        let size = std::fs::metadata(&png).map(|m| m.len()).unwrap_or(0);
        assert!(size > 10_000, "{} is {size} bytes", png.display());
    }

    // The click answered the saga as an approver's A2A message would: it completed,
    // the mailer sent its email once, on the second call (the parallel saga's and the
    // saga without a pivot's emails are the other effects).
    while let Some(event) = followed.next().await {
        if let Ok(StreamResponse::StatusUpdate(update)) = event
            && update.status.state == TaskState::Completed
        {
            break;
        }
    }
    let task = client.get_task(&as_planner(), &escalated.id).await.unwrap();
    assert_eq!(task.status.state, TaskState::Completed, "{:?}", task.status);
    let sent = |saga: &str| {
        let key = format!("{saga}:s5");
        let log = served.logs["mailer"].lock().unwrap();
        log.effects.iter().filter(|(k, _)| *k == key).count()
    };
    assert_eq!(sent("sg_console_escalated"), 1);
    assert_eq!(sent("sg_console_parallel"), 1);
    assert_eq!(sent("sg_console_no_pivot"), 1);
    assert_eq!(served.logs["mailer"].lock().unwrap().effects.len(), 3);
}
