//! The sweep's tool agents: the supplier plan's skills over A2A, each agent keeping a
//! ledger of what it applied under which key, a status skill that answers from it, and
//! faults drawn at a rate per call: a transient failure (nothing applied), a timeout
//! after the effect (applied, never answered in time), a timeout before it (nothing
//! applied), a permanent failure of a forward call, a failing compensation (unmarked, so
//! it is tried again) and a failing status call. The capture is not idempotent (its card
//! says so, `NOT_IDEMPOTENT`): each call of it is applied afresh, as a charge with no
//! idempotency key would be, so a blind retry after a timeout after the effect charges
//! twice; every other skill applies a key once and replays it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_host::sdk::{Artifact, Message, Part, PartContent, TaskState};
use agent_host::{Agent, HostConfig, InboundAuth, RequestContext, ServedCard, TaskHandle};
use serde_json::{Value, json};
use shared_types::FailureClass;

use crate::TOOL_TOKEN;

/// The skill whose calls are each applied afresh, whatever their key.
pub(crate) const NOT_IDEMPOTENT: &str = "payments.capture";

/// What one call met.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Fault {
    Transient,
    TimeoutAfterEffect,
    TimeoutBeforeEffect,
    Permanent,
    CompensationFails,
    StatusFails,
}

/// Everything the six agents applied and answered, shared by them (keys name their saga).
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    /// Per idempotency key: the skill applied and its (last) result.
    pub(crate) effects: HashMap<String, (String, Value)>,
    /// Per idempotency key: how many times its effect was applied (a replay is not one),
    /// so a key applied twice is seen.
    pub(crate) applications: HashMap<String, u32>,
    /// Applications refused or replayed under a key already applied: never re-applied.
    pub(crate) replays: u64,
    /// Forward keys answered `not-applied`, or undone before they arrived: dead.
    pub(crate) dead: HashSet<String>,
    pub(crate) calls: u64,
    pub(crate) faults: BTreeMap<Fault, u64>,
    /// Status calls answered `applied`, `not-applied`, and failed by a fault.
    pub(crate) verified_applied: u64,
    pub(crate) verified_not_applied: u64,
    /// Keys whose last call timed out, and how many of those were called again under the
    /// same key (the executor's retry settling an unknown outcome).
    pub(crate) timed_out: HashSet<String>,
    pub(crate) retried_after_timeout: u64,
    /// Of those, calls of the skill that is not idempotent: each a blind repeat.
    pub(crate) not_idempotent_again: u64,
}

/// The fault draw: a rate, and a sequence from a seed (splitmix64), so a run repeats.
pub(crate) struct Chaos {
    pub(crate) rate: f64,
    pub(crate) seed: AtomicU64,
    /// How long a call that times out is held: past the card's `timeoutMs`.
    pub(crate) hold: Duration,
}

