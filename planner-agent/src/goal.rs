//! Goals: the planner's text grammar and the parameters of an optional data part, merged
//! into one set of named parameters (the data part wins where both speak), plus the
//! control parameters that shape the plan rather than feed a skill.
//!
//! The text is split into clauses at `,`, `;` and line breaks (outside double quotes); a
//! leading `and ` and a trailing `.` are dropped. Each clause is one of (keywords in any
//! case):
//!
//! | clause | parameter |
//! | --- | --- |
//! | an intent phrase of a goal template, then its subject: `Onboard supplier ACME GmbH` | `intent` = `supplier-onboarding`, the template's subject parameter (`legalName` = `ACME GmbH`); quote a subject that holds a comma |
//! | `contact ops@acme.example`, `contact email …`, `email …`, or a bare address | `contactEmail` |
//! | `fee 120 EUR`, `setup fee …`, `onboarding fee …` | `amountMinor` = 12000, `currency` = `EUR` |
//! | `max spend 250 EUR`, `maximum spend …`, `spend limit …`, `maxSpend …` | `maxSpend` |
//! | `expires in 2 hours`, `valid for 90 minutes` (`s`, `min`, `h`, `d` and their long forms) | `expiresInSeconds`, which is refused (below) |
//! | `dry run`, `dry-run`, `dryRun` | `dryRun` = true |
//!
//! Money is `120 EUR`, `EUR 120`, `120.50 EUR`, `€120` (also `$` = USD, `£` = GBP), turned
//! into integer minor units by the currency's exponent (2 for most, 0 for JPY and the like,
//! 3 for BHD and the like); more decimals than the currency has are refused.
//!
//! The data part is an object. Its control members are `intent` (a template id),
//! `dryRun` (boolean), `maxSpend` (`{"amountMinor", "currency"}` or `"250 EUR"`: the most
//! this goal's plan may spend, within its mandate), `mandate` (a principal's signed
//! mandate, embedded unchanged in the plan instead of the planner's own) and `fee`
//! (money, either form), which stands for `amountMinor` + `currency`. Every other member
//! is a skill parameter: it binds the input of that name. Strings are accepted where a
//! number or boolean is meant (`"true"`, `"12000"`), so that `--param k=v` command lines
//! work.
//!
//! A goal no longer sets when its plan expires: the principal's mandate does
//! (`notBefore`, `notAfter`), and a plan embeds it unchanged. So `expiresAt` and
//! `expiresInSeconds` (and the `expires in …` clause) are refused with that reason,
//! rather than dropped: a caller who asked for an earlier expiry would not get it.

use serde_json::{Map, Value, json};
use shared_types::{AmountMinor, Currency, Money};

use crate::templates::Templates;

/// A goal as the planner understood it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Goal {
    /// The goal text as given (text parts joined by line breaks).
    pub text: String,
    /// The goal template's id, from the data part's `intent` or an intent phrase.
    pub intent: Option<String>,
    /// Skill parameters by name.
    pub params: Map<String, Value>,
    pub dry_run: bool,
    /// The most this goal's plan may spend (never more than its mandate allows).
    pub max_spend: Option<Money>,
    /// A principal's signed mandate given with the goal, as received (data part
    /// `mandate`); it takes precedence over the planner's own.
    pub mandate: Option<Value>,
    /// Clauses of the text that match no phrase of the grammar.
    pub not_understood: Vec<String>,
}

/// The control members of a data part; everything else is a skill parameter.
pub const CONTROL_PARAMETERS: [&str; 7] = [
    "intent",
    "dryRun",
    "maxSpend",
    "mandate",
    "expiresAt",
    "expiresInSeconds",
    "fee",
];

