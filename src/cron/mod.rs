//! Cron entries ([OJS cron]): named, persistent registrations that enqueue a job from a
//! template on a schedule. What an entry is and how a registration body is validated into a
//! [`Definition`]; when it fires is [`mod@schedule`]; the time zones it accepts, [`zone`].
//!
//! Firing (exactly once per occurrence, across replicas) is the broker's `cron` component; the
//! tables are `ojs_cron` (the entries) and `ojs_cron_run` (one row per occurrence that came
//! due: the run ledger).
//!
//! [OJS cron]: https://github.com/openjobspec/spec/blob/main/spec/ojs-cron.md

pub mod schedule;
pub mod zone;

use serde_json::value::RawValue;

pub use schedule::{Due, Occurrence, Schedule};

use crate::job::envelope::{self, Limits, NewJob, Rejection};
use crate::wire::json::{self, Kind, Object};
use crate::wire::names;
use crate::wire::{Reader, Violation};

/// Longest entry name.
pub const MAX_NAME_LEN: usize = 255;
/// Longest description, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 10_000;
/// Zone of an entry that names none.
pub const DEFAULT_ZONE: &str = "UTC";

/// Keys of a registration body that describe the entry; every other top-level key belongs to
/// the job template when the body has no `job_template`.
const ENTRY_KEYS: &[&str] = &[
    "name",
    "expression",
    "cron",
    "schedule",
    "timezone",
    "overlap_policy",
    "enabled",
    "description",
    "job_template",
];

/// Read-only fields a client may echo back; ignored.
const SYSTEM_KEYS: &[&str] = &[
    "last_run_at",
    "next_run_at",
    "run_count",
    "created_at",
    "updated_at",
    "id",
];

/// Template attributes an entry refuses: each run is a new job, made when its occurrence is
/// due.
const TEMPLATE_REFUSED: &[(&str, &str)] = &[
    ("id", "each run is a new job with its own id"),
    (
        "scheduled_at",
        "a run is enqueued when its occurrence is due",
    ),
    (
        "delay_until",
        "a run is enqueued when its occurrence is due",
    ),
    (
        "unique",
        "overlapping runs are governed by the entry's overlap_policy",
    ),
];

/// What happens to an occurrence that falls due while an earlier run of the entry is active.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverlapPolicy {
    /// No run for this occurrence (`cron.skipped`, reason `overlap_skip`).
    Skip,
    /// Enqueue anyway: runs may overlap.
    Allow,
    /// Cancel the active runs, then enqueue.
    CancelPrevious,
    /// Enqueue, held (`pending`) until every earlier run has finished: runs never overlap and
    /// none is lost.
    Enqueue,
}

names!(OverlapPolicy {
    Skip => "skip",
    Allow => "allow",
    CancelPrevious => "cancel_previous",
    Enqueue => "enqueue",
});

impl OverlapPolicy {
    /// The policy named `name` (`cancel` is an alias of `cancel_previous`).
    pub fn parse(name: &str) -> Option<OverlapPolicy> {
        match name {
            "cancel" => Some(OverlapPolicy::CancelPrevious),
            _ => OverlapPolicy::from_name(name),
        }
    }
}

/// A validated registration.
#[derive(Debug, Clone)]
pub struct Definition {
    pub name: String,
    /// The expression as given (trimmed).
    pub expression: String,
    pub timezone: String,
    pub schedule: Schedule,
    pub overlap: OverlapPolicy,
    pub enabled: bool,
    pub description: Option<String>,
    /// The enqueue body every run is made from: a compact JSON object without `id`.
    pub template: String,
    /// The tenant the entry belongs to (the registration's): its template's `meta.tenant_id`
    /// names it, so every run is the tenant's job.
    pub tenant: Option<String>,
}

