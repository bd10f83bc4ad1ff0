//! `sagaplane demo checkout`: the SEP-3172 reference scenario, run twice with real
//! processes on loopback — the checkout MCP server, the executor and the planner, fresh
//! keys each run. First with the server's recovery metadata hidden (the baseline: the
//! shipment fails and the reservation and the charge are left in place), then with it
//! (refund, then release). Both ledgers are printed side by side.

use std::path::{Path, PathBuf};

use agent_host::sdk::{Task, TaskState};
use sagaplane_examples::checkout::{
    self, Hold, LedgerReport, PaymentStatus, render_summary, side_by_side,
};
use serde_json::{Value, json};

use super::processes::{Process, binaries};
use super::{Clock, demo_keys, executor_args, random_token, start_planner, write};
use crate::a2a::{message_text, state_name};
use crate::failure::Failure;

/// The order the demo checks out.
pub const GOAL: &str = "Check out order ORD-1001";

/// The curated manifests (unsigned; each run signs them with its fresh platform key).
const MANIFEST: &str = include_str!("../../../examples/checkout-mcp/manifest.json");
const MANIFEST_BASELINE: &str =
    include_str!("../../../examples/checkout-mcp/manifest-baseline.json");

/// The goal's parameters: what to reserve, charge and ship.
fn goal_data() -> Value {
    json!({
        "intent": "checkout",
        "orderId": "ORD-1001",
        "sku": "MUG-RED",
        "quantity": 2,
        "amountMinor": 4200,
        "currency": "EUR",
        "address": "Hauptstraße 1, 10115 Berlin",
        "maxSpend": "100 EUR"
    })
}

/// One run's outcome.
struct Run {
    task: Task,
    ledger: LedgerReport,
}

/// The processes of one run.
struct Stack {
    shop: Process,
    executor: Process,
    planner: Process,
    /// The shop's base URL (ledger, switches) and its credential.
    shop_url: String,
    token: String,
}

impl Stack {
    async fn stop(self) {
        self.planner.stop().await;
        self.executor.stop().await;
        self.shop.stop().await;
    }
}

async fn start(
    bins: &[PathBuf],
    work: &Path,
    recovery: bool,
    clock: &Clock,
) -> Result<Stack, Failure> {
    let (executor_bin, planner_bin, shop_bin) = (&bins[0], &bins[1], &bins[3]);
    let keys = demo_keys(work)?;
    let (platform, planner_key) = (keys.platform, keys.planner);
    // The principal grants the planner the shop's forward tools, for a few orders.
    let granted = super::mandate::grant(
        work,
        planner_key.kid(),
        (50_000, Some(10_000)),
        &[(
            "shop",
            &["reserve_inventory", "charge_payment", "create_shipment"],
        )],
    )?;
    clock.say(&super::mandate::summary(&granted));
    let (token, admin_token) = (random_token(), random_token());
    let path = |name: &str| work.join(name).display().to_string();

    let shop = Process::start(
        "checkout-mcp",
        shop_bin,
        &[
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--data".into(),
            path("shop"),
            "--recovery".into(),
            if recovery { "both" } else { "hidden" }.into(),
        ],
        &[("CHECKOUT_MCP_TOKEN".into(), token.clone())],
        &work.join("shop.log"),
        1,
    )
    .await?;
    let mcp_url = shop.url().to_owned();
    let shop_url = mcp_url.trim_end_matches("/mcp").to_owned();
    clock.say(&format!(
        "started the checkout MCP server at {mcp_url} (recovery metadata {})",
        if recovery { "declared" } else { "hidden" }
    ));

    let mut manifest: Value = serde_json::from_str(if recovery {
        MANIFEST
    } else {
        MANIFEST_BASELINE
    })
    .map_err(|e| Failure::unusable(format!("the built-in manifest: {e}")))?;
    let agent = manifest["agent"].as_str().unwrap_or("shop").to_owned();
    write(&work.join("credentials.json"), &json!({ agent: token }))?;
    let executor = Process::start(
        "executor",
        executor_bin,
        &executor_args(work),
        &[("SAGAPLANE_ADMIN_TOKEN".into(), admin_token.clone())],
        &work.join("executor.log"),
        1,
    )
    .await?;
    // The endpoint is signed with the manifest: the only address the executor sends the
    // shop's credential to.
    manifest["server"]["url"] = json!(mcp_url);
    platform
        .sign_in_place(&mut manifest)
        .map_err(|e| Failure::unusable(e.to_string()))?;
    let body = json!({"url": mcp_url, "manifest": manifest});
    let registered = crate::executor_api::register_mcp_async(executor.url(), &admin_token, &body)
        .await
        .map_err(|e| Failure::unusable(format!("registering the MCP server: {e}")))?;
    clock.say(&format!(
        "registered it with the executor under a platform-signed manifest ({})",
        registered["skills"]
            .as_array()
            .map(|s| s
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(", "))
            .unwrap_or_default()
    ));
    let planner = start_planner(planner_bin, work, &[executor.url().to_owned()], 0).await?;
    Ok(Stack {
        shop,
        executor,
        planner,
        shop_url,
        token,
    })
}

