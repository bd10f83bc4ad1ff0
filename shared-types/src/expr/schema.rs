//! Whether a JSON pointer follows what a JSON Schema declares: the static half of binding
//! `$steps.<id>.response.body#/ptr` (and a compensation's `$response.body#/ptr`) to the
//! producing skill's `outputSchema`, so that a misspelt member is refused before the
//! first effect rather than found unresolved after the pivot.
//!
//! The walk is stricter than JSON Schema validation in one place, on purpose: where a
//! schema lists `properties` and says nothing of `additionalProperties`, the list is what
//! the skill declares it returns, and a member outside it is refused. A pointer may leave
//! the declared shape only where the schema says so: `additionalProperties` `true` or a
//! schema, `patternProperties` (not matched here: any member passes, unchecked below),
//! `true`, an array without `items`, or a `$ref` that is not local; or where nothing at
//! that place declares any member (`{}`, an object schema that lists none). Past such a
//! point the rest of the pointer is unchecked, as it is for a skill without an
//! `outputSchema`.
//!
//! `allOf`, `anyOf`, `oneOf`, `then` and `else` are read as alternatives: a token passes
//! when any branch declares it, and a branch that declares no member (`{"required": …}`,
//! `{"type": "object"}`) adds none. `$ref` is followed within the schema (`#`, `#/…`).
//! Array tokens are indices; `-` (the element after the last) can never be read.

use std::collections::BTreeSet;
use std::fmt;

use serde_json::Value;

use super::JsonPointer;
use super::pointer::array_index;

/// Keywords that say what shape an instance has; a schema with none of them declares no
/// member (it may still be a wrapper around branches, which are read on their own).
const STRUCTURAL: [&str; 7] = [
    "type",
    "properties",
    "patternProperties",
    "additionalProperties",
    "items",
    "prefixItems",
    "additionalItems",
];

/// Keywords whose subschemas are read as alternatives.
const BRANCHES: [&str; 5] = ["allOf", "anyOf", "oneOf", "then", "else"];

/// Subschemas considered for one token, at most: a schema built to blow up the walk
/// leaves the rest of the pointer unchecked rather than taking unbounded time.
const MAX_NODES: usize = 1024;

/// Where a pointer leaves what the schema declares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    /// The longest prefix of the pointer the schema declares.
    pub at: JsonPointer,
    /// The first token past it, unescaped.
    pub token: String,
    /// The member names the schema declares at `at` (sorted; empty if `at` is no object).
    pub declared: Vec<String>,
    /// What the schema declares at `at` instead of an object, when it declares no member
    /// there: "a string", "an array", …
    pub instead: Vec<&'static str>,
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let place = if self.at.tokens().is_empty() {
            "at the top level".to_owned()
        } else {
            format!("under '{}'", self.at)
        };
        let token = &self.token;
        if !self.declared.is_empty() || self.instead.is_empty() {
            let declared: Vec<String> = self.declared.iter().map(|d| format!("{d:?}")).collect();
            let declared = if declared.is_empty() {
                "none".to_owned()
            } else {
                declared.join(", ")
            };
            return write!(
                f,
                "there is no member {token:?} {place} (members declared there: {declared})"
            );
        }
        if self.instead.contains(&"an array") {
            if token == "-" {
                return write!(
                    f,
                    "'-' {place} names the element after the last of an array, which holds no value"
                );
            }
            if array_index(token).is_some() {
                return write!(f, "the array {place} declares no element {token}");
            }
            return write!(
                f,
                "{place} is an array, and {token:?} is not an index (0, 1, …)"
            );
        }
        write!(
            f,
            "{place} is {}, which has no member {token:?}",
            self.instead.join(" or ")
        )
    }
}

/// Checks that `pointer` stays within what `schema` declares (see the module's rules).
pub fn check_pointer(schema: &Value, pointer: &JsonPointer) -> Result<(), Divergence> {
    let mut current: Vec<&Value> = vec![schema];
    for (depth, token) in pointer.tokens().iter().enumerate() {
        let Some(nodes) = expand(schema, &current) else {
            return Ok(());
        };
        let mut next = Vec::new();
        let mut declared = BTreeSet::new();
        let mut instead = BTreeSet::new();
        let mut spoke = false;
        for node in nodes {
            match step(node, token) {
                Step::Unchecked => return Ok(()),
                Step::Silent => continue,
                Step::Into(schemas) => next.extend(schemas),
                Step::NoMember(names) => declared.extend(names),
                Step::Not(kind) => {
                    instead.insert(kind);
                }
            }
            spoke = true;
        }
        if !spoke {
            // Nothing here declares any member: as unchecked as no schema.
            return Ok(());
        }
        if next.is_empty() {
            return Err(Divergence {
                at: JsonPointer::from_tokens(pointer.tokens()[..depth].iter().cloned()),
                token: token.clone(),
                declared: declared.into_iter().map(str::to_owned).collect(),
                instead: instead.into_iter().collect(),
            });
        }
        current = next;
    }
    Ok(())
}

