//! The demo's principal and the mandate it grants the demo planner (docs/security.md): a
//! fresh principal key each run, a mandate signed with it for the supplier agents'
//! skills, the executor's account of it before and after the saga, and, with
//! `--fail-at over-budget`, a second goal whose plan the executor refuses
//! `MANDATE_EXHAUSTED` because the first saga used the budget.

use std::path::Path;

use agent_host::sdk::{PartContent, Task, TaskState};
use chrono::{SubsecRound, TimeDelta, Utc};
use serde_json::{Value, json};
use shared_types::{Mandate, SigningIdentity};

use super::{Clock, FailAt, GOAL, Running, write};
use crate::a2a::{message_text, state_name};
use crate::failure::Failure;

/// The principal's key files and the signed mandate, in the run's folder.
pub const PRINCIPAL_KEY_FILE: &str = "principal.jwk";
pub const PRINCIPAL_PUB_FILE: &str = "principal.pub.jwk";
pub const MANDATE_FILE: &str = "mandate.json";

pub const MANDATE_ID: &str = "md_demo";

/// The demo principal's key id.
const PRINCIPAL_KID: &str = "demo-principal";

/// What the supplier demo's mandate may be spent on: the supplier agents' forward skills.
pub const SUPPLIER_SCOPE: &[(&str, &[&str])] = &[
    ("vendor-registry", &["vendor.create"]),
    ("budget", &["budget.reserve"]),
    ("sandbox", &["sandbox.provision"]),
    (
        "compliance-registry",
        &["compliance.check", "compliance.review"],
    ),
    ("payments", &["payments.capture"]),
    ("mailer", &["email.send"]),
];

/// The code the executor refuses the second saga with in `over-budget`.
pub const EXHAUSTED: &str = "MANDATE_EXHAUSTED";

/// What the supplier demo's principal grants: 1000.00 EUR, at most 250.00 EUR a saga;
/// with `over-budget`, 200.00 EUR, which one 120.00 EUR saga leaves too little of for a
/// second. In minor units: the budget and the per-saga cap.
pub fn supplier_budget(fail_at: FailAt) -> (u64, Option<u64>) {
    if fail_at == FailAt::OverBudget {
        (20_000, None)
    } else {
        (100_000, Some(25_000))
    }
}

/// Creates the principal's key (`principal.jwk`, `principal.pub.jwk`, 0600) and signs
/// the mandate it grants `planner_kid` (`mandate.json`) for a week: `budget` and
/// `per_saga` EUR minor units, for the skills of `scope`.
pub fn grant(
    work: &Path,
    planner_kid: &str,
    (budget, per_saga): (u64, Option<u64>),
    scope: &[(&str, &[&str])],
) -> Result<Mandate, Failure> {
    let principal = SigningIdentity::generate(Some(PRINCIPAL_KID.into()))
        .map_err(|e| Failure::unusable(format!("cannot generate a key: {e}")))?;
    write(&work.join(PRINCIPAL_KEY_FILE), &principal.private_jwk())?;
    write(&work.join(PRINCIPAL_PUB_FILE), &principal.public_jwk())?;
    let now = Utc::now().trunc_subsecs(0);
    let scope: Vec<Value> = scope
        .iter()
        .map(|(agent, skills)| json!({"agent": agent, "skills": skills}))
        .collect();
    let mut document = json!({
        "mandateId": MANDATE_ID,
        "principal": "ACME Procurement (demo principal)",
        "grantees": [planner_kid],
        "budget": {"currency": "EUR", "amountMinor": budget},
        "notBefore": (now - TimeDelta::minutes(5)).to_rfc3339(),
        "notAfter": (now + TimeDelta::days(7)).to_rfc3339(),
        "scope": scope,
    });
    if let Some(per_saga) = per_saga {
        document["perSaga"] = json!({"currency": "EUR", "amountMinor": per_saga});
    }
    let mandate = Mandate::from_value(&document)
        .map_err(|e| Failure::unusable(format!("the demo's mandate: {e}")))?;
    let signed = mandate
        .signed_by(&principal)
        .map_err(|e| Failure::unusable(format!("cannot sign the demo's mandate: {e}")))?;
    write(&work.join(MANDATE_FILE), &signed)?;
    Ok(mandate)
}

