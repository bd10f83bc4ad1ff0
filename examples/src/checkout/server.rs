//! The MCP behaviour of the checkout server on rmcp: `tools/list` under the current
//! switches, and `tools/call` checked (tool, arguments against the input schema, one
//! idempotency key) and decided on the ledger, answered with `structuredContent` and a
//! short text, or with `isError: true` and the reason.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::http::request::Parts;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler};
use serde_json::Value;

use super::ledger::{Answer, Call, Ledger};
use super::tools::{
    CHARGE_PAYMENT, CREATE_SHIPMENT, ChargeMode, CheckoutSwitches, PAYMENT_STATUS, REFUND_PAYMENT,
    RELEASE_INVENTORY, RESERVE_INVENTORY, SAGA_META_KEY, StatusMode, Switches, TOOLS, describe,
    describe_all, input_schema,
};
use super::{CheckoutError, Result, SERVER_NAME};

/// The fields of a raw `tools/call`'s `params` that rmcp's typed params drop, read by the
/// HTTP layer before rmcp parses the request.
#[derive(Debug, Clone, Default)]
pub(crate) struct RawCallParams {
    /// `params.idempotencyKey`, where the MCP idempotency proposal (SEP-3182) puts it.
    pub idempotency_key: Option<Value>,
}

/// The switches one `tools/list` request is answered under, fixed by the HTTP layer so
/// that the typed listing and the raw `annotations.recovery` rewrite agree.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ListingSwitches(pub Switches);

/// The rmcp server handler; one clone serves every session and stateless request.
#[derive(Clone)]
pub(crate) struct CheckoutServer {
    ledger: Ledger,
    switches: CheckoutSwitches,
    schemas: Arc<BTreeMap<&'static str, jsonschema::Validator>>,
}

impl CheckoutServer {
    pub fn new(ledger: Ledger, switches: CheckoutSwitches) -> Result<Self> {
        let mut schemas = BTreeMap::new();
        for tool in TOOLS {
            let schema = input_schema(tool)
                .ok_or_else(|| CheckoutError::Config(format!("{tool} has no input schema")))?;
            let validator = jsonschema::options()
                .build(&schema)
                .map_err(|e| CheckoutError::Config(format!("{tool}: inputSchema: {e}")))?;
            schemas.insert(tool, validator);
        }
        Ok(Self {
            ledger,
            switches,
            schemas: Arc::new(schemas),
        })
    }

    /// Why `arguments` do not fit `tool`'s input schema, if they do not.
    fn check_arguments(&self, tool: &str, arguments: &Value) -> Result<(), String> {
        let Some(schema) = self.schemas.get(tool) else {
            return Ok(());
        };
        let errors: Vec<String> = schema
            .iter_errors(arguments)
            .take(5)
            .map(|e| {
                let at = e.instance_path().as_str().to_owned();
                let at = if at.is_empty() {
                    "arguments".into()
                } else {
                    at
                };
                format!("{at}: {e}")
            })
            .collect();
        if errors.is_empty() {
            return Ok(());
        }
        Err(format!(
            "the arguments do not match {tool}'s inputSchema: {}; nothing was applied",
            errors.join("; ")
        ))
    }

    async fn answer(
        &self,
        tool: &'static str,
        key: Result<Option<String>, String>,
        arguments: Value,
    ) -> Result<Answer> {
        let refusal = match (
            key.as_ref(),
            self.check_arguments(tool, &arguments).as_ref(),
        ) {
            (Err(why), _) | (_, Err(why)) => Some(why.to_string()),
            (Ok(None), Ok(())) => Some(format!(
                "{tool} changes state: the call must carry an idempotency key in \
                 params.idempotencyKey or params._meta[\"{SAGA_META_KEY}\"].idempotencyKey; \
                 nothing was applied"
            )),
            (Ok(Some(_)), Ok(())) => None,
        };
        let key = key.ok().flatten();
        if let Some(why) = refusal {
            self.ledger
                .refuse(tool, key.as_deref(), &arguments, &why)
                .await?;
            return Ok(Answer::Error(why));
        }
        let call = Call {
            tool,
            key: key.unwrap_or_default(),
            arguments,
            shipment: self.switches.get().shipment,
            receipt: self.switches.get().receipt,
        };
        self.ledger.perform(call).await
    }
}

impl CheckoutServer {
    /// `payment_status`: read-only, so it needs no idempotency key.
    async fn status(
        &self,
        arguments: Value,
        mode: StatusMode,
    ) -> Result<CallToolResult, ErrorData> {
        let refusal = match (self.check_arguments(PAYMENT_STATUS, &arguments), mode) {
            (Err(why), _) => Some(why),
            (Ok(()), StatusMode::Down) => Some(
                "payment_status is unavailable (status mode down); nothing can be said".to_owned(),
            ),
            (Ok(()), StatusMode::Up) => None,
        };
        if let Some(why) = refusal {
            self.ledger
                .refuse(PAYMENT_STATUS, None, &arguments, &why)
                .await
                .map_err(|e| ErrorData::internal_error(format!("internal error: {e}"), None))?;
            return Ok(CallToolResult::error(vec![ContentBlock::text(why)]));
        }
        let forward_key = arguments
            .get("forwardKey")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let answer = self
            .ledger
            .payment_status(forward_key, arguments)
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "the ledger failed");
                ErrorData::internal_error(format!("internal error: {e}"), None)
            })?;
        let mut answered = CallToolResult::structured(answer);
        answered.content = vec![ContentBlock::text("payment_status answered")];
        Ok(answered)
    }
}

