//! Job failures: the error a worker reports with NACK, and what the retry policy makes of it.

use serde::Serialize;
use serde_json::value::RawValue;

use super::retry::{OnExhaustion, RetryPolicy};
use crate::wire::json::{self, Kind, Object};
use crate::wire::reader::wrong_type;
use crate::wire::{Reader, Violation};

/// Frames kept of a reported backtrace.
pub const MAX_BACKTRACE_FRAMES: usize = 50;
/// Characters kept of a reported backtrace, all frames together.
pub const MAX_BACKTRACE_CHARS: usize = 10_000;

/// Error codes a handler can send to steer the outcome directly.
const DIRECTIVE_DISCARD: &str = "DISCARD";
const DIRECTIVE_FAIL: &str = "FAIL";
const DIRECTIVE_DEAD_LETTER: &str = "DEAD_LETTER";
const DIRECTIVE_RETRY: &str = "RETRY";

/// The error of a failed attempt: as a worker reports it (only `message` is required; read by
/// `parse_report`), and as stored in `error` and `errors[]`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(as = ErrorReport)]
pub struct JobError {
    #[schema(value_type = Option<String>)]
    pub code: String,
    #[schema(value_type = Option<String>)]
    pub r#type: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retryable: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub details: Option<Box<RawValue>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backtrace: Option<Vec<String>>,
    /// A worker's report that the job's rate-limit key must not start jobs before this
    /// (RFC 3339, as sent).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub rate_limit_until: Option<String>,
}

impl JobError {
    /// An error raised by the server itself (timeouts, cancellation, expiry, ...).
    pub fn server(code: &str, message: impl Into<String>) -> JobError {
        JobError {
            code: code.to_owned(),
            r#type: code.to_owned(),
            message: message.into(),
            retryable: None,
            details: None,
            backtrace: None,
            rate_limit_until: None,
        }
    }

    /// When the job's rate-limit key may start jobs again, if the report said.
    pub fn rate_limit_until(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        self.rate_limit_until
            .as_deref()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&chrono::Utc))
    }

    /// Parses the `error` object of a NACK request. `path` names it in violations.
    pub fn parse_report(raw: &RawValue, path: &str) -> Result<JobError, Vec<Violation>> {
        let Ok(obj) = Object::from_raw(raw) else {
            return Err(vec![Violation::new(
                path,
                wrong_type("'error'", "an object", raw),
            )]);
        };
        let mut violations = Vec::new();
        let mut r = Reader::new(&mut violations);
        let field = |name: &str| format!("{path}.{name}");
        let string = |r: &mut Reader<'_>, name: &str| -> Option<String> {
            let raw = obj.get(name)?;
            let text = json::decode::<String>(raw).ok();
            r.required(field(name), text, format!("error.{name} must be a string"))
        };
        let message = string(&mut r, "message");
        let code = string(&mut r, "code").filter(|c| !c.is_empty());
        let r#type = string(&mut r, "type").filter(|t| !t.is_empty());
        if obj.get("message").is_none() {
            r.refuse(field("message"), "error.message is required");
        }
        let retryable = obj.get("retryable").and_then(|v| {
            let retryable = json::decode::<bool>(v).ok();
            r.required(
                field("retryable"),
                retryable,
                "error.retryable must be a boolean",
            )
        });
        let details = obj.get("details").and_then(|v| {
            let details = (Kind::of(v) == Kind::Object).then(|| v.to_owned());
            r.required(field("details"), details, "error.details must be an object")
        });
        let backtrace = obj.get("backtrace").and_then(|v| {
            let frames = json::decode::<BacktraceInput>(v)
                .ok()
                .map(|b| truncate_backtrace(b.into_frames()));
            r.required(
                field("backtrace"),
                frames,
                "error.backtrace must be an array of strings",
            )
        });
        let rate_limit_until = obj.get("rate_limit_until").and_then(|v| {
            let until = json::decode::<String>(v)
                .ok()
                .filter(|t| chrono::DateTime::parse_from_rfc3339(t).is_ok());
            r.required(
                field("rate_limit_until"),
                until,
                "error.rate_limit_until must be an RFC 3339 timestamp",
            )
        });
        if !violations.is_empty() {
            return Err(violations);
        }
        let error_class = details
            .as_deref()
            .and_then(|d| Object::from_raw(d).ok())
            .and_then(|d| {
                d.get("error_class")
                    .and_then(|v| json::decode::<String>(v).ok())
            });
        let code = code.unwrap_or_else(|| "handler_error".to_owned());
        let r#type = r#type.or(error_class).unwrap_or_else(|| code.clone());
        Ok(JobError {
            r#type,
            code,
            message: message.unwrap_or_default(),
            retryable,
            details,
            backtrace,
            rate_limit_until,
        })
    }

    /// `details.error_class`, when the worker sent one.
    fn error_class(&self) -> Option<String> {
        let details = Object::from_raw(self.details.as_deref()?).ok()?;
        json::decode::<String>(details.get("error_class")?).ok()
    }

    /// The error as compact JSON (for `error` and, with attempt/occurred_at, `errors[]`).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".to_owned())
    }
}

