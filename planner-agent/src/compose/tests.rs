//! The deterministic planner against the six committed cards: the supplier goal yields
//! the committed example plan, which validates; goals it cannot satisfy say what is
//! missing; ordering follows dependencies and reversibility; steps that need nothing of
//! each other are planned side by side (`after`), a sequence carries no `after`.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use shared_types::{Catalog, Plan, PlanValidator, SigningIdentity, TrustStore};

use super::*;
use crate::backend::{PlanBackend, PlanRequest, RulesBackend};
use crate::templates::{Alias, GoalTemplate};

use test_kit::{AGENTS, read};
const SUPPLIER_GOAL: &str =
    "Onboard supplier ACME GmbH, contact ops@acme.example, setup fee 120 EUR";

fn catalog_of(agents: &[&str]) -> Catalog {
    let mut catalog = Catalog::default();
    for agent in agents {
        catalog
            .add_card(&read(&format!("agent-cards/{agent}.json")))
            .unwrap();
    }
    catalog
}

fn now() -> DateTime<Utc> {
    "2026-11-29T10:00:00Z".parse().unwrap()
}

/// The committed test mandate (granted to `test-planner`), unsigned: composing reads
/// only its content.
fn test_mandate() -> Mandate {
    Mandate::from_value(&read("examples/mandates/test-mandate.json")).unwrap()
}

fn ctx(saga_id: &str) -> PlanContext {
    PlanContext {
        saga_id: saga_id.into(),
        planner_id: "planner@local".into(),
        now: now(),
        mandate: test_mandate(),
        supersedes: None,
    }
}

fn goal(text: &str, data: Option<Value>) -> Goal {
    Goal::parse(text, data.as_ref(), &Templates::builtin()).unwrap()
}

fn plan(text: &str, data: Option<Value>, catalog: &Catalog) -> Result<Plan> {
    rules_plan(
        &goal(text, data),
        &Templates::builtin(),
        catalog,
        &ctx("sg_demo_supplier_onboarding"),
    )
}

fn unsatisfiable(result: Result<Plan>) -> String {
    match result {
        Err(Error::Unsatisfiable(why)) => why,
        other => panic!("expected Unsatisfiable, got {other:?}"),
    }
}

#[test]
fn the_supplier_goal_yields_the_committed_example() {
    let catalog = catalog_of(&AGENTS);
    let planned = plan(
        &format!("{SUPPLIER_GOAL}, max spend 250 EUR"),
        None,
        &catalog,
    )
    .unwrap();
    let example = Plan::from_value(&read("examples/plans/supplier-onboarding.json")).unwrap();
    // The example is the sequence; the planner's plan has the same steps, with branches.
    let mut steps = planned.steps.clone();
    for step in &mut steps {
        assert!(step.after.is_some(), "{} names what it waits for", step.id);
        step.after = None;
    }
    assert_eq!(steps, example.steps, "steps, order, args, compensations");
    assert_eq!(planned.pivot_index, example.pivot_index);
    assert_eq!(
        planned.mandate,
        test_mandate(),
        "the mandate is embedded unchanged"
    );
    assert_eq!(example.mandate.mandate_id, planned.mandate.mandate_id);
    assert_eq!(planned.authored_by.model, "rules-v1");
    assert_eq!(planned.authored_by.agent, "planner@local");
    assert_eq!(planned.authored_by.prompt_sha256, None);
    assert_eq!(planned.plan_version, 1);
    assert_eq!(planned.created_at, now());
    assert!(planned.goal.starts_with(SUPPLIER_GOAL));
}

#[test]
fn the_signed_plan_validates_with_zero_violations() {
    let catalog = catalog_of(&AGENTS);
    let planned = plan(SUPPLIER_GOAL, None, &catalog).unwrap();
    assert_eq!(planned.mandate, test_mandate(), "embedded unchanged");
    // The agent embeds the principal's signed document; here a test principal signs it.
    let principal = SigningIdentity::from_seed([4; 32], Some("principal".into()));
    let key = SigningIdentity::from_seed([3; 32], Some("test-planner".into()));
    let mut value = serde_json::to_value(&planned).unwrap();
    value["mandate"] = planned.mandate.signed_by(&principal).unwrap();
    key.sign_in_place(&mut value).unwrap();
    let trust = |id: &SigningIdentity| {
        let mut trust = TrustStore::new();
        trust.add_jwk(&id.public_jwk()).unwrap();
        trust
    };
    let report = PlanValidator::new(catalog, trust(&key))
        .unwrap()
        .with_principals(trust(&principal))
        .validate(&value, now());
    assert_eq!(report.violations, vec![]);
    assert_eq!(report.mandate_signer.as_deref(), Some("principal"));
}

