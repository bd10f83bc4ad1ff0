//! Tests of SEP-3172 recovery parsing and of curated MCP manifests against a server's tools.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::expr::{EvalContext, bind};

fn refund_recovery() -> Value {
    json!({"strategy": "compensation", "compensatingOperation": {
        "operationId": "refund_payment",
        "parameters": {"paymentId": "$response.body#/paymentId",
                       "amountMinor": "$request.body#/amountMinor"}}})
}

fn tool(name: &str, annotations_recovery: Option<Value>, meta_recovery: Option<Value>) -> Value {
    let mut tool = json!({
        "name": name,
        "inputSchema": {"type": "object", "properties": {"amountMinor": {"type": "integer"}}},
        "outputSchema": {"type": "object", "properties": {"paymentId": {"type": "string"}}},
        "annotations": {"destructiveHint": true}
    });
    if let Some(r) = annotations_recovery {
        tool["annotations"]["recovery"] = r;
    }
    if let Some(r) = meta_recovery {
        tool["_meta"] = json!({ RECOVERY_META_KEY: r });
    }
    tool
}

fn manifest(pinned: Option<Value>) -> McpManifest {
    let mut charge = json!({"class": "compensable", "idempotent": true, "timeoutMs": 2000});
    if let Some(p) = pinned {
        charge["recovery"] = p;
    } else {
        charge["class"] = json!("irreversible");
    }
    McpManifest::parse(&json!({
        "agent": "shop",
        "server": {"name": "shop-mcp"},
        "tools": {
            "charge_payment": charge,
            "refund_payment": {"class": "retriable", "idempotent": true}
        }
    }))
    .unwrap()
}

fn server_tools(charge: Value) -> Vec<Value> {
    vec![
        charge,
        tool("refund_payment", None, None),
        tool("not_curated", None, None),
    ]
}

#[test]
fn recovery_is_read_from_annotations() {
    let agent = manifest(Some(refund_recovery()))
        .catalog_agent(&server_tools(tool(
            "charge_payment",
            Some(refund_recovery()),
            None,
        )))
        .unwrap();
    let charge = &agent.skills["charge_payment"];
    let compensation = charge.compensation.as_ref().unwrap();
    assert_eq!(compensation.skill, "refund_payment");
    assert_eq!(
        compensation.args,
        json!({"paymentId": "$response.body#/paymentId", "amountMinor": "$request.body#/amountMinor"})
    );
    assert_eq!(charge.class, ReversibilityClass::Compensable);
    assert_eq!(charge.timeout_ms, Some(2000));
    // Schemas come from the server; tools the manifest does not name stay out.
    assert_eq!(
        charge.input_schema.as_ref().unwrap()["properties"]["amountMinor"]["type"],
        "integer"
    );
    assert!(!agent.skills.contains_key("not_curated"));
}

#[test]
fn recovery_is_read_from_meta() {
    let agent = manifest(Some(refund_recovery()))
        .catalog_agent(&server_tools(tool(
            "charge_payment",
            None,
            Some(refund_recovery()),
        )))
        .unwrap();
    assert_eq!(
        agent.skills["charge_payment"]
            .compensation
            .as_ref()
            .unwrap()
            .skill,
        "refund_payment"
    );
}

#[test]
fn the_same_declaration_in_both_places_is_fine_and_key_order_does_not_matter() {
    let reordered = json!({"compensatingOperation": {
        "parameters": {"amountMinor": "$request.body#/amountMinor",
                       "paymentId": "$response.body#/paymentId"},
        "operationId": "refund_payment"}, "strategy": "compensation"});
    let tools = server_tools(tool(
        "charge_payment",
        Some(refund_recovery()),
        Some(reordered),
    ));
    assert!(
        manifest(Some(refund_recovery()))
            .catalog_agent(&tools)
            .is_ok()
    );
}

