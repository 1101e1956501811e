//! `database`: where PostgreSQL is, how many connections ojsd keeps, and the time limits of
//! its sessions.

use std::str::FromStr;
use std::time::Duration;

use anyhow::{Context, bail};
use sqlx::postgres::{PgConnectOptions, PgSslMode};

use super::values::{millis, millis_default, seconds, seconds_default};
use crate::db::target::split_url;
use crate::db::{DbTarget, PoolSettings};

pub const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/ojs";
pub const DEFAULT_DB_MAX_CONNECTIONS: u32 = 20;
pub const DEFAULT_DB_MIN_CONNECTIONS: u32 = 2;
pub const DEFAULT_DB_ACQUIRE_TIMEOUT_MS: &str = "5000";
pub const DEFAULT_DB_STATEMENT_TIMEOUT_SECS: &str = "30";
pub const DEFAULT_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECS: &str = "60";

#[derive(Debug, Clone, clap::Args)]
pub struct Database {
    /// PostgreSQL connection URL. The database is created if it does not exist (and the user
    /// may create databases).
    #[arg(
        long = "database-url",
        id = "database_url",
        env = "DATABASE_URL",
        default_value = DEFAULT_DATABASE_URL,
        hide_env_values = true,
    )]
    pub url: String,

    /// Most database connections this process opens.
    #[arg(
        long = "db-max-connections",
        id = "db_max_connections",
        env = "OJS_DB_MAX_CONNECTIONS",
        default_value_t = DEFAULT_DB_MAX_CONNECTIONS,
    )]
    pub max_connections: u32,

    /// Database connections kept open even when idle.
    #[arg(
        long = "db-min-connections",
        id = "db_min_connections",
        env = "OJS_DB_MIN_CONNECTIONS",
        default_value_t = DEFAULT_DB_MIN_CONNECTIONS,
    )]
    pub min_connections: u32,

    /// How long a request waits for a free database connection before answering 503 (ms).
    #[arg(
        long = "db-acquire-timeout-ms",
        id = "db_acquire_timeout_ms",
        env = "OJS_DB_ACQUIRE_TIMEOUT_MS",
        value_parser = millis,
        default_value = DEFAULT_DB_ACQUIRE_TIMEOUT_MS,
    )]
    pub acquire_timeout: Duration,

    /// `statement_timeout` of the server's database sessions: no statement holds locks longer
    /// (seconds; a statement cut short answers 503, retryable).
    #[arg(
        long = "db-statement-timeout-secs",
        id = "db_statement_timeout_secs",
        env = "OJS_DB_STATEMENT_TIMEOUT_SECS",
        value_parser = seconds,
        default_value = DEFAULT_DB_STATEMENT_TIMEOUT_SECS,
    )]
    pub statement_timeout: Duration,

    /// `idle_in_transaction_session_timeout` of the server's database sessions: a transaction
    /// left open and idle this long is ended, so it cannot hold locks or pin vacuum (seconds).
    #[arg(
        long = "db-idle-in-transaction-timeout-secs",
        id = "db_idle_in_transaction_timeout_secs",
        env = "OJS_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECS",
        value_parser = seconds,
        default_value = DEFAULT_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECS,
    )]
    pub idle_in_transaction_timeout: Duration,

    /// How `DATABASE_URL` reaches Postgres: `none` (directly, or through a pooler in session
    /// mode) or `transaction` (through a connection pooler in transaction mode, such as
    /// PgBouncer's `pool_mode = transaction`: every statement then runs in a transaction of its
    /// own, no statement is kept prepared, and nothing relies on the session).
    #[arg(
        long = "database-pooler",
        id = "database_pooler",
        env = "OJS_DATABASE_POOLER",
        value_enum,
        default_value_t = Pooler::None,
    )]
    pub pooler: Pooler,

    /// A connection to Postgres that is a session of its own (not through a transaction-mode
    /// pooler), for what needs one: the notification listener (LISTEN) and migrations (their
    /// lock). Without it, a server behind a transaction-mode pooler polls instead of being
    /// notified (every `OJS_FETCH_POLL_INTERVAL_MS`) and does not migrate (run `ojsd migrate`
    /// with a direct `DATABASE_URL`, then start with `OJS_SKIP_MIGRATIONS=true`).
    #[arg(
        long = "listen-database-url",
        id = "listen_database_url",
        env = "OJS_LISTEN_DATABASE_URL",
        hide_env_values = true
    )]
    pub listen_url: Option<String>,

    /// Do not apply pending migrations at start (apply them with `ojsd migrate` instead).
    #[arg(
        long,
        env = "OJS_SKIP_MIGRATIONS",
        value_parser = clap::builder::BoolishValueParser::new(),
    )]
    pub skip_migrations: bool,
}

