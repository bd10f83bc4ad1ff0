//! Ed25519 keys as RFC 8037 JWKs, and detached JWS signatures (EdDSA over the RFC 8785
//! canonical JSON of an object without its `signatures` member), as A2A signs agent cards.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::{json, strict};

/// The member that carries signatures, excluded from what is signed.
pub const SIGNATURES_MEMBER: &str = "signatures";

/// One JWS signature in the JSON serialization's `signatures` array (payload detached).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JwsSignature {
    /// base64url of the protected header JSON.
    pub protected: String,
    /// base64url of the 64-byte Ed25519 signature.
    pub signature: String,
    /// Unprotected header; never trusted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<Value>,
}

/// Reads a signed document's `signatures` member: an array of JSON objects, each a
/// `JwsSignature` (never serde's array form of one).
pub(crate) fn signatures<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<JwsSignature>, D::Error> {
    strict::objects(deserializer, SIGNATURES_MEMBER)
}

/// An RFC 8037 OKP JSON Web Key (public, or private when `d` is present).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Jwk {
    pub kty: String,
    pub crv: String,
    pub x: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub d: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alg: Option<String>,
    #[serde(rename = "use", default, skip_serializing_if = "Option::is_none")]
    pub use_: Option<String>,
}

fn decode_key_bytes(field: &'static str, text: &str) -> Result<[u8; 32]> {
    let bytes = B64
        .decode(text)
        .map_err(|e| Error::Key(format!("bad key material in {field:?}: {e}")))?;
    bytes.try_into().map_err(|b: Vec<u8>| {
        Error::Key(format!(
            "bad key material in {field:?}: expected 32 bytes, found {}",
            b.len()
        ))
    })
}

impl Jwk {
    fn check_type(&self) -> Result<()> {
        if self.kty == "OKP" && self.crv == "Ed25519" {
            Ok(())
        } else {
            Err(Error::Key(format!(
                "not an Ed25519 key: expected kty \"OKP\" and crv \"Ed25519\", found kty {:?}, crv {:?}",
                self.kty, self.crv
            )))
        }
    }

    /// The key id: the `kid` member, or else the RFC 7638 thumbprint.
    pub fn key_id(&self) -> String {
        self.kid.clone().unwrap_or_else(|| thumbprint(&self.x))
    }

    pub fn verifying_key(&self) -> Result<VerifyingKey> {
        self.check_type()?;
        VerifyingKey::from_bytes(&decode_key_bytes("x", &self.x)?)
            .map_err(|e| Error::Key(format!("bad key material in \"x\": {e}")))
    }

    /// This key without its private part.
    pub fn public(&self) -> Jwk {
        Jwk {
            d: None,
            ..self.clone()
        }
    }
}

/// RFC 7638 thumbprint (SHA-256, base64url) of an Ed25519 public key.
pub fn thumbprint(x: &str) -> String {
    let members = json!({"crv": "Ed25519", "kty": "OKP", "x": x});
    // Required members only, lexicographic order, no whitespace: exactly the JCS form.
    B64.encode(Sha256::digest(members.to_string().as_bytes()))
}

/// A private signing key with its key id.
#[derive(Clone)]
pub struct SigningIdentity {
    kid: String,
    key: SigningKey,
}

impl std::fmt::Debug for SigningIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningIdentity")
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

impl SigningIdentity {
    /// A fresh key from the operating system's randomness; `kid` defaults to the thumbprint.
    pub fn generate(kid: Option<String>) -> Result<Self> {
        let mut seed = [0u8; 32];
        rand_core::RngCore::try_fill_bytes(&mut rand_core::OsRng, &mut seed)
            .map_err(|e| Error::Key(format!("no randomness from the operating system: {e}")))?;
        Ok(Self::from_seed(seed, kid))
    }

    /// A key from its 32-byte seed (tests and fixtures).
    pub fn from_seed(seed: [u8; 32], kid: Option<String>) -> Self {
        let key = SigningKey::from_bytes(&seed);
        let kid = kid.unwrap_or_else(|| thumbprint(&B64.encode(key.verifying_key().as_bytes())));
        Self { kid, key }
    }