#[test]
fn different_declarations_in_annotations_and_meta_are_refused() {
    let mut other = refund_recovery();
    other["compensatingOperation"]["operationId"] = json!("void_payment");
    let tools = server_tools(tool("charge_payment", Some(refund_recovery()), Some(other)));
    let err = manifest(Some(refund_recovery()))
        .catalog_agent(&tools)
        .unwrap_err();
    assert!(
        err.to_string().contains("declare different recoveries"),
        "{err}"
    );
}

#[test]
fn a_declaration_changed_after_signing_is_refused() {
    let mut changed = refund_recovery();
    changed["compensatingOperation"]["parameters"]["amountMinor"] = json!(0);
    let tools = server_tools(tool("charge_payment", None, Some(changed)));
    let err = manifest(Some(refund_recovery()))
        .catalog_agent(&tools)
        .unwrap_err();
    assert!(err.to_string().contains("changed after signing"), "{err}");
}

#[test]
fn a_declaration_the_manifest_does_not_pin_is_refused() {
    let tools = server_tools(tool("charge_payment", Some(refund_recovery()), None));
    let err = manifest(None).catalog_agent(&tools).unwrap_err();
    assert!(err.to_string().contains("does not accept"), "{err}");
}

#[test]
fn a_pinned_declaration_the_server_dropped_is_refused() {
    let tools = server_tools(tool("charge_payment", None, None));
    let err = manifest(Some(refund_recovery()))
        .catalog_agent(&tools)
        .unwrap_err();
    assert!(err.to_string().contains("no longer declares"), "{err}");
}

#[test]
fn without_any_recovery_the_curated_class_stands() {
    let agent = manifest(None)
        .catalog_agent(&server_tools(tool("charge_payment", None, None)))
        .unwrap();
    assert_eq!(
        agent.skills["charge_payment"].class,
        ReversibilityClass::Irreversible
    );
    assert!(agent.skills["charge_payment"].compensation.is_none());
}

#[test]
fn a_tool_missing_from_the_server_is_refused() {
    let err = manifest(None)
        .catalog_agent(&[tool("refund_payment", None, None)])
        .unwrap_err();
    assert!(
        err.to_string().contains("has no tool charge_payment"),
        "{err}"
    );
}

#[test]
fn a_compensation_naming_an_uncurated_tool_is_refused() {
    let mut recovery = refund_recovery();
    recovery["compensatingOperation"]["operationId"] = json!("not_curated");
    let tools = server_tools(tool("charge_payment", None, Some(recovery.clone())));
    let err = manifest(Some(recovery)).catalog_agent(&tools).unwrap_err();
    assert!(err.to_string().contains("does not have"), "{err}");
}

#[test]
fn only_request_and_response_body_sources_are_accepted() {
    for source in [
        "$steps.s0.response.body#/id",
        "$saga.id",
        "$step.idempotencyKey",
        "order-{$step.id}",
    ] {
        let mut recovery = refund_recovery();
        recovery["compensatingOperation"]["parameters"]["x"] = json!(source);
        let err = Recovery::parse(&recovery).unwrap_err();
        assert!(err.contains("may only read"), "{source}: {err}");
        // The same declaration, pinned by a manifest, makes registration fail.
        let tools = server_tools(tool("charge_payment", None, Some(recovery.clone())));
        let err = manifest(Some(recovery)).catalog_agent(&tools).unwrap_err();
        assert!(err.to_string().contains("may only read"), "{err}");
    }
    let mut header = refund_recovery();
    header["compensatingOperation"]["parameters"]["x"] = json!("$response.header.Location");
    assert!(Recovery::parse(&header).is_err());
}

#[test]
fn other_strategies_and_shapes_are_refused() {
    let mut retry = refund_recovery();
    retry["strategy"] = json!("retry");
    assert!(
        Recovery::parse(&retry)
            .unwrap_err()
            .contains("not supported")
    );
    assert!(Recovery::parse(&json!({"strategy": "compensation"})).is_err());
    assert!(Recovery::parse(&json!("release_inventory")).is_err());
}

