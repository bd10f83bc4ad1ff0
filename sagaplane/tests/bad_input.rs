//! Hostile and broken input: every case gets a clear one-line error or a result, never a panic.

mod common;

use std::io::Write;

use common::*;

fn validate(plan: &std::path::Path) -> std::process::Output {
    validate_plan(plan, &[])
}

fn assert_clean_failure(out: &std::process::Output, status: i32, needle: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(status), "{err}");
    assert!(err.contains(needle), "expected {needle:?} in {err:?}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
}

#[test]
fn missing_file() {
    let out = validate(std::path::Path::new("/nonexistent/plan.json"));
    assert_clean_failure(&out, 2, "cannot open /nonexistent/plan.json");
}

#[test]
fn bad_json_names_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plan.json");
    std::fs::write(&path, "{\n  \"sagaId\": \"x\",\n  \"goal\" \"oops\"\n}\n").unwrap();
    let out = validate(&path);
    assert_clean_failure(&out, 2, "plan.json:3:");
    assert!(stderr(&out).contains("invalid JSON"));
}

#[test]
fn deeply_nested_json() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deep.json");
    std::fs::write(
        &path,
        format!("{}{}", "[".repeat(10_000), "]".repeat(10_000)),
    )
    .unwrap();
    assert_clean_failure(&validate(&path), 2, "recursion limit");
    let out = sagaplane(&[
        "plan",
        "verify",
        p(&path),
        "--trust",
        p(&test_planner_pub()),
    ]);
    assert_clean_failure(&out, 2, "recursion limit");
}

#[test]
fn fifty_megabyte_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.json");
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(b"{\"goal\": \"").unwrap();
    let chunk = vec![b'a'; 1024 * 1024];
    for _ in 0..50 {
        f.write_all(&chunk).unwrap();
    }
    f.write_all(b"\"}").unwrap();
    drop(f);
    assert_clean_failure(&validate(&path), 2, "16 MiB");
}

#[test]
fn non_utf8_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("latin1.json");
    std::fs::write(&path, b"{\"goal\": \"Gr\xfc\xdfe\"}").unwrap();
    assert_clean_failure(&validate(&path), 2, "not UTF-8");
}

#[test]
fn a_plan_of_ten_thousand_steps_gets_a_result() {
    let dir = tempfile::tempdir().unwrap();
    let mut plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(example_plan()).unwrap()).unwrap();
    let template = plan["steps"][1].clone(); // budget.reserve, compensable
    plan["steps"] = (0..10_000)
        .map(|i| {
            let mut s = template.clone();
            s["id"] = format!("b{i}").into();
            s["idempotencyKey"] = format!("sg_demo_supplier_onboarding:b{i}").into();
            s["args"]["vendorId"] = "v_1".into();
            s
        })
        .collect();
    plan["pivotIndex"] = serde_json::Value::Null;
    let path = dir.path().join("huge.json");
    std::fs::write(&path, plan.to_string()).unwrap();
    let signed = sign_plan(dir.path(), &path, &test_planner_key());
    let out = validate(&signed);
    // 10,000 budget lines of up to 3 × 3 s each: the first ones' 24 h undo expires.
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("UNDO_TTL_TOO_SHORT"),
        "{}",
        &text[..text.len().min(2000)]
    );
}

#[test]
fn a_plan_that_is_not_an_object() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("array.json");
    std::fs::write(&path, "[1, 2, 3]").unwrap();
    let out = validate(&path);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains("SCHEMA_INVALID"));
    let out = sagaplane(&["plan", "sign", p(&path), "--key", p(&test_planner_key())]);
    assert_clean_failure(&out, 2, "SCHEMA_INVALID");
}
