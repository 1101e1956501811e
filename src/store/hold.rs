//! `ojs_system_hold`: maintenance mode (migration V22), called the system hold here, apart
//! from the leader's maintenance services.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

/// The row, and how long it has left by the database's clock (replicas never compare their
/// own clocks with the database's: each counts `lifts_in_ms` from when it read the row).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HoldRow {
    pub enabled: bool,
    pub reason: Option<String>,
    pub started_at: Option<DateTime<Utc>>,
    pub ends_at: Option<DateTime<Utc>>,
    /// Milliseconds until `ends_at` (0 or less: past); `None` without an end.
    pub lifts_in_ms: Option<i64>,
}

/// Reads the hold.
pub async fn read(db: impl PgExecutor<'_>) -> Result<HoldRow, sqlx::Error> {
    sqlx::query_as!(
        HoldRow,
        r#"
        select enabled, reason, started_at, ends_at,
               (extract(epoch from ends_at - now()) * 1000)::int8 as lifts_in_ms
          from ojs_system_hold
         where id
        "#
    )
    .fetch_one(db)
    .await
}

/// Turns the hold on (with `reason`, lifting after `duration_ms` when given) or off, and writes
/// the event of the change: `server.maintenance_started` when it was not in force,
/// `server.maintenance_updated` when it was and is changed, `server.maintenance_ended` when it
/// is turned off (with `expired` when it had passed its end but no replica had cleared it yet;
/// turning off a hold that was off writes nothing). Turning on a hold in force keeps its
/// `started_at`.
pub async fn set(
    db: impl PgExecutor<'_>,
    enabled: bool,
    reason: Option<&str>,
    duration_ms: Option<i64>,
) -> Result<HoldRow, sqlx::Error> {
    sqlx::query_as!(
        HoldRow,
        r#"
        with before as (
            select enabled and (ends_at is null or ends_at > now()) as in_force,
                   enabled as was_enabled, started_at, reason, ends_at
              from ojs_system_hold
             where id
               for update
        ),
        after as (
            update ojs_system_hold h
               set enabled = $1,
                   reason = case when $1 then $2 end,
                   started_at = case when $1 then
                                    case when b.in_force then b.started_at else now() end
                                end,
                   ends_at = case when $1 then now() + make_interval(secs => $3::int8 / 1000.0) end,
                   updated_at = now()
              from before b
             where h.id
            returning h.enabled, h.reason, h.started_at, h.ends_at, b.in_force, b.was_enabled,
                      b.reason as reason_before, b.started_at as started_before,
                      b.ends_at as ends_before
        ),
        events as (
            insert into ojs_event (type, subject, data)
            select case when not a.enabled then 'server.maintenance_ended'
                        when a.in_force then 'server.maintenance_updated'
                        else 'server.maintenance_started' end,
                   'maintenance',
                   case when a.enabled then
                        jsonb_build_object('reason', a.reason, 'started_at', a.started_at,
                                           'ends_at', a.ends_at)
                   else
                        jsonb_build_object('reason', a.reason_before,
                                           'started_at', a.started_before,
                                           'ends_at', a.ends_before,
                                           'expired', not a.in_force)
                   end
              from after a
             where a.enabled or a.was_enabled
        )
        select enabled as "enabled!", reason, started_at, ends_at,
               (extract(epoch from ends_at - now()) * 1000)::int8 as lifts_in_ms
          from after
        "#,
        enabled,
        reason,
        duration_ms,
    )
    .fetch_one(db)
    .await
}

/// Clears a hold past its end and writes its `server.maintenance_ended` event; `true` when
/// this call did (of several replicas at once, one does).
pub async fn end_expired(db: impl PgExecutor<'_>) -> Result<bool, sqlx::Error> {
    let ended = sqlx::query_scalar!(
        r#"
        with ended as (
            update ojs_system_hold h
               set enabled = false, reason = null, started_at = null, ends_at = null,
                   updated_at = now()
              from (select reason, started_at, ends_at from ojs_system_hold where id for update) b
             where h.id and h.enabled and h.ends_at <= now()
            returning b.reason, b.started_at, b.ends_at
        ),
        events as (
            insert into ojs_event (type, subject, data)
            select 'server.maintenance_ended', 'maintenance',
                   jsonb_build_object('reason', reason, 'started_at', started_at,
                                      'ends_at', ends_at, 'expired', true)
              from ended
        )
        select count(*) as "n!" from ended
        "#
    )
    .fetch_one(db)
    .await?;
    Ok(ended > 0)
}

/// Turns the hold off without an event (test reset).
pub async fn clear(db: impl PgExecutor<'_>) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "update ojs_system_hold set enabled = false, reason = null, started_at = null, \
         ends_at = null, updated_at = now() where id"
    )
    .execute(db)
    .await?;
    Ok(())
}
