//! The MCP checkout server against real clients on 127.0.0.1:0: the official rmcp client
//! (2026-07-28 discover and the legacy `initialize` handshake) and raw JSON-RPC over HTTP
//! for what rmcp's typed model drops (`annotations.recovery`, `params.idempotencyKey`).
//! Covered: recovery metadata in each mode and variant, replays under one idempotency
//! key, reused keys, missing keys, the failing shipment, compensations of calls that
//! never happened, the bearer token, a restart on the same ledger, and the ledger's
//! rendering and invariant checks.

use std::path::PathBuf;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
    MetaObject, ProtocolVersion, RequestMetaObject, Tool,
};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientLifecycleMode, ClientServiceExt};
use sagaplane_examples::checkout::{
    CheckoutSettings, Hold, LedgerReport, PaymentStatus, RECOVERY_META_KEY, RecoveryMode,
    RecoveryVariant, RunningCheckout, SAGA_META_KEY, ShipmentMode, Switches, TOOLS, check_ledger,
    fetch_ledger, fetch_switches, put_switches, recovery_declaration, render_summary, side_by_side,
    start,
};
use serde_json::{Value, json};
use tokio_util::sync::{CancellationToken, DropGuard};

const TOKEN: &str = "checkout-secret";
const NEW: &str = "2026-07-28";
const LEGACY: &str = "2025-11-25";

type Client = RunningService<RoleClient, ClientConfig>;

struct Served {
    checkout: RunningCheckout,
    _shutdown: DropGuard,
}

async fn serve_with(settings: CheckoutSettings) -> Served {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let shutdown = CancellationToken::new();
    let checkout = start(settings, listener, shutdown.clone()).await.unwrap();
    Served {
        checkout,
        _shutdown: shutdown.drop_guard(),
    }
}

async fn serve() -> Served {
    serve_with(CheckoutSettings::default()).await
}

fn client_info() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("checkout-test", "0.0.0"),
    )
}

async fn try_connect(
    url: &str,
    token: Option<&str>,
    lifecycle: ClientLifecycleMode,
) -> Option<Client> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
    if let Some(token) = token {
        config = config.auth_header(token);
    }
    let transport = StreamableHttpClientTransport::from_config(config);
    client_info()
        .serve_with_lifecycle(transport, lifecycle)
        .await
        .ok()
}

/// An rmcp client on 2026-07-28 (`server/discover`, stateless requests).
async fn connect(url: &str, token: Option<&str>) -> Client {
    let lifecycle = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    try_connect(url, token, lifecycle)
        .await
        .expect("the rmcp client connects")
}

/// An rmcp client on the legacy `initialize` handshake (a session, SSE answers).
async fn connect_legacy(url: &str) -> Client {
    try_connect(url, None, ClientLifecycleMode::Initialize)
        .await
        .expect("the legacy rmcp client connects")
}

fn arguments(value: Value) -> serde_json::Map<String, Value> {
    value.as_object().cloned().unwrap_or_default()
}

/// Calls `tool` through rmcp with the key in `_meta["dev.sagaplane/saga"]`.
async fn call(
    client: &Client,
    tool: &'static str,
    args: Value,
    key: Option<&str>,
) -> CallToolResult {
    let mut params = CallToolRequestParams::new(tool).with_arguments(arguments(args));
    if let Some(key) = key {
        let mut meta = MetaObject::new();
        meta.0
            .insert(SAGA_META_KEY.into(), json!({"idempotencyKey": key}));
        params.meta = Some(RequestMetaObject(meta));
    }
    client.call_tool(params).await.expect("tools/call answers")
}

fn ok(result: &CallToolResult) -> Value {
    assert_eq!(result.is_error, Some(false), "{result:?}");
    result
        .structured_content
        .clone()
        .expect("structuredContent")
}

fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

fn failed(result: &CallToolResult) -> String {
    assert_eq!(result.is_error, Some(true), "{result:?}");
    assert_eq!(result.structured_content, None);
    text(result)
}

