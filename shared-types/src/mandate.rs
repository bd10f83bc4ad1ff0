//! Mandates: a principal's signed grant of spending authority to named planners, and
//! its revocation (docs/security.md). Both are signed as plans and cards are (JWS over the
//! RFC 8785 canonical JSON without `signatures`). A plan embeds the mandate it runs
//! under with the principal's signature intact, so a planner can narrow what it spends
//! but never raise, extend or widen what it was granted.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::expr::is_valid_id;
use crate::money::Money;
use crate::signing::{self, JwsSignature, SigningIdentity, TrustStore, VerifiedSignatures};
use crate::strict;

/// A principal's grant: a budget across sagas, a validity window, and the agents and
/// skills it may be spent on, for the planners it names. Read strictly, as
/// `spec/schemas/mandate.schema.json` says (see `strict`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Mandate {
    /// Names the mandate among its principal's (1-64 of A-Z a-z 0-9 `_` `-`).
    pub mandate_id: String,
    /// Who grants it: a person or an organisation (for people; the key is the authority).
    pub principal: String,
    /// Key ids of the planners that may sign plans under it.
    pub grantees: Vec<String>,
    /// The total, across every saga run under it.
    #[serde(deserialize_with = "budget")]
    pub budget: Money,
    /// The most one saga may spend, when less than the budget.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "per_saga"
    )]
    pub per_saga: Option<Money>,
    /// How many sagas may run under it, when bounded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_sagas: Option<u32>,
    #[serde(deserialize_with = "strict::date_time")]
    pub not_before: DateTime<Utc>,
    #[serde(deserialize_with = "strict::date_time")]
    pub not_after: DateTime<Utc>,
    /// The agents and skills it may be spent on; a step outside is refused.
    #[serde(deserialize_with = "scope")]
    pub scope: Vec<ScopeEntry>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "signing::signatures"
    )]
    pub signatures: Vec<JwsSignature>,
}

/// One agent and the skills of it a mandate allows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScopeEntry {
    pub agent: String,
    pub skills: Vec<String>,
}

/// A principal's signed statement that a mandate of theirs grants nothing from now on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Revocation {
    pub revoked_mandate_id: String,
    #[serde(deserialize_with = "strict::date_time")]
    pub revoked_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "signing::signatures"
    )]
    pub signatures: Vec<JwsSignature>,
}

fn budget<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Money, D::Error> {
    strict::object(deserializer, "budget")
}

fn per_saga<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Money>, D::Error> {
    strict::optional_object(deserializer, "perSaga")
}

fn scope<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<ScopeEntry>, D::Error> {
    strict::objects(deserializer, "scope")
}

/// The most grantees and scope entries a mandate may list: enough for any real grant,
/// few enough that checking one costs nothing.
pub const MAX_LISTED: usize = 256;

impl Mandate {
    /// Types a mandate from JSON, naming the member that does not fit.
    pub fn from_value(value: &Value) -> std::result::Result<Self, String> {
        strict::document(value, "a mandate")
    }

    /// What is wrong with the mandate's content, each as one sentence; empty when
    /// nothing is. Says nothing of its signature.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !is_valid_id(&self.mandate_id) {
            out.push(format!(
                "mandateId {:?} must be 1-64 of A-Z a-z 0-9 '_' '-'",
                self.mandate_id
            ));
        }
        if self.grantees.is_empty() {
            out.push("it names no grantee planner".into());
        }
        if self.scope.is_empty() || self.scope.iter().any(|s| s.skills.is_empty()) {
            out.push("its scope must name at least one skill for each agent it lists".into());
        }
        if self.grantees.len() > MAX_LISTED
            || self.scope.len() > MAX_LISTED
            || self.scope.iter().any(|s| s.skills.len() > MAX_LISTED)
        {
            out.push(format!(
                "it lists more than {MAX_LISTED} grantees, agents or skills of one agent"
            ));
        }
        if self.not_before >= self.not_after {
            out.push(format!(
                "its window is empty: notBefore {} is not before notAfter {}",
                self.not_before.to_rfc3339(),
                self.not_after.to_rfc3339()
            ));
        }
        if let Some(cap) = &self.per_saga {
            if cap.currency != self.budget.currency {
                out.push(format!(
                    "perSaga is in {}, the budget in {}",
                    cap.currency, self.budget.currency
                ));
            } else if cap.amount_minor > self.budget.amount_minor {
                out.push("perSaga is more than the whole budget".into());
            }
        }
        if self.max_sagas == Some(0) {
            out.push("maxSagas 0 allows no saga".into());
        }
        out
    }

    /// Whether the mandate may be spent on `agent`'s `skill`.
    pub fn allows(&self, agent: &str, skill: &str) -> bool {
        self.scope
            .iter()
            .any(|s| s.agent == agent && s.skills.iter().any(|k| k == skill))
    }

    /// The most one saga under it may spend: its per-saga cap, or else the budget.
    pub fn saga_cap(&self) -> &Money {
        self.per_saga.as_ref().unwrap_or(&self.budget)
    }

    /// Signs the mandate as `principal` and returns it as JSON with its signature.
    pub fn signed_by(&self, principal: &SigningIdentity) -> Result<Value> {
        let mut value =
            serde_json::to_value(self).map_err(|e| Error::json(format!("a mandate: {e}")))?;
        principal.sign_in_place(&mut value)?;
        Ok(value)
    }
}

/// Who signed a mandate, when a trusted principal did and no planner key is among its
/// signers: the key id of that principal. Planner keys are named so that a planner's own
/// signature is refused with the reason, never counted as a grant.
pub fn verify_grant(
    mandate: &Value,
    principals: &TrustStore,
    planner_keys: &TrustStore,
) -> std::result::Result<String, String> {
    verify_grant_remembering(mandate, principals, planner_keys, None)
}

/// `verify_grant`, skipping the Ed25519 check of a principal's signature verified
/// already (`seen`): one mandate comes with every plan under it.
pub fn verify_grant_remembering(
    mandate: &Value,
    principals: &TrustStore,
    planner_keys: &TrustStore,
    seen: Option<&VerifiedSignatures>,
) -> std::result::Result<String, String> {
    if planner_keys.verify(mandate).is_ok() {
        return Err("it is signed by a planner key; only a principal grants a mandate".into());
    }
    let by_principal = match seen {
        Some(seen) => principals.verify_remembering(mandate, seen),
        None => principals.verify(mandate),
    };
    by_principal.map_err(|e| match e {
        Error::SignerUntrusted { kids } => {
            format!("it is signed by {kids}, which is not a trusted principal")
        }
        other => format!("its signature does not verify: {other}"),
    })
}

impl Revocation {
    pub fn from_value(value: &Value) -> std::result::Result<Self, String> {
        strict::document(value, "a revocation")
    }

    /// Signs the revocation as `principal` and returns it as JSON with its signature.
    pub fn signed_by(&self, principal: &SigningIdentity) -> Result<Value> {
        let mut value =
            serde_json::to_value(self).map_err(|e| Error::json(format!("a revocation: {e}")))?;
        principal.sign_in_place(&mut value)?;
        Ok(value)
    }
}

#[cfg(test)]
mod tests;
