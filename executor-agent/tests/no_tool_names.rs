//! The executor runs whatever a curated declaration says and knows no tool by name: its
//! source must not mention any tool of the demo scenarios (docs/getting-started.md).

use std::path::Path;

const TOOL_NAMES: [&str; 11] = [
    "reserve_inventory",
    "charge_payment",
    "create_shipment",
    "refund_payment",
    "release_inventory",
    "vendor.create",
    "budget.reserve",
    "sandbox.provision",
    "compliance.check",
    "payments.capture",
    "email.send",
];

fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            // The engine's own unit tests drive it with the demo's names; they are not
            // part of the executor.
            let engine_tests = path.parent().is_some_and(|d| d.ends_with("saga"))
                && path
                    .file_name()
                    .is_some_and(|f| f.to_string_lossy().ends_with("tests.rs"));
            if engine_tests {
                continue;
            }
            out.push((
                path.display().to_string(),
                std::fs::read_to_string(&path).unwrap(),
            ));
        }
    }
}

#[test]
fn the_executor_source_names_no_tool() {
    let mut files = Vec::new();
    sources(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    assert!(files.len() > 10, "the source tree was not found");
    let mentions: Vec<String> = files
        .iter()
        .flat_map(|(path, text)| {
            TOOL_NAMES
                .iter()
                .filter(|name| text.contains(*name))
                .map(move |name| format!("{path} mentions {name}"))
        })
        .collect();
    assert!(mentions.is_empty(), "{mentions:#?}");
}
