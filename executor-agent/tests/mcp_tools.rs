//! MCP tools inside sagas, against the checkout MCP server (rmcp, streamable HTTP) on
//! loopback: recovery read from `annotations.recovery` or `_meta`, the curated manifest
//! refusing a changed declaration (at registration and at call time), an unresolvable
//! binding escalating instead of compensating, hidden metadata leaving effects in place,
//! and a mixed A2A + MCP saga compensating in exact reverse order.

mod common;

use agent_host::sdk::{StreamResponse, Task, TaskState};
use common::*;
use executor_agent::mcp::McpSession;
use executor_agent::registry::McpListing;
use futures::StreamExt;
use sagaplane_examples::checkout::{
    self, ChargeMode, CheckoutSettings, LedgerReport, RecoveryMode, RecoveryVariant,
    RunningCheckout, SERVER_NAME, ShipmentMode, StatusMode, Switches,
};
use serde_json::{Value, json};
use shared_types::mcp::declared_recovery;
use tokio_util::sync::CancellationToken;

const SAGA: &str = "sg_mcp_checkout";

async fn start_shop(recovery: RecoveryMode) -> RunningCheckout {
    start_shop_with(Switches {
        recovery,
        ..Switches::default()
    })
    .await
}

async fn start_shop_with(switches: Switches) -> RunningCheckout {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let settings = CheckoutSettings {
        data_dir: None,
        token: Some(TOOL_TOKEN.to_owned()),
        switches,
        ..CheckoutSettings::default()
    };
    checkout::start(settings, listener, CancellationToken::new())
        .await
        .unwrap()
}

/// A manifest for the shop as a curator signs it after looking at `listing`: with
/// `recovery`, reserve and charge are compensable and their declarations pinned, the
/// shipment is the pivot; without, the reservation is the pivot (nothing can undo it)
/// and the rest may only be retried.
fn manifest(harness: &Harness, listing: &McpListing, recovery: bool) -> Value {
    let mut manifest = curated(listing, recovery);
    harness.platform.sign_in_place(&mut manifest).unwrap();
    manifest
}

/// The manifest of `manifest`, unsigned.
fn curated(listing: &McpListing, recovery: bool) -> Value {
    let pin = |tool: &str| {
        let entry = listing
            .tools
            .iter()
            .find(|t| t["name"] == tool)
            .expect("the server lists the tool");
        declared_recovery(entry).unwrap()
    };
    let quick = json!({"maxAttempts": 3, "initialBackoffMs": 10, "maxBackoffMs": 20});
    let spend =
        json!({"amountMinor": "$request.body#/amountMinor", "currency": "$request.body#/currency"});
    let tools = if recovery {
        json!({
            "reserve_inventory": {"class": "compensable", "idempotent": true, "timeoutMs": 2000,
                                  "recovery": pin("reserve_inventory")},
            "charge_payment": {"class": "compensable", "idempotent": true, "timeoutMs": 2000,
                               "spend": spend, "recovery": pin("charge_payment")},
            "create_shipment": {"class": "irreversible", "pivot": true, "idempotent": true,
                                "timeoutMs": 2000},
            "refund_payment": {"class": "retriable", "idempotent": true, "timeoutMs": 2000, "retry": quick},
            "release_inventory": {"class": "retriable", "idempotent": true, "timeoutMs": 2000, "retry": quick}
        })
    } else {
        json!({
            "reserve_inventory": {"class": "irreversible", "pivot": true, "idempotent": true, "timeoutMs": 2000},
            "charge_payment": {"class": "retriable", "idempotent": true, "timeoutMs": 2000, "spend": spend},
            "create_shipment": {"class": "retriable", "idempotent": true, "timeoutMs": 2000}
        })
    };
    json!({
        "agent": MCP_AGENT,
        "description": "The checkout MCP server",
        "server": {"name": SERVER_NAME, "url": listing.url},
        "tools": tools
    })
}

/// What the shop lists, read as a registration reads it: from the endpoint a verified
/// (probe) manifest names, with the credential of the agent it curates.
async fn list(harness: &Harness, shop: &RunningCheckout) -> McpListing {
    let mut probe = json!({
        "agent": MCP_AGENT,
        "server": {"name": SERVER_NAME, "url": shop.mcp_url},
        "tools": {"reserve_inventory": {"class": "retriable", "idempotent": true}}
    });
    harness.platform.sign_in_place(&mut probe).unwrap();
    let curated = harness.registry.verify_manifest(&probe).unwrap();
    harness.mcp.listing(&curated).await.unwrap()
}

