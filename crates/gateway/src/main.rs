//! `syncular-gateway` binary: parse flags (clap, `SYNCULAR_GATEWAY_*` env
//! fallbacks), set up logging, run the gateway until SIGTERM/SIGINT.
//! Exit code 0 after a graceful shutdown, 1 on a startup or runtime failure,
//! 2 on bad flags (clap), including `--auth dev` with a `--jwt-*` flag.

use syncular_gateway::config::Config;

fn main() -> std::process::ExitCode {
    let config = Config::parse_checked();
    syncular_gateway::logging::init(config.log_format, &config.log_filter);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("syncular-gateway: cannot start the tokio runtime: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    match runtime.block_on(syncular_gateway::run(config)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "syncular-gateway stopped with an error");
            eprintln!("syncular-gateway: {e}");
            std::process::ExitCode::from(1)
        }
    }
}
