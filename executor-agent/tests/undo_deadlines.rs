//! Undo handles that carry their expiry, and the two metrics the seed names, through a
//! running executor and real tool agents on loopback: the demo's budget agent reporting a
//! hold that has already lapsed (the saga escalates instead of calling `budget.release`,
//! and the ledger says why), and `/metrics` scraped during and after a compensated run
//! (compensations by agent and outcome, undo handles open and expiring, by agent).

mod common;

use std::time::Duration;

use agent_host::sdk::{Task, TaskState};
use agent_host::{AgentClient, OutboundCall, mint_jwt};
use common::*;
use executor_agent::service::{Settings, build};
use sagaplane_examples::supplier::{
    FaultMode, RunningTool, SuiteSettings, check_ledger, start_all,
};
use serde_json::Value;
use shared_types::SigningIdentity;
use tokio_util::sync::CancellationToken;

const PLAN: &str = "examples/plans/supplier-onboarding.json";
const SAGA: &str = "sg_demo_supplier_onboarding";
const ADMIN: &str = "admin-token-for-undo-tests";

/// The value of one sample of `/metrics` (`name{labels}`), if it is there.
fn sample(metrics: &str, name: &str, labels: &str) -> Option<f64> {
    let prefix = if labels.is_empty() {
        format!("{name} ")
    } else {
        format!("{name}{{{labels}}} ")
    };
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|value| value.trim().parse().ok())
}

async fn scrape(url: &str) -> String {
    let response = reqwest::get(format!("{url}/metrics")).await.unwrap();
    assert_eq!(response.status(), 200);
    response.text().await.unwrap()
}