/// Sends the goal to the planner and follows it to the end (or to a person's desk).
async fn checkout_once(stack: &Stack, clock: &Clock) -> Result<Run, Failure> {
    let request = crate::commands::goal_message(GOAL, Some(goal_data()));
    let task = stack.planner.follow_goal(&request, clock).await?;
    let ledger = checkout::fetch_ledger(&stack.shop_url, Some(&stack.token))
        .await
        .map_err(|e| Failure::unusable(format!("cannot read the shop's ledger: {e}")))?;
    Ok(Run { task, ledger })
}

/// What a run must show: the baseline leaves the reservation held and the payment
/// captured; the recovery run leaves both undone.
fn problems(run: &Run, recovery: bool) -> Vec<String> {
    let mut problems = checkout::check_ledger(&run.ledger);
    let state = &run.ledger.state;
    let (want_state, want_hold, want_payment) = if recovery {
        (TaskState::Failed, Hold::Released, PaymentStatus::Refunded)
    } else {
        (TaskState::AuthRequired, Hold::Held, PaymentStatus::Captured)
    };
    if run.task.status.state != want_state {
        problems.push(format!(
            "the planner's task is {}, expected {}",
            state_name(&run.task.status.state),
            state_name(&want_state)
        ));
    }
    if state.reservations.is_empty() || state.reservations.values().any(|r| r.status != want_hold) {
        problems.push(format!("expected every reservation {want_hold:?}"));
    }
    if state.payments.is_empty() || state.payments.values().any(|p| p.status != want_payment) {
        problems.push(format!("expected every payment {want_payment:?}"));
    }
    problems
}

/// `sagaplane demo checkout`.
pub async fn run(build: bool, summary: Option<&Path>, clock: &Clock) -> Result<(), Failure> {
    let bins = binaries(build, &|line| clock.say(line))?;
    let work = std::env::temp_dir().join(format!(
        "sagaplane-checkout-{}-{}",
        std::process::id(),
        chrono::Utc::now().format("%H%M%S")
    ));
    let mut runs = Vec::new();
    for (recovery, title) in [
        (
            false,
            "run 1, the baseline: the server's recovery metadata hidden",
        ),
        (
            true,
            "run 2: the server declares its compensations (SEP-3172)",
        ),
    ] {
        println!();
        clock.say(&format!("── {title}"));
        let stack = start(
            &bins,
            &work.join(if recovery { "recovery" } else { "baseline" }),
            recovery,
            clock,
        )
        .await?;
        clock.say(&format!(
            "goal → planner: \"{GOAL}\" (2 × MUG-RED, 42.00 EUR)"
        ));
        let outcome = tokio::select! {
            outcome = checkout_once(&stack, clock) => outcome,
            _ = agent_host::process::interrupted() => Err(Failure::rejected("interrupted")),
        };
        stack.stop().await;
        let run = outcome?;
        clock.say(&format!(
            "the planner's task ended {}: {}",
            state_name(&run.task.status.state),
            run.task
                .status
                .message
                .as_ref()
                .map(message_text)
                .unwrap_or_default()
        ));
        runs.push((recovery, run));
    }
    let baseline = render_summary(&runs[0].1.ledger);
    let recovered = render_summary(&runs[1].1.ledger);
    println!();
    println!("the checkout server's own ledgers:");
    println!(
        "{}",
        side_by_side(&[
            ("without recovery metadata", baseline.as_str()),
            ("with SEP-3172 recovery", recovered.as_str()),
        ])
    );
    let mut all_problems = Vec::new();
    for (recovery, run) in &runs {
        let label = if *recovery {
            "recovery run"
        } else {
            "baseline"
        };
        all_problems.extend(
            problems(run, *recovery)
                .into_iter()
                .map(|p| format!("{label}: {p}")),
        );
    }
    if let Some(path) = summary {
        write(
            path,
            &json!({
                "baseline": {"task": runs[0].1.task, "ledger": runs[0].1.ledger},
                "recovery": {"task": runs[1].1.task, "ledger": runs[1].1.ledger},
                "problems": all_problems,
            }),
        )?;
    }
    println!("logs and data: {}", work.display());
    if all_problems.is_empty() {
        println!(
            "✓ baseline: the reservation and the charge were left in place and a person was asked; with recovery: refunded, then released"
        );
        Ok(())
    } else {
        Err(Failure::rejected(all_problems.join("; ")))
    }
}
