//! Bundles: `mirrorcache export` writes the cached entries an operator
//! selects into one file that `mirrorcache import` adds to another cache —
//! how a cache filled on a connected machine is carried to an offline one.
//!
//! A bundle is a tar stream compressed with zstd, in this order:
//! 1. [`MANIFEST`]: JSON ([`Manifest`]): every entry's row (remote, path,
//!    digest, size, content type, the mirror's validators, fetch time), the
//!    declared digests learned for the selected remotes, and each blob once
//!    with its size;
//! 2. [`SIGNATURE`] (when exported with `--sign`): the ed25519 signature of
//!    the manifest's bytes and the public key that made it;
//! 3. `advisories/<name>.zip`, the saved copy of each advisory feed (the
//!    manifest lists its name, sha256 and size);
//! 4. `blobs/<sha256>`, one file per digest, in the manifest's order.
//!
//! The manifest comes first so `import` checks the signature before it reads
//! a blob, then hashes every blob against its name while staging it in the
//! store's `tmp/`; only when every blob is right does it commit anything
//! (see [`import`]). Keys are PKCS#8 PEM files, as `openssl genpkey
//! -algorithm ed25519` writes them (`openssl pkey -pubout` for the public
//! half).

pub mod export;
pub mod import;
pub mod rows;

use std::path::Path;

use anyhow::{bail, Context};
use ed25519_dalek::pkcs8::{DecodePrivateKey, DecodePublicKey};
use ed25519_dalek::{Signer, SigningKey, Verifier, VerifyingKey};
use serde::{Deserialize, Serialize};

use rows::{BundledDeclared, BundledEntry};

/// The manifest's name in the archive.
pub const MANIFEST: &str = "mirrorcache-bundle.json";
/// The signature's name in the archive.
pub const SIGNATURE: &str = "mirrorcache-bundle.sig";
/// Where blobs are in the archive: `blobs/<sha256 hex>`.
pub const BLOBS: &str = "blobs/";
/// Where advisory feeds are in the archive: `advisories/<name>.zip`.
pub const ADVISORIES: &str = "advisories/";
/// The manifest's `format`; a bundle of another format is refused.
pub const FORMAT: u32 = 1;

/// What a bundle holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    /// When it was exported (unix ms).
    pub created_at_ms: i64,
    pub entries: Vec<BundledEntry>,
    pub declared: Vec<BundledDeclared>,
    /// Each digest the entries reference, once, in the archive's order.
    pub blobs: Vec<BundledBlob>,
    /// The advisory feeds carried (OSV zips), in the archive's order.
    #[serde(default)]
    pub advisories: Vec<BundledFeed>,
}

/// One advisory feed's saved copy in a bundle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BundledFeed {
    pub name: String,
    /// sha256 (hex) of the zip.
    pub digest: String,
    pub size: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BundledBlob {
    pub digest: String,
    pub size: u64,
}

impl Manifest {
    /// Total bytes of the blobs.
    pub fn blob_bytes(&self) -> u64 {
        self.blobs.iter().map(|b| b.size).sum()
    }
}

/// The signature file: which key signed, and the signature of the
/// manifest's bytes, both hex.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SignatureFile {
    pub algorithm: String,
    pub public_key: String,
    pub signature: String,
}

/// Reads an ed25519 private key (PKCS#8 PEM). Never echoes the file.
pub fn signing_key(path: &Path) -> anyhow::Result<SigningKey> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the signing key {}", path.display()))?;
    SigningKey::from_pkcs8_pem(&text).map_err(|_| {
        anyhow::anyhow!(
            "{}: not an ed25519 private key in PKCS#8 PEM (make one with `openssl genpkey -algorithm ed25519`)",
            path.display()
        )
    })
}

/// Reads an ed25519 public key (SubjectPublicKeyInfo PEM).
pub fn verifying_key(path: &Path) -> anyhow::Result<VerifyingKey> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the verify key {}", path.display()))?;
    VerifyingKey::from_public_key_pem(&text).map_err(|_| {
        anyhow::anyhow!(
            "{}: not an ed25519 public key in PEM (`openssl pkey -in KEY -pubout` writes one)",
            path.display()
        )
    })
}

/// Signs the manifest's bytes.
pub fn sign(key: &SigningKey, manifest: &[u8]) -> SignatureFile {
    SignatureFile {
        algorithm: "ed25519".into(),
        public_key: hex::encode(key.verifying_key().as_bytes()),
        signature: hex::encode(key.sign(manifest).to_bytes()),
    }
}

/// Checks `signature` over `manifest`: made by `trusted` when given (the
/// operator's `--verify-key`), else by the key the file names (which proves
/// the bundle was not damaged, not who made it).
pub fn check_signature(
    manifest: &[u8],
    signature: Option<&SignatureFile>,
    trusted: Option<&VerifyingKey>,
) -> anyhow::Result<()> {
    let Some(signature) = signature else {
        if trusted.is_some() {
            bail!("the bundle is not signed, and --verify-key asks for a signature");
        }
        return Ok(());
    };
    if signature.algorithm != "ed25519" {
        bail!(
            "bad signature: algorithm {:?} is not ed25519",
            signature.algorithm
        );
    }
    let named = <[u8; 32]>::try_from(hex::decode(&signature.public_key).unwrap_or_default())
        .ok()
        .and_then(|bytes| VerifyingKey::from_bytes(&bytes).ok())
        .ok_or_else(|| anyhow::anyhow!("bad signature: the public key is malformed"))?;
    if let Some(trusted) = trusted {
        if trusted != &named {
            bail!(
                "bad signature: signed by key {}, not by the --verify-key {}",
                signature.public_key,
                hex::encode(trusted.as_bytes())
            );
        }
    }
    let bytes = <[u8; 64]>::try_from(hex::decode(&signature.signature).unwrap_or_default())
        .map_err(|_| anyhow::anyhow!("bad signature: malformed"))?;
    named
        .verify(manifest, &ed25519_dalek::Signature::from_bytes(&bytes))
        .map_err(|_| anyhow::anyhow!("bad signature: the manifest does not match it"))
}

/// `REMOTE[/PREFIX]` as export's selection says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    pub remote: String,
    pub prefix: String,
}

impl Selection {
    pub fn parse(text: &str) -> Selection {
        let (remote, prefix) = text.split_once('/').unwrap_or((text, ""));
        Selection {
            remote: remote.to_string(),
            prefix: prefix.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_holds_only_for_its_manifest_and_its_key() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let other = SigningKey::from_bytes(&[8; 32]);
        let signature = sign(&key, b"manifest");
        let trusted = key.verifying_key();
        check_signature(b"manifest", Some(&signature), Some(&trusted)).unwrap();
        check_signature(b"manifest", Some(&signature), None).unwrap();
        let changed = check_signature(b"manifesT", Some(&signature), Some(&trusted));
        assert!(changed
            .unwrap_err()
            .to_string()
            .starts_with("bad signature"));
        let wrong_key =
            check_signature(b"manifest", Some(&signature), Some(&other.verifying_key()));
        assert!(wrong_key
            .unwrap_err()
            .to_string()
            .contains("not by the --verify-key"));
        assert!(check_signature(b"manifest", None, Some(&trusted)).is_err());
        check_signature(b"manifest", None, None).unwrap();
    }

    #[test]
    fn selections_split_at_the_first_slash() {
        assert_eq!(
            Selection::parse("npm/@scope/"),
            Selection {
                remote: "npm".into(),
                prefix: "@scope/".into()
            }
        );
        assert_eq!(Selection::parse("pypi").prefix, "");
    }
}
