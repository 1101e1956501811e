//! The `ojsd` binary: `ojsd serve` (the default) runs the server, `ojsd migrate` applies the
//! schema migrations and exits, `ojsd keys` manages API keys, `ojsd secret-key` prints a new
//! secret key. Every setting is documented in
//! `ojsd --help`.

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
    Serve {
        /// Start a private PostgreSQL in the data directory (made on first use, with the
        /// machine's own initdb and pg_ctl), use it, and stop it on shutdown. For trying ojsd
        /// on a machine with no database running; never implied.
        #[arg(long)]
        embedded: bool,
        /// The embedded cluster's directory.
        #[arg(
            long,
            env = "OJS_DATA_DIR",
            default_value = "./ojsd-data",
            requires = "embedded"
        )]
        data_dir: std::path::PathBuf,
    },
    /// Apply pending database migrations, then exit.
    Migrate,
    /// Create, list and revoke API keys (effective on every replica within a second).
    #[command(subcommand)]
    Keys(Keys),
    /// Print a new random secret key for OJS_SECRET_KEY (64 hex digits), then exit.
    SecretKey,
}

#[derive(Subcommand)]
enum Keys {
    /// Create a key and print it (it is shown only this once).
    Create {
        /// producer (enqueue, read and cancel jobs), worker (the worker protocol) or admin.
        #[arg(long)]
        role: String,
        /// Limit a producer or worker key to these queues (comma-separated).
        #[arg(long, value_delimiter = ',')]
        queues: Option<Vec<String>>,
        /// Bind the key to a tenant: it acts as that tenant (X-OJS-Tenant); an admin key so
        /// bound administers that tenant alone.
        #[arg(long)]
        tenant: Option<String>,
        /// What the key is for.
        #[arg(long)]
        name: Option<String>,
    },
    /// List the keys (their first characters, never the keys).
    List,
    /// Revoke a key by its id.
    Revoke {
        /// The id `ojsd keys list` shows.
        id: uuid::Uuid,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cli.config.server.runtime_worker_threads()?)
        .enable_all()
        .build()?
        .block_on(run(cli))
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    ojsd::telemetry::init(cli.config.telemetry.log_format);
    let command = cli.command.unwrap_or(Command::Serve {
        embedded: false,
        data_dir: "./ojsd-data".into(),
    });
    match command {
        Command::Serve {
            embedded: false, ..
        } => {
            let app = Application::build(&cli.config).await?;
            app.run_until_stopped(app::shutdown_signal()).await
        }
        Command::Serve {
            embedded: true,
            data_dir,
        } => serve_embedded(cli.config, data_dir).await,
        Command::Keys(command) => keys(&cli.config, command).await,
        Command::SecretKey => {
            println!("{}", ojsd::webhook::secret::generate_key());
            Ok(())
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

/// `ojsd serve --embedded`: starts the private cluster, serves on it, stops it.
async fn serve_embedded(mut config: Config, data_dir: std::path::PathBuf) -> anyhow::Result<()> {
    use anyhow::Context;
    use ojsd::db::embedded::Cluster;
    // From here on a SIGINT or SIGTERM ends the server gracefully, and so stops the cluster,
    // however early it comes.
    let stop = app::shutdown_signal();
    if config.database.url != ojsd::config::DEFAULT_DATABASE_URL {
        anyhow::bail!(
            "--embedded runs ojsd on a private PostgreSQL, but DATABASE_URL names another \
             database; drop one of the two"
        );
    }
    let mut cluster = tokio::task::spawn_blocking(move || {
        let mut cluster = Cluster::open(&data_dir, ojsd::db::embedded::Access::SocketOnly)?;
        cluster.start(&[])?;
        anyhow::Ok(cluster)
    })
    .await
    .context("starting the embedded PostgreSQL")??;
    config.database.url = cluster.database_url("ojs");
    tracing::info!(
        data = %cluster.pgdata().display(),
        socket = %cluster.socket_dir().display(),
        log = %cluster.log_file().display(),
        psql = %cluster.psql_command("ojs"),
        "embedded PostgreSQL running (Unix socket only; stopped when ojsd stops)"
    );
    let served = async {
        let app = Application::build(&config).await?;
        app.run_until_stopped(stop).await
    }
    .await;
    let stopped = tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .context("stopping the embedded PostgreSQL")?;
    match (served, stopped) {
        (Err(e), stopped) => {
            if let Err(stop) = stopped {
                tracing::error!(error = %stop, "cannot stop the embedded PostgreSQL");
            }
            Err(e)
        }
        (Ok(()), stopped) => {
            stopped?;
            tracing::info!("embedded PostgreSQL stopped");
            Ok(())
        }
    }
}

async fn keys(config: &Config, command: Keys) -> anyhow::Result<()> {
    use anyhow::Context;
    use ojsd::store::api_key;
    config.validate()?;
    app::migrate(config).await?;
    // A session of its own (OJS_LISTEN_DATABASE_URL behind a transaction-mode pooler).
    let Some(target) = config.database.session_target()? else {
        anyhow::bail!(
            "behind a transaction-mode pooler, key commands need OJS_LISTEN_DATABASE_URL (a direct connection)"
        );
    };
    let db = ojsd::db::Db::direct(
        sqlx::PgPool::connect_with(app::find_database(&target).await?)
            .await
            .context("cannot connect to PostgreSQL")?,
    );
    let show = |row: &api_key::KeyRow| {
        format!(
            "{}  {:<8}  {:<14}  {}  {}{}{}",
            row.id,
            row.role,
            row.key_prefix,
            row.queues
                .as_ref()
                .map_or_else(|| "*".to_owned(), |q| q.join(",")),
            row.tenant
                .as_ref()
                .map(|t| format!("tenant={t}  "))
                .unwrap_or_default(),
            row.name,
            row.revoked_at
                .map(|at| format!("  (revoked {at})"))
                .unwrap_or_default()
        )
    };
    match command {
        Keys::Create {
            role,
            queues,
            tenant,
            name,
        } => {
            let request = ojsd::auth::KeyRequest::new(&role, queues, tenant, name)
                .map_err(|(field, message)| anyhow::anyhow!("{field}: {message}"))?;
            let created = ojsd::broker::keys::create_key(&db, &request).await?;
            println!("{}", show(&created.row));
            println!("key: {}", created.key);
            eprintln!("Store the key now: it cannot be shown again.");
        }
        Keys::List => {
            for row in api_key::list(&db).await? {
                println!("{}", show(&row));
            }
        }
        Keys::Revoke { id } => match api_key::revoke(&db, id).await? {
            Some(row) => println!("{}", show(&row)),
            None => anyhow::bail!("no key has the id {id}"),
        },
    }
    Ok(())
}