/// A key found in one place of a call.
fn key_text(value: Option<&Value>, place: &str) -> Result<Option<(String, String)>, String> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(key)) if !key.trim().is_empty() => {
            Ok(Some((key.clone(), place.to_owned())))
        }
        Some(_) => Err(format!(
            "{place} must be a non-empty string; nothing was applied"
        )),
    }
}

/// The call's idempotency key, read from `params.idempotencyKey` (SEP-3182),
/// `params._meta["dev.sagaplane/saga"].idempotencyKey`, `params._meta.idempotencyKey` or
/// the `Idempotency-Key` HTTP header; where several are given they must agree.
fn idempotency_key(
    request: &CallToolRequestParams,
    context: &RequestContext<RoleServer>,
) -> Result<Option<String>, String> {
    let parts = context.extensions.get::<Parts>();
    let raw = parts.and_then(|p| p.extensions.get::<RawCallParams>());
    // rmcp moves the request's `_meta` into the context; look at both all the same.
    let metas = [
        Some(&context.meta.0.0),
        request.meta.as_ref().map(|m| &m.0.0),
    ];
    let mut found = Vec::new();
    found.extend(key_text(
        raw.and_then(|r| r.idempotency_key.as_ref()),
        "params.idempotencyKey",
    )?);
    for meta in metas.into_iter().flatten() {
        found.extend(key_text(
            meta.get(SAGA_META_KEY)
                .and_then(|s| s.get("idempotencyKey")),
            &format!("params._meta[\"{SAGA_META_KEY}\"].idempotencyKey"),
        )?);
        found.extend(key_text(
            meta.get("idempotencyKey"),
            "params._meta.idempotencyKey",
        )?);
    }
    let header = parts
        .and_then(|p| p.headers.get("idempotency-key"))
        .and_then(|v| v.to_str().ok())
        .map(|v| Value::String(v.to_owned()));
    found.extend(key_text(header.as_ref(), "the Idempotency-Key header")?);
    let Some((key, place)) = found.first() else {
        return Ok(None);
    };
    if let Some((other, other_place)) = found.iter().find(|(k, _)| k != key) {
        return Err(format!(
            "the call carries two idempotency keys, {key:?} in {place} and {other:?} in \
             {other_place}; nothing was applied"
        ));
    }
    Ok(Some(key.clone()))
}

fn field(result: &Value, name: &str) -> String {
    match result.get(name) {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => "?".into(),
    }
}

/// The short text that goes with a result.
fn summary(tool: &str, result: &Value, replayed: bool) -> String {
    let said = match (tool, result.get("note").and_then(Value::as_str)) {
        (_, Some(note)) => format!("{tool}: {note}"),
        (RESERVE_INVENTORY, None) => format!(
            "reserved {} x {} as {}",
            field(result, "quantity"),
            field(result, "sku"),
            field(result, "reservationId")
        ),
        (CHARGE_PAYMENT, None) => format!(
            "charged {} {} as {}",
            field(result, "amountMinor"),
            field(result, "currency"),
            field(result, "paymentId")
        ),
        (CREATE_SHIPMENT, None) => format!("created shipment {}", field(result, "shipmentId")),
        (REFUND_PAYMENT, None) => format!(
            "refunded {} as {}",
            field(result, "paymentId"),
            field(result, "refundId")
        ),
        (RELEASE_INVENTORY, None) => format!("released {}", field(result, "reservationId")),
        _ => format!("{tool} done"),
    };
    if replayed {
        format!("{said} (replayed: this idempotency key was answered before)")
    } else {
        said
    }
}

impl ServerHandler for CheckoutServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(SERVER_NAME, env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "The SEP-3172 checkout scenario: reserve_inventory, charge_payment, \
                 create_shipment, refund_payment, release_inventory. Every call needs an \
                 idempotency key (params.idempotencyKey or \
                 params._meta[\"dev.sagaplane/saga\"].idempotencyKey).",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let switches = context
            .extensions
            .get::<Parts>()
            .and_then(|p| p.extensions.get::<ListingSwitches>())
            .map(|l| l.0)
            .unwrap_or_else(|| self.switches.get());
        // The switches can change at any time: tell clients not to cache the list.
        Ok(ListToolsResult::with_all_items(describe_all(switches)).with_ttl_ms(0))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        describe(name, self.switches.get())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(tool) = TOOLS.iter().copied().find(|t| *t == request.name) else {
            return Err(ErrorData::invalid_params(
                format!("no tool named {:?}", request.name),
                None,
            ));
        };
        let key = idempotency_key(&request, &context);
        let mut arguments = Value::Object(request.arguments.unwrap_or_default());
        shared_types::json::normalize_integers(&mut arguments);
        let switches = self.switches.get();
        if tool == PAYMENT_STATUS {
            return Ok(self.status(arguments, switches.status).await?.into());
        }
        if tool == CHARGE_PAYMENT && switches.charge == ChargeMode::LostBefore {
            std::future::pending::<()>().await;
        }
        let answer = self.answer(tool, key, arguments).await.map_err(|e| {
            tracing::error!(tool, error = %e, "the ledger failed");
            // Nothing committed: the client may retry with the same key.
            ErrorData::internal_error(format!("internal error, nothing was applied: {e}"), None)
        })?;
        let result = match answer {
            Answer::Done { result, replayed } => {
                let mut answered = CallToolResult::structured(result.clone());
                answered.content = vec![ContentBlock::text(summary(tool, &result, replayed))];
                answered
            }
            Answer::Error(why) => CallToolResult::error(vec![ContentBlock::text(why)]),
        };
        if tool == CHARGE_PAYMENT && switches.charge == ChargeMode::LostAfter {
            std::future::pending::<()>().await;
        }
        Ok(result.into())
    }
}
