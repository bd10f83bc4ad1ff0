//! The supplier tool agents' fault switches, against real servers on 127.0.0.1:0: each
//! mode does what the demo's `--fail-at` scenarios rely on (decline, hang, apply-then-hang,
//! unavailable, fail-always, expire-early), faults set by flag and at runtime through `PUT /faults`, and
//! the scenario table of docs/getting-started.md.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use agent_host::sdk::{Task, TaskState};
use sagaplane_examples::supplier::{
    FaultMode, LedgerReport, RunningTool, ToolClient, ToolSettings, check_ledger, parse_fault,
    scenario_faults, start, task_data, task_text,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "tool-secret";
const WAIT: Duration = Duration::from_secs(10);
/// How long a caller waits for an agent that hangs.
const SHORT: Duration = Duration::from_millis(400);

struct Served {
    tool: RunningTool,
    client: ToolClient,
    _shutdown: tokio_util::sync::DropGuard,
}

async fn serve(agent: &str, dir: &Path, faults: &[(&str, FaultMode)]) -> Served {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let shutdown = CancellationToken::new();
    let mut settings = ToolSettings::new(agent, dir, TOKEN);
    settings.faults = faults.iter().map(|(s, m)| ((*s).to_owned(), *m)).collect();
    let tool = start(settings, listener, shutdown.clone()).await.unwrap();
    let client = ToolClient::new(&tool.url, Some(TOKEN)).unwrap();
    Served {
        tool,
        client,
        _shutdown: shutdown.drop_guard(),
    }
}

fn state(task: &Task) -> TaskState {
    task.status.state.clone()
}

fn sound(ledger: &LedgerReport) {
    let problems = check_ledger(ledger);
    assert!(problems.is_empty(), "{problems:#?}\n{ledger:#?}");
}

fn capture() -> Value {
    json!({"vendorId": "v_1", "amountMinor": 12000, "currency": "EUR", "complianceReference": "cr_1"})
}

fn screening() -> Value {
    json!({"vendorId": "v_1", "tenantId": "t_1"})
}

#[tokio::test]
async fn decline_fails_the_task_and_applies_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let payments = serve(
        "payments",
        dir.path(),
        &[("payments.capture", FaultMode::Decline)],
    )
    .await;
    let task = payments
        .client
        .call("payments.capture", capture(), Some("sg:s4"), WAIT)
        .await
        .unwrap();
    assert_eq!(state(&task), TaskState::Failed);
    assert!(task_text(&task).unwrap().contains("declined"));
    assert_eq!(task_data(&task), None);

    let ledger = payments.client.ledger().await.unwrap();
    assert!(ledger.effects.is_empty(), "{ledger:#?}");
    assert_eq!(ledger.calls_with("payments.capture", "declined"), 1);

    // The key was not spent: once the fault is lifted, the same call applies.
    payments.tool.faults.replace(BTreeMap::new()).unwrap();
    let task = payments
        .client
        .call("payments.capture", capture(), Some("sg:s4"), WAIT)
        .await
        .unwrap();
    assert_eq!(state(&task), TaskState::Completed);
    assert_eq!(payments.client.ledger().await.unwrap().effects.len(), 1);
}

#[tokio::test]
async fn hang_never_answers_and_applies_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let compliance = serve(
        "compliance-registry",
        dir.path(),
        &[("compliance.check", FaultMode::Hang)],
    )
    .await;
    for _ in 0..2 {
        let outcome = compliance
            .client
            .call("compliance.check", screening(), Some("sg:s3"), SHORT)
            .await;
        let error = outcome
            .expect_err("a hanging agent never answers")
            .to_string();
        assert!(error.contains("no answer within"), "{error}");
    }
    let ledger = compliance.client.ledger().await.unwrap();
    assert!(ledger.effects.is_empty(), "{ledger:#?}");

    compliance.tool.faults.replace(BTreeMap::new()).unwrap();
    let task = compliance
        .client
        .call("compliance.check", screening(), Some("sg:s3"), WAIT)
        .await
        .unwrap();
    assert_eq!(state(&task), TaskState::Completed);
    let ledger = compliance.client.ledger().await.unwrap();
    assert_eq!(ledger.effects.len(), 1);
    assert_eq!(ledger.calls_with("compliance.check", "applied"), 1);
}