/// Registers a manifest as the admin route does: verified first, then checked against
/// `listing`.
async fn register_signed(
    harness: &Harness,
    manifest: Value,
    listing: McpListing,
) -> executor_agent::Result<executor_agent::registry::RegisteredAgent> {
    let curated = harness.registry.verify_manifest(&manifest)?;
    let (agent, _) = harness
        .registry
        .register_mcp(curated, listing, "test")
        .await?;
    Ok(agent)
}

/// Registers the shop with a manifest made from what it lists now.
async fn register(harness: &Harness, shop: &RunningCheckout, recovery: bool) {
    let listing = list(harness, shop).await;
    let manifest = manifest(harness, &listing, recovery);
    register_signed(harness, manifest, listing).await.unwrap();
}

fn step(id: &str, agent: &str, skill: &str, args: Value, harness: &Harness) -> Value {
    let catalog = harness.registry.catalog().unwrap();
    let declaration = catalog.declaration(agent, skill).expect("a curated skill");
    let mut step = json!({
        "id": id, "agent": agent, "skill": skill, "args": args,
        "class": declaration.class.as_str(),
        "idempotencyKey": format!("{SAGA}:{id}"),
    });
    if let Some(compensation) = &declaration.compensation {
        step["compensation"] = serde_json::to_value(compensation).unwrap();
    }
    step
}

fn reserve(harness: &Harness, id: &str) -> Value {
    step(
        id,
        MCP_AGENT,
        "reserve_inventory",
        json!({"sku": "MUG-RED", "quantity": 2}),
        harness,
    )
}

fn charge(harness: &Harness, id: &str) -> Value {
    step(
        id,
        MCP_AGENT,
        "charge_payment",
        json!({"orderId": "ORD-1001", "amountMinor": 4200, "currency": "EUR"}),
        harness,
    )
}

fn ship(harness: &Harness, id: &str, reserved_by: &str) -> Value {
    step(
        id,
        MCP_AGENT,
        "create_shipment",
        json!({"orderId": "ORD-1001", "address": "1 Nowhere Lane",
               "reservationId": format!("$steps.{reserved_by}.response.body#/reservationId")}),
        harness,
    )
}

fn signed_plan(harness: &Harness, steps: Vec<Value>, pivot: usize) -> Value {
    let mut plan = json!({
        "sagaId": SAGA, "planVersion": 1, "goal": "Check out order ORD-1001",
        "createdAt": "2026-11-29T10:00:00Z",
        "authoredBy": {"agent": "test", "model": "hand", "promptSha256": null, "rejectedAlternatives": []},
        "pivotIndex": pivot,
        "steps": steps
    });
    common::sign_plan(&harness.planner, &mut plan);
    plan
}

/// Sends the plan streaming; returns the final task and every status text in order.
async fn run(harness: &Harness, plan: Value) -> (Task, Vec<String>) {
    let request = data_message(plan, None);
    let mut events = harness
        .client
        .stream(&harness.as_planner(), &request)
        .await
        .unwrap();
    let (mut texts, mut task_id) = (Vec::new(), None);
    while let Some(Ok(event)) = events.next().await {
        match event {
            StreamResponse::Task(task) => task_id = Some(task.id),
            StreamResponse::StatusUpdate(update) => {
                task_id = Some(update.task_id.clone());
                if let Some(message) = &update.status.message {
                    texts.extend(
                        message
                            .parts
                            .iter()
                            .filter_map(|p| p.as_text().map(str::to_owned)),
                    );
                }
            }
            _ => {}
        }
    }
    let task = harness
        .client
        .get_task(&harness.as_planner(), &task_id.unwrap())
        .await
        .unwrap();
    (task, texts)
}

/// Steps in the order their compensation finished.
fn compensated(texts: &[String]) -> Vec<String> {
    texts
        .iter()
        .filter_map(|t| t.strip_suffix(": compensated").map(str::to_owned))
        .collect()
}

/// `tool outcome` for every call the shop answered, in its order.
fn calls(report: &LedgerReport) -> Vec<String> {
    report
        .calls
        .iter()
        .map(|e| format!("{} {}", e.tool, e.outcome))
        .collect()
}