impl Goal {
    /// Reads a goal from its text and optional data part. `Err` is a sentence saying which
    /// parameter is unusable and why.
    pub fn parse(text: &str, data: Option<&Value>, templates: &Templates) -> Result<Self, String> {
        let mut goal = Goal {
            text: text.trim().to_owned(),
            ..Goal::default()
        };
        let mut from_text = Map::new();
        for clause in clauses(text) {
            if !read_clause(&clause, templates, &mut from_text) {
                goal.not_understood.push(clause);
            }
        }
        let mut merged = from_text;
        if let Some(data) = data {
            let mut data = data.clone();
            shared_types::json::normalize_integers(&mut data);
            let Value::Object(members) = data else {
                return Err(format!(
                    "the data part must be an object of named parameters, found {data}"
                ));
            };
            // `fee` first, so that an explicit amountMinor or currency beside it wins.
            if let Some(fee) = members.get("fee") {
                let fee = money_value(fee).map_err(|e| format!("fee: {e}"))?;
                merged.insert("amountMinor".into(), json!(fee.amount_minor.get()));
                merged.insert("currency".into(), json!(fee.currency.as_str()));
            }
            for (key, value) in members {
                if key != "fee" {
                    merged.insert(key, value);
                }
            }
        }
        for (key, value) in merged {
            match key.as_str() {
                "intent" => {
                    let intent = value
                        .as_str()
                        .ok_or_else(|| format!("intent must be a string, found {value}"))?;
                    goal.intent = Some(intent.to_owned());
                }
                "dryRun" => goal.dry_run = boolean(&value).map_err(|e| format!("dryRun: {e}"))?,
                "maxSpend" => {
                    goal.max_spend =
                        Some(money_value(&value).map_err(|e| format!("maxSpend: {e}"))?)
                }
                "mandate" => goal.mandate = Some(value),
                "expiresAt" | "expiresInSeconds" => {
                    return Err(format!(
                        "{key}: a goal no longer sets its plan's expiry; the plan runs within its mandate's window \
                         (notBefore to notAfter), which the principal signs: ask the principal for a mandate that ends sooner"
                    ));
                }
                _ => {
                    goal.params.insert(key, value);
                }
            }
        }
        Ok(goal)
    }

    /// The text a plan records as its goal: the text, or the intent and parameters.
    pub fn description(&self) -> String {
        if !self.text.is_empty() {
            return self.text.clone();
        }
        let params = Value::Object(self.params.clone());
        match &self.intent {
            Some(intent) => format!("{intent} {params}"),
            None => params.to_string(),
        }
    }
}

/// Splits at `,`, `;` and line breaks outside double quotes.
fn clauses(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    for c in text.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                current.push(c);
            }
            ',' | ';' | '\n' | '\r' if !quoted => out.push(std::mem::take(&mut current)),
            _ => current.push(c),
        }
    }
    out.push(current);
    out.into_iter()
        .map(|c| {
            let c = c.trim();
            let c = strip_prefix_ci(c, "and ").map_or(c, str::trim_start);
            c.trim_end_matches('.').trim().to_owned()
        })
        .filter(|c| !c.is_empty())
        .collect()
}

/// `text` without `prefix` (compared ignoring ASCII case), when it starts with it.
fn strip_prefix_ci<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &text[prefix.len()..])
}

/// The rest of the clause after the first of `keywords` it starts with, followed by a
/// space (or, with `alone`, nothing).
fn after_keyword<'a>(clause: &'a str, keywords: &[&str]) -> Option<&'a str> {
    keywords.iter().find_map(|k| {
        let rest = strip_prefix_ci(clause, k)?;
        if rest.starts_with(' ') {
            Some(rest.trim())
        } else {
            None
        }
    })
}

fn unquote(text: &str) -> &str {
    text.strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(text)
}

