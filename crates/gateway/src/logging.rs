//! Structured logs (tracing): human-readable text or one JSON object per line, filtered by
//! `--log-filter` (EnvFilter syntax). Logs go to stderr; stdout carries only the
//! `listening on http://ADDR` line. Nothing logs tokens, headers, query strings or the
//! database URL — nor statement parameters: `tokio_postgres` stays at `info` whatever the filter
//! (at `debug` it logs every parameter: requests, and the object-store mover's signing keys).

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the global subscriber (a second call is a no-op).
pub fn init(format: LogFormat, filter: &str) {
    let mut filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    if let Ok(quiet) = "tokio_postgres=info".parse() {
        filter = filter.add_directive(quiet);
    }
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_target(true);
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.with_ansi(false).try_init(),
    };
}