#[tokio::test]
async fn a_mixed_a2a_and_mcp_saga_compensates_in_exact_reverse_order() {
    let harness = Harness::start(&[]).await;
    let shop = start_shop(RecoveryMode::Annotations).await;
    register(&harness, &shop, true).await;
    let supplier = read("examples/plans/supplier-onboarding.json");
    let mut steps: Vec<Value> = supplier["steps"].as_array().unwrap()[..2].to_vec();
    for s in &mut steps {
        s["idempotencyKey"] = json!(format!("{SAGA}:{}", s["id"].as_str().unwrap()));
    }
    steps.extend([
        reserve(&harness, "s2"),
        charge(&harness, "s3"),
        ship(&harness, "s4", "s2"),
    ]);
    let (task, texts) = run(&harness, signed_plan(&harness, steps, 4)).await;

    assert_eq!(task.status.state, TaskState::Failed, "{texts:#?}");
    assert_eq!(task.metadata.as_ref().unwrap()["outcome"], "compensated");
    assert_eq!(compensated(&texts), ["s3", "s2", "s1", "s0"], "{texts:#?}");
    // The shop: reserve, charge, the refused shipment, then refund before release.
    let report = shop.ledger().await.unwrap();
    assert_eq!(
        calls(&report),
        [
            "reserve_inventory applied",
            "charge_payment applied",
            "create_shipment failed",
            "refund_payment applied",
            "release_inventory applied"
        ]
    );
    assert!(checkout::check_ledger(&report).is_empty());
    // Every call carried the key derived from the plan; the undo keys end in `:undo`.
    let keys: Vec<_> = report
        .calls
        .iter()
        .map(|e| e.idempotency_key.clone().unwrap())
        .collect();
    assert_eq!(
        keys,
        ["s2", "s3", "s4", "s3:undo", "s2:undo"].map(|k| format!("{SAGA}:{k}"))
    );
    // The refund was bound from the charge's structuredContent and its arguments.
    let charged = &report.calls[1].result.as_ref().unwrap()["paymentId"];
    assert_eq!(report.calls[3].arguments["paymentId"], *charged);
    assert_eq!(report.calls[3].arguments["amountMinor"], 4200);
    // And the A2A agents: vendor and budget applied, then undone in reverse.
    assert_eq!(
        effects_in_order(&harness.logs),
        ["s0", "s1", "s1:undo", "s0:undo"].map(|k| format!("{SAGA}:{k}"))
    );
}

#[tokio::test]
async fn recovery_declared_only_in_meta_compensates_the_same_way() {
    let harness = Harness::start(&[]).await;
    let shop = start_shop(RecoveryMode::Meta).await;
    register(&harness, &shop, true).await;
    let steps = vec![
        reserve(&harness, "s0"),
        charge(&harness, "s1"),
        ship(&harness, "s2", "s0"),
    ];
    let (task, texts) = run(&harness, signed_plan(&harness, steps, 2)).await;
    assert_eq!(task.status.state, TaskState::Failed);
    assert_eq!(compensated(&texts), ["s1", "s0"], "{texts:#?}");
    let state = shop.ledger().await.unwrap().state;
    assert!(
        state
            .reservations
            .values()
            .all(|r| r.status == checkout::Hold::Released)
    );
    assert!(
        state
            .payments
            .values()
            .all(|p| p.status == checkout::PaymentStatus::Refunded)
    );
}

#[tokio::test]
async fn without_recovery_metadata_the_effects_stay_and_a_person_is_asked() {
    let harness = Harness::start(&[]).await;
    let shop = start_shop(RecoveryMode::Hidden).await;
    register(&harness, &shop, false).await;
    let steps = vec![
        reserve(&harness, "s0"),
        charge(&harness, "s1"),
        ship(&harness, "s2", "s0"),
    ];
    let (task, texts) = run(&harness, signed_plan(&harness, steps, 0)).await;
    assert_eq!(task.status.state, TaskState::InputRequired, "{texts:#?}");
    assert!(compensated(&texts).is_empty());
    let report = shop.ledger().await.unwrap();
    assert_eq!(
        calls(&report),
        [
            "reserve_inventory applied",
            "charge_payment applied",
            "create_shipment failed"
        ]
    );
    assert!(
        report
            .state
            .reservations
            .values()
            .all(|r| r.status == checkout::Hold::Held)
    );
    assert!(
        report
            .state
            .payments
            .values()
            .all(|p| p.status == checkout::PaymentStatus::Captured)
    );
}