impl Definition {
    /// The job of one run: the template with `meta.cron_name` and `meta.cron_triggered_at`
    /// (the occurrence's instant) added over any the template has.
    pub fn job(
        name: &str,
        template: &str,
        slot: chrono::DateTime<chrono::Utc>,
        limits: &Limits,
    ) -> Result<NewJob, Rejection> {
        let obj = Object::parse(template).map_err(|e| {
            Rejection::Invalid(vec![Violation::new(
                "$.job_template",
                format!("the stored template is not a JSON object: {e}"),
            )])
        })?;
        let mut job = envelope::parse(&obj, limits)?;
        let meta = Object::parse(&job.meta).map_err(|e| {
            Rejection::Invalid(vec![Violation::new("$.job_template.meta", e.to_string())])
        })?;
        let name = json::raw(serde_json::Value::from(name).to_string());
        let at =
            json::raw(serde_json::Value::from(crate::wire::timestamp::format(slot)).to_string());
        let added = [("cron_name", &*name), ("cron_triggered_at", &*at)];
        job.meta = json::object_text(
            meta.iter()
                .filter(|(key, _)| !added.iter().any(|(k, _)| k == key))
                .chain(added),
        );
        Ok(job)
    }
}

/// Whether `name` may name an entry: `[a-z0-9][a-z0-9.-]*`, at most 255 characters.
pub fn is_valid_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_NAME_LEN
        && bytes[0].is_ascii_lowercase() | bytes[0].is_ascii_digit()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-' || *b == b'.')
}

/// Validates a registration body (the whole of it, every problem reported at once).
///
/// The entry's fields are `name`, `expression` (alias `cron`; also `schedule`, the admin UI's
/// name), `timezone`, `overlap_policy`, `enabled`, `description`; the job is `job_template`, or
/// else every other top-level attribute (`type`, `args`, `meta`, `options`, ...). Read-only
/// fields echoed back (`next_run_at`, `run_count`, ...) are ignored.
///
/// A template larger than `max_template_bytes` (compact; the server's largest enqueue envelope)
/// is refused as too large.
pub fn parse(
    obj: &Object<'_>,
    limits: &Limits,
    max_template_bytes: usize,
    tenant: Option<&str>,
) -> Result<Definition, Rejection> {
    let mut v: Vec<Violation> = Vec::new();
    let mut r = Reader::new(&mut v);
    let name = entry_name(obj, &mut r);
    let expression = expression(obj, &mut r);
    let (timezone, schedule) = schedule(obj, expression.as_ref(), &mut r);
    let overlap = overlap(obj, &mut r);
    let enabled = obj.get("enabled").is_none_or(|raw| {
        r.decode::<bool>("$.enabled", "'enabled'", "true or false", raw)
            .unwrap_or(true)
    });
    let description = description(obj, &mut r);
    let template = template(obj, limits, tenant, &mut v).and_then(|text| {
        if text.len() > max_template_bytes {
            Err(Rejection::TooLarge {
                field: "job_template",
                size: text.len(),
                max: max_template_bytes,
            })
        } else {
            Ok(text)
        }
    });
    if !v.is_empty() {
        return Err(Rejection::Invalid(v));
    }
    let template = template?;
    let (Some((_, expression)), Some(timezone), Some(schedule)) = (expression, timezone, schedule)
    else {
        // Each is recorded as a violation when missing.
        return Err(Rejection::Invalid(vec![Violation::new(
            "$.expression",
            "the expression could not be read",
        )]));
    };
    Ok(Definition {
        name,
        expression,
        timezone,
        schedule,
        overlap,
        enabled,
        description,
        template,
        tenant: tenant.map(str::to_owned),
    })
}

/// The entry's name; empty when missing or invalid (a violation is recorded).
fn entry_name(obj: &Object<'_>, r: &mut Reader<'_>) -> String {
    let Some(name) = string(obj, "name", r) else {
        if !obj.contains("name") {
            r.refuse("$.name", "'name' is required");
        }
        return String::new();
    };
    r.check(
        "$.name",
        name,
        |name| is_valid_name(name),
        |name| {
            format!(
                "name {name:?} is invalid: use 1-255 characters of lowercase letters, digits, \
             '-' and '.', starting with a letter or digit"
            )
        },
    )
    .unwrap_or_default()
}

