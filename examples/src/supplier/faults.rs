//! Fault switches: what a skill does instead of its normal work, set per skill by flag or
//! at runtime, and the faults behind each of the demo's `--fail-at` scenarios.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};

use super::skills::agent_of;
use super::{Result, SupplierError};

/// What a skill does instead of its normal work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultMode {
    /// The task fails (a definite failure, marked permanent); nothing is applied.
    Decline,
    /// The call is never answered; nothing is applied.
    Hang,
    /// The effect is applied (durably), then the call is never answered.
    ApplyThenHang,
    /// HTTP 503 before the agent sees the call; nothing is applied.
    Unavailable,
    /// A compensation that fails every time (a task that fails, with no failure class:
    /// the executor tries it again per its policy).
    FailAlways,
    /// The first call under each key fails, marked transient (nothing applied); the next
    /// one under the same key works.
    TransientOnce,
    /// Breaks the idempotency promise: every call applies anew, whatever its key.
    NotIdempotent,
    /// Breaks the promise of a compensation called for a forward call that never
    /// happened: it fails instead of answering "nothing to undo".
    StrictUndo,
    /// Breaks the promise that a forward call undone before it arrived is refused: it is
    /// applied.
    AcceptLate,
    /// Breaks the skill's `outputSchema`: the result lacks its first member.
    BadOutput,
    /// `budget.reserve` reserves, but its hold has lapsed by the time it answers: the
    /// `holdExpiresAt` it reports (and records) is the moment the hold was made, not 24
    /// hours later as its card declares. Other skills ignore it.
    ExpireEarly,
}

impl FaultMode {
    pub const ALL: [FaultMode; 11] = [
        Self::Decline,
        Self::Hang,
        Self::ApplyThenHang,
        Self::Unavailable,
        Self::FailAlways,
        Self::TransientOnce,
        Self::ExpireEarly,
        Self::NotIdempotent,
        Self::StrictUndo,
        Self::AcceptLate,
        Self::BadOutput,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Decline => "decline",
            Self::Hang => "hang",
            Self::ApplyThenHang => "apply-then-hang",
            Self::Unavailable => "unavailable",
            Self::FailAlways => "fail-always",
            Self::TransientOnce => "transient-once",
            Self::NotIdempotent => "not-idempotent",
            Self::StrictUndo => "strict-undo",
            Self::AcceptLate => "accept-late",
            Self::BadOutput => "bad-output",
            Self::ExpireEarly => "expire-early",
        }
    }
}

impl fmt::Display for FaultMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for FaultMode {
    type Err = SupplierError;

    fn from_str(s: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| {
                let known: Vec<&str> = Self::ALL.iter().map(|m| m.as_str()).collect();
                SupplierError::Config(format!(
                    "unknown fault mode {s:?}; the modes are {}",
                    known.join(", ")
                ))
            })
    }
}

/// Parses `SKILL=MODE` (e.g. `compliance.check=hang`); the skill must be a demo skill.
pub fn parse_fault(spec: &str) -> Result<(String, FaultMode)> {
    let (skill, mode) = spec
        .split_once('=')
        .ok_or_else(|| SupplierError::Config(format!("fault {spec:?} is not SKILL=MODE")))?;
    let skill = skill.trim();
    if agent_of(skill).is_none() {
        return Err(SupplierError::Config(format!(
            "fault {spec:?}: no demo agent has a skill {skill:?}"
        )));
    }
    Ok((skill.to_owned(), mode.trim().parse()?))
}

/// The faults behind each `--fail-at` mode of the supplier-onboarding demo
/// (docs/getting-started.md): `none`, `compliance`, `capture-decline`,
/// `capture-unknown`, `capture-lost`, `capture-unverified`, `email`, `release`.
pub fn scenario_faults(fail_at: &str) -> Result<Vec<(String, FaultMode)>> {
    let faults: &[(&str, FaultMode)] = match fail_at {
        "none" => &[],
        "compliance" => &[("compliance.check", FaultMode::Hang)],
        "capture-decline" => &[("payments.capture", FaultMode::Decline)],
        "capture-unknown" => &[("payments.capture", FaultMode::ApplyThenHang)],
        "capture-lost" => &[("payments.capture", FaultMode::Hang)],
        "capture-unverified" => &[
            ("payments.capture", FaultMode::ApplyThenHang),
            ("payments.status", FaultMode::Unavailable),
        ],
        "email" => &[("email.send", FaultMode::Unavailable)],
        "release" => &[
            ("compliance.check", FaultMode::Decline),
            ("budget.release", FaultMode::FailAlways),
        ],
        other => {
            return Err(SupplierError::Config(format!(
                "unknown --fail-at mode {other:?}; the modes are none, compliance, \
                 capture-decline, capture-unknown, capture-lost, capture-unverified, email, \
                 release"
            )));
        }
    };
    Ok(faults.iter().map(|(s, m)| ((*s).to_owned(), *m)).collect())
}

/// The fault switches of one agent, shared by its A2A handler, its transport layer and
/// its `PUT /faults` endpoint. Not persisted: a restarted agent starts with its flags.
#[derive(Debug, Clone)]
pub struct Faults {
    agent: &'static str,
    set: Arc<RwLock<BTreeMap<String, FaultMode>>>,
}

impl Faults {
    /// Switches for `agent`, starting with `initial` (each must be one of its skills).
    pub fn new(agent: &'static str, initial: &[(String, FaultMode)]) -> Result<Self> {
        let faults = Self {
            agent,
            set: Arc::default(),
        };
        faults.replace(initial.iter().cloned().collect())?;
        Ok(faults)
    }

    /// The fault set on `skill`, if any.
    pub fn get(&self, skill: &str) -> Option<FaultMode> {
        self.set.read().ok()?.get(skill).copied()
    }

    /// Whether any skill is set to `mode`.
    pub fn any(&self, mode: FaultMode) -> bool {
        self.set
            .read()
            .is_ok_and(|set| set.values().any(|m| *m == mode))
    }

    /// Replaces every fault at once (an empty map clears them).
    pub fn replace(&self, faults: BTreeMap<String, FaultMode>) -> Result<()> {
        if let Some(skill) = faults.keys().find(|s| agent_of(s) != Some(self.agent)) {
            return Err(SupplierError::Config(format!(
                "agent {} has no skill {skill:?}",
                self.agent
            )));
        }
        let mut set = self
            .set
            .write()
            .map_err(|_| SupplierError::Config("fault switches poisoned".into()))?;
        *set = faults;
        Ok(())
    }

    /// The faults set now.
    pub fn snapshot(&self) -> BTreeMap<String, FaultMode> {
        self.set.read().map(|s| s.clone()).unwrap_or_default()
    }
}
