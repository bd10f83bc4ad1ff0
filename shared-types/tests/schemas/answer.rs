//! A person's answer (`answer.schema.json`): the executor's reading of it, replicated as
//! the oracle of the answer schema's agreement tests, the example answers they mutate,
//! and the answers in serde's other forms, which both refuse.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::registry::{assert_invalid, assert_valid};

/// `executor-agent/src/answers.rs` `answer_of`, `parse` and `approval_of`, replicated:
/// this crate cannot depend on the executor. Keep it in step with the original; it is the
/// oracle of the answer schema's agreement tests. Refusals start with the executor's code.
pub(crate) fn parse_answer(data: &Value) -> Result<(), String> {
    /// `Resolution` of executor-agent/src/saga/model.rs.
    #[derive(Deserialize, PartialEq)]
    #[serde(rename_all = "kebab-case")]
    enum Resolution {
        Approve,
        Retry,
        ResolvedManually,
        Compensate,
        Withdraw,
    }
    // `answer_of`: a data part without `resolution` is not an answer.
    let resolution = data.get("resolution").ok_or("no resolution")?;
    // `parse`: a string naming a resolution, never serde's `{"retry": null}`.
    let resolution = resolution
        .as_str()
        .and_then(|name| serde_json::from_value::<Resolution>(Value::from(name)).ok())
        .ok_or("RESOLUTION_INVALID: resolution is not one of the strings")?;
    match (resolution == Resolution::Approve, data.get("approval")) {
        (true, None) => Err("APPROVAL_UNBOUND: no approval".to_owned()),
        (true, Some(sent)) => approval_of(sent),
        (false, None) => Ok(()),
        (false, Some(_)) => Err("RESOLUTION_INVALID: only an approve carries an approval".into()),
    }?;
    match (resolution == Resolution::Withdraw, data.get("withdrawal")) {
        (true, None) => Err("WITHDRAWAL_UNBOUND: no withdrawal".into()),
        (true, Some(sent)) => withdrawal_of(sent),
        (false, None) => Ok(()),
        (false, Some(_)) => Err("RESOLUTION_INVALID: only a withdraw carries a withdrawal".into()),
    }
}

/// `withdrawal_of`: a JSON object of the two strings and nothing else.
fn withdrawal_of(sent: &Value) -> Result<(), String> {
    /// `SentWithdrawal` of executor-agent/src/answers.rs.
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    #[allow(dead_code)]
    struct SentWithdrawal {
        saga_id: String,
        step_id: String,
    }
    if !sent.is_object() {
        return Err("WITHDRAWAL_UNBOUND: withdrawal is not an object".into());
    }
    serde_json::from_value::<SentWithdrawal>(sent.clone())
        .map(drop)
        .map_err(|e| format!("WITHDRAWAL_UNBOUND: {e}"))
}

/// `approval_of`: a JSON object (never the array of its values) of the four strings and
/// nothing else, its `expiresAt` read by the contract's one date-time rule.
fn approval_of(sent: &Value) -> Result<(), String> {
    /// `SentApproval` of executor-agent/src/answers.rs.
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    // Only the shape is judged here; the executor's `check` compares the ids and hash.
    #[allow(dead_code)]
    struct SentApproval {
        saga_id: String,
        step_id: String,
        args_sha256: String,
        expires_at: String,
    }
    if !sent.is_object() {
        return Err("APPROVAL_UNBOUND: approval is not an object".into());
    }
    let sent: SentApproval =
        serde_json::from_value(sent.clone()).map_err(|e| format!("APPROVAL_UNBOUND: {e}"))?;
    shared_types::json::parse_rfc3339(&sent.expires_at)
        .map(drop)
        .ok_or_else(|| "APPROVAL_UNBOUND: approval.expiresAt is not an RFC 3339 time".into())
}

/// The first example answer (an approval) with its `expiresAt` set to `text`.
pub(crate) fn approval_expiring(text: &str) -> Value {
    let mut answer = example_answers().remove(0);
    answer["approval"]["expiresAt"] = json!(text);
    answer
}

