//! The supplier tool agents' idempotency and compensation semantics, against real servers
//! on 127.0.0.1:0: replays, reused keys, calls without keys, undos by resource id and by
//! forward key, undos of calls that never happened (tombstones) and the late forward call
//! after them, concurrent repeats, the whole plan's happy path answered per the cards'
//! output schemas, and the ledger checker itself.

use std::path::Path;
use std::time::Duration;

use agent_host::sdk::{Task, TaskState};
use sagaplane_examples::supplier::{
    AGENTS, Effect, EffectKind, LedgerReport, RunningTool, SuiteSettings, Tombstone, ToolClient,
    ToolSettings, check_ledger, start, start_all, task_data, task_text,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "tool-secret";
const WAIT: Duration = Duration::from_secs(10);

struct Served {
    tool: RunningTool,
    client: ToolClient,
    _shutdown: tokio_util::sync::DropGuard,
}

async fn serve(agent: &str, dir: &Path) -> Served {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let shutdown = CancellationToken::new();
    let tool = start(
        ToolSettings::new(agent, dir, TOKEN),
        listener,
        shutdown.clone(),
    )
    .await
    .unwrap();
    let client = ToolClient::new(&tool.url, Some(TOKEN)).unwrap();
    Served {
        tool,
        client,
        _shutdown: shutdown.drop_guard(),
    }
}

async fn call(client: &ToolClient, skill: &str, args: Value, key: Option<&str>) -> Task {
    client.call(skill, args, key, WAIT).await.unwrap()
}

fn completed(task: &Task) -> Value {
    assert_eq!(
        task.status.state,
        TaskState::Completed,
        "{:?}",
        task_text(task)
    );
    task_data(task).expect("a completed task carries its result")
}

fn rejected(task: &Task) -> String {
    assert_eq!(task.status.state, TaskState::Rejected, "{task:?}");
    task_text(task).expect("a refusal says why")
}

fn sound(ledger: &LedgerReport) {
    let problems = check_ledger(ledger);
    assert!(problems.is_empty(), "{problems:#?}\n{ledger:#?}");
}

fn acme() -> Value {
    json!({"legalName": "ACME GmbH", "contactEmail": "ops@acme.example"})
}

#[tokio::test]
async fn a_repeated_key_replays_the_result_and_applies_nothing_new() {
    let dir = tempfile::tempdir().unwrap();
    let vendors = serve("vendor-registry", dir.path()).await;
    let first = completed(&call(&vendors.client, "vendor.create", acme(), Some("sg:s0")).await);
    let again = completed(&call(&vendors.client, "vendor.create", acme(), Some("sg:s0")).await);
    assert_eq!(first, json!({"vendorId": "v_0001"}));
    assert_eq!(again, first);

    let ledger = vendors.client.ledger().await.unwrap();
    assert_eq!(ledger.agent, "vendor-registry");
    assert_eq!(ledger.effects.len(), 1, "{ledger:#?}");
    let effect = &ledger.effects[0];
    assert_eq!(effect.key.as_deref(), Some("sg:s0"));
    assert_eq!(effect.kind, EffectKind::Forward);
    assert_eq!(effect.args, acme());
    assert_eq!(effect.result, first);
    assert_eq!(ledger.calls, 2);
    let outcomes: Vec<&str> = ledger.call_log.iter().map(|c| c.outcome.as_str()).collect();
    assert_eq!(outcomes, ["applied", "replayed"]);
    sound(&ledger);
    // The in-process view is the same ledger.
    assert_eq!(vendors.tool.ledger().await.unwrap(), ledger);
}

#[tokio::test]
async fn concurrent_repeats_of_one_key_apply_once() {
    let dir = tempfile::tempdir().unwrap();
    let budget = serve("budget", dir.path()).await;
    let args = json!({"vendorId": "v_1", "amountMinor": 12000, "currency": "EUR"});
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (url, args) = (budget.tool.url.clone(), args.clone());
        calls.spawn(async move {
            let client = ToolClient::new(&url, Some(TOKEN)).unwrap();
            call(&client, "budget.reserve", args, Some("k")).await
        });
    }
    let results: Vec<Value> = calls.join_all().await.iter().map(completed).collect();
    assert!(
        results.iter().all(|r| *r == results[0]),
        "one result for every repeat: {results:?}"
    );
    assert_eq!(results[0]["reservationId"], "r_0001");
    let ledger = budget.client.ledger().await.unwrap();
    assert_eq!(ledger.effects.len(), 1);
    assert_eq!(ledger.calls_with("budget.reserve", "applied"), 1);
    assert_eq!(ledger.calls_with("budget.reserve", "replayed"), 7);
    sound(&ledger);
}

