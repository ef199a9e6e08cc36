//! `syncular-object-mover`: the object-store mover of `syncular-gateway` on its own
//! (docs/src/operate/object-store.md), for a deployment whose gateway is written in another
//! language. Runs until SIGTERM/SIGINT; exit code 1 on a startup failure, 2 on bad flags.

use clap::Parser;
use syncular_gateway::config::LogFormat;
use syncular_gateway::objects::args::ObjectStoreArgs;
use tokio_util::sync::CancellationToken;

/// The mover's flags: the database, the bucket, logging.
#[derive(Debug, Parser)]
#[command(name = "syncular-object-mover", version, about = "Moves segment and blob bytes between the syncular extension and an S3-compatible bucket")]
struct Args {
    /// Postgres connection string; the role needs `syncular_gateway`. Never logged.
    #[arg(long, env = "SYNCULAR_GATEWAY_DATABASE_URL", hide_env_values = true)]
    database_url: String,
    #[command(flatten)]
    object_store: ObjectStoreArgs,
    /// Log line format.
    #[arg(long, env = "SYNCULAR_GATEWAY_LOG_FORMAT", value_enum, default_value = "text")]
    log_format: LogFormat,
    /// Log filter (tracing `EnvFilter` syntax).
    #[arg(long, env = "SYNCULAR_GATEWAY_LOG", default_value = "info")]
    log_filter: String,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    syncular_gateway::logging::init(args.log_format, &args.log_filter);
    if !args.object_store.enabled() {
        eprintln!("syncular-object-mover: --object-store-endpoint is required");
        return std::process::ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("syncular-object-mover: cannot start the tokio runtime: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    let run = async {
        let config = syncular_gateway::db::pg_config(&args.database_url, "--database-url", "syncular-object-mover")?;
        let pool = syncular_gateway::db::build_pool(config, 4)?;
        let stop = CancellationToken::new();
        let mover = syncular_gateway::objects::mover::start(pool, &args.object_store, stop.clone())?
            .ok_or_else(|| "--object-store-endpoint is required".to_owned())?;
        println!("object mover running");
        syncular_gateway::shutdown::signal().await;
        stop.cancel();
        let _ = mover.await;
        Ok::<(), String>(())
    };
    match runtime.block_on(run) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("syncular-object-mover: {e}");
            std::process::ExitCode::from(1)
        }
    }
}
