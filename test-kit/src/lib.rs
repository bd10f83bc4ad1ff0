//! What the workspace's tests share, written once: the supplier demo's six agents, and
//! the plans, cards and catalog of the repository's fixtures, read from the workspace
//! root whichever crate's test reads them. Dev-only: no crate depends on it but for its
//! tests and benchmarks. A fixture that cannot be read fails the test that needs it,
//! naming the file.

pub mod otlp;

use std::path::PathBuf;

use serde_json::Value;
use shared_types::{Catalog, Plan};

/// The six supplier-onboarding agents, in the order the example plan calls them.
pub use sagaplane_examples::supplier::AGENTS;

/// The workspace's root, where `examples/` and `agent-cards/` are.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The JSON file at `path` (from the workspace root), parsed as the executor parses
/// plans (duplicate keys refused).
pub fn read(path: &str) -> Value {
    let file = root().join(path);
    let text = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("cannot read the fixture {}: {e}", file.display()));
    shared_types::json::parse_strict(&text)
        .unwrap_or_else(|e| panic!("the fixture {} is not JSON: {e}", file.display()))
}

/// The catalog of the six demo agents' (unsigned) cards.
pub fn supplier_catalog() -> Catalog {
    let mut catalog = Catalog::default();
    for agent in AGENTS {
        catalog
            .add_card(&read(&format!("agent-cards/{agent}.json")))
            .unwrap_or_else(|e| panic!("the card of {agent} does not load: {e}"));
    }
    catalog
}

/// The supplier-onboarding example plan, typed.
pub fn supplier_plan() -> Plan {
    Plan::from_value(&read(SUPPLIER_PLAN))
        .unwrap_or_else(|e| panic!("{SUPPLIER_PLAN} is not a plan: {e}"))
}

/// Where the supplier-onboarding example plan is, from the workspace root.
pub const SUPPLIER_PLAN: &str = "examples/plans/supplier-onboarding.json";
