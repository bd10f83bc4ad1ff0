//! Sagaplane's shared types: the plan artifact, reversibility declarations, signing (JWS
//! over RFC 8785 canonical JSON), runtime expressions and the static plan validator.
//!
//! Pure by design: no async runtime, no network, no clock. Callers pass time in.

pub mod catalog;
pub mod dependencies;
pub mod error;
pub mod expr;
pub mod json;
pub mod mandate;
pub mod mcp;
pub mod money;
pub mod plan;
pub mod reversibility;
pub mod signing;
mod strict;
pub mod validate;

pub use catalog::{Catalog, CatalogAgent};
pub use dependencies::{Dependencies, DependencyProblem};
pub use error::{Error, Result};
pub use mandate::{Mandate, Revocation, ScopeEntry};
pub use money::{AmountMinor, Currency, Money};
pub use plan::{AuthoredBy, MAX_SUPERSEDES_REASON_CHARS, Plan, Step, Supersedes};
pub use reversibility::{
    Compensation, FailureClass, REVERSIBILITY_EXTENSION_URI, RetryPolicy, ReversibilityClass,
    SkillDeclaration,
};
pub use signing::{Jwk, JwsSignature, SigningIdentity, TrustStore, VerifiedSignatures};
pub use validate::{DEFAULT_MAX_PARALLEL_STEPS, PlanValidator, Report, Violation, ViolationCode};