pub(crate) fn example_answers() -> Vec<Value> {
    vec![
        json!({"resolution": "approve", "approval": {
            "sagaId": "sg_demo_supplier_onboarding", "stepId": "s4",
            "argsSha256": "3f0a5b3c1e8d4b0f9c2a7e6d5b4c3a291807f6e5d4c3b2a1908f7e6d5c4b3a29",
            "expiresAt": "2026-11-29T10:30:00Z"}}),
        json!({"resolution": "retry"}),
        json!({"resolution": "resolved-manually"}),
        json!({"resolution": "compensate"}),
        json!({"resolution": "withdraw", "withdrawal": {
            "sagaId": "sg_demo_supplier_onboarding", "stepId": "s4"}}),
    ]
}

#[test]
fn a_persons_answers_validate() {
    for answer in example_answers() {
        assert_valid("answer", &answer, &answer.to_string());
        assert_eq!(parse_answer(&answer), Ok(()), "{answer}");
    }
    for refused in [
        json!({"resolution": "approve"}),
        json!({"resolution": "retry", "approval": null}),
        json!({"resolution": "approve", "approval": {"sagaId": "a", "stepId": "b", "argsSha256": "c", "expiresAt": "tomorrow"}}),
        json!({"resolution": "approve", "approval": {"sagaId": "a", "stepId": "b", "argsSha256": "c", "expiresAt": "2026-11-29T10:30:00Z", "by": "me"}}),
        json!({"resolution": "resolved_manually"}),
        json!({"approval": {}}),
        json!({"resolution": "withdraw"}),
        json!({"resolution": "compensate", "withdrawal": {"sagaId": "a", "stepId": "b"}}),
        json!({"resolution": "withdraw", "withdrawal": {"sagaId": "a", "stepId": "b", "by": "me"}}),
        json!({"resolution": "withdraw", "withdrawal": ["a", "b"]}),
    ] {
        assert_invalid("answer", &refused, &refused.to_string());
        assert!(parse_answer(&refused).is_err(), "{refused}");
    }
}

/// serde's derive would read a resolution also as a one-member object and an approval as
/// the array of its four values, and chrono's `parse_from_rfc3339` an `expiresAt` with a
/// space for `T` or U+2212 for minus. The executor reads one form of each; the schema and
/// the replica refuse the others, with the executor's code.
#[test]
fn a_persons_answer_has_one_form() {
    let approval = example_answers().remove(0)["approval"].clone();
    let mut cases: Vec<(Value, &str)> = ["approve", "retry", "resolved-manually", "compensate"]
        .into_iter()
        .map(|name| {
            (
                json!({ "resolution": { name: null } }),
                "RESOLUTION_INVALID: ",
            )
        })
        .collect();
    cases.extend([
        (
            json!({"resolution": {"approve": null}, "approval": approval}),
            "RESOLUTION_INVALID: ",
        ),
        (json!({"resolution": ["retry"]}), "RESOLUTION_INVALID: "),
        (
            json!({"resolution": "approve", "approval": ["sg_1", "s4", "ab", "2026-11-29T10:30:00Z"]}),
            "APPROVAL_UNBOUND: ",
        ),
        (
            json!({"resolution": "approve", "approval": approval.as_object().map(|m| m.values().cloned().collect::<Vec<_>>())}),
            "APPROVAL_UNBOUND: ",
        ),
        (approval_expiring("2026-11-29 10:30:00Z"), "APPROVAL_UNBOUND: "),
        (
            approval_expiring("2026-11-29T10:30:00\u{2212}01:00"),
            "APPROVAL_UNBOUND: ",
        ),
    ]);
    for (answer, code) in cases {
        assert_invalid("answer", &answer, &answer.to_string());
        let why = parse_answer(&answer).expect_err(&answer.to_string());
        assert!(why.starts_with(code), "{answer}: {why}");
    }
    // What chrono reads there and RFC 3339 does not: so the refusal is the strict rule's.
    for text in ["2026-11-29 10:30:00Z", "2026-11-29T10:30:00\u{2212}01:00"] {
        assert!(
            chrono::DateTime::parse_from_rfc3339(text).is_ok(),
            "{text:?}"
        );
    }
}
