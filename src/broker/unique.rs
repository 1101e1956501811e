//! PUSH of jobs with a unique policy: a pure planner decides what each job of the request
//! becomes given the existing jobs of its keys, then [`Enqueuer::push_unique`] carries the plan
//! out in one transaction, under the keys' locks.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::enqueue::{Enqueuer, PushOutcome, Pushed, insert_jobs};
use crate::error::{Error, Result};
use crate::job::envelope::NewJob;
use crate::job::lifecycle::initial_state;
use crate::job::unique::OnConflict;
use crate::job::{Job, JobState};
use crate::store;

/// What one job of a PUSH with unique policies becomes.
#[derive(Debug, Clone)]
pub enum UniquePlan {
    /// A new job.
    Create,
    /// Nothing new: the existing job answers (unique `ignore`); with `raise_priority`, its
    /// priority is first raised to the new job's (`upgrade_priority`).
    Existing {
        job: Job,
        raise_priority: Option<i32>,
    },
    /// Unique `ignore` against an earlier job of the same request: answered with that one.
    SameAs(usize),
    /// Unique `replace_except_schedule` of a still-scheduled job: its input is overwritten,
    /// it keeps its id and time.
    ReplaceInPlace(Job),
    /// Unique `replace`: the existing job is cancelled and a new one created.
    CancelThenCreate(Job),
}

