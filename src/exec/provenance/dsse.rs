//! DSSE envelopes, the signed wrapper in-toto attestations travel in:
//! the payload, its type, and ed25519 signatures over the DSSE
//! pre-authentication encoding of both. Keys are PEM files as OpenSSL
//! writes them (`openssl genpkey -algorithm ed25519` for the PKCS#8 private
//! key, `openssl pkey -pubout` for the SPKI public key).

use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use ed25519_dalek::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePublicKey};
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};

/// The payload type of an in-toto Statement.
pub const IN_TOTO_PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Envelope {
    /// Base64 of the payload's bytes.
    pub payload: String,
    pub payload_type: String,
    pub signatures: Vec<EnvelopeSignature>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvelopeSignature {
    /// sha256 of the public key's SPKI DER, hex: which key to check with.
    pub keyid: String,
    /// Base64 of the ed25519 signature.
    pub sig: String,
}

#[derive(Debug, thiserror::Error)]
pub enum DsseError {
    #[error("{}: {problem}", path.display())]
    Key { path: PathBuf, problem: String },
    #[error("the envelope's payload is not base64")]
    Payload,
    #[error("the envelope's payload type is `{0}`, not `{IN_TOTO_PAYLOAD_TYPE}`")]
    PayloadType(String),
    #[error("no signature in the envelope verifies with the key {keyid}")]
    NotSigned { keyid: String },
}

/// Signs `payload` (of `payload_type`) with the ed25519 key in `key_file`.
pub fn sign(payload: &[u8], payload_type: &str, key_file: &Path) -> Result<Envelope, DsseError> {
    let key = signing_key(key_file)?;
    let signature = key.sign(&pre_authentication_encoding(payload_type, payload));
    Ok(Envelope {
        payload: BASE64.encode(payload),
        payload_type: payload_type.to_owned(),
        signatures: vec![EnvelopeSignature {
            keyid: key_id(&key.verifying_key()),
            sig: BASE64.encode(signature.to_bytes()),
        }],
    })
}

/// The in-toto payload of `envelope`, once one of its signatures verifies
/// with the public key in `public_key_file`.
pub fn open(envelope: &Envelope, public_key_file: &Path) -> Result<Vec<u8>, DsseError> {
    let key = verifying_key(public_key_file)?;
    let payload = unverified_payload(envelope)?;
    let message = pre_authentication_encoding(&envelope.payload_type, &payload);
    let verifies = |s: &EnvelopeSignature| {
        let bytes = BASE64.decode(&s.sig).ok()?;
        let signature = Signature::from_slice(&bytes).ok()?;
        key.verify_strict(&message, &signature).ok()
    };
    match envelope.signatures.iter().any(|s| verifies(s).is_some()) {
        true => Ok(payload),
        false => Err(DsseError::NotSigned { keyid: key_id(&key) }),
    }
}

/// The in-toto payload of `envelope`, its signatures not checked.
pub fn unverified_payload(envelope: &Envelope) -> Result<Vec<u8>, DsseError> {
    if envelope.payload_type != IN_TOTO_PAYLOAD_TYPE {
        return Err(DsseError::PayloadType(envelope.payload_type.clone()));
    }
    BASE64.decode(&envelope.payload).map_err(|_| DsseError::Payload)
}

/// DSSE's PAE: `DSSEv1 <len(type)> <type> <len(body)> <body>`, lengths in
/// ASCII decimal; what is signed, so neither part can be swapped.
fn pre_authentication_encoding(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut message = format!("DSSEv1 {} {payload_type} {} ", payload_type.len(), payload.len()).into_bytes();
    message.extend_from_slice(payload);
    message
}

fn key_id(key: &VerifyingKey) -> String {
    let der = key.to_public_key_der().map(|d| d.as_bytes().to_vec()).unwrap_or_else(|_| key.to_bytes().to_vec());
    crate::files::sha256_hex(&der)
}

fn signing_key(path: &Path) -> Result<SigningKey, DsseError> {
    let text = read_pem(path)?;
    SigningKey::from_pkcs8_pem(&text).map_err(|e| DsseError::Key {
        path: path.to_owned(),
        problem: format!(
            "not an ed25519 private key in PKCS#8 PEM ({e}); `openssl genpkey -algorithm ed25519` makes one"
        ),
    })
}

fn verifying_key(path: &Path) -> Result<VerifyingKey, DsseError> {
    let text = read_pem(path)?;
    VerifyingKey::from_public_key_pem(&text).map_err(|e| DsseError::Key {
        path: path.to_owned(),
        problem: format!("not an ed25519 public key in SPKI PEM ({e}); `openssl pkey -pubout` makes one"),
    })
}

fn read_pem(path: &Path) -> Result<String, DsseError> {
    const MAX_KEY_BYTES: u64 = 64 << 10;
    let problem = |problem: String| DsseError::Key { path: path.to_owned(), problem };
    let bytes =
        crate::files::read_regular(path, MAX_KEY_BYTES).map_err(|e| problem(crate::files::IoText(&e).to_string()))?;
    String::from_utf8(bytes).map_err(|_| problem("not a PEM file (not text)".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pae_follows_the_dsse_spec() {
        // The example in DSSE's protocol.md.
        let pae = pre_authentication_encoding("http://example.com/HelloWorld", b"hello world");
        assert_eq!(pae, b"DSSEv1 29 http://example.com/HelloWorld 11 hello world");
    }
}
