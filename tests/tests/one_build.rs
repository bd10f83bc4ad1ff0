//! Building one of the binary packages alone (`cargo build -p planner-agent`, as the
//! manual's pages and the end-to-end tests do) compiles every dependency with the
//! features the workspace's build gives it. Where they differed, each such build
//! recompiled what the one before had built (serde, rmcp and all above them) and relinked
//! the binaries: minutes of every CI run. The test build, which adds the dev-dependencies,
//! likewise compiles every dependency it shares with the demo's build with the same
//! features (tokio's `test-util`, zerocopy's `derive` had made it compile the whole tree a
//! second time). Read from `cargo tree`, which builds nothing.

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
/// `name version [features]` lines, for `selection` (`-p …` or `--workspace`), over the
/// dependency `edges` (`normal,build`; with `dev` for a test build).
fn built_with(edges: &str, selection: &[&str]) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["tree", "--quiet", "-e", edges, "--prefix", "none"])
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

const NORMAL: &str = "normal,build";

#[test]
fn each_binary_package_built_alone_compiles_its_dependencies_as_the_workspace_does() {
    let workspace = built_with(NORMAL, &["--workspace"]);
    for package in BINARY_PACKAGES {
        let alone = built_with(NORMAL, &["-p", package]);
        let differing: Vec<&String> = alone.difference(&workspace).collect();
        assert!(
            differing.is_empty(),
            "`cargo build -p {package}` builds these with other features than the \
             workspace's build (give the features in the workspace's Cargo.toml): \
             {differing:#?}"
        );
    }
}

#[test]
fn the_test_build_compiles_what_it_shares_with_the_demos_build_as_that_build_does() {
    let package = |line: &String| line.split(" [").next().unwrap_or_default().to_owned();
    // The demo builds each binary package (the first command, then the others it starts).
    let demo = built_with(NORMAL, &["--workspace"]);
    let shared: BTreeSet<String> = demo.iter().map(package).collect();
    let tests = built_with("normal,build,dev", &["--workspace"]);
    let differing: Vec<&String> = tests
        .iter()
        .filter(|line| shared.contains(&package(line)) && !demo.contains(*line))
        .collect();
    assert!(
        differing.is_empty(),
        "the test build compiles these with other features than the demo's build, and \
         so compiles them (and all above them) twice; give the features in the \
         workspace's Cargo.toml: {differing:#?}"
    );
}
