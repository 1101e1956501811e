//! The dead-letter queue ([OJS dead-letter queue]): listing, manual retry, deletion and purge.
//!
//! [OJS dead-letter queue]: https://github.com/openjobspec/spec/blob/main/spec/ojs-dead-letter.md

use chrono::{DateTime, Utc};

use super::Broker;
use crate::error::{Error, Result};
use crate::job::{Job, JobId};
use crate::store;
use crate::store::counting::Listed;
use crate::store::dead_letter::{DeadLetterFilter, DeadLetterStats, RetryOverride};

/// Most jobs one bulk retry or purge statement handles (they loop until done).
const BULK_BATCH: i64 = 1_000;

/// Result of a bulk retry.
#[derive(Debug, Clone, Copy)]
pub struct BulkRetry {
    pub matched: usize,
    pub retried: usize,
}

impl Broker {
    /// Dead-lettered jobs, newest first, and the total that match.
    pub async fn dead_letters(
        &self,
        filter: &DeadLetterFilter,
        limit: i64,
        offset: i64,
    ) -> Result<Listed<Job>> {
        Ok(store::dead_letter::list(&self.db, filter, limit, offset).await?)
    }

    /// Counts by queue and error type (of `tenant`'s jobs only, when given).
    pub async fn dead_letter_stats(&self, tenant: Option<&str>) -> Result<DeadLetterStats> {
        Ok(store::dead_letter::stats(&self.db, tenant).await?)
    }

    /// One dead-lettered job (404 when the job does not exist or is not in the DLQ).
    pub async fn dead_letter(&self, id: JobId) -> Result<Job> {
        store::dead_letter::get(&self.db, id)
            .await?
            .ok_or(Error::NotInDeadLetter(id))
    }

    /// Manual retry of one dead-lettered job, with optional new values.
    pub async fn retry_dead_letter(&self, id: JobId, with: &RetryOverride) -> Result<Job> {
        let mut tx = self.db.begin().await?;
        // An override may send the job to a queue that does not exist yet.
        if let Some(queue) = &with.queue {
            crate::telemetry::queues_created(i64::from(
                store::queue::ensure(&mut *tx, queue, true).await?,
            ));
        }
        let job = store::dead_letter::retry(&mut *tx, &[id.0], with)
            .await?
            .pop()
            .ok_or(Error::NotInDeadLetter(id))?;
        tx.commit().await?;
        Ok(job)
    }

    /// Bulk retry of every dead-lettered job matching `filter`.
    pub async fn retry_dead_letters(&self, filter: &DeadLetterFilter) -> Result<BulkRetry> {
        let mut result = BulkRetry {
            matched: 0,
            retried: 0,
        };
        loop {
            let ids = store::dead_letter::matching_ids(&self.db, filter, BULK_BATCH).await?;
            if ids.is_empty() {
                return Ok(result);
            }
            let retried =
                store::dead_letter::retry(&self.db, &ids, &RetryOverride::default()).await?;
            result.matched += ids.len();
            result.retried += retried.len();
            if (ids.len() as i64) < BULK_BATCH || retried.is_empty() {
                return Ok(result);
            }
        }
    }

    /// Deletes a dead-lettered job for good.
    pub async fn delete_dead_letter(&self, id: JobId) -> Result<()> {
        if store::dead_letter::delete(&self.db, &[id.0])
            .await?
            .is_empty()
        {
            return Err(Error::NotInDeadLetter(id));
        }
        Ok(())
    }

    /// Deletes dead-lettered jobs older than `older_than` (all when `None`) of `queue` (and of
    /// `tenant`, when given).
    pub async fn purge_dead_letters(
        &self,
        older_than: Option<DateTime<Utc>>,
        queue: Option<&str>,
        tenant: Option<&str>,
    ) -> Result<i64> {
        let mut purged = 0;
        loop {
            let n =
                store::dead_letter::purge(&self.db, older_than, queue, tenant, BULK_BATCH).await?;
            purged += n;
            if n < BULK_BATCH {
                return Ok(purged);
            }
        }
    }
}
