//! Job progress: what a running job's worker reports, and what clients read back.

use chrono::{DateTime, Utc};

use super::Broker;
use crate::error::{Error, Result};
use crate::job::{JobId, JobState, RawJson};
use crate::store;

/// A job's progress as the API shows it.
#[derive(Debug, Clone)]
pub struct Progress {
    pub job_id: JobId,
    pub state: JobState,
    /// 0 to 1: the current attempt's latest report, 0 before any, 1 once completed.
    pub progress: f64,
    pub message: Option<String>,
    pub data: Option<RawJson>,
    /// When the report was made (`None`: no report).
    pub updated_at: Option<DateTime<Utc>>,
}

impl Progress {
    fn of(job_id: JobId, row: store::progress::ProgressRow) -> Progress {
        let reported = row.progress.unwrap_or(0.0);
        Progress {
            job_id,
            state: row.state,
            progress: if row.state == JobState::Completed {
                1.0
            } else {
                reported
            },
            message: row.message,
            data: row.data,
            updated_at: row.updated_at,
        }
    }
}

/// A progress report: `progress` already clamped to 0..=1.
#[derive(Debug, Clone)]
pub struct ProgressReport<'a> {
    pub worker_id: Option<&'a str>,
    pub progress: f64,
    pub message: Option<&'a str>,
    pub data: Option<&'a serde_json::value::RawValue>,
}

impl Broker {
    /// Records a report for an `active` job. Another state is a conflict; so is a report naming
    /// a worker that does not hold the job (a stale worker cannot overwrite the current one's).
    pub async fn report_progress(
        &self,
        id: JobId,
        report: &ProgressReport<'_>,
    ) -> Result<Progress> {
        let row = store::progress::report(
            &self.db,
            id.0,
            report.worker_id,
            report.progress,
            report.message,
            report.data,
        )
        .await?
        .ok_or(Error::JobNotFound(id))?;
        if row.updated_at.is_some() {
            return Ok(Progress::of(id, row));
        }
        if row.state != JobState::Active {
            return Err(Error::InvalidTransition {
                job_id: id,
                operation: "report progress of",
                current: row.state,
                allowed: &[JobState::Active],
            });
        }
        Err(Error::NotOwner {
            job_id: id,
            owner: row.worker_id.unwrap_or_default(),
        })
    }

    /// A job's progress.
    pub async fn progress(&self, id: JobId) -> Result<Progress> {
        let row = store::progress::get(&self.db, id.0)
            .await?
            .ok_or(Error::JobNotFound(id))?;
        Ok(Progress::of(id, row))
    }
}
