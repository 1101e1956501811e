//! The schema registry ([OJS schema registry]): JSON Schemas of a job type's `args`, one per
//! registered version, and the check a PUSH of that type goes through.
//!
//! - **Versions** are `N`, `N.N` or `N.N.N` ([`SchemaVersion`]): the conformance suites name
//!   versions by integers, the extension by SemVer. `1`, `1.0` and `1.0.0` are one version; the
//!   latest is the highest. A job names the version it was written for in its top-level
//!   `version` attribute (a number or a string), which is kept as sent.
//! - **Drafts**: a schema is read as the draft its `$schema` names, else as draft 2020-12; a
//!   schema without `$schema` that is only valid as draft 2019-09 (the tuple form
//!   `"items": [...]`, which the suites use and 2020-12 spells `prefixItems`) is read as 2019-09.
//!   Remote `$ref`s are never fetched: the registry must not become a way to make the server
//!   call out.
//! - **What is checked**: `args`. A schema whose root `type` is `"object"` describes the one
//!   object a job of that type takes (`"args": [{...}]`, the usual keyword-arguments form, and the
//!   extension's own examples), so it checks `args[0]` and asks for exactly one argument.
//! - **Modes** ([`ValidationMode`]): `strict` refuses a failing job (400 `schema_validation`,
//!   every failing path named under `$.args`), `warn` accepts it with warnings, `off` only keeps
//!   the schema. A job naming a version that is not registered fails the same way (at
//!   `$.version`). A job type without schemas is never checked.
//!
//! [OJS schema registry]: https://github.com/openjobspec/spec/blob/main/spec/ojs-schema-registry.md

use std::collections::HashMap;
use std::fmt;

use jsonschema::Validator;
use serde_json::Value;

use crate::wire::Violation;

/// At most this many problems are reported for one job.
const MAX_VIOLATIONS: usize = 20;
/// A problem's message is cut at this many characters (messages quote the offending value).
const MAX_MESSAGE_CHARS: usize = 300;

/// What a PUSH whose `args` fail the schema gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ValidationMode {
    /// Refused: 400 `schema_validation`.
    #[default]
    Strict,
    /// Accepted, with `warnings` in the answer.
    Warn,
    /// Not checked: the schema is documentation.
    Off,
}

crate::wire::names!(ValidationMode {
    Strict => "strict",
    Warn => "warn",
    Off => "off",
});

/// A schema version: `N`, `N.N` or `N.N.N`, missing numbers being 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SchemaVersion {
    pub major: i32,
    pub minor: i32,
    pub patch: i32,
}

impl SchemaVersion {
    /// Reads `N`, `N.N` or `N.N.N` (decimal numbers without sign or leading zeros, each at most
    /// 2³¹−1).
    pub fn parse(text: &str) -> Option<SchemaVersion> {
        let mut numbers = [0i32; 3];
        let mut parts = text.split('.');
        for (slot, part) in numbers.iter_mut().zip(parts.by_ref()) {
            if part.is_empty()
                || !part.bytes().all(|b| b.is_ascii_digit())
                || (part.len() > 1 && part.starts_with('0'))
            {
                return None;
            }
            *slot = part.parse().ok()?;
        }
        if parts.next().is_some() {
            return None;
        }
        Some(SchemaVersion {
            major: numbers[0],
            minor: numbers[1],
            patch: numbers[2],
        })
    }

    /// The version a job's `version` attribute names: a non-negative integer or a string that
    /// [`parse`](Self::parse)s.
    pub fn of_job(value: &Value) -> Option<SchemaVersion> {
        match value {
            Value::Number(n) => SchemaVersion::parse(&n.as_u64()?.to_string()),
            Value::String(s) => SchemaVersion::parse(s),
            _ => None,
        }
    }
}

impl fmt::Display for SchemaVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The validator of `schema`, or why it is not a JSON Schema this server can use.
pub fn compile(schema: &Value) -> Result<Validator, String> {
    if !schema.is_object() {
        return Err("must be a JSON Schema object".to_owned());
    }
    let strict = jsonschema::options().build(schema);
    match strict {
        Ok(v) => Ok(v),
        // Without `$schema`, the 2019-09 reading (tuple `items`) is tried before giving up.
        Err(e) if schema.get("$schema").is_none() => jsonschema::options()
            .with_draft(jsonschema::Draft::Draft201909)
            .build(schema)
            .map_err(|_| describe_schema_error(&e)),
        Err(e) => Err(describe_schema_error(&e)),
    }
}