/// Reads one clause into `params`; false when it matches no phrase.
fn read_clause(clause: &str, templates: &Templates, params: &mut Map<String, Value>) -> bool {
    if let Some((template, rest)) = templates.match_phrase(clause) {
        params.insert("intent".into(), json!(template.intent));
        let subject = unquote(rest.trim());
        if let Some(name) = &template.subject
            && !subject.is_empty()
        {
            params.insert(name.clone(), json!(subject));
        }
        return true;
    }
    let lower = clause.to_ascii_lowercase();
    if ["dry run", "dry-run", "dryrun"].contains(&lower.as_str()) {
        params.insert("dryRun".into(), json!(true));
        return true;
    }
    let email = after_keyword(
        clause,
        &[
            "contact email",
            "contact e-mail",
            "contact",
            "email",
            "e-mail",
        ],
    )
    .unwrap_or(clause);
    if looks_like_email(email) {
        params.insert("contactEmail".into(), json!(email));
        return true;
    }
    if let Some(rest) = after_keyword(clause, &["setup fee", "onboarding fee", "fee"]) {
        let rest = strip_prefix_ci(rest, "of ").unwrap_or(rest);
        if let Ok(fee) = parse_money(rest) {
            params.insert("amountMinor".into(), json!(fee.amount_minor.get()));
            params.insert("currency".into(), json!(fee.currency.as_str()));
            return true;
        }
        return false;
    }
    if let Some(rest) = after_keyword(
        clause,
        &[
            "maximum spend",
            "max spend",
            "maxspend",
            "spend limit",
            "spend at most",
        ],
    ) {
        let rest = strip_prefix_ci(rest, "of ").unwrap_or(rest);
        if let Ok(max) = parse_money(rest) {
            params.insert("maxSpend".into(), money_json(&max));
            return true;
        }
        return false;
    }
    if let Some(rest) = after_keyword(clause, &["expires in", "valid for"])
        && let Some(seconds) = parse_duration(rest)
    {
        params.insert("expiresInSeconds".into(), json!(seconds));
        return true;
    }
    false
}

/// A plausible email address: one `@`, something before it, a dot after it, no spaces.
fn looks_like_email(text: &str) -> bool {
    let Some((local, domain)) = text.split_once('@') else {
        return false;
    };
    !local.is_empty()
        && domain.contains('.')
        && !domain.starts_with('.')
        && !domain.ends_with('.')
        && !domain.contains('@')
        && !text.chars().any(|c| c.is_whitespace() || c == '"')
}

/// `90 minutes`, `2 h`, `3600s`, `1 day`.
fn parse_duration(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().ok()?;
    let unit = unit.trim().to_ascii_lowercase();
    let factor = match unit.as_str() {
        "s" | "sec" | "secs" | "second" | "seconds" => 1,
        "m" | "min" | "mins" | "minute" | "minutes" => 60,
        "h" | "hr" | "hrs" | "hour" | "hours" => 3600,
        "d" | "day" | "days" => 86_400,
        _ => return None,
    };
    number.checked_mul(factor)
}

fn boolean(value: &Value) -> Result<bool, String> {
    match value {
        Value::Bool(b) => Ok(*b),
        Value::String(s) if s.eq_ignore_ascii_case("true") => Ok(true),
        Value::String(s) if s.eq_ignore_ascii_case("false") => Ok(false),
        other => Err(format!("expected true or false, found {other}")),
    }
}

/// Money as JSON (`{"currency", "amountMinor"}`).
pub fn money_json(money: &Money) -> Value {
    json!({"currency": money.currency.as_str(), "amountMinor": money.amount_minor.get()})
}

/// Money from a data part: `{"amountMinor", "currency"}` or a string such as `"250 EUR"`.
pub fn money_value(value: &Value) -> Result<Money, String> {
    match value {
        Value::String(s) => parse_money(s),
        Value::Object(_) => serde_json::from_value::<Money>(value.clone()).map_err(|e| {
            format!(
                "expected {{\"amountMinor\": <integer minor units>, \"currency\": \"EUR\"}}: {e}"
            )
        }),
        other => Err(format!(
            "expected \"250 EUR\" or {{\"amountMinor\", \"currency\"}}, found {other}"
        )),
    }
}

