//! Runtime expressions (OpenAPI 3 grammar, plus Sagaplane's `$steps`, `$saga` and `$step`
//! sources): parsing, which is static, and evaluation, which never invents a value.
//!
//! A JSON string that starts with `$` is one expression and evaluates to a value of any
//! JSON type. A string that contains `{$…}` is a template: each embedded expression is
//! rendered into the string. Any other value is a literal. In a template an expression
//! ends at the first `}`, so a pointer used inside `{…}` cannot itself contain `}`.

mod pointer;
mod schema;

use std::fmt;

use serde_json::Value;

pub use pointer::{JsonPointer, escape_token};
pub use schema::{Divergence, check_pointer};

use crate::error::{Error, Result};

/// Where an expression reads its value from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Source {
    /// `$request.body#/ptr`: the step's own arguments (MCP: `arguments`).
    RequestBody(JsonPointer),
    /// `$response.body#/ptr`: the step's own result (MCP: `structuredContent`).
    ResponseBody(JsonPointer),
    /// `$steps.<id>.response.body#/ptr`: an earlier step's result.
    StepResponseBody { step: String, pointer: JsonPointer },
    /// `$saga.id`
    SagaId,
    /// `$step.id`
    StepId,
    /// `$step.idempotencyKey`
    StepIdempotencyKey,
}

/// A parsed runtime expression.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Expr {
    pub source: Source,
}

impl Expr {
    /// Parses one expression; the text must start with `$`.
    pub fn parse(text: &str) -> Result<Self> {
        let syntax =
            |reason: &str| Error::Expr(format!("{text:?} is not a runtime expression: {reason}"));
        let body_pointer = |rest: &str| -> Result<JsonPointer> {
            let Some(ptr) = rest.strip_prefix('#') else {
                return Err(syntax(
                    "a body reference needs '#' and a JSON pointer, e.g. '#/id'",
                ));
            };
            JsonPointer::parse(ptr)
                .map_err(|e| Error::Expr(format!("bad JSON pointer in {text:?}: {e}")))
        };
        let source = match text {
            "$saga.id" => Source::SagaId,
            "$step.id" => Source::StepId,
            "$step.idempotencyKey" => Source::StepIdempotencyKey,
            _ => {
                if let Some(rest) = text.strip_prefix("$request.body") {
                    Source::RequestBody(body_pointer(rest)?)
                } else if let Some(rest) = text.strip_prefix("$response.body") {
                    Source::ResponseBody(body_pointer(rest)?)
                } else if let Some(rest) = text.strip_prefix("$steps.") {
                    let Some((step, rest)) = rest.split_once('.') else {
                        return Err(syntax("expected '$steps.<id>.response.body#/ptr'"));
                    };
                    if !is_valid_id(step) {
                        return Err(syntax("a step id is 1-64 of A-Z a-z 0-9 '_' '-'"));
                    }
                    let Some(rest) = rest.strip_prefix("response.body") else {
                        return Err(syntax("expected '$steps.<id>.response.body#/ptr'"));
                    };
                    Source::StepResponseBody {
                        step: step.to_owned(),
                        pointer: body_pointer(rest)?,
                    }
                } else {
                    return Err(syntax(
                        "known sources are $request.body, $response.body, $steps.<id>.response.body, \
                         $saga.id, $step.id and $step.idempotencyKey",
                    ));
                }
            }
        };
        Ok(Self { source })
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.source {
            Source::RequestBody(p) => write!(f, "$request.body#{p}"),
            Source::ResponseBody(p) => write!(f, "$response.body#{p}"),
            Source::StepResponseBody { step, pointer } => {
                write!(f, "$steps.{step}.response.body#{pointer}")
            }
            Source::SagaId => f.write_str("$saga.id"),
            Source::StepId => f.write_str("$step.id"),
            Source::StepIdempotencyKey => f.write_str("$step.idempotencyKey"),
        }
    }
}

/// Identifiers for steps (and saga ids' step-id part): short, and free of the `:` that
/// separates the parts of an idempotency key.
pub fn is_valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// One piece of a template string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    Literal(String),
    Expr(Expr),
}

/// What a JSON value means as a binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Binding {
    /// A whole-string expression: evaluates to a JSON value of any type.
    Expr(Expr),
    /// A string with embedded `{$…}` expressions.
    Template(Vec<Segment>),
    /// Anything else is taken literally.
    Literal,
}

/// Classifies one string value.
pub fn parse_string(text: &str) -> Result<Binding> {
    if text.starts_with('$') {
        return Expr::parse(text).map(Binding::Expr);
    }
    if !text.contains("{$") {
        return Ok(Binding::Literal);
    }
    let mut segments = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("{$") {
        if start > 0 {
            segments.push(Segment::Literal(rest[..start].to_owned()));
        }
        let after = &rest[start + 1..];
        let Some(end) = after.find('}') else {
            return Err(Error::Expr(format!("unclosed '{{' in template {text:?}")));
        };
        segments.push(Segment::Expr(Expr::parse(&after[..end])?));
        rest = &after[end + 1..];
    }
    if !rest.is_empty() {
        segments.push(Segment::Literal(rest.to_owned()));
    }
    Ok(Binding::Template(segments))
}