/// What one (expanded) schema says about one token.
enum Step<'s> {
    /// Nothing to check against from here on: the schema admits any member here.
    Unchecked,
    /// Says nothing about members (`{}`, `{"required": …}`, an object that lists none):
    /// adds nothing where other schemas at the same place declare members, and leaves
    /// the rest unchecked where none does.
    Silent,
    /// The token is declared; the value under it has these schemas.
    Into(Vec<&'s Value>),
    /// An object that does not declare the token; these are the members it does declare.
    NoMember(Vec<&'s str>),
    /// Not an object or array: what it is.
    Not(&'static str),
}

/// The schemas that apply at one place: each schema, the targets of its local `$ref`s
/// and its branches, recursively, each once. `None`: something there admits anything
/// (`true`), cannot be followed (a `$ref` outside the schema), or there are too many.
fn expand<'s>(root: &'s Value, schemas: &[&'s Value]) -> Option<Vec<&'s Value>> {
    let mut out: Vec<&'s Value> = Vec::new();
    let mut pending: Vec<&'s Value> = schemas.to_vec();
    while let Some(schema) = pending.pop() {
        if out.iter().any(|seen| std::ptr::eq(*seen, schema)) {
            continue;
        }
        if out.len() >= MAX_NODES {
            return None;
        }
        out.push(schema);
        let object = match schema {
            Value::Bool(true) => return None,
            Value::Object(object) => object,
            // `false` (nothing is valid) and non-schemas declare that no member exists.
            _ => continue,
        };
        if let Some(reference) = object.get("$ref") {
            pending.push(resolve_local(root, reference)?);
        }
        for keyword in BRANCHES {
            match object.get(keyword) {
                Some(Value::Array(branches)) => pending.extend(branches),
                Some(branch @ (Value::Object(_) | Value::Bool(_))) => pending.push(branch),
                _ => {}
            }
        }
    }
    Some(out)
}

/// The target of a `$ref` within the same schema (`#`, `#/$defs/x`), if it is one.
fn resolve_local<'s>(root: &'s Value, reference: &Value) -> Option<&'s Value> {
    let fragment = reference.as_str()?.strip_prefix('#')?;
    JsonPointer::parse(fragment).ok()?.resolve(root)
}

fn step<'s>(schema: &'s Value, token: &str) -> Step<'s> {
    let Value::Object(object) = schema else {
        return Step::NoMember(Vec::new());
    };
    if !STRUCTURAL.iter().any(|k| object.contains_key(*k)) {
        return Step::Silent;
    }
    let types: Option<Vec<&str>> = match object.get("type") {
        Some(Value::String(t)) => Some(vec![t.as_str()]),
        Some(Value::Array(ts)) => Some(ts.iter().filter_map(Value::as_str).collect()),
        _ => None,
    };
    let has = |keys: &[&str]| keys.iter().any(|k| object.contains_key(*k));
    let object_keywords = has(&["properties", "patternProperties", "additionalProperties"]);
    let array_keywords = has(&["items", "prefixItems", "additionalItems"]);
    // Without `type`, the keywords say which it is.
    let (is_object, is_array) = match &types {
        Some(types) => (types.contains(&"object"), types.contains(&"array")),
        None => (object_keywords, array_keywords),
    };
    let mut into = Vec::new();
    let mut declared = Vec::new();
    let mut object_silent = false;
    if is_object {
        match object_member(object, token) {
            Member::Unchecked => return Step::Unchecked,
            Member::Silent => object_silent = true,
            Member::Into(schema) => into.push(schema),
            Member::Undeclared(names) => declared = names,
        }
    }
    if is_array {
        match array_item(object, token) {
            Member::Unchecked => return Step::Unchecked,
            Member::Silent => {}
            Member::Into(schema) => into.push(schema),
            Member::Undeclared(_) => {}
        }
    }
    if !into.is_empty() {
        return Step::Into(into);
    }
    if object_silent {
        return Step::Silent;
    }
    if is_object {
        return Step::NoMember(declared);
    }
    if is_array {
        return Step::Not("an array");
    }
    let kind = match types.as_deref() {
        Some([t, ..]) => match *t {
            "string" => "a string",
            "integer" => "an integer",
            "number" => "a number",
            "boolean" => "a boolean",
            "null" => "null",
            _ => "not an object",
        },
        _ => "not an object",
    };
    Step::Not(kind)
}

enum Member<'s> {
    Unchecked,
    Silent,
    Into(&'s Value),
    Undeclared(Vec<&'s str>),
}

fn object_member<'s>(object: &'s serde_json::Map<String, Value>, token: &str) -> Member<'s> {
    let properties = object.get("properties").and_then(Value::as_object);
    if let Some(schema) = properties.and_then(|p| p.get(token)) {
        return Member::Into(schema);
    }
    if object.contains_key("patternProperties") {
        return Member::Unchecked;
    }
    match object.get("additionalProperties") {
        Some(Value::Bool(false)) => {}
        Some(Value::Object(extra)) if !extra.is_empty() => {
            return Member::Into(&object["additionalProperties"]);
        }
        Some(_) => return Member::Unchecked,
        // Declared members are the list; an object that lists none declares nothing.
        None if properties.is_none_or(|p| p.is_empty()) => return Member::Silent,
        None => {}
    }
    Member::Undeclared(properties.map_or_else(Vec::new, |p| p.keys().map(String::as_str).collect()))
}

fn array_item<'s>(object: &'s serde_json::Map<String, Value>, token: &str) -> Member<'s> {
    let Some(index) = array_index(token) else {
        return Member::Undeclared(Vec::new());
    };
    // 2020-12 `prefixItems` + `items`; draft 7 `items: [...]` + `additionalItems`.
    let (tuple, rest) = match (object.get("prefixItems"), object.get("items")) {
        (Some(Value::Array(tuple)), rest) => (Some(tuple), rest),
        (None, Some(Value::Array(tuple))) => (Some(tuple), object.get("additionalItems")),
        (_, rest) => (None, rest),
    };
    if let Some(schema) = tuple.and_then(|t| t.get(index)) {
        return Member::Into(schema);
    }
    match rest {
        Some(Value::Bool(false)) => Member::Undeclared(Vec::new()),
        Some(schema @ Value::Object(_)) => Member::Into(schema),
        _ => Member::Unchecked,
    }
}