/// What each step of a plan waits for, as `(id, after)`.
fn afters(plan: &Plan) -> Vec<(&str, Option<Vec<&str>>)> {
    plan.steps
        .iter()
        .map(|s| {
            (
                s.id.as_str(),
                s.after
                    .as_ref()
                    .map(|a| a.iter().map(String::as_str).collect()),
            )
        })
        .collect()
}

#[test]
fn the_supplier_plan_reserves_the_budget_and_provisions_the_sandbox_side_by_side() {
    let catalog = catalog_of(&AGENTS);
    let planned = plan(SUPPLIER_GOAL, None, &catalog).unwrap();
    // s0 vendor.create, s1 budget.reserve, s2 sandbox.provision, s3 compliance.check
    // (reads s2's tenant), s4 payments.capture (the pivot: after every earlier step),
    // s5 email.send (after the pivot). Waits implied by others are left out.
    assert_eq!(
        afters(&planned),
        [
            ("s0", Some(vec![])),
            ("s1", Some(vec!["s0"])),
            ("s2", Some(vec!["s0"])),
            ("s3", Some(vec!["s2"])),
            ("s4", Some(vec!["s1", "s3"])),
            ("s5", Some(vec!["s4"])),
        ]
    );
    assert_eq!(planned.pivot_index, Some(4));
    let order = shared_types::Dependencies::of(&planned);
    assert!(order.problems().is_empty(), "{:?}", order.problems());
    assert!(
        !order.comparable(1, 2),
        "budget.reserve and sandbox.provision need nothing of each other"
    );
    assert!(order.is_ancestor(0, 1) && order.is_ancestor(0, 2));
    for i in 0..planned.steps.len() {
        assert!(i == 4 || order.comparable(i, 4), "s{i} and the pivot");
    }
    // It validates against the executor's catalog, as the planner checks it.
    let violations = PlanValidator::new(catalog, TrustStore::new())
        .unwrap()
        .check(&planned, now());
    assert_eq!(violations, vec![]);
    // The wire form names every step's waits, `[]` included.
    let value = serde_json::to_value(&planned).unwrap();
    assert_eq!(value["steps"][0]["after"], json!([]));
    assert_eq!(value["steps"][4]["after"], json!(["s1", "s3"]));
}

#[test]
fn a_plan_that_is_a_sequence_carries_no_after() {
    // budget.reserve reads vendor.create's vendorId: one before the other, nothing else.
    let template = GoalTemplate {
        intent: "vendor-budget".into(),
        summary: "create a vendor and reserve its budget".into(),
        phrases: vec!["register vendor".into()],
        subject: Some("legalName".into()),
        skills: vec!["vendor.create".into(), "budget.reserve".into()],
        aliases: vec![],
        alternatives: Vec::new(),
    };
    let templates = Templates::new(vec![template]);
    let goal = Goal::parse(
        "register vendor ACME GmbH, contact ops@acme.example, fee 120 EUR",
        None,
        &templates,
    )
    .unwrap();
    let planned = rules_plan(&goal, &templates, &catalog_of(&AGENTS), &ctx("sg_t")).unwrap();
    assert_eq!(afters(&planned), [("s0", None), ("s1", None)]);
    let value = serde_json::to_value(&planned).unwrap();
    for step in value["steps"].as_array().unwrap() {
        assert!(step.get("after").is_none(), "{step}");
    }
}

/// `partial_order` over positions: `deps` (each a set of earlier positions) and the
/// point of no return.
fn order_of(deps: &[&[usize]], no_return: Option<usize>) -> Option<Vec<Vec<usize>>> {
    let deps: Vec<BTreeSet<usize>> = deps.iter().map(|d| d.iter().copied().collect()).collect();
    partial_order(&deps, no_return)
}

