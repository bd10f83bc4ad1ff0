//! Building one of the binary packages alone (`cargo build -p planner-agent`, as the
//! manual's pages and the end-to-end tests do) compiles every dependency with the
//! features the workspace's build gives it. Where they differed, each such build
//! recompiled what the one before had built (serde, rmcp and all above them) and relinked
//! the binaries: minutes of every CI run. Read from `cargo tree`, which builds nothing.

use std::collections::BTreeSet;
use std::process::Command;

use sagaplane_e2e::workspace_root;

/// The packages whose binaries the demo, the manual and the tests build one by one.
const BINARY_PACKAGES: [&str; 4] = [
    "executor-agent",
    "planner-agent",
    "sagaplane",
    "sagaplane-examples",
];

/// Each dependency (not a workspace member) with the features it is built with, as
/// `name version [features]` lines, for `selection` (`-p …` or `--workspace`).
fn built_with(selection: &[&str]) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["tree", "--quiet", "-e", "normal,build", "--prefix", "none"])
        .args(["-f", "{p} [{f}]"])
        .args(selection)
        .current_dir(workspace_root())
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo tree {selection:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| line.trim_end_matches(" (*)").to_owned())
        .filter(|line| !line.contains(&workspace_root().display().to_string()))
        .collect()
}

#[test]
fn each_binary_package_built_alone_compiles_its_dependencies_as_the_workspace_does() {
    let workspace = built_with(&["--workspace"]);
    for package in BINARY_PACKAGES {
        let alone = built_with(&["-p", package]);
        let differing: Vec<&String> = alone.difference(&workspace).collect();
        assert!(
            differing.is_empty(),
            "`cargo build -p {package}` builds these with other features than the \
             workspace's build (give the features in the workspace's Cargo.toml): \
             {differing:#?}"
        );
    }
}