/// The expression and the key it was sent under (`expression`, `cron` or `schedule`; several
/// may be sent if they agree).
fn expression(obj: &Object<'_>, r: &mut Reader<'_>) -> Option<(String, String)> {
    const KEYS: [&str; 3] = ["expression", "cron", "schedule"];
    let mut expressions = Vec::new();
    for key in KEYS {
        if let Some(text) = string(obj, key, r) {
            expressions.push((key, text.trim().to_owned()));
        }
    }
    let [(key, first), rest @ ..] = expressions.as_slice() else {
        if !KEYS.iter().any(|k| obj.contains(k)) {
            r.refuse("$.expression", "'expression' (or 'cron') is required");
        }
        return None;
    };
    if let Some((other, _)) = rest.iter().find(|(_, text)| text != first) {
        r.refuse(
            format!("$.{other}"),
            format!("'{other}' disagrees with '{key}'; send one of them"),
        );
        return None;
    }
    Some(((*key).to_owned(), first.clone()))
}

/// The entry's time zone (UTC when not given) and its schedule in that zone.
fn schedule(
    obj: &Object<'_>,
    expression: Option<&(String, String)>,
    r: &mut Reader<'_>,
) -> (Option<String>, Option<Schedule>) {
    let timezone = match obj.get("timezone") {
        None => Some(DEFAULT_ZONE.to_owned()),
        Some(_) => string(obj, "timezone", r),
    };
    let zone = timezone
        .as_deref()
        .and_then(|name| match zone::parse(name) {
            Ok(zone) => Some(zone),
            Err(message) => {
                r.refuse("$.timezone", message);
                None
            }
        });
    let schedule = match (expression, zone) {
        (Some((key, text)), Some(zone)) => match Schedule::parse(text, zone) {
            Ok(schedule) => Some(schedule),
            Err(message) => {
                r.refuse(format!("$.{key}"), message);
                None
            }
        },
        _ => None,
    };
    (timezone, schedule)
}

/// What an occurrence does while the previous run is still going (`skip` when not given).
fn overlap(obj: &Object<'_>, r: &mut Reader<'_>) -> OverlapPolicy {
    obj.get("overlap_policy")
        .and_then(|_| string(obj, "overlap_policy", r))
        .and_then(|text| {
            let policy = OverlapPolicy::parse(&text);
            r.required(
                "$.overlap_policy",
                policy,
                format!(
                    "overlap_policy {text:?} is not one of skip, allow, cancel_previous \
                     (or cancel), enqueue"
                ),
            )
        })
        .unwrap_or(OverlapPolicy::Skip)
}

/// The entry's description (`None` when empty), at most [`MAX_DESCRIPTION_CHARS`] characters.
fn description(obj: &Object<'_>, r: &mut Reader<'_>) -> Option<String> {
    obj.get("description")?;
    let description = string(obj, "description", r)?;
    if description.chars().count() > MAX_DESCRIPTION_CHARS {
        r.refuse(
            "$.description",
            format!("description is longer than {MAX_DESCRIPTION_CHARS} characters"),
        );
    }
    (!description.is_empty()).then_some(description)
}

