//! `auth`: which requests need an API key, and the keys secrets are sealed with at rest.

use anyhow::bail;

use super::values::Redacted;
use crate::webhook::secret::Keyring;

#[derive(Debug, Clone, clap::Args)]
pub struct Auth {
    /// `keys`: requests need an API key (`Authorization: Bearer`) once any key exists, and
    /// always when listening beyond loopback, where the server refuses to start without a key;
    /// `disabled`: no key is checked (logged as a warning beyond loopback).
    #[arg(
        long = "auth",
        id = "auth",
        env = "OJS_AUTH",
        value_enum,
        default_value_t = crate::auth::AuthMode::Keys,
    )]
    pub mode: crate::auth::AuthMode,

    /// `/metrics` needs an admin key too (it is open by default, for scrapers).
    #[arg(long, env = "OJS_METRICS_AUTH", default_value_t = false)]
    pub metrics_auth: bool,

    /// The key secrets are sealed with at rest (webhook subscriptions' HMAC keys): 32 bytes as
    /// 64 hex digits or in base64 (`ojsd secret-key` prints a new one). Without it, webhook
    /// subscriptions cannot be created or given a new secret. Every replica needs the same.
    #[arg(long, env = "OJS_SECRET_KEY", hide_env_values = true)]
    pub secret_key: Option<Redacted>,

    /// Earlier secret keys (comma-separated), which still open what they sealed: a rotation
    /// moves the old key here and a new one into OJS_SECRET_KEY; each server seals the secrets
    /// again under the new key when it starts.
    #[arg(
        long,
        env = "OJS_SECRET_KEY_PREVIOUS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub secret_key_previous: Vec<Redacted>,
}

impl Default for Auth {
    fn default() -> Self {
        Auth {
            mode: crate::auth::AuthMode::Keys,
            metrics_auth: false,
            secret_key: None,
            secret_key_previous: Vec::new(),
        }
    }
}

impl Auth {
    /// The keyring of `OJS_SECRET_KEY` and `OJS_SECRET_KEY_PREVIOUS` (`None` without a key).
    pub fn secret_keyring(&self) -> anyhow::Result<Option<Keyring>> {
        let Some(current) = self.secret_key.as_ref().filter(|k| !k.0.trim().is_empty()) else {
            if !self.secret_key_previous.is_empty() {
                bail!("OJS_SECRET_KEY_PREVIOUS is set without OJS_SECRET_KEY");
            }
            return Ok(None);
        };
        let previous: Vec<String> = self
            .secret_key_previous
            .iter()
            .map(|k| k.0.clone())
            .collect();
        Keyring::new(&current.0, &previous)
            .map(Some)
            .map_err(|e| anyhow::anyhow!(e))
    }
}
