//! The manual's "writing a tool agent" run as written: every `sh` block of
//! `docs/writing-a-tool-agent.md`, in order, in one bash, with the workspace's own
//! `sagaplane` and `executor-agent` first on `PATH` — once with the Python example agent
//! (official `a2a-sdk`), once with the TypeScript one (official `@a2a-js/sdk`). Judged
//! from the example agent's own ledger: a saga completed, one compensated (its contact
//! undone, the pivot never applied), one whose transient failure was tried again under
//! the same key.

use std::process::Command;

use sagaplane_e2e::{executor_agent, run_blocks, sagaplane, shell_blocks, workspace_root};
use serde_json::Value;

const GUIDE: &str = "docs/writing-a-tool-agent.md";

/// Runs the guide for `variant`: what it printed, and the agent's ledger it saved.
fn run_guide(variant: &str) -> (String, Value) {
    let guide = std::fs::read_to_string(workspace_root().join(GUIDE)).unwrap();
    let blocks = shell_blocks(&guide, Some(variant));
    assert!(blocks.len() >= 10, "{GUIDE} lost its commands: {blocks:#?}");
    let bin = sagaplane().parent().unwrap().to_owned();
    assert_eq!(executor_agent().parent().unwrap(), bin);
    let saved = tempfile::NamedTempFile::new().unwrap();
    let epilogue = format!("cp \"$WORK/ledger.json\" {:?}", saved.path());
    let (ok, said) = run_blocks(&blocks, &bin, &[], &epilogue, 600);
    assert!(ok, "the guide failed ({variant}):\n{said}");
    // Seen with --nocapture.
    eprintln!("{said}");
    let ledger = std::fs::read_to_string(saved.path()).unwrap();
    (
        said,
        serde_json::from_str(&ledger).expect("the agent's ledger as JSON"),
    )
}

/// The outcomes the agent logged for calls under `key`, in order.
fn outcomes(ledger: &Value, key: &str) -> Vec<String> {
    ledger["calls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["key"] == key)
        .map(|c| c["outcome"].as_str().unwrap().to_owned())
        .collect()
}

fn effect<'a>(ledger: &'a Value, key: &str) -> Option<&'a Value> {
    ledger["effects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["key"] == key)
}

fn judge(variant: &str) {
    let (said, ledger) = run_guide(variant);
    // Completed: the contact added and sales told, once each.
    assert_eq!(
        outcomes(&ledger, "sg_contacts_sales:s0"),
        ["applied"],
        "{ledger}"
    );
    assert_eq!(
        outcomes(&ledger, "sg_contacts_sales:s1"),
        ["applied"],
        "{ledger}"
    );
    assert_eq!(
        effect(&ledger, "sg_contacts_sales:s0").unwrap()["undone"],
        false
    );
    // Compensated: nobody told (a permanent failure, not tried again), the contact undone
    // by its compensation's own key.
    assert_eq!(
        outcomes(&ledger, "sg_contacts_nowhere:s1"),
        ["failed-permanent"],
        "{ledger}"
    );
    assert_eq!(
        effect(&ledger, "sg_contacts_nowhere:s0").unwrap()["undone"],
        true
    );
    assert_eq!(
        outcomes(&ledger, "sg_contacts_nowhere:s0:undo"),
        ["undone"],
        "{ledger}"
    );
    assert!(
        said.contains(r#"s0 compensation "contacts.remove" sent {"contactId":"#),
        "plan submit shows what the compensation was sent:\n{said}"
    );
    // Transient, then applied under the same key.
    assert_eq!(
        outcomes(&ledger, "sg_contacts_busy:s1"),
        ["failed-transient", "applied"],
        "{ledger}"
    );
    assert!(ledger["tombstones"].as_array().unwrap().is_empty());
}

#[test]
fn the_tool_guide_runs_as_written_with_the_python_agent() {
    judge("python");
}

#[test]
fn the_tool_guide_runs_as_written_with_the_typescript_agent() {
    judge("typescript");
    // What tsx ran without a type check, tsc checks (the guide installed it).
    let checked = Command::new("npm")
        .args(["run", "--silent", "typecheck"])
        .current_dir(workspace_root().join("examples/tool-kit/typescript"))
        .output()
        .expect("npm runs");
    assert!(
        checked.status.success(),
        "the TypeScript agent does not type-check:\n{}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
}
