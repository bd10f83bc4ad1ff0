//! Our signatures verify with implementations we did not write: Python's `rfc8785`
//! canonicaliser and `cryptography`'s Ed25519, run from the test suite.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::*;

/// The interpreter of the interop virtualenv (`scripts/setup-interop` creates it), or
/// `SAGAPLANE_PYTHON`.
fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("SAGAPLANE_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = root().join(".interop/venv/bin/python");
    assert!(
        venv.exists(),
        "{} is missing: run scripts/setup-interop (scripts/test does it for you)",
        venv.display()
    );
    venv
}

fn verify_with_python(signed: &std::path::Path, public: &std::path::Path) -> (bool, String) {
    let script = root().join("tests/interop/python/verify_jws.py");
    let out = Command::new(python())
        .arg(script)
        .arg(signed)
        .arg(public)
        .output()
        .expect("python runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn python_verifies_our_plan_and_card_signatures() {
    let dir = tempfile::tempdir().unwrap();
    let (private, public) = keygen(dir.path(), "planner");
    let signed = sign_plan(dir.path(), &example_plan(), &private);
    let (ok, text) = verify_with_python(&signed, &public);
    assert!(ok, "python: {text}");
    assert_eq!(text.trim(), "ok planner");

    // The mandate the plan embeds verifies as its principal signed it.
    let plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&signed).unwrap()).unwrap();
    let mandate = dir.path().join("mandate.json");
    std::fs::write(&mandate, plan["mandate"].to_string()).unwrap();
    let (ok, text) = verify_with_python(&mandate, &test_principal_pub());
    assert!(ok, "python: {text}");
    assert_eq!(text.trim(), "ok test-principal");

    let card = dir.path().join("card.json");
    let out = sagaplane(&[
        "cards",
        "sign",
        p(&root().join("agent-cards/compliance-registry.json")),
        "--key",
        p(&private),
        "--out",
        p(&card),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (ok, text) = verify_with_python(&card, &public);
    assert!(ok, "python: {text}");
}

#[test]
fn python_rejects_a_changed_byte() {
    let dir = tempfile::tempdir().unwrap();
    let (private, public) = keygen(dir.path(), "planner");
    let signed = sign_plan(dir.path(), &example_plan(), &private);
    let text = std::fs::read_to_string(&signed).unwrap();
    let changed = text.replacen("ACME GmbH", "ACME GmbI", 1);
    assert_ne!(text, changed);
    std::fs::write(&signed, changed).unwrap();
    let (ok, out) = verify_with_python(&signed, &public);
    assert!(!ok, "python accepted a changed plan: {out}");
    assert!(out.contains("does not verify"), "{out}");
}

/// A small deterministic generator of awkward JSON: unicode keys that sort differently
/// in UTF-16 and UTF-8, control characters, escapes, floats of every magnitude.
struct Awkward(u64);

impl Awkward {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn string(&mut self) -> String {
        const PIECES: &[&str] = &[
            "a",
            "Z",
            "1",
            "\u{0}",
            "\u{1f}",
            "\"",
            "\\",
            "/",
            "\n",
            "\u{7f}",
            "\u{80}",
            "ö",
            "€",
            "\u{e000}",
            "\u{fb33}",
            "\u{ffff}",
            "😀",
            "\u{10000}",
            "\u{2028}",
            " ",
        ];
        (0..self.next() % 5)
            .map(|_| PIECES[(self.next() % PIECES.len() as u64) as usize])
            .collect()
    }

    /// Keys where UTF-16 order and code-point order disagree, half of the time.
    fn key(&mut self) -> String {
        const SURPRISING: &[&str] = &[
            "\u{e000}",
            "\u{ffff}",
            "\u{fb33}",
            "\u{10000}",
            "😀",
            "a",
            "\u{80}",
        ];
        if self.next().is_multiple_of(2) {
            SURPRISING[(self.next() % SURPRISING.len() as u64) as usize].to_owned() + &self.string()
        } else {
            self.string()
        }
    }

    fn value(&mut self, depth: u32) -> serde_json::Value {
        use serde_json::Value;
        match self.next() % if depth > 3 { 6 } else { 8 } {
            0 => Value::Null,
            1 => Value::Bool(self.next().is_multiple_of(2)),
            2 => Value::from(
                (self.next() % (1 << 53)) as i64
                    * if self.next().is_multiple_of(2) { 1 } else { -1 },
            ),
            3 => {
                let f = f64::from_bits(self.next());
                let f = if f.is_finite() && f.abs() < 9.0e15 {
                    f
                } else {
                    1.5e-7
                };
                Value::from(f)
            }
            4 => Value::from((self.next() % 1_000_000) as f64 / 7.0),
            5 => Value::String(self.string()),
            6 => Value::Array(
                (0..self.next() % 4)
                    .map(|_| self.value(depth + 1))
                    .collect(),
            ),
            _ => Value::Object(
                (0..self.next() % 6)
                    .map(|_| (self.key(), self.value(depth + 1)))
                    .collect(),
            ),
        }
    }
}

#[test]
fn our_canonical_json_matches_python_rfc8785() {
    use std::io::Write;

    use base64::Engine;
    let mut generator = Awkward(0x5eed_1234_abcd_0001);
    let values: Vec<serde_json::Value> = (0..400).map(|_| generator.value(0)).collect();
    let mut child = Command::new(python())
        .arg(root().join("tests/interop/python/canonicalize.py"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python runs");
    let mut stdin = child.stdin.take().unwrap();
    for v in &values {
        writeln!(stdin, "{v}").unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let theirs: Vec<Vec<u8>> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| base64::engine::general_purpose::STANDARD.decode(l).unwrap())
        .collect();
    assert_eq!(theirs.len(), values.len());
    for (value, theirs) in values.iter().zip(theirs) {
        let ours = shared_types::json::canonicalize(value).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&ours),
            String::from_utf8_lossy(&theirs),
            "value {value}"
        );
    }
}
