//! What every maintenance service is: a [`Service`] with a `run_once` pass, the [`Pass`] it
//! reports, and the [`Context`] it runs in (the pool, the batch loop, the event source it
//! writes under). [`super::supervise`] runs them.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::db::Db;
use chrono::{DateTime, Utc};
use sqlx::{PgConnection, Postgres, Transaction};

use crate::hold::SystemHold;
use crate::leadership::jittered;
use crate::store;

/// A boxed future borrowing a connection (one batch of a pass).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Most batches one pass of a service runs before it yields.
pub const MAX_BATCHES_PER_PASS: usize = 10;

/// Longest a pass may take. A pass is a few short batches, normally milliseconds; one that
/// hangs (a statement waiting on a lock, say) is abandoned so the service goes on, and its
/// open batch is rolled back.
pub const PASS_TIMEOUT: Duration = Duration::from_secs(60);

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pass {
    /// Rows moved or deleted.
    pub processed: u64,
    /// The pass stopped at its batch limit with work left: run again right away.
    pub more: bool,
}

/// A maintenance service.
pub trait Service: Send + Sync + 'static {
    /// Name in logs and metrics.
    fn name(&self) -> &'static str;
    /// Pause between passes (before jitter).
    fn interval(&self) -> Duration;
    /// One pass; `now` overrides the database clock.
    fn run_once(
        &self,
        now: Option<DateTime<Utc>>,
    ) -> impl Future<Output = Result<Pass, sqlx::Error>> + Send;
    /// How long to wait after a pass that left no work: the interval with ±10 % jitter, unless
    /// the service keeps a timetable of its own.
    fn pause(&self) -> Duration {
        jittered(self.interval())
    }
}

/// What every service needs: the database and who it is (for the `source` of the events it
/// causes).
#[derive(Debug, Clone)]
pub struct Context {
    pub db: Db,
    /// `ojs://<service>` (the OJS service name, not the maintenance service).
    pub service_uri: String,
    pub instance_id: String,
    /// Maintenance mode (the system hold): the promoter and the cron firer pause while it is
    /// in force.
    pub hold: SystemHold,
}

impl Context {
    /// A context whose services never see maintenance mode on (see [`Context::with_hold`]).
    pub fn new(db: Db, service_name: &str, instance_id: &str) -> Context {
        Context {
            db,
            service_uri: format!("ojs://{service_name}"),
            instance_id: instance_id.to_owned(),
            hold: SystemHold::default(),
        }
    }

    /// The services pause what maintenance mode pauses while `hold` is in force.
    pub fn with_hold(mut self, hold: SystemHold) -> Context {
        self.hold = hold;
        self
    }

    /// One pass of bounded batches: runs `batch` in its own transaction (events naming
    /// `component` as their source) until it reports a batch that was not full, at most
    /// [`MAX_BATCHES_PER_PASS`] times. `batch` returns the rows it handled and whether the batch
    /// was full.
    pub async fn batches<F>(&self, component: &str, mut batch: F) -> Result<Pass, sqlx::Error>
    where
        F: for<'c> FnMut(&'c mut PgConnection) -> BoxFuture<'c, Result<(u64, bool), sqlx::Error>>,
    {
        let mut pass = Pass::default();
        for _ in 0..MAX_BATCHES_PER_PASS {
            let mut tx = self.begin(component).await?;
            let (handled, full) = batch(&mut tx).await?;
            tx.commit().await?;
            pass.processed += handled;
            pass.more = full;
            if !full {
                break;
            }
        }
        Ok(pass)
    }

    /// A transaction whose events name `component` as their source.
    pub async fn begin(
        &self,
        component: &str,
    ) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        let mut tx = self.db.begin().await?;
        let source = format!("{}/{component}/{}", self.service_uri, self.instance_id);
        store::event::set_source(&mut *tx, &source).await?;
        Ok(tx)
    }
}
