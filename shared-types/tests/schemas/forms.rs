//! Two of the forms the mutations write, pinned member by member: serde's array form of
//! an object and its one-member object form of an enum value, which schema and parser
//! both refuse (the parser naming the member); and the one mutation class the agreement
//! tests leave out, an integral double in an integer member, on which they differ.

use serde_json::{Value, json};
use shared_types::reversibility::ReversibilityParams;
use shared_types::{Mandate, Plan};

use crate::examples::{card_params, example_mandates, example_plans, example_revocation};
use crate::kind::Kind;
use crate::registry::{assert_invalid, read_json, repo, validator};

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
    // A person's answer in these forms: `answer::a_persons_answer_has_one_form`.
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
