//! The HTTP side of webhook delivery: the [`Sender`] (one client whose resolver refuses the
//! addresses [`WebhookSettings`] do not allow) and the [`Attempt`] one POST makes. The
//! subscriptions and the leader's deliverer are in `webhooks.rs`.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;

use crate::store::webhook::WebhookRow;
use crate::webhook;
use crate::webhook::secret::Keyring;

/// Most bytes of a receiver's answer kept as the error.
const MAX_ERROR_CHARS: usize = 300;

/// Delivery settings.
#[derive(Debug, Clone)]
pub struct WebhookSettings {
    /// Deliveries may reach private, loopback and link-local addresses
    /// (`OJS_WEBHOOK_ALLOW_PRIVATE`).
    pub allow_private: bool,
    /// How long a receiver has to answer one delivery.
    pub timeout: Duration,
    /// Subscriptions delivered to at once.
    pub concurrency: usize,
    /// The keys subscription secrets are sealed with (`OJS_SECRET_KEY`); without them no
    /// subscription can be created or given a new secret.
    pub keys: Option<Arc<Keyring>>,
}

impl Default for WebhookSettings {
    fn default() -> Self {
        WebhookSettings {
            allow_private: false,
            timeout: Duration::from_secs(10),
            concurrency: 8,
            keys: None,
        }
    }
}

/// What one POST of an event did.
#[derive(Debug, Clone)]
pub struct Attempt {
    /// The receiver's status, when it answered.
    pub status: Option<u16>,
    pub elapsed: Duration,
    /// Why it failed (`None`: a 2xx).
    pub error: Option<String>,
    /// The start of the receiver's answer.
    pub body: Option<String>,
}

/// The HTTP side of a delivery: one client, whose resolver refuses addresses the settings do
/// not allow.
#[derive(Debug, Clone)]
pub struct Sender {
    client: reqwest::Client,
    settings: WebhookSettings,
}

impl Sender {
    pub fn new(settings: WebhookSettings) -> Sender {
        // HTTPS on ring, as `app::install_tls` installs it (kept if one is installed already;
        // the broker cannot call into `app`).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .user_agent(concat!("ojsd/", env!("CARGO_PKG_VERSION"), " (webhooks)"))
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout.min(Duration::from_secs(5)))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .pool_max_idle_per_host(2)
            .dns_resolver(Arc::new(GuardedResolver {
                allow_private: settings.allow_private,
            }))
            .build()
            .unwrap_or_else(|e| {
                tracing::error!(error = %e, "webhook client could not be built; deliveries will fail");
                reqwest::Client::new()
            });
        Sender { client, settings }
    }

    /// POSTs `body` (an event) to the subscription's URL, signed.
    pub async fn post(
        &self,
        to: &WebhookRow,
        event_type: &str,
        delivery_id: &str,
        body: Vec<u8>,
    ) -> Attempt {
        let started = Instant::now();
        let fail = |error: String| Attempt {
            status: None,
            elapsed: started.elapsed(),
            error: Some(error),
            body: None,
        };
        // A URL naming an address (not a name) never reaches the resolver: checked here.
        let Ok(url) = reqwest::Url::parse(&to.url) else {
            return fail("the URL is invalid".to_owned());
        };
        if let Some(ip) = literal_ip(&url)
            && !self.settings.allow_private
            && !webhook::is_public(ip)
        {
            return fail(refusal(&ip));
        }
        // Sealed at rest: opened for this delivery only. A secret stored in clear by an
        // earlier release (sealed at the next start with a key) is used as it is.
        let secret = match self.settings.keys.as_deref() {
            Some(keys) => match keys.open(&to.secret, &to.id.to_string()) {
                Ok(secret) => secret,
                Err(crate::webhook::secret::OpenError::NotSealed) => to.secret.clone(),
                Err(e) => return fail(format!("the subscription's secret cannot be opened: {e}")),
            },
            None if crate::webhook::secret::is_sealed(&to.secret) => {
                return fail(
                    "the subscription's secret is sealed and this server has no OJS_SECRET_KEY"
                        .to_owned(),
                );
            }
            None => to.secret.clone(),
        };
        let timestamp = Utc::now().timestamp();
        let signature = webhook::signature(&secret, timestamp, &body);
        let sent = self
            .client
            .post(url)
            .header("content-type", "application/json")
            .header("x-ojs-event-type", event_type)
            .header("x-ojs-delivery-id", delivery_id)
            .header("x-ojs-subscription-id", to.id.to_string())
            .header("x-ojs-timestamp", timestamp.to_string())
            .header("x-ojs-signature", signature)
            .body(body)
            .send()
            .await;
        match sent {
            Err(e) => fail(describe(&e)),
            Ok(response) => {
                let status = response.status();
                let text = response.text().await.unwrap_or_default();
                let excerpt = clip(&text);
                Attempt {
                    status: Some(status.as_u16()),
                    elapsed: started.elapsed(),
                    error: (!status.is_success()).then(|| {
                        format!(
                            "the receiver answered {status}{}",
                            match excerpt.is_empty() {
                                true => String::new(),
                                false => format!(": {excerpt}"),
                            }
                        )
                    }),
                    body: Some(excerpt),
                }
            }
        }
    }
}

fn literal_ip(url: &reqwest::Url) -> Option<IpAddr> {
    match url.host()? {
        url::Host::Ipv4(v4) => Some(IpAddr::V4(v4)),
        url::Host::Ipv6(v6) => Some(IpAddr::V6(v6)),
        url::Host::Domain(_) => None,
    }
}

fn refusal(ip: &IpAddr) -> String {
    format!(
        "refused: {ip} is not a public address (set OJS_WEBHOOK_ALLOW_PRIVATE=true to deliver to private, loopback and link-local addresses)"
    )
}

/// An error with its causes (reqwest's own message omits them).
fn describe(e: &reqwest::Error) -> String {
    let mut message = if e.is_timeout() {
        "the receiver did not answer in time".to_owned()
    } else if e.is_connect() {
        "could not connect".to_owned()
    } else {
        "the request failed".to_owned()
    };
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    clip(&message)
}

fn clip(text: &str) -> String {
    match text.char_indices().nth(MAX_ERROR_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// Resolves names like the system, and refuses every connection to an address the settings
/// do not allow — checked on the addresses actually connected to, so a name that resolves
/// elsewhere a moment later (DNS rebinding) does not pass.
struct GuardedResolver {
    allow_private: bool,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allow_private = self.allow_private;
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if !allow_private
                && let Some(private) = addrs.iter().find(|a| !webhook::is_public(a.ip()))
            {
                return Err(format!("{host}: {}", refusal(&private.ip())).into());
            }
            let addrs: reqwest::dns::Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}
