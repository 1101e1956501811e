//! Group commit: concurrent requests that each change one job share one statement and one
//! commit.
//!
//! With many producers (or workers) sending one job per request, the cost of a request is
//! dominated by its transaction: the statement's fixed overhead and the commit's WAL flush.
//! A [`GroupCommit`] queues such items and lets a few flusher tasks take whatever is queued at
//! the moment they are free, up to a maximum, and run it as one statement. There is no timer and
//! no waiting for a batch to fill: an item that arrives while a flusher is idle is written at
//! once, alone; items that arrive while every flusher is busy are written together by the next
//! free one. Latency is never worse than waiting for one in-flight statement, and under load the
//! batch grows by itself, so the number of commits per second stays roughly constant while
//! throughput rises with concurrency.
//!
//! A flush answers every item with its own outcome; what to do when the shared statement fails
//! (typically: retry each item alone, so one bad item cannot fail the others) is up to the flush
//! function.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Mutex, Notify, mpsc, oneshot};

/// Flusher tasks per group-commit queue: enough to keep a statement in flight while the next
/// group forms, few enough to leave the pool's connections to everything else.
pub(super) const GROUP_FLUSHERS: usize = 2;

type Queued<I, O> = (I, oneshot::Sender<O>);

/// A queue of items written in groups by a fixed set of flusher tasks.
pub struct GroupCommit<I, O> {
    tx: mpsc::UnboundedSender<Queued<I, O>>,
}

impl<I, O> std::fmt::Debug for GroupCommit<I, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCommit").finish_non_exhaustive()
    }
}

impl<I: Send + 'static, O: Send + 'static> GroupCommit<I, O> {
    /// Starts `flushers` tasks, each writing up to `max_group` queued items per call of `flush`,
    /// which must return one outcome per item, in order. The tasks end when the last handle is
    /// dropped and the queue is empty. Must be called within a Tokio runtime.
    pub fn spawn<F, Fut>(flushers: usize, max_group: usize, flush: F) -> GroupCommit<I, O>
    where
        F: Fn(Vec<I>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Vec<O>> + Send + 'static,
    {
        Self::spawn_patient(flushers, max_group, Duration::ZERO, flush)
    }

    /// [`GroupCommit::spawn`] whose flushers, while another flush is in flight, wait up to
    /// `patience` for it to end before they take what is queued: the group that forms
    /// meanwhile is written as one statement, as if there were one flusher, and only a flush
    /// that takes longer than `patience` (a statement waiting on a row lock, say) lets another
    /// run beside it.
    pub fn spawn_patient<F, Fut>(
        flushers: usize,
        max_group: usize,
        patience: Duration,
        flush: F,
    ) -> GroupCommit<I, O>
    where
        F: Fn(Vec<I>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Vec<O>> + Send + 'static,
    {
        let (tx, rx) = mpsc::unbounded_channel::<Queued<I, O>>();
        let rx = Arc::new(Mutex::new(rx));
        let flush = Arc::new(flush);
        let max_group = max_group.max(1);
        let in_flight = Arc::new(AtomicUsize::new(0));
        let finished = Arc::new(Notify::new());
        for _ in 0..flushers.max(1) {
            let (rx, flush) = (rx.clone(), flush.clone());
            let (in_flight, finished) = (in_flight.clone(), finished.clone());
            tokio::spawn(async move {
                loop {
                    // Only the flusher holding the receiver waits for items; the others wait
                    // for it, then take what queued up meanwhile.
                    let group = {
                        let mut rx = rx.lock().await;
                        let Some(first) = rx.recv().await else { return };
                        if !patience.is_zero() {
                            // Registered before looking, so an end in between is not missed.
                            let ended = finished.notified();
                            tokio::pin!(ended);
                            ended.as_mut().enable();
                            if in_flight.load(Ordering::Acquire) > 0 {
                                let _ = tokio::time::timeout(patience, ended).await;
                            }
                        }
                        let mut group = vec![first];
                        while group.len() < max_group {
                            match rx.try_recv() {
                                Ok(item) => group.push(item),
                                Err(_) => break,
                            }
                        }
                        group
                    };
                    let (items, replies): (Vec<I>, Vec<oneshot::Sender<O>>) =
                        group.into_iter().unzip();
                    let outcomes = {
                        let _flushing = InFlight::start(&in_flight, &finished);
                        flush(items).await
                    };
                    debug_assert_eq!(outcomes.len(), replies.len());
                    for (reply, outcome) in replies.into_iter().zip(outcomes) {
                        // The request may have gone away (client disconnected): its change
                        // stands, as it would had it been written alone.
                        let _ = reply.send(outcome);
                    }
                }
            });
        }
        GroupCommit { tx }
    }

    /// Queues `item` and waits for its outcome; `None` if the flushers are gone (the runtime is
    /// shutting down) or the flush did not answer it.
    pub async fn submit(&self, item: I) -> Option<O> {
        let (reply, outcome) = oneshot::channel();
        self.tx.send((item, reply)).ok()?;
        outcome.await.ok()
    }
}

/// A flush in flight, counted until it ends (or its task panics), when waiting flushers are told.
struct InFlight<'a> {
    count: &'a AtomicUsize,
    finished: &'a Notify,
}

impl<'a> InFlight<'a> {
    fn start(count: &'a AtomicUsize, finished: &'a Notify) -> InFlight<'a> {
        count.fetch_add(1, Ordering::AcqRel);
        InFlight { count, finished }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
        self.finished.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Submits items `0..n` at once to a group that doubles them; each gets its own outcome.
    async fn submit_doubling(group: &Arc<GroupCommit<u32, u32>>, n: u32) {
        let tasks: Vec<_> = (0..n)
            .map(|i| {
                let group = group.clone();
                tokio::spawn(async move { (i, group.submit(i).await) })
            })
            .collect();
        for task in tasks {
            let (i, outcome) = task.await.unwrap();
            assert_eq!(outcome, Some(i * 2));
        }
    }