impl Default for Database {
    fn default() -> Self {
        Database {
            url: DEFAULT_DATABASE_URL.to_owned(),
            max_connections: DEFAULT_DB_MAX_CONNECTIONS,
            min_connections: DEFAULT_DB_MIN_CONNECTIONS,
            acquire_timeout: millis_default(DEFAULT_DB_ACQUIRE_TIMEOUT_MS),
            statement_timeout: seconds_default(DEFAULT_DB_STATEMENT_TIMEOUT_SECS),
            idle_in_transaction_timeout: seconds_default(
                DEFAULT_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECS,
            ),
            skip_migrations: false,
            pooler: Pooler::None,
            listen_url: None,
        }
    }
}

/// How ojsd's connections reach Postgres (`OJS_DATABASE_POOLER`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Pooler {
    /// Directly (or through a pooler in session mode): sessions are ojsd's own.
    #[default]
    None,
    /// Through a connection pooler in transaction mode: a session lasts one transaction.
    Transaction,
}

impl Database {
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.max_connections < 2 || self.min_connections > self.max_connections {
            bail!(
                "need 2 <= OJS_DB_MAX_CONNECTIONS and OJS_DB_MIN_CONNECTIONS <= OJS_DB_MAX_CONNECTIONS"
            );
        }
        if self.statement_timeout.is_zero() || self.idle_in_transaction_timeout.is_zero() {
            bail!(
                "OJS_DB_STATEMENT_TIMEOUT_SECS and OJS_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECS must be positive"
            );
        }
        self.target()?;
        if let Some(url) = &self.listen_url {
            target_of(url, "OJS_LISTEN_DATABASE_URL")?;
        }
        if self.pooler == Pooler::Transaction && self.listen_url.is_none() && !self.skip_migrations
        {
            bail!(
                "OJS_DATABASE_POOLER=transaction: migrations need a session of their own. Set \
                 OJS_LISTEN_DATABASE_URL to a direct connection, or run `ojsd migrate` with a \
                 direct DATABASE_URL and start with OJS_SKIP_MIGRATIONS=true"
            );
        }
        Ok(())
    }

    /// Whether statements go through a transaction-mode pooler.
    pub fn pooled(&self) -> bool {
        self.pooler == Pooler::Transaction
    }

    /// Where sessions of their own go (migrations, the listener): `OJS_LISTEN_DATABASE_URL`
    /// when set, else `DATABASE_URL` (`None` behind a transaction-mode pooler without one).
    pub fn session_target(&self) -> anyhow::Result<Option<DbTarget>> {
        match &self.listen_url {
            Some(url) => Ok(Some(target_of(url, "OJS_LISTEN_DATABASE_URL")?)),
            None if self.pooled() => Ok(None),
            None => Ok(Some(self.target()?)),
        }
    }

    /// The pool's size and the acquire timeout.
    pub fn pool(&self) -> PoolSettings {
        PoolSettings {
            max_connections: self.max_connections,
            min_connections: self.min_connections,
            acquire_timeout: self.acquire_timeout,
        }
    }

    /// The database hosts `url` names (one, or several: see [`crate::db::target`]), with their
    /// connection options. A database on this host (a loopback address or a Unix socket) is
    /// reached without TLS unless the URL or `PGSSLMODE` asks for a mode: the default mode,
    /// `prefer`, would encrypt every message to a server on the same machine, which protects
    /// nothing and cost a tenth of the throughput of one-ACK-per-job draining (Postgres and
    /// ojsd each encrypt and decrypt every statement and answer).
    pub fn target(&self) -> anyhow::Result<DbTarget> {
        target_of(&self.url, "DATABASE_URL")
    }
}

