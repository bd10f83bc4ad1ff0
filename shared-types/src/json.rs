//! Strict JSON input (I-JSON, RFC 7493) and RFC 8785 canonical JSON.
//!
//! RFC 8785 canonicalises I-JSON only: every number goes through an IEEE 754 double, so
//! an integer beyond 2^53 - 1 would be signed as a different number than the one a
//! reader types, and duplicate member names leave it open which value was meant. Both
//! are refused here rather than signed ambiguously.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use crate::error::{Error, Result};
use crate::money::MAX_SAFE_INTEGER;

/// Parses `text` as I-JSON: no duplicate member names, no integer outside ±(2^53 - 1).
/// Nesting deeper than 128 levels is refused by the parser.
pub fn parse_strict(text: &str) -> Result<Value> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let value = StrictValue::deserialize(&mut deserializer).map_err(|e| Error::from_serde(&e))?;
    deserializer.end().map_err(|e| Error::from_serde(&e))?;
    Ok(value.0)
}

/// Parses bytes, refusing text that is not UTF-8 with the offset of the first bad byte.
pub fn parse_strict_bytes(bytes: &[u8]) -> Result<Value> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        Error::json(format!(
            "not UTF-8: invalid byte at offset {}",
            e.valid_up_to()
        ))
    })?;
    parse_strict(text.strip_prefix('\u{feff}').unwrap_or(text))
}

/// Checks that every number in an already-parsed value is exact in canonical form.
pub fn check_numbers(value: &Value) -> Result<()> {
    match value {
        Value::Number(n) => number_is_safe(n).map_err(Error::json),
        Value::Array(items) => items.iter().try_for_each(check_numbers),
        Value::Object(map) => map.values().try_for_each(check_numbers),
        Value::Null | Value::Bool(_) | Value::String(_) => Ok(()),
    }
}

fn number_is_safe(n: &Number) -> Result<(), String> {
    let unsafe_int = n.as_u64().is_some_and(|v| v > MAX_SAFE_INTEGER)
        || n.as_i64().is_some_and(|v| v < -(MAX_SAFE_INTEGER as i64));
    if unsafe_int {
        Err(format!(
            "integer {n} is outside ±(2^53-1); canonical JSON cannot represent it exactly (write it as a string)"
        ))
    } else {
        Ok(())
    }
}

/// Rewrites every number that is a double with an integral value within ±(2^53 − 1) as
/// an integer. JSON does not tell `25000.0` from `25000`, and neither does RFC 8785, but
/// transports do: A2A data parts travel as `google.protobuf.Value`, where every number is
/// a double. Returns whether anything changed. Signatures are unaffected.
pub fn normalize_integers(value: &mut Value) -> bool {
    match value {
        Value::Number(n) if n.is_f64() => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() <= MAX_SAFE_INTEGER as f64 => {
                *value = Value::from(f as i64);
                true
            }
            _ => false,
        },
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |changed, v| normalize_integers(v) | changed),
        Value::Object(map) => map
            .values_mut()
            .fold(false, |changed, v| normalize_integers(v) | changed),
        _ => false,
    }
}

/// Whether `normalize_integers` would change anything.
pub fn has_integral_doubles(value: &Value) -> bool {
    match value {
        Value::Number(n) => n
            .as_f64()
            .is_some_and(|f| n.is_f64() && f.fract() == 0.0 && f.abs() <= MAX_SAFE_INTEGER as f64),
        Value::Array(items) => items.iter().any(has_integral_doubles),
        Value::Object(map) => map.values().any(has_integral_doubles),
        _ => false,
    }
}

/// A contract date-time, read as plans, mandates and revocations read theirs: RFC 3339
/// (section 5.6) and nothing more, converted to UTC; `None` for anything else. Public so
/// that documents this crate does not type (an approver's answer, read by the executor)
/// hold their date-times to the same rule, and the published schemas to one pattern.
pub fn parse_rfc3339(text: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    crate::strict::rfc3339(text).ok()
}

/// The RFC 8785 canonical bytes of `value`.
pub fn canonicalize(value: &Value) -> Result<Vec<u8>> {
    canonicalize_without(value, None)
}

