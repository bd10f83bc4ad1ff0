//! The published schemas, registered once under their `$id`s and compiled once for every
//! test; the repository's files the tests read; assertions that name what failed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use jsonschema::{Draft, Registry, Validator};
use serde_json::Value;

/// Every schema the specification publishes, by file stem (`<stem>.schema.json`).
pub(crate) const SCHEMAS: [&str; 7] = [
    "skill-declarations",
    "plan",
    "mandate",
    "revocation",
    "answer",
    "tool-call",
    "tool-answer",
];

/// A schema's `$id` is this prefix and its stem. URNs have no hierarchical path, so a
/// relative `$ref` ("mandate.schema.json") cannot be resolved against one (RFC 3986 §5.2.2;
/// `jsonschema` refuses it with "when base has a rootless path and no authority, reference
/// should either have scheme, be empty or start with '#'"): the schemas refer to each other
/// by absolute `$id` (`urn:sagaplane:schema:v1:mandate#/$defs/dateTime`), and `registry`
/// registers every schema under its `$id`.
pub(crate) const ID_PREFIX: &str = "urn:sagaplane:schema:v1:";

pub(crate) const DRAFT_2020_12: &str = "https://json-schema.org/draft/2020-12/schema";

/// Mutated documents per document kind: enough to cover every mutation class many times,
/// few enough that the whole target runs in seconds.
pub(crate) const CASES: u32 = 256;

pub(crate) fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub(crate) fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// The `.json` files directly in `dir` (relative to the repository), sorted, whose file
/// name passes `keep`.
pub(crate) fn json_files(dir: &str, keep: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let dir = repo().join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "json"))
        .filter(|p| keep(&file_name(p)))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no example in {}", dir.display());
    files
}

pub(crate) fn file_name(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

pub(crate) fn schema_path(stem: &str) -> PathBuf {
    repo()
        .join("spec/schemas")
        .join(format!("{stem}.schema.json"))
}

/// A schema document; a missing or unreadable schema fails the test that needs it.
pub(crate) fn schema_document(stem: &str) -> Value {
    let path = schema_path(stem);
    assert!(
        path.is_file(),
        "the schema {} is missing: spec/reversibility-v1.md publishes it",
        path.display()
    );
    read_json(&path)
}

/// Every schema, registered under its `$id`, so that the references between them resolve
/// without any retrieval.
fn registry() -> &'static Registry<'static> {
    static REGISTRY: OnceLock<Registry<'static>> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let resources = SCHEMAS
            .iter()
            .map(|stem| (format!("{ID_PREFIX}{stem}"), schema_document(stem)));
        Registry::new()
            .draft(Draft::Draft202012)
            .extend(resources)
            .and_then(|builder| builder.prepare())
            .unwrap_or_else(|e| panic!("the schemas do not form a registry: {e}"))
    })
}

/// Compiles `schema` (a schema document, or a `$ref` into one) under draft 2020-12, with
/// every published schema resolvable and nothing fetched. `format` stays an annotation:
/// the date-time patterns are what the schemas assert (see `mandate.schema.json`).
pub(crate) fn compile(schema: &Value) -> Result<Validator, String> {
    jsonschema::options()
        .with_draft(Draft::Draft202012)
        .with_registry(registry())
        .offline()
        .should_validate_formats(false)
        .build(schema)
        .map_err(|e| e.to_string())
}

/// The compiled validator of a published schema.
pub(crate) fn validator(stem: &str) -> &'static Validator {
    static VALIDATORS: OnceLock<BTreeMap<&'static str, Validator>> = OnceLock::new();
    let validators = VALIDATORS.get_or_init(|| {
        SCHEMAS
            .iter()
            .map(|stem| {
                let compiled = compile(&schema_document(stem)).unwrap_or_else(|e| {
                    panic!("spec/schemas/{stem}.schema.json does not compile: {e}")
                });
                (*stem, compiled)
            })
            .collect()
    });
    validators
        .get(stem)
        .unwrap_or_else(|| panic!("{stem} is not a published schema"))
}

/// Why `doc` fails `stem`, one line per error.
pub(crate) fn errors(stem: &str, doc: &Value) -> Vec<String> {
    validator(stem)
        .iter_errors(doc)
        .map(|e| format!("at '{}': {e}", e.instance_path()))
        .collect()
}

pub(crate) fn assert_valid(stem: &str, doc: &Value, what: &str) {
    let errors = errors(stem, doc);
    assert!(
        errors.is_empty(),
        "{what} does not validate against {stem}.schema.json:\n  {}",
        errors.join("\n  ")
    );
}

pub(crate) fn assert_invalid(stem: &str, doc: &Value, what: &str) {
    assert!(
        !validator(stem).is_valid(doc),
        "{what} validates against {stem}.schema.json, and should not: {doc}"
    );
}
