//! (b) The sweep: every single mutation of every typed node of each kind's distinct
//! seeds, class by class, and the schema's verdict equal to the parser's on each.

use chrono::DateTime;
use serde_json::{Value, json};

use crate::kind::Kind;
use crate::mutations::{NOT_RFC3339, STRINGS, node, node_mut, typed_nodes};
use crate::registry::{errors, validator};

/// Date-times at and past the bounds of each field, put in the place of the date-times
/// the sweep finds, and every form chrono's serde parser reads beyond RFC 3339.
fn date_edges() -> Vec<&'static str> {
    let mut edges = vec![
        "2026-11-29T10:00:00Z",
        "2026-11-29t10:00:00.5z",
        "2026-06-30T23:59:60+00:00",
        "2026-01-01T10:00:60.25-05:00",
        "2026-01-01T10:00:61Z",
        "2026-02-29T10:00:00Z",
        "2024-02-29T10:00:00Z",
        "2100-02-29T10:00:00Z",
        "2000-02-29T10:00:00Z",
        "2026-04-31T10:00:00Z",
        "2026-13-01T10:00:00Z",
        "2026-11-29T24:00:00Z",
        "2026-11-29T10:00:00+24:00",
        "2026-11-29T10:00:00",
    ];
    edges.extend(NOT_RFC3339);
    edges
}

/// The numbers a number is set to: negative, fractional, zero, one, and the bounds of
/// `u32`, of 2^53 − 1 (money) and of `u64`, and one past each; for a plan, also an
/// integral double (see `mutations::mutate`).
fn number_edges(old: &Value, kind: Kind) -> Vec<Value> {
    let old = old.as_u64().unwrap_or(7) % 1_000_000;
    let max_safe = (1u64 << 53) - 1;
    let mut edges = vec![
        json!(-1),
        json!(-(old as i64) - 1),
        json!(old as f64 + 0.5),
        json!(0),
        json!(1),
        json!(u32::MAX),
        json!(u64::from(u32::MAX) + 1),
        json!(max_safe),
        json!(max_safe + 1),
        json!(u64::MAX),
        // 2^64: serde_json reads it as a double.
        serde_json::from_str("18446744073709551616").unwrap(),
    ];
    if kind == Kind::Plan {
        edges.push(json!(old as f64));
    }
    edges
}

/// Every single mutation of `doc` at every typed node, class by class: as a value of each
/// other type, wrapped in an array; for an object, without each member, with an unknown
/// one, as the first k of its values for every k, as its values and a null; for an
/// array, emptied (as a value of another type), with its first element again, with a
/// null; for a string, each of `STRINGS`, each date-time edge when it is a date-time,
/// as a one-member object; for a number, each of `number_edges`.
fn single_mutations(doc: &Value, kind: Kind) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for path in typed_nodes(doc) {
        let here = node(doc, &path);
        let mut put = |what: String, value: Value| {
            let mut mutant = doc.clone();
            *node_mut(&mut mutant, &path) = value;
            out.push((format!("{path:?} {what}"), mutant));
        };
        for other in [
            Value::Null,
            json!(true),
            json!(0),
            json!(1.5),
            json!("x"),
            json!([]),
            json!({}),
        ] {
            if std::mem::discriminant(&other) != std::mem::discriminant(here) {
                put(format!("as {other}"), other);
            }
        }
        put("wrapped in an array".into(), json!([here]));
        match here {
            Value::Object(members) => {
                for key in members.keys() {
                    let mut fewer = members.clone();
                    fewer.shift_remove(key);
                    put(format!("without {key:?}"), Value::Object(fewer));
                }
                let mut more = members.clone();
                more.insert("extra".into(), Value::Null);
                put("with an unknown member".into(), Value::Object(more));
                let values: Vec<Value> = members.values().cloned().collect();
                for k in 0..=values.len() {
                    put(
                        format!("as its first {k} values"),
                        Value::Array(values[..k].to_vec()),
                    );
                }
                let mut longer = values;
                longer.push(Value::Null);
                put("as its values and a null".into(), Value::Array(longer));
            }
            Value::Array(items) => {
                if let Some(first) = items.first() {
                    let mut again = items.clone();
                    again.push(first.clone());
                    put("with its first element again".into(), Value::Array(again));
                }
                let mut with_null = items.clone();
                with_null.push(Value::Null);
                put("with a null".into(), Value::Array(with_null));
            }
            Value::String(text) => {
                for other in STRINGS {
                    put(format!("as {other:?}"), json!(other));
                }
                if DateTime::parse_from_rfc3339(text).is_ok() {
                    for edge in date_edges() {
                        put(format!("as {edge:?}"), json!(edge));
                    }
                }
                put("as {it: null}".into(), json!({ text.as_str(): null }));
                put("as {it: 1}".into(), json!({ text.as_str(): 1 }));
            }
            Value::Number(_) => {
                for edge in number_edges(here, kind) {
                    put(format!("as {edge}"), edge);
                }
            }
            Value::Null | Value::Bool(_) => {}
        }
    }
    out
}

/// The sweep: every single mutation of each distinct example (the plans of
/// `examples/plans/invalid/` and the signed mandates are near copies of the first, and
/// left to the random mutations) and of the document with every member.
fn every_single_mutation_agrees(kind: Kind) {
    let validator = validator(kind.schema());
    let mut seeds = kind.seeds_with_every_member();
    if matches!(kind, Kind::Plan | Kind::Mandate) {
        let full = seeds.pop().unwrap();
        seeds.truncate(1);
        seeds.push(full);
    }
    let mut checked = 0;
    let mut disagreements = Vec::new();
    for seed in &seeds {
        for (what, doc) in single_mutations(seed, kind) {
            checked += 1;
            let parsed = kind.parse(&doc);
            if validator.is_valid(&doc) != parsed.is_ok() {
                disagreements.push(format!(
                    "{what}: the parser says {parsed:?}, the schema {:?}",
                    errors(kind.schema(), &doc)
                ));
            }
        }
    }
    assert!(
        disagreements.is_empty(),
        "{kind:?}: {} of {checked} single mutations disagree:\n{}",
        disagreements.len(),
        disagreements[..disagreements.len().min(20)].join("\n")
    );
    eprintln!("{kind:?}: {checked} single mutations agree");
}

#[test]
fn skill_declarations_schema_agrees_on_every_single_mutation() {
    every_single_mutation_agrees(Kind::SkillDeclarations);
}

#[test]
fn plan_schema_agrees_on_every_single_mutation() {
    every_single_mutation_agrees(Kind::Plan);
}

#[test]
fn mandate_schema_agrees_on_every_single_mutation() {
    every_single_mutation_agrees(Kind::Mandate);
}

#[test]
fn revocation_schema_agrees_on_every_single_mutation() {
    every_single_mutation_agrees(Kind::Revocation);
}

#[test]
fn answer_schema_agrees_on_every_single_mutation() {
    every_single_mutation_agrees(Kind::Answer);
}