fn describe_schema_error(e: &jsonschema::ValidationError<'_>) -> String {
    let at = e.instance_path().as_str();
    let message = clip(e.to_string());
    if at.is_empty() {
        format!("is not a valid JSON Schema: {message}")
    } else {
        format!("is not a valid JSON Schema: at {at}: {message}")
    }
}

/// A message of at most [`MAX_MESSAGE_CHARS`] characters.
fn clip(message: String) -> String {
    match message.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((cut, _)) => format!("{}…", &message[..cut]),
        None => message,
    }
}

/// A stored schema, as the registry loads it.
#[derive(Debug, Clone)]
pub struct Stored {
    pub job_type: String,
    /// As registered.
    pub version: String,
    pub schema: Value,
    /// `None`: the server's default.
    pub validation: Option<ValidationMode>,
}

/// One compiled version of a type.
#[derive(Debug)]
struct Compiled {
    key: SchemaVersion,
    version: String,
    mode: ValidationMode,
    /// The schema describes the single object argument (`args[0]`).
    object_argument: bool,
    validator: Validator,
}

/// The outcome of checking one job.
#[derive(Debug, Clone, PartialEq)]
pub enum Check {
    /// Nothing to check (no schema for the type, or mode `off`), or the job passed.
    Passed,
    /// Mode `warn`: accepted, with these warnings.
    Warned(Vec<String>),
    /// Mode `strict`: refused.
    Failed {
        /// `type@version` of the schema (or of the version asked for, when not registered).
        schema: String,
        violations: Vec<Violation>,
    },
}

/// Every registered schema, compiled, by job type.
#[derive(Debug, Default)]
pub struct SchemaSet {
    /// Versions of each type, the latest first.
    types: HashMap<String, Vec<Compiled>>,
}

impl SchemaSet {
    /// Compiles `stored`; a version whose schema no longer compiles (edited by hand in the
    /// table) is left out with a warning rather than refusing every job of its type.
    pub fn build(stored: Vec<Stored>, default_mode: ValidationMode) -> SchemaSet {
        let mut types: HashMap<String, Vec<Compiled>> = HashMap::new();
        for s in stored {
            let Some(key) = SchemaVersion::parse(&s.version) else {
                tracing::warn!(job_type = %s.job_type, version = %s.version, "stored schema has an unreadable version; left out");
                continue;
            };
            let validator = match compile(&s.schema) {
                Ok(v) => v,
                Err(e) => {
                    tracing::warn!(job_type = %s.job_type, version = %s.version, error = %e, "stored schema does not compile; left out");
                    continue;
                }
            };
            types.entry(s.job_type).or_default().push(Compiled {
                key,
                version: s.version,
                mode: s.validation.unwrap_or(default_mode),
                object_argument: s.schema.get("type").and_then(Value::as_str) == Some("object"),
                validator,
            });
        }
        for versions in types.values_mut() {
            versions.sort_by_key(|c| std::cmp::Reverse(c.key));
        }
        SchemaSet { types }
    }

    /// Whether no type has a schema (then no job is checked).
    pub fn is_empty(&self) -> bool {
        self.types.is_empty()
    }

    /// Checks a job of `job_type` whose `version` attribute is `version` (JSON, `None` when
    /// absent) and whose `args` are `args` (JSON array text).
    pub fn check(&self, job_type: &str, version: Option<&Value>, args: &str) -> Check {
        let Some(versions) = self.types.get(job_type) else {
            return Check::Passed;
        };
        let Some(latest) = versions.first() else {
            return Check::Passed;
        };
        let chosen = match version {
            None | Some(Value::Null) => Some(latest),
            Some(v) => SchemaVersion::of_job(v).and_then(|k| versions.iter().find(|c| c.key == k)),
        };
        let Some(schema) = chosen else {
            // The job names a version that is not registered: judged by the latest's mode.
            let asked = version.map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            });
            let registered: Vec<&str> = versions.iter().map(|c| c.version.as_str()).collect();
            let violation = Violation::new(
                "$.version",
                clip(format!(
                    "no schema is registered for version {} of job type '{job_type}' (registered: {})",
                    asked.as_deref().unwrap_or("?"),
                    registered.join(", ")
                )),
            );
            let schema = format!("{job_type}@{}", asked.unwrap_or_default());
            return outcome(latest.mode, schema, vec![violation]);
        };
        if schema.mode == ValidationMode::Off {
            return Check::Passed;
        }
        let violations = match serde_json::from_str::<Value>(args) {
            Ok(args) => violations(schema, &args),
            Err(_) => vec![Violation::new("$.args", "args is not valid JSON")],
        };
        if violations.is_empty() {
            Check::Passed
        } else {
            outcome(
                schema.mode,
                format!("{job_type}@{}", schema.version),
                violations,
            )
        }
    }
}

