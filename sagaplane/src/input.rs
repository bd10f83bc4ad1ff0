//! Reading what people hand the CLI: JSON files (bounded, strict, with positions), keys,
//! and folders of agent cards. Every failure is one line that names the file.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use serde_json::Value;
use shared_types::json::parse_strict_bytes;
use shared_types::{Catalog, Error, Jwk};

use crate::failure::Failure;

/// Larger inputs are refused before they are read: no plan, card or key comes near it.
pub const MAX_INPUT_BYTES: u64 = 16 * 1024 * 1024;

/// Reads and parses a JSON file as I-JSON.
pub fn read_json(path: &Path) -> Result<Value, Failure> {
    let shown = path.display();
    let file =
        File::open(path).map_err(|e| Failure::unusable(format!("cannot open {shown}: {e}")))?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    if size > MAX_INPUT_BYTES {
        return Err(Failure::unusable(format!(
            "{shown} is {size} bytes; inputs over {MAX_INPUT_BYTES} bytes (16 MiB) are refused"
        )));
    }
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(MAX_INPUT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Failure::unusable(format!("cannot read {shown}: {e}")))?;
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        return Err(Failure::unusable(format!(
            "{shown} is over {MAX_INPUT_BYTES} bytes (16 MiB); refused"
        )));
    }
    parse_strict_bytes(&bytes).map_err(|e| match e {
        Error::Json {
            message,
            line: Some(line),
            column: Some(column),
        } => Failure::unusable(format!(
            "{shown}:{line}:{column}: invalid JSON: {}",
            strip_position(&message)
        )),
        other => Failure::unusable(format!("{shown}: invalid JSON: {other}")),
    })
}

/// Reads a small text file (a token): at most 4 KiB, UTF-8.
pub fn read_text(path: &Path) -> Result<String, Failure> {
    const MAX_TEXT_BYTES: u64 = 4096;
    let shown = path.display();
    let file =
        File::open(path).map_err(|e| Failure::unusable(format!("cannot open {shown}: {e}")))?;
    let mut bytes = Vec::new();
    file.take(MAX_TEXT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Failure::unusable(format!("cannot read {shown}: {e}")))?;
    if bytes.len() as u64 > MAX_TEXT_BYTES {
        return Err(Failure::unusable(format!(
            "{shown} is over {MAX_TEXT_BYTES} bytes; a token file holds one token"
        )));
    }
    String::from_utf8(bytes).map_err(|_| Failure::unusable(format!("{shown} is not UTF-8")))
}

/// serde_json appends " at line L column C"; the CLI puts the position up front instead.
fn strip_position(message: &str) -> &str {
    message
        .rfind(" at line ")
        .map_or(message, |i| &message[..i])
}

/// Reads a JWK file.
pub fn read_jwk(path: &Path) -> Result<Jwk, Failure> {
    let value = read_json(path)?;
    serde_json::from_value(value)
        .map_err(|e| Failure::unusable(format!("{}: not a JSON Web Key: {e}", path.display())))
}

/// Builds a trust store from public key files.
pub fn read_trust(paths: &[std::path::PathBuf]) -> Result<shared_types::TrustStore, Failure> {
    let mut trust = shared_types::TrustStore::new();
    for path in paths {
        trust
            .add_jwk(&read_jwk(path)?)
            .map_err(|e| Failure::unusable(format!("{}: {e}", path.display())))?;
    }
    Ok(trust)
}

/// Reads every `*.json` agent card in a folder into a catalog (signatures not checked:
/// this is for offline checks; the executor checks them).
pub fn read_catalog_dir(dir: &Path) -> Result<Catalog, Failure> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        Failure::unusable(format!("cannot read catalog folder {}: {e}", dir.display()))
    })?;
    let mut paths = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|e| {
                Failure::unusable(format!("cannot read catalog folder {}: {e}", dir.display()))
            })?
            .path();
        if path.extension().is_some_and(|x| x == "json") {
            paths.push(path);
        }
    }
    paths.sort();
    if paths.is_empty() {
        return Err(Failure::unusable(format!(
            "no *.json agent cards in {}",
            dir.display()
        )));
    }
    let mut catalog = Catalog::default();
    for path in paths {
        let card = read_json(&path)?;
        catalog
            .add_card(&card)
            .map_err(|e| Failure::unusable(format!("{}: {e}", path.display())))?;
    }
    Ok(catalog)
}
