//! (b) Parsers and schemas agree on mutated documents: the mutation classes, and one to
//! three random mutations at a time (proptest) of each kind's seeds. The exhaustive sweep
//! of single mutations is in `sweep`.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Map, Value, json};

use crate::kind::Kind;
use crate::registry::{CASES, errors, validator};

#[derive(Debug, Clone)]
pub(crate) enum Step {
    Key(String),
    Index(usize),
}

/// Members whose content the types keep as JSON (`serde_json::Value`): any value, any
/// object (`args`, `argsWhenUnknown`), a number or a string (`amountMinor`, `currency` of
/// a spend; a money's `currency` is a string leaf anyway). What lies inside them is not
/// typed, so mutating it tells nothing: they are mutated themselves, not below.
const UNTYPED: [&str; 8] = [
    "inputSchema",
    "outputSchema",
    "args",
    "argsWhenUnknown",
    "rejectedAlternatives",
    "header",
    "amountMinor",
    "currency",
];

/// Every node of `value` that is not inside an untyped member, by path (the root first).
pub(crate) fn typed_nodes(value: &Value) -> Vec<Vec<Step>> {
    fn walk(value: &Value, at: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
        out.push(at.clone());
        match value {
            Value::Object(members) => {
                for (key, member) in members {
                    at.push(Step::Key(key.clone()));
                    if UNTYPED.contains(&key.as_str()) {
                        out.push(at.clone());
                    } else {
                        walk(member, at, out);
                    }
                    at.pop();
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    at.push(Step::Index(i));
                    walk(item, at, out);
                    at.pop();
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(value, &mut Vec::new(), &mut out);
    out
}

pub(crate) fn node_mut<'a>(mut value: &'a mut Value, path: &[Step]) -> &'a mut Value {
    for step in path {
        value = match step {
            Step::Key(key) => &mut value[key.as_str()],
            Step::Index(i) => &mut value[*i],
        };
    }
    value
}

pub(crate) fn node<'a>(mut value: &'a Value, path: &[Step]) -> &'a Value {
    for step in path {
        value = match step {
            Step::Key(key) => &value[key.as_str()],
            Step::Index(i) => &value[*i],
        };
    }
    value
}

/// Values that replace a node, are added as a member or pushed into an array: one of
/// each JSON type, and a few that some type here reads. No float in it is integral.
fn pool_value(n: u32) -> Value {
    let values = [
        Value::Null,
        json!(true),
        json!(false),
        json!(0),
        json!(1),
        json!(-1),
        json!(1.5),
        json!(-0.5),
        json!(""),
        json!("x"),
        json!("compensable"),
        json!([]),
        json!([1]),
        json!(["x"]),
        json!([null]),
        json!({}),
        json!({"a": 1}),
        json!({"compensable": null}),
        json!(u64::MAX),
    ];
    values[n as usize % values.len()].clone()
}

/// Member names an unknown member takes: misspellings of known ones, names that are
/// members of other types, odd ones.
const KEYS: [&str; 16] = [
    "extra",
    "",
    "saga_id",
    "SagaId",
    "pivotindex",
    "undoTtlSecond",
    "class",
    "skills",
    "reason",
    "header",
    "pivotIndex",
    "perSaga",
    "signatures",
    "approval",
    "metadata",
    "$schema",
];

/// Strings that replace a string: every enum value of these types and near misses,
/// currencies and near misses, ids, expressions, text that looks like another type.
pub(crate) const STRINGS: [&str; 34] = [
    "",
    "x",
    "compensable",
    "retriable",
    "irreversible",
    "Compensable",
    "COMPENSABLE",
    "reversible",
    "approve",
    "retry",
    "resolved-manually",
    "compensate",
    "resolved_manually",
    "Approve",
    "EUR",
    "USD",
    "eur",
    "EURO",
    "EU",
    "E1R",
    "ÉUR",
    " EUR",
    "sg_demo_supplier_onboarding",
    "s0",
    "sg:s0:undo",
    "$response.body#/vendorId",
    "$request.body#/amountMinor",
    "ROLE_USER",
    "null",
    "1",
    "true",
    "{}",
    "[]",
    "2026",
];

