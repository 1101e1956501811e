//! Unique jobs: the `unique` attribute, see [OJS unique jobs].
//!
//! A unique policy names the dimensions of a job (`type` always, plus any of `queue`, `args`,
//! `meta`) whose canonical JSON is hashed into the job's `unique_key`. Another job with the same
//! key, in one of the policy's states and inside its period, is a duplicate; `on_conflict` says
//! what to do about it. The check and the insert are serialized per key with a
//! transaction-scoped advisory lock (see `store::locks::lock_unique_keys`).
//!
//! [OJS unique jobs]: https://github.com/openjobspec/spec/blob/main/spec/ojs-unique-jobs.md

use serde_json::Value;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};
use unicode_normalization::UnicodeNormalization;

use super::JobState;
use crate::wire::json::{self, Object};
use crate::wire::reader::wrong_type;
use crate::wire::{Reader, Violation};

/// What to do when an enqueue finds a duplicate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnConflict {
    /// Refuse the new job (409 `duplicate`).
    Reject,
    /// Return the existing job (200, `deduplicated: true`); nothing is created.
    Ignore,
    /// Cancel the existing job and create the new one (an active duplicate is kept: reject).
    Replace,
    /// Like replace, except an existing `scheduled` job is updated in place and keeps its time.
    ReplaceExceptSchedule,
}

/// A validated unique policy.
#[derive(Debug, Clone, PartialEq)]
pub struct UniquePolicy {
    /// Include `queue` in the fingerprint.
    pub by_queue: bool,
    /// Include `args` in the fingerprint.
    pub by_args: bool,
    /// Include `meta` in the fingerprint.
    pub by_meta: bool,
    /// Restrict the `args` dimension to these keys of its object elements.
    pub args_keys: Option<Vec<String>>,
    /// Restrict the `meta` dimension to these keys (required when `meta` is a dimension).
    pub meta_keys: Option<Vec<String>>,
    /// Window, measured from the existing job's `created_at`; `None` = forever.
    pub period_ms: Option<u64>,
    /// States in which an existing job counts as a duplicate.
    pub states: Vec<JobState>,
    /// Conflict resolution.
    pub on_conflict: OnConflict,
    /// Lower an existing duplicate's priority number to the new job's when that is more urgent.
    pub upgrade_priority: bool,
}

/// The dimensions a policy's `keys` may name.
const DIMENSIONS: [&str; 4] = ["type", "queue", "args", "meta"];

const DEFAULT_STATES: [JobState; 5] = [
    JobState::Available,
    JobState::Active,
    JobState::Scheduled,
    JobState::Retryable,
    JobState::Pending,
];

impl UniquePolicy {
    /// Parses a client `unique` object at `path`.
    pub fn parse(raw: &RawValue, path: &str) -> Result<UniquePolicy, Vec<Violation>> {
        let Ok(obj) = Object::from_raw(raw) else {
            return Err(vec![Violation::new(
                path,
                wrong_type("'unique'", "an object", raw),
            )]);
        };
        let mut v = Vec::new();
        let fields = Fields { obj, path };
        let mut policy = UniquePolicy {
            by_queue: false,
            by_args: false,
            by_meta: false,
            args_keys: None,
            meta_keys: None,
            period_ms: None,
            states: DEFAULT_STATES.to_vec(),
            on_conflict: OnConflict::Reject,
            upgrade_priority: false,
        };
        fields.dimensions(&mut policy, &mut Reader::new(&mut v));
        // `period` as a duration string, or `period_ms` (Go and Java SDKs).
        let field = |name: &str| fields.path_of(name);
        policy.period_ms = Reader::new(&mut v).positive_interval(&fields.obj, "period", &field);
        fields.conflicts(&mut policy, &mut Reader::new(&mut v));
        if v.is_empty() { Ok(policy) } else { Err(v) }
    }

