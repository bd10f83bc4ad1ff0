//! Planning again, with the real binaries: the `planner-agent` binary asking a scripted
//! model, the `executor-agent` binary, and the six supplier tool agents
//! (`supplier-tool`), each a process on 127.0.0.1:0. Outcomes are judged from the tool
//! agents' own ledgers, from the goal's task as its caller reads it (its attempts, its
//! end), and the budget from the mandate's account at the executor.
//!
//! - A compliance check that fails unwinds the first plan; the model, shown the failure,
//!   answers another valid plan (a check a person reviews), an approver approves it, and
//!   the goal completes; the mandate settled both sagas, the unwound one's released.
//! - `--max-replans 0` ends as before: FAILED, compensated, one plan.
//! - A failure past the pivot waits for a person, and nothing is planned again.
//! - A cancel during the second attempt unwinds it: CANCELED, both attempts listed.
//! - A plan the executor refuses because its catalog changed while the model drafted (a
//!   skill withdrawn) is planned again from the refusal; a plan refused under a revoked
//!   mandate is not.

mod common;

use std::time::Duration;

use agent_host::sdk::{SendMessageResponse, StreamResponse, Task, TaskState};
use agent_host::{AgentClient, OutboundCall, mint_jwt};
use common::model::*;
use common::processes::*;
use common::*;
use futures::StreamExt;
use sagaplane_examples::supplier::{EffectKind, LedgerReport, ToolClient, check_ledger};
use serde_json::{Value, json};
use shared_types::Revocation;
use tokio_util::sync::CancellationToken;

/// Far longer than any run here takes; only a stuck goal reaches it.
const STUCK: Duration = Duration::from_secs(120);

fn goal() -> String {
    format!("{SUPPLIER_GOAL}, max spend 250 EUR")
}

/// The supplier plan with its compliance check reviewed by a person instead: the review
/// right after the vendor (it needs nothing else, and its approval may wait longer than
/// the sandbox's undo lasts), the capture quoting the review's reference.
fn reviewed_draft() -> Value {
    let vendor = "$steps.s0.response.body#/vendorId";
    json!({"steps": [
        {"id": "s0", "agent": "vendor-registry", "skill": "vendor.create",
         "args": {"legalName": "ACME GmbH", "contactEmail": "ops@acme.example"}},
        {"id": "s1", "agent": "compliance-registry", "skill": "compliance.review",
         "args": {"vendorId": vendor}},
        {"id": "s2", "agent": "budget", "skill": "budget.reserve",
         "args": {"vendorId": vendor, "amountMinor": 12000, "currency": "EUR"}},
        {"id": "s3", "agent": "sandbox", "skill": "sandbox.provision",
         "args": {"vendorId": vendor}},
        {"id": "s4", "agent": "payments", "skill": "payments.capture",
         "args": {"vendorId": vendor, "amountMinor": 12000, "currency": "EUR",
                  "complianceReference": "$steps.s1.response.body#/reference"}},
        {"id": "s5", "agent": "mailer", "skill": "email.send",
         "args": {"to": "ops@acme.example", "vendorId": vendor,
                  "login": "$steps.s3.response.body#/login"}}
    ], "rejectedAlternatives": ["the automated check again: it failed"]})
}

/// The tool agents, the executor (every card registered) and the planner of one test,
/// in a folder of its own, with the model the planner asks.
struct Run {
    dir: tempfile::TempDir,
    tools: Process,
    executor: Process,
    planner: Process,
    model: ScriptedModel,
    client: AgentClient,
    http: reqwest::Client,
}