/// The lowercase hex SHA-256 of `value`'s canonical bytes: what an approval names the
/// arguments it approves by (an integral double hashes as the integer it is).
pub fn canonical_sha256(value: &Value) -> Result<String> {
    use sha2::{Digest, Sha256};
    Ok(format!("{:x}", Sha256::digest(canonicalize(value)?)))
}

/// The canonical bytes of `value`, leaving out the top-level member `skip` when `value`
/// is an object (how signed objects exclude their `signatures`).
pub fn canonicalize_without(value: &Value, skip: Option<&str>) -> Result<Vec<u8>> {
    check_numbers(value)?;
    let mut out = Vec::with_capacity(1024);
    match (value, skip) {
        (Value::Object(map), Some(skip)) => {
            write_object(&mut out, map.iter().filter(|(k, _)| k.as_str() != skip))
        }
        _ => write_canonical(&mut out, value),
    }
    Ok(out)
}

/// RFC 8785 §3.2: no whitespace, members sorted by their UTF-16 code units, numbers as
/// ECMAScript prints doubles, strings with the minimal escapes.
fn write_canonical(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(out, item);
            }
            out.push(b']');
        }
        Value::Object(map) => write_object(out, map.iter()),
    }
}

fn write_object<'a>(out: &mut Vec<u8>, members: impl Iterator<Item = (&'a String, &'a Value)>) {
    let mut members: Vec<_> = members.collect();
    members.sort_unstable_by(|(a, _), (b, _)| a.encode_utf16().cmp(b.encode_utf16()));
    out.push(b'{');
    for (i, (key, item)) in members.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_string(out, key);
        out.push(b':');
        write_canonical(out, item);
    }
    out.push(b'}');
}

/// Integers within ±(2^53 - 1) print as their digits, exactly as ECMAScript prints the
/// same double; everything else goes through the double and ECMAScript's algorithm.
fn write_number(out: &mut Vec<u8>, n: &Number) {
    if let Some(i) = n.as_i64() {
        out.extend_from_slice(i.to_string().as_bytes());
    } else if let Some(u) = n.as_u64() {
        out.extend_from_slice(u.to_string().as_bytes());
    } else {
        let f = n.as_f64().unwrap_or(0.0);
        let mut buffer = ryu_js::Buffer::new();
        out.extend_from_slice(buffer.format_finite(f).as_bytes());
    }
}

