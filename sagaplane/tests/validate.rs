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

/// A plan made when the planner planned a goal again names the saga it supersedes, and
/// validates like any plan.
#[test]
fn a_plan_that_supersedes_another_is_valid() {
    let dir = tempfile::tempdir().unwrap();
    let plan = root().join("examples/plans/supplier-onboarding-replanned.json");
    let signed = sign_plan(dir.path(), &plan, &test_planner_key());
    let out = validate(&signed, false);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).starts_with("valid: plan sg_demo_supplier_replanned v1 (6 steps)"));
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

/// The violations of a `--json` report, as (code, step).
fn codes(out: &std::process::Output) -> Vec<(String, String)> {
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    report["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["code"].as_str().unwrap().to_owned(),
                v["step"].as_str().unwrap_or("-").to_owned(),
            )
        })
        .collect()
}

#[test]
fn a_mandate_counts_only_from_a_trusted_principal() {
    let dir = tempfile::tempdir().unwrap();
    let signed = sign_plan(dir.path(), &example_plan(), &test_planner_key());
    let cards = root().join("agent-cards");
    let planner = test_planner_pub();
    let mut args = vec![
        "plan",
        "validate",
        p(&signed),
        "--catalog",
        p(&cards),
        "--trust",
        p(&planner),
        "--at",
        "2026-11-29T12:00:00Z",
        "--json",
    ];
    let out = sagaplane(&args);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert_eq!(codes(&out), [("MANDATE_UNTRUSTED".into(), "-".into())]);
    // A planner key is no principal, even when it signed the plan.
    args.extend(["--principal", p(&planner)]);
    let out = sagaplane(&args);
    assert_eq!(codes(&out), [("MANDATE_UNTRUSTED".into(), "-".into())]);
}

#[test]
fn plan_sign_embeds_the_mandate_it_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let signed = dir.path().join("signed.json");
    let no_mail = root().join("examples/mandates/test-mandate-no-mail.signed.json");
    let out = sagaplane(&[
        "plan",
        "sign",
        p(&example_plan()),
        "--key",
        p(&test_planner_key()),
        "--mandate",
        p(&no_mail),
        "--out",
        p(&signed),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let plan: Value = serde_json::from_str(&std::fs::read_to_string(&signed).unwrap()).unwrap();
    let mandate: Value = serde_json::from_str(&std::fs::read_to_string(&no_mail).unwrap()).unwrap();
    assert_eq!(plan["mandate"], mandate, "embedded unchanged");
    let out = validate(&signed, true);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(codes(&out), [("MANDATE_SCOPE".into(), "s5".into())]);
}

/// `--max-parallel-steps` is the bound the undo deadlines are timed with: the sandbox's
/// undo (27 s here) outlasts two checks side by side before the capture, not the two one
/// after the other (6.75 + 6.75 + 16.5 = 30 s).
#[test]
fn undo_deadlines_are_timed_with_the_executors_parallel_bound() {
    let dir = tempfile::tempdir().unwrap();
    let mut plan: Value =
        serde_json::from_str(&std::fs::read_to_string(example_plan()).unwrap()).unwrap();
    let template = plan["steps"].as_array().unwrap().clone();
    let mut check = template[3].clone();
    check["args"]["tenantId"] = serde_json::json!("$steps.s1.response.body#/tenantId");
    let mut steps = vec![
        template[0].clone(),
        template[2].clone(),
        check.clone(),
        check,
        template[4].clone(),
        template[5].clone(),
    ];
    for (i, step) in steps.iter_mut().enumerate() {
        step["id"] = serde_json::json!(format!("s{i}"));
        step["idempotencyKey"] = serde_json::json!(format!("sg_demo_supplier_onboarding:s{i}"));
    }
    steps[3]["after"] = serde_json::json!(["s1"]);
    steps[4]["after"] = serde_json::json!(["s2", "s3"]);
    steps[5]["args"]["login"] = serde_json::json!("$steps.s1.response.body#/login");
    plan["steps"] = Value::Array(steps);
    plan["pivotIndex"] = serde_json::json!(4);
    let unsigned = dir.path().join("fork.json");
    std::fs::write(&unsigned, plan.to_string()).unwrap();
    let signed = sign_plan(dir.path(), &unsigned, &test_planner_key());

    // The demo's cards, the sandbox's undo shortened to 27 s.
    let cards = dir.path().join("cards");
    std::fs::create_dir(&cards).unwrap();
    for entry in std::fs::read_dir(root().join("agent-cards")).unwrap() {
        let path = entry.unwrap().path();
        let mut card: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        if path.file_name().unwrap() == "sandbox.json" {
            let ttl = card
                .pointer_mut(
                    "/capabilities/extensions/0/params/skills/sandbox.provision/undoTtlSeconds",
                )
                .expect("the sandbox card declares sandbox.provision's undo TTL");
            *ttl = serde_json::json!(27);
        }
        std::fs::write(cards.join(path.file_name().unwrap()), card.to_string()).unwrap();
    }
    let run = |extra: &[&str]| {
        let mut args = vec!["--at", "2026-11-29T12:00:00Z", "--json"];
        args.extend_from_slice(extra);
        validate_plan_against(&signed, &cards, &args)
    };
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let out = run(&["--max-parallel-steps", "2"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let out = run(&["--max-parallel-steps", "1"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert_eq!(codes(&out), [("UNDO_TTL_TOO_SHORT".into(), "s1".into())]);
    assert!(stdout(&out).contains("30.0 s"), "{}", stdout(&out));
    let out = run(&["--max-parallel-steps", "0"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--max-parallel-steps"),
        "{}",
        stderr(&out)
    );
}