#[tokio::test]
async fn apply_then_hang_applies_once_and_never_answers() {
    let dir = tempfile::tempdir().unwrap();
    let payments = serve(
        "payments",
        dir.path(),
        &[("payments.capture", FaultMode::ApplyThenHang)],
    )
    .await;
    // The executor's view: two attempts with the same key, both unknown outcomes.
    for _ in 0..2 {
        let outcome = payments
            .client
            .call("payments.capture", capture(), Some("sg:s4"), SHORT)
            .await;
        assert!(outcome.is_err(), "{outcome:?}");
    }
    // The same call without the fault answers with the capture the first attempt made.
    payments.tool.faults.replace(BTreeMap::new()).unwrap();
    let task = payments
        .client
        .call("payments.capture", capture(), Some("sg:s4"), WAIT)
        .await
        .unwrap();
    assert_eq!(state(&task), TaskState::Completed);
    let answer = task_data(&task).unwrap();

    let ledger = payments.client.ledger().await.unwrap();
    assert_eq!(ledger.effects.len(), 1, "exactly one capture: {ledger:#?}");
    assert_eq!(ledger.effects[0].result, answer);
    assert_eq!(ledger.calls_with("payments.capture", "applied"), 1);
    assert_eq!(ledger.calls_with("payments.capture", "replayed"), 2);
    sound(&ledger);
}

#[tokio::test]
async fn apply_then_hang_on_a_compensable_step_is_undone_by_its_forward_key() {
    let dir = tempfile::tempdir().unwrap();
    let vendors = serve(
        "vendor-registry",
        dir.path(),
        &[("vendor.create", FaultMode::ApplyThenHang)],
    )
    .await;
    let args = json!({"legalName": "ACME GmbH", "contactEmail": "ops@acme.example"});
    let outcome = vendors
        .client
        .call("vendor.create", args, Some("sg:s0"), SHORT)
        .await;
    assert!(outcome.is_err(), "{outcome:?}");
    // No response to bind the vendor id from: the undo names the forward key.
    let task = vendors
        .client
        .call(
            "vendor.archive",
            json!({"forwardKey": "sg:s0"}),
            Some("sg:s0:undo"),
            WAIT,
        )
        .await
        .unwrap();
    assert_eq!(state(&task), TaskState::Completed);
    assert_eq!(task_data(&task), Some(json!({"archived": true})));
    let ledger = vendors.client.ledger().await.unwrap();
    assert_eq!(
        ledger.effect("sg:s0").unwrap().undone_by.as_deref(),
        Some("sg:s0:undo")
    );
    sound(&ledger);
}

#[tokio::test]
async fn unavailable_answers_503_before_anything_is_applied() {
    let dir = tempfile::tempdir().unwrap();
    let mailer = serve(
        "mailer",
        dir.path(),
        &[("email.send", FaultMode::Unavailable)],
    )
    .await;
    let args = json!({"to": "ops@acme.example", "vendorId": "v_1", "login": "admin@t_1"});
    let outcome = mailer
        .client
        .call("email.send", args.clone(), Some("sg:s5"), WAIT)
        .await;
    // The SDK's transport reads the 503's plain body as a broken JSON-RPC answer: an
    // internal error, which the executor treats as an unknown outcome.
    assert!(outcome.is_err(), "{outcome:?}");

    // On the wire: a plain 503 for the authenticated caller, still a 401 for anyone else.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
        "role": "ROLE_USER", "messageId": "m-1", "parts": [{"data": {"skill": "email.send", "args": args}}]}}});
    let http = reqwest::Client::new();
    let post = |token: Option<&str>| {
        let request = http
            .post(format!("{}/", mailer.tool.url))
            .header("A2A-Version", "1.0")
            .header("Idempotency-Key", "sg:s5")
            .json(&body);
        match token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    };
    assert_eq!(post(Some(TOKEN)).send().await.unwrap().status(), 503);
    assert_eq!(post(None).send().await.unwrap().status(), 401);
    assert_eq!(post(Some("wrong")).send().await.unwrap().status(), 401);

    let ledger = mailer.client.ledger().await.unwrap();
    assert!(ledger.effects.is_empty(), "{ledger:#?}");
    assert_eq!(ledger.calls_with("email.send", "unavailable"), 2);
    // Other routes are unaffected.
    assert_eq!(
        mailer.client.faults().await.unwrap(),
        BTreeMap::from([("email.send".to_owned(), FaultMode::Unavailable)])
    );
}