#[tokio::test]
async fn a_server_whose_declaration_changed_after_signing_is_refused() {
    let harness = Harness::start(&[]).await;
    let shop = start_shop(RecoveryMode::Both).await;
    let listing = list(&harness, &shop).await;
    let signed = manifest(&harness, &listing, true);

    // At registration: the server already declares something else.
    shop.switches().set_variant(RecoveryVariant::Altered);
    let changed = list(&harness, &shop).await;
    let refused = register_signed(&harness, signed.clone(), changed)
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("changed after signing"),
        "{refused}"
    );
    assert!(harness.registry.agent(MCP_AGENT).is_none());

    // After registration: the executor checks again before its first call, and calls nothing.
    shop.switches().set_variant(RecoveryVariant::Curated);
    register_signed(&harness, signed, listing).await.unwrap();
    shop.switches().set_variant(RecoveryVariant::Altered);
    let steps = vec![
        reserve(&harness, "s0"),
        charge(&harness, "s1"),
        ship(&harness, "s2", "s0"),
    ];
    let (task, texts) = run(&harness, signed_plan(&harness, steps, 2)).await;
    assert_eq!(task.status.state, TaskState::Failed, "{texts:#?}");
    assert!(
        texts
            .iter()
            .any(|t| t.contains("no longer matches its curated manifest")),
        "{texts:#?}"
    );
    assert!(shop.ledger().await.unwrap().calls.is_empty());
}

#[tokio::test]
async fn a_manifest_signed_by_an_unknown_key_or_naming_another_server_is_refused() {
    let harness = Harness::start(&[]).await;
    let shop = start_shop(RecoveryMode::Both).await;
    let listing = list(&harness, &shop).await;
    assert_eq!(listing.server_name.as_deref(), Some(SERVER_NAME));
    let session = McpSession::connect(
        &shop.mcp_url,
        Some(TOOL_TOKEN.into()),
        std::time::Duration::from_secs(5),
    )
    .await
    .unwrap();
    assert_eq!(session.protocol_version().as_deref(), Some("2026-07-28"));
    // Without the executor's credential the server does not even open a session.
    let anonymous =
        McpSession::connect(&shop.mcp_url, None, std::time::Duration::from_secs(5)).await;
    assert!(anonymous.is_err());

    let mut forged = manifest(&harness, &listing, true);
    let stranger = shared_types::SigningIdentity::from_seed([99; 32], Some("stranger".into()));
    stranger.sign_in_place(&mut forged).unwrap();
    let refused = register_signed(&harness, forged, listing.clone())
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("not curated"), "{refused}");

    let mut elsewhere = manifest(&harness, &listing, true);
    elsewhere["server"]["name"] = json!("some-other-server");
    harness.platform.sign_in_place(&mut elsewhere).unwrap();
    let refused = register_signed(&harness, elsewhere, listing)
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("some-other-server"),
        "{refused}"
    );
}

#[tokio::test]
async fn an_unresolvable_binding_makes_the_compensation_unavailable_and_the_saga_escalates() {
    let harness = Harness::start(&[]).await;
    let shop = start_shop(RecoveryMode::Both).await;
    register(&harness, &shop, true).await;
    // The payment is captured, but its answer lacks the paymentId the refund binds.
    shop.switches().set(Switches {
        receipt: checkout::ReceiptMode::WithoutPaymentId,
        ..shop.switches().get()
    });
    let steps = vec![
        reserve(&harness, "s0"),
        charge(&harness, "s1"),
        ship(&harness, "s2", "s0"),
    ];
    let (task, texts) = run(&harness, signed_plan(&harness, steps, 2)).await;

    assert_eq!(task.status.state, TaskState::InputRequired, "{texts:#?}");
    assert!(
        texts.iter().any(|t| t.contains("paymentId")),
        "the escalation names the unresolved binding: {texts:#?}"
    );
    // No refund was attempted with partial arguments, and nothing before it was undone.
    let report = shop.ledger().await.unwrap();
    assert_eq!(
        calls(&report),
        [
            "reserve_inventory applied",
            "charge_payment applied",
            "create_shipment failed"
        ]
    );
    assert!(
        report
            .state
            .payments
            .values()
            .all(|p| p.status == checkout::PaymentStatus::Captured)
    );
}

