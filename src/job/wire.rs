//! The OJS JSON form of a stored job ([OJS JSON format]).
//!
//! Attributes are written in a fixed order, then the job's unknown attributes in the order the
//! client sent them. Attributes without a value are omitted, except `errors`, which is `[]`. Client JSON (`args`, `meta`,
//! `result`, unknown attributes) is copied byte for byte, so two reads of an unchanged job are
//! byte-identical.
//!
//! [OJS JSON format]: https://github.com/openjobspec/spec/blob/main/spec/ojs-json-format.md#3-json-representation-of-a-job-envelope

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::value::RawValue;

use super::retry::RetryPolicy;
use super::{Job, JobState};
use crate::wire::json::{self, Object};
use crate::wire::timestamp;

/// The `specversion` every job is returned with.
pub const SPEC_VERSION: &str = "1.0.0-rc.1";

/// A job ready to be serialized, plus response-only fields.
#[derive(Clone, Copy)]
pub struct WireJob<'a> {
    job: &'a Job,
    previous_state: Option<JobState>,
    deduplicated: bool,
    admin_detail: bool,
}

/// A job answered both ways at once: wrapped as `{"job": {...}}`, as the OJS HTTP binding
/// requires, and with the same attributes beside `job` for clients that read a bare job (the
/// official Rust SDK's GET, cancel and dead-letter retry).
pub struct WrappedAndBare<'a>(WireJob<'a>);

impl Job {
    /// The job's OJS JSON form.
    pub fn wire(&self) -> WireJob<'_> {
        WireJob {
            job: self,
            previous_state: None,
            deduplicated: false,
            admin_detail: false,
        }
    }
}

impl<'a> WireJob<'a> {
    /// Adds the response-only `previous_state` (CANCEL, ACTIVATE).
    pub fn with_previous_state(mut self, state: JobState) -> Self {
        self.previous_state = Some(state);
        self
    }

    /// Adds the response-only `deduplicated: true` (unique `ignore`).
    pub fn deduplicated(mut self, yes: bool) -> Self {
        self.deduplicated = yes;
        self
    }

    /// Adds what the OJS admin UI's job detail reads: `retry_policy` (the `retry` object again)
    /// and `metadata`, the lifecycle timestamps the job has.
    pub fn with_admin_detail(mut self) -> Self {
        self.admin_detail = true;
        self
    }

    /// The job as `{"job": {...}}` with its attributes also beside `job`.
    pub fn wrapped_and_bare(self) -> WrappedAndBare<'a> {
        WrappedAndBare(self)
    }
}

impl Serialize for WrappedAndBare<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("job", &self.0)?;
        self.0.write_attributes(&mut map)?;
        map.end()
    }
}

/// jsonb columns come back with spaces after separators; send them compact like everything else.
fn compact_raw(raw: &RawValue) -> Box<RawValue> {
    match json::compact(raw.get().as_bytes(), usize::MAX) {
        Ok(std::borrow::Cow::Owned(bytes)) => {
            json::raw(String::from_utf8(bytes).unwrap_or_else(|_| "null".to_owned()))
        }
        _ => raw.to_owned(),
    }
}

impl Serialize for WireJob<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        self.write_attributes(&mut map)?;
        map.end()
    }
}

