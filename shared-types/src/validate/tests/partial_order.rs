//! Plans whose steps name the steps they wait for (`after`): the dependency codes, reads
//! of results over the partial order, the point of no return's neighbours, and the
//! timing model's parallelism bound.

use super::*;

/// The example plan with these steps' `after` members set (by position).
fn with_after(edits: &[(usize, Value)]) -> Value {
    let mut plan = example();
    for (step, after) in edits {
        plan["steps"][*step]["after"] = after.clone();
    }
    plan
}

/// The violations of a signed plan, as (code, step).
fn verdict(validator: &PlanValidator, plan: Value) -> Vec<(ViolationCode, Option<String>)> {
    validator
        .validate(&signed(plan), now())
        .violations
        .into_iter()
        .map(|v| (v.code, v.step))
        .collect()
}

/// The one violation of a plan refused for one reason: its code, step and message.
fn only(validator: &PlanValidator, plan: Value) -> Violation {
    let report = validator.validate(&signed(plan), now());
    assert_eq!(report.violations.len(), 1, "{:#?}", report.violations);
    report.violations.into_iter().next().unwrap()
}

fn on(step: &str) -> Option<String> {
    Some(step.to_owned())
}

#[test]
fn each_dependency_code_names_the_step_and_says_what_to_do() {
    let v = validator();
    let cases = [
        // An id that is no step.
        (
            with_after(&[(3, json!(["s2", "s9"]))]),
            ViolationCode::UnknownDependency,
            "s3",
            &["\"s9\"", "no step of this plan"][..],
        ),
        // The step itself.
        (
            with_after(&[(3, json!(["s2", "s3"]))]),
            ViolationCode::UnknownDependency,
            "s3",
            &["itself", "remove it"][..],
        ),
        // The same step twice.
        (
            with_after(&[(3, json!(["s2", "s2"]))]),
            ViolationCode::UnknownDependency,
            "s3",
            &["\"s2\" more than once"][..],
        ),
        // s1 waits for s2, which waits for s1.
        (
            with_after(&[(1, json!(["s0", "s2"])), (2, json!(["s1"]))]),
            ViolationCode::DependencyCycle,
            "s1",
            &["s1 → s2 → s1", "remove one of these waits"][..],
        ),
        // s1 waits for s2, listed after it, which does not wait for s1.
        (
            with_after(&[
                (1, json!(["s0", "s2"])),
                (2, json!(["s0"])),
                (3, json!(["s1"])),
            ]),
            ViolationCode::DependencyOrder,
            "s1",
            &[
                "waits for s2, which is listed after it",
                "list every step after",
            ][..],
        ),
    ];
    for (plan, code, step, says) in cases {
        let violation = only(&v, plan);
        assert_eq!(
            (violation.code, violation.step.as_deref()),
            (code, Some(step))
        );
        for needle in says {
            assert!(
                violation.message.contains(needle),
                "{needle} in {}",
                violation.message
            );
        }
    }
}

#[test]
fn every_dependency_violation_is_reported_at_once() {
    let plan = with_after(&[
        // s1 and s2 wait for each other.
        (1, json!(["s0", "s2"])),
        (2, json!(["s1"])),
        // s3 waits for no step, and for itself.
        (3, json!(["s2", "s9", "s3"])),
        // The capture waits for s3 twice, and for s5, listed after it.
        (4, json!(["s3", "s5", "s3"])),
        // The email waits for nothing: it runs before the capture, and reads results
        // of steps it does not wait for.
        (5, json!([])),
    ]);
    assert_eq!(
        verdict(&validator(), plan),
        vec![
            (ViolationCode::DependencyCycle, on("s1")),
            (ViolationCode::UnknownDependency, on("s3")),
            (ViolationCode::UnknownDependency, on("s3")),
            (ViolationCode::UnknownDependency, on("s4")),
            (ViolationCode::DependencyOrder, on("s4")),
            (ViolationCode::PivotOrdering, on("s5")),
            (ViolationCode::BadReference, on("s5")),
            (ViolationCode::BadReference, on("s5")),
        ]
    );
}

