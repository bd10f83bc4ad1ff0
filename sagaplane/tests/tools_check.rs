//! `sagaplane tools check` against the demo's six tool agents, real A2A servers on
//! loopback: every promise their cards declare holds; and each fault that breaks one
//! (a forward call applied again under its key, a compensation that fails when the
//! forward call never happened, a late forward call accepted after its undo, a result
//! outside `outputSchema`) is named, with exit status 1.

mod common;

use std::collections::BTreeMap;

use common::{p, stdout};
use sagaplane_examples::supplier::{FaultMode, RunningTool, SuiteSettings, start_all};
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "tools-check-token";

/// Runs `tools check` on `tool` (its card as it serves it); the exit code and the report.
async fn check(tool: &RunningTool, dir: &std::path::Path) -> (i32, String) {
    let card = dir.join(format!("{}.card.json", tool.agent));
    std::fs::write(&card, serde_json::to_string(&tool.card).unwrap()).unwrap();
    let token = dir.join("token");
    std::fs::write(&token, TOKEN).unwrap();
    let url = tool.url.clone();
    let output = tokio::task::spawn_blocking(move || {
        common::sagaplane(&[
            "tools",
            "check",
            "--url",
            &url,
            "--card",
            p(&card),
            "--token-file",
            p(&token),
        ])
    })
    .await
    .unwrap();
    let said = format!("{}{}", stdout(&output), common::stderr(&output));
    (output.status.code().unwrap_or(-1), said)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_demo_tool_keeps_its_cards_promises_and_each_broken_one_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let shutdown = CancellationToken::new();
    let _stop = shutdown.clone().drop_guard();
    let settings = SuiteSettings {
        data_dir: dir.path().join("data"),
        cards_dir: common::root().join("agent-cards"),
        token: TOKEN.to_owned(),
        signer: None,
        faults: Vec::new(),
        serving: Default::default(),
    };
    let tools = start_all(settings, "127.0.0.1:0".parse().unwrap(), shutdown)
        .await
        .unwrap();
    assert_eq!(tools.len(), 6);
    for tool in &tools {
        let (code, said) = check(tool, dir.path()).await;
        assert_eq!(code, 0, "{}: {said}", tool.agent);
        assert!(said.contains(", 0 broken"), "{said}");
        assert!(!said.contains("BROKEN"), "{said}");
    }

    let vendors = tools.iter().find(|t| t.agent == "vendor-registry").unwrap();
    for (skill, fault, promise) in [
        (
            "vendor.create",
            FaultMode::NotIdempotent,
            "the same Idempotency-Key twice gives the same answer",
        ),
        (
            "vendor.archive",
            FaultMode::StrictUndo,
            "a compensation for a forward call that never happened succeeds",
        ),
        (
            "vendor.create",
            FaultMode::AcceptLate,
            "the forward call arriving after its compensation is refused",
        ),
        (
            "vendor.create",
            FaultMode::BadOutput,
            "its result matches outputSchema",
        ),
    ] {
        vendors
            .faults
            .replace(BTreeMap::from([(skill.to_owned(), fault)]))
            .unwrap();
        let (code, said) = check(vendors, dir.path()).await;
        assert_eq!(code, 1, "{fault}: {said}");
        assert!(
            said.lines()
                .any(|l| l.contains("BROKEN") && l.contains(promise)),
            "{fault} should break {promise:?}:\n{said}"
        );
    }
}