    // Tokio's clock, paused: it moves only when every task waits, so "item 1000 is in a flush
    // of its own before item 7 arrives" holds however busy the machine is.
    #[tokio::test(start_paused = true)]
    async fn patient_flushers_gather_one_group_per_flush_and_pass_a_stuck_one() {
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let group = Arc::new(GroupCommit::spawn_patient(
            2,
            64,
            Duration::from_millis(50),
            move |items: Vec<u32>| {
                counted.fetch_add(1, Ordering::Relaxed);
                async move {
                    // Item 1000 is stuck (a statement waiting on a lock).
                    let pause = if items.contains(&1000) { 3_000 } else { 5 };
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                    items.into_iter().map(|i| i * 2).collect()
                }
            },
        ));
        submit_doubling(&group, 100).await;
        let calls = calls.load(Ordering::Relaxed);
        assert!(calls < 50, "{calls} flushes for 100 concurrent items");
        // A stuck flush holds up only its own group.
        let stuck = {
            let group = group.clone();
            tokio::spawn(async move { group.submit(1000).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        let next = tokio::time::timeout(Duration::from_millis(2_000), group.submit(7)).await;
        assert_eq!(next, Ok(Some(14)));
        assert!(!stuck.is_finished());
    }

    #[tokio::test]
    async fn concurrent_items_share_flushes_and_get_their_own_outcomes() {
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let group = Arc::new(GroupCommit::spawn(1, 64, move |items: Vec<u32>| {
            counted.fetch_add(1, Ordering::Relaxed);
            async move {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                items.into_iter().map(|i| i * 2).collect()
            }
        }));
        submit_doubling(&group, 100).await;
        // 100 items through one flusher that takes 5 ms per call cannot need 100 calls.
        let calls = calls.load(Ordering::Relaxed);
        assert!(calls < 50, "{calls} flushes for 100 concurrent items");
    }

    #[tokio::test]
    async fn an_idle_queue_writes_an_item_alone_and_at_once() {
        let group = GroupCommit::spawn(2, 64, |items: Vec<u32>| async move {
            vec![items.len(); items.len()]
        });
        assert_eq!(group.submit(7).await, Some(1));
        assert_eq!(group.submit(8).await, Some(1));
    }

    #[tokio::test]
    async fn groups_never_exceed_the_maximum() {
        let group = Arc::new(GroupCommit::spawn(1, 8, |items: Vec<u32>| async move {
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            vec![items.len(); items.len()]
        }));
        let tasks: Vec<_> = (0..50u32)
            .map(|i| {
                let group = group.clone();
                tokio::spawn(async move { group.submit(i).await })
            })
            .collect();
        for task in tasks {
            let size = task.await.unwrap().unwrap();
            assert!((1..=8).contains(&size));
        }
    }
}
