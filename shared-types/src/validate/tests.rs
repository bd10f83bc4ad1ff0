//! Validator tests over the committed agent cards and example plans: the valid plan
//! passes, each invalid plan trips exactly its own code, and nothing panics.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::*;
use crate::catalog::Catalog;
use crate::json::parse_strict;
use crate::signing::{Jwk, SigningIdentity, TrustStore};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    parse_strict(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub(crate) fn supplier_catalog() -> Catalog {
    let mut catalog = Catalog::default();
    let mut paths: Vec<_> = std::fs::read_dir(root().join("agent-cards"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    for path in paths {
        catalog.add_card(&read(&path)).unwrap();
    }
    catalog
}

fn planner() -> SigningIdentity {
    let jwk: Jwk =
        serde_json::from_value(read(&root().join("examples/keys/test-planner.jwk"))).unwrap();
    SigningIdentity::from_jwk(&jwk).unwrap()
}

fn principal() -> SigningIdentity {
    let jwk: Jwk =
        serde_json::from_value(read(&root().join("examples/keys/test-principal.jwk"))).unwrap();
    SigningIdentity::from_jwk(&jwk).unwrap()
}

pub(crate) fn principals() -> TrustStore {
    let mut trust = TrustStore::new();
    trust.add_jwk(&principal().public_jwk()).unwrap();
    trust
}

fn validator() -> PlanValidator {
    let mut trust = TrustStore::new();
    trust.add_jwk(&planner().public_jwk()).unwrap();
    PlanValidator::new(supplier_catalog(), trust)
        .unwrap()
        .with_principals(principals())
}

/// The plan with its mandate signed again by the test principal, after a change to it.
fn regranted(mut plan: Value) -> Value {
    principal().sign_in_place(&mut plan["mandate"]).unwrap();
    plan
}

fn now() -> DateTime<Utc> {
    "2026-11-29T12:00:00Z".parse().unwrap()
}

fn signed(mut plan: Value) -> Value {
    if plan.get("signatures").is_none() {
        planner().sign_in_place(&mut plan).unwrap();
    }
    plan
}

/// Signs when the value can be signed at all (mutations may make it unsignable).
fn try_signed(mut plan: Value) -> Value {
    let _ = planner().sign_in_place(&mut plan);
    plan
}

fn example() -> Value {
    read(&root().join("examples/plans/supplier-onboarding.json"))
}

fn codes(report: &Report) -> Vec<ViolationCode> {
    report.violations.iter().map(|v| v.code).collect()
}

#[test]
fn every_card_enters_the_catalog() {
    let catalog = supplier_catalog();
    assert_eq!(catalog.agents.len(), 6);
    assert!(
        catalog
            .declaration("payments", "payments.capture")
            .unwrap()
            .pivot
    );
}

#[test]
fn the_example_plan_is_valid() {
    let report = validator().validate(&signed(example()), now());
    assert_eq!(report.violations, vec![], "the example plan must pass");
    assert_eq!(report.plan.unwrap().steps.len(), 6);
}

#[test]
fn each_invalid_plan_trips_exactly_its_code() {
    let validator = validator();
    let dir = root().join("examples/plans/invalid");
    let mut seen = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_str().unwrap().to_owned();
        let expected: ViolationCode =
            serde_json::from_value(json!(name.replace('-', "_").to_uppercase())).unwrap();
        seen.push(expected);
        let plan = signed(read(&path));
        // Budgets and revocations are the executor's state: each of these plans is valid on
        // its own, and is refused there (executor-agent/tests/mandates.rs).
        if matches!(
            expected,
            ViolationCode::MandateExhausted | ViolationCode::MandateRevoked
        ) {
            assert_eq!(
                validator.validate(&plan, now()).violations,
                vec![],
                "{name}"
            );
            continue;
        }
        if expected == ViolationCode::PlanConflict {
            let accepted = signed(example());
            let Resubmission::Conflict(v) = compare_with_accepted(&accepted, &plan) else {
                panic!("{name}: expected a conflict");
            };
            assert_eq!(v.code, ViolationCode::PlanConflict);
            // On its own, the conflicting plan is a valid plan.
            assert!(validator.validate(&plan, now()).is_valid());
            continue;
        }
        let report = validator.validate(&plan, now());
        assert_eq!(
            codes(&report),
            vec![expected],
            "{name}: {:#?}",
            report.violations
        );
        assert!(!report.violations[0].message.is_empty());
    }
    seen.sort();
    assert_eq!(
        seen,
        ViolationCode::ALL.to_vec(),
        "one invalid plan per code"
    );
}

#[test]
fn resubmission_of_the_same_plan_is_identical() {
    let accepted = signed(example());
    // Signed again by the same key: the same plan.
    let again = signed(example());
    assert_eq!(
        compare_with_accepted(&accepted, &again),
        Resubmission::Identical
    );
    // The same content signed by another key is not: another planner must never be
    // matched with the saga (and the task) of the one that signed it first.
    let mut copied = example();
    SigningIdentity::from_seed([3; 32], Some("planner-b".into()))
        .sign_in_place(&mut copied)
        .unwrap();
    let Resubmission::Conflict(v) = compare_with_accepted(&accepted, &copied) else {
        panic!("another signer's copy must conflict");
    };
    assert_eq!(v.code, ViolationCode::PlanConflict);
    // A saga id carries one plan: another version is a conflict that says what to do.
    let mut next = example();
    next["planVersion"] = json!(2);
    let Resubmission::Conflict(v) = compare_with_accepted(&accepted, &next) else {
        panic!("another version of a saga must conflict");
    };
    assert_eq!(v.code, ViolationCode::PlanConflict);
    assert!(v.message.contains("new sagaId"), "{}", v.message);
    let mut other = example();
    other["sagaId"] = json!("sg_another");
    assert_eq!(
        compare_with_accepted(&accepted, &other),
        Resubmission::Unrelated
    );
}

#[test]
fn five_violations_are_all_reported_in_order() {
    let plan = signed(read(&root().join("examples/plans/five-violations.json")));
    let report = validator().validate(&plan, now());
    let got: Vec<(ViolationCode, Option<&str>)> = report
        .violations
        .iter()
        .map(|v| (v.code, v.step.as_deref()))
        .collect();
    assert_eq!(
        got,
        vec![
            (ViolationCode::IdempotencyKeyMismatch, Some("s0")),
            (ViolationCode::ArgsInvalid, Some("s1")),
            (ViolationCode::BadReference, Some("s2")),
            (ViolationCode::MandateExceeded, Some("s4")),
            (ViolationCode::ClassMismatch, Some("s5")),
        ]
    );
}

#[test]
fn unsigned_and_untrusted_plans() {
    let v = validator();
    assert_eq!(
        codes(&v.validate(&example(), now())),
        vec![ViolationCode::SignatureInvalid]
    );
    let mut other = example();
    SigningIdentity::from_seed([4; 32], None)
        .sign_in_place(&mut other)
        .unwrap();
    assert_eq!(
        codes(&v.validate(&other, now())),
        vec![ViolationCode::SignerUntrusted]
    );
}

#[test]
fn undo_ttl_counts_the_steps_in_between() {
    // A sandbox whose undo expires after 1 s, followed by a compliance check that may
    // take 3 × 2 s plus backoffs: the undo could expire before it is needed.
    let mut catalog = supplier_catalog();
    let sandbox = catalog.agents.get_mut("sandbox").unwrap();
    sandbox
        .skills
        .get_mut("sandbox.provision")
        .unwrap()
        .undo_ttl_seconds = Some(1);
    let mut trust = TrustStore::new();
    trust.add_jwk(&planner().public_jwk()).unwrap();
    let validator = PlanValidator::new(catalog, trust)
        .unwrap()
        .with_principals(principals());
    let report = validator.validate(&signed(example()), now());
    assert_eq!(codes(&report), vec![ViolationCode::UndoTtlTooShort]);
    assert_eq!(report.violations[0].step.as_deref(), Some("s2"));
}

#[test]
fn mandate_checks_currency_and_worst_case_path() {
    let v = validator();
    let mut plan = example();
    plan["steps"][4]["args"]["currency"] = json!("USD");
    assert_eq!(
        codes(&v.validate(&signed(plan), now())),
        vec![ViolationCode::MandateExceeded]
    );
    // Expires one second from now: the worst-case path takes far longer.
    let mut plan = example();
    plan["mandate"]["notAfter"] = json!("2026-11-29T12:00:01Z");
    assert_eq!(
        codes(&v.validate(&signed(regranted(plan)), now())),
        vec![ViolationCode::MandateExpired]
    );
    // Not valid yet.
    let mut plan = example();
    plan["mandate"]["notBefore"] = json!("2026-11-30T00:00:00Z");
    let report = v.validate(&signed(regranted(plan)), now());
    assert_eq!(codes(&report), vec![ViolationCode::MandateExpired]);
    assert!(report.violations[0].message.contains("valid from"));
    // An amount bound at run time cannot be bounded by the mandate (a member s3's
    // outputSchema declares, so that this is the only violation).
    let mut plan = example();
    plan["steps"][4]["args"]["amountMinor"] = json!("$steps.s3.response.body#/reference");
    assert_eq!(
        codes(&v.validate(&signed(plan), now())),
        vec![ViolationCode::MandateExceeded]
    );
}

#[test]
fn a_plan_of_ten_thousand_steps_is_checked_quickly_enough_to_finish() {
    let mut plan = example();
    let template = plan["steps"][3].clone(); // compliance.check: retriable, read-only
    let steps: Vec<Value> = (0..10_000)
        .map(|i| {
            let mut s = template.clone();
            s["id"] = json!(format!("c{i}"));
            s["idempotencyKey"] = json!(format!("sg_demo_supplier_onboarding:c{i}"));
            s["args"] = json!({"vendorId": "v1", "tenantId": "t1"});
            s
        })
        .collect();
    plan["steps"] = Value::Array(steps);
    plan["pivotIndex"] = Value::Null;
    let report = validator().validate(&signed(plan), now());
    // 10,000 × 2 s × 3 attempts outlasts nothing here (the mandate is until 2099): valid.
    assert_eq!(report.violations, vec![]);
}

#[test]
fn a_mandate_grants_only_what_its_principal_signed_to_whom_it_names() {
    let v = validator();
    let refused = |plan: Value| {
        let report = v.validate(&plan, now());
        assert!(report.mandate_signer.is_none() || !report.is_valid());
        report.violations
    };
    let only = |violations: Vec<Violation>, code: ViolationCode, words: &str| {
        assert_eq!(
            violations.iter().map(|v| v.code).collect::<Vec<_>>(),
            vec![code],
            "{violations:#?}"
        );
        assert!(
            violations[0].message.contains(words),
            "{}",
            violations[0].message
        );
    };
    // Accepted first, the principal's signature remembered by this validator: the same
    // signature over changed content is still checked, below.
    assert!(v.validate(&signed(example()), now()).is_valid());
    // The budget raised after the principal signed.
    let mut raised = example();
    raised["mandate"]["perSaga"]["amountMinor"] = json!(9_000_000);
    only(
        refused(signed(raised)),
        ViolationCode::MandateUntrusted,
        "does not match",
    );
    // Signed by the planner's own key.
    let mut own = example();
    planner().sign_in_place(&mut own["mandate"]).unwrap();
    only(
        refused(signed(own)),
        ViolationCode::MandateUntrusted,
        "planner key",
    );
    // A planner that is not a grantee.
    let mut other = example();
    other["mandate"]["grantees"] = json!(["someone-else"]);
    only(
        refused(signed(regranted(other))),
        ViolationCode::MandateUntrusted,
        "not granted to planner key \"test-planner\"",
    );
    // No principal trusted at all.
    let untrusting = PlanValidator::new(supplier_catalog(), {
        let mut t = TrustStore::new();
        t.add_jwk(&planner().public_jwk()).unwrap();
        t
    })
    .unwrap();
    let violations = untrusting.validate(&signed(example()), now()).violations;
    only(
        violations,
        ViolationCode::MandateUntrusted,
        "not a trusted principal",
    );
    // Over the per-saga cap.
    let mut capped = example();
    capped["mandate"]["perSaga"]["amountMinor"] = json!(11_999);
    only(
        refused(signed(regranted(capped))),
        ViolationCode::MandateExceeded,
        "per-saga cap of 11999",
    );
    // A skill outside the scope: one violation, on its step.
    let mut narrow = example();
    narrow["mandate"]["scope"] = json!([
        {"agent": "vendor-registry", "skills": ["vendor.create"]},
        {"agent": "budget", "skills": ["budget.reserve"]},
        {"agent": "sandbox", "skills": ["sandbox.provision"]},
        {"agent": "compliance-registry", "skills": ["compliance.check"]},
        {"agent": "payments", "skills": ["payments.capture"]}
    ]);
    let violations = refused(signed(regranted(narrow)));
    assert_eq!(violations[0].step.as_deref(), Some("s5"));
    only(
        violations,
        ViolationCode::MandateScope,
        "does not allow email.send",
    );
    // And the whole example is a grant of test-principal's.
    let report = v.validate(&signed(example()), now());
    assert_eq!(report.mandate_signer.as_deref(), Some("test-principal"));
    assert_eq!(
        v.step_spends(report.plan.as_ref().unwrap()),
        vec![0, 0, 0, 0, 12000, 0]
    );
}

mod properties {
    use proptest::prelude::*;

    use super::*;

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            "[$a-z0-9#/.{}~]{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 64, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::btree_map("[a-zA-Z]{1,12}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Replaces the value at a random place in the example plan.
    fn mutated_plan() -> impl Strategy<Value = Value> {
        (any::<prop::sample::Index>(), arb_json()).prop_map(|(index, replacement)| {
            let mut plan = example();
            let mut paths = Vec::new();
            collect_paths(&plan, String::new(), &mut paths);
            let path = index.get(&paths).clone();
            if let Some(slot) = plan.pointer_mut(&path) {
                *slot = replacement;
            }
            plan
        })
    }

    fn collect_paths(value: &Value, here: String, out: &mut Vec<String>) {
        out.push(here.clone());
        match value {
            Value::Object(map) => {
                for (k, v) in map {
                    collect_paths(v, format!("{here}/{}", crate::expr::escape_token(k)), out);
                }
            }
            Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    collect_paths(v, format!("{here}/{i}"), out);
                }
            }
            _ => {}
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Arbitrary JSON never panics the validator, and always gets a verdict.
        #[test]
        fn validator_never_panics_on_arbitrary_json(value in arb_json()) {
            let report = validator().validate(&value, now());
            prop_assert!(!report.is_valid());
        }

        /// A mandate changed anywhere and signed again by the principal never panics the
        /// validator, and every refusal comes with its reason; changed and not signed
        /// again, it is never a grant.
        #[test]
        fn mutated_mandates_are_refused_with_a_reason(
            (index, replacement) in (any::<prop::sample::Index>(), arb_json())
        ) {
            let mut plan = example();
            let mut paths = Vec::new();
            collect_paths(&plan["mandate"], String::new(), &mut paths);
            let path = index.get(&paths).clone();
            if path.starts_with("/signatures") {
                return Ok(());
            }
            let before = plan["mandate"].clone();
            if let Some(slot) = plan["mandate"].pointer_mut(&path) {
                *slot = replacement;
            }
            let changed = plan["mandate"] != before;
            let unsigned = validator().validate(&try_signed(plan.clone()), now());
            if changed {
                prop_assert!(!unsigned.is_valid());
                prop_assert!(unsigned.mandate_signer.is_none());
            }
            if plan["mandate"].is_object() {
                let _ = principal().sign_in_place(&mut plan["mandate"]);
            }
            let report = validator().validate(&try_signed(plan), now());
            for v in &report.violations {
                prop_assert!(!v.message.is_empty());
            }
        }

        /// A plan mutated anywhere never panics the validator; a signed, mutated plan
        /// is valid only if the mutation left it valid.
        #[test]
        fn validator_never_panics_on_mutated_plans(plan in mutated_plan()) {
            let report = validator().validate(&try_signed(plan), now());
            for v in &report.violations {
                prop_assert!(!v.message.is_empty());
            }
        }
    }
}

/// Flipping one bit of any byte of a signed plan's text never leaves a plan that
/// verifies: the text stops parsing, or verification fails — with SIGNATURE_INVALID
/// whenever the flipped byte is in the signed content.
#[test]
fn flipping_any_byte_of_a_signed_plan_fails_verification() {
    let mut trust = TrustStore::new();
    trust.add_jwk(&planner().public_jwk()).unwrap();
    let text = serde_json::to_string_pretty(&signed(example())).unwrap();
    let signatures_at = text.find("\"signatures\"").unwrap();
    let mut content_flips = 0;
    for i in 0..text.len() {
        let mut bytes = text.clone().into_bytes();
        bytes[i] ^= 0x01;
        let Ok(value) = crate::json::parse_strict_bytes(&bytes) else {
            continue;
        };
        match trust.verify(&value) {
            Ok(kid) => panic!("byte {i}: still verifies (by {kid})"),
            Err(Error::SignatureInvalid(_)) => content_flips += usize::from(i < signatures_at),
            Err(e) => assert!(i >= signatures_at, "byte {i} in the content gave {e}"),
        }
    }
    assert!(
        content_flips > 500,
        "{content_flips} flips in the content parsed and were caught"
    );
}

#[test]
fn plans_and_declarations_round_trip_through_their_types() {
    let plan = example();
    let typed = Plan::from_value(&plan).unwrap();
    assert_eq!(serde_json::to_value(&typed).unwrap(), plan);

    for (name, agent) in &supplier_catalog().agents {
        let card = read(&root().join(format!("agent-cards/{name}.json")));
        let declared = &card["capabilities"]["extensions"][0]["params"]["skills"];
        assert_eq!(
            &serde_json::to_value(&agent.skills).unwrap(),
            declared,
            "{name}"
        );
    }
}

#[test]
fn typing_errors_name_the_field() {
    let mut plan = example();
    plan["mandate"].as_object_mut().unwrap().remove("notAfter");
    let err = Plan::from_value(&plan).unwrap_err();
    assert!(err.contains("notAfter"), "{err}");
    let mut plan = example();
    plan["steps"][0]["compensations"] = json!({});
    let err = Plan::from_value(&plan).unwrap_err();
    assert!(err.contains("compensations"), "{err}");
    let mut plan = example();
    plan["steps"][0]["args"] = json!([1]);
    let err = Plan::from_value(&plan).unwrap_err();
    assert!(err.contains("map"), "{err}");
}

#[test]
fn contradictory_cards_are_refused_with_the_reason() {
    let card = read(&root().join("agent-cards/budget.json"));
    let cases: &[(&str, Value, &str)] = &[
        (
            "/capabilities/extensions/0/params/skills/budget.reserve/class",
            json!("irreversible"),
            "irreversible but declares a compensation",
        ),
        (
            "/capabilities/extensions/0/params/skills/budget.reserve/compensation/skill",
            json!("budget.refund"),
            "which this agent does not have",
        ),
        (
            "/capabilities/extensions/0/params/skills/budget.reserve/compensation/argsWhenUnknown",
            json!({"id": "$response.body#/reservationId"}),
            "no response when the outcome is unknown",
        ),
        (
            "/capabilities/extensions/0/params/skills/budget.reserve/undoTTLSeconds",
            json!(60),
            "unknown field `undoTTLSeconds`",
        ),
        (
            "/capabilities/extensions/0/params/skills/budget.reserve/readOnly",
            json!(true),
            "marked readOnly but is not retriable",
        ),
        (
            "/capabilities/extensions/0/params/skills/budget.release/compensation",
            json!({"skill": "budget.reserve", "args": {}}),
            "is retriable; only compensable",
        ),
        (
            "/capabilities/extensions/0/params/skills/budget.reserve/spend",
            json!({"amountMinor": "$response.body#/x", "currency": "EUR"}),
            "spend may only read",
        ),
        (
            "/capabilities/extensions/0/params/skills/budget.reserve/inputSchema",
            json!({"type": 12}),
            "not a valid JSON Schema",
        ),
    ];
    for (pointer, value, reason) in cases {
        let mut bad = card.clone();
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        bad.pointer_mut(parent).unwrap()[key] = value.clone();
        let err = Catalog::default().add_card(&bad).unwrap_err().to_string();
        assert!(err.contains(reason), "{pointer}: {err}");
    }
}

/// The example plan with one argument of one step replaced.
fn with_arg(step: usize, name: &str, value: Value) -> Value {
    let mut plan = example();
    plan["steps"][step]["args"][name] = value;
    plan
}

#[test]
fn a_misspelt_member_of_an_earlier_result_is_a_bad_reference_naming_what_exists() {
    // s5 (email.send, after the pivot) reads s2's login: misspelt, it was found only once
    // the payment was captured.
    let plan = with_arg(5, "login", json!("$steps.s2.response.body#/logn"));
    let report = validator().validate(&signed(plan), now());
    assert_eq!(codes(&report), vec![ViolationCode::BadReference]);
    let violation = &report.violations[0];
    assert_eq!(violation.step.as_deref(), Some("s5"));
    for needle in [
        "'/login'",
        "#/logn",
        "sandbox.provision (step s2)",
        "\"logn\"",
        "\"login\"",
        "\"tenantId\"",
    ] {
        assert!(
            violation.message.contains(needle),
            "{needle} in {}",
            violation.message
        );
    }
    // Templates count too.
    let plan = with_arg(5, "login", json!("user {$steps.s2.response.body#/logn}"));
    let report = validator().validate(&signed(plan), now());
    assert_eq!(codes(&report), vec![ViolationCode::BadReference]);
    // The right member, whole or in a template, passes.
    for value in [
        json!("$steps.s2.response.body#/login"),
        json!("user {$steps.s2.response.body#/login} of {$steps.s0.response.body#/vendorId}"),
    ] {
        let report = validator().validate(&signed(with_arg(5, "login", value)), now());
        assert_eq!(report.violations, vec![]);
    }
    // Deeper than a declared string, or into the whole result, is checked as well.
    let plan = with_arg(5, "login", json!("$steps.s2.response.body#/login/first"));
    let report = validator().validate(&signed(plan), now());
    assert_eq!(codes(&report), vec![ViolationCode::BadReference]);
    assert!(
        report.violations[0].message.contains("is a string"),
        "{}",
        report.violations[0].message
    );
}

/// A validator over the demo cards, with `skill`'s declaration changed by `edit`.
fn validator_with(
    agent: &str,
    skill: &str,
    edit: impl FnOnce(&mut SkillDeclaration),
) -> PlanValidator {
    let mut catalog = supplier_catalog();
    edit(
        catalog
            .agents
            .get_mut(agent)
            .unwrap()
            .skills
            .get_mut(skill)
            .unwrap(),
    );
    let mut trust = TrustStore::new();
    trust.add_jwk(&planner().public_jwk()).unwrap();
    PlanValidator::new(catalog, trust)
        .unwrap()
        .with_principals(principals())
}

#[test]
fn pointers_into_a_result_without_an_output_schema_are_not_checked() {
    let validator = validator_with("sandbox", "sandbox.provision", |d| d.output_schema = None);
    let plan = with_arg(5, "login", json!("$steps.s2.response.body#/logn"));
    assert_eq!(validator.validate(&signed(plan), now()).violations, vec![]);
}

#[test]
fn nested_and_array_pointers_follow_the_output_schema() {
    let validator = validator_with("sandbox", "sandbox.provision", |d| {
        d.output_schema = Some(json!({
            "type": "object",
            "properties": {
                "tenantId": {"type": "string"},
                "login": {"type": "string"},
                "admin": {"type": "object", "properties": {"login": {"type": "string"}}},
                "hosts": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}}
            }
        }))
    });
    let verdict = |pointer: &str| {
        let plan = with_arg(
            5,
            "login",
            json!(format!("$steps.s2.response.body#{pointer}")),
        );
        validator.validate(&signed(plan), now()).violations
    };
    for good in [
        "/admin/login",
        "/hosts/0/name",
        "/hosts/12/name",
        "/hosts",
        "/admin",
        "",
    ] {
        assert_eq!(verdict(good), vec![], "{good}");
    }
    for (bad, says) in [
        ("/admin/logn", "under '/admin'"),
        ("/hosts/0/nam", "under '/hosts/0'"),
        ("/hosts/first/name", "not an index"),
        ("/hosts/-/name", "'-'"),
    ] {
        let violations = verdict(bad);
        assert_eq!(violations.len(), 1, "{bad}: {violations:?}");
        assert_eq!(violations[0].code, ViolationCode::BadReference);
        assert!(
            violations[0].message.contains(says),
            "{bad}: {}",
            violations[0].message
        );
    }
}