#[test]
fn a_step_reads_only_results_of_steps_it_waits_for() {
    let v = validator();
    // s1 and s2 both after s0; s3 after both: s3 reads s2 directly, the capture reads
    // s0 through others.
    let diamond = with_after(&[(2, json!(["s0"])), (3, json!(["s1", "s2"]))]);
    assert_eq!(verdict(&v, diamond), vec![]);
    // s3 waits for s1 only, and still reads s2's tenant: s2 is listed earlier, but may
    // still be running when s3 is called.
    let plan = with_after(&[
        (2, json!(["s0"])),
        (3, json!(["s1"])),
        (4, json!(["s3", "s2"])),
    ]);
    let violation = only(&v, plan);
    assert_eq!(
        (violation.code, violation.step.as_deref()),
        (ViolationCode::BadReference, Some("s3"))
    );
    for needle in [
        "'/tenantId'",
        "step \"s2\" is not among the steps this one waits for",
        "add \"s2\" to this step's after",
    ] {
        assert!(
            violation.message.contains(needle),
            "{needle} in {}",
            violation.message
        );
    }
    // The existing checks hold as before: a later step, no step, an undeclared member.
    for (value, says) in [
        (
            json!("$steps.s5.response.body#/x"),
            "does not run before this one",
        ),
        (
            json!("$steps.s9.response.body#/x"),
            "there is no step \"s9\"",
        ),
        (
            json!("$steps.s0.response.body#/vendorid"),
            "does not declare it",
        ),
    ] {
        let mut plan = with_after(&[(2, json!(["s0"])), (3, json!(["s1", "s2"]))]);
        plan["steps"][3]["args"]["vendorId"] = value;
        let violation = only(&v, plan);
        assert_eq!(violation.code, ViolationCode::BadReference);
        assert!(
            violation.message.contains(says),
            "{says} in {}",
            violation.message
        );
    }
}

#[test]
fn a_step_alongside_the_point_of_no_return_is_refused() {
    let v = validator();
    // The email waits for the compliance check only: it may be sent while the payment
    // is captured, and could not be taken back if the capture failed.
    let violation = only(&v, with_after(&[(5, json!(["s3"]))]));
    assert_eq!(
        (violation.code, violation.step.as_deref()),
        (ViolationCode::PivotOrdering, Some("s5"))
    );
    for needle in [
        "runs alongside s4",
        "make it wait for s4, or make s4 wait for it",
    ] {
        assert!(
            violation.message.contains(needle),
            "{needle} in {}",
            violation.message
        );
    }
    // A compensable step alongside it: the sandbox, which the capture no longer waits
    // for (and the compliance check no longer reads).
    let mut plan = with_after(&[
        (2, json!(["s0"])),
        (3, json!(["s1"])),
        (5, json!(["s4", "s2"])),
    ]);
    plan["steps"][3]["args"]["tenantId"] = json!("t_fixed");
    assert_eq!(
        verdict(&v, plan),
        vec![(ViolationCode::PivotOrdering, on("s2"))]
    );
    // The point of no return waits for a step that cannot be undone (listed after it).
    let plan = with_after(&[(4, json!(["s3", "s5"])), (5, json!(["s3"]))]);
    let report = v.validate(&signed(plan), now());
    assert_eq!(
        codes(&report),
        vec![ViolationCode::DependencyOrder, ViolationCode::PivotOrdering]
    );
    assert_eq!(report.violations[1].step.as_deref(), Some("s5"));
    assert!(
        report.violations[1]
            .message
            .contains("s4 (payments.capture), which cannot be undone, waits for it"),
        "{}",
        report.violations[1].message
    );
}

/// The example without its compliance check, as a diamond: s0 → {s1, s2} → s3 (the
/// capture, the pivot) → s4.
fn diamond() -> Value {
    let mut plan = example();
    let mut steps = plan["steps"].as_array().unwrap().clone();
    steps.remove(3);
    for (i, step) in steps.iter_mut().enumerate() {
        step["id"] = json!(format!("s{i}"));
        step["idempotencyKey"] = json!(format!("sg_demo_supplier_onboarding:s{i}"));
    }
    steps[1]["after"] = json!(["s0"]);
    steps[2]["after"] = json!(["s0"]);
    steps[3]["after"] = json!(["s1", "s2"]);
    steps[3]["args"]["complianceReference"] = json!("c_manual");
    plan["steps"] = Value::Array(steps);
    plan["pivotIndex"] = json!(3);
    plan
}

#[test]
fn a_diamond_before_the_pivot_is_accepted() {
    let report = validator().validate(&signed(diamond()), now());
    assert_eq!(report.violations, vec![]);
    let plan = report.plan.unwrap();
    let order = crate::dependencies::Dependencies::of(&plan);
    assert!(!order.is_sequence() && !order.comparable(1, 2) && order.is_ancestor(0, 4));
}

