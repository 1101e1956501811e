//! Schema migrations for ojsd.
//!
//! The SQL lives in `migrations/V{n}__{what}.sql` at the repository root and is embedded into
//! the binary by refinery. refinery has no sqlx driver, so `SqlxConnection` implements
//! refinery-core's async driver traits over a borrowed sqlx connection; every migration runs in
//! its own transaction, and the whole run holds a session advisory lock so that replicas starting
//! together apply each migration exactly once (the others wait, then find nothing to do).
//!
//! This crate is separate from `ojsd` on purpose: the server's `query!` macros need a migrated
//! database (or the committed `.sqlx/` data) to compile, so the migrator must build without them.

use refinery_core::traits::r#async::{AsyncMigrate, AsyncQuery, AsyncTransaction};
use refinery_core::{Migration, Runner};
use sha2::{Digest, Sha256};
use sqlx::postgres::{PgAdvisoryLock, PgConnectOptions, PgConnection};
use sqlx::{ConnectOptions, Connection, Executor, Row};

mod embedded {
    refinery::embed_migrations!("../../migrations");
}

/// Name of the advisory lock held while migrations run (hashed by sqlx into a lock key).
const MIGRATION_LOCK: &str = "ojsd:schema-migrations";

/// Errors of the migrator.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The database could not be reached or a statement failed outside a migration.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    /// A migration failed (it was rolled back), or the applied history diverges from the files.
    #[error(transparent)]
    Migration(#[from] refinery_core::Error),
}

/// Outcome of a migration run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Migrations applied by this run, as `V{n}__{name}`.
    pub applied: Vec<String>,
}

/// Applies every pending migration on `conn`, holding the migration advisory lock meanwhile.
///
/// Editing a migration that has already been applied is an error (divergent checksum).
pub async fn run(conn: &mut PgConnection) -> Result<Report, Error> {
    run_until(conn, refinery_core::Target::Latest).await
}

/// [`run`] up to and including migration `V{version}` only: a database of an earlier release,
/// for tests of the migrations that follow (a populated database migrated in place).
pub async fn run_to(conn: &mut PgConnection, version: i32) -> Result<Report, Error> {
    run_until(conn, refinery_core::Target::Version(version)).await
}

async fn run_until(
    conn: &mut PgConnection,
    target: refinery_core::Target,
) -> Result<Report, Error> {
    let lock = PgAdvisoryLock::new(MIGRATION_LOCK);
    let mut guard = lock.acquire(conn).await?;
    let result = embedded::migrations::runner()
        .set_abort_divergent(true)
        .set_abort_missing(false)
        .set_target(target)
        .run_async(&mut SqlxConnection(guard.as_mut()))
        .await;
    // Release explicitly; if this is skipped the guard's drop still queues the unlock.
    guard.release_now().await?;
    let report = result?;
    Ok(Report {
        applied: report
            .applied_migrations()
            .iter()
            .map(|m| format!("V{}__{}", m.version(), m.name()))
            .collect(),
    })
}

/// Connects with `options`, applies pending migrations and closes the connection.
pub async fn run_with(options: &PgConnectOptions) -> Result<Report, Error> {
    let mut conn = options.connect().await?;
    let report = run(&mut conn).await;
    conn.close().await?;
    report
}

/// Creates the database named in `options` if it does not exist yet.
///
/// Connects to the `postgres` maintenance database of the same server. Returns `Ok(true)` when
/// the database was created. A concurrent creation by another process is not an error.
pub async fn ensure_database(options: &PgConnectOptions) -> Result<bool, Error> {
    let Some(name) = options.get_database().map(str::to_owned) else {
        return Ok(false);
    };
    let mut admin = options.clone().database("postgres").connect().await?;
    let exists: bool = sqlx::query("select exists (select 1 from pg_database where datname = $1)")
        .bind(&name)
        .fetch_one(&mut admin)
        .await?
        .get(0);
    let mut created = false;
    if !exists {
        let statement = format!("create database {}", quote_identifier(&name));
        match admin.execute(statement.as_str()).await {
            Ok(_) => created = true,
            // 42P04 duplicate_database: another process won the race; 23505 can surface instead
            // when both inserts into pg_database collide.
            Err(sqlx::Error::Database(e))
                if matches!(e.code().as_deref(), Some("42P04") | Some("23505")) => {}
            Err(e) => return Err(e.into()),
        }
    }
    admin.close().await?;
    Ok(created)
}

/// A stable digest of every embedded migration (version, name and SQL).
///
/// Test harnesses name their migrated template database after it, so a changed or added
/// migration produces a fresh template instead of reusing a stale one.
pub fn fingerprint() -> String {
    let mut hasher = Sha256::new();
    for migration in embedded::migrations::runner().get_migrations() {
        hasher.update(migration.version().to_string());
        hasher.update(migration.name());
        hasher.update(migration.sql().unwrap_or_default());
    }
    hex::encode(&hasher.finalize()[..8])
}

/// Quotes a Postgres identifier (doubles embedded quotes).
pub fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// refinery's async driver traits over a borrowed sqlx connection.
struct SqlxConnection<'c>(&'c mut PgConnection);

impl AsyncTransaction for SqlxConnection<'_> {
    type Error = sqlx::Error;

    async fn execute<'a, T: Iterator<Item = &'a str> + Send + 'a>(
        &'a mut self,
        queries: T,
    ) -> Result<usize, Self::Error> {
        let queries: Vec<String> = queries.map(str::to_owned).collect();
        execute_in_transaction(self.0, queries).await
    }
}

impl AsyncQuery<Vec<Migration>> for SqlxConnection<'_> {
    async fn query<'a>(&'a mut self, query: &'a str) -> Result<Vec<Migration>, Self::Error> {
        applied_migrations(self.0, query.to_owned()).await
    }
}

// The two helpers below are plain async fns on purpose: written inline in the trait methods,
// the compiler cannot prove the returned futures `Send` (a higher-ranked lifetime limitation
// around sqlx's `Executor` impls).

async fn execute_in_transaction(
    conn: &mut PgConnection,
    queries: Vec<String>,
) -> Result<usize, sqlx::Error> {
    let mut tx = conn.begin().await?;
    for query in &queries {
        // The simple-query protocol lets one migration file hold many statements.
        tx.execute(sqlx::raw_sql(query)).await?;
    }
    tx.commit().await?;
    Ok(queries.len())
}

async fn applied_migrations(
    conn: &mut PgConnection,
    query: String,
) -> Result<Vec<Migration>, sqlx::Error> {
    let rows = conn.fetch_all(sqlx::raw_sql(&query)).await?;
    rows.iter()
        .map(|row| {
            let version: i32 = row.try_get(0)?;
            let name: String = row.try_get(1)?;
            let applied_on: String = row.try_get(2)?;
            let checksum: String = row.try_get(3)?;
            let applied_on = time::OffsetDateTime::parse(
                &applied_on,
                &time::format_description::well_known::Rfc3339,
            )
            .map_err(|e| sqlx::Error::Decode(Box::new(e)))?;
            let checksum = checksum
                .parse::<u64>()
                .map_err(|e| sqlx::Error::Decode(Box::new(e)))?;
            Ok(Migration::applied(version, name, applied_on, checksum))
        })
        .collect()
}

impl AsyncMigrate for SqlxConnection<'_> {}

/// The embedded migrations, for callers that want to list them.
pub fn migrations() -> Vec<Migration> {
    let runner: Runner = embedded::migrations::runner();
    runner.get_migrations().clone()
}