#[test]
fn pointer_escapes_in_bindings_resolve_to_the_escaped_keys() {
    let recovery = Recovery::parse(
        &json!({"strategy": "compensation", "compensatingOperation": {
        "operationId": "release",
        "parameters": {"slash": "$response.body#/ids/a~1b", "tilde": "$request.body#/c~0d",
                       "both": "$response.body#/~01~10"}}}),
    )
    .unwrap();
    let compensation = recovery.to_compensation(None);
    let response = json!({"ids": {"a/b": "R1"}, "~1/0": "R2"});
    let request = json!({"c~d": 7});
    let bound = bind(
        &compensation.args,
        &EvalContext {
            response_body: Some(&response),
            request_body: Some(&request),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(bound, json!({"slash": "R1", "tilde": 7, "both": "R2"}));
}

#[test]
fn an_unresolvable_parameter_leaves_the_compensation_unbound() {
    let compensation = Recovery::parse(&refund_recovery())
        .unwrap()
        .to_compensation(None);
    let response = json!({"status": "captured"});
    let request = json!({"amountMinor": 100});
    let unbound = bind(
        &compensation.args,
        &EvalContext {
            response_body: Some(&response),
            request_body: Some(&request),
            ..Default::default()
        },
    );
    assert!(unbound.is_err());
}

#[test]
fn manifests_must_name_an_agent_and_tools() {
    assert!(
        McpManifest::parse(&json!({"agent": "", "server": {"name": "x"}, "tools": {}})).is_err()
    );
    assert!(
        McpManifest::parse(&json!({"agent": "shop", "server": {"name": "x"}, "tools": {}}))
            .is_err()
    );
    assert!(
        McpManifest::parse(&json!({"agent": "shop", "server": {"name": "x"},
        "tools": {"t": {"class": "retriable"}}, "extra": 1}))
        .is_err()
    );
}

fn arbitrary_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        "(\\$[a-z.]{0,12}(#/[a-z~01/]{0,6})?)|[a-z{}$]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                "strategy|compensatingOperation|operationId|parameters|[a-z]{1,4}",
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    /// Any JSON is either a valid declaration or a clear refusal, never a panic; and an
    /// accepted one only ever reads the call's own request or response.
    #[test]
    fn recovery_parsing_never_panics(value in arbitrary_json()) {
        if let Ok(recovery) = Recovery::parse(&value) {
            let args = recovery.to_compensation(None).args;
            let mut sources_ok = true;
            let _ = crate::expr::for_each_expr(&args, &mut |_, e| {
                sources_ok &= matches!(e.source, Source::ResponseBody(_) | Source::RequestBody(_));
            });
            prop_assert!(sources_ok);
        }
        let _ = declared_recovery(&json!({"annotations": {"recovery": value.clone()}, "_meta": {RECOVERY_META_KEY: value}}));
    }
}

#[test]
fn a_curated_undo_deadline_is_carried_over_and_checked_against_the_output_schema() {
    let with_deadline = |at: &str| {
        McpManifest::parse(&json!({
            "agent": "shop",
            "server": {"name": "shop-mcp"},
            "tools": {
                "charge_payment": {"class": "compensable", "idempotent": true,
                                   "recovery": refund_recovery(), "undoExpiresAt": at},
                "refund_payment": {"class": "retriable", "idempotent": true}
            }
        }))
        .unwrap()
    };
    let mut charge = tool("charge_payment", Some(refund_recovery()), None);
    charge["outputSchema"]["properties"]["voidBefore"] = json!({"type": "string"});
    let agent = with_deadline("$response.body#/voidBefore")
        .catalog_agent(&server_tools(charge.clone()))
        .unwrap();
    assert_eq!(
        agent.skills["charge_payment"].undo_expires_at.as_deref(),
        Some("$response.body#/voidBefore")
    );
    for (bad, says) in [
        ("$response.body#/voidbefore", "outputSchema"),
        ("$request.body#/amountMinor", "step's own result"),
        ("$response.body/voidBefore", "not a runtime expression"),
    ] {
        let err = with_deadline(bad)
            .catalog_agent(&server_tools(charge.clone()))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("undoExpiresAt") && err.contains(says),
            "{bad}: {err}"
        );
    }
}