/// The hosts of the connection URL `url` (named `setting` in errors), with their options (see
/// [`Database::target`]).
fn target_of(url: &str, setting: &str) -> anyhow::Result<DbTarget> {
    let split = split_url(url).map_err(|why| anyhow::anyhow!("{setting}: {why}"))?;
    let mode_given = std::env::var_os("PGSSLMODE").is_some() || url_names_ssl_mode(url);
    let hosts = split
        .urls
        .iter()
        .map(|url| {
            let options = PgConnectOptions::from_str(url)
                .with_context(|| format!("{setting} is not a valid PostgreSQL URL"))?
                .application_name("ojsd");
            let local = options.get_socket().is_some() || on_this_host(options.get_host());
            Ok(if !mode_given && local {
                options.ssl_mode(PgSslMode::Disable)
            } else {
                options
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(DbTarget::new(hosts, split.attrs))
}

/// Whether a PostgreSQL URL's query names an SSL mode (`sslmode`, or sqlx's `ssl-mode`).
fn url_names_ssl_mode(url: &str) -> bool {
    url.split_once('?').is_some_and(|(_, query)| {
        query.split('&').any(|pair| {
            let key = pair.split_once('=').map_or(pair, |(k, _)| k);
            key.eq_ignore_ascii_case("sslmode") || key.eq_ignore_ascii_case("ssl-mode")
        })
    })
}

/// Whether a connection's host is this machine: a Unix socket directory, `localhost` or a
/// loopback address.
fn on_this_host(host: &str) -> bool {
    host.starts_with('/')
        || host.eq_ignore_ascii_case("localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The SSL mode `target` gives a URL (when `PGSSLMODE` is not set).
    fn ssl_mode_of(url: &str) -> Option<PgSslMode> {
        if std::env::var_os("PGSSLMODE").is_some() {
            return None;
        }
        let database = Database {
            url: url.to_owned(),
            ..Database::default()
        };
        Some(database.target().expect("valid URL").hosts()[0].get_ssl_mode())
    }

    #[test]
    fn a_database_on_this_host_is_reached_without_tls_unless_the_url_names_a_mode() {
        for url in [
            "postgres://postgres@127.0.0.1:5432/ojs",
            "postgres://postgres@localhost/ojs",
            "postgres://postgres@[::1]:5432/ojs",
            "postgres://postgres@127.0.0.2/ojs?application_name=x",
            "postgres:///ojs?host=/var/run/postgresql",
        ] {
            if let Some(mode) = ssl_mode_of(url) {
                assert!(matches!(mode, PgSslMode::Disable), "{url}: {mode:?}");
            }
        }
        for (url, expected) in [
            (
                "postgres://postgres@127.0.0.1/ojs?sslmode=require",
                "Require",
            ),
            ("postgres://postgres@localhost/ojs?sslmode=prefer", "Prefer"),
            ("postgres://postgres@db.example.com/ojs", "Prefer"),
            ("postgres://postgres@10.0.0.5:5432/ojs", "Prefer"),
        ] {
            if let Some(mode) = ssl_mode_of(url) {
                assert_eq!(format!("{mode:?}"), expected, "{url}");
            }
        }
    }

    #[test]
    fn only_an_sslmode_key_counts_as_naming_a_mode() {
        assert!(url_names_ssl_mode("postgres://h/db?sslmode=disable"));
        assert!(url_names_ssl_mode("postgres://h/db?a=b&SSLMODE=require"));
        assert!(url_names_ssl_mode("postgres://h/db?ssl-mode=require"));
        assert!(!url_names_ssl_mode("postgres://h/db"));
        assert!(!url_names_ssl_mode(
            "postgres://h/db?application_name=sslmode"
        ));
        assert!(!url_names_ssl_mode("postgres://h/db?sslrootcert=x"));
    }

    #[test]
    fn a_transaction_pooler_needs_a_session_for_migrations() {
        let pooled = Database {
            pooler: Pooler::Transaction,
            ..Database::default()
        };
        let refused = pooled.validate().unwrap_err().to_string();
        assert!(refused.contains("OJS_LISTEN_DATABASE_URL"), "{refused}");
        let skipping = Database {
            skip_migrations: true,
            ..pooled.clone()
        };
        skipping.validate().unwrap();
        assert!(skipping.session_target().unwrap().is_none());
        let with_session = Database {
            listen_url: Some("postgres://postgres@127.0.0.1:5432/ojs".into()),
            ..pooled
        };
        with_session.validate().unwrap();
        assert!(with_session.session_target().unwrap().is_some());
        let bad = Database {
            listen_url: Some("postgres://127.0.0.1:notaport/ojs".into()),
            ..with_session
        };
        let refused = bad.validate().unwrap_err().to_string();
        assert!(refused.contains("OJS_LISTEN_DATABASE_URL"), "{refused}");
    }
}
