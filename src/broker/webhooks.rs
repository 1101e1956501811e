//! Webhooks: subscriptions (see [`crate::webhook`] for the rules) and their delivery from the
//! event log.
//!
//! The leader's [`WebhookDeliverer`] (a maintenance service) looks every
//! [`DELIVERY_INTERVAL`] for active subscriptions that are due, at most
//! [`super::WebhookSettings::concurrency`] at once. For each it reads the events after its cursor that
//! match its filter (the log's delivery order, `store::event`), POSTs them one at a time, and
//! moves the cursor after each 2xx; with nothing left it moves the cursor to the newest event,
//! so its next read starts there. A failure stops that subscription's pass: the same event is
//! tried again after the backoff of [`crate::webhook::RETRY_DELAYS`], and after the last one the
//! subscription is paused, saying why. Delivery is at least once (a delivery whose answer is
//! lost, or a leader that dies after sending and before moving the cursor, sends that event
//! again) and in order per subscription; a receiver deduplicates by `X-OJS-Delivery-ID`.
//!
//! Nothing here runs on a request's path: enqueues, FETCHes and ACKs only write events, as
//! they always do.

use std::time::Duration;

use crate::db::Db;
use chrono::{DateTime, Utc};
use serde_json::json;
use tokio::task::JoinSet;
use uuid::Uuid;

use super::Broker;
pub use super::webhook_sender::Attempt;
use super::webhook_sender::Sender;
use crate::error::{Error, Result};
use crate::events::{EventKey, WireEvent};
use crate::maintenance::{Pass, Service};
use crate::store;
use crate::store::event::{EventFilter, EventRow, Position};
use crate::store::webhook::{NewWebhook, WebhookChange, WebhookRow};
use crate::webhook::secret::Keyring;
use crate::webhook::{self, Filters};

/// How often the deliverer looks for due subscriptions when it found nothing to do.
pub const DELIVERY_INTERVAL: Duration = Duration::from_millis(250);
/// Events read per subscription at a time.
const EVENTS_PER_READ: i64 = 100;
/// Most events one subscription is sent in one pass (then the others get their turn).
const EVENTS_PER_PASS: usize = 1_000;
/// Subscriptions looked at per pass.
const SUBSCRIPTIONS_PER_PASS: i64 = 256;

/// A subscription to create.
#[derive(Debug, Clone)]
pub struct WebhookInput {
    pub url: String,
    pub events: Vec<String>,
    /// `None`: one is generated (and shown once, in the answer).
    pub secret: Option<String>,
    pub metadata: serde_json::Value,
    pub active: bool,
}

impl Broker {
    /// The keys secrets are sealed with: 503 without `OJS_SECRET_KEY` (a secret is never kept
    /// in clear).
    fn secret_keys(&self) -> Result<&Keyring> {
        self.settings
            .webhooks
            .keys
            .as_deref()
            .ok_or(Error::SecretKeyMissing)
    }

    /// Creates a subscription, delivered the events that come after it. Returns it and its
    /// secret in clear (the one answer that shows it; the row holds it sealed).
    pub async fn create_webhook(&self, input: WebhookInput) -> Result<(WebhookRow, String)> {
        let keys = self.secret_keys()?;
        let secret = input
            .secret
            .unwrap_or_else(|| format!("whsec_{}", hex::encode(rand::random::<[u8; 32]>())));
        let from = store::event::head(&self.db)
            .await?
            .unwrap_or(Position { xid: 0, seq: 0 });
        let id = Uuid::now_v7();
        let sealed = keys.seal(&secret, &id.to_string());
        let row = store::webhook::create(
            &self.db,
            &NewWebhook {
                id,
                url: &input.url,
                events: &input.events,
                secret: &sealed,
                metadata: &input.metadata,
                active: input.active,
                from,
            },
        )
        .await?;
        Ok((row, secret))
    }