/// Plans a PUSH of `jobs` against `candidates`, the most recent existing job of each of their
/// keys in each state, as read under the keys' locks. `db_now` is the database clock when a
/// candidate was read (periods are measured against it); `now` decides the initial states of
/// the request's own jobs. Refuses the whole request (`DuplicateUnique`) when a job's
/// `on_conflict` is `reject` and a duplicate exists, or when a replacement would hit a running
/// job or a job of the same request.
pub fn plan_unique(
    jobs: &[NewJob],
    candidates: &[Job],
    db_now: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Result<Vec<UniquePlan>> {
    let batch = jobs.len() > 1;
    let mut plans: Vec<UniquePlan> = Vec::with_capacity(jobs.len());
    // Unique keys taken by earlier jobs of this request.
    let mut planned: HashMap<&str, usize> = HashMap::new();
    for (index, job) in jobs.iter().enumerate() {
        let index_hint = batch.then_some(index);
        let Some(unique) = &job.unique else {
            plans.push(UniquePlan::Create);
            continue;
        };
        if let Some(&earlier) = planned.get(unique.key.as_str()) {
            let earlier_state = initial_state(&jobs[earlier], now);
            if unique.policy.states.contains(&earlier_state) {
                if unique.policy.on_conflict == OnConflict::Ignore {
                    plans.push(UniquePlan::SameAs(earlier));
                    continue;
                }
                // Rejected, and replacing a job created by the same request is refused too.
                return Err(Error::DuplicateUnique {
                    existing: jobs[earlier].id,
                    existing_state: earlier_state,
                    unique_key: unique.key.clone(),
                    index: index_hint,
                });
            }
        }
        let duplicate = candidates
            .iter()
            .filter(|c| c.unique_key.as_deref() == Some(unique.key.as_str()))
            .filter(|c| unique.policy.states.contains(&c.state))
            .filter(|c| match (unique.policy.period_ms, db_now) {
                (Some(period), Some(db_now)) => {
                    c.created_at + chrono::Duration::milliseconds(period as i64) > db_now
                }
                _ => true,
            })
            .max_by_key(|c| c.created_at);
        let plan = match duplicate {
            None => UniquePlan::Create,
            Some(existing) => {
                let reject = || Error::DuplicateUnique {
                    existing: existing.id,
                    existing_state: existing.state,
                    unique_key: unique.key.clone(),
                    index: index_hint,
                };
                match unique.policy.on_conflict {
                    OnConflict::Reject => return Err(reject()),
                    OnConflict::Ignore => UniquePlan::Existing {
                        job: existing.clone(),
                        raise_priority: (unique.policy.upgrade_priority
                            && job.priority < existing.priority)
                            .then_some(job.priority),
                    },
                    // A running job is never replaced under the worker's feet.
                    _ if existing.state == JobState::Active => return Err(reject()),
                    OnConflict::ReplaceExceptSchedule if existing.state == JobState::Scheduled => {
                        UniquePlan::ReplaceInPlace(existing.clone())
                    }
                    OnConflict::Replace | OnConflict::ReplaceExceptSchedule => {
                        if existing.state.is_terminal() {
                            // Nothing to cancel: a finished job only blocks while in `states`.
                            UniquePlan::Create
                        } else {
                            UniquePlan::CancelThenCreate(existing.clone())
                        }
                    }
                }
            }
        };
        if matches!(plan, UniquePlan::Create | UniquePlan::CancelThenCreate(_)) {
            planned.insert(unique.key.as_str(), index);
        }
        plans.push(plan);
    }
    Ok(plans)
}

/// A replaced job was claimed meanwhile (it is active now): it is kept, and the PUSH refused.
fn claimed_meanwhile(existing: &Job, index: usize, batch: bool) -> Error {
    Error::DuplicateUnique {
        existing: existing.id,
        existing_state: JobState::Active,
        unique_key: existing.unique_key.clone().unwrap_or_default(),
        index: batch.then_some(index),
    }
}

impl Enqueuer {
    /// PUSH when some jobs carry a unique policy: plans and writes under per-key locks.
    pub(super) async fn push_unique(&self, jobs: &[NewJob], batch: bool) -> Result<Vec<Pushed>> {
        let mut tx = self.db.begin().await?;
        let keys: Vec<&str> = jobs
            .iter()
            .filter_map(|j| j.unique.as_ref().map(|u| u.key.as_str()))
            .collect();
        store::locks::lock_unique_keys(&mut *tx, &keys).await?;
        // A replacement in place may move a job to a queue that has no row yet (new jobs
        // register theirs as they are inserted). Strict queues are never created this way.
        if !self.strict_queues {
            let mut queues: Vec<&str> = jobs.iter().map(|j| j.queue.as_str()).collect();
            queues.sort_unstable();
            queues.dedup();
            for queue in queues {
                crate::telemetry::queues_created(i64::from(
                    store::queue::ensure(&mut *tx, queue, true).await?,
                ));
            }
        }
        let (candidates, db_now) = store::job::unique_candidates(&mut *tx, &keys).await?;
        let mut plans = plan_unique(jobs, &candidates, db_now, Utc::now())?;

        let mut raised_jobs: Vec<Job> = Vec::new();
        for plan in &mut plans {
            if let UniquePlan::Existing {
                job,
                raise_priority: Some(priority),
            } = plan
                && let Some(raised) = store::job::set_priority(&mut *tx, job.id, *priority, true)
                    .await?
                    .and_then(|change| change.job)
            {
                raised_jobs.push(raised.clone());
                *job = raised;
            }
        }

        let to_cancel: Vec<Uuid> = plans
            .iter()
            .filter_map(|p| match p {
                UniquePlan::CancelThenCreate(existing) => Some(existing.id.0),
                _ => None,
            })
            .collect();
        if !to_cancel.is_empty() {
            let cancelled = store::job::cancel_replaced(&mut *tx, &to_cancel).await?;
            if cancelled.len() != to_cancel.len() {
                let done: HashSet<Uuid> = cancelled.iter().map(|j| j.id.0).collect();
                let (index, existing) = plans
                    .iter()
                    .enumerate()
                    .find_map(|(i, p)| match p {
                        UniquePlan::CancelThenCreate(e) if !done.contains(&e.id.0) => Some((i, e)),
                        _ => None,
                    })
                    .expect("a job that was not cancelled is among the planned ones");
                return Err(claimed_meanwhile(existing, index, batch));
            }
        }

        let mut replaced: HashMap<usize, Job> = HashMap::new();
        let mut create_indexes: Vec<usize> = Vec::new();
        for (index, plan) in plans.iter().enumerate() {
            match plan {
                UniquePlan::Create | UniquePlan::CancelThenCreate(_) => create_indexes.push(index),
                UniquePlan::ReplaceInPlace(existing) => {
                    match store::job::replace_scheduled(&mut *tx, existing.id, &jobs[index]).await?
                    {
                        Some(job) => {
                            replaced.insert(index, job);
                        }
                        // Promoted meanwhile: replace it like any available job.
                        None => {
                            let cancelled =
                                store::job::cancel_replaced(&mut *tx, &[existing.id.0]).await?;
                            if cancelled.is_empty() {
                                return Err(claimed_meanwhile(existing, index, batch));
                            }
                            create_indexes.push(index);
                        }
                    }
                }
                UniquePlan::Existing { .. } | UniquePlan::SameAs(_) => {}
            }
        }
        create_indexes.sort_unstable();
        let to_create: Vec<NewJob> = create_indexes.iter().map(|&i| jobs[i].clone()).collect();
        let created = insert_jobs(&mut *tx, &to_create, self.strict_queues).await?;
        super::enqueue::admit_tenants(&mut tx, &to_create).await?;
        tx.commit().await?;
        for job in &raised_jobs {
            self.announcer.moved(job);
        }

        let created: HashMap<usize, Job> = create_indexes.into_iter().zip(created).collect();
        let out = plans
            .into_iter()
            .enumerate()
            .map(|(index, plan)| match plan {
                UniquePlan::Existing { job, .. } => Pushed {
                    job,
                    outcome: PushOutcome::Deduplicated,
                },
                UniquePlan::SameAs(earlier) => Pushed {
                    job: created[&earlier].clone(),
                    outcome: PushOutcome::Deduplicated,
                },
                UniquePlan::ReplaceInPlace(_) if replaced.contains_key(&index) => Pushed {
                    job: replaced.remove(&index).expect("checked"),
                    outcome: PushOutcome::ReplacedInPlace,
                },
                _ => Pushed {
                    job: created[&index].clone(),
                    outcome: PushOutcome::Created,
                },
            })
            .collect();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeDelta;
    use serde_json::value::RawValue;
    use sqlx::types::Json;

    use super::*;
    use crate::job::envelope;
    use crate::job::{JobId, RawJson};

    fn new_job(text: &str) -> NewJob {
        envelope::parse_for_test(text)
    }

    fn raw(text: &str) -> RawJson {
        Json(RawValue::from_string(text.to_owned()).unwrap())
    }

    /// An existing job of `like`'s unique key.
    fn existing(like: &NewJob, state: JobState, created_at: DateTime<Utc>, priority: i32) -> Job {
        Job {
            id: JobId::generate(),
            seq: 1,
            r#type: like.r#type.clone(),
            queue: like.queue.clone(),
            args: raw("[]"),
            meta: raw("{}"),
            priority,
            state,
            attempt: 0,
            max_attempts: 3,
            retry: raw("{}"),
            timeout_ms: 1_000,
            visibility_timeout_ms: None,
            scheduled_at: None,
            scheduled_at_input: None,
            expires_at: None,
            expires_at_input: None,
            enqueue_ttl_secs: None,
            total_timeout_secs: None,
            tags: None,
            schema_uri: None,
            unique_policy: None,
            unique_key: like.unique.as_ref().map(|u| u.key.clone()),
            extra: raw("{}"),
            created_at,
            enqueued_at: Some(created_at),
            activated_at: None,
            started_at: None,
            visible_until: None,
            reservation_ms: None,
            worker_id: None,
            next_retry_at: None,
            retry_delay_ms: None,
            completed_at: None,
            cancelled_at: None,
            discarded_at: None,
            dead_lettered_at: None,
            result: None,
            error: None,
            errors: raw("[]"),
            timeout_at: None,
            claim_deadline_at: None,
            total_deadline_at: None,
            re_enqueued_at: None,
            priority_aging_ms: None,
            original_queue: None,
            capacity_tracked: None,
            pool: None,
            tenant_fair: None,
            tenant: None,
            fair_key: None,
            rate_key: None,
            rate_held: None,
            lease_id: None,
            phase: crate::job::JobPhase::of(state),
            in_flight: None,
            result_awaited: None,
            durable: None,
        }
    }

    fn unique_job(unique: &str, priority: i32) -> NewJob {
        new_job(&format!(
            r#"{{"type":"report.build","args":[1],"priority":{priority},"unique":{unique}}}"#
        ))
    }

    fn kinds(plans: &[UniquePlan]) -> Vec<String> {
        plans
            .iter()
            .map(|p| match p {
                UniquePlan::Create => "create".to_owned(),
                UniquePlan::Existing { raise_priority, .. } => {
                    format!("existing {raise_priority:?}")
                }
                UniquePlan::SameAs(i) => format!("same as {i}"),
                UniquePlan::ReplaceInPlace(_) => "replace in place".to_owned(),
                UniquePlan::CancelThenCreate(_) => "cancel then create".to_owned(),
            })
            .collect()
    }

    #[test]
    fn without_duplicates_every_job_is_created_once_per_key() {
        let now = Utc::now();
        let ignore = unique_job(r#"{"on_conflict":"ignore"}"#, 2);
        let plain = new_job(r#"{"type":"report.build","args":[1]}"#);
        let plans = plan_unique(&[ignore.clone(), plain, ignore], &[], None, now).unwrap();
        assert_eq!(kinds(&plans), ["create", "create", "same as 0"]);
    }

    #[test]
    fn a_duplicate_is_rejected_ignored_or_replaced_by_the_policy() {
        let now = Utc::now();
        let reject = unique_job(r#"{"on_conflict":"reject"}"#, 2);
        let waiting = existing(&reject, JobState::Available, now, 2);
        match plan_unique(
            std::slice::from_ref(&reject),
            std::slice::from_ref(&waiting),
            Some(now),
            now,
        ) {
            Err(Error::DuplicateUnique {
                existing,
                index: None,
                ..
            }) => {
                assert_eq!(existing, waiting.id);
            }
            other => panic!("{other:?}"),
        }
        let ignore = unique_job(r#"{"on_conflict":"ignore"}"#, 2);
        let waiting = existing(&ignore, JobState::Available, now, 2);
        let plans = plan_unique(&[ignore], &[waiting], Some(now), now).unwrap();
        assert_eq!(kinds(&plans), ["existing None"]);

        let replace = unique_job(r#"{"on_conflict":"replace"}"#, 2);
        let waiting = existing(&replace, JobState::Available, now, 2);
        let plans = plan_unique(std::slice::from_ref(&replace), &[waiting], Some(now), now);
        assert_eq!(kinds(&plans.unwrap()), ["cancel then create"]);
        // A running job is never replaced.
        let running = existing(&replace, JobState::Active, now, 2);
        assert!(plan_unique(&[replace], &[running], Some(now), now).is_err());

        let except = unique_job(r#"{"on_conflict":"replace_except_schedule"}"#, 2);
        let scheduled = existing(&except, JobState::Scheduled, now, 2);
        let plans = plan_unique(&[except], &[scheduled], Some(now), now).unwrap();
        assert_eq!(kinds(&plans), ["replace in place"]);
    }

    #[test]
    fn ignore_raises_the_existing_job_only_when_asked_and_more_urgent() {
        let now = Utc::now();
        let upgrade = unique_job(r#"{"on_conflict":"ignore","upgrade_priority":true}"#, 0);
        let waiting = existing(&upgrade, JobState::Available, now, 5);
        let plans = plan_unique(std::slice::from_ref(&upgrade), &[waiting], Some(now), now);
        assert_eq!(kinds(&plans.unwrap()), ["existing Some(0)"]);
        let urgent = existing(&upgrade, JobState::Available, now, 0);
        let plans = plan_unique(std::slice::from_ref(&upgrade), &[urgent], Some(now), now);
        assert_eq!(kinds(&plans.unwrap()), ["existing None"]);
        let plain = unique_job(r#"{"on_conflict":"ignore"}"#, 0);
        let waiting = existing(&plain, JobState::Available, now, 5);
        let plans = plan_unique(&[plain], &[waiting], Some(now), now);
        assert_eq!(kinds(&plans.unwrap()), ["existing None"]);
    }

    #[test]
    fn only_duplicates_in_the_policy_states_and_period_count() {
        let now = Utc::now();
        let job = unique_job(r#"{"on_conflict":"reject","period":"PT1H"}"#, 2);
        let old = existing(&job, JobState::Available, now - TimeDelta::hours(2), 2);
        let finished = existing(&job, JobState::Completed, now, 2);
        let plans = plan_unique(&[job], &[old, finished], Some(now), now).unwrap();
        assert_eq!(kinds(&plans), ["create"]);
    }

    #[test]
    fn a_request_may_not_replace_its_own_job() {
        let now = Utc::now();
        let replace = unique_job(r#"{"on_conflict":"replace"}"#, 2);
        match plan_unique(&[replace.clone(), replace], &[], None, now) {
            Err(Error::DuplicateUnique {
                index: Some(1),
                existing_state,
                ..
            }) => {
                assert_eq!(existing_state, JobState::Available);
            }
            other => panic!("{other:?}"),
        }
    }
}