/// One line of what the mandate grants, for the timeline.
pub fn summary(mandate: &Mandate) -> String {
    let cap = mandate
        .per_saga
        .as_ref()
        .map_or(String::new(), |c| format!(", at most {} a saga", major(c)));
    format!(
        "the principal {:?} granted the planner mandate {} ({} in all{cap}, until {})",
        mandate.principal,
        mandate.mandate_id,
        major(&mandate.budget),
        mandate.not_after.to_rfc3339()
    )
}

/// Money in major units, for the demo's currencies (two decimals).
fn major(money: &shared_types::Money) -> String {
    let minor = money.amount_minor.get();
    format!("{}.{:02} {}", minor / 100, minor % 100, money.currency)
}

/// The executor's account of the mandate (budget, reserved, spent, remaining), printed
/// on the timeline and returned for the summary. Until the executor accepts a plan under
/// it, it holds no account: then the account is the mandate's own, nothing reserved.
pub async fn show(running: &Running, when: &str, clock: &Clock) -> Result<Value, Failure> {
    let mut shown = crate::executor_api::mandate_async(
        &running.executor_url(),
        &running.admin_token,
        MANDATE_ID,
    )
    .await?;
    let unseen = shown["mandates"].as_array().is_none_or(Vec::is_empty);
    if unseen {
        shown = unspent(&running.granted);
    }
    let text = crate::commands::describe_mandate(&shown);
    let note = if unseen {
        " (the executor has accepted no plan under it yet)"
    } else {
        ""
    };
    clock.say(&format!("mandate {when}{note}: {}", text.trim_end()));
    Ok(shown)
}

/// A mandate's account before any saga ran under it, in the executor's shape.
fn unspent(mandate: &Mandate) -> Value {
    let budget = mandate.budget.amount_minor.get();
    json!({"mandates": [{
        "mandateId": mandate.mandate_id,
        "principal": mandate.principal,
        "principalKey": PRINCIPAL_KID,
        "currency": mandate.budget.currency.as_str(),
        "budgetMinor": budget,
        "maxSagas": mandate.max_sagas,
        "reservedMinor": 0,
        "spentMinor": 0,
        "remainingMinor": budget,
        "revoked": false,
        "sagas": [],
    }]})
}

/// `over-budget`: sends the goal again once the first saga has ended, and follows the
/// planner's task to its end. Returns that task and what is wrong with it (nothing when
/// the executor refused the plan `MANDATE_EXHAUSTED` and no tool was called).
pub async fn second_saga(running: &Running, clock: &Clock) -> Result<(Task, Vec<String>), Failure> {
    clock.say(&format!("second goal → planner: \"{GOAL}\""));
    let request = crate::commands::goal_message(GOAL, None);
    let task = running.planner.follow_goal(&request, clock).await?;
    let mut problems = Vec::new();
    if task.status.state != TaskState::Rejected {
        problems.push(format!(
            "the second saga's planner task ended {}, expected REJECTED",
            state_name(&task.status.state)
        ));
    }
    if !refused_exhausted(&task) {
        problems.push(format!(
            "the second saga was not refused {EXHAUSTED}: {}",
            task.status
                .message
                .as_ref()
                .map(message_text)
                .unwrap_or_default()
        ));
    }
    Ok((task, problems))
}

/// Whether the task's status carries the executor's `MANDATE_EXHAUSTED` violation.
fn refused_exhausted(task: &Task) -> bool {
    let Some(message) = &task.status.message else {
        return false;
    };
    message.parts.iter().any(|part| match &part.content {
        PartContent::Data(data) => data["violations"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|v| v["code"] == EXHAUSTED),
        PartContent::Text(text) => text.contains(EXHAUSTED),
        _ => false,
    })
}
