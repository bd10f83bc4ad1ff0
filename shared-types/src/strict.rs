//! Strict reading of the contract's documents (plans, mandates, revocations, skill
//! declarations), each in the one form `spec/schemas/` publishes.
//!
//! serde's derived `Deserialize` also reads a struct from a JSON array of its members'
//! values (`"budget": ["EUR", 25000]`), and chrono's reads date-times RFC 3339 does not
//! allow (`2026-11-29T10:00:00 utc`). The members that hold a contract struct therefore
//! read it through `#[serde(deserialize_with = …)]` functions built on these helpers,
//! which take only a JSON object and name the member that expected one; `document` does
//! the same for a whole document, and `date_time` reads RFC 3339 and nothing else.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// A whole document, typed as `T` when it is a JSON object; `what` names it ("a plan").
pub(crate) fn document<T: DeserializeOwned>(value: &Value, what: &str) -> Result<T, String> {
    if !value.is_object() {
        return Err(not_an_object(value, what));
    }
    T::deserialize(value).map_err(|e| e.to_string())
}

/// A member holding a struct: a JSON object, typed as `T`.
pub(crate) fn object<'de, D, T>(deserializer: D, member: &str) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned,
{
    typed(Value::deserialize(deserializer)?, member).map_err(D::Error::custom)
}

/// A member holding an optional struct: null (or, with `#[serde(default)]`, absent) is
/// `None`, anything else must be a JSON object.
pub(crate) fn optional_object<'de, D, T>(
    deserializer: D,
    member: &str,
) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned,
{
    Option::<Value>::deserialize(deserializer)?
        .map(|value| typed(value, member))
        .transpose()
        .map_err(D::Error::custom)
}

/// A member holding a list of structs: an array of JSON objects.
pub(crate) fn objects<'de, D, T>(deserializer: D, member: &str) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned,
{
    Vec::<Value>::deserialize(deserializer)?
        .into_iter()
        .enumerate()
        .map(|(i, value)| typed(value, &format!("{member}[{i}]")))
        .collect::<Result<_, _>>()
        .map_err(D::Error::custom)
}

/// The same for a list that is already a `Value` (a document's `signatures` member).
pub(crate) fn objects_of<T: DeserializeOwned>(
    value: &Value,
    member: &str,
) -> Result<Vec<T>, String> {
    objects(value, member).map_err(|e| e.to_string())
}

/// A member holding structs by name: a JSON object whose members are JSON objects.
pub(crate) fn object_values<'de, D, T>(
    deserializer: D,
    member: &str,
) -> Result<BTreeMap<String, T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned,
{
    BTreeMap::<String, Value>::deserialize(deserializer)?
        .into_iter()
        .map(|(key, value)| {
            let typed = typed(value, &format!("{member}[{key:?}]"))?;
            Ok((key, typed))
        })
        .collect::<Result<_, String>>()
        .map_err(D::Error::custom)
}

/// A member that is any JSON object, kept as a `Value` (a step's or a compensation's
/// arguments).
pub(crate) fn any_object<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Value, D::Error> {
    serde_json::Map::deserialize(deserializer).map(Value::Object)
}

/// An optional member that is any JSON object when present; null reads as absent.
pub(crate) fn optional_any_object<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Value>, D::Error> {
    Option::<serde_json::Map<String, Value>>::deserialize(deserializer)
        .map(|members| members.map(Value::Object))
}

/// A contract date-time: RFC 3339 (section 5.6) exactly, converted to UTC: `T` (or `t`)
/// between date and time, `Z` (or `z`) or a `±HH:MM` offset. `parse_from_rfc3339` also
/// reads a space for `T` and U+2212 for the offset's minus, which RFC 3339's grammar does
/// not; both are refused first. chrono's own `Deserialize` reads far more (unpadded
/// fields, `UTC`, an offset without its colon...), which is why it is not used.
pub(crate) fn date_time<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<DateTime<Utc>, D::Error> {
    let text = String::deserialize(deserializer)?;
    rfc3339(&text).map_err(D::Error::custom)
}

/// `date_time`'s rule on a string, with why a string breaks it; also behind
/// `json::parse_rfc3339`, so that every contract date-time is read by this one function.
pub(crate) fn rfc3339(text: &str) -> Result<DateTime<Utc>, String> {
    let refused = |why: &dyn std::fmt::Display| {
        format!("{text:?} is not an RFC 3339 date-time (e.g. \"2026-11-29T10:00:00Z\"): {why}")
    };
    if text.as_bytes().get(10) == Some(&b' ') {
        return Err(refused(&"a space stands for the T"));
    }
    if text.contains('\u{2212}') {
        return Err(refused(&"its offset's sign is U+2212, not '-'"));
    }
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| refused(&e))
}

/// `value` typed as `T` when it is a JSON object.
fn typed<T: DeserializeOwned>(value: Value, what: &str) -> Result<T, String> {
    if !value.is_object() {
        return Err(not_an_object(&value, what));
    }
    T::deserialize(value).map_err(|e| e.to_string())
}

fn not_an_object(value: &Value, what: &str) -> String {
    format!(
        "invalid type: {}, expected an object for {what}",
        kind(value)
    )
}

/// The JSON type of `value`, as an error names it.
pub(crate) fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn date_times_are_rfc3339_and_nothing_else() {
        let utc = |text: &str| rfc3339(text).map(|t| t.to_rfc3339());
        assert_eq!(
            utc("2026-11-29t11:30:00.5+01:30"),
            Ok("2026-11-29T10:00:00.500+00:00".into())
        );
        assert_eq!(
            utc("2026-06-30T23:59:60z"),
            Ok("2026-06-30T23:59:60+00:00".into())
        );
        for text in [
            "2026-11-29 10:00:00Z",
            "2026-11-29T10:00:00\u{2212}01:00",
            "2026-11-29T10:00:00+0100",
            "2026-11-29T10:00:00UTC",
            "2026-1-29T10:00:00Z",
            " 2026-11-29T10:00:00Z",
            "2026-11-29T10:00:00Z ",
            "2026-02-29T10:00:00Z",
        ] {
            let why = utc(text).unwrap_err();
            assert!(why.contains("not an RFC 3339 date-time"), "{text:?}: {why}");
        }
    }

    #[test]
    fn a_document_must_be_an_object() {
        let why = document::<BTreeMap<String, u8>>(&json!([1]), "a plan").unwrap_err();
        assert_eq!(why, "invalid type: array, expected an object for a plan");
        assert!(document::<BTreeMap<String, u8>>(&json!({"a": 1}), "a plan").is_ok());
    }
}