impl Run {
    /// Starts everything: the tools with `faults` (`SKILL=MODE`), a model answering
    /// `replies` in turn, a planner planning a goal again at most `max_replans` times.
    async fn start(faults: &[&str], replies: Vec<Reply>, max_replans: u32) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let model = ScriptedModel::start(replies, false).await;
        let tools = tool_agents(dir.path(), faults);
        let executor = executor_binary(dir.path());
        let http = reqwest::Client::new();
        for (agent, url) in &tools.urls {
            let registered = http
                .post(format!("{}/admin/cards", executor.url()))
                .bearer_auth(ADMIN_TOKEN)
                .json(&json!({ "url": url }))
                .send()
                .await
                .unwrap();
            assert!(
                registered.status().is_success(),
                "registering {agent}: {}",
                registered.text().await.unwrap_or_default()
            );
        }
        planner_files(dir.path());
        let planner = planner_binary(dir.path(), executor.url(), &model.url, max_replans);
        let client = AgentClient::new(planner.url()).unwrap();
        Self {
            dir,
            tools,
            executor,
            planner,
            model,
            client,
            http,
        }
    }

    /// The planner's and the executor's logs, for a test that fails.
    fn logs(&self) -> String {
        format!(
            "folder {}\n--- planner ---\n{}\n--- executor ---\n{}",
            self.dir.path().display(),
            self.planner.log(),
            self.executor.log()
        )
    }

    /// The goal's task `task_id` once it has ended.
    async fn ended(&self, task_id: &str) -> Task {
        self.until(task_id, "the goal ends", TaskState::is_terminal)
            .await
    }

    /// Reads the goal's task `task_id` as its caller does, following it until its state
    /// is one `reached` accepts; fails if it ends in another, or gets stuck.
    async fn until(&self, task_id: &str, what: &str, reached: impl Fn(&TaskState) -> bool) -> Task {
        let call = OutboundCall::default();
        let waited = async {
            loop {
                let task = self.client.get_task(&call, task_id).await.unwrap();
                let state = task.status.state.clone();
                if reached(&state) {
                    return task;
                }
                assert!(
                    !state.is_terminal(),
                    "the goal ended {state:?} before {what}: {}\n{}",
                    status_text(&task),
                    self.logs()
                );
                // Followed until its state changes, then read again.
                let Ok(mut events) = self.client.subscribe(&call, task_id).await else {
                    continue;
                };
                while let Some(Ok(event)) = events.next().await {
                    let now = match &event {
                        StreamResponse::Task(t) => &t.status.state,
                        StreamResponse::StatusUpdate(u) => &u.status.state,
                        _ => continue,
                    };
                    if *now != state {
                        break;
                    }
                }
            }
        };
        match tokio::time::timeout(STUCK, waited).await {
            Ok(task) => task,
            Err(_) => panic!("{what}: not within {STUCK:?}\n{}", self.logs()),
        }
    }

    /// Sends the goal; its task's id, at once (the planner works on).
    async fn goal_task(&self) -> String {
        send_at_once(&self.client, &goal()).await
    }

    /// A call to the executor as the approver (a fresh JWT: each is good for one request).
    fn as_approver() -> OutboundCall {
        let approver = approver_identity();
        OutboundCall {
            bearer: Some(mint_jwt(&approver, approver.kid(), "executor", 120).unwrap()),
            ..OutboundCall::default()
        }
    }

    /// Answers, as the approver, the executor's task that the goal's task `waiting`
    /// (AUTH_REQUIRED) names: `resolution`, and for `approve` the approval bound to the
    /// step and arguments the executor's task shows, their hash computed again.
    async fn answer(&self, waiting: &Task, resolution: &str) {
        let id = metadata(waiting, "executorTaskId").unwrap();
        let id = id.as_str().unwrap();
        let executor = AgentClient::new(self.executor.url()).unwrap();
        let task = executor.get_task(&Self::as_approver(), id).await.unwrap();
        let mut data = json!({ "resolution": resolution });
        if resolution == "approve" {
            let shown = status_data(&task).unwrap()["approval"].clone();
            let hash = shared_types::json::canonical_sha256(&shown["args"]).unwrap();
            assert_eq!(shown["argsSha256"], json!(hash), "{shown}");
            let expires = chrono::Utc::now() + chrono::Duration::seconds(300);
            data["approval"] = json!({"sagaId": shown["sagaId"], "stepId": shown["stepId"],
                "argsSha256": hash,
                "expiresAt": expires.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)});
        }
        let mut request = agent_host::user_request(None, Some(data), Some(id));
        request.configuration = Some(agent_host::sdk::SendMessageConfiguration {
            accepted_output_modes: None,
            task_push_notification_config: None,
            history_length: None,
            return_immediately: Some(true),
        });
        match executor.send(&Self::as_approver(), &request).await {
            Ok(SendMessageResponse::Task(_)) => {}
            other => panic!(
                "the executor refused the answer: {other:?}\n{}",
                self.logs()
            ),
        }
    }

    /// Every tool agent's own ledger, each checked for the saga's promises (every effect
    /// once, every undo matching an effect).
    async fn ledgers(&self) -> Vec<LedgerReport> {
        let mut ledgers = Vec::new();
        for (agent, url) in &self.tools.urls {
            let ledger = ToolClient::new(url, Some(TOOL_TOKEN))
                .unwrap()
                .ledger()
                .await
                .unwrap();
            assert_eq!(check_ledger(&ledger), Vec::<String>::new(), "{agent}");
            ledgers.push(ledger);
        }
        ledgers
    }

    /// The mandate's account at the executor: budget, reserved, spent, and each saga's
    /// reservation (the tests' one principal's).
    async fn account(&self) -> Value {
        let url = format!(
            "{}/admin/mandates/{}",
            self.executor.url(),
            mandate_doc().mandate_id
        );
        let shown: Value = self
            .http
            .get(url)
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        shown["mandates"].get(0).cloned().unwrap_or(Value::Null)
    }
}