    /// Seals again under the current key every subscription secret that is not (sealed under
    /// an earlier key, or stored in clear by an earlier release), and says how many there
    /// were; a secret that opens with none of the keys is left as it is and logged. Each row
    /// changes only if no one changed it meanwhile, so replicas starting together are safe.
    pub async fn reseal_webhook_secrets(&self) -> Result<usize> {
        let Some(keys) = self.settings.webhooks.keys.as_deref() else {
            let clear = store::webhook::secrets(&self.db)
                .await?
                .into_iter()
                .filter(|(_, stored)| !crate::webhook::secret::is_sealed(stored))
                .count();
            if clear > 0 {
                tracing::warn!(
                    subscriptions = clear,
                    "webhook secrets are stored in clear (from an earlier release): set \
                     OJS_SECRET_KEY and restart to seal them"
                );
            }
            return Ok(0);
        };
        let mut resealed = 0;
        for (id, stored) in store::webhook::secrets(&self.db).await? {
            if keys.is_current(&stored) {
                continue;
            }
            let owner = id.to_string();
            let secret = match keys.open(&stored, &owner) {
                Ok(secret) => secret,
                Err(crate::webhook::secret::OpenError::NotSealed) => stored.clone(),
                Err(e) => {
                    tracing::warn!(subscription = %id, error = %e, "a webhook secret cannot be opened; its deliveries will fail until its key is in OJS_SECRET_KEY_PREVIOUS or it is given a new secret");
                    continue;
                }
            };
            if store::webhook::replace_secret(&self.db, id, &stored, &keys.seal(&secret, &owner))
                .await?
            {
                resealed += 1;
            }
        }
        Ok(resealed)
    }

    pub async fn webhooks(&self, limit: i64, offset: i64) -> Result<(Vec<WebhookRow>, i64)> {
        Ok(store::webhook::list(&self.db, limit, offset).await?)
    }

    pub async fn webhook(&self, id: Uuid) -> Result<WebhookRow> {
        store::webhook::get(&self.db, id)
            .await?
            .ok_or(Error::WebhookNotFound(id))
    }

    /// Changes a subscription; a new secret is sealed (503 without `OJS_SECRET_KEY`).
    pub async fn update_webhook(&self, id: Uuid, change: &WebhookChange<'_>) -> Result<WebhookRow> {
        let sealed = match change.secret {
            Some(secret) => Some(self.secret_keys()?.seal(secret, &id.to_string())),
            None => None,
        };
        let change = WebhookChange {
            secret: sealed.as_deref(),
            ..change.clone()
        };
        store::webhook::update(&self.db, id, &change)
            .await?
            .ok_or(Error::WebhookNotFound(id))
    }

    pub async fn delete_webhook(&self, id: Uuid) -> Result<()> {
        match store::webhook::delete(&self.db, id).await? {
            true => Ok(()),
            false => Err(Error::WebhookNotFound(id)),
        }
    }

    /// Sends subscription `id` a `webhook.test` event now (signed as any delivery; not
    /// recorded, and whatever it answers changes nothing).
    pub async fn test_webhook(&self, id: Uuid) -> Result<Attempt> {
        let row = self.webhook(id).await?;
        let delivery_id = Uuid::now_v7();
        let body = json!({
            "specversion": crate::events::EVENT_SPEC_VERSION,
            "id": format!("evt_{delivery_id}"),
            "type": "webhook.test",
            "source": "ojs://ojsd/webhooks",
            "time": crate::wire::timestamp::format(Utc::now()),
            "subject": row.id.to_string(),
            "data": {"subscription_id": row.id.to_string()},
        });
        let body = serde_json::to_vec(&body).map_err(|e| Error::Unsupported(e.to_string()))?;
        Ok(self
            .webhook_sender
            .post(&row, "webhook.test", &delivery_id.to_string(), body)
            .await)
    }
}

/// The leader's deliverer: see the module documentation.
pub struct WebhookDeliverer {
    db: Db,
    sender: Sender,
    concurrency: usize,
}

impl WebhookDeliverer {
    pub fn new(broker: &Broker) -> WebhookDeliverer {
        WebhookDeliverer {
            db: broker.db.clone(),
            sender: broker.webhook_sender.clone(),
            concurrency: broker.settings.webhooks.concurrency.max(1),
        }
    }
}