/// A string shaped as RFC 3339 date-times are, with each field drawn from values at and
/// around its bounds (impossible days, leap days and seconds, offsets past ±23:59, a
/// fraction without digits), and with what `DateTime::parse_from_rfc3339` reads beyond
/// RFC 3339 (a space for `T`, U+2212 for the offset's minus) and an offset without its
/// colon, which it refuses. The contract's parsers refuse all three.
fn date_string(n: u64) -> String {
    let mut n = n;
    let mut pick = |options: &[&'static str]| {
        let choice = options[(n % options.len() as u64) as usize];
        n /= options.len() as u64;
        choice
    };
    let year = pick(&[
        "2026", "2024", "2100", "2000", "1900", "0000", "9999", "0400",
    ]);
    let month = pick(&["11", "02", "01", "04", "12", "00", "13", "09"]);
    let day = pick(&["29", "28", "30", "31", "01", "00", "32"]);
    let separator = pick(&["T", "t", " "]);
    let hour = pick(&["10", "23", "00", "24"]);
    let minute = pick(&["00", "59", "60"]);
    let second = pick(&["00", "59", "60", "61"]);
    let fraction = pick(&["", ".5", ".123456789", ".1234567890123", "."]);
    let offset = pick(&[
        "Z",
        "z",
        "+00:00",
        "-00:00",
        "+23:59",
        "-23:59",
        "+24:00",
        "+01:60",
        "\u{2212}01:00",
        "+0100",
        "",
    ]);
    format!("{year}-{month}-{day}{separator}{hour}:{minute}:{second}{fraction}{offset}")
}

/// Date-times chrono's own serde parser reads and RFC 3339 does not allow. The contract's
/// parsers refuse them all, the executor's reading of an approval's `expiresAt` too
/// (`parse_from_rfc3339` alone would take the first two).
pub(crate) const NOT_RFC3339: [&str; 13] = [
    "2026-11-29 10:00:00Z",
    "2026-11-29T10:00:00\u{2212}01:00",
    "2026-1-29T10:00:00Z",
    "2026-11-29T1:0:0Z",
    "26-11-29T10:00:00Z",
    "+2026-11-29T10:00:00Z",
    "-0001-11-29T10:00:00Z",
    "2026-11-29T10:00:00UTC",
    "2026-11-29T10:00:00 utc",
    "2026-11-29T10:00:00+0100",
    " 2026-11-29T10:00:00Z",
    "2026-11-29T10:00:00Z ",
    "2026 - 11 - 29T10 : 00 : 00 Z",
];

