//! The `ojsd` binary: `ojsd serve` (the default) runs the server, `ojsd migrate` applies the
//! schema migrations and exits. Every setting is documented in `ojsd --help`.

use clap::{Parser, Subcommand};
use ojsd::app::{self, Application};
use ojsd::config::Config;

#[derive(Parser)]
#[command(
    name = "ojsd",
    version,
    about = "An Open Job Spec (OJS) job server on PostgreSQL"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    config: Config,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server (the default).
    Serve,
    /// Apply pending database migrations, then exit.
    Migrate,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cli.config.runtime_worker_threads()?)
        .enable_all()
        .build()?
        .block_on(run(cli))
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    ojsd::telemetry::init(cli.config.log_format);
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => {
            let app = Application::build(&cli.config).await?;
            app.run_until_stopped(app::shutdown_signal()).await
        }
        Command::Migrate => {
            cli.config.validate()?;
            let report = app::migrate(&cli.config).await?;
            if report.applied.is_empty() {
                tracing::info!("schema is up to date");
            }
            Ok(())
        }
    }
}