impl Service for WebhookDeliverer {
    fn name(&self) -> &'static str {
        "webhook deliverer"
    }

    fn interval(&self) -> Duration {
        DELIVERY_INTERVAL
    }

    async fn run_once(&self, _now: Option<DateTime<Utc>>) -> Result<Pass, sqlx::Error> {
        let due = store::webhook::due(&self.db, SUBSCRIPTIONS_PER_PASS).await?;
        let mut pass = Pass {
            processed: 0,
            more: due.len() as i64 == SUBSCRIPTIONS_PER_PASS,
        };
        // A subscription whose cursor is at the newest event has nothing to read: an idle
        // server costs two statements a pass, however many subscriptions there are.
        let Some(head) = store::event::head(&self.db).await? else {
            return Ok(pass);
        };
        let due: Vec<WebhookRow> = due.into_iter().filter(|s| s.cursor() < head).collect();
        let mut tasks = JoinSet::new();
        let mut due = due.into_iter();
        loop {
            while tasks.len() < self.concurrency {
                let Some(subscription) = due.next() else {
                    break;
                };
                let (db, sender) = (self.db.clone(), self.sender.clone());
                tasks.spawn(async move { deliver(&db, &sender, subscription).await });
            }
            let Some(done) = tasks.join_next().await else {
                break;
            };
            match done {
                Ok(Ok((sent, more))) => {
                    pass.processed += sent;
                    pass.more |= more;
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "webhook delivery pass failed"),
                Err(e) => tracing::error!(error = %e, "webhook delivery task panicked"),
            }
        }
        Ok(pass)
    }
}

/// Delivers what is due to one subscription: returns the events sent and whether it stopped
/// with more waiting.
async fn deliver(
    db: &Db,
    sender: &Sender,
    subscription: WebhookRow,
) -> Result<(u64, bool), sqlx::Error> {
    let filters = Filters::of(&subscription.events);
    let filter = EventFilter {
        types: filters.types.clone(),
        type_prefixes: if filters.all {
            Vec::new()
        } else {
            filters.prefixes.clone()
        },
        ..EventFilter::default()
    };
    let mut cursor = subscription.cursor();
    let mut sent = 0u64;
    loop {
        let head = store::event::head(db).await?;
        let events: Vec<EventRow> =
            store::event::list(db, &filter, Some(cursor), EVENTS_PER_READ).await?;
        let exhausted = (events.len() as i64) < EVENTS_PER_READ;
        for event in &events {
            let key = EventKey::of(event);
            let body = match serde_json::to_vec(&WireEvent::with_timestamp(event)) {
                Ok(body) => body,
                Err(e) => {
                    tracing::error!(error = %e, event = %key.to_id(), "an event could not be rendered; passed over");
                    if !store::webhook::advance(
                        db,
                        subscription.id,
                        cursor,
                        event.position,
                        0,
                        None,
                    )
                    .await?
                    {
                        return Ok((sent, false));
                    }
                    cursor = event.position;
                    continue;
                }
            };
            let delivery_id = format!("{}:{}", subscription.id, key.to_id());
            let attempt = sender
                .post(&subscription, &event.r#type, &delivery_id, body)
                .await;
            let status = attempt.status.map(i32::from);
            if let Some(error) = attempt.error {
                let failed = u32::try_from(subscription.attempt).unwrap_or(0) + 1;
                let retry_at = webhook::retry_delay(failed)
                    .and_then(|d| chrono::Duration::from_std(d).ok())
                    .map(|d| Utc::now() + d);
                if retry_at.is_none() {
                    tracing::warn!(subscription = %subscription.id, url = %subscription.url, error = %error, "webhook subscription paused after its last retry");
                }
                store::webhook::failed(db, subscription.id, status, &error, retry_at).await?;
                return Ok((sent, false));
            }
            if !store::webhook::advance(db, subscription.id, cursor, event.position, 1, status)
                .await?
            {
                // Changed meanwhile (deleted, or another deliverer): stop here.
                return Ok((sent, false));
            }
            cursor = event.position;
            sent += 1;
            if sent as usize >= EVENTS_PER_PASS {
                return Ok((sent, true));
            }
        }
        if exhausted {
            // Nothing more matches up to the newest event: start there next time.
            if let Some(head) = head
                && head > cursor
            {
                store::webhook::advance(db, subscription.id, cursor, head, 0, None).await?;
            }
            return Ok((sent, false));
        }
    }
}
