//! Benchmark: verify + validate a signed 50-step plan (and its principal's mandate)
//! against the demo catalog.

use std::path::Path;

use chrono::{DateTime, Utc};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use shared_types::json::parse_strict;
use shared_types::{Catalog, PlanValidator, SigningIdentity, TrustStore};

fn read(path: &Path) -> Value {
    parse_strict(&std::fs::read_to_string(path).expect("fixture")).expect("fixture JSON")
}

fn catalog(root: &Path) -> Catalog {
    let mut catalog = Catalog::default();
    for entry in std::fs::read_dir(root.join("agent-cards")).expect("agent-cards") {
        catalog
            .add_card(&read(&entry.expect("entry").path()))
            .expect("card");
    }
    catalog
}

/// The example plan stretched to 50 steps: vendor, then budget / sandbox / compliance
/// triples, then the capture and the email.
fn fifty_step_plan(root: &Path) -> Value {
    let mut plan = read(&root.join("examples/plans/supplier-onboarding.json"));
    let template: Vec<Value> = plan["steps"].as_array().expect("steps").clone();
    let saga = plan["sagaId"].as_str().expect("sagaId").to_owned();
    let mut steps = vec![template[0].clone()];
    let mut last_sandbox = String::new();
    let mut last_check = String::new();
    for i in 1..48 {
        let id = format!("s{i}");
        let mut step = template[[1, 2, 3][(i - 1) % 3]].clone();
        if step["skill"] == "sandbox.provision" {
            last_sandbox = id.clone();
        }
        if step["skill"] == "compliance.check" {
            step["args"]["tenantId"] =
                json!(format!("$steps.{last_sandbox}.response.body#/tenantId"));
            last_check = id.clone();
        }
        step["id"] = json!(id);
        step["idempotencyKey"] = json!(format!("{saga}:{id}"));
        steps.push(step);
    }
    let mut capture = template[4].clone();
    capture["id"] = json!("s48");
    capture["idempotencyKey"] = json!(format!("{saga}:s48"));
    capture["args"]["complianceReference"] =
        json!(format!("$steps.{last_check}.response.body#/reference"));
    let mut email = template[5].clone();
    email["id"] = json!("s49");
    email["idempotencyKey"] = json!(format!("{saga}:s49"));
    email["args"]["login"] = json!(format!("$steps.{last_sandbox}.response.body#/login"));
    steps.extend([capture, email]);
    plan["steps"] = Value::Array(steps);
    plan["pivotIndex"] = json!(48);
    plan
}

fn bench(c: &mut Criterion) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // The example's mandate (signed by the test principal) is granted to key id
    // test-planner.
    let planner = SigningIdentity::from_seed([7; 32], Some("test-planner".into()));
    let mut trust = TrustStore::new();
    trust.add("test-planner", planner.verifying_key());
    let mut principals = TrustStore::new();
    let principal = read(&root.join("examples/keys/test-principal.pub.jwk"));
    principals
        .add_jwk(&serde_json::from_value(principal).expect("a JWK"))
        .expect("the test principal's key");
    let validator = PlanValidator::new(catalog(&root), trust.clone())
        .expect("validator")
        .with_principals(principals);
    let mut plan = fifty_step_plan(&root);
    planner.sign_in_place(&mut plan).expect("sign");
    let now: DateTime<Utc> = "2026-11-29T12:00:00Z".parse().expect("time");
    let report = validator.validate(&plan, now);
    assert!(
        report.is_valid(),
        "the benchmark plan must be valid: {:#?}",
        report.violations
    );
    assert_eq!(report.plan.as_ref().map(|p| p.steps.len()), Some(50));

    c.bench_function("verify+validate 50-step plan", |b| {
        b.iter(|| validator.validate(&plan, now))
    });
    c.bench_function("verify signature of 50-step plan", |b| {
        b.iter(|| trust.verify(&plan))
    });
    c.bench_function("canonicalize 50-step plan", |b| {
        b.iter(|| shared_types::signing::signing_payload(&plan))
    });
    c.bench_function("type 50-step plan", |b| {
        b.iter(|| shared_types::Plan::from_value(&plan))
    });
    let typed = report.plan.expect("typed");
    c.bench_function("semantic checks of 50-step plan", |b| {
        b.iter(|| validator.check(&typed, now))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