/// Applies one random mutation to `doc`; says what it did.
///
/// The classes: remove a member (required or not); add an unknown member, or rename one
/// to its snake_case or capitalised twin; replace a node by a value of another JSON type;
/// replace a string (by an enum value or a near miss, a currency, an id, a date-time in
/// or out of RFC 3339); set
/// a number negative, fractional, zero, to a bound or past it; empty an array or object;
/// write an object as the array of its values (serde's sequence form, which every parser
/// here refuses), with a member more or less; write a string as a one-member object
/// (serde's enum form, likewise refused); push an element;
/// replace a node by a copy of another; wrap a node in an array. At any depth outside the
/// untyped members (`UNTYPED`).
///
/// Excluded, because JSON Schema cannot tell it apart from what the schema accepts: an
/// integral double (`25000.0`, `1e3`) in an integer member. JSON Schema's `integer` is a
/// value, not a spelling (draft 2020-12 §6.1.1), while serde's `u64` and `u32` refuse a
/// double. For plans the parser normalizes them first, as the executor does, so they are
/// generated (up to 2^53 − 1, all that `json::normalize_integers` turns into integers);
/// for the other documents they are not (`integral_doubles_are_integers_to_the_schemas`
/// pins the difference).
fn mutate(doc: &mut Value, op: u8, target: u32, payload: u64, kind: Kind) -> String {
    let nodes = typed_nodes(doc);
    let select = |keep: &dyn Fn(&Value) -> bool| -> Option<Vec<Step>> {
        let candidates: Vec<&Vec<Step>> = nodes.iter().filter(|p| keep(node(doc, p))).collect();
        (!candidates.is_empty()).then(|| candidates[target as usize % candidates.len()].clone())
    };
    let small = (payload % 1_000) as u32;
    match op {
        // Remove a member.
        0 => {
            let Some(path) = select(&|v| v.as_object().is_some_and(|m| !m.is_empty())) else {
                return "no member to remove".into();
            };
            let members = node_mut(doc, &path).as_object_mut().unwrap();
            let key = members
                .keys()
                .nth(payload as usize % members.len())
                .unwrap()
                .clone();
            members.shift_remove(&key);
            format!("removed {key:?} at {path:?}")
        }
        // Add an unknown member, or rename a member to a twin.
        1 => {
            let Some(path) = select(&Value::is_object) else {
                return "no object".into();
            };
            let members = node_mut(doc, &path).as_object_mut().unwrap();
            if payload.is_multiple_of(3) && !members.is_empty() {
                let key = members
                    .keys()
                    .nth(small as usize % members.len())
                    .unwrap()
                    .clone();
                let twin = if payload.is_multiple_of(2) {
                    key.chars()
                        .flat_map(|c| {
                            if c.is_ascii_uppercase() {
                                vec!['_', c.to_ascii_lowercase()]
                            } else {
                                vec![c]
                            }
                        })
                        .collect::<String>()
                } else {
                    let mut chars = key.chars();
                    chars
                        .next()
                        .map(|c| c.to_uppercase().chain(chars).collect())
                        .unwrap_or_default()
                };
                let value = members.shift_remove(&key).unwrap();
                members.insert(twin.clone(), value);
                format!("renamed {key:?} to {twin:?} at {path:?}")
            } else {
                let key = KEYS[payload as usize % KEYS.len()];
                members.insert(key.into(), pool_value(small));
                format!("added {key:?} at {path:?}")
            }
        }
        // Replace a node by a value of another type.
        2 => {
            let Some(path) = select(&|_| true) else {
                unreachable!("the root is a node")
            };
            let node = node_mut(doc, &path);
            let mut value = pool_value(small);
            let mut k = small;
            while std::mem::discriminant(&value) == std::mem::discriminant(node) {
                k += 1;
                value = pool_value(k);
            }
            *node = value.clone();
            format!("replaced {path:?} by {value}")
        }
        // Replace a string.
        3 => {
            let Some(path) = select(&Value::is_string) else {
                return "no string".into();
            };
            let text = if payload.is_multiple_of(6) {
                date_string(payload / 6)
            } else if payload % 6 == 3 {
                NOT_RFC3339[(payload / 6) as usize % NOT_RFC3339.len()].to_owned()
            } else {
                STRINGS[(payload / 3) as usize % STRINGS.len()].to_owned()
            };
            *node_mut(doc, &path) = json!(text);
            format!("set {path:?} to {text:?}")
        }
        // Change a number.
        4 => {
            let Some(path) = select(&Value::is_number) else {
                return "no number".into();
            };
            let node = node_mut(doc, &path);
            let old = node.as_u64().unwrap_or(7) % 1_000_000;
            let max_safe = (1u64 << 53) - 1;
            let value = match payload % 12 {
                0 => json!(-1),
                1 => json!(-(old as i64) - 1),
                2 => json!(old as f64 + 0.5),
                3 => json!(0),
                4 => json!(1),
                5 => json!(u32::MAX),
                6 => json!(u64::from(u32::MAX) + 1),
                7 => json!(max_safe),
                8 => json!(max_safe + 1),
                9 => json!(u64::MAX),
                // 2^64: serde_json reads it as a double.
                10 => serde_json::from_str("18446744073709551616").unwrap(),
                _ if kind == Kind::Plan => json!(old as f64),
                _ => json!(-0.5),
            };
            *node = value.clone();
            format!("set {path:?} to {value}")
        }
        // Empty an array or an object.
        5 => {
            let Some(path) = select(&|v| v.is_array() || v.is_object()) else {
                return "no array or object".into();
            };
            let node = node_mut(doc, &path);
            *node = if node.is_array() {
                json!([])
            } else {
                json!({})
            };
            format!("emptied {path:?}")
        }
        // An object as the array of its values.
        6 => {
            let Some(path) = select(&Value::is_object) else {
                return "no object".into();
            };
            let node = node_mut(doc, &path);
            let mut values: Vec<Value> = node.as_object().unwrap().values().cloned().collect();
            match payload % 4 {
                0 => {}
                1 => values.insert(small as usize % (values.len() + 1), Value::Null),
                2 => {
                    values.pop();
                }
                _ => values.push(Value::Null),
            }
            *node = Value::Array(values);
            format!("wrote {path:?} as its values: {node}")
        }
        // A string as a one-member object.
        7 => {
            let Some(path) = select(&Value::is_string) else {
                return "no string".into();
            };
            let node = node_mut(doc, &path);
            let text = node.as_str().unwrap().to_owned();
            let mut members = Map::new();
            members.insert(
                text,
                if payload % 3 == 1 {
                    json!(1)
                } else {
                    Value::Null
                },
            );
            if payload % 3 == 2 {
                members.insert("x".into(), Value::Null);
            }
            *node = Value::Object(members);
            format!("wrote {path:?} as {node}")
        }
        // Push an element.
        8 => {
            let Some(path) = select(&Value::is_array) else {
                return "no array".into();
            };
            let items = node_mut(doc, &path).as_array_mut().unwrap();
            let item = if payload.is_multiple_of(2) && !items.is_empty() {
                items[small as usize % items.len()].clone()
            } else {
                pool_value(small)
            };
            items.push(item);
            format!("pushed into {path:?}")
        }
        // Replace a node by a copy of another.
        9 => {
            let Some(path) = select(&|_| true) else {
                unreachable!("the root is a node")
            };
            let from = nodes[payload as usize % nodes.len()].clone();
            let copy = node(doc, &from).clone();
            *node_mut(doc, &path) = copy;
            format!("copied {from:?} over {path:?}")
        }
        // Wrap a node in an array.
        _ => {
            let Some(path) = select(&|_| true) else {
                unreachable!("the root is a node")
            };
            let node = node_mut(doc, &path);
            *node = json!([node.take()]);
            format!("wrapped {path:?} in an array")
        }
    }
}

