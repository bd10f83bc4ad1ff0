//! The walk of a JSON pointer over a JSON Schema (`expr::check_pointer`): the rules that
//! decide which pointers into a declared result are `BAD_REFERENCE`.

use proptest::prelude::*;

use super::*;
use crate::expr::{JsonPointer, check_pointer, escape_token};

fn check(schema: &Value, pointer: &str) -> Result<(), String> {
    check_pointer(schema, &JsonPointer::parse(pointer).unwrap()).map_err(|d| d.to_string())
}

#[test]
fn additional_properties_decide_undeclared_members() {
    let listed = json!({"type": "object", "properties": {"a": {"type": "string"}}});
    assert!(check(&listed, "/a").is_ok());
    assert!(check(&listed, "/b").is_err(), "listed members are the list");
    let open = json!({"type": "object", "properties": {"a": {}}, "additionalProperties": true});
    assert!(check(&open, "/b/anything/below").is_ok());
    let typed = json!({"type": "object", "additionalProperties": {
        "type": "object", "properties": {"id": {"type": "string"}}}});
    assert!(check(&typed, "/any/id").is_ok());
    assert!(check(&typed, "/any/idd").is_err());
    let closed = json!({"type": "object", "additionalProperties": false});
    assert!(
        check(&closed, "/a")
            .unwrap_err()
            .contains("declared there: none")
    );
    // An object that lists no member declares no shape: unchecked, like no schema.
    assert!(check(&json!({"type": "object"}), "/a/b").is_ok());
    assert!(check(&json!({}), "/a").is_ok());
    assert!(check(&json!(true), "/a").is_ok());
    assert!(check(&json!(false), "/a").is_err());
    assert!(
        check(
            &json!({"type": "object", "patternProperties": {"^x": {}}}),
            "/xy"
        )
        .is_ok()
    );
}

#[test]
fn escaped_tokens_match_the_member_names_they_stand_for() {
    let schema = json!({"type": "object", "properties": {"a/b": {"type": "object",
        "properties": {"m~n": {"type": "string"}}}}});
    assert!(check(&schema, "/a~1b/m~0n").is_ok());
    assert!(check(&schema, "/a/b").is_err());
    let err = check(&schema, "/a~1b/m~1n").unwrap_err();
    assert!(
        err.contains("\"m/n\"") && err.contains("\"m~n\"") && err.contains("'/a~1b'"),
        "{err}"
    );
}

#[test]
fn arrays_take_indices_within_their_items() {
    let tuple = json!({"type": "array", "prefixItems": [{"type": "string"},
        {"type": "object", "properties": {"id": {}}}], "items": false});
    assert!(check(&tuple, "/1/id").is_ok());
    assert!(check(&tuple, "/0/id").unwrap_err().contains("is a string"));
    assert!(
        check(&tuple, "/2")
            .unwrap_err()
            .contains("declares no element 2")
    );
    assert!(check(&tuple, "/01").unwrap_err().contains("not an index"));
    assert!(
        check(&json!({"type": "array"}), "/5/x").is_ok(),
        "items unconstrained"
    );
    let draft7 = json!({"items": [{"type": "integer"}], "additionalItems": {"type": "object",
        "properties": {"x": {}}}});
    assert!(check(&draft7, "/3/x").is_ok());
    assert!(check(&draft7, "/3/y").is_err());
}