impl WireJob<'_> {
    /// Writes the job's attributes into an open JSON object.
    fn write_attributes<M: SerializeMap>(&self, map: &mut M) -> Result<(), M::Error> {
        let j = self.job;
        let ts = |t: chrono::DateTime<chrono::Utc>| timestamp::format(t);

        map.serialize_entry("specversion", SPEC_VERSION)?;
        map.serialize_entry("id", &j.id.to_string())?;
        map.serialize_entry("type", &j.r#type)?;
        map.serialize_entry("queue", &j.queue)?;
        map.serialize_entry("args", &j.args.0)?;
        map.serialize_entry("meta", &j.meta.0)?;
        map.serialize_entry("priority", &j.priority)?;
        map.serialize_entry("timeout", &((j.timeout_ms + 999) / 1000))?;
        map.serialize_entry("timeout_ms", &j.timeout_ms)?;
        map.serialize_entry("retry", RetryPolicy::effective_raw(&j.retry.0))?;
        if let Some(unique) = &j.unique_policy {
            map.serialize_entry("unique", &unique.0)?;
        }
        if let Some(tags) = &j.tags {
            map.serialize_entry("tags", tags)?;
        }
        if let Some(schema) = &j.schema_uri {
            map.serialize_entry("schema", schema)?;
        }
        if let Some(at) = j.scheduled_at {
            match &j.scheduled_at_input {
                Some(text) => map.serialize_entry("scheduled_at", text)?,
                None => map.serialize_entry("scheduled_at", &ts(at))?,
            }
        }
        if let Some(at) = j.expires_at {
            match &j.expires_at_input {
                Some(text) => map.serialize_entry("expires_at", text)?,
                None => map.serialize_entry("expires_at", &ts(at))?,
            }
        }
        if let Some(ms) = j.visibility_timeout_ms {
            map.serialize_entry("visibility_timeout_ms", &ms)?;
        }
        if let Some(secs) = j.enqueue_ttl_secs {
            map.serialize_entry("enqueue_ttl", &secs)?;
        }
        if let Some(secs) = j.total_timeout_secs {
            map.serialize_entry("total_timeout", &secs)?;
        }
        map.serialize_entry("state", &j.state)?;
        if let Some(previous) = self.previous_state {
            map.serialize_entry("previous_state", &previous)?;
        }
        map.serialize_entry("attempt", &j.attempt)?;
        map.serialize_entry("max_attempts", &j.max_attempts)?;
        map.serialize_entry("created_at", &ts(j.created_at))?;
        if let Some(at) = j.enqueued_at {
            map.serialize_entry("enqueued_at", &ts(at))?;
        }
        if let Some(at) = j.activated_at {
            map.serialize_entry("activated_at", &ts(at))?;
        }
        if let Some(at) = j.re_enqueued_at {
            map.serialize_entry("re_enqueued_at", &ts(at))?;
        }
        if let Some(queue) = &j.original_queue {
            map.serialize_entry("original_queue", queue)?;
        }
        if let Some(at) = j.started_at {
            map.serialize_entry("started_at", &ts(at))?;
        }
        if let Some(worker) = &j.worker_id {
            map.serialize_entry("worker_id", worker)?;
        }
        if j.state == JobState::Active
            && let Some(at) = j.visible_until
        {
            map.serialize_entry("visible_until", &ts(at))?;
        }
        if j.state == JobState::Retryable
            && let Some(at) = j.next_retry_at
        {
            let at = ts(at);
            map.serialize_entry("next_retry_at", &at)?;
            map.serialize_entry("next_attempt_at", &at)?;
        }
        if let Some(ms) = j.retry_delay_ms {
            map.serialize_entry("retry_delay_ms", &ms)?;
        }
        if let Some(at) = j.completed_at {
            map.serialize_entry("completed_at", &ts(at))?;
        }
        if let Some(at) = j.cancelled_at {
            map.serialize_entry("cancelled_at", &ts(at))?;
        }
        if let Some(at) = j.discarded_at {
            map.serialize_entry("discarded_at", &ts(at))?;
        }
        if let Some(at) = j.dead_lettered_at {
            map.serialize_entry("dead_lettered_at", &ts(at))?;
        }
        if let Some(result) = &j.result {
            map.serialize_entry("result", &result.0)?;
        }
        if let Some(error) = &j.error {
            map.serialize_entry("error", &compact_raw(&error.0))?;
        }
        // Always present, `[]` before any failure: clients (the admin UI among them) read its
        // length without a guard.
        map.serialize_entry("errors", &compact_raw(&j.errors.0))?;
        if let Some(key) = &j.unique_key {
            map.serialize_entry("unique_key", key)?;
        }
        if self.deduplicated {
            map.serialize_entry("deduplicated", &true)?;
        }
        if self.admin_detail {
            map.serialize_entry("retry_policy", RetryPolicy::effective_raw(&j.retry.0))?;
            map.serialize_entry("metadata", &Metadata(j))?;
        }
        if let Ok(extra) = Object::from_raw(&j.extra.0) {
            for (key, value) in extra.iter() {
                map.serialize_entry(key, value)?;
            }
        }
        Ok(())
    }
}

/// The lifecycle timestamps a job has, as one object.
struct Metadata<'a>(&'a Job);

impl Serialize for Metadata<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let j = self.0;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("created_at", &timestamp::format(j.created_at))?;
        for (key, at) in [
            ("enqueued_at", j.enqueued_at),
            ("scheduled_at", j.scheduled_at),
            ("started_at", j.started_at),
            ("completed_at", j.completed_at),
            ("cancelled_at", j.cancelled_at),
            ("discarded_at", j.discarded_at),
        ] {
            if let Some(at) = at {
                map.serialize_entry(key, &timestamp::format(at))?;
            }
        }
        map.end()
    }
}