fn outcome(mode: ValidationMode, schema: String, violations: Vec<Violation>) -> Check {
    match mode {
        ValidationMode::Off => Check::Passed,
        ValidationMode::Warn => Check::Warned(
            violations
                .into_iter()
                .map(|v| format!("schema {schema}: {}: {}", v.path, v.message))
                .collect(),
        ),
        ValidationMode::Strict => Check::Failed { schema, violations },
    }
}

/// Where `args` fails `schema`.
fn violations(schema: &Compiled, args: &Value) -> Vec<Violation> {
    let (instance, root) = if schema.object_argument {
        match args.as_array().map(Vec::as_slice) {
            Some([one]) => (one, "$.args[0]"),
            _ => {
                return vec![Violation::new(
                    "$.args",
                    format!(
                        "the schema of version {} describes one object argument: args must be [{{...}}]",
                        schema.version
                    ),
                )];
            }
        }
    } else {
        (args, "$.args")
    };
    schema
        .validator
        .iter_errors(instance)
        .take(MAX_VIOLATIONS)
        .map(|e| Violation::new(json_path(root, e.instance_path()), clip(e.to_string())))
        .collect()
}

/// `root` followed by the JSONPath form of a JSON Pointer location (`/0/amount` →
/// `$.args[0].amount`).
fn json_path(root: &str, at: &jsonschema::paths::Location) -> String {
    let mut path = root.to_owned();
    for segment in at.iter() {
        match segment {
            jsonschema::paths::LocationSegment::Index(i) => path.push_str(&format!("[{i}]")),
            jsonschema::paths::LocationSegment::Property(name) => {
                let plain = !name.is_empty()
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    && !name.starts_with(|c: char| c.is_ascii_digit());
                if plain {
                    path.push('.');
                    path.push_str(&name);
                } else {
                    path.push_str(&format!("[{}]", Value::String(name.to_string())));
                }
            }
        }
    }
    path
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn set(entries: &[(&str, &str, Value, Option<ValidationMode>)]) -> SchemaSet {
        SchemaSet::build(
            entries
                .iter()
                .map(|(t, v, s, m)| Stored {
                    job_type: (*t).to_owned(),
                    version: (*v).to_owned(),
                    schema: s.clone(),
                    validation: *m,
                })
                .collect(),
            ValidationMode::Strict,
        )
    }

    #[test]
    fn versions_read_as_up_to_three_numbers() {
        let v = |s| SchemaVersion::parse(s);
        assert_eq!(
            v("2"),
            Some(SchemaVersion {
                major: 2,
                minor: 0,
                patch: 0
            })
        );
        assert_eq!(v("1.0"), v("1.0.0"));
        assert!(v("1.10.0") > v("1.9.3"));
        for bad in [
            "",
            "v1",
            "1.",
            ".1",
            "1.2.3.4",
            "01",
            "-1",
            "1.x",
            "99999999999",
            " 1",
        ] {
            assert_eq!(v(bad), None, "{bad:?}");
        }
        assert_eq!(SchemaVersion::of_job(&json!(3)), v("3"));
        assert_eq!(SchemaVersion::of_job(&json!("3.1")), v("3.1"));
        assert_eq!(SchemaVersion::of_job(&json!(-3)), None);
        assert_eq!(SchemaVersion::of_job(&json!(1.5)), None);
        assert_eq!(SchemaVersion::of_job(&json!({"v": 1})), None);
    }

    #[test]
    fn schemas_are_checked_when_registered() {
        assert!(compile(&json!({"type": "array", "items": {"type": "string"}})).is_ok());
        // The tuple form the conformance suites use (draft 2019-09's `items` array).
        assert!(compile(&json!({"type": "array", "items": [{"type": "string"}]})).is_ok());
        let e = compile(&json!({"type": 12})).unwrap_err();
        assert!(e.starts_with("is not a valid JSON Schema"), "{e}");
        assert!(compile(&json!([1])).is_err());
        assert!(compile(&json!(true)).is_err());
        // A declared draft is held to: the tuple form is not 2020-12.
        assert!(
            compile(&json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "items": [{"type": "string"}]
            }))
            .is_err()
        );
    }

    #[test]
    fn a_job_is_checked_against_the_version_it_names_else_the_latest() {
        let s = set(&[
            (
                "t",
                "1",
                json!({"type": "array", "items": {"type": "string"}}),
                None,
            ),
            (
                "t",
                "2",
                json!({"type": "array", "items": {"type": "integer"}}),
                None,
            ),
        ]);
        assert_eq!(s.check("t", None, "[1, 2]"), Check::Passed);
        assert_eq!(s.check("t", Some(&json!(1)), r#"["a"]"#), Check::Passed);
        assert_eq!(
            s.check("t", Some(&json!("1.0.0")), r#"["a"]"#),
            Check::Passed
        );
        let Check::Failed { schema, violations } = s.check("t", None, r#"[1, "x"]"#) else {
            panic!("expected a failure");
        };
        assert_eq!(schema, "t@2");
        assert_eq!(violations.len(), 1);
        assert_eq!(violations[0].path, "$.args[1]");
        assert!(violations[0].message.contains("integer"), "{violations:?}");
        // A version that is not registered.
        let Check::Failed { violations, .. } = s.check("t", Some(&json!(7)), "[1]") else {
            panic!("expected a failure");
        };
        assert_eq!(violations[0].path, "$.version");
        assert!(violations[0].message.contains("registered: 2, 1"));
        // Other types are not checked.
        assert_eq!(s.check("other", None, r#"[{}]"#), Check::Passed);
    }

    #[test]
    fn an_object_schema_describes_the_single_argument() {
        let s = set(&[(
            "invoice",
            "1.0.0",
            json!({
                "type": "object",
                "required": ["amount"],
                "properties": {"amount": {"type": "integer", "minimum": 0}, "a b": {"type": "string"}}
            }),
            None,
        )]);
        assert_eq!(
            s.check("invoice", None, r#"[{"amount": 3}]"#),
            Check::Passed
        );
        let paths = |check: Check| match check {
            Check::Failed { violations, .. } => {
                violations.into_iter().map(|v| v.path).collect::<Vec<_>>()
            }
            other => panic!("expected a failure, got {other:?}"),
        };
        let mut both = paths(s.check("invoice", None, r#"[{"amount": -1, "a b": 1}]"#));
        both.sort();
        assert_eq!(both, ["$.args[0].amount", r#"$.args[0]["a b"]"#]);
        assert_eq!(paths(s.check("invoice", None, r#"[{}]"#)), ["$.args[0]"]);
        assert_eq!(
            paths(s.check("invoice", None, r#"[{"amount": 1}, 2]"#)),
            ["$.args"]
        );
    }

    #[test]
    fn modes_decide_what_a_failure_is() {
        let schema = json!({"type": "array", "maxItems": 0});
        let warn = set(&[("t", "1", schema.clone(), Some(ValidationMode::Warn))]);
        let Check::Warned(w) = warn.check("t", None, "[1]") else {
            panic!("expected warnings");
        };
        assert_eq!(w.len(), 1);
        assert!(w[0].starts_with("schema t@1: $.args: "), "{w:?}");
        let off = set(&[("t", "1", schema, Some(ValidationMode::Off))]);
        assert_eq!(off.check("t", None, "[1]"), Check::Passed);
        assert_eq!(off.check("t", Some(&json!(9)), "[1]"), Check::Passed);
    }

    #[test]
    fn long_messages_are_clipped() {
        let s = set(&[("t", "1", json!({"type": "array", "maxItems": 0}), None)]);
        let big = format!("[\"{}\"]", "x".repeat(5000));
        let Check::Failed { violations, .. } = s.check("t", None, &big) else {
            panic!("expected a failure");
        };
        assert!(violations[0].message.chars().count() <= MAX_MESSAGE_CHARS + 1);
    }
}
