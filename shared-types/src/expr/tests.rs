//! Unit tests of expression parsing and evaluation.

use serde_json::{Value, json};

use super::*;

#[test]
fn parses_every_source() {
    let cases = [
        "$request.body#/amountMinor",
        "$response.body#/vendorId",
        "$response.body#",
        "$steps.s0.response.body#/vendorId",
        "$saga.id",
        "$step.id",
        "$step.idempotencyKey",
        "$response.body#/a~1b/~0c",
    ];
    for text in cases {
        let expr = Expr::parse(text).unwrap();
        assert_eq!(expr.to_string(), text, "display round-trips");
    }
}

#[test]
fn rejects_what_it_does_not_know() {
    for bad in [
        "$response.header.X",
        "$request.body/vendorId",
        "$steps.s0.request.body#/x",
        "$steps..response.body#/x",
        "$steps.s:0.response.body#/x",
        "$url",
        "$response.body#vendorId",
        "$response.body#/a~2",
    ] {
        assert!(Expr::parse(bad).is_err(), "{bad} should not parse");
    }
}

#[test]
fn classifies_strings() {
    assert_eq!(parse_string("plain").unwrap(), Binding::Literal);
    assert_eq!(parse_string("{not an expr}").unwrap(), Binding::Literal);
    assert!(matches!(
        parse_string("$saga.id").unwrap(),
        Binding::Expr(_)
    ));
    let Binding::Template(segments) = parse_string("saga {$saga.id} step {$step.id}!").unwrap()
    else {
        panic!("expected a template");
    };
    assert_eq!(segments.len(), 5);
    assert!(
        parse_string("x {$saga.id")
            .unwrap_err()
            .to_string()
            .contains("unclosed")
    );
    assert!(parse_string("x {$bogus} y").is_err());
}

fn ctx_with<'a>(request: &'a Value, response: Option<&'a Value>) -> EvalContext<'a> {
    EvalContext {
        saga_id: Some("sg_1"),
        step_id: Some("s0"),
        idempotency_key: Some("sg_1:s0"),
        request_body: Some(request),
        response_body: response,
        step_responses: None,
    }
}

#[test]
fn evaluation_keeps_json_types() {
    let request = json!({"amountMinor": 12000, "currency": "EUR", "tags": ["a"]});
    let response = json!({"vendorId": "v_1", "a/b": {"~c": true}});
    let ctx = ctx_with(&request, Some(&response));
    let template = json!({
        "amount": "$request.body#/amountMinor",
        "tags": "$request.body#/tags",
        "id": "$response.body#/vendorId",
        "escaped": "$response.body#/a~1b/~0c",
        "key": "$step.idempotencyKey",
        "note": "vendor {$response.body#/vendorId} for {$request.body#/amountMinor} {$request.body#/currency}",
        "literal": 7
    });
    assert_eq!(
        bind(&template, &ctx).unwrap(),
        json!({
            "amount": 12000, "tags": ["a"], "id": "v_1", "escaped": true, "key": "sg_1:s0",
            "note": "vendor v_1 for 12000 EUR", "literal": 7
        })
    );
}

#[test]
fn unresolvable_is_unresolved_not_defaulted() {
    let request = json!({});
    let response = json!({"other": 1});
    let ctx = ctx_with(&request, Some(&response));
    let err = bind(
        &json!({"id": "$response.body#/vendorId", "k": "$step.id"}),
        &ctx,
    )
    .unwrap_err();
    assert_eq!(err.expr, "$response.body#/vendorId");
    // No response at all (unknown outcome): also unresolved.
    let ctx = ctx_with(&request, None);
    assert!(bind(&json!("$response.body#/vendorId"), &ctx).is_err());
    // A template with one unresolved part is unresolved as a whole.
    assert!(bind(&json!("id={$response.body#/vendorId}"), &ctx).is_err());
}

#[test]
fn step_responses_are_looked_up_by_id() {
    let s0 = json!({"vendorId": "v_9"});
    let lookup = |id: &str| if id == "s0" { Some(&s0) } else { None };
    let ctx = EvalContext {
        step_responses: Some(&lookup),
        ..EvalContext::default()
    };
    assert_eq!(
        bind(&json!("$steps.s0.response.body#/vendorId"), &ctx).unwrap(),
        json!("v_9")
    );
    assert!(bind(&json!("$steps.s1.response.body#/vendorId"), &ctx).is_err());
}

#[test]
fn for_each_expr_reports_locations() {
    let value =
        json!({"a": {"b~/c": "$saga.id"}, "list": ["x", "{$step.id}-{$step.idempotencyKey}"]});
    let mut seen = Vec::new();
    for_each_expr(&value, &mut |at, e| {
        seen.push((at.to_string(), e.to_string()))
    })
    .unwrap();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("/a/b~0~1c".to_owned(), "$saga.id".to_owned()),
            ("/list/1".to_owned(), "$step.id".to_owned()),
            ("/list/1".to_owned(), "$step.idempotencyKey".to_owned()),
        ]
    );
    let err = for_each_expr(&json!({"x": ["$nope"]}), &mut |_, _| {}).unwrap_err();
    assert_eq!(err.0.to_string(), "/x/0");
}

mod properties {
    use proptest::prelude::*;

    use super::super::*;

    proptest! {
        /// Escaping then parsing any tokens gives the same tokens back.
        #[test]
        fn pointer_escape_round_trip(tokens in proptest::collection::vec(".*", 0..6)) {
            let pointer = JsonPointer::from_tokens(tokens.clone());
            let parsed = JsonPointer::parse(&pointer.to_string()).unwrap();
            prop_assert_eq!(parsed.tokens(), &tokens[..]);
        }

        /// A pointer built from tokens finds the value nested under those keys.
        #[test]
        fn pointer_resolves_what_it_names(tokens in proptest::collection::vec("[a-z~/]{0,4}", 1..5)) {
            let mut doc = serde_json::json!("leaf");
            for token in tokens.iter().rev() {
                doc = serde_json::json!({ token.clone(): doc });
            }
            let text = JsonPointer::from_tokens(tokens).to_string();
            prop_assert_eq!(JsonPointer::parse(&text).unwrap().resolve(&doc), Some(&serde_json::json!("leaf")));
        }

        /// Parsing never panics, whatever the string.
        #[test]
        fn parse_never_panics(text in ".*") {
            let _ = parse_string(&text);
            let _ = JsonPointer::parse(&text);
            let _ = Expr::parse(&text);
        }
    }
}
