//! `sagaplane plan validate`: human and JSON output, exit codes, every violation at once.

mod common;

use common::*;
use serde_json::Value;

fn validate(plan: &std::path::Path, json: bool) -> std::process::Output {
    let at = ["--at", "2026-11-29T12:00:00Z"];
    if json {
        validate_plan(plan, &[at[0], at[1], "--json"])
    } else {
        validate_plan(plan, &at)
    }
}

#[test]
fn the_example_plan_is_valid() {
    let dir = tempfile::tempdir().unwrap();
    let signed = sign_plan(dir.path(), &example_plan(), &test_planner_key());
    let out = validate(&signed, false);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).starts_with("valid: plan sg_demo_supplier_onboarding v1 (6 steps)"));
    let out = validate(&signed, true);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report, serde_json::json!({"valid": true, "violations": []}));
}

#[test]
fn five_violations_in_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let signed = sign_plan(
        dir.path(),
        &root().join("examples/plans/five-violations.json"),
        &test_planner_key(),
    );

    let out = validate(&signed, true);
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["valid"], false);
    let got: Vec<(String, String)> = report["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            assert!(v["message"].as_str().is_some_and(|m| m.len() > 20), "{v}");
            (
                v["code"].as_str().unwrap().to_owned(),
                v["step"].as_str().unwrap_or("-").to_owned(),
            )
        })
        .collect();
    let expected = [
        ("IDEMPOTENCY_KEY_MISMATCH", "s0"),
        ("ARGS_INVALID", "s1"),
        ("BAD_REFERENCE", "s2"),
        ("MANDATE_EXCEEDED", "s4"),
        ("CLASS_MISMATCH", "s5"),
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(c, s)| (c.to_string(), s.to_string()))
        .collect();
    assert_eq!(got, expected);

    let out = validate(&signed, false);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(
        text.starts_with("invalid: plan sg_demo_supplier_onboarding v1 has 5 violations"),
        "{text}"
    );
    for (code, _) in &expected {
        assert!(text.contains(code.as_str()), "{code} in {text}");
    }
}

#[test]
fn json_output_has_null_step_for_plan_level_violations() {
    let out = validate(&example_plan(), true); // unsigned
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["violations"][0]["code"], "SIGNATURE_INVALID");
    assert_eq!(report["violations"][0]["step"], Value::Null);
}

#[test]
fn validation_needs_a_usable_catalog_and_keys() {
    let dir = tempfile::tempdir().unwrap();
    let out = sagaplane(&[
        "plan",
        "validate",
        p(&example_plan()),
        "--catalog",
        p(dir.path()),
        "--trust",
        p(&test_planner_pub()),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("no *.json agent cards"),
        "{}",
        stderr(&out)
    );
}
