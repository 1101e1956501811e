//! Secrets at rest: what the server must keep but an operator with SQL access (or a database
//! dump) must not read — today the HMAC keys of webhook subscriptions.
//!
//! A secret is sealed with XChaCha20-Poly1305 under a 256-bit key from the environment
//! (`OJS_SECRET_KEY`), with a random 192-bit nonce and, as associated data, what it belongs to
//! (a subscription's id), so a sealed value copied onto another row does not open. The stored
//! form names the key that sealed it: `v1:<key id>:<base64 of nonce and ciphertext>`, where the
//! key id is the first 8 bytes of a SHA-256 of the key (it tells keys apart, it reveals
//! nothing of them). Rotation: keys that are no longer current (`OJS_SECRET_KEY_PREVIOUS`)
//! still open what they sealed, and the server seals those values again under the current key
//! when it starts.

use base64::Engine as _;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use sha2::{Digest, Sha256};

/// The version prefix of a sealed value.
const VERSION: &str = "v1";
const NONCE_BYTES: usize = 24;

/// One key: its id and its cipher.
#[derive(Clone)]
struct Key {
    id: String,
    cipher: XChaCha20Poly1305,
}

impl Key {
    fn new(bytes: &[u8; 32]) -> Key {
        let digest = Sha256::new()
            .chain_update(b"ojsd secret key id\0")
            .chain_update(bytes)
            .finalize();
        Key {
            id: hex::encode(&digest[..8]),
            cipher: XChaCha20Poly1305::new(bytes.into()),
        }
    }
}

/// The keys secrets are sealed with: the current one, and earlier ones that still open what
/// they sealed.
#[derive(Clone)]
pub struct Keyring {
    current: Key,
    previous: Vec<Key>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyring")
            .field("current", &self.current.id)
            .field(
                "previous",
                &self.previous.iter().map(|k| &k.id).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// Why a stored value did not open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// Not in the sealed form (stored in clear before secrets were sealed).
    #[error("the value is not sealed")]
    NotSealed,
    /// Sealed under a key this server does not have.
    #[error("sealed under key {0}, which is neither OJS_SECRET_KEY nor in OJS_SECRET_KEY_PREVIOUS")]
    UnknownKey(String),
    /// The key is known but the value does not open with it (altered, or moved to another row).
    #[error("the sealed value does not open (altered, or not this row's)")]
    Corrupt,
}

/// Reads a key: 32 bytes as 64 hex digits or in base64 (standard or URL-safe, padded or not).
pub fn parse_key(text: &str) -> Result<[u8; 32], String> {
    let text = text.trim();
    let bytes = if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        hex::decode(text).map_err(|e| e.to_string())?
    } else {
        let engines = [
            &base64::engine::general_purpose::STANDARD,
            &base64::engine::general_purpose::STANDARD_NO_PAD,
            &base64::engine::general_purpose::URL_SAFE,
            &base64::engine::general_purpose::URL_SAFE_NO_PAD,
        ];
        engines
            .iter()
            .find_map(|e| e.decode(text).ok())
            .ok_or("a key is 32 bytes, written as 64 hex digits or in base64")?
    };
    <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| {
        format!(
            "a key is 32 bytes (256 bits), this one is {} bytes; make one with `ojsd secret-key`",
            bytes.len()
        )
    })
}

/// A new random key, as 64 hex digits.
pub fn generate_key() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}

impl Keyring {
    /// The keyring of `current` and `previous` (as [`parse_key`] reads them).
    pub fn new(current: &str, previous: &[String]) -> Result<Keyring, String> {
        let current = Key::new(&parse_key(current).map_err(|e| format!("OJS_SECRET_KEY: {e}"))?);
        let previous = previous
            .iter()
            .filter(|p| !p.trim().is_empty())
            .map(|p| {
                parse_key(p)
                    .map(|k| Key::new(&k))
                    .map_err(|e| format!("OJS_SECRET_KEY_PREVIOUS: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Keyring { current, previous })
    }

    /// The current key's id.
    pub fn current_id(&self) -> &str {
        &self.current.id
    }

    /// The earlier keys' ids.
    pub fn previous_ids(&self) -> impl Iterator<Item = &str> {
        self.previous.iter().map(|k| k.id.as_str())
    }

    /// `secret` sealed under the current key for `owner` (what it belongs to).
    pub fn seal(&self, secret: &str, owner: &str) -> String {
        let nonce: [u8; NONCE_BYTES] = rand::random();
        let sealed = self
            .current
            .cipher
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: secret.as_bytes(),
                    aad: owner.as_bytes(),
                },
            )
            .expect("XChaCha20-Poly1305 seals any message");
        let mut bytes = nonce.to_vec();
        bytes.extend_from_slice(&sealed);
        format!(
            "{VERSION}:{}:{}",
            self.current.id,
            base64::engine::general_purpose::STANDARD.encode(bytes)
        )
    }

    /// The secret `stored` (as [`Keyring::seal`] wrote it for `owner`).
    pub fn open(&self, stored: &str, owner: &str) -> Result<String, OpenError> {
        let (id, body) = split(stored).ok_or(OpenError::NotSealed)?;
        let key = std::iter::once(&self.current)
            .chain(&self.previous)
            .find(|k| k.id == id)
            .ok_or_else(|| OpenError::UnknownKey(id.to_owned()))?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(body)
            .map_err(|_| OpenError::Corrupt)?;
        if bytes.len() < NONCE_BYTES {
            return Err(OpenError::Corrupt);
        }
        let (nonce, sealed) = bytes.split_at(NONCE_BYTES);
        let opened = key
            .cipher
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: sealed,
                    aad: owner.as_bytes(),
                },
            )
            .map_err(|_| OpenError::Corrupt)?;
        String::from_utf8(opened).map_err(|_| OpenError::Corrupt)
    }