#[tokio::test]
async fn a_key_reused_with_another_payload_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let vendors = serve("vendor-registry", dir.path()).await;
    completed(&call(&vendors.client, "vendor.create", acme(), Some("sg:s0")).await);
    let other = json!({"legalName": "Other AG", "contactEmail": "ops@other.example"});
    let why = rejected(&call(&vendors.client, "vendor.create", other, Some("sg:s0")).await);
    assert!(why.contains("already used"), "{why}");
    let why = rejected(
        &call(
            &vendors.client,
            "vendor.archive",
            json!({"vendorId": "v_0001"}),
            Some("sg:s0"),
        )
        .await,
    );
    assert!(why.contains("already used for vendor.create"), "{why}");

    let ledger = vendors.client.ledger().await.unwrap();
    assert_eq!(ledger.effects.len(), 1, "nothing new applied: {ledger:#?}");
    assert_eq!(ledger.effects[0].undone_by, None);
    assert_eq!(ledger.refused.len(), 2);
    assert!(
        ledger
            .refused
            .iter()
            .all(|r| r.key.as_deref() == Some("sg:s0"))
    );
    sound(&ledger);
}

#[tokio::test]
async fn effectful_calls_need_a_key_and_arguments_must_fit_the_schema() {
    let dir = tempfile::tempdir().unwrap();
    let vendors = serve("vendor-registry", dir.path()).await;
    let why = rejected(&call(&vendors.client, "vendor.create", acme(), None).await);
    assert!(why.contains("Idempotency-Key"), "{why}");
    let why = rejected(
        &call(
            &vendors.client,
            "vendor.archive",
            json!({"vendorId": "v_1"}),
            None,
        )
        .await,
    );
    assert!(why.contains("Idempotency-Key"), "{why}");
    let why = rejected(
        &call(
            &vendors.client,
            "vendor.create",
            json!({"legalName": "ACME GmbH"}),
            Some("k1"),
        )
        .await,
    );
    assert!(
        why.contains("inputSchema") && why.contains("contactEmail"),
        "{why}"
    );
    let why = rejected(&call(&vendors.client, "payments.capture", json!({}), Some("k2")).await);
    assert!(why.contains("no skill"), "{why}");
    let ledger = vendors.client.ledger().await.unwrap();
    assert!(ledger.effects.is_empty(), "{ledger:#?}");
    assert_eq!(ledger.refused.len(), 4);

    // A read-only skill needs no key.
    let compliance = serve("compliance-registry", dir.path()).await;
    let args = json!({"vendorId": "v_1", "tenantId": "t_1"});
    let answer = completed(&call(&compliance.client, "compliance.check", args, None).await);
    assert_eq!(answer["status"], "clear");
}

#[tokio::test]
async fn an_undo_of_a_call_that_never_happened_leaves_a_tombstone_and_refuses_the_late_call() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = serve("sandbox", dir.path()).await;
    let undo = json!({"forwardKey": "sg:s2"});
    let answer = completed(
        &call(
            &sandbox.client,
            "sandbox.deprovision",
            undo.clone(),
            Some("sg:s2:undo"),
        )
        .await,
    );
    assert_eq!(
        answer,
        json!({"deprovisioned": false, "nothingToUndo": true})
    );
    // The undo's own retry replays.
    let again = completed(
        &call(
            &sandbox.client,
            "sandbox.deprovision",
            undo,
            Some("sg:s2:undo"),
        )
        .await,
    );
    assert_eq!(again, answer);
    // The forward call arrives late: refused, nothing applied.
    let why = rejected(
        &call(
            &sandbox.client,
            "sandbox.provision",
            json!({"vendorId": "v_1"}),
            Some("sg:s2"),
        )
        .await,
    );
    assert!(
        why.contains("compensated") && why.contains("sg:s2:undo"),
        "{why}"
    );

    let ledger = sandbox.client.ledger().await.unwrap();
    assert!(
        ledger.forwards("sandbox.provision").is_empty(),
        "{ledger:#?}"
    );
    assert_eq!(
        ledger
            .tombstones
            .iter()
            .map(|t| (t.forward_key.as_str(), t.undo_key.as_str()))
            .collect::<Vec<_>>(),
        [("sg:s2", "sg:s2:undo")]
    );
    let undo = ledger.effect("sg:s2:undo").unwrap();
    assert_eq!(
        (undo.kind, undo.undoes.as_deref()),
        (EffectKind::Undo, None)
    );
    assert_eq!(
        ledger.calls_with("sandbox.deprovision", "nothing-to-undo"),
        1
    );
    assert_eq!(ledger.calls_with("sandbox.provision", "refused"), 1);
    sound(&ledger);
}