#[tokio::test]
async fn fail_always_declines_every_compensation_and_nothing_is_undone() {
    let dir = tempfile::tempdir().unwrap();
    let budget = serve(
        "budget",
        dir.path(),
        &[("budget.release", FaultMode::FailAlways)],
    )
    .await;
    let reserve = json!({"vendorId": "v_1", "amountMinor": 12000, "currency": "EUR"});
    let task = budget
        .client
        .call("budget.reserve", reserve, Some("sg:s1"), WAIT)
        .await
        .unwrap();
    let reservation = task_data(&task).unwrap()["reservationId"].clone();
    for _ in 0..3 {
        let task = budget
            .client
            .call(
                "budget.release",
                json!({"reservationId": reservation}),
                Some("sg:s1:undo"),
                WAIT,
            )
            .await
            .unwrap();
        assert_eq!(state(&task), TaskState::Failed);
    }
    let ledger = budget.client.ledger().await.unwrap();
    assert_eq!(ledger.effects.len(), 1);
    assert_eq!(ledger.effects[0].undone_by, None, "{ledger:#?}");
    assert_eq!(ledger.calls_with("budget.release", "declined"), 3);
}

#[tokio::test]
async fn expire_early_reports_a_hold_that_has_lapsed_where_the_card_says_24_hours() {
    let dir = tempfile::tempdir().unwrap();
    let budget = serve("budget", dir.path(), &[]).await;
    let reserve = json!({"vendorId": "v_1", "amountMinor": 12000, "currency": "EUR"});
    let hold_of = |task: &Task| {
        let at = task_data(task).unwrap()["holdExpiresAt"]
            .as_str()
            .map(str::to_owned)
            .unwrap();
        chrono::DateTime::parse_from_rfc3339(&at).unwrap()
    };
    let before = chrono::Utc::now();
    let task = budget
        .client
        .call("budget.reserve", reserve.clone(), Some("sg:s1"), WAIT)
        .await
        .unwrap();
    assert_eq!(state(&task), TaskState::Completed);
    let held = hold_of(&task);
    // A normal hold lapses 24 hours after it was made, as the card's undoTtlSeconds says.
    assert!(held >= before + chrono::TimeDelta::hours(24), "{held}");
    assert!(
        held <= chrono::Utc::now() + chrono::TimeDelta::hours(24),
        "{held}"
    );

    budget
        .tool
        .faults
        .replace(BTreeMap::from([(
            "budget.reserve".to_owned(),
            FaultMode::ExpireEarly,
        )]))
        .unwrap();
    let task = budget
        .client
        .call("budget.reserve", reserve.clone(), Some("sg2:s1"), WAIT)
        .await
        .unwrap();
    assert_eq!(state(&task), TaskState::Completed);
    let lapsed = hold_of(&task);
    assert!(lapsed <= chrono::Utc::now(), "{lapsed}");
    // The reservation is made all the same, and a repeat with its key replays the same
    // lapsed hold, fault or not.
    budget.tool.faults.replace(BTreeMap::new()).unwrap();
    let again = budget
        .client
        .call("budget.reserve", reserve, Some("sg2:s1"), WAIT)
        .await
        .unwrap();
    assert_eq!(task_data(&again), task_data(&task));
    let ledger = budget.client.ledger().await.unwrap();
    assert_eq!(ledger.forwards("budget.reserve").len(), 2);
    sound(&ledger);
}

