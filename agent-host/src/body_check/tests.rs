//! Unit tests of the body scan: its limits and its I-JSON checks.

use super::*;

fn limits() -> BodyLimits {
    BodyLimits::default()
}

fn refused(body: &str) -> Refusal {
    match scan(body.as_bytes(), &limits()) {
        Err(refusal) => refusal,
        Ok(()) => panic!("passed: {body}"),
    }
}

#[test]
fn an_ordinary_send_message_passes() {
    let body = r#"{"jsonrpc":"2.0","id":"r-1","method":"SendMessage","params":{"message":
        {"messageId":"m","role":"ROLE_USER","parts":[{"data":{"a":[1,2.5,-3,null,true,"x"]}},
        {"text":"hi"}]}}}"#;
    assert_eq!(scan(body.as_bytes(), &limits()), Ok(()));
}

#[test]
fn text_that_is_not_json_is_left_to_the_sdk() {
    assert_eq!(scan(b"{\"a\": [1, 2", &limits()), Ok(()));
    assert_eq!(scan(b"not json", &limits()), Ok(()));
    assert_eq!(scan(b"", &limits()), Ok(()));
}

#[test]
fn a_duplicate_member_is_named_with_its_pointer() {
    let refusal = refused(
        r#"{"params":{"message":{"parts":[{"data":{"spend":{"amountMinor":1,"amountMinor":2}}}]}}}"#,
    );
    assert_eq!(refusal.reason(), "SCHEMA_INVALID");
    let message = refusal.to_string();
    assert!(message.contains("\"amountMinor\""), "{message}");
    assert!(
        message.contains("/params/message/parts/0/data/spend"),
        "{message}"
    );
}

#[test]
fn names_equal_after_unescaping_are_duplicates() {
    let refusal = refused(r#"{"a":1,"\u0061":2}"#);
    assert_eq!(refusal.reason(), "SCHEMA_INVALID");
}

#[test]
fn the_same_name_in_sibling_objects_is_fine() {
    assert_eq!(
        scan(br#"[{"a":1},{"a":2},{"b":{"a":3}}]"#, &limits()),
        Ok(())
    );
}

#[test]
fn integers_beyond_two_to_the_53_are_refused_at_their_pointer() {
    assert_eq!(
        scan(b"[9007199254740991, -9007199254740991]", &limits()),
        Ok(())
    );
    for big in [
        "9007199254740992",
        "-9007199254740992",
        "18446744073709551615",
    ] {
        let refusal = refused(&format!(r#"{{"id":1,"x":[{big}]}}"#));
        assert_eq!(refusal.reason(), "SCHEMA_INVALID", "{big}");
        assert!(refusal.to_string().contains("/x/0"), "{refusal}");
    }
}

#[test]
fn each_limit_is_named() {
    let small = BodyLimits {
        max_depth: 4,
        max_values: 20,
        max_parts: 2,
        max_string_bytes: 8,
        ..BodyLimits::default()
    };
    let cases = [
        ("[[[[[]]]]]", "maxDepth"),
        ("[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]", "maxValues"),
        (r#"{"message":{"parts":[{},{},{}]}}"#, "maxParts"),
        (r#"{"params":{"message":{"parts":[1,2,3]}}}"#, "maxParts"),
        (r#"["123456789"]"#, "maxStringBytes"),
        (r#"{"123456789":0}"#, "maxStringBytes"),
    ];
    for (body, name) in cases {
        match scan(body.as_bytes(), &small) {
            Err(Refusal::Limit { name: got, .. }) => assert_eq!(got, name, "{body}"),
            other => panic!("{body}: {other:?}"),
        }
    }
    assert_eq!(scan(b"[[[[]]]]", &small), Ok(()), "four levels pass");
    assert_eq!(
        scan(br#"{"message":{"parts":[{},{}]}}"#, &small),
        Ok(()),
        "two parts pass"
    );
    assert_eq!(scan(br#"["12345678"]"#, &small), Ok(()));
}

#[test]
fn the_limit_stops_the_scan_before_a_syntax_error_later_on() {
    let mut body = String::from("[");
    body.push_str(&"0,".repeat(60_000));
    body.push_str("oops");
    match scan(body.as_bytes(), &limits()) {
        Err(Refusal::Limit { name, .. }) => assert_eq!(name, "maxValues"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn deeper_nesting_than_serde_allows_is_our_refusal_not_a_parse_error() {
    let body = format!("{}{}", "[".repeat(500), "]".repeat(500));
    match scan(body.as_bytes(), &limits()) {
        Err(Refusal::Limit { name, .. }) => assert_eq!(name, "maxDepth"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_request_id_is_read_when_it_is_a_scalar() {
    assert_eq!(
        request_id(br#"{"params":{},"id":"abc"}"#),
        Value::from("abc")
    );
    assert_eq!(request_id(br#"{"id":7,"x":{"a":1,"a":2}}"#), Value::from(7));
    assert_eq!(request_id(br#"{"id":[1]}"#), Value::Null);
    assert_eq!(request_id(br#"{"id":1,"id":2}"#), Value::Null);
    assert_eq!(request_id(b"[1"), Value::Null);
}
