//! `ojs_webhook`: webhook subscriptions and their delivery cursors (migration V25).

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use uuid::Uuid;

use super::event::Position;

/// A subscription as stored.
#[derive(Debug, Clone)]
pub struct WebhookRow {
    pub id: Uuid,
    pub url: String,
    pub events: Vec<String>,
    pub secret: String,
    pub metadata: serde_json::Value,
    pub active: bool,
    pub paused_reason: Option<String>,
    pub paused_at: Option<DateTime<Utc>>,
    pub cursor_xid: i64,
    pub cursor_seq: i64,
    pub attempt: i32,
    pub next_attempt_at: DateTime<Utc>,
    pub failure_count: i32,
    pub delivered: i64,
    pub last_delivery_at: Option<DateTime<Utc>>,
    pub last_delivery_status: Option<i32>,
    pub last_error: Option<String>,
    pub gap_at: Option<DateTime<Utc>>,
    pub gap_events: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl WebhookRow {
    /// The last event delivered or passed over.
    pub fn cursor(&self) -> Position {
        Position {
            xid: self.cursor_xid,
            seq: self.cursor_seq,
        }
    }
}

/// A subscription to create; its cursor starts at the newest deliverable event (`from`), so
/// it is delivered the events that come after it.
#[derive(Debug, Clone)]
pub struct NewWebhook<'a> {
    pub id: Uuid,
    pub url: &'a str,
    pub events: &'a [String],
    pub secret: &'a str,
    pub metadata: &'a serde_json::Value,
    pub active: bool,
    pub from: Position,
}

pub async fn create(
    db: impl PgExecutor<'_>,
    w: &NewWebhook<'_>,
) -> Result<WebhookRow, sqlx::Error> {
    sqlx::query_as!(
        WebhookRow,
        r#"
        insert into ojs_webhook (id, url, events, secret, metadata, active, cursor_xid, cursor_seq,
                                 paused_reason, paused_at)
        values ($1, $2, $3, $4, $5, $6, $7, $8,
                case when not $6 then 'created paused' end, case when not $6 then now() end)
        returning id, url, events, secret, metadata, active, paused_reason, paused_at, cursor_xid, cursor_seq,
               attempt, next_attempt_at, failure_count, delivered, last_delivery_at,
               last_delivery_status, last_error, gap_at, gap_events, created_at, updated_at
        "#,
        w.id,
        w.url,
        w.events,
        w.secret,
        w.metadata,
        w.active,
        w.from.xid,
        w.from.seq,
    )
    .fetch_one(db)
    .await
}

/// Subscriptions, oldest first, `limit` from `offset`, with how many there are.
pub async fn list(
    db: impl PgExecutor<'_> + Copy,
    limit: i64,
    offset: i64,
) -> Result<(Vec<WebhookRow>, i64), sqlx::Error> {
    let rows = sqlx::query_as!(
        WebhookRow,
        r#"
        select id, url, events, secret, metadata, active, paused_reason, paused_at, cursor_xid, cursor_seq,
               attempt, next_attempt_at, failure_count, delivered, last_delivery_at,
               last_delivery_status, last_error, gap_at, gap_events, created_at, updated_at
          from ojs_webhook order by created_at, id limit $1 offset $2
        "#,
        limit,
        offset,
    )
    .fetch_all(db)
    .await?;
    let total = sqlx::query_scalar!(r#"select count(*) as "n!" from ojs_webhook"#)
        .fetch_one(db)
        .await?;
    Ok((rows, total))
}

pub async fn get(db: impl PgExecutor<'_>, id: Uuid) -> Result<Option<WebhookRow>, sqlx::Error> {
    sqlx::query_as!(
        WebhookRow,
        r#"
        select id, url, events, secret, metadata, active, paused_reason, paused_at, cursor_xid, cursor_seq,
               attempt, next_attempt_at, failure_count, delivered, last_delivery_at,
               last_delivery_status, last_error, gap_at, gap_events, created_at, updated_at
          from ojs_webhook where id = $1
        "#,
        id
    )
        .fetch_optional(db)
        .await
}

/// What an operator changes (`None`: unchanged).
#[derive(Debug, Clone, Default)]
pub struct WebhookChange<'a> {
    pub url: Option<&'a str>,
    pub events: Option<&'a [String]>,
    pub secret: Option<&'a str>,
    pub metadata: Option<&'a serde_json::Value>,
    /// Turned on (resumes from where it stopped, retried at once) or off (paused by the
    /// operator).
    pub active: Option<bool>,
}