/// Visits every expression in a JSON value, with the pointer to the string holding it.
/// Stops at the first parse error, which it returns with that location.
pub fn for_each_expr(
    value: &Value,
    visit: &mut dyn FnMut(&JsonPointer, &Expr),
) -> Result<(), (JsonPointer, Error)> {
    fn walk(
        value: &Value,
        path: &mut Vec<String>,
        visit: &mut dyn FnMut(&JsonPointer, &Expr),
    ) -> Result<(), (JsonPointer, Error)> {
        match value {
            Value::String(s) => {
                let here = || JsonPointer::from_tokens(path.iter().cloned());
                match parse_string(s).map_err(|e| (here(), e))? {
                    Binding::Expr(e) => visit(&here(), &e),
                    Binding::Template(segments) => {
                        for segment in &segments {
                            if let Segment::Expr(e) = segment {
                                visit(&here(), e);
                            }
                        }
                    }
                    Binding::Literal => {}
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    path.push(i.to_string());
                    walk(item, path, visit)?;
                    path.pop();
                }
            }
            Value::Object(map) => {
                for (key, item) in map {
                    path.push(key.clone());
                    walk(item, path, visit)?;
                    path.pop();
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
        Ok(())
    }
    walk(value, &mut Vec::new(), visit)
}

/// Looks up an earlier step's result by step id.
pub type StepResponses<'a> = dyn Fn(&str) -> Option<&'a Value> + 'a;

/// What an expression is evaluated against. Each field is `None` when that source is
/// not available in the context (for example no response after an unknown outcome).
#[derive(Clone, Copy, Default)]
pub struct EvalContext<'a> {
    pub saga_id: Option<&'a str>,
    pub step_id: Option<&'a str>,
    pub idempotency_key: Option<&'a str>,
    pub request_body: Option<&'a Value>,
    pub response_body: Option<&'a Value>,
    /// Results of earlier steps, looked up by step id.
    pub step_responses: Option<&'a StepResponses<'a>>,
}

impl fmt::Debug for EvalContext<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EvalContext")
            .field("saga_id", &self.saga_id)
            .field("step_id", &self.step_id)
            .field("idempotency_key", &self.idempotency_key)
            .field("request_body", &self.request_body)
            .field("response_body", &self.response_body)
            .finish_non_exhaustive()
    }
}

/// An expression that could not be resolved: the binding is unavailable, never defaulted.
/// Shown quoted and escaped: it is the plan's text, and reaches task statuses and logs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{expr:?} is unresolved: {reason}")]
pub struct Unresolved {
    pub expr: String,
    pub reason: String,
}

impl Expr {
    /// Evaluates against `ctx`. The value keeps its JSON type.
    pub fn evaluate(&self, ctx: &EvalContext<'_>) -> Result<Value, Unresolved> {
        let unresolved = |reason: &str| Unresolved {
            expr: self.to_string(),
            reason: reason.to_owned(),
        };
        let text = |v: Option<&str>, what: &str| {
            v.map(|s| Value::String(s.to_owned()))
                .ok_or_else(|| unresolved(&format!("no {what} in this context")))
        };
        let lookup = |doc: Option<&Value>, pointer: &JsonPointer, what: &str| match doc {
            None => Err(unresolved(&format!("no {what} in this context"))),
            Some(doc) => pointer.resolve(doc).cloned().ok_or_else(|| {
                unresolved(&format!("{what} has nothing at {:?}", pointer.to_string()))
            }),
        };
        match &self.source {
            Source::SagaId => text(ctx.saga_id, "saga id"),
            Source::StepId => text(ctx.step_id, "step id"),
            Source::StepIdempotencyKey => text(ctx.idempotency_key, "idempotency key"),
            Source::RequestBody(p) => lookup(ctx.request_body, p, "request body"),
            Source::ResponseBody(p) => lookup(ctx.response_body, p, "response body"),
            Source::StepResponseBody { step, pointer } => {
                let response = ctx.step_responses.and_then(|f| f(step));
                lookup(response, pointer, &format!("response of step {step}"))
            }
        }
    }
}

/// Evaluates every binding in `template` (objects and arrays recursively). The first
/// unresolved expression makes the whole binding unavailable.
pub fn bind(template: &Value, ctx: &EvalContext<'_>) -> Result<Value, Unresolved> {
    match template {
        Value::String(s) => {
            let binding = parse_string(s).map_err(|e| Unresolved {
                expr: s.clone(),
                reason: e.to_string(),
            })?;
            match binding {
                Binding::Literal => Ok(template.clone()),
                Binding::Expr(e) => e.evaluate(ctx),
                Binding::Template(segments) => {
                    let mut out = String::new();
                    for segment in segments {
                        match segment {
                            Segment::Literal(l) => out.push_str(&l),
                            Segment::Expr(e) => match e.evaluate(ctx)? {
                                Value::String(s) => out.push_str(&s),
                                other => out.push_str(&other.to_string()),
                            },
                        }
                    }
                    Ok(Value::String(out))
                }
            }
        }
        Value::Array(items) => items
            .iter()
            .map(|item| bind(item, ctx))
            .collect::<Result<_, _>>()
            .map(Value::Array),
        Value::Object(map) => {
            let mut out = serde_json::Map::with_capacity(map.len());
            for (key, item) in map {
                out.insert(key.clone(), bind(item, ctx)?);
            }
            Ok(Value::Object(out))
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => Ok(template.clone()),
    }
}

#[cfg(test)]
mod tests;