#[tokio::test]
async fn faults_are_set_at_runtime_with_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let compliance = serve("compliance-registry", dir.path(), &[]).await;
    assert!(compliance.client.faults().await.unwrap().is_empty());
    let set = compliance
        .client
        .set_faults(&BTreeMap::from([(
            "compliance.check".to_owned(),
            FaultMode::Decline,
        )]))
        .await
        .unwrap();
    assert_eq!(set.get("compliance.check"), Some(&FaultMode::Decline));
    let task = compliance
        .client
        .call("compliance.check", screening(), Some("k1"), WAIT)
        .await
        .unwrap();
    assert_eq!(state(&task), TaskState::Failed);
    // The in-process switches are the same ones.
    assert_eq!(
        compliance.tool.faults.get("compliance.check"),
        Some(FaultMode::Decline)
    );

    let http = reqwest::Client::new();
    let url = format!("{}/faults", compliance.tool.url);
    let put = |body: Value, token: Option<&str>| {
        let request = http.put(&url).json(&body);
        match token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    };
    let refused = [
        (json!({"payments.capture": "decline"}), Some(TOKEN), 400),
        (json!({"compliance.check": "explode"}), Some(TOKEN), 400),
        (json!(["compliance.check"]), Some(TOKEN), 400),
        (json!({}), None, 401),
        (json!({}), Some("wrong"), 401),
    ];
    for (body, token, status) in refused {
        let response = put(body.clone(), token).send().await.unwrap();
        assert_eq!(response.status(), status, "{body}");
    }
    assert_eq!(
        compliance.tool.faults.get("compliance.check"),
        Some(FaultMode::Decline),
        "refused requests change nothing"
    );
    // "none" clears a skill, and the map replaces all faults.
    let response = put(json!({"compliance.check": "none"}), Some(TOKEN))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.json::<Value>().await.unwrap(), json!({}));
    let task = compliance
        .client
        .call("compliance.check", screening(), Some("k1"), WAIT)
        .await
        .unwrap();
    assert_eq!(state(&task), TaskState::Completed);
}

#[test]
fn the_demo_scenarios_map_to_faults() {
    let faults = |mode: &str| -> Vec<(String, FaultMode)> { scenario_faults(mode).unwrap() };
    let one = |skill: &str, mode: FaultMode| vec![(skill.to_owned(), mode)];
    assert_eq!(faults("none"), vec![]);
    assert_eq!(
        faults("compliance"),
        one("compliance.check", FaultMode::Hang)
    );
    assert_eq!(
        faults("capture-decline"),
        one("payments.capture", FaultMode::Decline)
    );
    assert_eq!(
        faults("capture-unknown"),
        one("payments.capture", FaultMode::ApplyThenHang)
    );
    assert_eq!(
        faults("capture-lost"),
        one("payments.capture", FaultMode::Hang)
    );
    assert_eq!(
        faults("capture-unverified"),
        vec![
            ("payments.capture".to_owned(), FaultMode::ApplyThenHang),
            ("payments.status".to_owned(), FaultMode::Unavailable),
        ]
    );
    assert_eq!(faults("email"), one("email.send", FaultMode::Unavailable));
    assert_eq!(
        faults("release"),
        vec![
            ("compliance.check".to_owned(), FaultMode::Decline),
            ("budget.release".to_owned(), FaultMode::FailAlways),
        ]
    );
    assert!(scenario_faults("everything").is_err());

    assert_eq!(
        parse_fault("compliance.check=hang").unwrap(),
        ("compliance.check".to_owned(), FaultMode::Hang)
    );
    assert_eq!(
        parse_fault("payments.capture=apply-then-hang").unwrap().1,
        FaultMode::ApplyThenHang
    );
    for bad in [
        "compliance.check",
        "nope.skill=hang",
        "email.send=sometimes",
    ] {
        assert!(parse_fault(bad).is_err(), "{bad}");
    }
}