#[test]
fn the_compensation_that_will_run_must_read_what_the_schemas_declare() {
    // A curated card whose undo reads a member its result does not declare is refused...
    let mut card = read(&root().join("agent-cards/vendor-registry.json"));
    card["capabilities"]["extensions"][0]["params"]["skills"]["vendor.create"]["compensation"]["args"]
        ["vendorId"] = json!("$response.body#/vendorid");
    let err = Catalog::default().add_card(&card).unwrap_err().to_string();
    assert!(
        err.contains("vendorid") && err.contains("\"vendorId\""),
        "{err}"
    );
    // ... and a catalog assembled otherwise gets BAD_REFERENCE on the step it undoes.
    let validator = validator_with("vendor-registry", "vendor.create", |d| {
        if let Some(c) = d.compensation.as_mut() {
            c.args = json!({"vendorId": "$response.body#/vendorid"});
        }
    });
    let mut plan = example();
    plan["steps"][0]["compensation"]["args"] = json!({"vendorId": "$response.body#/vendorid"});
    let report = validator.validate(&signed(plan), now());
    assert_eq!(codes(&report), vec![ViolationCode::BadReference]);
    assert_eq!(report.violations[0].step.as_deref(), Some("s0"));
    // Its $request.body and the spend read the input schema.
    let mut card = read(&root().join("agent-cards/budget.json"));
    let reserve = &mut card["capabilities"]["extensions"][0]["params"]["skills"]["budget.reserve"];
    reserve["compensation"]["argsWhenUnknown"] =
        json!({"forwardKey": "$step.idempotencyKey", "v": "$request.body#/vendor"});
    let err = Catalog::default().add_card(&card).unwrap_err().to_string();
    assert!(
        err.contains("argsWhenUnknown") && err.contains("inputSchema"),
        "{err}"
    );
    let mut card = read(&root().join("agent-cards/budget.json"));
    let reserve = &mut card["capabilities"]["extensions"][0]["params"]["skills"]["budget.reserve"];
    reserve["spend"] =
        json!({"amountMinor": "$request.body#/amount", "currency": "$request.body#/currency"});
    let err = Catalog::default().add_card(&card).unwrap_err().to_string();
    assert!(
        err.contains("spend.amountMinor") && err.contains("\"amountMinor\""),
        "{err}"
    );
}

