//! Cron entries: registration, changes, reads, and the firer that enqueues their runs.
//!
//! The firer ([`CronFirer`]) runs on the elected leader, once a second at the turn of the
//! second (every occurrence is on a whole second). Each due entry is handled in one
//! transaction that locks the entry, writes the occurrence's row in the run ledger, enqueues
//! the job (through the PUSH path: queue configuration, bounds, events, wake-ups), and moves
//! the entry to its next occurrence. The ledger's key (entry, instant) makes a second job for
//! one occurrence impossible even if two replicas both believe they lead, and a firer killed
//! mid-way leaves nothing behind: the next one fires the occurrence. After downtime an entry
//! fires once, for the latest occurrence it missed (`missed` counts the others).
//!
//! Overlap (an earlier run of the entry is unfinished — waiting or `active` — when an
//! occurrence falls due), per the entry's policy: `skip` writes no job, `allow` enqueues
//! anyway, `cancel_previous` cancels the unfinished runs first, and `enqueue` enqueues the run `pending` while any earlier run is
//! unfinished; the firer makes it available once they have all finished, so runs never
//! overlap and none is lost.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::Broker;
use super::enqueue::{PushContext, Pushed};
use crate::cron::{self, Definition, Occurrence, OverlapPolicy, Schedule};
use crate::error::{Error, Result};
use crate::job::JobState;
use crate::job::failure::JobError;
use crate::maintenance::{self, Pass, Service};
use crate::store;
use crate::store::cron::{CronRow, NewCron, NewRun};
use crate::telemetry;
use crate::wire::json::Object;

pub use crate::store::cron::RunRow as CronRun;

/// The producer cron runs are enqueued as (for queues with a `producers` list).
pub const CRON_PRODUCER: &str = "ojsd-cron";

/// Most due entries one pass handles (the rest are handled by the next pass, at once).
const DUE_BATCH: i64 = 100;

/// An entry as the API shows it.
#[derive(Debug, Clone)]
pub struct CronEntry {
    pub row: CronRow,
    /// The next occurrence that fires (`None` when disabled or never again).
    pub next_run_at: Option<DateTime<Utc>>,
}

impl CronEntry {
    fn of(row: CronRow) -> CronEntry {
        let next_run_at = match (&row.next_local, schedule_of(&row)) {
            (Some(local), Ok(schedule)) => schedule
                .firing_from(&schedule.occurrence(*local))
                .map(|o| o.at),
            _ => row.next_run_at,
        };
        CronEntry { row, next_run_at }
    }
}

/// The schedule of a stored entry.
fn schedule_of(row: &CronRow) -> std::result::Result<Schedule, String> {
    let zone = cron::zone::parse(&row.timezone)?;
    Schedule::parse(&row.expression, zone)
}

impl Broker {
    /// Registers an entry, or updates the one of that name (`true`: it is new). Its template
    /// must be admissible to its queue now (job type and producers rules).
    pub async fn register_cron(&self, def: &Definition) -> Result<(CronEntry, bool)> {
        let now = store::now(&self.db).await?;
        self.check_template(def, now).await?;
        let (row, created) = store::cron::upsert(&self.db, &new_cron(def, now))
            .await?
            .ok_or_else(|| Error::CronNameTaken(def.name.clone()))?;
        Ok((CronEntry::of(row), created))
    }

    /// Changes an entry: `patch` holds the fields to change (a `job_template` is merged key by
    /// key over the stored one); the result is validated as a registration (its template at
    /// most `max_template_bytes`).
    pub async fn patch_cron(
        &self,
        name: &str,
        patch: &Object<'_>,
        max_template_bytes: usize,
        tenant: Option<&str>,
    ) -> Result<CronEntry> {
        let mut tx = self.db.begin().await?;
        let Some(row) = store::cron::get(&mut *tx, name, true).await? else {
            return Err(Error::CronNotFound(name.to_owned()));
        };
        let merged = cron::patched(&registration_of(&row), patch).map_err(Error::from)?;
        let obj = Object::parse(&merged).map_err(|e| Error::invalid("$", e.to_string()))?;
        let def = cron::parse(&obj, &self.settings.limits, max_template_bytes, tenant)
            .map_err(Error::from)?;
        let now = store::now(&mut *tx).await?;
        self.check_template(&def, now).await?;
        let (row, _) = store::cron::upsert(&mut *tx, &new_cron(&def, now))
            .await?
            .ok_or_else(|| Error::CronNotFound(name.to_owned()))?;
        tx.commit().await?;
        Ok(CronEntry::of(row))
    }

