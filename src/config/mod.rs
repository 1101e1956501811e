//! Server configuration: environment variables, each overridable by a flag (`ojsd --help`),
//! in sections, one per consumer. Every section hands out what its consumer takes
//! (`Duration`s, pool settings, the leader's lease, the pruner's periods…), so start-up only
//! assembles.
//!
//! | section | settings |
//! |---|---|
//! | [`Server`] | listen address, threads, connections, request time limits, identity |
//! | [`Database`] | `DATABASE_URL`, the pool, session time limits, migrations |
//! | [`Jobs`] | priorities, envelope and batch sizes, default timeouts, job types |
//! | [`Dispatch`] | FETCH strategy and weights, long-poll interval, heartbeats |
//! | [`Maintenance`] | leadership and the intervals of the leader's services |
//! | [`Retention`] | how long finished jobs, events, stale workers and cron runs are kept |
//! | [`Auth`] | API keys, and the keys secrets are sealed with |
//! | [`Webhooks`] | delivery reach, timeout and concurrency |
//! | [`Telemetry`] | log format and trace export |
//!
//! Every setting has a default that works on a development machine with a local Postgres.

mod auth;
mod database;
mod dispatch;
mod jobs;
mod maintenance;
mod retention;
mod server;
mod telemetry;
mod values;
mod webhooks;

pub use auth::Auth;
pub use database::{DEFAULT_DATABASE_URL, Database, Pooler};
pub use dispatch::{Dispatch, MAX_FETCH_COUNT, MAX_FETCH_WAIT};
pub use jobs::Jobs;
pub use maintenance::Maintenance;
pub use retention::Retention;
pub use server::Server;
pub use telemetry::Telemetry;
pub use values::{Redacted, ResponseContentType};
pub use webhooks::Webhooks;

/// ojsd's settings. Log verbosity is set with `RUST_LOG` (default `info`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Config {
    #[command(flatten)]
    pub server: Server,
    #[command(flatten, next_help_heading = "Database")]
    pub database: Database,
    #[command(flatten, next_help_heading = "Jobs")]
    pub jobs: Jobs,
    #[command(flatten, next_help_heading = "Dispatch")]
    pub dispatch: Dispatch,
    #[command(flatten, next_help_heading = "Maintenance")]
    pub maintenance: Maintenance,
    #[command(flatten, next_help_heading = "Retention")]
    pub retention: Retention,
    #[command(flatten, next_help_heading = "Auth")]
    pub auth: Auth,
    #[command(flatten, next_help_heading = "Webhooks")]
    pub webhooks: Webhooks,
    #[command(flatten, next_help_heading = "Telemetry")]
    pub telemetry: Telemetry,
}

impl Config {
    /// Checks every section, and the settings of different sections against each other.
    pub fn validate(&self) -> anyhow::Result<()> {
        self.auth.secret_keyring()?;
        self.jobs.validate()?;
        self.database.validate()?;
        self.dispatch.validate()?;
        self.server.validate(MAX_FETCH_WAIT)?;
        self.maintenance.validate()?;
        Ok(())
    }

    /// Whether job types may contain hyphens (explicit setting, else the test-hooks setting).
    pub fn hyphenated_types(&self) -> bool {
        self.jobs
            .allow_hyphenated_types
            .unwrap_or(self.server.test_hooks)
    }
}

#[cfg(test)]
mod tests {
    use clap::{Args, Command, FromArgMatches};

    use super::*;

    /// The settings as `ojsd` with no flags parses them, ignoring the environment.
    fn parsed_defaults() -> Config {
        parse(&[]).expect("no flag is required")
    }

    fn parse(flags: &[&str]) -> Option<Config> {
        let command = Config::augment_args(Command::new("ojsd"))
            .mut_args(|arg| arg.env(None::<&'static str>));
        let matches = command
            .try_get_matches_from(std::iter::once("ojsd").chain(flags.iter().copied()))
            .ok()?;
        Config::from_arg_matches(&matches).ok()
    }

    #[test]
    fn the_written_out_defaults_are_the_flags_defaults() {
        // `Config::default()` (used by tests and embedders) mirrors every `default_value`.
        assert_eq!(
            format!("{:?}", Config::default()),
            format!("{:?}", parsed_defaults())
        );
        Config::default()
            .validate()
            .expect("the defaults are valid");
    }

    #[test]
    fn the_response_content_type_is_named_by_its_media_type() {
        let parse = |value: &str| {
            parse(&["--response-content-type", value]).map(|c| c.server.response_content_type)
        };
        assert_eq!(parse("application/json"), Some(ResponseContentType::Json));
        assert_eq!(
            parse("application/openjobspec+json"),
            Some(ResponseContentType::Openjobspec)
        );
        assert_eq!(parse("text/plain"), None);
    }

    #[test]
    fn flags_keep_their_names_and_durations_their_units() {
        let config = parse(&[
            "--db-acquire-timeout-ms",
            "1500",
            "--db-statement-timeout-secs",
            "7",
            "--fetch-poll-interval-ms",
            "20",
            "--retention-completed",
            "PT1H",
            "--maintenance",
            "false",
            "--webhook-timeout-ms",
            "250",
        ])
        .expect("valid flags");
        assert_eq!(config.database.acquire_timeout.as_millis(), 1500);
        assert_eq!(config.database.statement_timeout.as_secs(), 7);
        assert_eq!(config.dispatch.fetch_poll_interval.as_millis(), 20);
        assert_eq!(config.retention.completed.as_secs(), 3600);
        assert!(!config.maintenance.enabled);
        assert_eq!(config.webhooks.timeout.as_millis(), 250);
        assert!(parse(&["--webhook-timeout-ms", "99"]).is_none());
        assert!(parse(&["--db-acquire-timeout-ms", "soon"]).is_none());
    }
}
