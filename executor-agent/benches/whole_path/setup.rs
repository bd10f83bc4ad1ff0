//! What the benchmarks that run the real `executor-agent` binary share: the workspace's
//! files, the keys of a run, starting an executor process (on its SQLite file or a
//! PostgreSQL store), registering the six curated cards and the plan they send.

use std::io::BufRead;
use std::process::{Child, Command, Stdio};

use sagaplane_examples::supplier::AGENTS;
use serde_json::{Value, json};
use shared_types::SigningIdentity;

use crate::TOOL_TOKEN;

pub(crate) const ADMIN_TOKEN: &str = "admin-token-for-the-whole-path-bench";

/// A database of its own, `name`, made on the PostgreSQL server of `url`: saga ids and
/// registered cards of an earlier run are not there. Its URL.
pub(crate) fn fresh_database(url: &str, name: &str) -> String {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        use sagaplane_storage::postgres::{Cached, Postgres};
        let server = Postgres::connect(url, 1).expect("a PostgreSQL URL");
        let conn = server
            .connection()
            .await
            .expect("the bench reaches PostgreSQL");
        conn.run(&format!("CREATE DATABASE {name}"), &[])
            .await
            .expect("a database for the run");
    });
    let (address, options) = url.split_once('?').unwrap_or((url, ""));
    let (server, _) = address
        .rsplit_once('/')
        .expect("postgres://host:port/database");
    if options.is_empty() {
        format!("{server}/{name}")
    } else {
        format!("{server}/{name}?{options}")
    }
}

pub(crate) fn root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub(crate) fn read_json(path: &str) -> Value {
    let text = std::fs::read_to_string(root().join(path)).expect("a workspace file");
    shared_types::json::parse_strict(&text).expect("JSON")
}

pub(crate) fn write(dir: &std::path::Path, name: &str, value: &Value) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, value.to_string()).expect("a temporary file");
    path
}

/// The run's keys: the platform that signs cards, the planner, the mandate's principal.
pub(crate) struct Keys {
    pub(crate) platform: SigningIdentity,
    pub(crate) planner: SigningIdentity,
    pub(crate) principal: SigningIdentity,
}

impl Keys {
    pub(crate) fn generate() -> Self {
        let key = |name: &str| SigningIdentity::generate(Some(name.into())).expect("a key");
        Self {
            platform: key("platform"),
            planner: key("planner-1"),
            principal: key("principal"),
        }
    }
}

/// An executor process, killed when dropped.
pub(crate) struct Executor {
    pub(crate) child: Child,
    pub(crate) url: String,
    /// Its data directory (callgrind's dumps go there too; not every bench reads it).
    #[allow(dead_code)]
    pub(crate) dir: std::path::PathBuf,
}

impl Drop for Executor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `command` (the executor binary, or a wrapper around it) as an executor on
/// `store` (`--store`), or on a SQLite file in `dir` when `None`, trusting `keys`, with
/// `extra` arguments; once it says where it listens.
pub(crate) fn spawn_executor(
    mut command: Command,
    dir: &std::path::Path,
    keys: &Keys,
    store: Option<&str>,
    extra: &[&str],
) -> Executor {
    std::fs::create_dir_all(dir).expect("a data directory");
    let public = |name: &str, id: &SigningIdentity| {
        write(
            dir,
            name,
            &serde_json::to_value(id.public_jwk()).expect("a JWK"),
        )
    };
    let credentials: serde_json::Map<String, Value> = AGENTS
        .iter()
        .map(|a| (a.to_string(), json!(TOOL_TOKEN)))
        .collect();
    command.args(["--listen", "127.0.0.1:0"]);
    match store {
        Some(url) => command.args(["--store", url]),
        None => command.arg("--data").arg(dir.join("data")),
    };
    let mut child = command
        .arg("--platform-key")
        .arg(public("platform.pub.jwk", &keys.platform))
        .arg("--planner")
        .arg(public("planner.pub.jwk", &keys.planner))
        .arg("--principal")
        .arg(public("principal.pub.jwk", &keys.principal))
        .arg("--credentials")
        .arg(write(dir, "credentials.json", &Value::Object(credentials)))
        // A blocking send holds its request turn until its saga ends (docs/security.md).
        .args([
            "--max-concurrent-requests",
            "4096",
            "--max-connections",
            "4096",
        ])
        .args(extra)
        .env("SAGAPLANE_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the executor-agent binary starts");
    // A wrapper (a profiler) may print lines of its own before the executor's first.
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("its stdout"));
    let url = loop {
        let mut line = String::new();
        let read = stdout
            .read_line(&mut line)
            .expect("the executor prints where it listens");
        assert!(
            read > 0,
            "the executor ended before saying where it listens"
        );
        if let Some(url) = line.trim().strip_prefix("listening on ") {
            break url.to_owned();
        }
    };
    Executor {
        child,
        url,
        dir: dir.to_owned(),
    }
}

/// Registers the six curated cards, each naming its tool agent's URL, changed by
/// `tweak(agent, card)` and signed by the platform.
pub(crate) async fn register(
    executor: &str,
    platform: &SigningIdentity,
    urls: &[String],
    tweak: &dyn Fn(&str, &mut Value),
) {
    let http = reqwest::Client::new();
    for (agent, url) in AGENTS.iter().zip(urls) {
        let mut card = read_json(&format!("agent-cards/{agent}.json"));
        if let Some(interfaces) = card["supportedInterfaces"].as_array_mut() {
            for interface in interfaces {
                interface["url"] = json!(url);
            }
        }
        tweak(agent, &mut card);
        platform.sign_in_place(&mut card).expect("signed");
        let answer = http
            .post(format!("{executor}/admin/cards"))
            .bearer_auth(ADMIN_TOKEN)
            .json(&card)
            .send()
            .await
            .expect("the executor answers");
        assert_eq!(
            answer.status(),
            201,
            "{agent}: {}",
            answer.text().await.unwrap_or_default()
        );
    }
}

/// The example plan under a principal's mandate (`mandate_id`, a budget no run
/// exhausts) for the planner, as text with the saga id to replace.
pub(crate) fn plan_template(keys: &Keys, mandate_id: &str) -> String {
    plan_template_of(keys, mandate_id, "examples/plans/supplier-onboarding.json")
}

/// `plan_template` of the plan at `path`.
pub(crate) fn plan_template_of(keys: &Keys, mandate_id: &str, path: &str) -> String {
    let mut mandate = read_json("examples/mandates/test-mandate.json");
    mandate["mandateId"] = json!(mandate_id);
    mandate["grantees"] = json!([keys.planner.kid()]);
    mandate["budget"]["amountMinor"] = json!(9_000_000_000_000_000u64);
    keys.principal.sign_in_place(&mut mandate).expect("signed");
    let mut plan = read_json(path);
    plan["mandate"] = mandate;
    plan.to_string()
}
