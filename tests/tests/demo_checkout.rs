//! `sagaplane demo checkout` end to end with real processes (the checkout MCP server, the
//! executor, the planner): the baseline leaves the reservation and the charge in place
//! and asks a person; with the server's SEP-3172 recovery metadata the saga refunds, then
//! releases. Both as the demo prints them and as the server's own ledger records them.
//! The planner plans steps that need nothing of each other side by side, so the calls
//! of two such steps may reach the server in either order.

use std::process::Command;

use sagaplane_e2e::sagaplane;
use serde_json::Value;

fn tools(ledger: &Value) -> Vec<String> {
    ledger["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            format!(
                "{} {}",
                c["tool"].as_str().unwrap(),
                c["outcome"].as_str().unwrap()
            )
        })
        .collect()
}

fn statuses<'a>(ledger: &'a Value, kind: &str) -> Vec<&'a str> {
    ledger["state"][kind]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v["status"].as_str().unwrap())
        .collect()
}

#[test]
fn the_baseline_leaves_the_effects_and_recovery_undoes_them_in_reverse() {
    let dir = tempfile::tempdir().unwrap();
    let summary_path = dir.path().join("summary.json");
    let output = Command::new(sagaplane())
        .args(["demo", "checkout", "--summary"])
        .arg(&summary_path)
        .output()
        .expect("the sagaplane binary runs");
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{text}");
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(&summary_path).unwrap()).unwrap();
    assert_eq!(summary["problems"], serde_json::json!([]));

    let baseline = &summary["baseline"];
    assert_eq!(
        baseline["task"]["status"]["state"],
        "TASK_STATE_AUTH_REQUIRED"
    );
    // The reservation is the baseline's point of no return (irreversible there): the
    // charge and the shipment wait for it, not for each other, and run side by side.
    let calls = tools(&baseline["ledger"]);
    assert_eq!(calls[0], "reserve_inventory applied", "{calls:?}");
    let mut after_it = calls[1..].to_vec();
    after_it.sort();
    assert_eq!(
        after_it,
        ["charge_payment applied", "create_shipment failed"],
        "{calls:?}"
    );
    assert_eq!(statuses(&baseline["ledger"], "reservations"), ["held"]);
    assert_eq!(statuses(&baseline["ledger"], "payments"), ["captured"]);

    let recovery = &summary["recovery"];
    assert_eq!(recovery["task"]["status"]["state"], "TASK_STATE_FAILED");
    assert_eq!(recovery["task"]["metadata"]["outcome"], "compensated");
    // The reservation and the charge side by side, then the shipment (the pivot, after
    // both); unwound in the reverse order of start: refund, then release.
    let calls = tools(&recovery["ledger"]);
    let mut first_two = calls[..2].to_vec();
    first_two.sort();
    assert_eq!(
        first_two,
        ["charge_payment applied", "reserve_inventory applied"],
        "{calls:?}"
    );
    assert_eq!(
        calls[2..],
        [
            "create_shipment failed",
            "refund_payment applied",
            "release_inventory applied"
        ],
        "{calls:?}"
    );
    assert_eq!(statuses(&recovery["ledger"], "reservations"), ["released"]);
    assert_eq!(statuses(&recovery["ledger"], "payments"), ["refunded"]);

    // The printed ledgers, side by side.
    let side_by_side = text
        .lines()
        .find(|l| l.starts_with("reservations:"))
        .unwrap_or_else(|| panic!("no ledger table in:\n{text}"));
    assert!(
        side_by_side.contains("HELD") && side_by_side.contains("released"),
        "{text}"
    );
}