#[tokio::test]
async fn an_undo_by_forward_key_reverses_the_effect_and_the_forward_key_is_spent() {
    let dir = tempfile::tempdir().unwrap();
    let budget = serve("budget", dir.path()).await;
    let args = json!({"vendorId": "v_1", "amountMinor": 12000, "currency": "EUR"});
    completed(
        &call(
            &budget.client,
            "budget.reserve",
            args.clone(),
            Some("sg:s1"),
        )
        .await,
    );
    let undo = json!({"forwardKey": "sg:s1"});
    let answer = completed(
        &call(
            &budget.client,
            "budget.release",
            undo.clone(),
            Some("sg:s1:undo"),
        )
        .await,
    );
    assert_eq!(answer, json!({"released": true}));
    assert_eq!(
        completed(&call(&budget.client, "budget.release", undo, Some("sg:s1:undo")).await),
        answer
    );
    // A repeat of the forward call after its undo does not bring the reservation back.
    let why = rejected(&call(&budget.client, "budget.reserve", args, Some("sg:s1")).await);
    assert!(why.contains("undone"), "{why}");

    let ledger = budget.client.ledger().await.unwrap();
    let forward = ledger.effect("sg:s1").unwrap();
    assert_eq!(forward.undone_by.as_deref(), Some("sg:s1:undo"));
    assert_eq!(
        ledger.effect("sg:s1:undo").unwrap().undoes.as_deref(),
        Some("sg:s1")
    );
    assert!(ledger.tombstones.is_empty());
    sound(&ledger);
}

#[tokio::test]
async fn the_plan_runs_through_all_six_agents_and_unwinds_by_resource_id() {
    let dir = tempfile::tempdir().unwrap();
    let shutdown = CancellationToken::new();
    let _stop = shutdown.clone().drop_guard();
    let settings = SuiteSettings {
        data_dir: dir.path().to_owned(),
        cards_dir: sagaplane_examples::agent_cards_dir(),
        token: TOKEN.into(),
        signer: None,
        faults: Vec::new(),
        serving: Default::default(),
    };
    let tools = start_all(settings, "127.0.0.1:0".parse().unwrap(), shutdown.clone())
        .await
        .unwrap();
    assert_eq!(tools.iter().map(|t| t.agent).collect::<Vec<_>>(), AGENTS);
    let client = |agent: &str| {
        let tool = tools.iter().find(|t| t.agent == agent).unwrap();
        ToolClient::new(&tool.url, Some(TOKEN)).unwrap()
    };
    // Each result must satisfy the skill's outputSchema in the served card.
    let check = |agent: &str, skill: &str, result: &Value| {
        let tool = tools.iter().find(|t| t.agent == agent).unwrap();
        let pointer = format!("/capabilities/extensions/0/params/skills/{skill}/outputSchema");
        let schema = tool.card.pointer(&pointer).unwrap();
        let validator = jsonschema::validator_for(schema).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(result)
            .map(|e| e.to_string())
            .collect();
        assert!(
            errors.is_empty(),
            "{skill}: {result} fails its outputSchema: {errors:?}"
        );
    };
    let step = async |agent: &str, skill: &str, args: Value, key: &str| {
        let result = completed(&call(&client(agent), skill, args, Some(key)).await);
        check(agent, skill, &result);
        result
    };

    let s0 = step("vendor-registry", "vendor.create", acme(), "sg:s0").await;
    let vendor = s0["vendorId"].clone();
    let s1 = step(
        "budget",
        "budget.reserve",
        json!({"vendorId": vendor, "amountMinor": 12000, "currency": "EUR"}),
        "sg:s1",
    )
    .await;
    let s2 = step(
        "sandbox",
        "sandbox.provision",
        json!({"vendorId": vendor}),
        "sg:s2",
    )
    .await;
    let s3 = step(
        "compliance-registry",
        "compliance.check",
        json!({"vendorId": vendor, "tenantId": s2["tenantId"]}),
        "sg:s3",
    )
    .await;
    assert_eq!(s3["status"], "clear");
    let s4 = step(
        "payments",
        "payments.capture",
        json!({"vendorId": vendor, "amountMinor": 12000,
        "currency": "EUR", "complianceReference": s3["reference"]}),
        "sg:s4",
    )
    .await;
    assert_eq!(
        (s4["amountMinor"].as_i64(), s4["currency"].as_str()),
        (Some(12000), Some("EUR"))
    );
    let s5 = step(
        "mailer",
        "email.send",
        json!({"to": "ops@acme.example", "vendorId": vendor, "login": s2["login"]}),
        "sg:s5",
    )
    .await;
    assert!(s5["messageId"].is_string());
    let review = step(
        "compliance-registry",
        "compliance.review",
        json!({"vendorId": vendor}),
        "sg:r",
    )
    .await;
    assert_eq!(review["status"], "clear");

    // Unwind what is compensable, by the ids the forward calls returned.
    let undo = step(
        "sandbox",
        "sandbox.deprovision",
        json!({"tenantId": s2["tenantId"]}),
        "sg:s2:undo",
    )
    .await;
    assert_eq!(undo, json!({"deprovisioned": true}));
    let undo = step(
        "budget",
        "budget.release",
        json!({"reservationId": s1["reservationId"]}),
        "sg:s1:undo",
    )
    .await;
    assert_eq!(undo, json!({"released": true}));
    let undo = step(
        "vendor-registry",
        "vendor.archive",
        json!({"vendorId": vendor}),
        "sg:s0:undo",
    )
    .await;
    assert_eq!(undo, json!({"archived": true}));

    for tool in &tools {
        let ledger = client(tool.agent).ledger().await.unwrap();
        sound(&ledger);
        let forwards = ledger
            .effects
            .iter()
            .filter(|e| e.kind == EffectKind::Forward);
        for effect in forwards {
            let undoable = ["vendor.create", "budget.reserve", "sandbox.provision"];
            let undone = effect.undone_by.clone();
            let key = effect.key.clone().unwrap();
            if undoable.contains(&effect.skill.as_str()) {
                assert_eq!(undone, Some(format!("{key}:undo")), "{ledger:#?}");
            } else {
                assert_eq!(undone, None);
            }
        }
    }
    // Each agent's data sits in its own files.
    for agent in AGENTS {
        assert!(dir.path().join(format!("{agent}.ledger.db")).is_file());
        assert!(dir.path().join(format!("{agent}.tasks.db")).is_file());
    }
}