    pub fn from_jwk(jwk: &Jwk) -> Result<Self> {
        jwk.check_type()?;
        let d = jwk.d.as_deref().ok_or_else(|| {
            Error::Key(
                "this is a public key; signing needs the private key file (with \"d\")".into(),
            )
        })?;
        let key = SigningKey::from_bytes(&decode_key_bytes("d", d)?);
        if jwk.verifying_key()? != key.verifying_key() {
            return Err(Error::Key(format!(
                "public key {} does not match the private key",
                jwk.x
            )));
        }
        Ok(Self {
            kid: jwk.key_id(),
            key,
        })
    }

    pub fn kid(&self) -> &str {
        &self.kid
    }

    pub fn verifying_key(&self) -> VerifyingKey {
        self.key.verifying_key()
    }

    pub fn public_jwk(&self) -> Jwk {
        Jwk {
            kty: "OKP".into(),
            crv: "Ed25519".into(),
            x: B64.encode(self.key.verifying_key().as_bytes()),
            d: None,
            kid: Some(self.kid.clone()),
            alg: Some("EdDSA".into()),
            use_: Some("sig".into()),
        }
    }

    pub fn private_jwk(&self) -> Jwk {
        Jwk {
            d: Some(B64.encode(self.key.to_bytes())),
            ..self.public_jwk()
        }
    }

    /// The private key as PKCS#8 DER (RFC 8410), the form JOSE libraries take for EdDSA.
    pub fn pkcs8_der(&self) -> Vec<u8> {
        // SEQUENCE { INTEGER 0, SEQUENCE { OID 1.3.101.112 }, OCTET STRING { OCTET STRING seed } }
        const PREFIX: [u8; 16] = [
            0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22,
            0x04, 0x20,
        ];
        let mut der = PREFIX.to_vec();
        der.extend_from_slice(&self.key.to_bytes());
        der
    }

    /// Raw Ed25519 signature over `message` (used for JWTs elsewhere).
    pub fn sign_bytes(&self, message: &[u8]) -> [u8; 64] {
        self.key.sign(message).to_bytes()
    }

    /// Signs `object` (without its `signatures` member) and returns the signature.
    pub fn sign(&self, object: &Value) -> Result<JwsSignature> {
        let payload = signing_payload(object)?;
        let header = json!({"alg": "EdDSA", "kid": self.kid, "typ": "JOSE"});
        let protected = B64.encode(json::canonicalize(&header)?);
        let input = format!("{protected}.{}", B64.encode(payload));
        let signature = B64.encode(self.key.sign(input.as_bytes()).to_bytes());
        Ok(JwsSignature {
            protected,
            signature,
            header: None,
        })
    }

    /// Replaces the object's signatures with one by this key.
    pub fn sign_in_place(&self, object: &mut Value) -> Result<()> {
        let signature = self.sign(object)?;
        let Value::Object(map) = object else {
            return Err(not_an_object());
        };
        let signature = json!({"protected": signature.protected, "signature": signature.signature});
        map.insert(SIGNATURES_MEMBER.into(), Value::Array(vec![signature]));
        Ok(())
    }
}

/// The bytes that are signed: the canonical JSON of the object minus `signatures`.
pub fn signing_payload(object: &Value) -> Result<Vec<u8>> {
    if !object.is_object() {
        return Err(not_an_object());
    }
    json::canonicalize_without(object, Some(SIGNATURES_MEMBER))
}

fn not_an_object() -> Error {
    Error::json("only a JSON object can be signed")
}

/// Signatures verified already, each as the SHA-256 of its key id, signing input and
/// signature: an Ed25519 verification is a pure function of the three. At most
/// `VerifiedSignatures::AT_MOST` are held; past that, the set starts again empty.
#[derive(Debug, Default)]
pub struct VerifiedSignatures {
    seen: std::sync::Mutex<std::collections::HashSet<[u8; 32]>>,
}

impl VerifiedSignatures {
    pub const AT_MOST: usize = 4_096;