#[test]
fn the_partial_order_keeps_data_waits_and_orders_the_point_of_no_return() {
    // A chain of data waits is the sequence: no `after`.
    assert_eq!(order_of(&[&[], &[0], &[1]], None), None);
    assert_eq!(order_of(&[&[], &[0], &[0, 1]], Some(2)), None);
    // Nothing shared: side by side.
    assert_eq!(
        order_of(&[&[], &[], &[]], None),
        Some(vec![vec![], vec![], vec![]])
    );
    // The point of no return waits for every earlier step, later ones wait for it.
    assert_eq!(
        order_of(&[&[], &[], &[], &[]], Some(2)),
        Some(vec![vec![], vec![], vec![0, 1], vec![2]])
    );
    // Waits implied by others are left out: 3 waits for 0 through 1.
    assert_eq!(
        order_of(&[&[], &[0], &[0], &[0, 1]], None),
        Some(vec![vec![], vec![0], vec![0], vec![1]])
    );
    // A point of no return listed first: every later step waits for it.
    assert_eq!(
        order_of(&[&[], &[], &[]], Some(0)),
        Some(vec![vec![], vec![0], vec![0]])
    );
    assert_eq!(order_of(&[&[], &[], &[1]], Some(0)), None);
}

#[test]
fn idempotency_keys_and_saga_ids_come_from_the_plan() {
    let catalog = catalog_of(&AGENTS);
    let planned = rules_plan(
        &goal(SUPPLIER_GOAL, None),
        &Templates::builtin(),
        &catalog,
        &ctx("sg_other"),
    )
    .unwrap();
    for step in &planned.steps {
        assert_eq!(step.idempotency_key, format!("sg_other:{}", step.id));
    }
    let a = new_saga_id();
    let b = new_saga_id();
    assert_ne!(a, b);
    assert!(shared_types::expr::is_valid_id(&a), "{a}");
}

#[test]
fn a_missing_email_is_named() {
    let why = unsatisfiable(plan(
        "Onboard supplier ACME GmbH, setup fee 120 EUR",
        None,
        &catalog_of(&AGENTS),
    ));
    assert!(why.contains("contactEmail"), "{why}");
    assert!(why.contains("vendor.create"), "{why}");
    assert!(why.contains("email.send (as to)"), "{why}");
    assert!(!why.contains("legalName"), "{why}");
}

#[test]
fn a_missing_fee_is_named() {
    let why = unsatisfiable(plan(
        "Onboard supplier ACME GmbH, contact ops@acme.example",
        None,
        &catalog_of(&AGENTS),
    ));
    assert!(
        why.contains("amountMinor") && why.contains("currency"),
        "{why}"
    );
}

#[test]
fn an_unknown_intent_is_rejected() {
    let why = unsatisfiable(plan(
        "Book me a flight to Lisbon",
        None,
        &catalog_of(&AGENTS),
    ));
    assert!(why.contains("no goal template matches"), "{why}");
    assert!(why.contains("onboard supplier"), "{why}");
    let why = unsatisfiable(plan(
        "",
        Some(json!({"intent": "flight-booking"})),
        &catalog_of(&AGENTS),
    ));
    assert!(why.contains("\"flight-booking\""), "{why}");
}

#[test]
fn a_skill_missing_from_the_catalog_is_named() {
    let why = unsatisfiable(plan(SUPPLIER_GOAL, None, &catalog_of(&AGENTS[..4])));
    assert!(
        why.contains("payments.capture") && why.contains("email.send"),
        "{why}"
    );
}

#[test]
fn clauses_it_does_not_understand_are_refused_not_ignored() {
    let why = unsatisfiable(plan(
        &format!("{SUPPLIER_GOAL}, but never pay"),
        None,
        &catalog_of(&AGENTS),
    ));
    assert!(why.contains("\"but never pay\""), "{why}");
}

#[test]
fn a_max_spend_below_the_spend_is_refused() {
    let why = unsatisfiable(plan(
        &format!("{SUPPLIER_GOAL}, max spend 100 EUR"),
        None,
        &catalog_of(&AGENTS),
    ));
    assert!(why.contains("12000") && why.contains("10000"), "{why}");
    let why = unsatisfiable(plan(
        &format!("{SUPPLIER_GOAL}, max spend 500 USD"),
        None,
        &catalog_of(&AGENTS),
    ));
    assert!(why.contains("USD"), "{why}");
}

#[test]
fn parameters_that_read_as_expressions_are_refused() {
    let why = unsatisfiable(plan(
        SUPPLIER_GOAL,
        Some(json!({"legalName": "$steps.s9.response.body#/x"})),
        &catalog_of(&AGENTS),
    ));
    assert!(why.contains("legalName"), "{why}");
}