    /// The entry `name`.
    pub async fn cron_entry(&self, name: &str) -> Result<CronEntry> {
        match store::cron::get(&self.db, name, false).await? {
            Some(row) => Ok(CronEntry::of(row)),
            None => Err(Error::CronNotFound(name.to_owned())),
        }
    }

    /// A page of entries by name, and how many there are in all.
    pub async fn cron_entries(
        &self,
        enabled: Option<bool>,
        tenant: Option<&str>,
        offset: i64,
        limit: i64,
    ) -> Result<(Vec<CronEntry>, i64)> {
        let rows = store::cron::list(&self.db, enabled, tenant, offset, limit).await?;
        let total = store::cron::count(&self.db, enabled, tenant).await?;
        Ok((rows.into_iter().map(CronEntry::of).collect(), total))
    }

    /// Deletes the entry `name`, returning it as it was. Jobs it enqueued are untouched.
    pub async fn delete_cron(&self, name: &str) -> Result<CronEntry> {
        match store::cron::delete(&self.db, name).await? {
            Some(row) => Ok(CronEntry::of(row)),
            None => Err(Error::CronNotFound(name.to_owned())),
        }
    }

    /// The entry's latest runs (the ledger), newest first.
    pub async fn cron_runs(&self, name: &str, limit: i64) -> Result<Vec<CronRun>> {
        if store::cron::get(&self.db, name, false).await?.is_none() {
            return Err(Error::CronNotFound(name.to_owned()));
        }
        Ok(store::cron::recent_runs(&self.db, name, limit).await?)
    }

    /// Refuses a template its queue would refuse (job type, producers) at every run.
    async fn check_template(&self, def: &Definition, now: DateTime<Utc>) -> Result<()> {
        let job = Definition::job(&def.name, &def.template, now, &self.settings.limits)
            .map_err(Error::from)?;
        self.enqueuer.admissible(&job, &cron_context()).await
    }
}

/// The row to write for a definition registered (or changed) at `now`.
fn new_cron(def: &Definition, now: DateTime<Utc>) -> NewCron<'_> {
    NewCron {
        name: &def.name,
        expression: &def.expression,
        timezone: &def.timezone,
        overlap_policy: def.overlap.as_str(),
        enabled: def.enabled,
        description: def.description.as_deref(),
        job_template: &def.template,
        next: def
            .enabled
            .then(|| def.schedule.first_after(now))
            .flatten()
            .map(|o| (o.at, o.local)),
        tenant: def.tenant.as_deref(),
    }
}

/// A stored entry as a registration body (what a PATCH is merged over).
fn registration_of(row: &CronRow) -> String {
    let mut body = serde_json::Map::new();
    body.insert("name".into(), row.name.clone().into());
    body.insert("expression".into(), row.expression.clone().into());
    body.insert("timezone".into(), row.timezone.clone().into());
    body.insert("overlap_policy".into(), row.overlap_policy.clone().into());
    body.insert("enabled".into(), row.enabled.into());
    if let Some(d) = &row.description {
        body.insert("description".into(), d.clone().into());
    }
    let mut text = serde_json::Value::Object(body).to_string();
    // The template verbatim, as the last member.
    text.pop();
    format!("{text},\"job_template\":{}}}", row.job_template)
}

fn cron_context() -> PushContext {
    PushContext {
        producer: Some(CRON_PRODUCER.to_owned()),
        block_timeout: Duration::ZERO,
    }
}

/// The leader's cron service.
pub struct CronFirer {
    broker: Broker,
    context: maintenance::Context,
}

