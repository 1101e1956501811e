//! Statements on `ojs_leader`: the maintenance lease.
//!
//! Each is one statement scoped to the caller's term, so a stale holder can neither extend nor
//! end a lease that has since changed hands. Times are the database clock's.

use std::time::Duration;

use crate::wire::duration::millis;
use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

/// Name of the lease that carries the maintenance services.
pub const MAINTENANCE: &str = "maintenance";

/// NOTIFY channel on which a resigning leader tells followers to elect at once.
pub const RESIGNED_CHANNEL: &str = "ojs_leader_resigned";

/// The outcome of an election attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Election {
    /// The caller holds the lease for `term`.
    Elected { term: i64 },
    /// Someone else holds it; it runs out in `remaining` unless renewed.
    Held {
        leader_id: String,
        remaining: Duration,
    },
}

/// Elect: takes the lease for `leader_id` for `ttl`, starting a new term, if nobody holds it
/// (no row yet, or the holder's lease ran out or was resigned).
pub async fn elect(
    db: impl PgExecutor<'_>,
    leader_id: &str,
    ttl: Duration,
) -> Result<Election, sqlx::Error> {
    let row = sqlx::query!(
        r#"
        with elected as (
            insert into ojs_leader as l (name, leader_id, term, elected_at, renewed_at, expires_at)
            values ($1, $2, 1, now(), now(), now() + $3::int8 * interval '1 millisecond')
            on conflict (name) do update
               set leader_id = excluded.leader_id,
                   term = l.term + 1,
                   elected_at = excluded.elected_at,
                   renewed_at = excluded.renewed_at,
                   expires_at = excluded.expires_at
             where l.expires_at <= now()
            returning l.term
        )
        select (select term from elected) as "term?",
               current.leader_id as "holder?",
               greatest(extract(epoch from current.expires_at - now()) * 1000, 0)::int8 as "remaining_ms?"
          from (select 1) one
          left join ojs_leader current on current.name = $1
        "#,
        MAINTENANCE,
        leader_id,
        millis(ttl),
    )
    .fetch_one(db)
    .await?;
    Ok(match row.term {
        Some(term) => Election::Elected { term },
        None => Election::Held {
            leader_id: row.holder.unwrap_or_default(),
            remaining: Duration::from_millis(row.remaining_ms.unwrap_or(0).max(0) as u64),
        },
    })
}

/// Re-elect: extends the caller's lease by `ttl` from now. `false` when the caller no longer
/// holds `term` (its lease ran out or changed hands): it must stop leading.
pub async fn reelect(
    db: impl PgExecutor<'_>,
    leader_id: &str,
    term: i64,
    ttl: Duration,
) -> Result<bool, sqlx::Error> {
    let renewed = sqlx::query_scalar!(
        r#"
        update ojs_leader
           set renewed_at = now(), expires_at = now() + $4::int8 * interval '1 millisecond'
         where name = $1 and leader_id = $2 and term = $3 and expires_at > now()
        returning term
        "#,
        MAINTENANCE,
        leader_id,
        term,
        millis(ttl),
    )
    .fetch_optional(db)
    .await?;
    Ok(renewed.is_some())
}

/// Resign: ends the caller's lease now (if it still holds `term`) and tells followers.
pub async fn resign(
    db: impl PgExecutor<'_>,
    leader_id: &str,
    term: i64,
) -> Result<bool, sqlx::Error> {
    let resigned = sqlx::query_scalar!(
        r#"
        with resigned as (
            update ojs_leader
               set expires_at = now(), renewed_at = least(renewed_at, now())
             where name = $1 and leader_id = $2 and term = $3 and expires_at > now()
            returning term
        )
        select r.term as "term!"
          from resigned r
          cross join lateral (select pg_notify('ojs_leader_resigned', $2)) n
        "#,
        MAINTENANCE,
        leader_id,
        term,
    )
    .fetch_optional(db)
    .await?;
    Ok(resigned.is_some())
}

/// The current lease holder, if the lease is held.
pub async fn current(
    db: impl PgExecutor<'_>,
) -> Result<Option<(String, i64, DateTime<Utc>)>, sqlx::Error> {
    let row = sqlx::query!(
        r#"
        select leader_id, term, expires_at from ojs_leader
         where name = $1 and expires_at > now()
        "#,
        MAINTENANCE,
    )
    .fetch_optional(db)
    .await?;
    Ok(row.map(|r| (r.leader_id, r.term, r.expires_at)))
}
