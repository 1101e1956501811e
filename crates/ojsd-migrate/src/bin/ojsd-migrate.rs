//! Applies ojsd's migrations to `DATABASE_URL` (creating the database if needed) and exits.
//!
//! Used to bootstrap a development database before the server crate compiles against it
//! (`cargo run -p ojsd-migrate`); the server itself offers the same as `ojsd migrate`.

use std::str::FromStr;

use sqlx::postgres::PgConnectOptions;

const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/ojs";

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_DATABASE_URL.to_owned());
    let options = PgConnectOptions::from_str(&url)?;
    if ojsd_migrate::ensure_database(&options).await? {
        eprintln!(
            "created database {}",
            options.get_database().unwrap_or_default()
        );
    }
    let report = ojsd_migrate::run_with(&options).await?;
    if report.applied.is_empty() {
        eprintln!("schema is up to date");
    }
    for name in report.applied {
        eprintln!("applied {name}");
    }
    Ok(())
}