impl CronFirer {
    pub fn new(broker: Broker, context: maintenance::Context) -> CronFirer {
        CronFirer { broker, context }
    }

    /// Fires the due entry `name` at `now`; returns whether it was handled (false: not due
    /// any more, or another firer holds it).
    async fn fire(&self, name: &str, now: DateTime<Utc>) -> Result<bool> {
        let mut tx = self.context.begin("cron").await?;
        let Some(row) = store::cron::lock_due(&mut *tx, name, now).await? else {
            return Ok(false);
        };
        let schedule = match schedule_of(&row) {
            Ok(schedule) => schedule,
            Err(e) => {
                // Only a zone database without the entry's zone can get here.
                tracing::error!(cron = name, error = %e, "cron entry cannot be read; it no longer fires");
                store::cron::advance(&mut *tx, name, None, None).await?;
                tx.commit().await?;
                return Ok(true);
            }
        };
        let from = schedule.occurrence(
            row.next_local
                .unwrap_or_else(|| row.next_run_at.unwrap_or(now).naive_utc()),
        );
        let due = schedule.due(&from, now);
        if let Some((skipped, n)) = due.skipped {
            dst_skipped(&mut tx, &row, &skipped, n, now).await?;
        }
        let mut ran = None;
        let mut pushed = None;
        if let Some(fire) = due.fire
            && !store::cron::run_exists(&mut *tx, name, fire.at).await?
        {
            let missed = i64::try_from(due.missed).unwrap_or(i64::MAX);
            if let Some(run) = self.run(&mut tx, &row, fire.at, missed, now).await? {
                ran = Some(fire.at);
                pushed = Some(run);
            }
        }
        store::cron::advance(&mut *tx, name, due.next.map(|o| (o.at, o.local)), ran).await?;
        tx.commit().await?;
        if let Some((jobs, configs)) = pushed {
            self.broker.enqueuer.after_commit(jobs, &configs).await;
        }
        Ok(true)
    }