#[test]
fn an_undo_deadline_is_read_from_a_member_of_the_result_the_output_schema_declares() {
    let budget = |at: Value| {
        let mut card = read(&root().join("agent-cards/budget.json"));
        card["capabilities"]["extensions"][0]["params"]["skills"]["budget.reserve"]["undoExpiresAt"] =
            at;
        card
    };
    // The committed card declares one, and it types.
    let catalog = supplier_catalog();
    assert_eq!(
        catalog
            .declaration("budget", "budget.reserve")
            .and_then(|d| d.undo_expires_at.as_deref()),
        Some("$response.body#/holdExpiresAt")
    );
    for (bad, says) in [
        // A pointer the outputSchema does not declare (a typo).
        (json!("$response.body#/holdExpiresat"), "\"holdExpiresAt\""),
        // Not an expression, or one with no pointer.
        (
            json!("$response.body/holdExpiresAt"),
            "not a runtime expression",
        ),
        (json!("$response.body#holdExpiresAt"), "pointer"),
        (json!("tomorrow"), "not a runtime expression"),
        // Another source than the step's own result.
        (json!("$request.body#/vendorId"), "step's own result"),
        (
            json!("$steps.s0.response.body#/vendorId"),
            "step's own result",
        ),
    ] {
        let err = Catalog::default()
            .add_card(&budget(bad.clone()))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("undoExpiresAt") && err.contains(says),
            "{bad}: {err}"
        );
    }
    // Not a string at all: the declaration does not type.
    let err = Catalog::default()
        .add_card(&budget(json!(86400)))
        .unwrap_err()
        .to_string();
    assert!(err.contains("do not type"), "{err}");
    // Only a compensable skill has an undo to expire.
    let mut card = read(&root().join("agent-cards/budget.json"));
    card["capabilities"]["extensions"][0]["params"]["skills"]["budget.release"]["undoExpiresAt"] =
        json!("$response.body#/released");
    let err = Catalog::default().add_card(&card).unwrap_err().to_string();
    assert!(err.contains("is not compensable"), "{err}");
    // A catalog assembled otherwise gets BAD_REFERENCE on the step whose deadline it reads.
    let validator = validator_with("budget", "budget.reserve", |d| {
        d.undo_expires_at = Some("$response.body#/holdExpiresat".into());
    });
    let report = validator.validate(&signed(example()), now());
    assert_eq!(codes(&report), vec![ViolationCode::BadReference]);
    assert_eq!(report.violations[0].step.as_deref(), Some("s1"));
}