    /// Whether `stored` is sealed under the current key (nothing to do at a rotation).
    pub fn is_current(&self, stored: &str) -> bool {
        split(stored).is_some_and(|(id, _)| id == self.current.id)
    }
}

/// Whether `stored` is in the sealed form (under any key).
pub fn is_sealed(stored: &str) -> bool {
    split(stored).is_some()
}

/// The key id and the body of a sealed value.
fn split(stored: &str) -> Option<(&str, &str)> {
    let rest = stored.strip_prefix(VERSION)?.strip_prefix(':')?;
    let (id, body) = rest.split_once(':')?;
    (id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit())).then_some((id, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    const K1: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
    const K2: &str = "1f1e1d1c1b1a191817161514131211100f0e0d0c0b0a09080706050403020100";

    #[test]
    fn a_sealed_secret_opens_for_its_owner_only_and_never_shows_in_clear() {
        let ring = Keyring::new(K1, &[]).unwrap();
        let sealed = ring.seal("whsec_abc", "sub-1");
        assert!(!sealed.contains("whsec_abc"), "{sealed}");
        assert!(sealed.starts_with(&format!("v1:{}:", ring.current_id())));
        assert!(ring.is_current(&sealed));
        assert_eq!(ring.open(&sealed, "sub-1").unwrap(), "whsec_abc");
        // Another row's, or altered: does not open.
        assert_eq!(ring.open(&sealed, "sub-2"), Err(OpenError::Corrupt));
        let mut altered = sealed.clone();
        altered.pop();
        altered.push(if sealed.ends_with('A') { 'B' } else { 'A' });
        assert_eq!(ring.open(&altered, "sub-1"), Err(OpenError::Corrupt));
        // Two seals of one secret differ (random nonces).
        assert_ne!(ring.seal("whsec_abc", "sub-1"), sealed);
        assert_eq!(ring.open("whsec_abc", "sub-1"), Err(OpenError::NotSealed));
    }

    #[test]
    fn a_rotated_keyring_opens_what_the_old_key_sealed_and_seals_under_the_new_one() {
        let old = Keyring::new(K1, &[]).unwrap();
        let sealed = old.seal("s3cret", "sub");
        let rotated = Keyring::new(K2, &[K1.to_owned()]).unwrap();
        assert!(!rotated.is_current(&sealed));
        assert_eq!(rotated.open(&sealed, "sub").unwrap(), "s3cret");
        let again = rotated.seal("s3cret", "sub");
        assert!(rotated.is_current(&again));
        // Once the old key is gone, its values no longer open, and say why.
        let without = Keyring::new(K2, &[]).unwrap();
        assert_eq!(
            without.open(&sealed, "sub"),
            Err(OpenError::UnknownKey(old.current_id().to_owned()))
        );
        assert_ne!(old.current_id(), rotated.current_id());
    }

    #[test]
    fn keys_are_32_bytes_in_hex_or_base64() {
        let hex = parse_key(K1).unwrap();
        let b64 = base64::engine::general_purpose::STANDARD.encode(hex);
        assert_eq!(parse_key(&b64).unwrap(), hex);
        assert_eq!(parse_key(b64.trim_end_matches('=')).unwrap(), hex);
        assert!(parse_key("short").is_err());
        assert!(parse_key(&K1[..62]).is_err());
        assert!(parse_key(&generate_key()).is_ok());
        let ring = Keyring::new(K1, &[]).unwrap();
        assert!(!format!("{ring:?}").contains(K1));
    }
}
