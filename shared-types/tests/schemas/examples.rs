//! (a) Every example in the repository validates, and the Rust parser takes it. The
//! examples are also the seeds the agreement tests mutate (`kind`).

use serde_json::Value;
use shared_types::reversibility::ReversibilityParams;
use shared_types::{Mandate, Plan, REVERSIBILITY_EXTENSION_URI, Revocation};

use crate::registry::{assert_invalid, assert_valid, file_name, json_files, read_json, repo};

/// The reversibility extension's `params` in an agent card, found by its URI.
fn extension_params(card: &Value) -> Option<&Value> {
    card.pointer("/capabilities/extensions")?
        .as_array()?
        .iter()
        .find(|e| e.get("uri").and_then(Value::as_str) == Some(REVERSIBILITY_EXTENSION_URI))?
        .get("params")
}

pub(crate) fn card_params() -> Vec<(String, Value)> {
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

pub(crate) fn example_plans() -> Vec<(String, Value)> {
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
pub(crate) const STRUCTURALLY_INVALID_PLANS: [&str; 1] = [
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

pub(crate) fn example_mandates() -> Vec<(String, Value)> {
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

pub(crate) fn example_revocation() -> Value {
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
