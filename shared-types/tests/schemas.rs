//! The published JSON Schemas (`spec/schemas/*.schema.json`, draft 2020-12) held against
//! the Rust types they describe, so that neither drifts from the other:
//!
//! - every schema is there, compiles, has a unique `$id` and describes every property;
//! - every example document in the repository validates, and the Rust parser takes it;
//! - on documents mutated from those examples, a schema accepts exactly what the Rust
//!   parser accepts (`schema.is_valid(doc) == parser(doc).is_ok()`): one to three random
//!   mutations at a time (proptest), and every single mutation of every node (a sweep),
//!   but for the one mutation class `mutate` names, which JSON Schema cannot express;
//! - date-times agree with the parsers field by field, RFC 3339 and nothing more;
//! - the A2A documents (a tool call, a tool's answer), for which this crate has no parser,
//!   are checked on documents shaped as the executor and the A2A SDK write them.
//!
//! The parsers of plans, mandates, revocations and skill declarations are strict
//! (`shared-types/src/strict.rs`): an object only as a JSON object, never as the array
//! of its members' values that serde's derive also reads; an enum value only as a string,
//! never as serde's one-member object `{"variant": null}`; a date-time only as RFC 3339.
//! The mutations still write those forms, and both sides must refuse them. A person's
//! answer is read by the executor with serde's derive, so its schema and the replica of
//! that parser here still take both forms (see `spec/schemas/README.md`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use chrono::{DateTime, Utc};
use jsonschema::{Draft, Registry, Validator};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use shared_types::reversibility::ReversibilityParams;
use shared_types::{Mandate, Plan, REVERSIBILITY_EXTENSION_URI, Revocation};

/// Every schema the specification publishes, by file stem (`<stem>.schema.json`).
const SCHEMAS: [&str; 7] = [
    "skill-declarations",
    "plan",
    "mandate",
    "revocation",
    "answer",
    "tool-call",
    "tool-answer",
];

/// A schema's `$id` is this prefix and its stem. URNs have no hierarchical path, so a
/// relative `$ref` ("mandate.schema.json") cannot be resolved against one (RFC 3986 §5.2.2;
/// `jsonschema` refuses it with "when base has a rootless path and no authority, reference
/// should either have scheme, be empty or start with '#'"): the schemas refer to each other
/// by absolute `$id` (`urn:sagaplane:schema:v1:mandate#/$defs/dateTime`), and this test
/// registers every schema under its `$id`.
const ID_PREFIX: &str = "urn:sagaplane:schema:v1:";

const DRAFT_2020_12: &str = "https://json-schema.org/draft/2020-12/schema";

/// Mutated documents per document kind: enough to cover every mutation class many times,
/// few enough that the whole file runs in seconds.
const CASES: u32 = 256;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// The `.json` files directly in `dir` (relative to the repository), sorted, whose file
/// name passes `keep`.
fn json_files(dir: &str, keep: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let dir = repo().join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "json"))
        .filter(|p| keep(&file_name(p)))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no example in {}", dir.display());
    files
}

fn file_name(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

fn schema_path(stem: &str) -> PathBuf {
    repo()
        .join("spec/schemas")
        .join(format!("{stem}.schema.json"))
}

/// A schema document; a missing or unreadable schema fails the test that needs it.
fn schema_document(stem: &str) -> Value {
    let path = schema_path(stem);
    assert!(
        path.is_file(),
        "the schema {} is missing: spec/reversibility-v1.md publishes it",
        path.display()
    );
    read_json(&path)
}

/// Every schema, registered under its `$id`, so that the references between them resolve
/// without any retrieval.
fn registry() -> &'static Registry<'static> {
    static REGISTRY: OnceLock<Registry<'static>> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let resources = SCHEMAS
            .iter()
            .map(|stem| (format!("{ID_PREFIX}{stem}"), schema_document(stem)));
        Registry::new()
            .draft(Draft::Draft202012)
            .extend(resources)
            .and_then(|builder| builder.prepare())
            .unwrap_or_else(|e| panic!("the schemas do not form a registry: {e}"))
    })
}

/// Compiles `schema` (a schema document, or a `$ref` into one) under draft 2020-12, with
/// every published schema resolvable and nothing fetched. `format` stays an annotation:
/// the date-time patterns are what the schemas assert (see `mandate.schema.json`).
fn compile(schema: &Value) -> Result<Validator, String> {
    jsonschema::options()
        .with_draft(Draft::Draft202012)
        .with_registry(registry())
        .offline()
        .should_validate_formats(false)
        .build(schema)
        .map_err(|e| e.to_string())
}

/// The compiled validator of a published schema.
fn validator(stem: &str) -> &'static Validator {
    static VALIDATORS: OnceLock<BTreeMap<&'static str, Validator>> = OnceLock::new();
    let validators = VALIDATORS.get_or_init(|| {
        SCHEMAS
            .iter()
            .map(|stem| {
                let compiled = compile(&schema_document(stem)).unwrap_or_else(|e| {
                    panic!("spec/schemas/{stem}.schema.json does not compile: {e}")
                });
                (*stem, compiled)
            })
            .collect()
    });
    validators
        .get(stem)
        .unwrap_or_else(|| panic!("{stem} is not a published schema"))
}

/// Why `doc` fails `stem`, one line per error.
fn errors(stem: &str, doc: &Value) -> Vec<String> {
    validator(stem)
        .iter_errors(doc)
        .map(|e| format!("at '{}': {e}", e.instance_path()))
        .collect()
}

fn assert_valid(stem: &str, doc: &Value, what: &str) {
    let errors = errors(stem, doc);
    assert!(
        errors.is_empty(),
        "{what} does not validate against {stem}.schema.json:\n  {}",
        errors.join("\n  ")
    );
}

fn assert_invalid(stem: &str, doc: &Value, what: &str) {
    assert!(
        !validator(stem).is_valid(doc),
        "{what} validates against {stem}.schema.json, and should not: {doc}"
    );
}

// ---------------------------------------------------------------------------------------
// (c) The schemas themselves
// ---------------------------------------------------------------------------------------

