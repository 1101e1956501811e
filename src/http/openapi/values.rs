//! Named schemas of request values whose rules are written in code rather than in a Rust type
//! (the parsers read them from the request's JSON), each built from the constants the parser
//! checks against; the server fills in the limits that are its settings when it starts.

use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{
    KnownFormat, ObjectBuilder, OneOfBuilder, Schema, SchemaFormat, Type,
};

use crate::wire::duration;

/// A positive number of milliseconds, at most 100 years.
pub struct Milliseconds;

impl utoipa::PartialSchema for Milliseconds {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .minimum(Some(1))
            .maximum(Some(duration::MAX_MS))
            .description(Some("Milliseconds, from 1 to 100 years."))
            .into()
    }
}

impl utoipa::ToSchema for Milliseconds {}

/// How many jobs a FETCH may ask for: 1 to the server's `limits.max_fetch_count`.
pub struct FetchCount;

impl utoipa::PartialSchema for FetchCount {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .minimum(Some(1))
            .description(Some("1 to the server's `limits.max_fetch_count`."))
            .into()
    }
}

impl utoipa::ToSchema for FetchCount {}

/// An RFC 3339 timestamp with a zone.
pub struct Timestamp;

impl utoipa::PartialSchema for Timestamp {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime)))
            .min_length(Some(20))
            .pattern(Some(crate::wire::timestamp::PATTERN))
            .description(Some("RFC 3339, with a zone (`Z` or `±hh:mm`)."))
            .into()
    }
}

impl utoipa::ToSchema for Timestamp {}

/// A duration: ISO 8601 (`PT30S`, `P1DT2H`) or the short form (`500ms`, `30s`, `5m`).
pub struct Duration;

impl utoipa::PartialSchema for Duration {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .min_length(Some(1))
            .pattern(Some(duration::pattern()))
            .description(Some(
                "ISO 8601 (`PT30S`, `P1DT2H`, weeks and days but no months or years) or one \
                 number and unit (`500ms`, `30s`, `5m`, `2h`, `7d`).",
            ))
            .into()
    }
}

impl utoipa::ToSchema for Duration {}

/// A whole number of seconds from 1, or a duration of at least a second.
pub struct Seconds;

impl utoipa::PartialSchema for Seconds {
    fn schema() -> RefOr<Schema> {
        OneOfBuilder::new()
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .minimum(Some(1))
                    .maximum(Some(duration::MAX_MS / 1_000)),
            )
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .min_length(Some(2))
                    .pattern(Some(duration::pattern_at_least_a_second())),
            )
            .description(Some(
                "Whole seconds from 1, or a duration of at least a second (`PT30S`, `5m`).",
            ))
            .into()
    }
}

impl utoipa::ToSchema for Seconds {}

/// A comma-separated list of job states from `states` (a query parameter), described by
/// `description`.
pub fn job_states(
    states: &[crate::job::JobState],
    description: &str,
) -> utoipa::openapi::schema::Object {
    let one = states
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join("|");
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(format!("^({one})(,({one}))*$")))
        .description(Some(description))
        .build()
}

/// A string that is not empty.
pub struct NonEmpty;

impl utoipa::PartialSchema for NonEmpty {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .min_length(Some(1))
            .into()
    }
}

impl utoipa::ToSchema for NonEmpty {}

/// `true`: the request acts on many jobs at once, and says so.
pub struct Confirm;

impl utoipa::PartialSchema for Confirm {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::Boolean)
            .enum_values(Some([true]))
            .description(Some(
                "Must be `true`: the request acts on many jobs at once.",
            ))
            .into()
    }
}

impl utoipa::ToSchema for Confirm {}

/// A priority: an integer from 0 (most urgent) to the server's maximum (the manifest's
/// `priority.max`), or an alias name in any case.
pub struct Priority;

impl utoipa::PartialSchema for Priority {
    fn schema() -> RefOr<Schema> {
        // Each letter of each name either way round: `^([cC][rR]...|...)$`.
        let names: Vec<String> = crate::job::PRIORITY_ALIASES
            .iter()
            .map(|(name, _)| {
                name.chars()
                    .map(|c| format!("[{}{}]", c, c.to_ascii_uppercase()))
                    .collect()
            })
            .collect();
        let aliases: Vec<String> = crate::job::PRIORITY_ALIASES
            .iter()
            .map(|(name, n)| format!("`{name}` ({n})"))
            .collect();
        OneOfBuilder::new()
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .minimum(Some(0))
                    .description(Some("0 (most urgent) to the server's `priority.max`.")),
            )
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .pattern(Some(format!("^({})$", names.join("|"))))
                    .description(Some(format!("{}, in any case.", aliases.join(", ")))),
            )
            .into()
    }
}

impl utoipa::ToSchema for Priority {}

/// A rate period: `second`, `minute`, `hour`, `day`, or a duration of at least a second (the
/// queue configuration's `rate_limit` and a rate-limit key's override).
pub fn rate_period() -> utoipa::openapi::schema::AnyOfBuilder {
    use utoipa::openapi::schema::{AnyOfBuilder, ObjectBuilder, Type};
    AnyOfBuilder::new()
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some(["second", "minute", "hour", "day"])),
        )
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .min_length(Some(2))
                .pattern(Some(duration::pattern_at_least_a_second())),
        )
}

/// `{"limit": N >= 1, "period": second | minute | hour | day | a duration}`.
pub fn rate_window() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{AdditionalProperties, ObjectBuilder, Schema, Type};
    let period = rate_period();
    Schema::Object(
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .property(
                "limit",
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .minimum(Some(1))
                    .maximum(Some(i64::from(i32::MAX))),
            )
            .property("period", period)
            .required("limit")
            .required("period")
            .additional_properties(Some(AdditionalProperties::FreeForm(false)))
            .build(),
    )
}
