//! Real binaries as processes for the tests: the planner (`planner-agent`, this package's
//! own) and, beside it, the executor (`executor-agent`) and the six supplier tool agents
//! (`supplier-tool --agent all`), which cargo builds once per test binary
//! (`sagaplane_e2e`). Each is started on 127.0.0.1:0 with the keys and files of a test's
//! folder, its stderr in a log there, and is killed when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};
use shared_types::SigningIdentity;

use super::model::API_KEY;
use super::{AGENTS, planner_identity, principal_identity, test_mandate};

/// The token the executor presents to the tool agents.
pub const TOOL_TOKEN: &str = "tool-token-for-planner-tests";
/// The executor's admin token (registrations, a mandate's account).
pub const ADMIN_TOKEN: &str = "admin-token-for-planner-tests";

/// The platform key that signs the tool agents' cards.
pub fn platform_identity() -> SigningIdentity {
    SigningIdentity::from_seed([11; 32], Some("platform-test".into()))
}

/// The person who answers a saga waiting at the executor.
pub fn approver_identity() -> SigningIdentity {
    SigningIdentity::from_seed([12; 32], Some("approver-test".into()))
}

/// A started process that printed where it listens; killed when dropped.
pub struct Process {
    child: Child,
    /// What it printed as `<label> listening on <url>`, in order (the label may be empty).
    pub urls: Vec<(String, String)>,
    log: PathBuf,
}

impl Process {
    /// Starts `command`, its stderr to `log`, and reads the `listening on URL` lines of
    /// its first `urls` agents.
    pub fn start(mut command: Command, log: &Path, urls: usize) -> Self {
        let stderr = std::fs::File::create(log).unwrap();
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let urls = listening_urls(&mut child, urls);
        Self {
            child,
            urls,
            log: log.to_owned(),
        }
    }

    /// The URL of its first agent.
    pub fn url(&self) -> &str {
        &self.urls[0].1
    }

    /// What it has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL, and waits for it to end.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The `<label> listening on <url>` lines an agent binary prints first, `n` of them.
pub fn listening_urls(child: &mut Child, n: usize) -> Vec<(String, String)> {
    use std::io::BufRead;
    let stdout = child.stdout.take().expect("stdout piped");
    let mut lines = std::io::BufReader::new(stdout).lines();
    (0..n)
        .map(|_| {
            let line = lines.next().expect("a line").unwrap();
            let (label, url) = line
                .split_once("listening on ")
                .unwrap_or_else(|| panic!("unexpected line {line:?}"));
            (label.trim().to_owned(), url.trim().to_owned())
        })
        .collect()
}

/// Writes into `dir` the planner's key and the tests' mandate, as the planner binary
/// reads them (`planner_binary`).
pub fn planner_files(dir: &Path) {
    let write = |name: &str, text: String| std::fs::write(dir.join(name), text).unwrap();
    write(
        "planner.jwk",
        serde_json::to_string(&planner_identity().private_jwk()).unwrap(),
    );
    write("mandate.json", test_mandate().to_string());
}

/// The planner binary on `dir` (`planner_files` wrote its key and mandate there), in
/// front of `executor`, asking the scripted model at `model`, planning a goal again at
/// most `max_replans` times; open to any caller on loopback.
pub fn planner_binary(dir: &Path, executor: &str, model: &str, max_replans: u32) -> Process {
    let mut command = Command::new(env!("CARGO_BIN_EXE_planner-agent"));
    command
        .args(["--listen", "127.0.0.1:0", "--open", "--executor", executor])
        .args(["--llm-url", model, "--llm-model", "test-model"])
        .args(["--llm-max-repairs", "0"])
        .args(["--max-replans", &max_replans.to_string()])
        .arg("--data")
        .arg(dir.join("planner"))
        .arg("--key")
        .arg(dir.join("planner.jwk"))
        .arg("--mandate")
        .arg(dir.join("mandate.json"))
        .env("SAGAPLANE_LLM_API_KEY", API_KEY)
        .env_remove("SAGAPLANE_PLANNER_TOKEN");
    Process::start(command, &dir.join("planner.log"), 1)
}

/// The six supplier tool agents in one process on `dir`, their cards signed with the
/// platform key, with `faults` (`SKILL=MODE`) set.
pub fn tool_agents(dir: &Path, faults: &[&str]) -> Process {
    let platform = dir.join("platform.jwk");
    std::fs::write(
        &platform,
        serde_json::to_string(&platform_identity().private_jwk()).unwrap(),
    )
    .unwrap();
    let mut command = Command::new(sagaplane_e2e::supplier_tool());
    command
        .args(["--agent", "all", "--listen", "127.0.0.1:0"])
        .arg("--data")
        .arg(dir.join("tools"))
        .arg("--sign-card-with")
        .arg(&platform)
        .env("SUPPLIER_TOOL_TOKEN", TOOL_TOKEN);
    for fault in faults {
        command.args(["--fault", fault]);
    }
    Process::start(command, &dir.join("tools.log"), AGENTS.len())
}

/// The executor binary on `dir`: trusting the platform, the planner, the principal and
/// the approver of the tests, holding the tools' credential.
pub fn executor_binary(dir: &Path) -> Process {
    let write = |name: &str, value: Value| {
        let path = dir.join(name);
        std::fs::write(&path, value.to_string()).unwrap();
        path
    };
    let public = |identity: SigningIdentity| serde_json::to_value(identity.public_jwk()).unwrap();
    let credentials: serde_json::Map<String, Value> = AGENTS
        .iter()
        .map(|agent| (agent.to_string(), json!(TOOL_TOKEN)))
        .collect();
    let mut command = Command::new(sagaplane_e2e::executor_agent());
    command
        .args(["--listen", "127.0.0.1:0"])
        .arg("--data")
        .arg(dir.join("executor"))
        .arg("--platform-key")
        .arg(write("platform.pub.jwk", public(platform_identity())))
        .arg("--planner")
        .arg(write("planner.pub.jwk", public(planner_identity())))
        .arg("--principal")
        .arg(write("principal.pub.jwk", public(principal_identity())))
        .arg("--approver")
        .arg(write("approver.pub.jwk", public(approver_identity())))
        .arg("--credentials")
        .arg(write("credentials.json", Value::Object(credentials)))
        .env("SAGAPLANE_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("RUST_LOG", "info");
    Process::start(command, &dir.join("executor.log"), 1)
}