pub async fn update(
    db: impl PgExecutor<'_>,
    id: Uuid,
    c: &WebhookChange<'_>,
) -> Result<Option<WebhookRow>, sqlx::Error> {
    sqlx::query_as!(
        WebhookRow,
        r#"
        update ojs_webhook w
           set url = coalesce($2, w.url),
               events = coalesce($3, w.events),
               secret = coalesce($4, w.secret),
               metadata = coalesce($5, w.metadata),
               active = coalesce($6, w.active),
               paused_reason = case when $6 is null then w.paused_reason
                                    when $6 then null
                                    when w.active then 'paused by an operator'
                                    else w.paused_reason end,
               paused_at = case when $6 is null then w.paused_at
                                when $6 then null
                                when w.active then now()
                                else w.paused_at end,
               -- Turned on again: the next event is tried at once, its failures forgotten.
               attempt = case when $6 and not w.active then 0 else w.attempt end,
               next_attempt_at = case when $6 and not w.active then now() else w.next_attempt_at end,
               updated_at = now()
         where w.id = $1
        returning w.id, w.url, w.events, w.secret, w.metadata, w.active, w.paused_reason,
                  w.paused_at, w.cursor_xid, w.cursor_seq, w.attempt, w.next_attempt_at,
                  w.failure_count, w.delivered, w.last_delivery_at, w.last_delivery_status,
                  w.last_error, w.gap_at, w.gap_events, w.created_at, w.updated_at
        "#,
        id,
        c.url,
        c.events,
        c.secret,
        c.metadata,
        c.active,
    )
    .fetch_optional(db)
    .await
}

/// Every subscription's id and stored secret.
pub async fn secrets(db: impl PgExecutor<'_>) -> Result<Vec<(Uuid, String)>, sqlx::Error> {
    let rows = sqlx::query!("select id, secret from ojs_webhook order by id")
        .fetch_all(db)
        .await?;
    Ok(rows.into_iter().map(|r| (r.id, r.secret)).collect())
}

/// Replaces a subscription's stored secret `old` with `new` (sealed again); `false` when it
/// changed meanwhile (or the subscription is gone).
pub async fn replace_secret(
    db: impl PgExecutor<'_>,
    id: Uuid,
    old: &str,
    new: &str,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query!(
        "update ojs_webhook set secret = $3 where id = $1 and secret = $2",
        id,
        old,
        new
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected() > 0)
}

pub async fn delete(db: impl PgExecutor<'_>, id: Uuid) -> Result<bool, sqlx::Error> {
    let done = sqlx::query!("delete from ojs_webhook where id = $1", id)
        .execute(db)
        .await?;
    Ok(done.rows_affected() > 0)
}

/// Every subscription (test hook reset only).
pub async fn delete_all(db: impl PgExecutor<'_>) -> Result<(), sqlx::Error> {
    sqlx::query!("delete from ojs_webhook").execute(db).await?;
    Ok(())
}

/// Active subscriptions due for delivery, the longest waiting first.
pub async fn due(db: impl PgExecutor<'_>, limit: i64) -> Result<Vec<WebhookRow>, sqlx::Error> {
    sqlx::query_as!(
        WebhookRow,
        r#"
        select id, url, events, secret, metadata, active, paused_reason, paused_at, cursor_xid, cursor_seq,
               attempt, next_attempt_at, failure_count, delivered, last_delivery_at,
               last_delivery_status, last_error, gap_at, gap_events, created_at, updated_at
          from ojs_webhook
         where active and next_attempt_at <= now()
         order by next_attempt_at
         limit $1
        "#,
        limit
    )
    .fetch_all(db)
    .await
}

/// Moves the cursor from `from` to `to` (only forward, and only if no one moved it meanwhile):
/// `delivered` events were delivered, with `status` for the last. Clears the failure state.
pub async fn advance(
    db: impl PgExecutor<'_>,
    id: Uuid,
    from: Position,
    to: Position,
    delivered: i64,
    status: Option<i32>,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query!(
        r#"
        update ojs_webhook
           set cursor_xid = $4, cursor_seq = $5,
               delivered = delivered + $6,
               attempt = 0, failure_count = 0, last_error = null,
               last_delivery_at = case when $6 > 0 then now() else last_delivery_at end,
               last_delivery_status = case when $6 > 0 then $7 else last_delivery_status end
         where id = $1 and cursor_xid = $2 and cursor_seq = $3
           and (cursor_xid, cursor_seq) < ($4, $5)
        "#,
        id,
        from.xid,
        from.seq,
        to.xid,
        to.seq,
        delivered,
        status,
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected() > 0)
}

/// Records a failed attempt at the event after the cursor: tried again at `retry_at`, or,
/// when `None`, the subscription is paused with `error` as the reason.
pub async fn failed(
    db: impl PgExecutor<'_>,
    id: Uuid,
    status: Option<i32>,
    error: &str,
    retry_at: Option<DateTime<Utc>>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"
        update ojs_webhook
           set attempt = attempt + 1,
               failure_count = failure_count + 1,
               last_delivery_at = now(),
               last_delivery_status = $2,
               last_error = $3,
               next_attempt_at = coalesce($4, next_attempt_at),
               -- Paused by an operator while the attempt was on its way: stays paused, as is.
               active = active and $4 is not null,
               paused_reason = case when not active then paused_reason
                                    when $4 is null
                                    then 'paused after ' || (attempt + 1) || ' failed attempts: ' || $3
                               end,
               paused_at = case when not active then paused_at when $4 is null then now() end
         where id = $1
        "#,
        id,
        status,
        error,
        retry_at,
    )
    .execute(db)
    .await?;
    Ok(())
}