/// A PATCH body over a stored registration (`current`, a registration body): the entry fields
/// it sends replace the stored ones (`cron`, `schedule` and `expression` replace each other);
/// `job_template`, and template attributes sent at the top level, are merged key by key over
/// the stored template. Read-only fields are ignored; the name cannot change.
pub fn patched(current: &str, patch: &Object<'_>) -> Result<String, Rejection> {
    let invalid =
        |path: &str, message: String| Rejection::Invalid(vec![Violation::new(path, message)]);
    let base = Object::parse(current).map_err(|e| invalid("$", e.to_string()))?;
    let stored_template = base
        .get("job_template")
        .map(Object::from_raw)
        .transpose()
        .map_err(|e| invalid("$.job_template", e.to_string()))?
        .unwrap_or_default();
    if let Some(raw) = patch.get("name")
        && json::decode::<String>(raw).ok().as_deref()
            != base
                .get("name")
                .and_then(|n| json::decode::<String>(n).ok())
                .as_deref()
    {
        return Err(invalid(
            "$.name",
            "an entry's name cannot change: register an entry under the new name and delete this one".into(),
        ));
    }
    let mut entry: indexmap::IndexMap<&str, &RawValue> = base
        .iter()
        .filter(|(key, _)| *key != "job_template")
        .collect();
    let mut template: indexmap::IndexMap<&str, &RawValue> = stored_template.iter().collect();
    let mut patch_template = None;
    for (key, value) in patch.iter() {
        match key {
            "name" | "job_template" => {}
            "expression" | "cron" | "schedule" => {
                for k in ["expression", "cron", "schedule"] {
                    entry.shift_remove(k);
                }
            }
            _ => {}
        }
        match key {
            "name" => {}
            "job_template" => match Object::from_raw(value) {
                Ok(obj) => patch_template = Some(obj),
                Err(_) => {
                    return Err(invalid(
                        "$.job_template",
                        format!(
                            "'job_template' must be an object, got {}",
                            Kind::of(value).article_name()
                        ),
                    ));
                }
            },
            k if SYSTEM_KEYS.contains(&k) => {}
            k if ENTRY_KEYS.contains(&k) => {
                entry.insert(k, value);
            }
            k => {
                template.insert(k, value);
            }
        }
    }
    // Entry keys sent twice (`cron` and `expression`) are compared by `parse`.
    for (key, value) in patch.iter() {
        if matches!(key, "expression" | "cron" | "schedule") {
            entry.insert(key, value);
        }
    }
    if let Some(obj) = &patch_template {
        for (key, value) in obj.iter() {
            template.insert(key, value);
        }
    }
    let template = json::raw(json::object_text(template));
    Ok(json::object_text(
        entry.into_iter().chain([("job_template", &*template)]),
    ))
}

/// The job template of a registration body, validated as an enqueue body: `job_template`, or
/// else the top-level attributes that are not the entry's. Problems with the entry's own
/// fields are in `v`; the template's own refusal is returned (with its paths under
/// `$.job_template` when it was given so).
fn template(
    obj: &Object<'_>,
    limits: &Limits,
    tenant: Option<&str>,
    v: &mut Vec<Violation>,
) -> Result<String, Rejection> {
    let (text, prefix) = match obj.get("job_template") {
        Some(raw) => match Object::from_raw(raw) {
            Ok(_) => (
                json::compact_raw(raw.to_owned()).get().to_owned(),
                "$.job_template",
            ),
            Err(_) => {
                v.push(Violation::new(
                    "$.job_template",
                    format!(
                        "'job_template' must be an object, got {}",
                        Kind::of(raw).article_name()
                    ),
                ));
                return Err(Rejection::Invalid(Vec::new()));
            }
        },
        None => (
            json::object_text(
                obj.iter()
                    .filter(|(key, _)| !ENTRY_KEYS.contains(key) && !SYSTEM_KEYS.contains(key)),
            ),
            "$",
        ),
    };
    let parsed = Object::parse(&text)
        .map_err(|e| Rejection::Invalid(vec![Violation::new(prefix, e.to_string())]))?;
    // A template's `args` default to none.
    let text = if parsed.contains("args") {
        text
    } else {
        let none = json::raw("[]".to_owned());
        json::object_text(parsed.iter().chain([("args", &*none)]))
    };
    let template = Object::parse(&text)
        .map_err(|e| Rejection::Invalid(vec![Violation::new(prefix, e.to_string())]))?;
    for (key, why) in TEMPLATE_REFUSED {
        if template.contains(key) {
            v.push(Violation::new(
                format!("{prefix}.{key}"),
                format!("a cron job template may not set '{key}': {why}"),
            ));
        }
    }
    if prefix == "$" && !template.contains("type") && !obj.contains("type") {
        v.push(Violation::new(
            "$.job_template",
            "'job_template' (or a top-level 'type') is required: the job each run enqueues",
        ));
        return Err(Rejection::Invalid(Vec::new()));
    }
    match envelope::parse_for(&template, limits, tenant) {
        // A tenant's entry keeps its tenant in the template's `meta` (the job's merged `meta`,
        // `meta.tenant_id` checked or added), so every run is the tenant's job.
        Ok(job) if tenant.is_some() => {
            let meta = json::raw(job.meta);
            Ok(json::object_text(
                template
                    .iter()
                    .filter(|(key, _)| *key != "meta")
                    .chain([("meta", &*meta)]),
            ))
        }
        Ok(_) => Ok(text),
        Err(rejection) => Err(rejection.rerooted(prefix)),
    }
}

