//! Helpers shared by the end-to-end tests in `tests/tests/`: where the build's binaries
//! are, building the command line, and the interop virtualenv's interpreter.

use std::path::PathBuf;
use std::process::Command;

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// The build's `target/<profile>` directory (a test runs from its `deps/`).
pub fn build_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    exe.parent()
        .and_then(|deps| deps.parent())
        .map(PathBuf::from)
        .expect("target/<profile>/deps/<test>")
}

/// Builds the `sagaplane` command line once per test binary (cargo does nothing when it
/// is up to date); `sagaplane demo` then builds the agents it starts.
pub fn sagaplane() -> PathBuf {
    static BUILT: std::sync::Once = std::sync::Once::new();
    BUILT.call_once(|| {
        let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["build", "--quiet", "-p", "sagaplane", "--bin", "sagaplane"])
            .current_dir(workspace_root())
            .status()
            .expect("cargo runs");
        assert!(status.success(), "cannot build the sagaplane binary");
    });
    build_dir().join("sagaplane")
}

/// The interop virtualenv's interpreter (`scripts/setup-interop` creates it).
pub fn python() -> PathBuf {
    let venv = workspace_root().join(".interop/venv/bin/python");
    assert!(
        venv.exists(),
        "{} is missing: run scripts/setup-interop (scripts/test does it)",
        venv.display()
    );
    venv
}