/// Registers the shop with recovery, and with `payment_status` as the verification of
/// `charge_payment`, whose one attempt times out after 300 ms.
async fn register_verified(harness: &Harness, shop: &RunningCheckout) {
    let listing = list(harness, shop).await;
    let mut manifest = curated(&listing, true);
    let tools = &mut manifest["tools"];
    tools["charge_payment"]["timeoutMs"] = json!(300);
    tools["charge_payment"]["verify"] =
        json!({"skill": "payment_status", "args": {"forwardKey": "$step.idempotencyKey"}});
    tools["payment_status"] =
        json!({"class": "retriable", "readOnly": true, "idempotent": true, "timeoutMs": 2000});
    harness.platform.sign_in_place(&mut manifest).unwrap();
    register_signed(harness, manifest, listing).await.unwrap();
}

/// Reserve, charge (its answer lost or its call never applied, as `charge` says), ship
/// (the pivot, accepted by the carrier): the final task, its texts and the shop's ledger.
async fn charge_in_doubt(
    charge: ChargeMode,
    status: StatusMode,
) -> (Task, Vec<String>, LedgerReport) {
    let harness = Harness::start(&[]).await;
    let shop = start_shop_with(Switches {
        shipment: ShipmentMode::Accept,
        charge,
        status,
        ..Switches::default()
    })
    .await;
    register_verified(&harness, &shop).await;
    let steps = vec![
        reserve(&harness, "s0"),
        self::charge(&harness, "s1"),
        ship(&harness, "s2", "s0"),
    ];
    let (task, texts) = run(&harness, signed_plan(&harness, steps, 2)).await;
    let report = shop.ledger().await.unwrap();
    (task, texts, report)
}

#[tokio::test]
async fn an_mcp_charge_whose_answer_is_lost_is_verified_applied_and_the_saga_completes() {
    let (task, texts, report) = charge_in_doubt(ChargeMode::LostAfter, StatusMode::Up).await;
    assert_eq!(task.status.state, TaskState::Completed, "{texts:#?}");
    assert!(
        texts.iter().any(|t| t == "s1: verified: it took effect"),
        "{texts:#?}"
    );
    assert_eq!(
        calls(&report),
        [
            "reserve_inventory applied",
            "charge_payment applied",
            "payment_status answered",
            "create_shipment applied"
        ]
    );
    assert_eq!(report.state.payments.len(), 1, "charged once");
    assert!(
        report
            .state
            .payments
            .values()
            .all(|p| p.status == checkout::PaymentStatus::Captured)
    );
}

#[tokio::test]
async fn an_mcp_charge_never_applied_is_verified_not_applied_and_unwinds_with_no_refund() {
    let (task, texts, report) = charge_in_doubt(ChargeMode::LostBefore, StatusMode::Up).await;
    assert_eq!(task.status.state, TaskState::Failed, "{texts:#?}");
    assert!(
        texts
            .iter()
            .any(|t| t == "s1: verified: it did not take effect"),
        "{texts:#?}"
    );
    assert_eq!(
        compensated(&texts),
        ["s0"],
        "only the reservation is undone"
    );
    assert_eq!(
        calls(&report),
        [
            "reserve_inventory applied",
            "payment_status answered",
            "release_inventory applied"
        ]
    );
    assert!(report.state.payments.is_empty(), "nothing charged");
}

#[tokio::test]
async fn an_mcp_charge_that_cannot_be_verified_goes_to_a_person_and_nothing_more_is_called() {
    let (task, texts, report) = charge_in_doubt(ChargeMode::LostAfter, StatusMode::Down).await;
    assert_eq!(task.status.state, TaskState::InputRequired, "{texts:#?}");
    assert!(
        texts.iter().any(|t| t.starts_with("s1: outcome unknown:")
            && t.contains("the verification did not settle it")),
        "{texts:#?}"
    );
    assert_eq!(
        calls(&report),
        [
            "reserve_inventory applied",
            "charge_payment applied",
            "payment_status refused"
        ],
        "no shipment, no refund: a person decides"
    );
}