    /// The job's `unique_key`: SHA-256 (lowercase hex) of the canonical JSON (RFC 8785, strings
    /// NFC-normalized) of the selected dimensions.
    pub fn fingerprint(
        &self,
        job_type: &str,
        queue: &str,
        args: &RawValue,
        meta: &RawValue,
        path: &str,
    ) -> Result<String, Violation> {
        let mut doc = serde_json::Map::new();
        doc.insert("type".to_owned(), Value::String(job_type.to_owned()));
        if self.by_queue {
            doc.insert("queue".to_owned(), Value::String(queue.to_owned()));
        }
        if self.by_args {
            let args: Value = json::decode(args).unwrap_or(Value::Null);
            let value = match &self.args_keys {
                None => args,
                Some(keys) => {
                    let reduced: Vec<Value> = args
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_object)
                        .map(|element| {
                            let picked: serde_json::Map<String, Value> = element
                                .iter()
                                .filter(|(k, _)| keys.contains(k))
                                .map(|(k, v)| (k.clone(), v.clone()))
                                .collect();
                            Value::Object(picked)
                        })
                        .collect();
                    if reduced
                        .iter()
                        .all(|o| o.as_object().is_some_and(|m| m.is_empty()))
                    {
                        return Err(Violation::new(
                            format!("{path}.args_keys"),
                            "none of unique.args_keys occurs in an object element of args",
                        ));
                    }
                    Value::Array(reduced)
                }
            };
            doc.insert("args".to_owned(), value);
        }
        if self.by_meta {
            let meta: Value = json::decode(meta).unwrap_or(Value::Null);
            let keys = self.meta_keys.as_deref().unwrap_or_default();
            let picked: serde_json::Map<String, Value> = meta
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(k, _)| keys.contains(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            doc.insert("meta".to_owned(), Value::Object(picked));
        }
        // A tenant's jobs are unique among its own jobs only: another tenant's duplicate is not
        // one (it would otherwise be answered with the other tenant's job).
        if let Some(tenant) = json::Object::from_raw(meta)
            .ok()
            .and_then(|m| crate::tenant::in_meta(&m))
        {
            doc.insert("tenant".to_owned(), Value::String(tenant));
        }
        let canonical = serde_jcs::to_string(&nfc(Value::Object(doc)))
            .map_err(|e| Violation::new(path, format!("cannot fingerprint the job: {e}")))?;
        Ok(hex::encode(Sha256::digest(canonical.as_bytes())))
    }
}

/// NFC-normalizes every string (keys included) so that canonically equal text hashes equally.
fn nfc(value: Value) -> Value {
    match value {
        Value::String(s) => Value::String(s.nfc().collect()),
        Value::Array(items) => Value::Array(items.into_iter().map(nfc).collect()),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k.nfc().collect(), nfc(v)))
                .collect(),
        ),
        other => other,
    }
}

/// The members of a `unique` object at `path`, read field by field.
struct Fields<'a> {
    obj: Object<'a>,
    path: &'a str,
}

