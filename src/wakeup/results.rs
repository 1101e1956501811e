//! The clients of this process waiting for a job's result (`GET /ojs/v1/jobs/{id}/result
//! ?wait=true`), by job.
//!
//! A waiter [`watch`](ResultWaits::watch)es its job, and is woken when the [`Notifier`] reads
//! the job's id on `ojs_job_ended` (sent by any replica's database session that ended the
//! awaited job, migration V32), or when the listening connection came back after a loss (a
//! notification may have been missed: every waiter reads its job again). Waiters of one job
//! share one entry; the last to leave removes it. Nothing here polls: a waiting client costs
//! a map entry and a parked task.
//!
//! [`Notifier`]: super::Notifier

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use uuid::Uuid;

/// The result waiters of this process.
#[derive(Debug, Default)]
pub struct ResultWaits {
    jobs: Mutex<HashMap<Uuid, Arc<Entry>>>,
}

#[derive(Debug, Default)]
struct Entry {
    notify: Notify,
}

impl ResultWaits {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<Uuid, Arc<Entry>>) -> T) -> T {
        f(&mut self
            .jobs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// Starts watching job `id`: the watch is woken (see [`ResultWatch::changed`]) by the
    /// job's end from now on.
    pub fn watch(self: &Arc<Self>, id: Uuid) -> ResultWatch {
        let entry = self.with(|jobs| jobs.entry(id).or_default().clone());
        ResultWatch {
            waits: self.clone(),
            id,
            entry,
        }
    }

    /// Job `id` ended: wakes its waiters.
    pub fn ended(&self, id: Uuid) {
        if let Some(entry) = self.with(|jobs| jobs.get(&id).cloned()) {
            entry.notify.notify_waiters();
        }
    }

    /// Wakes every waiter to read its job again (a notification may have been lost).
    pub fn wake_all(&self) {
        let entries: Vec<Arc<Entry>> = self.with(|jobs| jobs.values().cloned().collect());
        for entry in entries {
            entry.notify.notify_waiters();
        }
    }

    /// How many jobs are awaited here.
    pub fn jobs(&self) -> usize {
        self.with(|jobs| jobs.len())
    }
}

/// One client's watch of a job (see [`ResultWaits::watch`]); dropping it ends the watch.
#[derive(Debug)]
pub struct ResultWatch {
    waits: Arc<ResultWaits>,
    id: Uuid,
    entry: Arc<Entry>,
}

impl ResultWatch {
    /// A wake-up of this watch, armed now: a wake-up that comes after this call and before the
    /// future is awaited is not lost. Arm it, then read the job, then await it.
    pub fn changed(&self) -> std::pin::Pin<Box<tokio::sync::futures::Notified<'_>>> {
        let mut notified = Box::pin(self.entry.notify.notified());
        notified.as_mut().enable();
        notified
    }
}

impl Drop for ResultWatch {
    fn drop(&mut self) {
        self.waits.with(|jobs| {
            // The map's reference and this watch's: no other waiter of the job is left.
            if Arc::strong_count(&self.entry) == 2 {
                jobs.remove(&self.id);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn an_end_announced_after_arming_wakes_the_watch() {
        let waits = Arc::new(ResultWaits::default());
        let id = Uuid::now_v7();
        let watch = waits.watch(id);
        let changed = watch.changed();
        waits.ended(id);
        tokio::time::timeout(Duration::from_secs(1), changed)
            .await
            .expect("woken");
    }

    #[tokio::test]
    async fn another_jobs_end_does_not_wake_the_watch() {
        let waits = Arc::new(ResultWaits::default());
        let watch = waits.watch(Uuid::now_v7());
        let changed = watch.changed();
        waits.ended(Uuid::now_v7());
        assert!(
            tokio::time::timeout(Duration::from_millis(50), changed)
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn waiters_of_one_job_share_an_entry_that_the_last_one_removes() {
        let waits = Arc::new(ResultWaits::default());
        let id = Uuid::now_v7();
        let first = waits.watch(id);
        let second = waits.watch(id);
        assert_eq!(waits.jobs(), 1);
        let (a, b) = (first.changed(), second.changed());
        waits.wake_all();
        tokio::time::timeout(Duration::from_secs(1), async {
            a.await;
            b.await;
        })
        .await
        .expect("both woken");
        drop(first);
        assert_eq!(waits.jobs(), 1);
        drop(second);
        assert_eq!(waits.jobs(), 0);
    }
}