    /// One occurrence of `row` at `slot`, under its overlap policy: the job enqueued (with the
    /// configuration it was prepared with), or `None` when none was.
    async fn run(
        &self,
        tx: &mut PgConnection,
        row: &CronRow,
        slot: DateTime<Utc>,
        missed: i64,
        now: DateTime<Utc>,
    ) -> Result<Option<(Vec<Pushed>, std::sync::Arc<super::configs::Snapshot>)>> {
        let policy = OverlapPolicy::parse(&row.overlap_policy).unwrap_or(OverlapPolicy::Skip);
        let occasion = Occasion {
            row,
            slot,
            missed,
            now,
        };
        let live = settle(tx, &row.name).await?;
        // An earlier run overlaps while it is unfinished, waiting as well as active: a run still
        // in the queue when the next occurrence comes would otherwise pile up behind it.
        let active = &live;
        let mut held = false;
        match policy {
            OverlapPolicy::Skip if !active.is_empty() => {
                let job_id = active[0].job_id;
                let extra = serde_json::json!({"active_job_id": job_id, "existing_job_id": job_id});
                skip(tx, &occasion, "overlap_skip", None, extra).await?;
                return Ok(None);
            }
            OverlapPolicy::CancelPrevious => {
                let error = JobError::server(
                    "cancelled",
                    "A newer run of its cron entry replaced it (overlap_policy cancel_previous).",
                );
                for run in active {
                    if let Some((job, _)) = store::job::cancel(
                        &mut *tx,
                        crate::job::JobId(run.job_id),
                        &error.to_json(),
                    )
                    .await?
                    {
                        telemetry::job_cancelled(&job);
                    }
                }
            }
            OverlapPolicy::Enqueue => held = !live.is_empty(),
            OverlapPolicy::Skip | OverlapPolicy::Allow => {}
        }
        let broker = &self.broker;
        let job = Definition::job(&row.name, &row.job_template, slot, &broker.settings.limits)
            .map_err(Error::from);
        let pushed = match job {
            Ok(mut job) => {
                job.pending |= held;
                broker
                    .enqueuer
                    .push_in(&mut *tx, std::slice::from_ref(&job), &cron_context())
                    .await
            }
            Err(e) => Err(e),
        };
        match pushed {
            Ok((jobs, configs)) => {
                let job = &jobs[0].job;
                let run = NewRun {
                    cron_name: &row.name,
                    scheduled_at: slot,
                    skipped: None,
                    job_id: Some(job.id.0),
                    missed,
                    error: None,
                    fired_at: now,
                    held,
                };
                store::cron::insert_run(&mut *tx, &run).await?;
                let data = event_data(
                    row,
                    serde_json::json!({
                        "job_id": job.id.0,
                        "job_type": job.r#type,
                        "queue": job.queue,
                        "run_count": row.run_count + 1,
                        "scheduled_time": crate::wire::timestamp::format(slot),
                        "actual_time": crate::wire::timestamp::format(now),
                        "missed": missed,
                        "held": held,
                    }),
                );
                store::cron::insert_event(
                    &mut *tx,
                    "cron.triggered",
                    &row.name,
                    Some((job.id.0, &job.queue, &job.r#type)),
                    &data,
                )
                .await?;
                telemetry::cron_run(&row.name, "enqueued");
                if live.len() >= 2 && policy == OverlapPolicy::Enqueue {
                    tracing::warn!(
                        cron = row.name,
                        waiting = live.len(),
                        "cron entry has more than two runs waiting (overlap_policy enqueue)"
                    );
                }
                Ok(Some((jobs, configs)))
            }
            Err(Error::Database(e)) => Err(Error::Database(e)),
            Err(e) => {
                let error = serde_json::json!({"message": e.to_string(), "kind": refusal_kind(&e)});
                let extra = serde_json::json!({"error": error});
                skip(tx, &occasion, "enqueue_failed", Some(&error), extra).await?;
                tracing::warn!(cron = row.name, error = %e, "cron run could not be enqueued");
                Ok(None)
            }
        }
    }

    /// Makes the oldest held run of entry `name` available once every earlier run has
    /// finished (overlap policy `enqueue`); returns whether one was.
    async fn release(&self, name: &str) -> Result<bool> {
        let mut tx = self.context.begin("cron").await?;
        let live = settle(&mut tx, name).await?;
        let Some(first) = live.first().filter(|r| r.held) else {
            tx.commit().await?;
            return Ok(false);
        };
        let released = store::job::activate(&mut *tx, crate::job::JobId(first.job_id))
            .await?
            .is_some();
        store::cron::settle_runs(&mut *tx, name, &[], &[first.scheduled_at]).await?;
        tx.commit().await?;
        Ok(released)
    }
}

/// The entry's runs that may not have finished: those seen finished (or gone) are marked so;
/// the others are returned, oldest first.
async fn settle(tx: &mut PgConnection, name: &str) -> Result<Vec<store::cron::OpenRun>> {
    let open = store::cron::open_runs(&mut *tx, name).await?;
    let (finished, live): (Vec<_>, Vec<_>) = open
        .into_iter()
        .partition(|r| r.state.is_none_or(JobState::is_terminal));
    let done: Vec<DateTime<Utc>> = finished.iter().map(|r| r.scheduled_at).collect();
    store::cron::settle_runs(&mut *tx, name, &done, &[]).await?;
    Ok(live)
}

/// Records occurrences skipped by a change to daylight saving time.
async fn dst_skipped(
    tx: &mut PgConnection,
    row: &CronRow,
    first: &Occurrence,
    n: u64,
    now: DateTime<Utc>,
) -> Result<()> {
    let data = event_data(
        row,
        serde_json::json!({
            "reason": "dst_skip",
            "scheduled_time": crate::wire::timestamp::format(first.at),
            "local_time": first.local.format("%Y-%m-%dT%H:%M:%S").to_string(),
            "occurrences": n,
            "actual_time": crate::wire::timestamp::format(now),
        }),
    );
    store::cron::insert_event(&mut *tx, "cron.skipped", &row.name, None, &data).await?;
    telemetry::cron_run(&row.name, "dst_skip");
    Ok(())
}

/// An occurrence of an entry being handled.
struct Occasion<'a> {
    row: &'a CronRow,
    /// Its scheduled instant.
    slot: DateTime<Utc>,
    /// Earlier occurrences it stands for.
    missed: i64,
    /// When it is handled.
    now: DateTime<Utc>,
}

/// An occurrence that makes no job: its ledger row, `cron.skipped` (with `extra`), the metric.
async fn skip(
    tx: &mut PgConnection,
    at: &Occasion<'_>,
    reason: &'static str,
    error: Option<&serde_json::Value>,
    extra: serde_json::Value,
) -> Result<()> {
    let run = NewRun {
        cron_name: &at.row.name,
        scheduled_at: at.slot,
        skipped: Some(reason),
        job_id: None,
        missed: at.missed,
        error,
        fired_at: at.now,
        held: false,
    };
    store::cron::insert_run(&mut *tx, &run).await?;
    let mut extra = extra;
    if let Some(fields) = extra.as_object_mut() {
        fields.insert("reason".into(), reason.into());
        let slot = crate::wire::timestamp::format(at.slot);
        fields.insert("scheduled_time".into(), slot.into());
    }
    let data = event_data(at.row, extra);
    store::cron::insert_event(&mut *tx, "cron.skipped", &at.row.name, None, &data).await?;
    telemetry::cron_run(&at.row.name, reason);
    Ok(())
}

/// What every cron event says of its entry, then `extra`.
fn event_data(row: &CronRow, extra: serde_json::Value) -> serde_json::Value {
    let mut data = serde_json::json!({
        "cron_name": row.name,
        "cron_expression": row.expression,
        "timezone": row.timezone,
    });
    if let (Some(data), serde_json::Value::Object(extra)) = (data.as_object_mut(), extra) {
        data.extend(extra);
    }
    data
}

/// A short name for why an enqueue was refused.
fn refusal_kind(e: &Error) -> &'static str {
    match e {
        Error::QueueFull { .. } => "queue_full",
        Error::UnknownQueue(_) => "unknown_queue",
        Error::QueueDraining { .. } => "queue_draining",
        Error::JobTypeNotAllowed { .. } => "job_type_not_allowed",
        Error::ProducerNotAllowed { .. } => "producer_not_allowed",
        Error::Rejected { .. } => "invalid_template",
        _ => "refused",
    }
}