/// The string `key` of `obj`, if present and a string (else a violation; `null` counts as
/// absent).
fn string(obj: &Object<'_>, key: &str, r: &mut Reader<'_>) -> Option<String> {
    let raw: &RawValue = obj.get(key)?;
    r.decode::<Option<String>>(format!("$.{key}"), &format!("'{key}'"), "a string", raw)
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        crate::job::envelope::TEST_LIMITS
    }

    fn parse_text(text: &str) -> Result<Definition, Rejection> {
        parse(
            &Object::parse(text).expect("an object"),
            &limits(),
            1024,
            None,
        )
    }

    fn paths(r: Rejection) -> Vec<String> {
        match r {
            Rejection::Invalid(v) | Rejection::InvalidRetry(v) => {
                v.into_iter().map(|x| x.path).collect()
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn names() {
        for ok in ["a", "0", "daily-report", "cron.test.v2", &"a".repeat(255)] {
            assert!(is_valid_name(ok), "{ok}");
        }
        for bad in ["", "-a", ".a", "Daily", "a_b", "a b", "é", &"a".repeat(256)] {
            assert!(!is_valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn job_template_or_top_level_job_fields() {
        let d = parse_text(
            r#"{"name":"r","expression":"0 9 * * *","timezone":"Asia/Tokyo",
                "job_template":{"type":"report.generate","args":[1],"options":{"queue":"reports"}}}"#,
        )
        .expect("valid");
        assert_eq!(d.expression, "0 9 * * *");
        assert_eq!(d.overlap, OverlapPolicy::Skip);
        assert!(d.enabled);
        assert_eq!(
            d.template,
            r#"{"type":"report.generate","args":[1],"options":{"queue":"reports"}}"#
        );
        let d = parse_text(
            r#"{"name":"r","cron":"@hourly","type":"a.b","args":[],"queue":"q",
                "overlap_policy":"cancel","next_run_at":"2020-01-01T00:00:00Z","run_count":3}"#,
        )
        .expect("valid");
        assert_eq!(d.overlap, OverlapPolicy::CancelPrevious);
        assert_eq!(d.template, r#"{"type":"a.b","args":[],"queue":"q"}"#);
    }

    #[test]
    fn every_problem_is_named_by_its_path() {
        let e = parse_text(
            r#"{"name":"Bad Name","expression":"99 * * * *","timezone":"EST",
                "overlap_policy":"never","enabled":"yes","job_template":{"type":"x"}}"#,
        )
        .expect_err("invalid");
        assert_eq!(
            paths(e),
            ["$.name", "$.timezone", "$.overlap_policy", "$.enabled"]
        );
        let e = parse_text(r#"{"name":"a","cron":"99 * * * *","job_template":{"type":"x"}}"#)
            .expect_err("invalid");
        assert_eq!(paths(e), ["$.cron"]);
        // The template is an enqueue body: its own problems under $.job_template.
        let e = parse_text(
            r#"{"name":"a","cron":"* * * * *","job_template":{"type":"Not Valid","args":{}}}"#,
        )
        .expect_err("invalid");
        assert_eq!(paths(e), ["$.job_template.type", "$.job_template.args"]);
        let e = parse_text(
            r#"{"name":"a","cron":"* * * * *","job_template":{"type":"a.b","retry":{"max_attempts":-1}}}"#,
        )
        .expect_err("invalid");
        assert_eq!(paths(e), ["$.job_template.retry.max_attempts"]);
        let e = parse_text(
            r#"{"name":"a","cron":"* * * * *","job_template":{"type":"a.b","id":"x","unique":{}}}"#,
        )
        .expect_err("invalid");
        assert_eq!(paths(e), ["$.job_template.id", "$.job_template.unique"]);
        let e = parse_text(r#"{"cron":"* * * * *"}"#).expect_err("invalid");
        assert_eq!(paths(e), ["$.name", "$.job_template"]);
        let e = parse_text(r#"{"name":"a","expression":"* * * * *","cron":"@daily","type":"a"}"#)
            .expect_err("invalid");
        assert_eq!(paths(e), ["$.cron"]);
        let e = parse_text(r#"{"name":"a","job_template":[]}"#).expect_err("invalid");
        assert_eq!(paths(e), ["$.expression", "$.job_template"]);
        let big = format!(
            r#"{{"name":"a","cron":"@daily","job_template":{{"type":"a.b","args":["{}"]}}}}"#,
            "x".repeat(2000)
        );
        assert!(matches!(
            parse_text(&big),
            Err(Rejection::TooLarge {
                field: "job_template",
                max: 1024,
                ..
            })
        ));
    }

    #[test]
    fn a_patch_merges_over_the_stored_registration() {
        let stored = r#"{"name":"r","expression":"0 9 * * *","timezone":"UTC","overlap_policy":"skip","enabled":true,"job_template":{"type":"a.b","args":[1],"options":{"queue":"q"}}}"#;
        let patch = |text: &str| patched(stored, &Object::parse(text).expect("object"));
        assert_eq!(
            patch(r#"{"enabled":false}"#).expect("ok"),
            r#"{"name":"r","expression":"0 9 * * *","timezone":"UTC","overlap_policy":"skip","enabled":false,"job_template":{"type":"a.b","args":[1],"options":{"queue":"q"}}}"#
        );
        assert_eq!(
            patch(r#"{"cron":"@hourly","job_template":{"args":[2]},"priority":1,"run_count":9}"#)
                .expect("ok"),
            r#"{"name":"r","timezone":"UTC","overlap_policy":"skip","enabled":true,"cron":"@hourly","job_template":{"type":"a.b","args":[2],"options":{"queue":"q"},"priority":1}}"#
        );
        assert_eq!(
            paths(patch(r#"{"name":"other"}"#).expect_err("renamed")),
            ["$.name"]
        );
        assert!(patch(r#"{"name":"r"}"#).is_ok());
        assert_eq!(
            paths(patch(r#"{"job_template":"x"}"#).expect_err("not an object")),
            ["$.job_template"]
        );
        // The result is validated as a registration.
        let merged = patch(r#"{"expression":"nope","timezone":"EST"}"#).expect("merged");
        assert_eq!(
            paths(parse_text(&merged).expect_err("invalid")),
            ["$.timezone"],
            "the zone is checked first; the expression is then read in no zone"
        );
    }

    #[test]
    fn a_run_carries_the_entry_name_and_its_occurrence() {
        let slot = "2026-03-01T09:00:00Z".parse().expect("instant");
        let job = Definition::job(
            "daily",
            r#"{"type":"a.b","args":[],"meta":{"team":"x","cron_name":"spoofed"}}"#,
            slot,
            &limits(),
        )
        .expect("valid");
        assert_eq!(
            job.meta,
            r#"{"team":"x","cron_name":"daily","cron_triggered_at":"2026-03-01T09:00:00.000Z"}"#
        );
        let other =
            Definition::job("daily", r#"{"type":"a.b","args":[]}"#, slot, &limits()).expect("ok");
        assert_ne!(job.id, other.id, "every run is a new job");
    }
}