#[test]
fn every_schema_is_published_compiles_and_has_a_unique_id() {
    let dir = repo().join("spec/schemas");
    let on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("spec/schemas is missing ({}): {e}", dir.display()))
        .map(|entry| file_name(&entry.expect("a directory entry").path()))
        .filter(|name| name.ends_with(".schema.json"))
        .collect();
    for name in &on_disk {
        let stem = name.trim_end_matches(".schema.json");
        assert!(
            SCHEMAS.contains(&stem),
            "spec/schemas/{name} is not checked by this test: add it to SCHEMAS"
        );
    }
    let mut ids = BTreeMap::new();
    for stem in SCHEMAS {
        let doc = schema_document(stem);
        assert_eq!(
            doc["$schema"], DRAFT_2020_12,
            "{stem}.schema.json: $schema must be draft 2020-12"
        );
        let id = doc["$id"].as_str().unwrap_or_default().to_owned();
        assert_eq!(id, format!("{ID_PREFIX}{stem}"), "{stem}.schema.json: $id");
        if let Some(other) = ids.insert(id.clone(), stem) {
            panic!("{stem}.schema.json and {other}.schema.json share the $id {id}");
        }
        for member in ["title", "description"] {
            assert!(
                doc[member].as_str().is_some_and(|s| !s.is_empty()),
                "{stem}.schema.json has no {member}"
            );
        }
        if let Err(e) = jsonschema::meta::validate(&doc) {
            panic!("{stem}.schema.json is not a valid draft 2020-12 schema: {e}");
        }
        if let Err(e) = compile(&doc) {
            panic!("{stem}.schema.json does not compile: {e}");
        }
        let mut undescribed = Vec::new();
        undescribed_properties(&doc, "#", &mut undescribed);
        assert!(
            undescribed.is_empty(),
            "{stem}.schema.json: properties without a description: {undescribed:?}"
        );
    }
}