/// A backtrace as a list of frames, or as one multi-line string (split into frames).
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum BacktraceInput {
    Frames(Vec<String>),
    Text(String),
}

impl BacktraceInput {
    fn into_frames(self) -> Vec<String> {
        match self {
            BacktraceInput::Frames(frames) => frames,
            BacktraceInput::Text(text) => text.lines().map(str::to_owned).collect(),
        }
    }
}

/// Keeps at most [`MAX_BACKTRACE_FRAMES`] frames and [`MAX_BACKTRACE_CHARS`] characters.
fn truncate_backtrace(frames: Vec<String>) -> Vec<String> {
    let mut budget = MAX_BACKTRACE_CHARS;
    let mut out = Vec::new();
    for frame in frames.into_iter().take(MAX_BACKTRACE_FRAMES) {
        if budget == 0 {
            break;
        }
        let kept: String = frame.chars().take(budget).collect();
        budget -= kept.chars().count();
        out.push(kept);
    }
    out
}

/// Why a job was discarded (the `reason` of `job.discarded` events).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiscardReason {
    /// Every allowed attempt failed.
    Exhausted,
    /// The error was marked non-retryable.
    NonRetryable,
    /// The handler sent DISCARD, FAIL or DEAD_LETTER.
    HandlerDirective,
}

/// What a failed attempt leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Straight back to `available`, no backoff, retry policy not consulted.
    Requeue,
    /// `retryable`, available again after `delay_ms`.
    Retry { delay_ms: u64 },
    /// `discarded`, into the dead-letter queue when `dead_letter` is set.
    Discard {
        dead_letter: bool,
        reason: DiscardReason,
    },
}

/// Applies the retry policy to a failure of attempt `attempt`. A handler's `DISCARD`, `FAIL` or
/// `DEAD_LETTER` code overrides the policy ([OJS retry precedence]).
///
/// [OJS retry precedence]: https://github.com/openjobspec/spec/blob/main/spec/ojs-retry.md#72-precedence
pub fn decide(
    policy: &RetryPolicy,
    attempt: i32,
    error: &JobError,
    rng: &mut impl rand::Rng,
) -> Outcome {
    let exhausted_to_dlq = policy.on_exhaustion == OnExhaustion::DeadLetter;
    match error.code.as_str() {
        DIRECTIVE_DISCARD | DIRECTIVE_FAIL => {
            return Outcome::Discard {
                dead_letter: false,
                reason: DiscardReason::HandlerDirective,
            };
        }
        DIRECTIVE_DEAD_LETTER => {
            return Outcome::Discard {
                dead_letter: true,
                reason: DiscardReason::HandlerDirective,
            };
        }
        _ => {}
    }
    if error.code != DIRECTIVE_RETRY {
        let class = error.error_class();
        let candidates = [
            Some(error.r#type.as_str()),
            class.as_deref(),
            Some(error.code.as_str()),
        ];
        if error.retryable == Some(false)
            || policy.is_non_retryable(candidates.into_iter().flatten())
        {
            return Outcome::Discard {
                dead_letter: exhausted_to_dlq,
                reason: DiscardReason::NonRetryable,
            };
        }
    }
    if attempt >= policy.attempts_allowed() {
        return Outcome::Discard {
            dead_letter: exhausted_to_dlq,
            reason: DiscardReason::Exhausted,
        };
    }
    Outcome::Retry {
        delay_ms: policy.delay_ms(attempt, rng),
    }
}

/// Why the server takes an active job away from its worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reclaim {
    /// The reservation ran out without ACK, NACK or heartbeat.
    VisibilityTimeout,
    /// The attempt ran longer than the job's `timeout`.
    ExecutionTimeout,
    /// The job outlived its `total_timeout`.
    TotalTimeout,
    /// The worker stopped heartbeating and was declared stale.
    WorkerDeath,
    /// The worker deregistered while holding the job.
    Shutdown,
}

impl Reclaim {
    /// The job-failure code recorded in `error.code`.
    pub fn code(self) -> &'static str {
        match self {
            Reclaim::VisibilityTimeout => "visibility_timeout",
            Reclaim::ExecutionTimeout => "timeout",
            Reclaim::TotalTimeout => "expired",
            Reclaim::WorkerDeath => "worker_death",
            Reclaim::Shutdown => "shutdown",
        }
    }

    fn message(self) -> &'static str {
        match self {
            Reclaim::VisibilityTimeout => {
                "The worker's reservation expired without an ACK, NACK or heartbeat."
            }
            Reclaim::ExecutionTimeout => "The attempt exceeded the job's execution timeout.",
            Reclaim::TotalTimeout => "The job's total_timeout elapsed before it finished.",
            Reclaim::WorkerDeath => "The worker stopped heartbeating and was declared dead.",
            Reclaim::Shutdown => "The worker deregistered while it held the job.",
        }
    }
}