fn effect(seq: i64, key: &str, skill: &str, kind: EffectKind) -> Effect {
    Effect {
        seq,
        key: Some(key.into()),
        skill: skill.into(),
        kind,
        args: json!({}),
        result: json!({}),
        at: "2026-01-01T00:00:00Z".into(),
        undone_by: None,
        undoes: None,
    }
}

fn ledger(effects: Vec<Effect>, tombstones: Vec<Tombstone>) -> LedgerReport {
    LedgerReport {
        agent: "vendor-registry".into(),
        effects,
        tombstones,
        refused: Vec::new(),
        calls: 0,
        call_log: Vec::new(),
    }
}

#[test]
fn the_ledger_checker_finds_every_broken_invariant() {
    let mut create = effect(1, "k", "vendor.create", EffectKind::Forward);
    create.undone_by = Some("k:undo".into());
    let mut archive = effect(2, "k:undo", "vendor.archive", EffectKind::Undo);
    archive.undoes = Some("k".into());
    assert_eq!(
        check_ledger(&ledger(vec![create.clone(), archive.clone()], vec![])),
        Vec::<String>::new()
    );

    let has = |ledger: &LedgerReport, needle: &str| {
        let problems = check_ledger(ledger);
        assert!(
            problems.iter().any(|p| p.contains(needle)),
            "{needle:?} not in {problems:?}"
        );
    };
    // A key applied twice.
    let twice = effect(3, "k", "vendor.create", EffectKind::Forward);
    has(
        &ledger(vec![create.clone(), archive.clone(), twice], vec![]),
        "applied more than once",
    );
    // An undo of something never applied.
    let mut stray = effect(3, "x:undo", "vendor.archive", EffectKind::Undo);
    stray.undoes = Some("x".into());
    has(
        &ledger(vec![create.clone(), archive.clone(), stray], vec![]),
        "never applied",
    );
    // An effect that names an undo which does not name it back.
    let mut lonely = create.clone();
    lonely.undone_by = Some("k:undo".into());
    has(&ledger(vec![lonely], vec![]), "no such undo reversed it");
    // Two undos of one effect.
    let mut second = effect(3, "k:undo2", "vendor.archive", EffectKind::Undo);
    second.undoes = Some("k".into());
    has(
        &ledger(vec![create.clone(), archive.clone(), second], vec![]),
        "undone more than once",
    );
    // An undo recorded before its effect.
    let (mut early_create, mut early_archive) = (create.clone(), archive.clone());
    early_create.seq = 5;
    early_archive.seq = 4;
    has(
        &ledger(vec![early_archive, early_create], vec![]),
        "recorded before",
    );
    // An undo of another skill's effect.
    let mut wrong = archive.clone();
    wrong.skill = "budget.release".into();
    has(
        &ledger(vec![create.clone(), wrong], vec![]),
        "cannot reverse",
    );
    // A forward effect applied under a tombstoned key.
    let mut nothing = effect(2, "t:undo", "vendor.archive", EffectKind::Undo);
    nothing.result = json!({"archived": false, "nothingToUndo": true});
    let late = effect(3, "t", "vendor.create", EffectKind::Forward);
    let tombstone = Tombstone {
        forward_key: "t".into(),
        undo_key: "t:undo".into(),
        at: "2026-01-01T00:00:00Z".into(),
    };
    has(
        &ledger(vec![nothing, late], vec![tombstone]),
        "found nothing to undo",
    );
}
