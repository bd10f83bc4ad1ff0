//! `sagaplane keygen` and `sagaplane token`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde_json::Value;
use shared_types::SigningIdentity;

use crate::failure::Failure;
use crate::output::{pretty, write_new};

/// `NAME` → `NAME.jwk` and `NAME.pub.jwk`.
fn with_suffix(name: &Path, suffix: &str) -> PathBuf {
    let mut s = OsString::from(name.as_os_str());
    s.push(suffix);
    PathBuf::from(s)
}

pub fn keygen(name: &Path, kid: Option<String>, force: bool) -> Result<(), Failure> {
    let identity = SigningIdentity::generate(kid).map_err(|e| Failure::unusable(e.to_string()))?;
    let to_text = |jwk| {
        serde_json::to_value(jwk)
            .map(|v: Value| pretty(&v))
            .map_err(|e| Failure::unusable(format!("cannot encode key: {e}")))
    };
    let private_path = with_suffix(name, ".jwk");
    let public_path = with_suffix(name, ".pub.jwk");
    if !force && public_path.exists() {
        return Err(Failure::unusable(format!(
            "{} already exists (pass --force to replace it)",
            public_path.display()
        )));
    }
    write_new(
        &private_path,
        &to_text(identity.private_jwk())?,
        true,
        force,
    )?;
    write_new(&public_path, &to_text(identity.public_jwk())?, false, force)?;
    println!(
        "wrote {} (private, keep it secret) and {} (public) for key id {}",
        private_path.display(),
        public_path.display(),
        identity.kid()
    );
    Ok(())
}

/// Prints a JWT of the key at `key` for `audience`, valid for `lifetime_secs`.
pub fn token(key: &Path, audience: &str, lifetime_secs: i64) -> Result<(), Failure> {
    let identity = SigningIdentity::from_jwk(&crate::input::read_jwk(key)?)
        .map_err(|e| Failure::unusable(format!("{}: {e}", key.display())))?;
    let issuer = identity.kid().to_owned();
    let jwt = agent_host::mint_jwt(&identity, &issuer, audience, lifetime_secs)
        .map_err(|e| Failure::unusable(e.to_string()))?;
    println!("{jwt}");
    Ok(())
}