/// Reads one JSON-RPC message with `id` from a JSON or SSE response.
async fn read_message(mut response: reqwest::Response, id: i64) -> Value {
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    if content_type.starts_with("application/json") {
        return response.json().await.unwrap();
    }
    assert!(
        content_type.starts_with("text/event-stream"),
        "{content_type}"
    );
    let mut buffer = String::new();
    while let Some(chunk) = response.chunk().await.unwrap() {
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find("\n\n") {
            let event: String = buffer.drain(..end + 2).collect();
            for line in event.lines() {
                if let Some(data) = line.strip_prefix("data:")
                    && let Ok(message) = serde_json::from_str::<Value>(data.trim())
                    && message["id"] == id
                {
                    return message;
                }
            }
        }
    }
    panic!("the stream ended without message {id}");
}

/// A raw 2026-07-28 request: the per-request `_meta` and the SEP-2243 headers rmcp checks.
fn raw_request(
    url: &str,
    token: Option<&str>,
    id: i64,
    method: &str,
    mut params: Value,
) -> reqwest::RequestBuilder {
    params["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!(NEW);
    params["_meta"]["io.modelcontextprotocol/clientInfo"] = json!({"name": "raw", "version": "0"});
    params["_meta"]["io.modelcontextprotocol/clientCapabilities"] = json!({});
    let mut request = reqwest::Client::new()
        .post(url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", NEW)
        .header("Mcp-Method", method);
    if let Some(name) = params.get("name").and_then(Value::as_str) {
        request = request.header("Mcp-Name", name);
    }
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.json(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
}

async fn raw(url: &str, id: i64, method: &str, params: Value) -> Value {
    let response = raw_request(url, None, id, method, params)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    read_message(response, id).await
}

/// The raw `tools/list` result's tools, by name.
async fn raw_tools(url: &str) -> serde_json::Map<String, Value> {
    let message = raw(url, 1, "tools/list", json!({})).await;
    by_name(&message["result"]["tools"])
}

fn by_name(tools: &Value) -> serde_json::Map<String, Value> {
    tools
        .as_array()
        .expect("a tools array")
        .iter()
        .map(|t| (t["name"].as_str().unwrap().to_owned(), t.clone()))
        .collect()
}

/// Checks where each tool shows its declaration in a raw listing.
fn assert_raw_listing(tools: &serde_json::Map<String, Value>, switches: Switches) {
    assert_eq!(tools.len(), TOOLS.len());
    for name in TOOLS {
        let tool = &tools[name];
        let declared = recovery_declaration(name, switches.recovery_variant);
        let annotations = &tool["annotations"];
        // Only the status tool changes nothing.
        assert_eq!(
            annotations["readOnlyHint"],
            name == sagaplane_examples::checkout::PAYMENT_STATUS,
            "{name}: {tool}"
        );
        assert!(
            annotations["destructiveHint"].is_boolean(),
            "{name}: {tool}"
        );
        assert!(annotations["idempotentHint"].is_boolean(), "{name}: {tool}");
        assert_eq!(tool["inputSchema"]["type"], "object", "{name}");
        assert_eq!(tool["outputSchema"]["type"], "object", "{name}");
        let in_annotations = annotations.get("recovery").cloned();
        let in_meta = tool
            .get("_meta")
            .and_then(|m| m.get(RECOVERY_META_KEY))
            .cloned();
        let expect = |shown: bool| if shown { declared.clone() } else { None };
        assert_eq!(
            in_annotations,
            expect(switches.recovery.in_annotations()),
            "{name} annotations in {switches:?}: {tool}"
        );
        assert_eq!(
            in_meta,
            expect(switches.recovery.in_meta()),
            "{name} _meta in {switches:?}: {tool}"
        );
    }
}

fn meta_recovery(tools: &[Tool], name: &str) -> Option<Value> {
    let tool = tools.iter().find(|t| t.name == name).expect("listed");
    tool.meta.as_ref()?.0.get(RECOVERY_META_KEY).cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_shows_recovery_where_the_mode_says() {
    let served = serve().await;
    let url = &served.checkout.mcp_url;
    let client = connect(url, None).await;
    for recovery in RecoveryMode::ALL.iter().copied() {
        let switches = Switches {
            recovery,
            ..Switches::default()
        };
        assert_eq!(put_switches(url, None, switches).await.unwrap(), switches);
        assert_eq!(fetch_switches(url, None).await.unwrap(), switches);

        assert_raw_listing(&raw_tools(url).await, switches);

        // Through rmcp's typed model: `_meta` survives, `annotations.recovery` cannot.
        let tools = client.list_all_tools().await.unwrap();
        let curated = recovery_declaration("reserve_inventory", RecoveryVariant::Curated);
        let expected = if recovery.in_meta() { curated } else { None };
        assert_eq!(
            meta_recovery(&tools, "reserve_inventory"),
            expected,
            "{recovery}"
        );
        assert_eq!(meta_recovery(&tools, "create_shipment"), None);
        let reserve = tools
            .iter()
            .find(|t| t.name == "reserve_inventory")
            .unwrap();
        let hints = reserve.annotations.as_ref().expect("hint annotations");
        assert_eq!(hints.read_only_hint, Some(false));
        assert!(reserve.output_schema.is_some());
    }
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_declarations_are_those_of_sep_3172() {
    let served = serve().await;
    let tools = raw_tools(&served.checkout.mcp_url).await;
    assert_eq!(
        tools["charge_payment"]["annotations"]["recovery"],
        json!({"strategy": "compensation", "compensatingOperation": {
            "operationId": "refund_payment",
            "parameters": {"paymentId": "$response.body#/paymentId",
                           "amountMinor": "$request.body#/amountMinor",
                           "currency": "$request.body#/currency"}}})
    );
    assert_eq!(
        tools["reserve_inventory"]["_meta"][RECOVERY_META_KEY],
        json!({"strategy": "compensation", "compensatingOperation": {
            "operationId": "release_inventory",
            "parameters": {"reservationId": "$response.body#/reservationId"}}})
    );
    for name in ["create_shipment", "refund_payment", "release_inventory"] {
        assert!(
            tools[name]["annotations"].get("recovery").is_none(),
            "{name}"
        );
        assert!(tools[name].get("_meta").is_none(), "{name}");
    }

    served
        .checkout
        .switches()
        .set_variant(RecoveryVariant::Altered);
    let altered = raw_tools(&served.checkout.mcp_url).await;
    let switches = served.checkout.switches().get();
    assert_raw_listing(&altered, switches);
    let charge = &altered["charge_payment"]["annotations"]["recovery"];
    assert_eq!(
        charge["compensatingOperation"]["operationId"],
        "charge_payment"
    );
    let reserve = &altered["reserve_inventory"]["_meta"][RECOVERY_META_KEY];
    assert_eq!(
        reserve["compensatingOperation"]["parameters"]["sku"],
        "$request.body#/sku"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_sessions_get_annotations_over_sse() {
    let served = serve().await;
    let url = &served.checkout.mcp_url;
    served
        .checkout
        .switches()
        .set_recovery(RecoveryMode::Annotations);
    let http = reqwest::Client::new();
    let post = |session: Option<&str>, body: Value| {
        let mut request = http
            .post(url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream");
        if let Some(session) = session {
            request = request
                .header("Mcp-Session-Id", session)
                .header("MCP-Protocol-Version", LEGACY);
        }
        request.json(&body)
    };
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": LEGACY, "capabilities": {},
        "clientInfo": {"name": "raw-legacy", "version": "0"}}});
    let response = post(None, initialize).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let session = response
        .headers()
        .get("mcp-session-id")
        .expect("a legacy session")
        .to_str()
        .unwrap()
        .to_owned();
    let answer = read_message(response, 1).await;
    assert_eq!(answer["result"]["protocolVersion"], LEGACY, "{answer}");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let response = post(Some(&session), initialized).send().await.unwrap();
    assert!(response.status().is_success());

    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}});
    let response = post(Some(&session), list).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        content_type.starts_with("text/event-stream"),
        "{content_type}"
    );
    let message = read_message(response, 2).await;
    assert_raw_listing(
        &by_name(&message["result"]["tools"]),
        served.checkout.switches().get(),
    );

    // The rmcp client on the legacy handshake calls tools as well.
    let client = connect_legacy(url).await;
    let info = client.peer_info().expect("server info");
    assert_eq!(info.protocol_version.as_str(), LEGACY);
    let reserved = ok(&call(
        &client,
        "reserve_inventory",
        json!({"sku": "SKU-1", "quantity": 1}),
        Some("legacy-1"),
    )
    .await);
    assert_eq!(reserved["reservationId"], "res_0001");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_applies_once_and_replays() {
    let served = serve().await;
    let url = &served.checkout.mcp_url;
    let client = connect(url, None).await;
    let args = json!({"sku": "SKU-42", "quantity": 2});
    let first = call(
        &client,
        "reserve_inventory",
        args.clone(),
        Some("saga-1:reserve"),
    )
    .await;
    assert_eq!(
        ok(&first),
        json!({"reservationId": "res_0001", "sku": "SKU-42", "quantity": 2})
    );
    let again = call(&client, "reserve_inventory", args, Some("saga-1:reserve")).await;
    assert_eq!(ok(&again), ok(&first));
    assert!(text(&again).contains("replayed"), "{}", text(&again));

    // The key where SEP-3182 puts it, `params.idempotencyKey`, read from the raw request.
    let charge = json!({"name": "charge_payment", "idempotencyKey": "saga-1:charge",
        "arguments": {"orderId": "ord-1", "amountMinor": 4999, "currency": "EUR"}});
    let first = raw(url, 7, "tools/call", charge.clone()).await;
    let again = raw(url, 8, "tools/call", charge).await;
    assert_eq!(first["result"]["isError"], false, "{first}");
    assert_eq!(
        first["result"]["structuredContent"],
        json!({"paymentId": "pay_0001", "amountMinor": 4999, "currency": "EUR"})
    );
    assert_eq!(
        again["result"]["structuredContent"],
        first["result"]["structuredContent"]
    );

    let ledger = fetch_ledger(&served.checkout.url, None).await.unwrap();
    let outcomes: Vec<(&str, &str, bool)> = ledger
        .calls
        .iter()
        .map(|c| (c.tool.as_str(), c.outcome.as_str(), c.new_effect))
        .collect();
    assert_eq!(
        outcomes,
        [
            ("reserve_inventory", "applied", true),
            ("reserve_inventory", "replayed", false),
            ("charge_payment", "applied", true),
            ("charge_payment", "replayed", false),
        ]
    );
    assert_eq!(
        ledger.calls[3].idempotency_key.as_deref(),
        Some("saga-1:charge")
    );
    assert_eq!(ledger.state.reservations.len(), 1);
    assert_eq!(ledger.state.payments.len(), 1);
    assert_eq!(check_ledger(&ledger), Vec::<String>::new());
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reused_missing_and_conflicting_keys_are_refused() {
    let served = serve().await;
    let url = &served.checkout.mcp_url;
    let client = connect(url, None).await;
    ok(&call(
        &client,
        "reserve_inventory",
        json!({"sku": "A", "quantity": 1}),
        Some("k1"),
    )
    .await);
    let why = failed(
        &call(
            &client,
            "reserve_inventory",
            json!({"sku": "A", "quantity": 3}),
            Some("k1"),
        )
        .await,
    );
    assert!(why.contains("different payload"), "{why}");
    let why = failed(
        &call(
            &client,
            "release_inventory",
            json!({"reservationId": "res_0001"}),
            Some("k1"),
        )
        .await,
    );
    assert!(why.contains("different payload"), "{why}");

    let why = failed(
        &call(
            &client,
            "charge_payment",
            json!({"orderId": "o", "amountMinor": 1, "currency": "EUR"}),
            None,
        )
        .await,
    );
    assert!(why.contains("idempotency key"), "{why}");
    let why = failed(
        &call(
            &client,
            "charge_payment",
            json!({"orderId": "o", "amountMinor": 1, "currency": "eur"}),
            Some("k2"),
        )
        .await,
    );
    assert!(why.contains("inputSchema"), "{why}");

    let conflicting = json!({"name": "charge_payment", "idempotencyKey": "k3",
        "_meta": {SAGA_META_KEY: {"idempotencyKey": "k4"}},
        "arguments": {"orderId": "o", "amountMinor": 1, "currency": "EUR"}});
    let answer = raw(url, 3, "tools/call", conflicting).await;
    assert_eq!(answer["result"]["isError"], true, "{answer}");

    let ledger = served.checkout.ledger().await.unwrap();
    assert_eq!(ledger.count("reserve_inventory", "refused"), 1);
    assert_eq!(ledger.count("release_inventory", "refused"), 1);
    assert_eq!(ledger.count("charge_payment", "refused"), 3);
    assert_eq!(ledger.new_effects().len(), 1);
    assert_eq!(ledger.state.reservations["res_0001"].status, Hold::Held);
    assert!(ledger.state.payments.is_empty());
    assert_eq!(check_ledger(&ledger), Vec::<String>::new());
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_shipment_fails_until_the_carrier_accepts() {
    let served = serve().await;
    let client = connect(&served.checkout.mcp_url, None).await;
    ok(&call(
        &client,
        "reserve_inventory",
        json!({"sku": "A", "quantity": 1}),
        Some("r"),
    )
    .await);
    let ship =
        json!({"orderId": "ord-1", "reservationId": "res_0001", "address": "1 Nowhere Lane"});
    let why = failed(&call(&client, "create_shipment", ship.clone(), Some("s")).await);
    assert!(why.contains("carrier refused the shipment"), "{why}");
    let ledger = served.checkout.ledger().await.unwrap();
    assert_eq!(ledger.count("create_shipment", "failed"), 1);
    assert!(ledger.state.shipments.is_empty());

    // A definite failure stored nothing under its key: a retry is decided anew.
    served
        .checkout
        .switches()
        .set_shipment(ShipmentMode::Accept);
    let shipped = ok(&call(&client, "create_shipment", ship.clone(), Some("s")).await);
    assert_eq!(shipped, json!({"shipmentId": "shp_0001"}));
    assert_eq!(
        ok(&call(&client, "create_shipment", ship, Some("s")).await),
        shipped
    );
    let unheld = json!({"orderId": "ord-2", "reservationId": "res_0099", "address": "x"});
    let why = failed(&call(&client, "create_shipment", unheld, Some("s2")).await);
    assert!(why.contains("not held"), "{why}");
    let ledger = served.checkout.ledger().await.unwrap();
    assert_eq!(ledger.state.shipments.len(), 1);
    assert_eq!(check_ledger(&ledger), Vec::<String>::new());
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compensations_undo_and_tolerate_what_never_happened() {
    let served = serve().await;
    let client = connect(&served.checkout.mcp_url, None).await;
    let unknown = json!({"paymentId": "pay_0404", "amountMinor": 100, "currency": "EUR"});
    let refunded = call(&client, "refund_payment", unknown, Some("u:undo")).await;
    assert_eq!(
        ok(&refunded),
        json!({"refundId": null, "paymentId": "pay_0404", "note": "no such payment; nothing to refund"})
    );
    let released = ok(&call(
        &client,
        "release_inventory",
        json!({"reservationId": "res_0404"}),
        Some("v:undo"),
    )
    .await);
    assert_eq!(released["released"], false);
    assert!(released["note"].is_string());

    ok(&call(
        &client,
        "charge_payment",
        json!({"orderId": "o", "amountMinor": 250, "currency": "USD"}),
        Some("c"),
    )
    .await);
    let why = failed(
        &call(
            &client,
            "refund_payment",
            json!({"paymentId": "pay_0001", "amountMinor": 10, "currency": "USD"}),
            Some("c:partial"),
        )
        .await,
    );
    assert!(why.contains("does not match"), "{why}");
    let refund = json!({"paymentId": "pay_0001", "amountMinor": 250, "currency": "USD"});
    let first = ok(&call(&client, "refund_payment", refund.clone(), Some("c:undo")).await);
    assert_eq!(
        first,
        json!({"refundId": "ref_0001", "paymentId": "pay_0001"})
    );
    assert_eq!(
        ok(&call(&client, "refund_payment", refund.clone(), Some("c:undo")).await),
        first
    );
    let other_key = ok(&call(&client, "refund_payment", refund, Some("c:undo-2")).await);
    assert_eq!(other_key["refundId"], "ref_0001");
    assert_eq!(other_key["note"], "already refunded");

    ok(&call(
        &client,
        "reserve_inventory",
        json!({"sku": "B", "quantity": 5}),
        Some("r"),
    )
    .await);
    let why = failed(
        &call(
            &client,
            "release_inventory",
            json!({"reservationId": "res_0001", "sku": "Z"}),
            Some("r:wrong"),
        )
        .await,
    );
    assert!(why.contains("not Z"), "{why}");
    let released = ok(&call(
        &client,
        "release_inventory",
        json!({"reservationId": "res_0001", "sku": "B"}),
        Some("r:undo"),
    )
    .await);
    assert_eq!(
        released,
        json!({"reservationId": "res_0001", "released": true})
    );

    let ledger = served.checkout.ledger().await.unwrap();
    assert_eq!(
        ledger.state.payments["pay_0001"].status,
        PaymentStatus::Refunded
    );
    assert_eq!(
        ledger.state.payments["pay_0001"].refund_id.as_deref(),
        Some("ref_0001")
    );
    assert_eq!(ledger.state.refunds.len(), 1);
    assert_eq!(ledger.state.reservations["res_0001"].status, Hold::Released);
    assert_eq!(ledger.count("refund_payment", "nothing-to-undo"), 1);
    assert_eq!(ledger.count("refund_payment", "already-undone"), 1);
    assert_eq!(check_ledger(&ledger), Vec::<String>::new());
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bearer_token_is_required() {
    let served = serve_with(CheckoutSettings {
        token: Some(TOKEN.into()),
        ..CheckoutSettings::default()
    })
    .await;
    let url = &served.checkout.mcp_url;
    for token in [None, Some("wrong")] {
        let response = raw_request(url, token, 1, "tools/list", json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 401, "{token:?}");
        assert!(response.headers().contains_key("www-authenticate"));
    }
    let lifecycle = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    assert!(try_connect(url, None, lifecycle).await.is_none());
    assert!(fetch_ledger(url, None).await.is_err());

    let client = connect(url, Some(TOKEN)).await;
    ok(&call(
        &client,
        "reserve_inventory",
        json!({"sku": "A", "quantity": 1}),
        Some("k"),
    )
    .await);
    let response = raw_request(url, Some(TOKEN), 2, "tools/list", json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let ledger = fetch_ledger(url, Some(TOKEN)).await.unwrap();
    assert_eq!(ledger.new_effects().len(), 1);
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_replays_its_keys() {
    let dir = tempfile::tempdir().unwrap();
    let settings = CheckoutSettings {
        data_dir: Some(PathBuf::from(dir.path())),
        ..CheckoutSettings::default()
    };
    let args = json!({"sku": "A", "quantity": 1});
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let shutdown = CancellationToken::new();
    let first = start(settings.clone(), listener, shutdown.clone())
        .await
        .unwrap();
    let client = connect(&first.mcp_url, None).await;
    let made = ok(&call(&client, "reserve_inventory", args.clone(), Some("k")).await);
    client.cancel().await.unwrap();
    shutdown.cancel();
    first.stopped().await.unwrap();

    let second = serve_with(settings).await;
    let client = connect(&second.checkout.mcp_url, None).await;
    let again = call(&client, "reserve_inventory", args.clone(), Some("k")).await;
    assert_eq!(ok(&again), made);
    assert!(text(&again).contains("replayed"));
    let next = ok(&call(&client, "reserve_inventory", args, Some("k2")).await);
    assert_eq!(next["reservationId"], "res_0002");
    let ledger = second.checkout.ledger().await.unwrap();
    assert_eq!(ledger.calls.len(), 3);
    assert_eq!(check_ledger(&ledger), Vec::<String>::new());
    client.cancel().await.unwrap();
}

/// The scenario's forward steps: reserve, charge, and the shipment that fails.
async fn forward_steps(client: &Client, saga: &str) -> (Value, Value) {
    let reserved = ok(&call(
        client,
        "reserve_inventory",
        json!({"sku": "SKU-42", "quantity": 2}),
        Some(&format!("{saga}:reserve")),
    )
    .await);
    let charged = ok(&call(
        client,
        "charge_payment",
        json!({"orderId": saga, "amountMinor": 4999, "currency": "EUR"}),
        Some(&format!("{saga}:charge")),
    )
    .await);
    let ship = json!({"orderId": saga, "reservationId": reserved["reservationId"], "address": "1 Nowhere Lane"});
    failed(
        &call(
            client,
            "create_shipment",
            ship,
            Some(&format!("{saga}:ship")),
        )
        .await,
    );
    (reserved, charged)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn summaries_show_the_baseline_and_the_recovery() {
    let baseline = serve().await;
    let client = connect(&baseline.checkout.mcp_url, None).await;
    forward_steps(&client, "baseline").await;
    client.cancel().await.unwrap();
    let left = baseline.checkout.ledger().await.unwrap();

    let recovery = serve().await;
    let client = connect(&recovery.checkout.mcp_url, None).await;
    let (reserved, charged) = forward_steps(&client, "recovery").await;
    let refund = json!({"paymentId": charged["paymentId"], "amountMinor": 4999, "currency": "EUR"});
    ok(&call(
        &client,
        "refund_payment",
        refund,
        Some("recovery:charge:undo"),
    )
    .await);
    let release = json!({"reservationId": reserved["reservationId"]});
    ok(&call(
        &client,
        "release_inventory",
        release,
        Some("recovery:reserve:undo"),
    )
    .await);
    client.cancel().await.unwrap();
    let right = recovery.checkout.ledger().await.unwrap();

    assert_eq!(check_ledger(&left), Vec::<String>::new());
    assert_eq!(check_ledger(&right), Vec::<String>::new());
    let (left_text, right_text) = (render_summary(&left), render_summary(&right));
    assert!(
        left_text.contains("res_0001 2 x SKU-42 HELD"),
        "{left_text}"
    );
    assert!(
        left_text.contains("pay_0001 4999 EUR CAPTURED"),
        "{left_text}"
    );
    assert!(
        right_text.contains("res_0001 2 x SKU-42 released"),
        "{right_text}"
    );
    assert!(
        right_text.contains("pay_0001 4999 EUR refunded (ref_0001)"),
        "{right_text}"
    );
    let both = side_by_side(&[
        ("without recovery metadata", &left_text),
        ("with recovery metadata", &right_text),
    ]);
    println!("{both}");
    let first = both.lines().next().unwrap();
    assert!(first.starts_with("without recovery metadata"), "{both}");
    assert!(first.contains("with recovery metadata"), "{both}");
    assert!(
        both.lines()
            .any(|l| l.contains("HELD") && l.contains("released")),
        "{both}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_ledger_finds_broken_invariants() {
    let served = serve().await;
    let client = connect(&served.checkout.mcp_url, None).await;
    forward_steps(&client, "s").await;
    client.cancel().await.unwrap();
    let sound: LedgerReport = served.checkout.ledger().await.unwrap();
    assert_eq!(check_ledger(&sound), Vec::<String>::new());

    let mut doubled = sound.clone();
    let mut again = doubled.calls[0].clone();
    again.seq = 99;
    doubled.calls.push(again);
    assert!(!check_ledger(&doubled).is_empty());

    let mut orphan = sound.clone();
    if let Some(payment) = orphan.state.payments.get_mut("pay_0001") {
        payment.status = PaymentStatus::Refunded;
        payment.refund_id = Some("ref_0007".into());
    }
    let problems = check_ledger(&orphan);
    assert!(
        problems.iter().any(|p| p.contains("ref_0007")),
        "{problems:?}"
    );

    let mut bad_replay = sound;
    let mut replay = bad_replay.calls[0].clone();
    replay.seq = 100;
    replay.outcome = "replayed".into();
    replay.new_effect = false;
    replay.result = Some(json!({"reservationId": "res_0002"}));
    bad_replay.calls.push(replay);
    assert!(!check_ledger(&bad_replay).is_empty());
}
