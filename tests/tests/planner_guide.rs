//! The manual's "the planner and models" run as written: every `sh` block of
//! `docs/planner-and-models.md`, in order, in one bash, with the workspace's own
//! `sagaplane`, `executor-agent` and `planner-agent` first on `PATH`, and `MODEL_URL` (the
//! page's "your model server's URL") pointing at a scripted OpenAI-compatible server this
//! test starts on 127.0.0.1:0. That server drafts, for the first request of a goal, a
//! plan naming a skill no card declares, and for a repair the valid plan. Judged from
//! what the page printed (the templates' refusal and its hint, the goal completed, the
//! refused draft in the audit record) and from what the server received (two requests,
//! the API key as a bearer token, the refusal sent back, only the mandate's skills shown,
//! no secret of the demo's folder).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use sagaplane_e2e::{
    executor_agent, planner_agent, run_blocks, sagaplane, shell_blocks, workspace_root,
};
use serde_json::{Value, json};

const GUIDE: &str = "docs/planner-and-models.md";
const GOAL: &str =
    "Register vendor Initech, contact it@initech.example, and reserve 50 EUR of budget for it";
const API_KEY: &str = "sk-guide-1f9e0c2d7b4a";
const MODEL: &str = "scripted-guide-model";

/// One request as the scripted server read it.
#[derive(Debug, Clone)]
struct Received {
    path: String,
    authorization: Option<String>,
    body: Value,
}

/// The first draft: a skill no card declares.
fn unknown_skill_draft() -> Value {
    json!({"steps": [
        {"id": "s0", "agent": "crm", "skill": "crm.vendors.add",
         "args": {"name": "Initech", "email": "it@initech.example"}},
        {"id": "s1", "agent": "budget", "skill": "budget.reserve",
         "args": {"vendorId": "$steps.s0.response.body#/vendorId", "amountMinor": 5000, "currency": "EUR"}}
    ]})
}

/// The repair: the vendor registry's skill instead.
fn valid_draft() -> Value {
    json!({"steps": [
        {"id": "s0", "agent": "vendor-registry", "skill": "vendor.create",
         "args": {"legalName": "Initech", "contactEmail": "it@initech.example"}},
        {"id": "s1", "agent": "budget", "skill": "budget.reserve",
         "args": {"vendorId": "$steps.s0.response.body#/vendorId", "amountMinor": 5000, "currency": "EUR"}}
    ], "rejectedAlternatives": ["capture a setup fee: the goal asks for none"]})
}

/// A scripted OpenAI-compatible server: one thread per connection, one request per
/// connection (`Connection: close`), every request recorded.
struct ScriptedModel {
    url: String,
    received: Arc<Mutex<Vec<Received>>>,
}

impl ScriptedModel {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let url = format!("http://{}", listener.local_addr().expect("its address"));
        let received = Arc::new(Mutex::new(Vec::new()));
        let seen = received.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().map_while(Result::ok) {
                let seen = seen.clone();
                std::thread::spawn(move || {
                    if let Err(e) = answer(stream, &seen) {
                        eprintln!("the scripted model could not answer: {e}");
                    }
                });
            }
        });
        Self { url, received }
    }

    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