/// Every property declared in `properties` has a `description`. Refinements in `if`,
/// `then`, `else` and `not` restate properties described where they are declared, and
/// `default`, `const` and `enum` hold data.
fn undescribed_properties(schema: &Value, at: &str, out: &mut Vec<String>) {
    match schema {
        Value::Object(members) => {
            for (key, value) in members {
                let here = format!("{at}/{key}");
                match key.as_str() {
                    "if" | "then" | "else" | "not" | "default" | "const" | "enum" => {}
                    "properties" => {
                        for (name, property) in value.as_object().into_iter().flatten() {
                            if property
                                .get("description")
                                .and_then(Value::as_str)
                                .is_none()
                            {
                                out.push(format!("{here}/{name}"));
                            }
                            undescribed_properties(property, &format!("{here}/{name}"), out);
                        }
                    }
                    _ => undescribed_properties(value, &here, out),
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                undescribed_properties(item, &format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// The specification links each schema, and the schemas' README names each one.
#[test]
fn the_spec_and_the_readme_name_every_schema() {
    let spec = std::fs::read_to_string(repo().join("spec/reversibility-v1.md"))
        .expect("spec/reversibility-v1.md");
    let readme = std::fs::read_to_string(repo().join("spec/schemas/README.md"))
        .expect("spec/schemas/README.md is missing");
    for linked in spec.split("schemas/").skip(1) {
        let Some(name) = linked.split([')', '`', ' ']).next() else {
            continue;
        };
        if name.ends_with(".schema.json") {
            assert!(
                schema_path(name.trim_end_matches(".schema.json")).is_file(),
                "the spec links schemas/{name}, which does not exist"
            );
        }
    }
    for stem in SCHEMAS {
        assert!(
            readme.contains(&format!("{stem}.schema.json")),
            "spec/schemas/README.md does not describe {stem}.schema.json"
        );
    }
}

// ---------------------------------------------------------------------------------------
// (a) Every example in the repository validates, and the Rust parser takes it
// ---------------------------------------------------------------------------------------

/// The reversibility extension's `params` in an agent card, found by its URI.
fn extension_params(card: &Value) -> Option<&Value> {
    card.pointer("/capabilities/extensions")?
        .as_array()?
        .iter()
        .find(|e| e.get("uri").and_then(Value::as_str) == Some(REVERSIBILITY_EXTENSION_URI))?
        .get("params")
}

fn card_params() -> Vec<(String, Value)> {
    json_files("agent-cards", |_| true)
        .into_iter()
        .map(|path| {
            let card = read_json(&path);
            let params = extension_params(&card)
                .unwrap_or_else(|| panic!("{} declares no reversibility params", path.display()))
                .clone();
            (file_name(&path), params)
        })
        .collect()
}

#[test]
fn every_agent_cards_declarations_validate() {
    for (card, params) in card_params() {
        let what = format!("agent-cards/{card} (its reversibility params)");
        assert_valid("skill-declarations", &params, &what);
        if let Err(e) = ReversibilityParams::from_value(&params) {
            panic!("{what}: the Rust parser refuses it: {e}");
        }
    }
}

fn example_plans() -> Vec<(String, Value)> {
    json_files("examples/plans", |_| true)
        .into_iter()
        .map(|p| (format!("examples/plans/{}", file_name(&p)), read_json(&p)))
        .collect()
}

#[test]
fn every_example_plan_validates() {
    for (name, plan) in example_plans() {
        assert_valid("plan", &plan, &name);
        if let Err(e) = Plan::from_value(&plan) {
            panic!("{name}: Plan::from_value refuses it: {e}");
        }
    }
}

/// `examples/plans/invalid/` holds plans the executor refuses, one reason each (the file
/// name is the violation). All but these are refused for what they mean, not for their
/// shape (a signature, the catalog, the mandate, the pivot's order, a reference, a
/// conflict with an accepted plan...): they are plans, and must validate. These are
/// refused for their shape, by the parser (`Plan::from_value`) and so by the schema.
const STRUCTURALLY_INVALID_PLANS: [&str; 1] = [
    // "planVersion": 1.5 is not an integer (SCHEMA_INVALID).
    "schema-invalid.json",
];

#[test]
fn the_refused_example_plans_are_plans_but_for_the_malformed_one() {
    for path in json_files("examples/plans/invalid", |_| true) {
        let name = file_name(&path);
        let plan = read_json(&path);
        let parsed = Plan::from_value(&plan);
        let malformed = STRUCTURALLY_INVALID_PLANS.contains(&name.as_str());
        assert_eq!(
            parsed.is_err(),
            malformed,
            "examples/plans/invalid/{name}: Plan::from_value says {parsed:?}; list it in STRUCTURALLY_INVALID_PLANS exactly when it does not have a plan's shape"
        );
        if malformed {
            assert_invalid("plan", &plan, &format!("examples/plans/invalid/{name}"));
        } else {
            assert_valid("plan", &plan, &format!("examples/plans/invalid/{name}"));
        }
    }
}

fn example_mandates() -> Vec<(String, Value)> {
    json_files("examples/mandates", |name| name.contains("mandate"))
        .into_iter()
        .map(|p| {
            (
                format!("examples/mandates/{}", file_name(&p)),
                read_json(&p),
            )
        })
        .collect()
}

fn example_revocation() -> Value {
    read_json(&repo().join("examples/mandates/test-revocation.json"))
}

#[test]
fn every_example_mandate_and_revocation_validates() {
    for (name, mandate) in example_mandates() {
        assert_valid("mandate", &mandate, &name);
        if let Err(e) = Mandate::from_value(&mandate) {
            panic!("{name}: Mandate::from_value refuses it: {e}");
        }
    }
    let revocation = example_revocation();
    let name = "examples/mandates/test-revocation.json";
    assert_valid("revocation", &revocation, name);
    if let Err(e) = Revocation::from_value(&revocation) {
        panic!("{name}: Revocation::from_value refuses it: {e}");
    }
}

// ---------------------------------------------------------------------------------------
// The A2A documents: a tool call, a tool's answer, a person's answer
// ---------------------------------------------------------------------------------------

/// The `SendMessage` params `A2aInvoker::invoke` (executor-agent/src/invoke.rs) sends, as
/// the SDK's `SendMessageRequest` serializes (members it leaves out when `None` are left
/// out here: `contextId`, `taskId`, `referenceTaskIds`, the request's `metadata`, `tenant`).
fn tool_call(skill: &str, args: &Value, saga: &str, step: &str, undo: Option<&str>) -> Value {
    let compensation = undo.is_some();
    let key = if compensation {
        format!("{saga}:{step}:undo")
    } else {
        format!("{saga}:{step}")
    };
    json!({
        "message": {
            "messageId": "0190f7c2-7d1e-7cc4-b8a4-1f0e6f3a9c11",
            "role": "ROLE_USER",
            "parts": [{"data": {"skill": skill, "args": args}}],
            "metadata": {REVERSIBILITY_EXTENSION_URI: {
                "sagaId": saga, "stepId": step, "idempotencyKey": key,
                "causedBy": undo.filter(|cause| !cause.is_empty()), "compensation": compensation,
            }},
            "extensions": [REVERSIBILITY_EXTENSION_URI],
        },
        "configuration": {"historyLength": 0},
    })
}

/// Every call the example plan makes: each step forward, and each compensation (caused by
/// the pivot's failure; a cancellation's has no cause).
fn example_tool_calls() -> Vec<(String, Value)> {
    let plan = read_json(&repo().join("examples/plans/supplier-onboarding.json"));
    let saga = plan["sagaId"].as_str().unwrap();
    let mut calls = Vec::new();
    for step in plan["steps"].as_array().unwrap() {
        let id = step["id"].as_str().unwrap();
        let skill = step["skill"].as_str().unwrap();
        calls.push((
            format!("{id} forward"),
            tool_call(skill, &step["args"], saga, id, None),
        ));
        if let Some(comp) = step.get("compensation") {
            let skill = comp["skill"].as_str().unwrap();
            for (cause, args) in [("s4", &comp["args"]), ("", &comp["argsWhenUnknown"])] {
                calls.push((
                    format!("{id} undo (cause {cause:?})"),
                    tool_call(skill, args, saga, id, Some(cause)),
                ));
            }
        }
    }
    assert!(
        calls.len() > 6,
        "the example plan makes forward and undo calls"
    );
    calls
}

#[test]
fn the_tool_calls_the_executor_sends_validate() {
    for (what, call) in example_tool_calls() {
        assert_valid("tool-call", &call, &what);
    }
    let base = example_tool_calls().remove(0).1;
    let uri = REVERSIBILITY_EXTENSION_URI;
    let context = format!("/message/metadata/{}", uri.replace('/', "~1"));
    type Edit = fn(&mut Value, &str);
    // What A2A may add, and a tool must not refuse.
    let open: [(&str, Edit); 6] = [
        ("a context id", |c, _| {
            c["message"]["contextId"] = json!("ctx-1")
        }),
        ("another extension", |c, _| {
            c["message"]["extensions"] =
                json!(["https://x.example/ext", REVERSIBILITY_EXTENSION_URI])
        }),
        ("another extension's metadata", |c, _| {
            c["message"]["metadata"]["https://x.example/ext"] = json!({"k": 1})
        }),
        ("a part's media type", |c, _| {
            c["message"]["parts"][0]["mediaType"] = json!("application/json")
        }),
        ("returnImmediately false", |c, _| {
            c["configuration"]["returnImmediately"] = json!(false)
        }),
        ("a step id 'undo' (forward key <saga>:undo)", |c, at| {
            let ctx = c.pointer_mut(at).unwrap();
            ctx["stepId"] = json!("undo");
            ctx["idempotencyKey"] = json!("sg_1:undo");
            ctx["sagaId"] = json!("sg_1");
        }),
    ];
    for (what, edit) in open {
        let mut call = base.clone();
        edit(&mut call, &context);
        assert_valid("tool-call", &call, what);
    }
    // What the contract defines, and a call that differs is not one.
    let strict: [(&str, Edit); 17] = [
        ("two parts", |c, _| {
            let part = c["message"]["parts"][0].clone();
            c["message"]["parts"].as_array_mut().unwrap().push(part);
        }),
        ("no part", |c, _| c["message"]["parts"] = json!([])),
        ("a text part", |c, _| {
            c["message"]["parts"] = json!([{"text": "hi"}])
        }),
        ("a data part that is also text", |c, _| {
            c["message"]["parts"][0]["text"] = json!("hi")
        }),
        ("a member beside skill and args", |c, _| {
            c["message"]["parts"][0]["data"]["agent"] = json!("x")
        }),
        ("args that are not an object", |c, _| {
            c["message"]["parts"][0]["data"]["args"] = json!("x")
        }),
        ("role ROLE_AGENT", |c, _| {
            c["message"]["role"] = json!("ROLE_AGENT")
        }),
        ("historyLength 5", |c, _| {
            c["configuration"]["historyLength"] = json!(5)
        }),
        ("no configuration", |c, _| {
            c.as_object_mut().unwrap().remove("configuration");
        }),
        ("no saga context", |c, _| {
            c["message"]["metadata"] = json!({})
        }),
        ("a saga context with an unknown member", |c, at| {
            c.pointer_mut(at).unwrap()["attempt"] = json!(1)
        }),
        ("causedBy a number", |c, at| {
            c.pointer_mut(at).unwrap()["causedBy"] = json!(4)
        }),
        ("causedBy on a forward call", |c, at| {
            c.pointer_mut(at).unwrap()["causedBy"] = json!("s4")
        }),
        ("compensation with a forward key", |c, at| {
            c.pointer_mut(at).unwrap()["compensation"] = json!(true)
        }),
        ("a forward call with an undo key", |c, at| {
            let ctx = c.pointer_mut(at).unwrap();
            let key = format!("{}:undo", ctx["idempotencyKey"].as_str().unwrap());
            ctx["idempotencyKey"] = json!(key);
        }),
        ("a saga id with a colon", |c, at| {
            c.pointer_mut(at).unwrap()["sagaId"] = json!("a:b")
        }),
        ("extensions without the extension", |c, _| {
            c["message"]["extensions"] = json!(["https://x.example/ext"])
        }),
    ];
    for (what, edit) in strict {
        let mut call = base.clone();
        edit(&mut call, &context);
        assert_invalid("tool-call", &call, what);
    }
}

fn completed(artifacts: Value) -> Value {
    json!({"task": {
        "id": "0190f7c2-0000-7000-8000-000000000001",
        "contextId": "0190f7c2-0000-7000-8000-000000000002",
        "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "2026-11-30T07:00:00.123Z"},
        "artifacts": artifacts,
    }})
}

fn ended(state: &str, status_metadata: Option<Value>, task_metadata: Option<Value>) -> Value {
    // The status message of spec section 6.1.
    let mut message = json!({
        "role": "ROLE_AGENT", "messageId": "m-2",
        "parts": [{"text": "the ledger is locked; try again"}],
    });
    if let Some(metadata) = status_metadata {
        message["metadata"] = metadata;
    }
    let mut task = json!({
        "id": "t-1", "contextId": "ctx-1",
        "status": {"state": state, "message": message},
    });
    if let Some(metadata) = task_metadata {
        task["metadata"] = metadata;
    }
    json!({ "task": task })
}

fn failure(class: &str) -> Value {
    json!({ REVERSIBILITY_EXTENSION_URI: {"failure": class} })
}

#[test]
fn the_answers_that_settle_a_call_validate_and_no_other() {
    let settle = [
        (
            "a completed task with a data artifact",
            completed(
                json!([{"artifactId": "a-1", "name": "result", "parts": [{"data": {"vendorId": "v-9", "amount": 1250.0}}], "metadata": {"k": {"v": 1.0}}}]),
            ),
        ),
        (
            "a completed task whose data part follows a text artifact",
            completed(json!([
                {"artifactId": "a-1", "parts": [{"text": "done"}]},
                {"artifactId": "a-2", "parts": [{"text": "result:"}, {"data": [1, 2], "mediaType": "application/json"}]},
            ])),
        ),
        (
            "a message with a data part",
            json!({"message": {"messageId": "m-1", "role": "ROLE_AGENT", "contextId": "ctx-1", "parts": [{"data": {"id": 4.0}}]}}),
        ),
        (
            "a failed task, transient (spec section 6.1)",
            ended("TASK_STATE_FAILED", Some(failure("transient")), None),
        ),
        (
            "a failed task, permanent in the task's metadata",
            ended("TASK_STATE_FAILED", None, Some(failure("permanent"))),
        ),
        (
            "a failed task, unmarked",
            ended("TASK_STATE_FAILED", None, None),
        ),
        ("a rejected task", ended("TASK_STATE_REJECTED", None, None)),
        (
            "a canceled task, other metadata beside",
            ended(
                "TASK_STATE_CANCELED",
                Some(json!({"trace": "abc"})),
                Some(json!({"k": 1})),
            ),
        ),
    ];
    for (what, answer) in settle {
        assert_valid("tool-answer", &answer, what);
    }
    let data = json!([{"artifactId": "a-1", "parts": [{"data": {"id": 1}}]}]);
    let mut bare = completed(data.clone())["task"].clone();
    let unknown_or_malformed = [
        ("the task itself, not {\"task\": …}", bare.take()),
        ("a completed task without artifacts", {
            let mut a = completed(data.clone());
            a["task"].as_object_mut().unwrap().remove("artifacts");
            a
        }),
        (
            "a completed task without a data part",
            completed(json!([{"artifactId": "a-1", "parts": [{"text": "done"}]}])),
        ),
        (
            "a completed task with an empty artifact list",
            completed(json!([])),
        ),
        (
            "a completed task whose only part is text and data at once",
            completed(json!([{"artifactId": "a-1", "parts": [{"text": "x", "data": {}}]}])),
        ),
        ("a working task", {
            let mut a = completed(data.clone());
            a["task"]["status"]["state"] = json!("TASK_STATE_WORKING");
            a
        }),
        (
            "a task waiting for input",
            ended("TASK_STATE_INPUT_REQUIRED", None, None),
        ),
        (
            "a failure class that is not one",
            ended("TASK_STATE_FAILED", Some(failure("maybe")), None),
        ),
        (
            "a failure class with another member",
            ended(
                "TASK_STATE_FAILED",
                Some(
                    json!({REVERSIBILITY_EXTENSION_URI: {"failure": "permanent", "retryAfter": 5}}),
                ),
                None,
            ),
        ),
        (
            "the extension's metadata without a class",
            ended(
                "TASK_STATE_FAILED",
                None,
                Some(json!({REVERSIBILITY_EXTENSION_URI: {}})),
            ),
        ),
        ("both a task and a message", {
            let mut a = completed(data.clone());
            a["message"] =
                json!({"messageId": "m-1", "role": "ROLE_AGENT", "parts": [{"data": {}}]});
            a
        }),
        ("a task without contextId", {
            let mut a = completed(data.clone());
            a["task"].as_object_mut().unwrap().remove("contextId");
            a
        }),
        ("a state in lower case", {
            let mut a = completed(data.clone());
            a["task"]["status"]["state"] = json!("completed");
            a
        }),
        (
            "a message without a data part",
            json!({"message": {"messageId": "m-1", "role": "ROLE_AGENT", "parts": [{"text": "done"}]}}),
        ),
        ("an empty result", json!({})),
        ("null", Value::Null),
    ];
    for (what, answer) in unknown_or_malformed {
        assert_invalid("tool-answer", &answer, what);
    }
}

/// `executor-agent/src/answers.rs` `answer_of` and `parse`, replicated: this crate cannot
/// depend on the executor. Keep it in step with the original; it is the oracle of the
/// answer schema's agreement test.
fn parse_answer(data: &Value) -> Result<(), String> {
    /// `Resolution` of executor-agent/src/saga/model.rs.
    #[derive(Deserialize, PartialEq)]
    #[serde(rename_all = "kebab-case")]
    enum Resolution {
        Approve,
        Retry,
        ResolvedManually,
        Compensate,
    }
    /// `SentApproval` of executor-agent/src/answers.rs.
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct SentApproval {
        #[allow(dead_code)]
        saga_id: String,
        #[allow(dead_code)]
        step_id: String,
        #[allow(dead_code)]
        args_sha256: String,
        expires_at: String,
    }
    // `answer_of`: a data part without `resolution` is not an answer.
    let resolution = data.get("resolution").ok_or("no resolution")?;
    let resolution: Resolution =
        serde_json::from_value(resolution.clone()).map_err(|_| "RESOLUTION_INVALID")?;
    match (resolution == Resolution::Approve, data.get("approval")) {
        (true, None) => Err("APPROVAL_UNBOUND: no approval".into()),
        (true, Some(sent)) => {
            let sent: SentApproval = serde_json::from_value(sent.clone())
                .map_err(|e| format!("APPROVAL_UNBOUND: {e}"))?;
            DateTime::parse_from_rfc3339(&sent.expires_at)
                .map(drop)
                .map_err(|e| format!("APPROVAL_UNBOUND: expiresAt: {e}"))
        }
        (false, None) => Ok(()),
        (false, Some(_)) => Err("RESOLUTION_INVALID: only an approve carries an approval".into()),
    }
}

fn example_answers() -> Vec<Value> {
    vec![
        json!({"resolution": "approve", "approval": {
            "sagaId": "sg_demo_supplier_onboarding", "stepId": "s4",
            "argsSha256": "3f0a5b3c1e8d4b0f9c2a7e6d5b4c3a291807f6e5d4c3b2a1908f7e6d5c4b3a29",
            "expiresAt": "2026-11-29T10:30:00Z"}}),
        json!({"resolution": "retry"}),
        json!({"resolution": "resolved-manually"}),
        json!({"resolution": "compensate"}),
    ]
}

#[test]
fn a_persons_answers_validate() {
    for answer in example_answers() {
        assert_valid("answer", &answer, &answer.to_string());
        assert_eq!(parse_answer(&answer), Ok(()), "{answer}");
    }
    for refused in [
        json!({"resolution": "approve"}),
        json!({"resolution": "retry", "approval": null}),
        json!({"resolution": "approve", "approval": {"sagaId": "a", "stepId": "b", "argsSha256": "c", "expiresAt": "tomorrow"}}),
        json!({"resolution": "approve", "approval": {"sagaId": "a", "stepId": "b", "argsSha256": "c", "expiresAt": "2026-11-29T10:30:00Z", "by": "me"}}),
        json!({"resolution": "resolved_manually"}),
        json!({"approval": {}}),
    ] {
        assert_invalid("answer", &refused, &refused.to_string());
        assert!(parse_answer(&refused).is_err(), "{refused}");
    }
}

// ---------------------------------------------------------------------------------------
// (b) Parsers and schemas agree on mutated documents
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    SkillDeclarations,
    Plan,
    Mandate,
    Revocation,
    Answer,
}

impl Kind {
    fn schema(self) -> &'static str {
        match self {
            Kind::SkillDeclarations => "skill-declarations",
            Kind::Plan => "plan",
            Kind::Mandate => "mandate",
            Kind::Revocation => "revocation",
            Kind::Answer => "answer",
        }
    }

    fn seeds(self) -> Vec<Value> {
        match self {
            Kind::SkillDeclarations => card_params().into_iter().map(|(_, p)| p).collect(),
            Kind::Plan => example_plans()
                .into_iter()
                .map(|(_, p)| p)
                .chain(
                    json_files("examples/plans/invalid", |name| {
                        !STRUCTURALLY_INVALID_PLANS.contains(&name)
                    })
                    .iter()
                    .map(|p| read_json(p)),
                )
                .collect(),
            Kind::Mandate => example_mandates().into_iter().map(|(_, m)| m).collect(),
            Kind::Revocation => vec![example_revocation()],
            Kind::Answer => example_answers(),
        }
    }

    /// The seeds, and one document more per kind with the optional members no example
    /// carries, so that mutations reach them too.
    fn seeds_with_every_member(self) -> Vec<Value> {
        let mut seeds = self.seeds();
        let mut full = seeds[0].clone();
        let signature = json!({"protected": "eyJhbGciOiJFZERTQSIsImtpZCI6ImsifQ", "signature": "AA", "header": {"kid": "k"}});
        match self {
            Kind::Plan => {
                full["authoredBy"]["promptSha256"] =
                    json!("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08");
                full["authoredBy"]["rejectedAlternatives"] = json!([{"steps": 7}]);
                full["mandate"]["maxSagas"] = json!(3);
                full["signatures"] = json!([signature]);
            }
            Kind::Mandate => {
                full["maxSagas"] = json!(3);
                full["signatures"] = json!([signature]);
            }
            Kind::Revocation => {
                let members = full.as_object_mut().unwrap();
                members.remove("reason");
                members.remove("signatures");
            }
            Kind::SkillDeclarations => {
                full["skills"]["x.undo"] = json!({"class": "retriable"});
                full["skills"]["x.do"] = json!({
                    "class": "compensable",
                    "compensation": {"skill": "x.undo", "args": {"id": "$response.body#/id"}},
                    "undoTtlSeconds": 60, "undoExpiresAt": "$response.body#/until",
                    "requiresApproval": true, "approvalTimeoutSeconds": 600,
                    "spend": {"amountMinor": 100, "currency": "EUR"},
                    "retry": {"maxAttempts": 2},
                });
            }
            Kind::Answer => return seeds,
        }
        seeds.push(full);
        seeds
    }

    /// The Rust parser the schema mirrors.
    fn parse(self, doc: &Value) -> Result<(), String> {
        match self {
            // As the catalog reads a card's params (`agent_from_card`), before it checks
            // what the schema only states (`SkillDeclaration::problems`).
            Kind::SkillDeclarations => ReversibilityParams::from_value(doc).map(drop),
            // As the executor types a plan (executor-agent/src/agent.rs, and
            // `PlanValidator::validate_verified`): integral doubles, which A2A data parts
            // make of every integer, become integers first.
            Kind::Plan => {
                let mut doc = doc.clone();
                shared_types::json::normalize_integers(&mut doc);
                Plan::from_value(&doc).map(drop)
            }
            Kind::Mandate => Mandate::from_value(doc).map(drop),
            Kind::Revocation => Revocation::from_value(doc).map(drop),
            Kind::Answer => parse_answer(doc),
        }
    }
}

/// One step of a path into a document.
#[derive(Debug, Clone)]
enum Step {
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
fn typed_nodes(value: &Value) -> Vec<Vec<Step>> {
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

fn node_mut<'a>(mut value: &'a mut Value, path: &[Step]) -> &'a mut Value {
    for step in path {
        value = match step {
            Step::Key(key) => &mut value[key.as_str()],
            Step::Index(i) => &mut value[*i],
        };
    }
    value
}

fn node<'a>(mut value: &'a Value, path: &[Step]) -> &'a Value {
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
const STRINGS: [&str; 34] = [
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
/// parsers refuse them all; an approval's `expiresAt`, read by `parse_from_rfc3339`, takes
/// the first two.
const NOT_RFC3339: [&str; 13] = [
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
/// write an object as the array of its values (serde's sequence form, which only the
/// answer's parser reads), with a member more or less; write a string as a one-member
/// object (serde's enum form, likewise); push an element;
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
            if payload % 3 == 0 && !members.is_empty() {
                let key = members
                    .keys()
                    .nth(small as usize % members.len())
                    .unwrap()
                    .clone();
                let twin = if payload % 2 == 0 {
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
            let text = if payload % 6 == 0 {
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
            let item = if payload % 2 == 0 && !items.is_empty() {
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
/// integral double (see `mutate`).
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

// ---------------------------------------------------------------------------------------
// Date-times, and the mutation classes left out above
// ---------------------------------------------------------------------------------------

fn date_validator(pointer: &str) -> Validator {
    compile(&json!({ "$ref": pointer })).unwrap_or_else(|e| panic!("{pointer}: {e}"))
}

/// The date-time parser of plans, mandates and revocations, as they use it: a revocation
/// whose `revokedAt` is `text`.
fn contract_date(text: &str) -> Result<(), String> {
    Revocation::from_value(&json!({"revokedMandateId": "md_1", "revokedAt": text})).map(drop)
}

/// A field of `width` digits: mostly a value at or next to a bound, else any.
fn field(bounds: &[u16], below: u16, width: usize) -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(bounds.to_vec()),
        1 => 0..below,
    ]
    .prop_map(move |n| format!("{n:0width$}"))
}

/// A string of RFC 3339's shape with each field at, next to or past its bounds (leap
/// years and centuries, the 29th to 32nd, hour 24, minute 60, seconds 60 and 61, offsets
/// past ±23:59, a fraction without digits, no offset), and with what
/// `DateTime::parse_from_rfc3339` reads beyond RFC 3339 (a space for `T`, U+2212 for
/// minus) and an offset without its colon, which it refuses.
fn arbitrary_date() -> impl Strategy<Value = String> {
    let offset = prop_oneof![
        prop::sample::select(vec!["Z".to_owned(), "z".to_owned(), String::new()]),
        (
            prop::sample::select(vec!["+", "-", "\u{2212}"]),
            field(&[0, 1, 23, 24], 100, 2),
            prop::sample::select(vec![":", ""]),
            field(&[0, 30, 59, 60], 100, 2),
        )
            .prop_map(|(sign, h, colon, m)| format!("{sign}{h}{colon}{m}")),
    ];
    let year = field(
        &[0, 4, 100, 400, 1900, 2000, 2023, 2024, 2100, 9999],
        10_000,
        4,
    );
    let month = field(&[0, 1, 2, 4, 9, 11, 12, 13], 100, 2);
    let day = field(&[0, 1, 28, 29, 30, 31, 32], 100, 2);
    let hour = field(&[0, 23, 24], 100, 2);
    let minute = field(&[0, 59, 60], 100, 2);
    let second = field(&[0, 59, 60, 61], 100, 2);
    (
        (year, month, day),
        prop::sample::select(vec!["T", "t", " "]),
        (hour, minute, second),
        prop::option::of("[0-9]{0,12}"),
        offset,
    )
        .prop_map(|((y, mo, d), sep, (h, mi, s), fraction, offset)| {
            let fraction = fraction.map(|f| format!(".{f}")).unwrap_or_default();
            format!("{y}-{mo}-{d}{sep}{h}:{mi}:{s}{fraction}{offset}")
        })
}

proptest! {
    #![proptest_config(Config { cases: CASES, failure_persistence: None, ..Config::default() })]

    /// Plans', mandates' and revocations' date-times (`date_time` in
    /// shared-types/src/strict.rs): the schema and the parser agree, day by day, and both
    /// refuse a space for `T`, U+2212 for minus and an offset without its colon.
    #[test]
    fn contract_date_times_agree_with_the_parser(text in arbitrary_date()) {
        static SCHEMA: OnceLock<Validator> = OnceLock::new();
        let schema = SCHEMA.get_or_init(|| date_validator("urn:sagaplane:schema:v1:mandate#/$defs/dateTime"));
        let parsed = contract_date(&text);
        prop_assert_eq!(schema.is_valid(&json!(text)), parsed.is_ok(), "{:?}: the parser says {:?}", text, parsed);
    }

    /// An approval's `expiresAt` (`DateTime::parse_from_rfc3339`): the schema and chrono
    /// agree, with a space for `T`, U+2212 for minus and offsets without a colon.
    #[test]
    fn approval_expiry_agrees_with_parse_from_rfc3339(text in arbitrary_date()) {
        static SCHEMA: OnceLock<Validator> = OnceLock::new();
        let schema = SCHEMA.get_or_init(|| date_validator("urn:sagaplane:schema:v1:answer#/$defs/approval/properties/expiresAt"));
        let chrono = DateTime::parse_from_rfc3339(&text);
        prop_assert_eq!(schema.is_valid(&json!(text)), chrono.is_ok(), "{:?}: chrono says {:?}", text, chrono);
    }
}

/// Date-times of RFC 3339's shape, field by field, each field through its bounds with the
/// others valid: February's last days in every year from 0000 to 2400 (leap years,
/// centuries, 400-year cycles) and beyond; every month's last days; every hour, minute
/// and second at and past its bounds (leap seconds at any minute); offsets, also with
/// U+2212 for minus and without a colon; fractions; a space for `T`, a trailing space.
fn date_sweep() -> Vec<String> {
    let mut out = Vec::new();
    for year in (0..=2400).chain([2401, 4000, 9996, 9999]) {
        for day in 28..=30 {
            out.push(format!("{year:04}-02-{day:02}T10:00:00Z"));
        }
    }
    for year in [2023, 2024] {
        for month in 0..=13 {
            for day in [0, 1, 28, 29, 30, 31, 32] {
                out.push(format!("{year:04}-{month:02}-{day:02}T10:00:00Z"));
            }
        }
    }
    for hour in 0..=24 {
        for minute in [0, 30, 59, 60] {
            for second in [0, 30, 59, 60, 61] {
                out.push(format!("2026-06-30T{hour:02}:{minute:02}:{second:02}Z"));
            }
        }
    }
    for sign in ["+", "-", "\u{2212}"] {
        for colon in [":", ""] {
            for hours in 0..=24 {
                for minutes in [0, 30, 59, 60] {
                    out.push(format!(
                        "2026-06-30T23:59:60{sign}{hours:02}{colon}{minutes:02}"
                    ));
                }
            }
        }
    }
    for separator in ["T", "t", " "] {
        for fraction in ["", ".", ".0", ".5", ".123456789", ".1234567890123", ".x"] {
            for offset in ["Z", "z", "", "+01:00", "Z "] {
                out.push(format!("2026-11-29{separator}10:00:00{fraction}{offset}"));
            }
        }
    }
    out
}

/// The calendar, the clock and the offsets, exhaustively: the schema of plans', mandates'
/// and revocations' date-times agrees with their parser.
#[test]
fn contract_date_times_agree_with_the_parser_field_by_field() {
    let schema = date_validator("urn:sagaplane:schema:v1:mandate#/$defs/dateTime");
    let sweep = date_sweep();
    let accepted = sweep
        .iter()
        .filter(|text| contract_date(text).is_ok())
        .count();
    assert!(
        accepted > 0 && accepted < sweep.len(),
        "the sweep must hold dates both read ({accepted}) and refused"
    );
    let disagreements: Vec<&String> = sweep
        .iter()
        .filter(|text| schema.is_valid(&json!(text)) != contract_date(text).is_ok())
        .collect();
    assert!(disagreements.is_empty(), "{disagreements:?}");
}

/// The same for an approval's `expiresAt` and `DateTime::parse_from_rfc3339`.
#[test]
fn approval_expiry_agrees_with_parse_from_rfc3339_field_by_field() {
    let schema =
        date_validator("urn:sagaplane:schema:v1:answer#/$defs/approval/properties/expiresAt");
    let disagreements: Vec<String> = date_sweep()
        .into_iter()
        .filter(|text| schema.is_valid(&json!(text)) != DateTime::parse_from_rfc3339(text).is_ok())
        .collect();
    assert!(disagreements.is_empty(), "{disagreements:?}");
}

/// What chrono's own serde parser reads beyond RFC 3339 is refused by the schema and by
/// the parser of every date-time member of every document. Each form is one chrono's
/// serde reads (checked), so the refusal is the strict parser's doing.
#[test]
fn date_times_outside_rfc3339_are_refused_by_schema_and_parser() {
    let schema = date_validator("urn:sagaplane:schema:v1:mandate#/$defs/dateTime");
    let plan = read_json(&repo().join("examples/plans/supplier-onboarding.json"));
    let mandate = example_mandates().remove(0).1;
    let revocation = example_revocation();
    let members = [
        (Kind::Plan, &plan, "/createdAt"),
        (Kind::Plan, &plan, "/mandate/notBefore"),
        (Kind::Mandate, &mandate, "/notBefore"),
        (Kind::Mandate, &mandate, "/notAfter"),
        (Kind::Revocation, &revocation, "/revokedAt"),
    ];
    for text in NOT_RFC3339 {
        let chrono = serde_json::from_value::<DateTime<Utc>>(json!(text));
        assert!(
            chrono.is_ok(),
            "{text:?}: chrono's serde parser no longer reads it ({chrono:?}), so it no longer shows the strict parser at work: replace it"
        );
        assert!(
            !schema.is_valid(&json!(text)),
            "{text:?} is not RFC 3339 and should not validate"
        );
        for (kind, seed, pointer) in members {
            let mut doc = seed.clone();
            *doc.pointer_mut(pointer).unwrap() = json!(text);
            let what = format!("{kind:?} with {pointer} {text:?}");
            assert_invalid(kind.schema(), &doc, &what);
            let why = kind.parse(&doc).expect_err(&what);
            assert!(
                why.contains("is not an RFC 3339 date-time"),
                "{what}: {why}"
            );
        }
    }
}

/// An object written as the array of its members' values, in the order they are listed.
fn as_values(object: &Value) -> Value {
    Value::Array(
        object
            .as_object()
            .expect("an object")
            .values()
            .cloned()
            .collect(),
    )
}

/// serde's derive reads a struct also from the array of its members' values, and a unit
/// enum variant also from a one-member object. The contract has neither form: the schema
/// and the parser refuse each, for a whole document and for every member that holds an
/// object or a class, and the parser's message names what it expected there.
#[test]
fn the_array_form_of_an_object_and_the_object_form_of_a_class_are_refused() {
    let signature = json!({"protected": "eyJhbGciOiJFZERTQSIsImtpZCI6ImsifQ", "signature": "AA"});
    let mut plan = read_json(&repo().join("examples/plans/supplier-onboarding.json"));
    plan["signatures"] = json!([signature]);
    let mandate = example_mandates()
        .into_iter()
        .map(|(_, m)| m)
        .find(|m| m.get("perSaga").is_some() && m.get("signatures").is_some())
        .expect("a signed example mandate with perSaga");
    let revocation = example_revocation();
    let params = Kind::SkillDeclarations
        .seeds_with_every_member()
        .pop()
        .unwrap();
    #[derive(Debug, Clone, Copy)]
    enum Form {
        /// `{"a": 1, "b": 2}` as `[1, 2]`.
        Values,
        /// `"compensable"` as `{"compensable": null}`.
        Tagged,
    }
    use Form::{Tagged, Values};
    let object = |what: &str| format!("invalid type: array, expected an object for {what}");
    let class = "invalid type: map, expected a reversibility class, one of the strings".to_owned();
    let cases = [
        (Kind::Plan, &plan, "", Values, object("a plan")),
        (
            Kind::Plan,
            &plan,
            "/authoredBy",
            Values,
            object("authoredBy"),
        ),
        (Kind::Plan, &plan, "/mandate", Values, object("mandate")),
        (
            Kind::Plan,
            &plan,
            "/mandate/budget",
            Values,
            object("budget"),
        ),
        (
            Kind::Plan,
            &plan,
            "/mandate/scope/1",
            Values,
            object("scope[1]"),
        ),
        (Kind::Plan, &plan, "/steps/2", Values, object("steps[2]")),
        (
            Kind::Plan,
            &plan,
            "/steps/0/compensation",
            Values,
            object("compensation"),
        ),
        (
            Kind::Plan,
            &plan,
            "/steps/0/compensation/args",
            Values,
            "invalid type: sequence, expected a map".to_owned(),
        ),
        (Kind::Plan, &plan, "/steps/4/class", Tagged, class.clone()),
        (
            Kind::Plan,
            &plan,
            "/signatures/0",
            Values,
            object("signatures[0]"),
        ),
        (Kind::Mandate, &mandate, "", Values, object("a mandate")),
        (Kind::Mandate, &mandate, "/budget", Values, object("budget")),
        (
            Kind::Mandate,
            &mandate,
            "/perSaga",
            Values,
            object("perSaga"),
        ),
        (
            Kind::Mandate,
            &mandate,
            "/scope/0",
            Values,
            object("scope[0]"),
        ),
        (
            Kind::Mandate,
            &mandate,
            "/signatures/0",
            Values,
            object("signatures[0]"),
        ),
        (
            Kind::Revocation,
            &revocation,
            "",
            Values,
            object("a revocation"),
        ),
        (
            Kind::Revocation,
            &revocation,
            "/signatures/0",
            Values,
            object("signatures[0]"),
        ),
        (
            Kind::SkillDeclarations,
            &params,
            "",
            Values,
            object("the reversibility params"),
        ),
        (
            Kind::SkillDeclarations,
            &params,
            "/skills/x.do",
            Values,
            object("skills[\"x.do\"]"),
        ),
        (
            Kind::SkillDeclarations,
            &params,
            "/skills/x.do/compensation",
            Values,
            object("compensation"),
        ),
        (
            Kind::SkillDeclarations,
            &params,
            "/skills/x.do/retry",
            Values,
            object("retry"),
        ),
        (
            Kind::SkillDeclarations,
            &params,
            "/skills/x.do/spend",
            Values,
            object("spend"),
        ),
        (
            Kind::SkillDeclarations,
            &params,
            "/skills/x.do/class",
            Tagged,
            class.clone(),
        ),
        (
            Kind::SkillDeclarations,
            &params,
            "/skills/x.undo/class",
            Tagged,
            class,
        ),
    ];
    for (kind, seed, pointer, form, expected) in cases {
        assert_eq!(kind.parse(seed), Ok(()), "{kind:?}: the seed must parse");
        let mut doc = seed.clone();
        let node = doc
            .pointer_mut(pointer)
            .unwrap_or_else(|| panic!("{kind:?} has no {pointer}"));
        *node = match form {
            Values => as_values(node),
            Tagged => json!({ node.as_str().expect("a class"): null }),
        };
        let what = format!("{kind:?} with {pointer:?} in the {form:?} form");
        assert_invalid(kind.schema(), &doc, &what);
        let why = kind.parse(&doc).expect_err(&what);
        assert!(
            why.contains(&expected),
            "{what}: the parser says {why:?}, not {expected:?}"
        );
    }
    // The same forms in a person's answer, whose parser is the executor's serde derive:
    // read, and so in its schema (README.md).
    for answer in [
        json!({"resolution": {"retry": null}}),
        json!({"resolution": "approve", "approval": ["sg_1", "s4", "ab", "2026-11-29T10:30:00Z"]}),
    ] {
        assert_valid("answer", &answer, &answer.to_string());
        assert_eq!(parse_answer(&answer), Ok(()), "{answer}");
    }
}

/// The other mutation class left out: an integral double in an integer member. JSON
/// Schema reads `25000.0` as the integer 25000; serde refuses it, unless the document is
/// normalized first, as the executor does with plans (never with mandates, revocations
/// or cards). When the parsers normalize too, or refuse everywhere, this test fails.
#[test]
fn integral_doubles_are_integers_to_the_schemas() {
    let mut mandate = example_mandates().remove(0).1;
    mandate["budget"]["amountMinor"] = json!(25000.0);
    assert!(validator("mandate").is_valid(&mandate));
    assert!(Mandate::from_value(&mandate).is_err());

    let mut plan = example_plans().remove(0).1;
    plan["planVersion"] = json!(1.0);
    plan["mandate"]["budget"]["amountMinor"] = json!(100000000.0);
    assert!(validator("plan").is_valid(&plan));
    assert!(Plan::from_value(&plan).is_err(), "serde refuses a double");
    assert_eq!(
        Kind::Plan.parse(&plan),
        Ok(()),
        "the executor normalizes first"
    );

    let (_, mut params) = card_params().remove(0);
    let declaration = params["skills"]
        .as_object_mut()
        .unwrap()
        .values_mut()
        .next()
        .unwrap();
    declaration["timeoutMs"] = json!(5000.0);
    assert!(validator("skill-declarations").is_valid(&params));
    assert!(ReversibilityParams::from_value(&params).is_err());
}
