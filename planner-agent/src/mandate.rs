//! The mandate a plan runs under: a principal's signed grant (docs/security.md), given to
//! the planner as a file (`--mandate`) or with a goal (data part `mandate`). The planner
//! holds no principal key and cannot change a grant: it embeds the document exactly as
//! received, signatures included, and checks beforehand what it can without the
//! principal's key (the shape, that the grant names this planner, and, through the
//! validator, the window, the scope and the per-saga cap). Whether the principal's
//! signature verifies and is trusted is the executor's to decide.

use serde_json::Value;
use shared_types::{Mandate, SigningIdentity, TrustStore};

/// A mandate as received, and typed.
#[derive(Debug, Clone, PartialEq)]
pub struct Grant {
    /// The document exactly as the principal signed it: what the plan embeds.
    pub signed: Value,
    pub mandate: Mandate,
}

impl Grant {
    /// Reads a signed mandate granted to `planner`'s key id and not signed by its key
    /// (only a principal grants). `Err` is a sentence saying what is wrong with it.
    pub fn read(signed: &Value, planner: &SigningIdentity) -> Result<Self, String> {
        let planner_id = planner.kid();
        let mut signed = signed.clone();
        // A mandate sent in an A2A data part has its integers as doubles; canonical JSON
        // (and so the signature) does not tell them apart, typing does.
        shared_types::json::normalize_integers(&mut signed);
        let mandate = Mandate::from_value(&signed)
            .map_err(|e| format!("the mandate is not a mandate document: {e}"))?;
        let problems = mandate.problems();
        if !problems.is_empty() {
            return Err(format!(
                "mandate {:?}: {}",
                mandate.mandate_id,
                problems.join("; ")
            ));
        }
        if mandate.signatures.is_empty() {
            return Err(format!(
                "mandate {:?} carries no signature; only a principal's signed mandate grants anything \
                 (sagaplane mandate sign)",
                mandate.mandate_id
            ));
        }
        if !mandate.grantees.iter().any(|g| g == planner_id) {
            return Err(format!(
                "mandate {:?} is not granted to this planner (key {planner_id:?}); it is granted to {}",
                mandate.mandate_id,
                mandate.grantees.join(", ")
            ));
        }
        let mut own_key = TrustStore::new();
        own_key
            .add_jwk(&planner.public_jwk())
            .map_err(|e| format!("the planner's own key: {e}"))?;
        if own_key.verify(&signed).is_ok() {
            return Err(format!(
                "mandate {:?} is signed by this planner's own key; only a principal grants a mandate",
                mandate.mandate_id
            ));
        }
        Ok(Self { signed, mandate })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use shared_types::SigningIdentity;

    fn signed(grantees: &[&str]) -> Value {
        let mandate = Mandate::from_value(&json!({
            "mandateId": "md_t", "principal": "P", "grantees": grantees,
            "budget": {"currency": "EUR", "amountMinor": 1000},
            "notBefore": "2026-01-01T00:00:00Z", "notAfter": "2099-01-01T00:00:00Z",
            "scope": [{"agent": "budget", "skills": ["budget.reserve"]}]
        }))
        .unwrap();
        let principal = SigningIdentity::from_seed([1; 32], Some("p".into()));
        mandate.signed_by(&principal).unwrap()
    }

    fn me() -> SigningIdentity {
        SigningIdentity::from_seed([2; 32], Some("me".into()))
    }

    #[test]
    fn a_grant_to_this_planner_is_kept_exactly() {
        let value = signed(&["me"]);
        let grant = Grant::read(&value, &me()).unwrap();
        assert_eq!(grant.signed, value);
        assert_eq!(grant.mandate.mandate_id, "md_t");
    }

    #[test]
    fn what_the_planner_can_tell_without_the_principal_key_is_refused() {
        let why = Grant::read(&signed(&["someone-else"]), &me()).unwrap_err();
        assert!(why.contains("not granted to this planner"), "{why}");
        let mut unsigned = signed(&["me"]);
        unsigned.as_object_mut().unwrap().remove("signatures");
        let why = Grant::read(&unsigned, &me()).unwrap_err();
        assert!(why.contains("no signature"), "{why}");
        let why = Grant::read(&json!({"maxSpend": 1}), &me()).unwrap_err();
        assert!(why.contains("not a mandate"), "{why}");
        let mut empty = signed(&["me"]);
        empty["notAfter"] = json!("2025-01-01T00:00:00Z");
        let why = Grant::read(&empty, &me()).unwrap_err();
        assert!(why.contains("window is empty"), "{why}");
        let own = Grant::read(&signed(&["me"]), &me())
            .unwrap()
            .mandate
            .signed_by(&me())
            .unwrap();
        let why = Grant::read(&own, &me()).unwrap_err();
        assert!(why.contains("own key"), "{why}");
    }
}