/// Mutates each kind's examples `CASES` times, one to three mutations at a time, and
/// holds the schema's verdict equal to the parser's.
fn schema_and_parser_agree(kind: Kind) {
    let seeds = kind.seeds_with_every_member();
    let validator = validator(kind.schema());
    for seed in &seeds {
        assert_eq!(kind.parse(seed), Ok(()), "{kind:?}: a seed must parse");
        assert!(validator.is_valid(seed), "{kind:?}: a seed must validate");
    }
    let mut runner = TestRunner::new(Config {
        cases: CASES,
        // Nothing is written into the crate's proptest-regressions/.
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (
        0..seeds.len(),
        prop::collection::vec((0u8..11, any::<u32>(), any::<u64>()), 1..=3),
    );
    let outcomes = std::cell::Cell::new((0u32, 0u32));
    let result = runner.run(&strategy, |(seed, mutations)| {
        let mut doc = seeds[seed].clone();
        let applied: Vec<String> = mutations
            .iter()
            .map(|&(op, target, payload)| mutate(&mut doc, op, target, payload, kind))
            .collect();
        let parsed = kind.parse(&doc);
        let valid = validator.is_valid(&doc);
        let (accepted, refused) = outcomes.get();
        outcomes.set(if valid {
            (accepted + 1, refused)
        } else {
            (accepted, refused + 1)
        });
        prop_assert_eq!(
            valid,
            parsed.is_ok(),
            "{:?} seed {}, {:?}\nthe parser says {:?}\nthe schema says {:?}\ndocument: {}",
            kind,
            seed,
            applied,
            parsed,
            errors(kind.schema(), &doc),
            doc
        );
        Ok(())
    });
    if let Err(e) = result {
        panic!("{kind:?}: the schema and the parser disagree: {e}");
    }
    let (accepted, refused) = outcomes.get();
    eprintln!("{kind:?}: {accepted} mutated documents accepted, {refused} refused, by both");
    assert!(
        accepted > 0 && refused > 0,
        "{kind:?}: mutations must produce documents both accepted ({accepted}) and refused ({refused})"
    );
}

#[test]
fn skill_declarations_schema_agrees_with_the_parser() {
    schema_and_parser_agree(Kind::SkillDeclarations);
}

#[test]
fn plan_schema_agrees_with_the_parser() {
    schema_and_parser_agree(Kind::Plan);
}

#[test]
fn mandate_schema_agrees_with_the_parser() {
    schema_and_parser_agree(Kind::Mandate);
}

#[test]
fn revocation_schema_agrees_with_the_parser() {
    schema_and_parser_agree(Kind::Revocation);
}

#[test]
fn answer_schema_agrees_with_the_executors_reading() {
    schema_and_parser_agree(Kind::Answer);
}