#[test]
fn refs_and_branches_are_followed() {
    let schema = json!({
        "$defs": {"party": {"type": "object", "properties": {"name": {"type": "string"}}}},
        "type": "object",
        "properties": {
            "buyer": {"$ref": "#/$defs/party"},
            "either": {"oneOf": [
                {"type": "object", "properties": {"card": {}}},
                {"type": "object", "properties": {"iban": {}}}
            ]},
            "both": {"allOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}]},
            "self": {"$ref": "#"}
        }
    });
    assert!(check(&schema, "/buyer/name").is_ok());
    assert!(
        check(&schema, "/buyer/nme")
            .unwrap_err()
            .contains("\"name\"")
    );
    assert!(check(&schema, "/either/card").is_ok());
    assert!(check(&schema, "/either/iban").is_ok());
    let err = check(&schema, "/either/bic").unwrap_err();
    assert!(err.contains("\"card\", \"iban\""), "{err}");
    assert!(check(&schema, "/both/b").is_ok());
    assert!(check(&schema, "/self/self/buyer/name").is_ok());
    assert!(check(&schema, "/self/self/buyr").is_err());
    // A cycle of references that consumes no token ends.
    let cycle = json!({"$defs": {"a": {"$ref": "#/$defs/a", "properties": {"p": {}}}},
        "$ref": "#/$defs/a"});
    assert!(check(&cycle, "/p").is_ok());
    assert!(check(&cycle, "/x").is_err());
    // A reference outside the schema cannot be followed: unchecked.
    assert!(check(&json!({"$ref": "https://example.com/s.json"}), "/x").is_ok());
}

/// A nested object schema whose member names are arbitrary, including `~` and `/`.
fn arb_schema() -> impl Strategy<Value = Value> {
    let leaf = Just(json!({"type": "string"}));
    leaf.prop_recursive(4, 48, 5, |inner| {
        proptest::collection::btree_map("[a-z~/ ]{1,6}", inner, 1..5).prop_map(|members| {
            json!({"type": "object", "properties": Value::Object(members.into_iter().collect())})
        })
    })
}

/// A path of member names the schema declares, chosen by `choices`.
fn declared_path(schema: &Value, choices: &[prop::sample::Index]) -> Vec<String> {
    let mut path = Vec::new();
    let mut here = schema;
    for choice in choices {
        let Some(members) = here.get("properties").and_then(Value::as_object) else {
            break;
        };
        let names: Vec<&String> = members.keys().collect();
        let name = choice.get(&names);
        path.push((*name).clone());
        here = &members[name.as_str()];
    }
    path
}

fn pointer_of(path: &[String]) -> JsonPointer {
    let text: String = path
        .iter()
        .map(|t| format!("/{}", escape_token(t)))
        .collect();
    JsonPointer::parse(&text).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A pointer written from the schema's own member names passes; changing any one
    /// name into one its object does not declare fails there, naming the real ones.
    #[test]
    fn declared_paths_pass_and_a_changed_name_fails_where_it_changed(
        schema in arb_schema(),
        choices in proptest::collection::vec(any::<prop::sample::Index>(), 1..5),
        at in any::<prop::sample::Index>(),
        suffix in "[a-z~/]{1,3}",
    ) {
        let path = declared_path(&schema, &choices);
        prop_assume!(!path.is_empty());
        prop_assert!(check_pointer(&schema, &pointer_of(&path)).is_ok(), "{path:?}");

        let k = at.index(path.len());
        let mut parent = &schema;
        for name in &path[..k] {
            parent = &parent["properties"][name.as_str()];
        }
        let siblings = parent["properties"].as_object().unwrap();
        let mut changed = path.clone();
        changed[k] = format!("{}{suffix}", path[k]);
        prop_assume!(!siblings.contains_key(&changed[k]));
        let divergence = check_pointer(&schema, &pointer_of(&changed)).unwrap_err();
        prop_assert_eq!(divergence.at, pointer_of(&path[..k]));
        prop_assert_eq!(&divergence.token, &changed[k]);
        prop_assert!(divergence.declared.contains(&path[k]));
    }
}

#[test]
fn branches_that_declare_no_member_add_none() {
    // `required`-only alternatives say nothing about which members exist.
    let schema = json!({"type": "object", "properties": {"a": {}, "b": {}},
        "anyOf": [{"required": ["a"]}, {"required": ["b"]}]});
    assert!(check(&schema, "/a").is_ok());
    assert!(check(&schema, "/c").unwrap_err().contains("\"a\", \"b\""));
    let schema = json!({"allOf": [{"type": "object"}, {"properties": {"id": {}}}]});
    assert!(check(&schema, "/id").is_ok());
    assert!(check(&schema, "/idd").is_err());
    // Where nothing declares a member, nothing is checked.
    assert!(check(&json!({"anyOf": [{"required": ["a"]}]}), "/z").is_ok());
    assert!(check(&json!({"anyOf": [false]}), "/z").is_err());
}