fn answer(stream: TcpStream, seen: &Mutex<Vec<Received>>) -> std::io::Result<()> {
    stream.set_read_timeout(Some(std::time::Duration::from_secs(60)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let path = line
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    let (mut length, mut authorization) = (0usize, None);
    loop {
        line.clear();
        reader.read_line(&mut line)?;
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            match name.trim().to_ascii_lowercase().as_str() {
                "content-length" => length = value.trim().parse().unwrap_or(0),
                "authorization" => authorization = Some(value.trim().to_owned()),
                _ => {}
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let turns = body["messages"].as_array().map_or(0, Vec::len);
    seen.lock().unwrap().push(Received {
        path: path.clone(),
        authorization,
        body,
    });
    let (status, reply) = if path != "/v1/chat/completions" {
        (
            "404 Not Found",
            json!({"error": {"message": "no such route"}}),
        )
    } else {
        // A goal's first request is the system and user messages; a repair has more.
        let content = if turns <= 2 {
            unknown_skill_draft().to_string()
        } else {
            format!("```json\n{:#}\n```", valid_draft())
        };
        (
            "200 OK",
            json!({"id": "chatcmpl-guide", "object": "chat.completion", "model": MODEL,
                   "choices": [{"index": 0, "finish_reason": "stop",
                                "message": {"role": "assistant", "content": content}}]}),
        )
    };
    let reply = reply.to_string();
    let mut stream = stream;
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
        reply.len()
    )?;
    stream.flush()
}

/// Runs the guide's blocks; what they printed, and the demo's folder.
fn run_guide(model: &ScriptedModel) -> (String, std::path::PathBuf) {
    let guide = std::fs::read_to_string(workspace_root().join(GUIDE)).unwrap();
    let blocks = shell_blocks(&guide, None);
    assert!(blocks.len() >= 5, "{GUIDE} lost its commands: {blocks:#?}");
    let bin = sagaplane().parent().unwrap().to_owned();
    assert_eq!(executor_agent().parent().unwrap(), bin);
    assert_eq!(planner_agent().parent().unwrap(), bin);
    let env = [
        ("MODEL_URL", model.url.as_str()),
        ("MODEL", "qwen2.5:7b"),
        ("SAGAPLANE_LLM_API_KEY", API_KEY),
    ];
    let epilogue =
        "echo \"demo folder for the test: $DEMO\"\necho \"work folder for the test: $WORK\"";
    let (ok, said) = run_blocks(&blocks, &bin, &env, epilogue, 900);
    assert!(ok, "the guide failed:\n{said}");
    // Seen with --nocapture.
    eprintln!("{said}");
    let printed = |prefix: &str| {
        said.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| panic!("no {prefix:?} line"))
    };
    // The page's own work folder (the planner's task store, logs) is not kept either.
    let _ = std::fs::remove_dir_all(printed("work folder for the test: "));
    let demo = printed("demo folder for the test: ");
    (said, demo)
}

/// What must never reach a model: the demo's tokens, the tools' credentials, the
/// private halves of its keys, and the API key itself.
fn secrets(folder: &std::path::Path) -> Vec<String> {
    let mut out = vec![API_KEY.to_owned()];
    for entry in std::fs::read_dir(folder).unwrap().map_while(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(text) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        if name.ends_with("-token") {
            out.push(text.trim().to_owned());
        } else if name == "credentials.json" {
            let credentials: Value = serde_json::from_str(&text).unwrap();
            out.extend(
                credentials
                    .as_object()
                    .unwrap()
                    .values()
                    .filter_map(Value::as_str)
                    .map(str::to_owned),
            );
        } else if name.ends_with(".jwk") && !name.ends_with(".pub.jwk") {
            let jwk: Value = serde_json::from_str(&text).unwrap();
            out.push(jwk["d"].as_str().unwrap().to_owned());
        }
    }
    assert!(
        out.len() >= 6,
        "the demo's folder lost its secrets: {out:?}"
    );
    out
}

#[test]
fn the_planner_guide_runs_as_written_against_a_scripted_model() {
    let model = ScriptedModel::start();
    let (said, folder) = run_guide(&model);

    // The templates refuse the goal, and say how to turn a model on.
    assert!(said.contains("no goal template matches"), "{said}");
    assert!(
        said.contains("--llm-url URL --llm-model NAME") && said.contains("to plan any goal"),
        "{said}"
    );
    // The model's planner completed it, and its audit record holds the refused draft.
    assert!(said.contains("COMPLETED"), "{said}");
    assert!(said.contains("\"UNKNOWN_SKILL\""), "{said}");
    assert!(said.contains("crm.vendors.add"), "{said}");
    assert!(said.contains(&format!("\"model\": \"{MODEL}\"")), "{said}");

    // Two requests for the one goal: the draft, then its repair with the refusal.
    let received = model.received();
    assert_eq!(received.len(), 2, "{received:#?}");
    for request in &received {
        assert_eq!(request.path, "/v1/chat/completions");
        assert_eq!(
            request.authorization.as_deref(),
            Some(format!("Bearer {API_KEY}").as_str())
        );
        assert_eq!(request.body["model"], json!("qwen2.5:7b"));
        assert_eq!(
            request.body["response_format"],
            json!({"type": "json_object"})
        );
    }
    let repair = received[1].body["messages"][3]["content"].as_str().unwrap();
    assert!(repair.contains("- UNKNOWN_SKILL s0: "), "{repair}");

    // Shown: the goal and the catalog within the demo mandate's scope; no secret.
    let user: Value =
        serde_json::from_str(received[0].body["messages"][1]["content"].as_str().unwrap()).unwrap();
    assert_eq!(user["goal"], json!(GOAL));
    let mut shown: Vec<String> = Vec::new();
    for (agent, entry) in user["catalog"].as_object().unwrap() {
        for skill in entry["skills"].as_object().unwrap().keys() {
            shown.push(format!("{agent}/{skill}"));
        }
    }
    assert_eq!(
        shown,
        [
            "budget/budget.reserve",
            "compliance-registry/compliance.check",
            "compliance-registry/compliance.review",
            "mailer/email.send",
            "payments/payments.capture",
            "sandbox/sandbox.provision",
            "vendor-registry/vendor.create",
        ]
    );
    let prompts: Vec<String> = received.iter().map(|r| r.body.to_string()).collect();
    let secrets = secrets(&folder);
    // The demo's folder holds keys and tokens: not left behind in /tmp.
    let _ = std::fs::remove_dir_all(&folder);
    for secret in secrets {
        for prompt in &prompts {
            assert!(
                !prompt.contains(&secret),
                "a secret of the demo's folder reached the model"
            );
        }
    }
}
