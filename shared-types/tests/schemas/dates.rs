//! Date-times: the schemas' RFC 3339 pattern and the parsers agree, at random and field by
//! field, for plans, mandates and revocations and for an approval's `expiresAt`; what
//! chrono's serde parser reads beyond RFC 3339 is refused by schema and parser alike.

use std::sync::OnceLock;

use chrono::{DateTime, Utc};
use jsonschema::Validator;
use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::json;
use shared_types::Revocation;

use crate::answer::{approval_expiring, example_answers, parse_answer};
use crate::examples::{example_mandates, example_revocation};
use crate::kind::Kind;
use crate::mutations::NOT_RFC3339;
use crate::registry::{CASES, assert_invalid, compile, read_json, repo, validator};

fn date_validator(pointer: &str) -> Validator {
    compile(&json!({ "$ref": pointer })).unwrap_or_else(|e| panic!("{pointer}: {e}"))
}

/// The date-time parser of plans, mandates and revocations, as they use it: a revocation
/// whose `revokedAt` is `text`.
fn contract_date(text: &str) -> Result<(), String> {
    Revocation::from_value(&json!({"revokedMandateId": "md_1", "revokedAt": text})).map(drop)
}

/// A field of `width` digits: mostly a value at or next to a bound, else any.
fn field(bounds: &[u16], below: u16, width: usize) -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(bounds.to_vec()),
        1 => 0..below,
    ]
    .prop_map(move |n| format!("{n:0width$}"))
}

/// A string of RFC 3339's shape with each field at, next to or past its bounds (leap
/// years and centuries, the 29th to 32nd, hour 24, minute 60, seconds 60 and 61, offsets
/// past ±23:59, a fraction without digits, no offset), and with what
/// `DateTime::parse_from_rfc3339` reads beyond RFC 3339 (a space for `T`, U+2212 for
/// minus) and an offset without its colon, which it refuses.
fn arbitrary_date() -> impl Strategy<Value = String> {
    let offset = prop_oneof![
        prop::sample::select(vec!["Z".to_owned(), "z".to_owned(), String::new()]),
        (
            prop::sample::select(vec!["+", "-", "\u{2212}"]),
            field(&[0, 1, 23, 24], 100, 2),
            prop::sample::select(vec![":", ""]),
            field(&[0, 30, 59, 60], 100, 2),
        )
            .prop_map(|(sign, h, colon, m)| format!("{sign}{h}{colon}{m}")),
    ];
    let year = field(
        &[0, 4, 100, 400, 1900, 2000, 2023, 2024, 2100, 9999],
        10_000,
        4,
    );
    let month = field(&[0, 1, 2, 4, 9, 11, 12, 13], 100, 2);
    let day = field(&[0, 1, 28, 29, 30, 31, 32], 100, 2);
    let hour = field(&[0, 23, 24], 100, 2);
    let minute = field(&[0, 59, 60], 100, 2);
    let second = field(&[0, 59, 60, 61], 100, 2);
    (
        (year, month, day),
        prop::sample::select(vec!["T", "t", " "]),
        (hour, minute, second),
        prop::option::of("[0-9]{0,12}"),
        offset,
    )
        .prop_map(|((y, mo, d), sep, (h, mi, s), fraction, offset)| {
            let fraction = fraction.map(|f| format!(".{f}")).unwrap_or_default();
            format!("{y}-{mo}-{d}{sep}{h}:{mi}:{s}{fraction}{offset}")
        })
}

proptest! {
    #![proptest_config(Config { cases: CASES, failure_persistence: None, ..Config::default() })]

    /// Plans', mandates' and revocations' date-times (`date_time` in
    /// shared-types/src/strict.rs): the schema and the parser agree, day by day, and both
    /// refuse a space for `T`, U+2212 for minus and an offset without its colon.
    #[test]
    fn contract_date_times_agree_with_the_parser(text in arbitrary_date()) {
        static SCHEMA: OnceLock<Validator> = OnceLock::new();
        let schema = SCHEMA.get_or_init(|| date_validator("urn:sagaplane:schema:v1:mandate#/$defs/dateTime"));
        let parsed = contract_date(&text);
        prop_assert_eq!(schema.is_valid(&json!(text)), parsed.is_ok(), "{:?}: the parser says {:?}", text, parsed);
    }

    /// An approval's `expiresAt` (`shared_types::json::parse_rfc3339`, through the
    /// executor's reading of the whole answer): the answer schema and that reading agree,
    /// and both read date-times as plans and mandates do.
    #[test]
    fn approval_expiry_agrees_with_the_executors_reading(text in arbitrary_date()) {
        prop_assert_eq!(approval_expiry_agrees(&text), Ok(()));
    }
}

/// An answer approving until `text`: the answer schema's verdict and the replica of the
/// executor's reading agree, and agree with plans', mandates' and revocations' parser (one
/// date-time rule for the whole contract); `Err` shows the three verdicts.
fn approval_expiry_agrees(text: &str) -> Result<(), String> {
    let answer = approval_expiring(text);
    let valid = validator("answer").is_valid(&answer);
    let read = parse_answer(&answer);
    let contract = contract_date(text);
    if valid == read.is_ok() && read.is_ok() == contract.is_ok() {
        Ok(())
    } else {
        Err(format!(
            "{text:?}: the schema says {valid}, the executor's reading {read:?}, the contract's parser {contract:?}"
        ))
    }
}