/// Digits after the decimal point of a currency's minor unit (ISO 4217).
fn minor_exponent(currency: &str) -> u32 {
    match currency {
        "BIF" | "CLP" | "DJF" | "GNF" | "ISK" | "JPY" | "KMF" | "KRW" | "PYG" | "RWF" | "UGX"
        | "UYI" | "VND" | "VUV" | "XAF" | "XOF" | "XPF" => 0,
        "BHD" | "IQD" | "JOD" | "KWD" | "LYD" | "OMR" | "TND" => 3,
        _ => 2,
    }
}

/// `120 EUR`, `EUR 120`, `120.50 EUR`, `€120`, `120 €`.
pub fn parse_money(text: &str) -> Result<Money, String> {
    let text = text.trim();
    let bad = || {
        format!("{text:?} is not an amount of money; write it like \"120 EUR\" or \"120.50 EUR\"")
    };
    let symbol = |c: char| match c {
        '€' => Some("EUR"),
        '$' => Some("USD"),
        '£' => Some("GBP"),
        _ => None,
    };
    let (amount, code) = if let Some(code) = text.chars().next().and_then(symbol) {
        (
            text[text.chars().next().map_or(0, char::len_utf8)..].trim(),
            code.to_owned(),
        )
    } else if let Some(code) = text.chars().last().and_then(symbol) {
        (
            text[..text.len() - text.chars().last().map_or(0, char::len_utf8)].trim(),
            code.to_owned(),
        )
    } else {
        let (a, b) = text.split_once(char::is_whitespace).ok_or_else(bad)?;
        let (a, b) = (a.trim(), b.trim());
        if a.chars().all(|c| c.is_ascii_alphabetic()) {
            (b, a.to_ascii_uppercase())
        } else {
            (a, b.to_ascii_uppercase())
        }
    };
    let currency = Currency::new(&code)?;
    let exponent = minor_exponent(currency.as_str());
    let (whole, fraction) = amount.split_once('.').unwrap_or((amount, ""));
    if whole.is_empty()
        || !whole.chars().all(|c| c.is_ascii_digit())
        || !fraction.chars().all(|c| c.is_ascii_digit())
    {
        return Err(bad());
    }
    if fraction.len() > exponent as usize {
        return Err(format!(
            "{text:?} has more decimals than {currency} has minor units ({exponent})"
        ));
    }
    let scale = 10u64.pow(exponent);
    let whole: u64 = whole.parse().map_err(|_| bad())?;
    let fraction_minor: u64 = if fraction.is_empty() {
        0
    } else {
        let padded = format!("{fraction:0<width$}", width = exponent as usize);
        padded.parse().map_err(|_| bad())?
    };
    let minor = whole
        .checked_mul(scale)
        .and_then(|m| m.checked_add(fraction_minor))
        .ok_or_else(bad)?;
    Ok(Money {
        currency,
        amount_minor: AmountMinor::new(minor)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str, data: Option<Value>) -> Goal {
        Goal::parse(text, data.as_ref(), &Templates::builtin()).unwrap()
    }

    #[test]
    fn the_supplier_sentence_yields_its_parameters() {
        let goal = parse(
            "Onboard supplier ACME GmbH, contact ops@acme.example, setup fee 120 EUR",
            None,
        );
        assert_eq!(goal.intent.as_deref(), Some("supplier-onboarding"));
        assert_eq!(
            Value::Object(goal.params.clone()),
            json!({"legalName": "ACME GmbH", "contactEmail": "ops@acme.example",
                   "amountMinor": 12000, "currency": "EUR"})
        );
        assert!(goal.not_understood.is_empty());
        assert!(!goal.dry_run);
        assert_eq!(goal.max_spend, None);
    }

    #[test]
    fn control_phrases_and_quoted_subjects() {
        let goal = parse(
            "onboard a new vendor \"Smith, Jones & Co\"; email a@b.example; fee of EUR 99.5; \
             max spend €250, and dry run.",
            None,
        );
        assert_eq!(goal.params["legalName"], "Smith, Jones & Co");
        assert_eq!(goal.params["amountMinor"], 9950);
        assert_eq!(goal.max_spend.unwrap().amount_minor.get(), 25000);
        assert!(goal.dry_run);
        assert!(goal.not_understood.is_empty(), "{:?}", goal.not_understood);
    }

    #[test]
    fn the_data_part_wins_and_strings_are_typed() {
        let goal = parse(
            "Onboard supplier ACME GmbH, contact ops@acme.example, setup fee 120 EUR",
            Some(
                json!({"legalName": "ACME AG", "fee": "150 EUR", "dryRun": "true",
                        "maxSpend": {"currency": "EUR", "amountMinor": 30000.0}}),
            ),
        );
        assert_eq!(goal.params["legalName"], "ACME AG");
        assert_eq!(goal.params["amountMinor"], 15000);
        assert_eq!(goal.params["contactEmail"], "ops@acme.example");
        assert!(goal.dry_run);
        assert_eq!(goal.max_spend.unwrap().amount_minor.get(), 30000);
    }

    #[test]
    fn unknown_clauses_are_kept_for_the_caller_to_judge() {
        let goal = parse("Onboard supplier X, but never pay", None);
        assert_eq!(goal.not_understood, vec!["but never pay".to_owned()]);
        let goal = parse("Make me a sandwich", None);
        assert_eq!(goal.intent, None);
        assert_eq!(goal.not_understood, vec!["Make me a sandwich".to_owned()]);
    }

    #[test]
    fn money_is_exact_or_refused() {
        let m = |s: &str| parse_money(s).map(|m| (m.amount_minor.get(), m.currency.to_string()));
        assert_eq!(m("120 EUR"), Ok((12000, "EUR".into())));
        assert_eq!(m("120.5 eur"), Ok((12050, "EUR".into())));
        assert_eq!(m("JPY 500"), Ok((500, "JPY".into())));
        assert_eq!(m("1.234 KWD"), Ok((1234, "KWD".into())));
        assert_eq!(m("£3"), Ok((300, "GBP".into())));
        assert!(m("1.234 EUR").is_err());
        assert!(m("12,00 EUR").is_err());
        assert!(m("-5 EUR").is_err());
        assert!(m("5 EURO").is_err());
        assert!(m("99999999999999999 EUR").is_err());
        assert!(money_value(&json!({"currency": "EUR", "amountMinor": 1.5})).is_err());
    }

    #[test]
    fn bad_data_is_named() {
        let templates = Templates::builtin();
        let err = Goal::parse("", Some(&json!({"maxSpend": "lots"})), &templates).unwrap_err();
        assert!(err.starts_with("maxSpend:"), "{err}");
        let err = Goal::parse("", Some(&json!([1])), &templates).unwrap_err();
        assert!(err.contains("object"), "{err}");
    }

    #[test]
    fn an_expiry_is_the_mandates_and_a_goal_asking_for_one_is_refused() {
        let templates = Templates::builtin();
        for (text, data) in [
            ("Onboard supplier X, expires in 2 hours", None),
            ("", Some(json!({"expiresInSeconds": 60}))),
            ("", Some(json!({"expiresAt": "2026-11-29T18:00:00Z"}))),
        ] {
            let err = Goal::parse(text, data.as_ref(), &templates).unwrap_err();
            assert!(err.contains("mandate's window"), "{err}");
        }
    }

    #[test]
    fn a_mandate_in_the_data_part_is_kept_as_received() {
        let mandate = json!({"mandateId": "m", "budget": {"currency": "EUR", "amountMinor": 5.0}});
        let goal = parse("Onboard supplier X", Some(json!({"mandate": mandate})));
        assert_eq!(
            goal.mandate,
            Some(json!({"mandateId": "m", "budget": {"currency": "EUR", "amountMinor": 5}}))
        );
        assert!(!goal.params.contains_key("mandate"));
    }
}
