//! The shape of an access token: `mct_<id>_<secret>`, a public id of 12 hex
//! digits (what `token list` shows and `token revoke` names) and 32 random
//! bytes of secret in unpadded base64url. Only the SHA-256 of the secret is
//! stored.

use base64::Engine as _;
use sha2::{Digest as _, Sha256};

const PREFIX: &str = "mct_";
const ID_LEN: usize = 12;

/// A token just made: the whole text (shown once) and its parts.
pub struct NewToken {
    pub text: String,
    pub id: String,
    pub secret_hash: String,
}

/// Makes a token from the system's random source.
pub fn generate() -> Result<NewToken, getrandom::Error> {
    let mut id = [0u8; ID_LEN / 2];
    let mut secret = [0u8; 32];
    getrandom::fill(&mut id)?;
    getrandom::fill(&mut secret)?;
    let id = hex::encode(id);
    let secret = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret);
    Ok(NewToken {
        text: format!("{PREFIX}{id}_{secret}"),
        secret_hash: hash_secret(&secret),
        id,
    })
}

/// `(id, secret)` of a token's text, if it has the shape of one.
pub fn split(text: &str) -> Option<(&str, &str)> {
    let rest = text.strip_prefix(PREFIX)?;
    let id = rest.get(..ID_LEN)?;
    let secret = rest.get(ID_LEN..)?.strip_prefix('_')?;
    (id.bytes().all(|b| b.is_ascii_hexdigit()) && !secret.is_empty()).then_some((id, secret))
}

/// Whether `text` looks like a token (a Basic password that is one).
pub fn is_token(text: &str) -> bool {
    split(text).is_some()
}

pub fn hash_secret(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_token_splits_into_its_id_and_hashed_secret() {
        let token = generate().unwrap();
        let (id, secret) = split(&token.text).unwrap();
        assert_eq!(id, token.id);
        assert_eq!(hash_secret(secret), token.secret_hash);
        assert!(split("mct_short").is_none());
        assert!(split("password").is_none());
    }
}