#[test]
fn registration_warns_of_bound_from_skills_without_an_output_schema() {
    // The demo's budget line takes an amount and spends nothing of the mandate's: said
    // once, at its registration.
    let money = |warnings: &[String]| {
        warnings
            .iter()
            .filter(|w| w.contains("declares no spend"))
            .count()
    };
    for (name, agent) in &supplier_catalog().agents {
        let warnings = crate::catalog::registration_warnings(agent);
        let expected = usize::from(name == "budget");
        assert_eq!(money(&warnings), expected, "{name}: {warnings:?}");
        assert_eq!(warnings.len(), expected, "{name}: {warnings:?}");
    }
    let mut catalog = supplier_catalog();
    let budget = catalog.agents.get_mut("budget").unwrap();
    budget.skills.get_mut("budget.reserve").unwrap().spend = Some(SpendDeclaration {
        amount_minor: json!("$request.body#/amountMinor"),
        currency: json!("$request.body#/currency"),
    });
    assert_eq!(
        crate::catalog::registration_warnings(budget),
        Vec::<String>::new()
    );
    for declaration in budget.skills.values_mut() {
        declaration.output_schema = None;
    }
    // budget.release is only an undo: nothing binds from it.
    let warnings = crate::catalog::registration_warnings(budget);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].starts_with("budget.reserve declares no outputSchema"));
    budget
        .skills
        .get_mut("budget.reserve")
        .unwrap()
        .output_schema = Some(json!({"type": "object"}));
    let warnings = crate::catalog::registration_warnings(budget);
    assert!(warnings[0].contains("admits any member"), "{warnings:?}");
}