/// What happens to an active job the server reclaims, and the error recorded for the attempt.
///
/// A lost reservation (visibility expiry, worker death, deregistration) puts the job straight
/// back while attempts remain, without backoff. ojsd counts an attempt when the job is claimed
/// and does not count it again here, although the OJS worker protocol asks for an increment on
/// reclaim (see [visibility timeout expiration] and [job recovery]). An execution timeout is an
/// ordinary failure that the retry policy judges ([server-side enforcement]). A total timeout
/// discards. Discards go to the dead-letter queue per `on_exhaustion`.
///
/// [visibility timeout expiration]: https://github.com/openjobspec/spec/blob/main/spec/ojs-worker-protocol.md#55-visibility-timeout-expiration
/// [job recovery]: https://github.com/openjobspec/spec/blob/main/spec/ojs-worker-protocol.md#102-job-recovery-process
/// [server-side enforcement]: https://github.com/openjobspec/spec/blob/main/spec/ojs-timeouts.md#71-server-side-enforcement
pub fn reclaim(
    policy: &RetryPolicy,
    attempt: i32,
    cause: Reclaim,
    rng: &mut impl rand::Rng,
) -> (Outcome, JobError) {
    let error = JobError::server(cause.code(), cause.message());
    let dead_letter = policy.on_exhaustion == OnExhaustion::DeadLetter;
    let outcome = match cause {
        Reclaim::ExecutionTimeout => decide(policy, attempt, &error, rng),
        Reclaim::TotalTimeout => Outcome::Discard {
            dead_letter,
            reason: DiscardReason::Exhausted,
        },
        Reclaim::VisibilityTimeout | Reclaim::WorkerDeath | Reclaim::Shutdown => {
            if attempt < policy.attempts_allowed() {
                Outcome::Requeue
            } else {
                Outcome::Discard {
                    dead_letter,
                    reason: DiscardReason::Exhausted,
                }
            }
        }
    };
    (outcome, error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn report(text: &str) -> Result<JobError, Vec<Violation>> {
        let raw: Box<RawValue> = serde_json::from_str(text).unwrap();
        JobError::parse_report(&raw, "$.error")
    }

    fn policy(text: &str) -> RetryPolicy {
        let raw: Box<RawValue> = serde_json::from_str(text).unwrap();
        RetryPolicy::parse(&raw, "$.retry").unwrap()
    }

    fn decide_with(policy_text: &str, attempt: i32, error_text: &str) -> Outcome {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        decide(
            &policy(policy_text),
            attempt,
            &report(error_text).unwrap(),
            &mut rng,
        )
    }

    #[test]
    fn type_falls_back_to_error_class_then_code() {
        assert_eq!(
            report(r#"{"message":"m"}"#).unwrap().r#type,
            "handler_error"
        );
        assert_eq!(
            report(r#"{"message":"m","code":"E1"}"#).unwrap().r#type,
            "E1"
        );
        let e = report(r#"{"message":"m","code":"E1","details":{"error_class":"Net"}}"#).unwrap();
        assert_eq!((e.code.as_str(), e.r#type.as_str()), ("E1", "Net"));
        let e = report(r#"{"message":"m","type":"T","details":{"error_class":"Net"}}"#).unwrap();
        assert_eq!(e.r#type, "T");
    }

    #[test]
    fn report_validation() {
        assert!(report(r#"{"code":"x"}"#).is_err());
        assert!(report(r#"{"message":5}"#).is_err());
        assert!(report(r#"{"message":"m","retryable":"no"}"#).is_err());
        assert!(report(r#"{"message":"m","details":[1]}"#).is_err());
        assert!(report(r#""boom""#).is_err());
    }

    #[test]
    fn backtrace_is_truncated() {
        let frames: Vec<String> = (0..80).map(|i| format!("frame {i}")).collect();
        let text = serde_json::json!({"message": "m", "backtrace": frames}).to_string();
        assert_eq!(report(&text).unwrap().backtrace.unwrap().len(), 50);
        let big =
            serde_json::json!({"message": "m", "backtrace": ["x".repeat(20_000)]}).to_string();
        assert_eq!(report(&big).unwrap().backtrace.unwrap()[0].len(), 10_000);
        let lines = report(r#"{"message":"m","backtrace":"a\nb"}"#).unwrap();
        assert_eq!(lines.backtrace.unwrap(), ["a", "b"]);
    }

    #[test]
    fn retries_until_attempts_are_exhausted() {
        assert!(matches!(
            decide_with(r#"{"max_attempts":3}"#, 1, r#"{"message":"m"}"#),
            Outcome::Retry { .. }
        ));
        assert_eq!(
            decide_with(r#"{"max_attempts":3}"#, 3, r#"{"message":"m"}"#),
            Outcome::Discard {
                dead_letter: true,
                reason: DiscardReason::Exhausted
            }
        );
        // max_attempts 0 behaves like 1.
        assert!(matches!(
            decide_with(r#"{"max_attempts":0}"#, 1, r#"{"message":"m"}"#),
            Outcome::Discard { .. }
        ));
        assert_eq!(
            decide_with(
                r#"{"max_attempts":1,"on_exhaustion":"discard"}"#,
                1,
                r#"{"message":"m"}"#
            ),
            Outcome::Discard {
                dead_letter: false,
                reason: DiscardReason::Exhausted
            }
        );
    }

    #[test]
    fn non_retryable_errors_and_flag_skip_retries() {
        let p = r#"{"max_attempts":5,"non_retryable_errors":["ValidationError","db.*"]}"#;
        for e in [
            r#"{"message":"m","type":"ValidationError"}"#,
            r#"{"message":"m","details":{"error_class":"ValidationError"}}"#,
            r#"{"message":"m","code":"db.locked"}"#,
            r#"{"message":"m","retryable":false}"#,
        ] {
            assert_eq!(
                decide_with(p, 1, e),
                Outcome::Discard {
                    dead_letter: true,
                    reason: DiscardReason::NonRetryable
                },
                "{e}"
            );
        }
        assert!(matches!(
            decide_with(p, 1, r#"{"message":"m","type":"Timeout","retryable":true}"#),
            Outcome::Retry { .. }
        ));
    }

    #[test]
    fn reclaims_requeue_while_attempts_remain_and_timeouts_follow_the_policy() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let three = policy(r#"{"max_attempts":3}"#);
        for cause in [
            Reclaim::VisibilityTimeout,
            Reclaim::WorkerDeath,
            Reclaim::Shutdown,
        ] {
            let (outcome, error) = reclaim(&three, 2, cause, &mut rng);
            assert_eq!(outcome, Outcome::Requeue, "{cause:?}");
            assert_eq!(error.code, cause.code());
            assert_eq!(
                reclaim(&three, 3, cause, &mut rng).0,
                Outcome::Discard {
                    dead_letter: true,
                    reason: DiscardReason::Exhausted
                }
            );
        }
        assert!(matches!(
            reclaim(&three, 1, Reclaim::ExecutionTimeout, &mut rng).0,
            Outcome::Retry { .. }
        ));
        let timeout_is_final = policy(r#"{"max_attempts":3,"non_retryable_errors":["timeout"]}"#);
        assert_eq!(
            reclaim(&timeout_is_final, 1, Reclaim::ExecutionTimeout, &mut rng).0,
            Outcome::Discard {
                dead_letter: true,
                reason: DiscardReason::NonRetryable
            }
        );
        let discard = policy(r#"{"max_attempts":9,"on_exhaustion":"discard"}"#);
        let (outcome, error) = reclaim(&discard, 1, Reclaim::TotalTimeout, &mut rng);
        assert_eq!(
            outcome,
            Outcome::Discard {
                dead_letter: false,
                reason: DiscardReason::Exhausted
            }
        );
        assert_eq!(error.code, "expired");
    }

    #[test]
    fn handler_directives() {
        let p = r#"{"max_attempts":5,"non_retryable_errors":["RETRY"]}"#;
        assert_eq!(
            decide_with(p, 1, r#"{"message":"m","code":"DISCARD"}"#),
            Outcome::Discard {
                dead_letter: false,
                reason: DiscardReason::HandlerDirective
            }
        );
        assert_eq!(
            decide_with(p, 1, r#"{"message":"m","code":"FAIL"}"#),
            Outcome::Discard {
                dead_letter: false,
                reason: DiscardReason::HandlerDirective
            }
        );
        assert_eq!(
            decide_with(p, 1, r#"{"message":"m","code":"DEAD_LETTER"}"#),
            Outcome::Discard {
                dead_letter: true,
                reason: DiscardReason::HandlerDirective
            }
        );
        // RETRY skips the non-retryable check but not the attempt limit.
        assert!(matches!(
            decide_with(p, 1, r#"{"message":"m","code":"RETRY","retryable":false}"#),
            Outcome::Retry { .. }
        ));
        assert!(matches!(
            decide_with(p, 5, r#"{"message":"m","code":"RETRY"}"#),
            Outcome::Discard {
                reason: DiscardReason::Exhausted,
                ..
            }
        ));
    }
}