impl Service for CronFirer {
    fn name(&self) -> &'static str {
        "cron"
    }

    fn interval(&self) -> Duration {
        Duration::from_secs(1)
    }

    /// The next turn of the second (every occurrence is on a whole second), plus a little:
    /// at most one pass a second.
    fn pause(&self) -> Duration {
        let nanos = Utc::now().timestamp_subsec_nanos();
        Duration::from_nanos(u64::from(1_000_000_000 - nanos.min(999_999_999)))
            + Duration::from_millis(5)
    }

    async fn run_once(&self, now: Option<DateTime<Utc>>) -> std::result::Result<Pass, sqlx::Error> {
        if self.context.hold.is_on() {
            // Maintenance mode: occurrences wait; afterwards each entry's misfire policy
            // decides what runs.
            return Ok(Pass::default());
        }
        let now = match now {
            Some(now) => now,
            None => store::now(&self.broker.db).await?,
        };
        let mut pass = Pass::default();
        let due = store::cron::due(&self.broker.db, now, DUE_BATCH).await?;
        pass.more = due.len() as i64 == DUE_BATCH;
        for name in &due {
            match self.fire(name, now).await {
                Ok(handled) => pass.processed += u64::from(handled),
                Err(Error::Database(e)) => return Err(e),
                Err(e) => tracing::warn!(cron = name, error = %e, "cron entry not fired"),
            }
        }
        for name in store::cron::with_held_runs(&self.broker.db, DUE_BATCH).await? {
            match self.release(&name).await {
                Ok(released) => pass.processed += u64::from(released),
                Err(Error::Database(e)) => return Err(e),
                Err(e) => tracing::warn!(cron = name, error = %e, "held cron run not released"),
            }
        }
        Ok(pass)
    }
}
