//! The A2A documents this crate has no parser for: the call the executor sends a tool
//! (`tool-call.schema.json`) and a tool's answer that settles it
//! (`tool-answer.schema.json`), checked on documents shaped as `A2aInvoker::invoke` and
//! the A2A SDK write them, and on near misses each.

use serde_json::{Value, json};
use shared_types::REVERSIBILITY_EXTENSION_URI;

use crate::registry::{assert_invalid, assert_valid, read_json, repo};

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