fn write_string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let bytes = s.as_bytes();
    if !bytes.iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\') {
        out.extend_from_slice(bytes);
        out.push(b'"');
        return;
    }
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0x00..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if escape.is_empty() {
            out.extend_from_slice(format!("\\u{b:04x}").as_bytes());
        } else {
            out.extend_from_slice(escape);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

struct StrictValue(Value);

impl<'de> Deserialize<'de> for StrictValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor).map(StrictValue)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        let n = Number::from(v);
        number_is_safe(&n).map_err(E::custom)?;
        Ok(Value::Number(n))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        let n = Number::from(v);
        number_is_safe(&n).map_err(E::custom)?;
        Ok(Value::Number(n))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("number is not finite"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(StrictValue(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let mut map = Map::new();
        while let Some(key) = access.next_key::<String>()? {
            let StrictValue(item) = access.next_value()?;
            if map.insert(key.clone(), item).is_some() {
                return Err(de::Error::custom(format!("duplicate member name {key:?}")));
            }
        }
        Ok(Value::Object(map))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn parse_rfc3339_is_the_contracts_rule() {
        let read = |text: &str| parse_rfc3339(text).map(|t| t.timestamp_millis());
        assert_eq!(read("2026-11-29t11:30:00.5+01:30"), Some(1_795_946_400_500));
        assert_eq!(
            read("2026-11-29T10:00:00Z"),
            read("2026-11-29T11:00:00+01:00")
        );
        // What `DateTime::parse_from_rfc3339` reads beyond RFC 3339, and chrono's serde more.
        for text in [
            "2026-11-29 10:00:00Z",
            "2026-11-29T10:00:00\u{2212}01:00",
            "2026-11-29T10:00:00+0100",
            "2026-11-29T10:00:00 utc",
            "tomorrow",
        ] {
            assert_eq!(read(text), None, "{text:?}");
        }
    }

    #[test]
    fn canonical_sha256_is_the_hash_of_the_canonical_bytes() {
        // RFC 8785 orders members and writes 25000.0 as 25000.
        let value = json!({"b": 25000.0, "a": "x"});
        let same = json!({"a": "x", "b": 25000});
        assert_eq!(
            canonical_sha256(&value).unwrap(),
            canonical_sha256(&same).unwrap()
        );
        // `printf '{"a":"x","b":25000}' | sha256sum`
        assert_eq!(
            canonical_sha256(&value).unwrap(),
            "730e0af1f9264f407e5d9091da3ddccf5db8eb3d40697ba482681d8b206b8cf6"
        );
        assert_ne!(
            canonical_sha256(&value).unwrap(),
            canonical_sha256(&json!({"a": "y", "b": 25000})).unwrap()
        );
    }

    fn canonical(text: &str) -> String {
        String::from_utf8(canonicalize(&parse_strict(text).unwrap()).unwrap()).unwrap()
    }

    /// RFC 8785 §3.2.2 and Appendix B: numbers serialise as ECMAScript does.
    #[test]
    fn rfc8785_number_examples() {
        let cases: &[(u64, &str)] = &[
            (0x0000000000000000, "0"),
            (0x8000000000000000, "0"),
            (0x0000000000000001, "5e-324"),
            (0x8000000000000001, "-5e-324"),
            (0x7fefffffffffffff, "1.7976931348623157e+308"),
            (0xffefffffffffffff, "-1.7976931348623157e+308"),
            (0x4340000000000000, "9007199254740992"),
            (0xc340000000000000, "-9007199254740992"),
            (0x4430000000000000, "295147905179352830000"),
            (0x44b52d02c7e14af5, "9.999999999999997e+22"),
            (0x44b52d02c7e14af6, "1e+23"),
            (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
            (0x444b1ae4d6e2ef4e, "999999999999999700000"),
            (0x444b1ae4d6e2ef4f, "999999999999999900000"),
            (0x444b1ae4d6e2ef50, "1e+21"),
            (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
            (0x3eb0c6f7a0b5ed8d, "0.000001"),
            (0x41b3de4355555553, "333333333.3333332"),
            (0x41b3de4355555554, "333333333.33333325"),
            (0x41b3de4355555555, "333333333.3333333"),
            (0x41b3de4355555556, "333333333.3333334"),
            (0x41b3de4355555557, "333333333.33333343"),
            (0xbecbf647612f3696, "-0.0000033333333333333333"),
            (0x43143ff3c1cb0959, "1424953923781206.2"),
        ];
        for &(bits, expected) in cases {
            let value = Value::Number(Number::from_f64(f64::from_bits(bits)).unwrap());
            let bytes = canonicalize(&value).unwrap();
            assert_eq!(
                String::from_utf8(bytes).unwrap(),
                expected,
                "bits {bits:#018x}"
            );
        }
    }

    /// RFC 8785 §3.2.3: members sorted by UTF-16 code units.
    #[test]
    fn rfc8785_sorting_example() {
        let input = r#"{
            "\u20ac": "Euro Sign", "\r": "Carriage Return", "\ufb33": "Hebrew Letter Dalet With Dagesh",
            "1": "One", "\ud83d\ude00": "Emoji: Grinning Face", "\u0080": "Control", "\u00f6": "Latin Small Letter O With Diaeresis"
        }"#;
        let expected = "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\"ö\":\"Latin Small Letter O With Diaeresis\",\"€\":\"Euro Sign\",\"😀\":\"Emoji: Grinning Face\",\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}";
        assert_eq!(canonical(input), expected);
    }

    /// RFC 8785 §3.2.2 "Serialization of Strings" and the whole example of §3.2.4.
    #[test]
    fn rfc8785_whole_example() {
        let input = r#"{
          "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
          "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
          "literals": [null, true, false]
        }"#;
        let expected = r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#;
        assert_eq!(canonical(input), expected);
    }

    #[test]
    fn integral_doubles_become_integers_without_changing_the_canonical_form() {
        let mut value = json!({"a": 25000.0, "b": [1.5, -3.0, 1e300], "c": 7});
        let before = canonicalize(&value).unwrap();
        assert!(has_integral_doubles(&value));
        assert!(normalize_integers(&mut value));
        assert_eq!(value, json!({"a": 25000, "b": [1.5, -3, 1e300], "c": 7}));
        assert!(value["a"].is_u64() || value["a"].is_i64());
        assert_eq!(canonicalize(&value).unwrap(), before);
        assert!(!has_integral_doubles(&value));
        assert!(!normalize_integers(&mut value));
    }

    #[test]
    fn strict_parser_refuses_ambiguous_input() {
        let dup = parse_strict(r#"{"a": 1, "a": 2}"#).unwrap_err();
        assert!(
            dup.to_string().contains("duplicate member name \"a\""),
            "{dup}"
        );
        assert!(parse_strict("9007199254740992").is_err());
        assert!(parse_strict("-9007199254740992").is_err());
        assert!(parse_strict("9007199254740991").is_ok());
        let bad = parse_strict("{\n  \"a\": 1,\n  \"b\" 2\n}").unwrap_err();
        assert!(matches!(bad, Error::Json { line: Some(3), .. }), "{bad:?}");
        assert!(
            parse_strict_bytes(b"\xff\xfe{}")
                .unwrap_err()
                .to_string()
                .contains("not UTF-8")
        );
        assert_eq!(
            parse_strict_bytes("\u{feff}{}".as_bytes()).unwrap(),
            json!({})
        );
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let text = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        let err = parse_strict(&text).unwrap_err();
        assert!(err.to_string().contains("recursion limit"), "{err}");
    }

    mod properties {
        use proptest::prelude::*;
        use serde_json::{Map, Value};

        use super::super::*;

        fn arb_json() -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::Bool),
                (-(MAX_SAFE_INTEGER as i64)..=(MAX_SAFE_INTEGER as i64)).prop_map(Value::from),
                // Doubles of 2^53 and more print as integer literals in canonical form,
                // which strict parsing refuses to read back; they still sign fine.
                any::<f64>()
                    .prop_filter("finite, below 2^53", |f| f.is_finite()
                        && f.abs() < MAX_SAFE_INTEGER as f64)
                    .prop_map(Value::from),
                ".*".prop_map(Value::String),
            ];
            leaf.prop_recursive(4, 48, 6, |inner| {
                prop_oneof![
                    proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                    proptest::collection::vec((".*", inner), 0..6)
                        .prop_map(|pairs| Value::Object(pairs.into_iter().collect::<Map<_, _>>())),
                ]
            })
        }

        /// Re-lays a value's text: keys in reverse order and arbitrary whitespace.
        fn relay(value: &Value, ws: &mut impl Iterator<Item = &'static str>) -> String {
            match value {
                Value::Array(items) => {
                    let mut parts = Vec::new();
                    for item in items {
                        let pad = ws.next().unwrap_or(" ");
                        parts.push(format!("{pad}{}", relay(item, ws)));
                    }
                    format!("[{}{}]", parts.join(","), " \n")
                }
                Value::Object(map) => {
                    let parts: Vec<String> = map
                        .iter()
                        .rev()
                        .map(|(k, v)| {
                            format!("\t{} : {}", serde_json::to_string(k).unwrap(), relay(v, ws))
                        })
                        .collect();
                    format!("{{\r\n{}}}", parts.join(",\n "))
                }
                other => other.to_string(),
            }
        }

        proptest! {
            /// Canonical bytes do not depend on member order or whitespace, and
            /// canonical JSON is a fixed point of canonicalisation.
            #[test]
            fn canonical_form_is_stable(value in arb_json()) {
                let canonical = canonicalize(&value).unwrap();
                let mut ws = ["", " ", "\n", "\t  "].into_iter().cycle();
                let relaid = parse_strict(&relay(&value, &mut ws)).unwrap();
                prop_assert_eq!(&canonicalize(&relaid).unwrap(), &canonical);
                let again = parse_strict(std::str::from_utf8(&canonical).unwrap()).unwrap();
                prop_assert_eq!(canonicalize(&again).unwrap(), canonical);
            }
        }
    }
}
