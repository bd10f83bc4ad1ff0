//! Money: integer minor units and an ISO 4217 currency code, never floats.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

/// The largest integer that every JSON implementation (and RFC 8785's canonical form,
/// which goes through IEEE 754 doubles) represents exactly: 2^53 - 1.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// An ISO 4217 alphabetic code: three upper-case ASCII letters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct Currency(String);

impl Currency {
    pub fn new(code: &str) -> Result<Self, String> {
        if code.len() == 3 && code.bytes().all(|b| b.is_ascii_uppercase()) {
            Ok(Self(code.to_owned()))
        } else {
            Err(format!(
                "{code:?} is not an ISO 4217 currency code (three upper-case letters, e.g. \"EUR\")"
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for Currency {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let code = String::deserialize(deserializer)?;
        Currency::new(&code).map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A non-negative amount in minor units (cents for EUR), at most 2^53 - 1 so that it
/// survives canonical JSON exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct AmountMinor(u64);

impl AmountMinor {
    pub fn new(value: u64) -> Result<Self, String> {
        if value <= MAX_SAFE_INTEGER {
            Ok(Self(value))
        } else {
            Err(format!(
                "amount {value} exceeds 2^53-1, the largest exact JSON integer"
            ))
        }
    }

    pub fn get(self) -> u64 {
        self.0
    }
}

impl<'de> Deserialize<'de> for AmountMinor {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = u64::deserialize(deserializer)?;
        AmountMinor::new(value).map_err(serde::de::Error::custom)
    }
}

/// An amount of money.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Money {
    pub currency: Currency,
    pub amount_minor: AmountMinor,
}

impl fmt::Display for Money {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} (minor units)", self.amount_minor.0, self.currency)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn money_round_trips_and_rejects_bad_values() {
        let m: Money = serde_json::from_str(r#"{"currency":"EUR","amountMinor":25000}"#).unwrap();
        assert_eq!(m.amount_minor.get(), 25000);
        assert_eq!(
            serde_json::to_string(&m).unwrap(),
            r#"{"currency":"EUR","amountMinor":25000}"#
        );
        for bad in [
            r#"{"currency":"eur","amountMinor":1}"#,
            r#"{"currency":"EURO","amountMinor":1}"#,
            r#"{"currency":"EUR","amountMinor":-1}"#,
            r#"{"currency":"EUR","amountMinor":1.5}"#,
            r#"{"currency":"EUR","amountMinor":9007199254740992}"#,
            r#"{"currency":"EUR","amountMinor":1,"extra":true}"#,
        ] {
            assert!(serde_json::from_str::<Money>(bad).is_err(), "{bad}");
        }
    }
}