/// Scrapes until `ready` holds (a bounded poll of a real condition), and returns that scrape.
async fn scrape_until(url: &str, ready: impl Fn(&str) -> bool) -> String {
    for _ in 0..400 {
        let metrics = scrape(url).await;
        if ready(&metrics) {
            return metrics;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!(
        "the metrics never showed what was awaited:\n{}",
        scrape(url).await
    );
}

/// The executor as `main` serves it, in front of the six demo tool agents
/// (`supplier-tool`'s agents, in-process) with `faults`, their cards signed by the platform.
struct Demo {
    url: String,
    planner: SigningIdentity,
    tools: Vec<RunningTool>,
    shutdown: CancellationToken,
    _dir: tempfile::TempDir,
}

impl Drop for Demo {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl Demo {
    async fn start(faults: &[(&str, FaultMode)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let platform = SigningIdentity::from_seed([51; 32], Some("platform".into()));
        let planner = SigningIdentity::from_seed([52; 32], Some("planner-1".into()));
        let shutdown = CancellationToken::new();
        let tools = start_all(
            SuiteSettings {
                data_dir: dir.path().join("tools"),
                cards_dir: sagaplane_examples::agent_cards_dir(),
                token: TOOL_TOKEN.into(),
                signer: Some(platform.clone()),
                faults: faults.iter().map(|(s, m)| ((*s).to_owned(), *m)).collect(),
                serving: Default::default(),
            },
            "127.0.0.1:0".parse().unwrap(),
            shutdown.clone(),
        )
        .await
        .unwrap();
        let mut platform_keys = shared_types::TrustStore::new();
        platform_keys.add_jwk(&platform.public_jwk()).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let service = build(
            Settings {
                platform_keys,
                planners: vec![("planner-1".into(), planner.public_jwk())],
                admin_token: ADMIN.into(),
                operator_token: None,
                otlp_endpoint: None,
                ..served::test_settings(dir.path().join("executor"), &url)
            },
            shutdown.clone(),
        )
        .await
        .unwrap();
        tokio::spawn(agent_host::serve(
            listener,
            service.router,
            shutdown.clone(),
        ));
        let http = reqwest::Client::new();
        for tool in &tools {
            let response = http
                .post(format!("{url}/admin/cards"))
                .bearer_auth(ADMIN)
                .json(&tool.card)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 201, "{}", tool.agent);
        }
        Self {
            url,
            planner,
            tools,
            shutdown,
            _dir: dir,
        }
    }

    fn tool(&self, agent: &str) -> &RunningTool {
        self.tools.iter().find(|t| t.agent == agent).unwrap()
    }

    /// Sends the supplier plan, signed, with a planner JWT; answered when the saga stops.
    async fn run(&self) -> Task {
        let mut plan = read(PLAN);
        sign_plan(&self.planner, &mut plan);
        let call = OutboundCall {
            bearer: Some(mint_jwt(&self.planner, "planner-1", "executor", 60).unwrap()),
            ..OutboundCall::default()
        };
        let client = AgentClient::new(&self.url).unwrap();
        match client.send(&call, &data_message(plan, None)).await.unwrap() {
            agent_host::sdk::SendMessageResponse::Task(task) => task,
            other => panic!("expected a task, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_hold_the_tool_reports_lapsed_escalates_instead_of_calling_budget_release() {
    // The budget agent reserves, but reports a hold that lapses at once (its card says 24
    // hours); the sandbox then declines, long before any TTL of the card runs out.
    let demo = Demo::start(&[
        ("budget.reserve", FaultMode::ExpireEarly),
        ("sandbox.provision", FaultMode::Decline),
    ])
    .await;
    let task = demo.run().await;

    assert_eq!(
        task.status.state,
        TaskState::InputRequired,
        "{:?}",
        task.status
    );
    let status = task.status.message.as_ref().and_then(|m| m.text()).unwrap();
    assert!(
        status.starts_with("step s1: the undo expired at ")
            && status.contains("as the tool's result reported"),
        "{status}"
    );
    // Nothing was released or archived: the budget's undo was not called, and the
    // vendor's, which comes after it, waits for the person.
    let budget = demo.tool("budget").ledger().await.unwrap();
    assert_eq!(budget.calls_with("budget.release", "undone"), 0);
    assert!(
        budget.call_log.iter().all(|c| c.skill != "budget.release"),
        "{:#?}",
        budget.call_log
    );
    let vendors = demo.tool("vendor-registry").ledger().await.unwrap();
    assert!(vendors.call_log.iter().all(|c| c.skill != "vendor.archive"));
    for ledger in [&budget, &vendors] {
        assert_eq!(check_ledger(ledger), Vec::<String>::new());
    }

    // The ledger shows each completed step's deadline, and why s1's undo is unavailable.
    let ledger = ledger_of(&task);
    assert_eq!(ledger["sagaId"], SAGA);
    assert_eq!(ledger["phase"]["phase"], "paused");
    let s1 = &ledger["steps"][1];
    let held = budget.effect(&format!("{SAGA}:s1")).unwrap().result["holdExpiresAt"].clone();
    let reported = chrono::DateTime::parse_from_rfc3339(held.as_str().unwrap()).unwrap();
    let at = s1["undoDeadline"]["at"].as_str().unwrap();
    assert_eq!(
        chrono::DateTime::parse_from_rfc3339(at).unwrap(),
        reported,
        "{s1}"
    );
    assert_eq!(s1["undoDeadline"]["setBy"], "reported");
    assert_eq!(s1["undoDeadline"]["earlierThanDeclared"], true);
    assert_eq!(s1["undo"]["state"], "unavailable");
    assert!(
        s1["undo"]["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with(&format!("the undo expired at {at}"))),
        "{s1}"
    );
    assert_eq!(ledger["steps"][0]["undo"]["state"], "pending");
    assert_eq!(ledger["steps"][0]["undoDeadline"]["at"], Value::Null);
    assert_eq!(ledger["steps"][2]["undo"]["state"], "nothingToUndo");

    // The metrics count the tool as misdeclaring and the compensation as unavailable;
    // the vendor's handle is still open (the saga can still unwind), the budget's is not.
    let metrics = scrape(&demo.url).await;
    let budget_agent = r#"agent="budget""#;
    assert_eq!(
        sample(
            &metrics,
            "sagaplane_undo_deadline_misdeclared_total",
            budget_agent
        ),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        sample(
            &metrics,
            "sagaplane_compensations_total",
            r#"agent="budget",outcome="unavailable""#
        ),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        sample(
            &metrics,
            "sagaplane_compensations_total",
            r#"agent="budget",outcome="succeeded""#
        ),
        None
    );
    let vendor_agent = r#"agent="vendor-registry""#;
    assert_eq!(
        sample(&metrics, "sagaplane_undo_handles_open", vendor_agent),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        sample(&metrics, "sagaplane_undo_handles_open", budget_agent),
        Some(0.0),
        "{metrics}"
    );
    assert_eq!(
        sample(&metrics, "sagaplane_undo_handles_expiring", vendor_agent),
        Some(0.0),
        "the vendor's undo never expires: {metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demo_hold_within_its_card_is_used_as_reported_and_released_before_it() {
    // No fault on the hold: the budget reports 24 hours, its card declares 24 hours.
    let demo = Demo::start(&[("sandbox.provision", FaultMode::Decline)]).await;
    let task = demo.run().await;
    assert_eq!(task.status.state, TaskState::Failed, "{:?}", task.status);
    let ledger = ledger_of(&task);
    let s1 = &ledger["steps"][1];
    assert_eq!(s1["undo"]["state"], "done", "{s1}");
    assert_eq!(s1["undoDeadline"]["setBy"], "reported", "{s1}");
    assert!(
        s1["undoDeadline"].get("earlierThanDeclared").is_none(),
        "{s1}"
    );
    let budget = demo.tool("budget").ledger().await.unwrap();
    assert_eq!(budget.calls_with("budget.release", "undone"), 1);
    let metrics = scrape(&demo.url).await;
    assert_eq!(
        sample(
            &metrics,
            "sagaplane_undo_deadline_misdeclared_total",
            r#"agent="budget""#
        ),
        None,
        "an honest tool is not counted: {metrics}"
    );
    for agent in ["vendor-registry", "budget"] {
        assert_eq!(
            sample(
                &metrics,
                "sagaplane_compensations_total",
                &format!(r#"agent="{agent}",outcome="succeeded""#)
            ),
            Some(1.0),
            "{agent}: {metrics}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_open_and_expiring_undo_handles_during_a_saga_and_count_its_compensations() {
    // Compliance holds its answer (the saga stays open at s3); then the capture declines
    // and the saga unwinds, budget.release failing twice before it succeeds.
    let harness = Harness::start_timed(
        &[
            ("compliance.check", Fault::ApplyThenHold(1)),
            ("payments.capture", Fault::Decline),
            ("budget.release", Fault::DeclineTimes(2)),
        ],
        30_000,
    )
    .await;
    let plan = harness.signed(PLAN);
    let sent = {
        let client = AgentClient::new(&harness.url).unwrap();
        let call = harness.as_planner();
        tokio::spawn(async move { client.send(&call, &data_message(plan, None)).await })
    };
    // While s3 is out: vendor (no deadline), budget (24 h) and sandbox (1 h, within the
    // default hour) hold open handles.
    let metrics = scrape_until(&harness.url, |m| {
        sample(m, "sagaplane_undo_handles_open", r#"agent="sandbox""#) == Some(1.0)
    })
    .await;
    for (agent, open, expiring) in [
        ("vendor-registry", 1.0, 0.0),
        ("budget", 1.0, 0.0),
        ("sandbox", 1.0, 1.0),
    ] {
        let labels = format!(r#"agent="{agent}""#);
        assert_eq!(
            sample(&metrics, "sagaplane_undo_handles_open", &labels),
            Some(open),
            "{agent}: {metrics}"
        );
        assert_eq!(
            sample(&metrics, "sagaplane_undo_handles_expiring", &labels),
            Some(expiring),
            "{agent}: {metrics}"
        );
    }
    assert_eq!(
        sample(&metrics, "sagaplane_undo_expiring_within_seconds", ""),
        Some(3600.0),
        "{metrics}"
    );
    assert!(!metrics.contains(SAGA), "no label names a saga: {metrics}");

    harness.log("compliance-registry").release.notify_one();
    let task = match sent.await.unwrap().unwrap() {
        agent_host::sdk::SendMessageResponse::Task(task) => task,
        other => panic!("expected a task, got {other:?}"),
    };
    assert_eq!(task.status.state, TaskState::Failed, "{:?}", task.status);
    assert_eq!(ledger_of(&task)["phase"]["ending"], "compensated");

    let metrics = scrape(&harness.url).await;
    let compensations = |agent: &str, outcome: &str| {
        sample(
            &metrics,
            "sagaplane_compensations_total",
            &format!(r#"agent="{agent}",outcome="{outcome}""#),
        )
    };
    assert_eq!(compensations("budget", "failed"), Some(2.0), "{metrics}");
    assert_eq!(compensations("budget", "succeeded"), Some(1.0), "{metrics}");
    assert_eq!(
        compensations("sandbox", "succeeded"),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(compensations("vendor-registry", "succeeded"), Some(1.0));
    for agent in ["vendor-registry", "budget", "sandbox"] {
        assert_eq!(compensations(agent, "dead_lettered"), None, "{metrics}");
        // The saga is over: nothing is open any more, and it shows as 0.
        let labels = format!(r#"agent="{agent}""#);
        assert_eq!(
            sample(&metrics, "sagaplane_undo_handles_open", &labels),
            Some(0.0),
            "{agent}: {metrics}"
        );
        assert_eq!(
            sample(&metrics, "sagaplane_undo_handles_expiring", &labels),
            Some(0.0),
            "{agent}: {metrics}"
        );
    }
    // The tool calls of compensations are among the tool calls, as before.
    assert_eq!(
        sample(
            &metrics,
            "sagaplane_tool_calls_total",
            r#"agent="budget",outcome="failed""#
        ),
        Some(2.0),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_lettered_compensation_is_counted_and_its_handle_stays_open_for_a_person() {
    let harness = Harness::start(&[
        ("compliance.check", Fault::Decline),
        ("budget.release", Fault::Decline),
    ])
    .await;
    let task = harness.send(harness.signed(PLAN), None).await;
    assert_eq!(
        task.status.state,
        TaskState::InputRequired,
        "{:?}",
        task.status
    );
    let metrics = scrape(&harness.url).await;
    let compensations = |agent: &str, outcome: &str| {
        sample(
            &metrics,
            "sagaplane_compensations_total",
            &format!(r#"agent="{agent}",outcome="{outcome}""#),
        )
    };
    // Five declared attempts, then the dead letter; the sandbox's undo ran before.
    assert_eq!(compensations("budget", "failed"), Some(5.0), "{metrics}");
    assert_eq!(
        compensations("budget", "dead_lettered"),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(compensations("budget", "succeeded"), None, "{metrics}");
    assert_eq!(
        compensations("sandbox", "succeeded"),
        Some(1.0),
        "{metrics}"
    );
    // A person may still retry the budget's undo, and the vendor's waits behind it.
    for (agent, open) in [("budget", 1.0), ("vendor-registry", 1.0), ("sandbox", 0.0)] {
        assert_eq!(
            sample(
                &metrics,
                "sagaplane_undo_handles_open",
                &format!(r#"agent="{agent}""#)
            ),
            Some(open),
            "{agent}: {metrics}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_card_whose_undo_deadline_cannot_be_read_is_refused_at_registration_and_changes_nothing()
{
    let demo = Demo::start(&[]).await;
    let platform = SigningIdentity::from_seed([51; 32], Some("platform".into()));
    let http = reqwest::Client::new();
    let history = || async {
        http.get(format!("{}/admin/registry-history?agent=budget", demo.url))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap()
    };
    let before = history().await;
    assert!(before.to_string().contains("\"budget\""), "{before}");
    for (bad, says) in [
        ("$response.body#/holdExpiresat", "outputSchema"),
        ("$request.body#/vendorId", "step's own result"),
        ("$response.body/holdExpiresAt", "not a runtime expression"),
    ] {
        let mut card = demo.tool("budget").card.clone();
        card.as_object_mut().unwrap().remove("signatures");
        card["capabilities"]["extensions"][0]["params"]["skills"]["budget.reserve"]["undoExpiresAt"] =
            bad.into();
        platform.sign_in_place(&mut card).unwrap();
        let response = http
            .post(format!("{}/admin/cards", demo.url))
            .bearer_auth(ADMIN)
            .json(&card)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 422, "{bad}");
        let body = response.text().await.unwrap();
        assert!(
            body.contains("undoExpiresAt") && body.contains(says),
            "{bad}: {body}"
        );
    }
    assert_eq!(history().await, before, "no registration was recorded");
    // The curated declaration stands: a saga still reads the hold the budget reports.
    let task = demo.run().await;
    assert_eq!(task.status.state, TaskState::Completed, "{:?}", task.status);
    assert_eq!(
        ledger_of(&task)["steps"][1]["undoDeadline"]["setBy"],
        "reported"
    );
}