impl Fields<'_> {
    fn path_of(&self, name: &str) -> String {
        format!("{}.{name}", self.path)
    }

    /// The array of strings `name`, when given.
    fn string_list(&self, name: &str, r: &mut Reader<'_>) -> Option<Vec<String>> {
        let raw = self.obj.get(name)?;
        let list = json::decode::<Vec<String>>(raw).ok();
        r.required(
            self.path_of(name),
            list,
            format!("unique.{name} must be an array of strings"),
        )
    }

    /// What makes two jobs the same: `keys` (the dimensions), `key` (args keys, or the
    /// dimensions when it names only those), `args_keys` and `meta_keys`.
    fn dimensions(&self, policy: &mut UniquePolicy, r: &mut Reader<'_>) {
        if let Some(keys) = self.string_list("keys", r) {
            self.set_dimensions(&keys, policy, r, "keys");
        }
        // `key`, the spelling of the OJS JSON format's unique policy object: names of fields
        // inside args objects, as `args_keys` (so the Go and Java SDKs send it).
        // https://github.com/openjobspec/spec/blob/main/spec/ojs-json-format.md#35-unique-policy-object
        // The Python SDK sends its dimensions there instead (`["type", "queue", "args"]` by
        // default): a `key` made only of dimension names is read as `keys`.
        if let Some(key) = self.string_list("key", r) {
            if !key.is_empty() && key.iter().all(|k| DIMENSIONS.contains(&k.as_str())) {
                self.set_dimensions(&key, policy, r, "key");
            } else {
                policy.by_args = true;
                policy.args_keys = Some(key);
            }
        }
        if let Some(args_keys) = self.string_list("args_keys", r) {
            policy.by_args = true;
            policy.args_keys = Some(args_keys);
        }
        if policy.args_keys.as_ref().is_some_and(Vec::is_empty) {
            r.refuse(
                self.path_of("args_keys"),
                "unique.args_keys must not be empty",
            );
        }
        policy.meta_keys = self.string_list("meta_keys", r);
        if policy.by_meta && policy.meta_keys.as_ref().is_none_or(Vec::is_empty) {
            r.refuse(
                self.path_of("meta_keys"),
                "unique.meta_keys must list at least one key when meta is a unique dimension",
            );
        }
    }

    /// The dimensions `keys` (of the member `name`) name.
    fn set_dimensions(
        &self,
        keys: &[String],
        policy: &mut UniquePolicy,
        r: &mut Reader<'_>,
        name: &str,
    ) {
        for key in keys {
            match key.as_str() {
                "type" => {}
                "queue" => policy.by_queue = true,
                "args" => policy.by_args = true,
                "meta" => policy.by_meta = true,
                other => r.refuse(
                    self.path_of(name),
                    format!("unique.{name} may contain type, queue, args and meta, not {other:?}"),
                ),
            }
        }
    }

    /// Which jobs a new one conflicts with (`states`) and what it does then (`on_conflict`,
    /// `upgrade_priority`).
    fn conflicts(&self, policy: &mut UniquePolicy, r: &mut Reader<'_>) {
        if let Some(states) = self.string_list("states", r) {
            let parsed: Option<Vec<JobState>> = states.iter().map(|s| JobState::parse(s)).collect();
            if let Some(list) = r.required(
                self.path_of("states"),
                parsed.filter(|list| !list.is_empty()),
                "unique.states must be a non-empty list of job state names",
            ) {
                policy.states = list;
            }
        }
        if let Some(raw) = self.obj.get("on_conflict") {
            let on_conflict = match json::decode::<String>(raw).as_deref() {
                Ok("reject") => Some(OnConflict::Reject),
                Ok("ignore" | "use_existing") => Some(OnConflict::Ignore),
                Ok("replace") => Some(OnConflict::Replace),
                Ok("replace_except_schedule") => Some(OnConflict::ReplaceExceptSchedule),
                _ => None,
            };
            if let Some(on_conflict) = r.required(
                self.path_of("on_conflict"),
                on_conflict,
                "unique.on_conflict must be reject, ignore, replace or replace_except_schedule",
            ) {
                policy.on_conflict = on_conflict;
            }
        }
        if let Some(raw) = self.obj.get("upgrade_priority") {
            let upgrade = json::decode::<bool>(raw).ok();
            if let Some(upgrade) = r.required(
                self.path_of("upgrade_priority"),
                upgrade,
                "unique.upgrade_priority must be a boolean",
            ) {
                policy.upgrade_priority = upgrade;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Box<RawValue> {
        serde_json::from_str(text).unwrap()
    }

    fn parse(text: &str) -> Result<UniquePolicy, Vec<Violation>> {
        UniquePolicy::parse(&raw(text), "$.unique")
    }

    fn key(policy: &str, job_type: &str, queue: &str, args: &str, meta: &str) -> String {
        parse(policy)
            .unwrap()
            .fingerprint(job_type, queue, &raw(args), &raw(meta), "$.unique")
            .unwrap()
    }

    #[test]
    fn defaults() {
        let p = parse("{}").unwrap();
        assert!(!p.by_args && !p.by_queue && !p.by_meta);
        assert_eq!(p.on_conflict, OnConflict::Reject);
        assert_eq!(p.states, DEFAULT_STATES);
        assert_eq!(p.period_ms, None);
    }

    #[test]
    fn key_names_args_fields_unless_it_lists_only_dimensions() {
        // Go and Java: fields inside args objects.
        let fields = parse(r#"{"key":["user_id"]}"#).unwrap();
        assert!(fields.by_args && !fields.by_queue);
        assert_eq!(fields.args_keys, Some(vec!["user_id".to_owned()]));
        // Python: the dimensions, as `keys`.
        let dims = parse(r#"{"key":["type","queue","args"]}"#).unwrap();
        assert!(dims.by_args && dims.by_queue && !dims.by_meta);
        assert_eq!(dims.args_keys, None);
        assert_eq!(
            key(r#"{"key":["type","queue","args"]}"#, "t", "q", "[1]", "{}"),
            key(r#"{"keys":["type","queue","args"]}"#, "t", "q", "[1]", "{}")
        );
        assert!(
            parse(r#"{"key":["type","meta"]}"#).is_err(),
            "meta needs meta_keys"
        );
    }

    #[test]
    fn parse_errors() {
        assert!(parse(r#"{"keys":["type","color"]}"#).is_err());
        assert!(parse(r#"{"keys":["meta"]}"#).is_err());
        assert!(parse(r#"{"on_conflict":"merge"}"#).is_err());
        assert!(parse(r#"{"period":"forever"}"#).is_err());
        assert!(parse(r#"{"states":["done"]}"#).is_err());
        assert!(parse(r#"{"states":[]}"#).is_err());
        assert!(parse(r#"[]"#).is_err());
        assert_eq!(
            parse(r#"{"on_conflict":"use_existing"}"#)
                .unwrap()
                .on_conflict,
            OnConflict::Ignore
        );
        assert_eq!(
            parse(r#"{"period":"PT1H"}"#).unwrap().period_ms,
            Some(3_600_000)
        );
    }

    #[test]
    fn type_only_ignores_args_and_queue() {
        let a = key("{}", "email.send", "q1", "[1]", "{}");
        let b = key("{}", "email.send", "q2", "[2]", "{}");
        assert_eq!(a, b);
        assert_ne!(a, key("{}", "email.other", "q1", "[1]", "{}"));
        assert_eq!(a.len(), 64);
    }

    #[test]
    fn args_dimension_is_canonical() {
        let p = r#"{"keys":["type","args"]}"#;
        assert_eq!(
            key(p, "t", "q", r#"[{"a":1,"b":2.0}]"#, "{}"),
            key(p, "t", "q", r#"[{"b":2,"a":1}]"#, "{}")
        );
        assert_ne!(key(p, "t", "q", "[1]", "{}"), key(p, "t", "q", "[2]", "{}"));
        // NFC: "é" precomposed and decomposed are the same text.
        assert_eq!(
            key(p, "t", "q", "[\"\u{e9}\"]", "{}"),
            key(p, "t", "q", "[\"e\u{301}\"]", "{}")
        );
    }

    #[test]
    fn args_keys_select_fields_of_object_elements() {
        let p = r#"{"key":["user_id"]}"#;
        assert_eq!(
            key(p, "t", "q", r#"[{"user_id":1,"at":"x"}]"#, "{}"),
            key(p, "t", "q", r#"[{"user_id":1,"at":"y"},"ignored"]"#, "{}")
        );
        let err = parse(p)
            .unwrap()
            .fingerprint("t", "q", &raw(r#"["no objects"]"#), &raw("{}"), "$.unique")
            .unwrap_err();
        assert!(err.message.contains("args_keys"));
    }

    #[test]
    fn meta_keys_select_meta_fields() {
        let p = r#"{"keys":["meta"],"meta_keys":["tenant"]}"#;
        assert_eq!(
            key(p, "t", "q", "[]", r#"{"tenant":"a","trace":"1"}"#),
            key(p, "t", "q", "[]", r#"{"trace":"2","tenant":"a"}"#)
        );
        assert_ne!(
            key(p, "t", "q", "[]", r#"{"tenant":"a"}"#),
            key(p, "t", "q", "[]", r#"{"tenant":"b"}"#)
        );
    }

    #[test]
    fn two_tenants_jobs_are_never_duplicates_of_each_other() {
        let p = r#"{"keys":["type","args"]}"#;
        let (a, b) = (r#"{"tenant_id":"a"}"#, r#"{"tenant_id":"b"}"#);
        assert_ne!(key(p, "t", "q", "[1]", a), key(p, "t", "q", "[1]", b));
        assert_eq!(
            key(p, "t", "q", "[1]", a),
            key(p, "t", "q", "[1]", r#"{"x":1,"tenant_id":"a"}"#)
        );
        // Without a tenant, the key is what it always was.
        assert_eq!(
            key(p, "t", "q", "[1]", "{}"),
            key(p, "t", "q", "[1]", r#"{"tenant_id":""}"#)
        );
    }
}