/// Date-times of RFC 3339's shape, field by field, each field through its bounds with the
/// others valid: February's last days in every year from 0000 to 2400 (leap years,
/// centuries, 400-year cycles) and beyond; every month's last days; every hour, minute
/// and second at and past its bounds (leap seconds at any minute); offsets, also with
/// U+2212 for minus and without a colon; fractions; a space for `T`, a trailing space.
fn date_sweep() -> Vec<String> {
    let mut out = Vec::new();
    for year in (0..=2400).chain([2401, 4000, 9996, 9999]) {
        for day in 28..=30 {
            out.push(format!("{year:04}-02-{day:02}T10:00:00Z"));
        }
    }
    for year in [2023, 2024] {
        for month in 0..=13 {
            for day in [0, 1, 28, 29, 30, 31, 32] {
                out.push(format!("{year:04}-{month:02}-{day:02}T10:00:00Z"));
            }
        }
    }
    for hour in 0..=24 {
        for minute in [0, 30, 59, 60] {
            for second in [0, 30, 59, 60, 61] {
                out.push(format!("2026-06-30T{hour:02}:{minute:02}:{second:02}Z"));
            }
        }
    }
    for sign in ["+", "-", "\u{2212}"] {
        for colon in [":", ""] {
            for hours in 0..=24 {
                for minutes in [0, 30, 59, 60] {
                    out.push(format!(
                        "2026-06-30T23:59:60{sign}{hours:02}{colon}{minutes:02}"
                    ));
                }
            }
        }
    }
    for separator in ["T", "t", " "] {
        for fraction in ["", ".", ".0", ".5", ".123456789", ".1234567890123", ".x"] {
            for offset in ["Z", "z", "", "+01:00", "Z "] {
                out.push(format!("2026-11-29{separator}10:00:00{fraction}{offset}"));
            }
        }
    }
    out
}

/// The calendar, the clock and the offsets, exhaustively: the schema of plans', mandates'
/// and revocations' date-times agrees with their parser.
#[test]
fn contract_date_times_agree_with_the_parser_field_by_field() {
    let schema = date_validator("urn:sagaplane:schema:v1:mandate#/$defs/dateTime");
    let sweep = date_sweep();
    let accepted = sweep
        .iter()
        .filter(|text| contract_date(text).is_ok())
        .count();
    assert!(
        accepted > 0 && accepted < sweep.len(),
        "the sweep must hold dates both read ({accepted}) and refused"
    );
    let disagreements: Vec<&String> = sweep
        .iter()
        .filter(|text| schema.is_valid(&json!(text)) != contract_date(text).is_ok())
        .collect();
    assert!(disagreements.is_empty(), "{disagreements:?}");
}

/// The same for an approval's `expiresAt`, in a whole answer, and the executor's reading.
#[test]
fn approval_expiry_agrees_with_the_executors_reading_field_by_field() {
    let disagreements: Vec<String> = date_sweep()
        .iter()
        .filter_map(|text| approval_expiry_agrees(text).err())
        .collect();
    assert!(disagreements.is_empty(), "{disagreements:#?}");
}

/// What chrono's own serde parser reads beyond RFC 3339 is refused by the schema and by
/// the parser of every date-time member of every document, a person's answer included.
/// Each form is one chrono's serde reads (checked), so the refusal is the strict parser's
/// doing.
#[test]
fn date_times_outside_rfc3339_are_refused_by_schema_and_parser() {
    let schema = date_validator("urn:sagaplane:schema:v1:mandate#/$defs/dateTime");
    let plan = read_json(&repo().join("examples/plans/supplier-onboarding.json"));
    let mandate = example_mandates().remove(0).1;
    let revocation = example_revocation();
    let answer = example_answers().remove(0);
    let members = [
        (Kind::Plan, &plan, "/createdAt"),
        (Kind::Plan, &plan, "/mandate/notBefore"),
        (Kind::Mandate, &mandate, "/notBefore"),
        (Kind::Mandate, &mandate, "/notAfter"),
        (Kind::Revocation, &revocation, "/revokedAt"),
        (Kind::Answer, &answer, "/approval/expiresAt"),
    ];
    for text in NOT_RFC3339 {
        let chrono = serde_json::from_value::<DateTime<Utc>>(json!(text));
        assert!(
            chrono.is_ok(),
            "{text:?}: chrono's serde parser no longer reads it ({chrono:?}), so it no longer shows the strict parser at work: replace it"
        );
        assert!(
            !schema.is_valid(&json!(text)),
            "{text:?} is not RFC 3339 and should not validate"
        );
        for (kind, seed, pointer) in members {
            let mut doc = seed.clone();
            *doc.pointer_mut(pointer).unwrap() = json!(text);
            let what = format!("{kind:?} with {pointer} {text:?}");
            assert_invalid(kind.schema(), &doc, &what);
            let why = kind.parse(&doc).expect_err(&what);
            // The executor answers an approver with its code and a fixed reason.
            let expected = match kind {
                Kind::Answer => "APPROVAL_UNBOUND: approval.expiresAt is not an RFC 3339",
                _ => "is not an RFC 3339 date-time",
            };
            assert!(why.contains(expected), "{what}: {why}");
        }
    }
}