mod partial_order;
mod pointer_walk;
mod supersedes;

#[test]
fn a_verification_must_name_a_read_only_skill_of_the_agent_and_bind_only_the_call() {
    let card = read(&root().join("agent-cards/payments.json"));
    let skills = "/capabilities/extensions/0/params/skills";
    // As committed, the capture's verification loads.
    let mut catalog = Catalog::default();
    catalog.add_card(&card).unwrap();
    let declared = catalog.declaration("payments", "payments.capture").unwrap();
    assert_eq!(
        declared.verify.as_ref().map(|v| v.skill.as_str()),
        Some("payments.status")
    );
    let cases = [
        (
            "payments.capture/verify",
            json!({"skill": "payments.refund", "args": {}}),
            "verify names payments.refund, which this agent does not have",
        ),
        (
            "payments.capture/verify",
            json!({"skill": "payments.capture", "args": {}}),
            "payments.capture cannot verify itself",
        ),
        (
            "payments.status/readOnly",
            json!(false),
            "names payments.status, which is not readOnly",
        ),
        (
            "payments.capture/verify",
            json!({"skill": "payments.status", "args": {"id": "$response.body#/captureId"}}),
            "no response when the outcome is unknown",
        ),
        (
            "payments.capture/verify",
            json!({"skill": "payments.status", "args": {"v": "$request.body#/vendor"}}),
            "inputSchema does not declare",
        ),
        (
            "payments.capture/verify",
            json!({"skill": "payments.status", "args": "forwardKey"}),
            "expected a map",
        ),
        (
            "payments.capture/verify",
            json!({"skill": "payments.status", "args": {}, "extra": 1}),
            "unknown field `extra`",
        ),
    ];
    for (at, value, reason) in cases {
        let mut bad = card.clone();
        let (parent, key) = at.rsplit_once('/').unwrap();
        bad.pointer_mut(&format!("{skills}/{parent}")).unwrap()[key] = value.clone();
        let err = Catalog::default().add_card(&bad).unwrap_err().to_string();
        assert!(err.contains(reason), "{at} = {value}: {err}");
    }
}