#[test]
fn data_parameters_are_typed_by_the_schema() {
    let planned = plan(
        "Onboard supplier ACME GmbH",
        Some(
            json!({"contactEmail": "ops@acme.example", "amountMinor": "12000", "currency": "EUR"}),
        ),
        &catalog_of(&AGENTS),
    )
    .unwrap();
    assert_eq!(planned.steps[1].args["amountMinor"], json!(12000));
}

#[test]
fn read_only_checks_early_irreversible_steps_late() {
    // The template lists the pivot first and the check last; the planner reorders them.
    let template = GoalTemplate {
        intent: "reviewed-capture".into(),
        summary: "capture a reviewed fee".into(),
        phrases: vec!["capture reviewed fee for".into()],
        subject: Some("legalName".into()),
        skills: vec![
            "payments.capture".into(),
            "budget.reserve".into(),
            "vendor.create".into(),
            "sandbox.provision".into(),
            "compliance.review".into(),
        ],
        aliases: vec![Alias {
            skill: "payments.capture".into(),
            input: "complianceReference".into(),
            from: "reference".into(),
        }],
        alternatives: Vec::new(),
    };
    let templates = Templates::new(vec![template]);
    let goal = Goal::parse(
        "capture reviewed fee for ACME GmbH, contact ops@acme.example, fee 120 EUR",
        None,
        &templates,
    )
    .unwrap();
    let catalog = catalog_of(&AGENTS);
    let planned = rules_plan(&goal, &templates, &catalog, &ctx("sg_t")).unwrap();
    let skills: Vec<&str> = planned.steps.iter().map(|s| s.skill.as_str()).collect();
    assert_eq!(
        skills,
        [
            "vendor.create",
            "compliance.review",
            "budget.reserve",
            "sandbox.provision",
            "payments.capture"
        ]
    );
    assert_eq!(planned.pivot_index, Some(4));
    // The budget and the sandbox wait for the review (listed before them), not for each
    // other; the capture for both.
    assert_eq!(
        afters(&planned),
        [
            ("s0", Some(vec![])),
            ("s1", Some(vec!["s0"])),
            ("s2", Some(vec!["s1"])),
            ("s3", Some(vec!["s1"])),
            ("s4", Some(vec!["s2", "s3"])),
        ]
    );
    assert_eq!(
        planned.steps[4].args["complianceReference"],
        json!("$steps.s1.response.body#/reference")
    );
    let trust = TrustStore::new();
    let violations = PlanValidator::new(catalog, trust)
        .unwrap()
        .check(&planned, now());
    assert_eq!(violations, vec![]);
}

/// A branch that would run a slow step beside a step whose undo expires sooner: the
/// rules backend plans the steps one after another instead, which is timed to fit.
#[tokio::test]
async fn branches_an_undo_deadline_could_not_survive_are_planned_as_a_sequence() {
    let mut catalog = catalog_of(&AGENTS);
    // budget.reserve now waits up to two days for an approval; sandbox.provision's
    // undo expires an hour after it succeeds, so it may not run beside it.
    let reserve = catalog
        .agents
        .get_mut("budget")
        .and_then(|a| a.skills.get_mut("budget.reserve"))
        .unwrap();
    reserve.requires_approval = true;
    reserve.approval_timeout_seconds = Some(172_800);
    let branched = plan(SUPPLIER_GOAL, None, &catalog).unwrap();
    let validator = PlanValidator::new(catalog.clone(), TrustStore::new()).unwrap();
    let violations = validator.check(&branched, now());
    assert!(
        violations
            .iter()
            .any(|v| v.code == shared_types::ViolationCode::UndoTtlTooShort
                && v.step.as_deref() == Some("s2")),
        "{violations:?}"
    );
    let backend = RulesBackend::new(Templates::builtin());
    let supplier = goal(SUPPLIER_GOAL, None);
    let planned = backend
        .plan(PlanRequest {
            goal: &supplier,
            catalog: &catalog,
            validator: &validator,
            ctx: &ctx("sg_x"),
            replan: None,
        })
        .await
        .unwrap();
    assert!(planned.steps.iter().all(|s| s.after.is_none()));
    assert_eq!(validator.check(&planned, now()), vec![]);
}

