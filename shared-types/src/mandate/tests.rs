//! Mandate documents: their content checks, their scope, and whose signature grants.

use serde_json::json;

use super::*;

fn principal() -> SigningIdentity {
    SigningIdentity::from_seed([31; 32], Some("principal".into()))
}

fn planner() -> SigningIdentity {
    SigningIdentity::from_seed([32; 32], Some("planner".into()))
}

fn trust(id: &SigningIdentity) -> TrustStore {
    let mut store = TrustStore::new();
    store.add_jwk(&id.public_jwk()).unwrap();
    store
}

fn mandate() -> Mandate {
    Mandate::from_value(&json!({
        "mandateId": "md_1",
        "principal": "ACME",
        "grantees": ["planner"],
        "budget": {"currency": "EUR", "amountMinor": 10000},
        "perSaga": {"currency": "EUR", "amountMinor": 1000},
        "notBefore": "2026-01-01T00:00:00Z",
        "notAfter": "2027-01-01T00:00:00Z",
        "scope": [{"agent": "budget", "skills": ["budget.reserve"]}]
    }))
    .unwrap()
}

#[test]
fn a_sound_mandate_has_no_problems_and_allows_only_its_scope() {
    let m = mandate();
    assert_eq!(m.problems(), Vec::<String>::new());
    assert!(m.allows("budget", "budget.reserve"));
    assert!(!m.allows("budget", "budget.release"));
    assert!(!m.allows("payments", "budget.reserve"));
    assert_eq!(m.saga_cap().amount_minor.get(), 1000);
}

#[test]
fn each_content_problem_is_named() {
    type Change = Box<dyn Fn(&mut Mandate)>;
    let cases: Vec<(Change, &str)> = vec![
        (Box::new(|m| m.mandate_id = "has space".into()), "mandateId"),
        (Box::new(|m| m.grantees.clear()), "no grantee"),
        (
            Box::new(|m| m.scope[0].skills.clear()),
            "at least one skill",
        ),
        (Box::new(|m| m.not_after = m.not_before), "window is empty"),
        (
            Box::new(|m| {
                m.per_saga.as_mut().unwrap().currency = crate::Currency::new("USD").unwrap()
            }),
            "perSaga is in USD",
        ),
        (
            Box::new(|m| {
                m.per_saga.as_mut().unwrap().amount_minor = crate::AmountMinor::new(10001).unwrap()
            }),
            "more than the whole budget",
        ),
        (Box::new(|m| m.max_sagas = Some(0)), "allows no saga"),
        (
            Box::new(|m| m.grantees = vec!["p".into(); MAX_LISTED + 1]),
            "more than 256",
        ),
    ];
    for (change, expected) in cases {
        let mut m = mandate();
        change(&mut m);
        let problems = m.problems().join("; ");
        assert!(problems.contains(expected), "{expected}: {problems}");
    }
}

#[test]
fn unknown_members_and_floats_are_refused_when_typing() {
    let mut value = serde_json::to_value(mandate()).unwrap();
    value["maxSpend"] = json!(1);
    assert!(
        Mandate::from_value(&value)
            .unwrap_err()
            .contains("maxSpend")
    );
    let mut value = serde_json::to_value(mandate()).unwrap();
    value["budget"]["amountMinor"] = json!(10.5);
    assert!(Mandate::from_value(&value).is_err());
}

#[test]
fn only_a_trusted_principal_grants_and_a_planner_key_never_does() {
    let signed = mandate().signed_by(&principal()).unwrap();
    assert_eq!(
        verify_grant(&signed, &trust(&principal()), &trust(&planner())),
        Ok("principal".into())
    );
    // Raised after signing: the signature no longer matches.
    let mut raised = signed.clone();
    raised["budget"]["amountMinor"] = json!(999_999);
    let why = verify_grant(&raised, &trust(&principal()), &trust(&planner())).unwrap_err();
    assert!(why.contains("does not match"), "{why}");
    // Signed by the planner itself: refused as such, even if someone trusted its key as
    // a principal's too.
    let own = mandate().signed_by(&planner()).unwrap();
    let why = verify_grant(&own, &trust(&planner()), &trust(&planner())).unwrap_err();
    assert!(why.contains("planner key"), "{why}");
    let why = verify_grant(&own, &trust(&principal()), &TrustStore::new()).unwrap_err();
    assert!(why.contains("not a trusted principal"), "{why}");
    let unsigned = serde_json::to_value(mandate()).unwrap();
    assert!(verify_grant(&unsigned, &trust(&principal()), &TrustStore::new()).is_err());
}

#[test]
fn a_revocation_is_signed_like_a_mandate() {
    let revocation = Revocation {
        revoked_mandate_id: "md_1".into(),
        revoked_at: "2026-06-01T00:00:00Z".parse().unwrap(),
        reason: Some("budget moved".into()),
        signatures: Vec::new(),
    }
    .signed_by(&principal())
    .unwrap();
    assert_eq!(
        trust(&principal()).verify(&revocation),
        Ok("principal".into())
    );
    assert_eq!(
        Revocation::from_value(&revocation)
            .unwrap()
            .revoked_mandate_id,
        "md_1"
    );
}