    fn digest(kid: &str, input: &str, signature: &[u8; 64]) -> [u8; 32] {
        let mut hash = Sha256::new();
        // Lengths first, so that no two triples hash the same bytes.
        for part in [kid.as_bytes(), input.as_bytes(), signature.as_slice()] {
            hash.update((part.len() as u64).to_be_bytes());
            hash.update(part);
        }
        hash.finalize().into()
    }

    fn holds(&self, digest: &[u8; 32]) -> bool {
        self.seen.lock().is_ok_and(|seen| seen.contains(digest))
    }

    fn remember(&self, digest: [u8; 32]) {
        if let Ok(mut seen) = self.seen.lock() {
            if seen.len() >= Self::AT_MOST {
                seen.clear();
            }
            seen.insert(digest);
        }
    }
}

/// Public keys that this party trusts, by key id.
#[derive(Debug, Clone, Default)]
pub struct TrustStore {
    keys: BTreeMap<String, VerifyingKey>,
}

impl TrustStore {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn add_jwk(&mut self, jwk: &Jwk) -> Result<()> {
        self.keys.insert(jwk.key_id(), jwk.verifying_key()?);
        Ok(())
    }

    pub fn add(&mut self, kid: impl Into<String>, key: VerifyingKey) {
        self.keys.insert(kid.into(), key);
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub fn kids(&self) -> impl Iterator<Item = &str> {
        self.keys.keys().map(String::as_str)
    }

    /// Verifies a signed object; returns the key id of the trusted signer.
    ///
    /// Every signature by a trusted key must verify; at least one must exist.
    pub fn verify(&self, object: &Value) -> Result<String> {
        self.verify_with(object, None)
    }

    /// `verify`, skipping the Ed25519 check of a signature that `seen` holds as verified
    /// already: the same key over the same bytes with the same signature (a principal's
    /// mandate carried by every plan under it). What is checked is unchanged.
    pub fn verify_remembering(&self, object: &Value, seen: &VerifiedSignatures) -> Result<String> {
        self.verify_with(object, Some(seen))
    }

    fn verify_with(&self, object: &Value, seen: Option<&VerifiedSignatures>) -> Result<String> {
        let signatures = match object.get(SIGNATURES_MEMBER) {
            None => return Err(Error::SignatureInvalid("it carries no signature".into())),
            Some(Value::Array(items)) if items.is_empty() => {
                return Err(Error::SignatureInvalid("it carries no signature".into()));
            }
            Some(v) => strict::objects_of::<JwsSignature>(v, SIGNATURES_MEMBER)
                .map_err(|e| malformed(format!("the signatures member does not type: {e}")))?,
        };
        let payload = signing_payload(object).map_err(|e| malformed(e.to_string()))?;
        let payload = B64.encode(payload);
        let mut trusted_signer = None;
        let mut untrusted = Vec::new();
        for sig in &signatures {
            let kid = protected_kid(&sig.protected)?;
            let Some(key) = self.keys.get(&kid) else {
                untrusted.push(kid);
                continue;
            };
            let bytes = B64
                .decode(&sig.signature)
                .map_err(|e| malformed(format!("signature by {kid} is not base64url: {e}")))?;
            let bytes: [u8; 64] = bytes
                .try_into()
                .map_err(|_| malformed(format!("signature by {kid} is not 64 bytes")))?;
            let input = format!("{}.{payload}", sig.protected);
            let remembered =
                seen.map(|seen| (seen, VerifiedSignatures::digest(&kid, &input, &bytes)));
            if !remembered
                .as_ref()
                .is_some_and(|(seen, digest)| seen.holds(digest))
            {
                key.verify(input.as_bytes(), &Signature::from_bytes(&bytes))
                    .map_err(|_| {
                        Error::SignatureInvalid(format!(
                            "the signature by {kid} does not match the content"
                        ))
                    })?;
                if let Some((seen, digest)) = remembered {
                    seen.remember(digest);
                }
            }
            trusted_signer.get_or_insert(kid);
        }
        trusted_signer.ok_or_else(|| Error::SignerUntrusted {
            kids: untrusted.join(", "),
        })
    }
}

/// The key ids a signed object's signatures name, in order, unverified (an object this
/// process verified when it took it in); an unreadable signature names none.
pub fn signer_kids(object: &Value) -> Vec<String> {
    let Some(Value::Array(signatures)) = object.get(SIGNATURES_MEMBER) else {
        return Vec::new();
    };
    signatures
        .iter()
        .filter_map(|sig| sig.get("protected")?.as_str())
        .filter_map(|protected| protected_kid(protected).ok())
        .collect()
}

/// Reads the protected header: `alg` must be EdDSA, `kid` present, nothing critical.
fn malformed(why: String) -> Error {
    Error::SignatureInvalid(format!("malformed signature: {why}"))
}

fn protected_kid(protected: &str) -> Result<String> {
    let bytes = B64
        .decode(protected)
        .map_err(|e| malformed(format!("protected header is not base64url: {e}")))?;
    let header = json::parse_strict_bytes(&bytes)
        .map_err(|e| malformed(format!("protected header: {e}")))?;
    let field = |name: &str| header.get(name).and_then(Value::as_str);
    if field("alg") != Some("EdDSA") {
        return Err(malformed(format!(
            "protected header alg is {:?}; only EdDSA is accepted",
            header.get("alg")
        )));
    }
    if header.get("crit").is_some() || header.get("b64").is_some() {
        return Err(malformed(
            "protected header has crit or b64, which are not supported".into(),
        ));
    }
    match field("typ") {
        None | Some("JOSE") => {}
        Some(other) => {
            return Err(malformed(format!(
                "protected header typ is {other:?}, expected \"JOSE\""
            )));
        }
    }
    field("kid")
        .map(str::to_owned)
        .ok_or_else(|| malformed("protected header has no kid".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(n: u8) -> SigningIdentity {
        SigningIdentity::from_seed([n; 32], Some(format!("key-{n}")))
    }

    fn trust(ids: &[&SigningIdentity]) -> TrustStore {
        let mut store = TrustStore::new();
        for id in ids {
            store.add_jwk(&id.public_jwk()).unwrap();
        }
        store
    }

    #[test]
    fn a_remembered_signature_still_refuses_other_content() {
        let signer = identity(1);
        let store = trust(&[&signer]);
        let seen = VerifiedSignatures::default();
        let mut doc = json!({"budget": 100});
        signer.sign_in_place(&mut doc).unwrap();
        assert_eq!(store.verify_remembering(&doc, &seen).unwrap(), "key-1");
        assert_eq!(store.verify_remembering(&doc, &seen).unwrap(), "key-1");
        assert_eq!(seen.seen.lock().unwrap().len(), 1, "remembered once");
        // The same signature over other content is checked, and refused.
        let mut raised = doc.clone();
        raised["budget"] = json!(1_000_000);
        assert!(matches!(
            store.verify_remembering(&raised, &seen),
            Err(Error::SignatureInvalid(_))
        ));
        // Nor does another key's trust carry over: an untrusted signer stays untrusted.
        let stranger = trust(&[&identity(2)]);
        assert!(matches!(
            stranger.verify_remembering(&doc, &seen),
            Err(Error::SignerUntrusted { .. })
        ));
        assert_eq!(
            seen.seen.lock().unwrap().len(),
            1,
            "a refusal is not remembered"
        );
    }

    #[test]
    fn sign_then_verify() {
        let signer = identity(1);
        let mut doc = json!({"b": 2, "a": [1, "x"], "signatures": ["ignored"]});
        signer.sign_in_place(&mut doc).unwrap();
        assert_eq!(trust(&[&signer]).verify(&doc).unwrap(), "key-1");
        // Member order and the signatures member itself do not matter.
        let reordered: Value = serde_json::from_str(&format!(
            r#"{{"signatures": {}, "a": [1, "x"], "b": 2}}"#,
            doc["signatures"]
        ))
        .unwrap();
        assert!(trust(&[&signer]).verify(&reordered).is_ok());
    }

    #[test]
    fn tampering_untrusted_and_missing() {
        let signer = identity(1);
        let mut doc = json!({"amountMinor": 100});
        signer.sign_in_place(&mut doc).unwrap();
        let mut tampered = doc.clone();
        tampered["amountMinor"] = json!(101);
        assert_eq!(
            trust(&[&signer]).verify(&tampered),
            Err(Error::SignatureInvalid(
                "the signature by key-1 does not match the content".into()
            ))
        );
        assert_eq!(
            trust(&[&identity(2)]).verify(&doc),
            Err(Error::SignerUntrusted {
                kids: "key-1".into()
            })
        );
        assert_eq!(
            trust(&[&signer]).verify(&json!({"a": 1})),
            Err(Error::SignatureInvalid("it carries no signature".into()))
        );
        // A trusted kid with another key's signature is invalid, not untrusted.
        let mut forged = json!({"amountMinor": 100});
        SigningIdentity::from_seed([9; 32], Some("key-1".into()))
            .sign_in_place(&mut forged)
            .unwrap();
        assert!(matches!(
            trust(&[&signer]).verify(&forged),
            Err(Error::SignatureInvalid(_))
        ));
    }

    #[test]
    fn header_must_be_eddsa_with_kid() {
        let store = trust(&[&identity(1)]);
        for header in [
            json!({"alg": "none", "kid": "key-1"}),
            json!({"alg": "EdDSA"}),
            json!({"alg": "EdDSA", "kid": "key-1", "crit": ["b64"], "b64": false}),
            json!({"alg": "EdDSA", "kid": "key-1", "typ": "JWT"}),
        ] {
            let doc = json!({"a": 1, "signatures": [{"protected": B64.encode(header.to_string()), "signature": "AA"}]});
            let err = store.verify(&doc).unwrap_err();
            assert!(
                err.to_string().starts_with("malformed signature"),
                "{header}: {err}"
            );
        }
    }

    #[test]
    fn jwk_round_trip_and_key_errors() {
        let id = SigningIdentity::generate(None).unwrap();
        let private = id.private_jwk();
        let again = SigningIdentity::from_jwk(&private).unwrap();
        assert_eq!(again.kid(), id.kid());
        assert_eq!(again.verifying_key(), id.verifying_key());
        assert_eq!(
            id.kid(),
            thumbprint(&private.x),
            "default kid is the RFC 7638 thumbprint"
        );
        let public_only = SigningIdentity::from_jwk(&private.public()).unwrap_err();
        assert!(
            public_only.to_string().contains("public key"),
            "{public_only}"
        );
        let rsa = Jwk {
            kty: "RSA".into(),
            crv: "".into(),
            ..private.clone()
        };
        assert!(
            SigningIdentity::from_jwk(&rsa)
                .unwrap_err()
                .to_string()
                .contains("not an Ed25519 key")
        );
        let short = Jwk {
            x: "AAAA".into(),
            ..private.public()
        };
        assert!(matches!(short.verifying_key(), Err(Error::Key(_))));
    }

    /// RFC 8037 Appendix A: the example key's thumbprint.
    #[test]
    fn rfc8037_thumbprint() {
        assert_eq!(
            thumbprint("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"),
            "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"
        );
    }

    /// RFC 8037 Appendix A.4: signing "Example of Ed25519 signing" with the example key.
    #[test]
    fn rfc8037_signature() {
        let seed = B64
            .decode("nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A")
            .unwrap();
        let id = SigningIdentity::from_seed(seed.try_into().unwrap(), None);
        let input = format!(
            "eyJhbGciOiJFZERTQSJ9.{}",
            B64.encode("Example of Ed25519 signing")
        );
        assert_eq!(
            B64.encode(id.sign_bytes(input.as_bytes())),
            "hgyY0il_MGCjP0JzlnLWG1PPOt7-09PGcvMg3AIbQR6dWbhijcNR4ki4iylGjg5BhVsPt9g7sVvpAr_MuM0KAg"
        );
    }
}