impl Chaos {
    fn next(&self) -> u64 {
        let mut z = self
            .seed
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// The fault this call meets, if any, among `kinds`.
    fn draw(&self, kinds: &[Fault]) -> Option<Fault> {
        let roll = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        (roll < self.rate).then(|| kinds[(self.next() % kinds.len() as u64) as usize])
    }
}

const UNDO_SKILLS: [&str; 3] = ["vendor.archive", "budget.release", "sandbox.deprovision"];

struct ChaosTool {
    ledger: Arc<Mutex<Ledger>>,
    chaos: Arc<Chaos>,
}

fn failed(text: &str, class: Option<FailureClass>) -> Message {
    agent_host::failure_message(text, class)
}

async fn answer(task: &TaskHandle, result: Value) {
    let artifact = Artifact {
        artifact_id: "result".into(),
        name: None,
        description: None,
        parts: vec![Part::data(result)],
        metadata: None,
        extensions: None,
    };
    let _ = task.add_artifact(artifact, false, true).await;
    let _ = task.set_status(TaskState::Completed, None).await;
}

impl ChaosTool {
    /// Applies `skill` under `key` once (a repeat replays the first result), or afresh
    /// at each call for the skill that is not idempotent; what it answers.
    fn apply(&self, key: &str, skill: &str, args: &Value) -> Value {
        let mut ledger = self.ledger.lock().expect("the ledger");
        if skill != NOT_IDEMPOTENT
            && let Some((_, result)) = ledger.effects.get(key)
        {
            let result = result.clone();
            ledger.replays += 1;
            return result;
        }
        let result = if UNDO_SKILLS.contains(&skill) {
            // Undone by its forward key when the forward outcome was unknown: a forward
            // call that never arrived is dead from now on (a late one is refused).
            if let Some(forward) = args.get("forwardKey").and_then(Value::as_str)
                && !ledger.effects.contains_key(forward)
            {
                ledger.dead.insert(forward.to_owned());
            }
            match skill {
                "budget.release" => json!({"released": true}),
                "vendor.archive" => json!({"archived": true}),
                _ => json!({"deprovisioned": true}),
            }
        } else {
            crate::tool_agent::tool_result(skill)
        };
        ledger
            .effects
            .insert(key.to_owned(), (skill.to_owned(), result.clone()));
        *ledger.applications.entry(key.to_owned()).or_default() += 1;
        result
    }
}

#[async_trait::async_trait]
impl Agent for ChaosTool {
    async fn run(&self, ctx: RequestContext, task: TaskHandle, message: Message) {
        let Some(PartContent::Data(call)) = message.parts.first().map(|p| p.content.clone()) else {
            let _ = task.set_status(TaskState::Rejected, None).await;
            return;
        };
        let skill = call["skill"].as_str().unwrap_or_default().to_owned();
        let args = call["args"].clone();
        let key = ctx.idempotency_key.clone().unwrap_or_default();
        let status = skill.ends_with(".status");
        let undo = UNDO_SKILLS.contains(&skill.as_str());
        let kinds: &[Fault] = if status {
            &[Fault::StatusFails]
        } else if undo {
            &[
                Fault::CompensationFails,
                Fault::TimeoutAfterEffect,
                Fault::TimeoutBeforeEffect,
            ]
        } else {
            &[
                Fault::Transient,
                Fault::TimeoutAfterEffect,
                Fault::TimeoutBeforeEffect,
                Fault::Permanent,
            ]
        };
        // A key applied already is answered with its result (a timeout may still lose
        // the answer): a definite failure says that nothing took effect, so a tool that
        // keeps its contract never answers one for a key it applied. A call of the skill
        // that is not idempotent is a new effect, and may fail like a first one.
        let applied = skill != NOT_IDEMPOTENT
            && self
                .ledger
                .lock()
                .expect("the ledger")
                .effects
                .contains_key(&key);
        let fault = self.chaos.draw(kinds).filter(|f| {
            !applied
                || !matches!(
                    f,
                    Fault::Transient | Fault::Permanent | Fault::CompensationFails
                )
        });
        {
            let mut ledger = self.ledger.lock().expect("the ledger");
            ledger.calls += 1;
            if let Some(fault) = fault {
                *ledger.faults.entry(fault).or_default() += 1;
            }
            if !status && ledger.timed_out.remove(&key) {
                ledger.retried_after_timeout += 1;
                if skill == NOT_IDEMPOTENT {
                    ledger.not_idempotent_again += 1;
                }
            }
            if matches!(
                fault,
                Some(Fault::TimeoutAfterEffect | Fault::TimeoutBeforeEffect)
            ) {
                ledger.timed_out.insert(key.clone());
            }
        }
        let fail = |text: &str, class| {
            let task = task.clone();
            let reason = failed(text, class);
            async move {
                let _ = task.set_status(TaskState::Failed, Some(reason)).await;
            }
        };
        if status {
            if fault.is_some() {
                return fail("the status service is down", Some(FailureClass::Transient)).await;
            }
            let asked = args["forwardKey"].as_str().unwrap_or_default();
            let said = {
                let mut ledger = self.ledger.lock().expect("the ledger");
                match ledger.effects.get(asked).map(|(_, r)| r.clone()) {
                    Some(result) => {
                        ledger.verified_applied += 1;
                        json!({"status": "applied", "response": result})
                    }
                    None => {
                        ledger.verified_not_applied += 1;
                        ledger.dead.insert(asked.to_owned());
                        json!({"status": "not-applied"})
                    }
                }
            };
            return answer(&task, said).await;
        }
        if self.ledger.lock().expect("the ledger").dead.contains(&key) {
            let why = "this key was answered not applied, or undone: it is refused";
            return fail(why, Some(FailureClass::Permanent)).await;
        }
        match fault {
            Some(Fault::Transient) => fail("busy; try again", Some(FailureClass::Transient)).await,
            Some(Fault::Permanent) => fail("declined", Some(FailureClass::Permanent)).await,
            Some(Fault::CompensationFails) => fail("could not undo, this time", None).await,
            Some(Fault::TimeoutBeforeEffect) => {
                tokio::time::sleep(self.chaos.hold).await;
                fail("too late", Some(FailureClass::Transient)).await
            }
            Some(Fault::TimeoutAfterEffect) => {
                let result = self.apply(&key, &skill, &args);
                tokio::time::sleep(self.chaos.hold).await;
                answer(&task, result).await
            }
            _ => {
                let result = self.apply(&key, &skill, &args);
                answer(&task, result).await
            }
        }
    }
}

/// Starts one agent of the sweep on the current runtime; its URL.
pub(crate) async fn start(ledger: Arc<Mutex<Ledger>>, chaos: Arc<Chaos>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let url = format!("http://{}", listener.local_addr().expect("its address"));
    let card = json!({"name": "tool", "description": "", "version": "1", "supportedInterfaces": [],
        "capabilities": {"streaming": true}, "defaultInputModes": [], "defaultOutputModes": [], "skills": []});
    let card = agent_host::prepare_card(card, &url, None).expect("a card");
    let auth = InboundAuth::StaticBearer {
        name: "executor".into(),
        token: TOOL_TOKEN.into(),
    };
    let mut config = HostConfig::new(ServedCard::new(&card).expect("a card"), auth);
    config.max_concurrent_requests = 4096;
    let router = agent_host::app(
        &config,
        Arc::new(ChaosTool { ledger, chaos }),
        agent_host::TaskManager::new(Arc::new(agent_host::MemoryTaskStore::new())),
    );
    tokio::spawn(agent_host::serve(listener, router, config.shutdown.clone()));
    url
}