/// s0 → s1 (sandbox, whose undo expires after `ttl` s) → {s2, s3} (two compliance
/// checks, 6.75 s each at worst) → s4 (the capture, 16.5 s) → s5.
fn fork_after_the_sandbox(max_parallel_steps: Option<u32>) -> Value {
    let mut plan = example();
    let template = plan["steps"].as_array().unwrap().clone();
    let mut check = template[3].clone();
    check["args"]["tenantId"] = json!("$steps.s1.response.body#/tenantId");
    let mut steps = vec![
        template[0].clone(),
        template[2].clone(),
        check.clone(),
        check,
    ];
    steps.extend([template[4].clone(), template[5].clone()]);
    for (i, step) in steps.iter_mut().enumerate() {
        step["id"] = json!(format!("s{i}"));
        step["idempotencyKey"] = json!(format!("sg_demo_supplier_onboarding:s{i}"));
    }
    steps[3]["after"] = json!(["s1"]);
    steps[4]["after"] = json!(["s2", "s3"]);
    steps[5]["args"]["login"] = json!("$steps.s1.response.body#/login");
    plan["steps"] = Value::Array(steps);
    plan["pivotIndex"] = json!(4);
    if let Some(k) = max_parallel_steps {
        plan["maxParallelSteps"] = json!(k);
    }
    plan
}

#[test]
fn an_undo_deadline_counts_steps_alongside_each_other_once_per_place() {
    // Between the sandbox's success and the capture's failure: 6.75 + 6.75 + 16.5 = 30 s
    // one after the other, 6.75 + 16.5 + ⌈6.75 / k⌉ with k ≥ 2 at once (26.625 s at k = 2).
    let ttl = |seconds| {
        validator_with("sandbox", "sandbox.provision", |d| {
            d.undo_ttl_seconds = Some(seconds)
        })
    };
    assert_eq!(verdict(&ttl(27), fork_after_the_sandbox(None)), vec![]);
    assert_eq!(
        verdict(
            &ttl(27).with_max_parallel_steps(2),
            fork_after_the_sandbox(None)
        ),
        vec![]
    );
    // One step at a time, by the plan or by the executor: 30 s.
    let refused = vec![(ViolationCode::UndoTtlTooShort, on("s1"))];
    assert_eq!(verdict(&ttl(27), fork_after_the_sandbox(Some(1))), refused);
    let report = ttl(27)
        .with_max_parallel_steps(1)
        .validate(&signed(fork_after_the_sandbox(Some(4))), now());
    assert_eq!(codes(&report), vec![ViolationCode::UndoTtlTooShort]);
    assert!(
        report.violations[0].message.contains("30.0 s"),
        "{}",
        report.violations[0].message
    );
    // At any k, the longest chain alone is too long for 23 s (6.75 + 16.5).
    assert_eq!(verdict(&ttl(23), fork_after_the_sandbox(None)), refused);
    // The lower bound wins, and a bound of 0 is none.
    let v = ttl(27).with_max_parallel_steps(0);
    assert_eq!(
        v.max_parallel_steps(&Plan::from_value(&fork_after_the_sandbox(Some(3))).unwrap()),
        1
    );
    assert_eq!(
        validator()
            .max_parallel_steps(&Plan::from_value(&fork_after_the_sandbox(Some(3))).unwrap()),
        3
    );
    assert_eq!(
        validator().max_parallel_steps(&Plan::from_value(&fork_after_the_sandbox(None)).unwrap()),
        DEFAULT_MAX_PARALLEL_STEPS
    );
    // maxParallelSteps 0 is refused like any member out of its range.
    assert_eq!(
        verdict(&validator(), fork_after_the_sandbox(Some(0))),
        vec![(ViolationCode::SchemaInvalid, None)]
    );
}

#[test]
fn the_mandate_outlives_the_plan_run_at_once() {
    // One step at a time, the fork takes the sum of its steps' worst calls; at once,
    // the second compliance check (6.75 s) runs alongside the first, its time shared out
    // over the places: about 5.9 s less at the default bound. A mandate that expires
    // 2 s before the sum is refused one step at a time only.
    let mut worst = 0;
    for step in &fork_after_the_sandbox(None)["steps"].as_array().unwrap()[..] {
        let declaration = validator()
            .catalog()
            .declaration(
                step["agent"].as_str().unwrap(),
                step["skill"].as_str().unwrap(),
            )
            .cloned()
            .unwrap();
        worst += call_worst_ms(&declaration);
    }
    let until = now() + TimeDelta::milliseconds(i64::try_from(worst).unwrap() - 2000);
    let expiring = |k: Option<u32>| {
        let mut plan = fork_after_the_sandbox(k);
        plan["mandate"]["notAfter"] = json!(until.to_rfc3339());
        signed(regranted(plan))
    };
    assert_eq!(verdict(&validator(), expiring(None)), vec![]);
    assert_eq!(
        verdict(&validator(), expiring(Some(1))),
        vec![(ViolationCode::MandateExpired, None)]
    );
}