/// The forward effects of `skill` in every ledger, in the order applied: (key, undone).
/// The saga id of the plan the goal's task last submitted.
fn saga_of(task: &Task) -> String {
    plan_artifact(task).unwrap()["sagaId"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Asserts that each of `steps` (skill, step) was called once, for `saga` alone, and
/// undone or standing as `undone` says, as the tools' own ledgers tell.
fn assert_called_once(ledgers: &[LedgerReport], saga: &str, undone: bool, steps: &[(&str, &str)]) {
    for (skill, step) in steps {
        assert_eq!(
            forwards(ledgers, skill),
            [(format!("{saga}:{step}"), undone)],
            "{skill}"
        );
    }
}

fn forwards(ledgers: &[LedgerReport], skill: &str) -> Vec<(String, bool)> {
    ledgers
        .iter()
        .flat_map(|l| l.forwards(skill))
        .map(|e| (e.key.clone().unwrap_or_default(), e.undone_by.is_some()))
        .collect()
}

/// The read-only answers of `skill` in every ledger: their keys.
fn reads(ledgers: &[LedgerReport], skill: &str) -> Vec<String> {
    ledgers
        .iter()
        .flat_map(|l| &l.effects)
        .filter(|e| e.kind == EffectKind::Read && e.skill == skill)
        .map(|e| e.key.clone().unwrap_or_default())
        .collect()
}

fn attempts(task: &Task) -> Vec<Value> {
    let mut listed = metadata(task, "attempts").unwrap_or(json!([]));
    shared_types::json::normalize_integers(&mut listed);
    listed.as_array().cloned().unwrap_or_default()
}

fn saga_ids(attempts: &[Value]) -> Vec<String> {
    attempts
        .iter()
        .map(|a| a["sagaId"].as_str().unwrap().to_owned())
        .collect()
}

/// What the model was shown when asked for its `n`-th draft (the user message).
fn shown_to_model(model: &ScriptedModel, n: usize) -> Value {
    let asked = &model.received()[n];
    serde_json::from_str(asked.body["messages"][1]["content"].as_str().unwrap()).unwrap()
}

/// The mandate's sagas: (saga id, state, spent).
fn settled(account: &Value) -> Vec<(String, String, Option<i64>)> {
    account["sagas"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            (
                s["sagaId"].as_str().unwrap().to_owned(),
                s["state"].as_str().unwrap().to_owned(),
                s["spentMinor"].as_i64(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_unwinding_the_model_answers_another_valid_plan_and_the_goal_completes() {
    let run = Run::start(
        &["compliance.check=decline"],
        vec![
            Reply::draft(&example_draft()),
            Reply::draft(&reviewed_draft()),
        ],
        2,
    )
    .await;
    let task_id = run.goal_task().await;
    let waiting = run
        .until(
            &task_id,
            "the second attempt waits for its review's approval",
            |s| *s == TaskState::AuthRequired,
        )
        .await;
    run.answer(&waiting, "approve").await;
    let task = run.ended(&task_id).await;
    assert_eq!(
        task.status.state,
        TaskState::Completed,
        "{}",
        status_text(&task)
    );

    // The goal's task lists both attempts; its plan is the second, superseding the first.
    let listed = attempts(&task);
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_eq!(listed[0]["state"], "TASK_STATE_FAILED");
    assert_eq!(listed[0]["outcome"], "compensated");
    assert_eq!(listed[0]["failedStep"], "s3");
    assert_eq!(listed[1]["state"], "TASK_STATE_COMPLETED");
    let ids = saga_ids(&listed);
    let (first, second) = (ids[0].as_str(), ids[1].as_str());
    let plan = plan_artifact(&task).unwrap();
    assert_eq!(plan["sagaId"], second);
    assert_eq!(plan["supersedes"]["sagaId"], first);
    assert_eq!(plan["supersedes"]["failedStep"], "s3");

    // The model was shown the failure and the plan that unwound.
    assert_eq!(run.model.received().len(), 2);
    let replanning = &shown_to_model(&run.model, 1)["replanning"];
    assert_eq!(replanning["attempt"], 2);
    assert_eq!(replanning["failure"]["failedStep"], "s3");
    assert!(replanning["failure"].get("refusals").is_none());
    assert_eq!(
        replanning["previousPlan"]["steps"][3]["skill"],
        "compliance.check"
    );

    // Every ledger: the first attempt's effects undone, the second's standing.
    let ledgers = run.ledgers().await;
    for (skill, at_first, at_second) in [
        ("vendor.create", "s0", "s0"),
        ("budget.reserve", "s1", "s2"),
        ("sandbox.provision", "s2", "s3"),
    ] {
        assert_eq!(
            forwards(&ledgers, skill),
            [
                (format!("{first}:{at_first}"), true),
                (format!("{second}:{at_second}"), false)
            ],
            "{skill}"
        );
    }
    // The check the tool declined (on the first attempt), the review it answered.
    assert!(reads(&ledgers, "compliance.check").is_empty());
    let compliance = &ledgers[3];
    assert_eq!(compliance.agent, "compliance-registry");
    assert!(compliance.calls_with("compliance.check", "declined") > 0);
    assert_eq!(
        reads(&ledgers, "compliance.review"),
        [format!("{second}:s1")]
    );
    assert_eq!(
        forwards(&ledgers, "payments.capture"),
        [(format!("{second}:s4"), false)]
    );
    assert_eq!(
        forwards(&ledgers, "email.send"),
        [(format!("{second}:s5"), false)]
    );

    // Both reservations settled: the unwound one released, the second spent the fee.
    let account = run.account().await;
    assert_eq!(
        settled(&account),
        [
            (first.to_owned(), "ended".to_owned(), Some(0)),
            (second.to_owned(), "ended".to_owned(), Some(12000))
        ],
        "{account}"
    );
    assert_eq!(account["reservedMinor"], 0);
    assert_eq!(account["spentMinor"], 12000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_replan_bound_of_zero_an_unwound_goal_ends_as_before() {
    let run = Run::start(
        &["compliance.check=decline"],
        vec![
            Reply::draft(&example_draft()),
            Reply::draft(&reviewed_draft()),
        ],
        0,
    )
    .await;
    let task_id = run.goal_task().await;
    let task = run.ended(&task_id).await;
    assert_eq!(
        task.status.state,
        TaskState::Failed,
        "{}",
        status_text(&task)
    );
    assert_eq!(metadata(&task, "outcome"), Some(json!("compensated")));
    assert!(attempts(&task).is_empty());
    assert!(
        !status_text(&task).contains("attempt"),
        "{}",
        status_text(&task)
    );
    assert_eq!(run.model.received().len(), 1);

    let saga = saga_of(&task);
    let ledgers = run.ledgers().await;
    assert_called_once(
        &ledgers,
        &saga,
        true,
        &[
            ("vendor.create", "s0"),
            ("budget.reserve", "s1"),
            ("sandbox.provision", "s2"),
        ],
    );
    for skill in ["payments.capture", "email.send"] {
        assert!(forwards(&ledgers, skill).is_empty(), "{skill}");
    }
    let account = run.account().await;
    assert_eq!(
        settled(&account),
        [(saga, "ended".to_owned(), Some(0))],
        "{account}"
    );
    assert_eq!(account["reservedMinor"], 0);
}

/// The email keeps failing after the capture: the executor waits for a person, the goal
/// shows AUTH_REQUIRED, and nothing is planned again, then or once the person resolved it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_past_the_pivot_is_not_planned_again() {
    let run = Run::start(
        &["email.send=unavailable"],
        vec![
            Reply::draft(&example_draft()),
            Reply::draft(&reviewed_draft()),
        ],
        2,
    )
    .await;
    let task_id = run.goal_task().await;
    let waiting = run
        .until(&task_id, "the escalation waits for a person", |s| {
            *s == TaskState::AuthRequired
        })
        .await;
    assert_eq!(run.model.received().len(), 1);
    run.answer(&waiting, "resolved-manually").await;
    let task = run.ended(&task_id).await;
    assert_eq!(
        task.status.state,
        TaskState::Completed,
        "{}",
        status_text(&task)
    );
    assert!(attempts(&task).is_empty());
    assert_eq!(run.model.received().len(), 1, "nothing planned again");

    let saga = saga_of(&task);
    let ledgers = run.ledgers().await;
    assert_called_once(
        &ledgers,
        &saga,
        false,
        &[
            ("vendor.create", "s0"),
            ("budget.reserve", "s1"),
            ("sandbox.provision", "s2"),
            ("payments.capture", "s4"),
        ],
    );
    assert!(forwards(&ledgers, "email.send").is_empty());
    let account = run.account().await;
    assert_eq!(settled(&account).len(), 1, "{account}");
}

/// A cancel while the second attempt waits for its review's approval: the executor's
/// task for it unwinds (the vendor it created is archived), the goal ends CANCELED
/// listing both attempts, and nothing more is planned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_during_the_second_attempt_unwinds_it_and_ends_canceled() {
    let run = Run::start(
        &["compliance.check=decline"],
        vec![
            Reply::draft(&example_draft()),
            Reply::draft(&reviewed_draft()),
            Reply::Status(500, "asked a third time".into()),
        ],
        2,
    )
    .await;
    let task_id = run.goal_task().await;
    run.until(
        &task_id,
        "the second attempt waits for its review's approval",
        |s| *s == TaskState::AuthRequired,
    )
    .await;
    run.client
        .cancel_task(&OutboundCall::default(), &task_id)
        .await
        .unwrap();
    let task = run.ended(&task_id).await;
    assert_eq!(
        task.status.state,
        TaskState::Canceled,
        "{}",
        status_text(&task)
    );
    let listed = attempts(&task);
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_eq!(listed[0]["outcome"], "compensated");
    assert_eq!(listed[1]["state"], "TASK_STATE_CANCELED");
    assert_eq!(
        run.model.received().len(),
        2,
        "nothing planned after the cancel"
    );

    let ids = saga_ids(&listed);
    let (first, second) = (ids[0].as_str(), ids[1].as_str());
    let ledgers = run.ledgers().await;
    assert_eq!(
        forwards(&ledgers, "vendor.create"),
        [
            (format!("{first}:s0"), true),
            (format!("{second}:s0"), true)
        ]
    );
    for (skill, step) in [("budget.reserve", "s1"), ("sandbox.provision", "s2")] {
        assert_eq!(
            forwards(&ledgers, skill),
            [(format!("{first}:{step}"), true)]
        );
    }
    assert!(reads(&ledgers, "compliance.review").is_empty());
    assert!(forwards(&ledgers, "payments.capture").is_empty());
    let account = run.account().await;
    assert_eq!(
        settled(&account),
        [
            (first.to_owned(), "ended".to_owned(), Some(0)),
            (second.to_owned(), "ended".to_owned(), Some(0))
        ],
        "{account}"
    );
    assert_eq!(account["reservedMinor"], 0);
}

/// Re-registers the compliance registry's card without `compliance.check`, signed by the
/// platform as before: plans calling it are refused from now on.
async fn withdraw_the_compliance_check(run: &Run) {
    let (_, url) = run
        .tools
        .urls
        .iter()
        .find(|(agent, _)| agent == "compliance-registry")
        .unwrap();
    let mut card: Value = run
        .http
        .get(format!("{url}/.well-known/agent-card.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    card.as_object_mut().unwrap().remove("signatures");
    card["capabilities"]["extensions"][0]["params"]["skills"]
        .as_object_mut()
        .unwrap()
        .remove("compliance.check");
    card["skills"]
        .as_array_mut()
        .unwrap()
        .retain(|s| s["id"] != "compliance.check");
    platform_identity().sign_in_place(&mut card).unwrap();
    let registered = run
        .http
        .post(format!("{}/admin/cards", run.executor.url()))
        .bearer_auth(ADMIN_TOKEN)
        .json(&card)
        .send()
        .await
        .unwrap();
    assert!(
        registered.status().is_success(),
        "{}",
        registered.text().await.unwrap_or_default()
    );
}

/// While the model drafts the first plan, the compliance check leaves the executor's
/// catalog: the plan, checked by the planner against the catalog it had read, is
/// refused `UNKNOWN_SKILL` by the executor before anything runs. The planner plans again
/// from the catalog as it is now, the model shown the refusals, and the second plan (the
/// review instead) completes; the refused plan reserved nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_refused_for_a_skill_withdrawn_meanwhile_is_planned_again_from_the_refusal() {
    let drafting = CancellationToken::new();
    let run = Run::start(
        &[],
        vec![
            Reply::Held(drafting.clone(), Box::new(Reply::draft(&example_draft()))),
            Reply::draft(&reviewed_draft()),
        ],
        2,
    )
    .await;
    let task_id = run.goal_task().await;
    run.model.asked(1).await;
    withdraw_the_compliance_check(&run).await;
    drafting.cancel();
    let waiting = run
        .until(
            &task_id,
            "the second attempt waits for its review's approval",
            |s| *s == TaskState::AuthRequired,
        )
        .await;
    run.answer(&waiting, "approve").await;
    let task = run.ended(&task_id).await;
    assert_eq!(
        task.status.state,
        TaskState::Completed,
        "{}",
        status_text(&task)
    );

    let listed = attempts(&task);
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_eq!(listed[0]["state"], "TASK_STATE_REJECTED");
    assert_eq!(listed[0]["failedStep"], "s3");
    let reason = listed[0]["reason"].as_str().unwrap();
    assert!(reason.contains("UNKNOWN_SKILL s3"), "{reason}");
    assert_eq!(listed[1]["state"], "TASK_STATE_COMPLETED");
    let ids = saga_ids(&listed);
    let (first, second) = (ids[0].as_str(), ids[1].as_str());
    let plan = plan_artifact(&task).unwrap();
    assert_eq!(plan["supersedes"]["sagaId"], first);
    assert_eq!(plan["supersedes"]["failedStep"], "s3");
    let said: Vec<String> = task.history.iter().flatten().map(message_text).collect();
    assert!(
        said.iter()
            .any(|s| s.contains("was refused before anything ran (")
                && s.contains("UNKNOWN_SKILL")
                && s.contains("planning attempt 2")),
        "{said:#?}"
    );

    // The model was shown the refusals, and the catalog without the check.
    assert_eq!(run.model.received().len(), 2);
    let shown = shown_to_model(&run.model, 1);
    let refusals = shown["replanning"]["failure"]["refusals"]
        .as_array()
        .unwrap();
    assert!(
        refusals
            .iter()
            .any(|r| r["code"] == "UNKNOWN_SKILL" && r["step"] == "s3"),
        "{refusals:?}"
    );
    let skills = &shown["catalog"]["compliance-registry"]["skills"];
    assert!(skills.get("compliance.check").is_none(), "{skills}");
    assert!(skills.get("compliance.review").is_some(), "{skills}");

    // Nothing of the refused plan ran; the second's effects stand.
    let ledgers = run.ledgers().await;
    assert!(
        ledgers.iter().flat_map(|l| &l.effects).all(|e| !e
            .key
            .as_deref()
            .unwrap_or_default()
            .starts_with(first)),
        "{ledgers:?}"
    );
    assert_called_once(
        &ledgers,
        second,
        false,
        &[
            ("vendor.create", "s0"),
            ("budget.reserve", "s2"),
            ("payments.capture", "s4"),
        ],
    );
    // Only the plan that ran reserved (and spent) the mandate's budget.
    let account = run.account().await;
    assert_eq!(
        settled(&account),
        [(second.to_owned(), "ended".to_owned(), Some(12000))],
        "{account}"
    );
}

/// The principal revoked the mandate: the executor refuses the plan `MANDATE_REVOKED`,
/// a refusal no new plan avoids, and the goal ends REJECTED with nothing planned again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_refused_under_a_revoked_mandate_is_not_planned_again() {
    let run = Run::start(
        &[],
        vec![
            Reply::draft(&example_draft()),
            Reply::draft(&reviewed_draft()),
        ],
        2,
    )
    .await;
    let revocation = Revocation {
        revoked_mandate_id: mandate_doc().mandate_id,
        revoked_at: chrono::Utc::now(),
        reason: Some("the tests' principal revokes it".into()),
        signatures: Vec::new(),
    }
    .signed_by(&principal_identity())
    .unwrap();
    let revoked = run
        .http
        .post(format!("{}/mandates/revocations", run.executor.url()))
        .json(&revocation)
        .send()
        .await
        .unwrap();
    assert!(
        revoked.status().is_success(),
        "{}",
        revoked.text().await.unwrap_or_default()
    );

    let task_id = run.goal_task().await;
    let task = run.ended(&task_id).await;
    assert_eq!(
        task.status.state,
        TaskState::Rejected,
        "{}",
        status_text(&task)
    );
    assert!(
        status_text(&task).contains("MANDATE_REVOKED"),
        "{}",
        status_text(&task)
    );
    assert!(attempts(&task).is_empty());
    assert_eq!(run.model.received().len(), 1, "nothing planned again");
    let ledgers = run.ledgers().await;
    assert!(ledgers.iter().all(|l| l.effects.is_empty()), "{ledgers:?}");
    assert!(settled(&run.account().await).is_empty());
}