#[tokio::test]
async fn the_rules_backend_sorts_violations_into_goal_errors_and_defects() {
    let catalog = catalog_of(&AGENTS);
    let validator = PlanValidator::new(catalog.clone(), TrustStore::new()).unwrap();
    let backend = RulesBackend::new(Templates::builtin());
    let bad_email = goal(
        "Onboard supplier ACME GmbH, setup fee 120 EUR",
        Some(json!({"contactEmail": "ops@"})),
    );
    let result = backend
        .plan(PlanRequest {
            goal: &bad_email,
            catalog: &catalog,
            validator: &validator,
            ctx: &ctx("sg_x"),
            replan: None,
        })
        .await;
    match result {
        Err(Error::Unsatisfiable(why)) => assert!(why.contains("ARGS_INVALID"), "{why}"),
        other => panic!("expected Unsatisfiable, got {other:?}"),
    }
    // A mandate whose window ends before the worst-case path does, or one without
    // mailer in its scope: the goal does not fit it.
    let mut short = ctx("sg_x");
    short.mandate.not_after = now() + chrono::TimeDelta::minutes(1);
    let mut no_mail = ctx("sg_x");
    no_mail.mandate.scope.retain(|s| s.agent != "mailer");
    for (ctx, code) in [(short, "MANDATE_EXPIRED"), (no_mail, "MANDATE_SCOPE")] {
        let supplier = goal(SUPPLIER_GOAL, None);
        let result = backend
            .plan(PlanRequest {
                goal: &supplier,
                catalog: &catalog,
                validator: &validator,
                ctx: &ctx,
                replan: None,
            })
            .await;
        assert!(
            matches!(&result, Err(Error::Unsatisfiable(why)) if why.contains(code) && why.contains("mandate")),
            "{result:?}"
        );
    }
}

/// Planned again after compliance.check failed, the rules call compliance.review (a
/// person-reviewed check) instead, and name the saga the plan supersedes; after any
/// other failure they plan the same calls again.
#[tokio::test]
async fn planned_again_the_rules_review_what_the_failed_check_could_not_clear() {
    let catalog = catalog_of(&AGENTS);
    let validator = PlanValidator::new(catalog.clone(), TrustStore::new()).unwrap();
    let backend = RulesBackend::new(Templates::builtin());
    let supplier = goal(SUPPLIER_GOAL, None);
    let first = plan(SUPPLIER_GOAL, None, &catalog).unwrap();
    let check = first
        .steps
        .iter()
        .find(|s| s.skill == "compliance.check")
        .unwrap();
    let replan = |failed: &str| crate::replan::Replan {
        attempt: 2,
        supersedes: shared_types::Supersedes {
            saga_id: "sg_first".into(),
            executor_task_id: "t-1".into(),
            failed_step: Some(failed.to_owned()),
            reason: "the registry is down".into(),
        },
        previous: serde_json::to_value(&first).unwrap(),
        refusals: Vec::new(),
    };
    let again = |replan: crate::replan::Replan| {
        let (backend, supplier, catalog, validator) = (&backend, &supplier, &catalog, &validator);
        async move {
            let mut ctx = ctx("sg_second");
            ctx.supersedes = Some(replan.supersedes.clone());
            backend
                .plan(PlanRequest {
                    goal: supplier,
                    catalog,
                    validator,
                    ctx: &ctx,
                    replan: Some(&replan),
                })
                .await
                .unwrap()
        }
    };
    let reviewed = again(replan(&check.id)).await;
    let skills: Vec<&str> = reviewed.steps.iter().map(|s| s.skill.as_str()).collect();
    assert!(skills.contains(&"compliance.review"), "{skills:?}");
    assert!(!skills.contains(&"compliance.check"), "{skills:?}");
    assert_eq!(reviewed.supersedes.as_ref().unwrap().saga_id, "sg_first");
    assert_eq!(validator.check(&reviewed, now()), vec![]);
    // The capture still reads the reference, now the review's.
    let review = reviewed
        .steps
        .iter()
        .find(|s| s.skill == "compliance.review")
        .unwrap();
    let capture = reviewed
        .steps
        .iter()
        .find(|s| s.skill == "payments.capture")
        .unwrap();
    assert_eq!(
        capture.args["complianceReference"],
        json!(format!("$steps.{}.response.body#/reference", review.id))
    );

    // The capture failed: the template has no alternative for it.
    let capture_id = first
        .steps
        .iter()
        .find(|s| s.skill == "payments.capture")
        .unwrap()
        .id
        .clone();
    let same = again(replan(&capture_id)).await;
    assert_eq!(
        crate::replan::shape_sha256(&serde_json::to_value(&same).unwrap()),
        crate::replan::shape_sha256(&serde_json::to_value(&first).unwrap())
    );
}
