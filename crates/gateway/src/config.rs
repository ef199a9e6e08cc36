//! Command-line flags and their `SYNCULAR_GATEWAY_*` environment fallbacks.
//!
//! Every flag has an env twin (`--max-body-bytes` ↔ `SYNCULAR_GATEWAY_MAX_BODY_BYTES`); a flag
//! given on the command line wins. `syncular-gateway --help` prints this documentation.
//! Sizes are bytes, intervals are named by their unit (`…-secs`, `…-ms`).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser, ValueEnum};

/// How requests are authenticated (see `auth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AuthMode {
    /// UNSAFE, development only: actor and partition from the `x-syncular-actor` /
    /// `x-syncular-partition` headers, scopes from the database resolver.
    Dev,
    /// `Authorization: Bearer <JWT>` (WebSocket also `?access_token=`), HS256/RS256/ES256.
    Jwt,
}

/// JWT signature algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum JwtAlgorithm {
    /// HMAC-SHA256 with the secret of `--jwt-secret-file`.
    #[value(name = "HS256")]
    Hs256,
    /// RSA PKCS#1 v1.5 SHA-256 with the PEM public key of `--jwt-public-key-file`.
    #[value(name = "RS256")]
    Rs256,
    /// ECDSA P-256 SHA-256 with the PEM public key of `--jwt-public-key-file`.
    #[value(name = "ES256")]
    Es256,
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The gateway's configuration.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "syncular-gateway",
    version,
    about = "Reference thin gateway for the syncular Postgres extension: HTTP POST {mount}/sync, \
             WebSocket {mount}/realtime (SSP2 §8), auth, metrics. No sync logic: every sync \
             decision is a SQL call into schema `syncular`.",
    after_help = "Every flag can also be given as an environment variable SYNCULAR_GATEWAY_<FLAG> \
                  (upper case, dashes as underscores), e.g. SYNCULAR_GATEWAY_DATABASE_URL."
)]
pub struct Config {
    /// Postgres connection string (libpq key=value or postgres:// URL). The role needs
    /// `syncular_gateway` (EXECUTE on the sync functions). Never logged.
    #[arg(long, env = "SYNCULAR_GATEWAY_DATABASE_URL", hide_env_values = true)]
    pub database_url: String,

    /// A node to LISTEN on for the commit, scopes and presence notifications (repeatable; env
    /// twin: comma-separated). For Citus function delegation: each sync call runs on the worker
    /// owning its partition, so its NOTIFY fires there — list every node where the sync
    /// functions run (the coordinator too if it should be heard: the presence relay notifies
    /// through `--database-url`). One LISTEN connection per URL, each reconnected on its own;
    /// `/healthz` answers 503 while any is down. Unset: LISTEN on `--database-url`. Every node
    /// must answer the same `syncular.notification_key()` (on Citus its table is a reference
    /// table). Never logged: connections are named by their index (0 = the first given).
    #[arg(long = "notify-database-url", env = "SYNCULAR_GATEWAY_NOTIFY_DATABASE_URLS", hide_env_values = true,
          value_name = "URL")]
    pub notify_database_urls: Vec<String>,

    /// Address to listen on (`ip:port`; port 0 picks a free port). The bound address is printed
    /// on stdout as one line `listening on http://ADDR`.
    #[arg(long, env = "SYNCULAR_GATEWAY_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// Path prefix of the routes: `{mount}/sync`, `{mount}/realtime`, `{mount}/segments/{id}`,
    /// `{mount}/blobs/{id}`. `/healthz` and `/metrics` are always at the root.
    #[arg(long, env = "SYNCULAR_GATEWAY_MOUNT", default_value = "/")]
    pub mount: String,

    /// Authentication mode: `jwt` (default) or `dev` (UNSAFE: trusts request headers; refused
    /// together with any `--jwt-*` flag; announced on stderr whatever the log filter).
    #[arg(long, env = "SYNCULAR_GATEWAY_AUTH", value_enum, default_value = "jwt")]
    pub auth: AuthMode,

    /// Partition used when the request (dev header / JWT claim) names none.
    #[arg(long, env = "SYNCULAR_GATEWAY_DEFAULT_PARTITION", default_value = "default")]
    pub default_partition: String,

    /// JWT algorithm. HS256 needs `--jwt-secret-file`; RS256/ES256 need `--jwt-public-key-file`.
    #[arg(long, env = "SYNCULAR_GATEWAY_JWT_ALGORITHM", value_enum)]
    pub jwt_algorithm: Option<JwtAlgorithm>,

    /// File holding the HS256 secret (raw bytes; one trailing newline is stripped).
    #[arg(long, env = "SYNCULAR_GATEWAY_JWT_SECRET_FILE")]
    pub jwt_secret_file: Option<PathBuf>,

    /// PEM file holding the RS256/ES256 public key.
    #[arg(long, env = "SYNCULAR_GATEWAY_JWT_PUBLIC_KEY_FILE")]
    pub jwt_public_key_file: Option<PathBuf>,

    /// Clock leeway for `exp`/`nbf`, seconds. `exp` is always required.
    #[arg(long, env = "SYNCULAR_GATEWAY_JWT_LEEWAY_SECS", default_value_t = 30)]
    pub jwt_leeway_secs: u64,

    /// Required `iss` claim value (unset: not checked).
    #[arg(long, env = "SYNCULAR_GATEWAY_JWT_ISSUER")]
    pub jwt_issuer: Option<String>,

    /// Required `aud` claim value (unset: not checked).
    #[arg(long, env = "SYNCULAR_GATEWAY_JWT_AUDIENCE")]
    pub jwt_audience: Option<String>,

    /// Claim holding the actor id (a non-empty string).
    #[arg(long, env = "SYNCULAR_GATEWAY_JWT_ACTOR_CLAIM", default_value = "sub")]
    pub jwt_actor_claim: String,

    /// Claim holding the partition. When set, a token without it (or with an empty or
    /// non-string value) is refused: 401 `sync.auth_required`. Unset: every token gets
    /// `--default-partition`.
    #[arg(long, env = "SYNCULAR_GATEWAY_JWT_PARTITION_CLAIM")]
    pub jwt_partition_claim: Option<String>,

    /// Claim holding the §3.2 allowed scopes (a JSON object of string arrays). Unset: the
    /// database scope resolver decides (allowed_scopes = NULL).
    #[arg(long, env = "SYNCULAR_GATEWAY_JWT_SCOPES_CLAIM")]
    pub jwt_scopes_claim: Option<String>,

    /// Size of the Postgres connection pool for sync rounds, deltas, acks (plus one LISTEN
    /// connection per node, see `--notify-database-url`).
    #[arg(long, env = "SYNCULAR_GATEWAY_POOL_SIZE", default_value_t = 16)]
    pub pool_size: usize,

    /// Largest SSP2 request accepted, bytes — for `POST /sync` both the transferred and the
    /// decoded (gunzipped) body, and for a socket round's reassembled request (413 /
    /// socket closed beyond it).
    #[arg(long, env = "SYNCULAR_GATEWAY_MAX_BODY_BYTES", default_value_t = 8 * 1024 * 1024)]
    pub max_body_bytes: usize,

    /// Largest realtime delta, bytes; a bigger one becomes a `delta-too-large` wake-up (§8.2).
    /// At least 64.
    #[arg(long, env = "SYNCULAR_GATEWAY_MAX_DELTA_BYTES", default_value_t = 1024 * 1024,
          value_parser = clap::value_parser!(i32).range(64..))]
    pub max_delta_bytes: i32,

    /// Maximum concurrent realtime sessions of this gateway (429
    /// `sync.websocket_connection_limit` beyond).
    #[arg(long, env = "SYNCULAR_GATEWAY_MAX_SESSIONS", default_value_t = 10_000)]
    pub max_sessions: usize,

    /// Maximum concurrent realtime sessions per (partition, clientId).
    #[arg(long, env = "SYNCULAR_GATEWAY_MAX_SESSIONS_PER_CLIENT", default_value_t = 4)]
    pub max_sessions_per_client: usize,

    /// Maximum concurrent realtime sessions per (partition, actor), whatever their clientIds
    /// (429 `sync.websocket_connection_limit` beyond): one actor cannot take the gateway's
    /// whole `--max-sessions`.
    #[arg(long, env = "SYNCULAR_GATEWAY_MAX_SESSIONS_PER_ACTOR", default_value_t = 32,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_sessions_per_actor: u64,

    /// Gateway-wide budget for the bytes socket rounds hold: requests being reassembled and
    /// responses being sent. A round that finds no room closes its socket with 1013 (try
    /// again later; the client reconnects and retries). Keep it several times the largest
    /// round response.
    #[arg(long, env = "SYNCULAR_GATEWAY_ROUND_BUFFER_BYTES", default_value_t = 256 * 1024 * 1024)]
    pub round_buffer_bytes: usize,

    /// Longest a realtime socket may take to accept one frame (a round-response chunk, a
    /// delta, a control message), seconds; a socket that does not drain is dropped and what
    /// was buffered for it freed.
    #[arg(long, env = "SYNCULAR_GATEWAY_WRITE_TIMEOUT_SECS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub write_timeout_secs: u64,

    /// Interval of the §8.5 heartbeat event and of WebSocket pings, seconds.
    #[arg(long, env = "SYNCULAR_GATEWAY_HEARTBEAT_SECS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub heartbeat_secs: u64,

    /// How often acknowledged cursors are written (one `syncular.realtime_ack` per partition
    /// per flush), milliseconds. The stored cursor is a retention watermark and the next
    /// `hello`'s cursor, so a second of lag costs nothing; each flush updates one row per
    /// client that acked (measured ~65 µs per row), so shorter intervals cost Postgres CPU.
    #[arg(long, env = "SYNCULAR_GATEWAY_ACK_FLUSH_MS", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub ack_flush_ms: u64,

    /// Largest presence document (serialized JSON), bytes (§8.6.2 `presence.too_large`).
    #[arg(long, env = "SYNCULAR_GATEWAY_PRESENCE_MAX_BYTES", default_value_t = 16 * 1024)]
    pub presence_max_bytes: usize,

    /// Minimum interval between fanned-out presence publishes per session and scope key,
    /// milliseconds; faster publishes coalesce latest-wins (§8.6.4: the newest document is
    /// fanned out when the interval has passed). 0 = off (every publish fans out).
    #[arg(long, env = "SYNCULAR_GATEWAY_PRESENCE_MIN_INTERVAL_MS", default_value_t = 50)]
    pub presence_min_interval_ms: u64,

    /// Largest WebSocket message accepted from a client, bytes (larger: the socket is
    /// closed). A socket round's request is usually one message, so keep it ≥ max-body-bytes.
    #[arg(long, env = "SYNCULAR_GATEWAY_WS_MAX_MESSAGE_BYTES", default_value_t = 8 * 1024 * 1024 + 1)]
    pub ws_max_message_bytes: usize,

    /// Messages a session's outbound queue holds; when full a delta becomes a wake-up, and a
    /// session that cannot even take a control message is closed.
    #[arg(long, env = "SYNCULAR_GATEWAY_SESSION_QUEUE", default_value_t = 64,
          value_parser = clap::value_parser!(u64).range(2..))]
    pub session_queue: u64,

    /// A realtime socket from which nothing (not even a pong) arrived for this long is closed,
    /// seconds.
    #[arg(long, env = "SYNCULAR_GATEWAY_IDLE_TIMEOUT_SECS", default_value_t = 90,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout_secs: u64,

    /// Maximum open TCP connections, HTTP and WebSocket together; beyond it a new connection
    /// is answered 503 `syncular.unavailable` and closed. Keep it above `--max-sessions` and
    /// below the process's file-descriptor limit (`ulimit -n`) minus `--pool-size`.
    #[arg(long, env = "SYNCULAR_GATEWAY_MAX_CONNECTIONS", default_value_t = 12_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_connections: u64,

    /// Once the first byte of an HTTP request head arrived, the whole head (request line and
    /// headers) must arrive within this, seconds; else the connection is dropped (slowloris).
    #[arg(long, env = "SYNCULAR_GATEWAY_HTTP_HEADER_READ_TIMEOUT_SECS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub http_header_read_timeout_secs: u64,

    /// An HTTP connection with no request in progress and no traffic for this long is closed
    /// (a connection that sends nothing, an idle keep-alive connection), and so is one whose
    /// response the peer stops reading, seconds.
    #[arg(long, env = "SYNCULAR_GATEWAY_HTTP_IDLE_TIMEOUT_SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub http_idle_timeout_secs: u64,

    /// Upper bound of one HTTP request (headers to response), seconds (503 beyond).
    #[arg(long, env = "SYNCULAR_GATEWAY_REQUEST_TIMEOUT_SECS", default_value_t = 60)]
    pub request_timeout_secs: u64,

    /// Graceful shutdown: how long in-flight rounds may take to finish, seconds.
    #[arg(long, env = "SYNCULAR_GATEWAY_SHUTDOWN_GRACE_SECS", default_value_t = 10)]
    pub shutdown_grace_secs: u64,

    /// Interval of the cross-gateway presence heartbeat, seconds; a gateway silent for 3
    /// intervals is considered dead and its peers leave.
    #[arg(long, env = "SYNCULAR_GATEWAY_PRESENCE_HEARTBEAT_SECS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub presence_heartbeat_secs: u64,

    /// The object-store tier (`--object-store-*`; docs/src/operate/object-store.md).
    #[command(flatten)]
    pub object_store: crate::objects::args::ObjectStoreArgs,

    /// This gateway's id in the presence relay and in its Postgres `application_name`s
    /// (default: a random UUID).
    #[arg(long, env = "SYNCULAR_GATEWAY_ID")]
    pub gateway_id: Option<String>,

    /// Log format.
    #[arg(long, env = "SYNCULAR_GATEWAY_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,

    /// Log filter (tracing `EnvFilter` syntax, e.g. `info,syncular_gateway=debug`).
    #[arg(long, env = "SYNCULAR_GATEWAY_LOG", default_value = "info")]
    pub log_filter: String,
}

impl Config {
    /// Parses the command line and the environment like [`Parser::parse`], then refuses
    /// contradictory combinations; on error prints the message and exits with code 2.
    pub fn parse_checked() -> Self {
        Self::try_parse_checked_from(std::env::args_os()).unwrap_or_else(|e| e.exit())
    }

    /// [`Config::parse_checked`] without exiting.
    ///
    /// Errors: clap's parse errors; `--auth dev` together with any `--jwt-*` flag given on the
    /// command line or through its `SYNCULAR_GATEWAY_JWT_*` twin (dev mode would silently
    /// ignore it and trust request headers instead).
    pub fn try_parse_checked_from<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let mut cmd = Self::command();
        let matches = cmd.try_get_matches_from_mut(args)?;
        let mut config = Self::from_arg_matches(&matches)?;
        if matches.value_source("notify_database_urls") == Some(ValueSource::EnvVariable) {
            // Only the environment variable is a list; a command-line value is kept whole (a
            // connection string may contain a comma).
            config.notify_database_urls = config.notify_database_urls.iter().flat_map(|v| split_list(v)).collect();
        }
        if config.auth == AuthMode::Dev {
            let given: Vec<String> = cmd
                .get_arguments()
                .filter(|a| a.get_id().as_str().starts_with("jwt_"))
                .filter(|a| {
                    matches!(matches.value_source(a.get_id().as_str()), Some(ValueSource::CommandLine | ValueSource::EnvVariable))
                })
                .map(|a| format!("--{}", a.get_long().unwrap_or(a.get_id().as_str())))
                .collect();
            if !given.is_empty() {
                return Err(cmd.error(
                    ErrorKind::ArgumentConflict,
                    format!(
                        "--auth dev (UNSAFE: trusts the x-syncular-actor header) cannot be combined with JWT settings \
                         ({}, from the command line or SYNCULAR_GATEWAY_JWT_* variables): they would be ignored. \
                         Use --auth jwt, or drop the JWT settings.",
                        given.join(", ")
                    ),
                ));
            }
        }
        Ok(config)
    }

    /// The connection strings of the LISTEN connections, in node-index order:
    /// `--notify-database-url` when given, else `--database-url` alone.
    pub fn listen_urls(&self) -> Vec<&str> {
        if self.notify_database_urls.is_empty() {
            vec![self.database_url.as_str()]
        } else {
            self.notify_database_urls.iter().map(String::as_str).collect()
        }
    }

    /// The mount normalized: `""` for `/`, else `/a/b` (leading slash, no trailing slash).
    pub fn mount_prefix(&self) -> String {
        let trimmed = self.mount.trim_matches('/');
        if trimmed.is_empty() {
            String::new()
        } else {
            format!("/{trimmed}")
        }
    }
}

/// A comma-separated list: entries trimmed, empty ones dropped.
fn split_list(value: &str) -> Vec<String> {
    value.split(',').map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_documents_every_flag() {
        use clap::CommandFactory;
        let cmd = Config::command();
        cmd.clone().debug_assert();
        for arg in cmd.get_arguments() {
            if arg.get_id() == "help" || arg.get_id() == "version" {
                continue;
            }
            assert!(arg.get_help().is_some(), "flag {} has no help", arg.get_id());
            if arg.get_long().is_some() {
                assert!(arg.get_env().is_some(), "flag {} has no env twin", arg.get_id());
            }
        }
    }

    /// The docs' flag table (docs/src/operate/gateway.md) names every flag, and no flag that
    /// does not exist.
    #[test]
    fn the_docs_flag_table_is_the_flag_list() {
        use clap::CommandFactory;
        let page = include_str!("../../../docs/src/operate/gateway.md");
        let documented: std::collections::BTreeSet<&str> = page
            .lines()
            .filter_map(|l| l.strip_prefix("| `--"))
            .filter_map(|l| l.split('`').next())
            .collect();
        let command = Config::command();
        let flags: std::collections::BTreeSet<&str> = command
            .get_arguments()
            .filter_map(|a| a.get_long())
            .filter(|l| *l != "help" && *l != "version")
            .collect();
        assert!(!flags.is_empty());
        assert_eq!(documented, flags, "docs/src/operate/gateway.md's flag table vs the flags");
    }

    #[test]
    fn dev_auth_refuses_jwt_settings() {
        let base = ["g", "--database-url", "x"];
        let parse = |extra: &[&str]| Config::try_parse_checked_from(base.iter().chain(extra));
        assert!(parse(&["--auth", "dev"]).is_ok(), "defaults of the jwt flags do not count");
        assert!(parse(&["--auth", "jwt", "--jwt-algorithm", "HS256"]).is_ok());
        for flag in [["--jwt-algorithm", "HS256"], ["--jwt-secret-file", "/s"], ["--jwt-leeway-secs", "30"], ["--jwt-actor-claim", "sub"]] {
            let e = parse(&["--auth", "dev", flag[0], flag[1]]).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::ArgumentConflict);
            assert!(e.to_string().contains(flag[0]), "{e}");
        }
    }

    #[test]
    fn mount_is_normalized() {
        let mut c = Config::parse_from(["g", "--database-url", "x"]);
        assert_eq!(c.mount_prefix(), "");
        c.mount = "/api/sync/".into();
        assert_eq!(c.mount_prefix(), "/api/sync");
        c.mount = "v1".into();
        assert_eq!(c.mount_prefix(), "/v1");
    }

    #[test]
    fn notify_urls_default_to_the_database_url() {
        let c = Config::try_parse_checked_from(["g", "--database-url", "db"]).unwrap();
        // (the env twin may be set by `notify_urls_from_the_environment_are_comma_separated`)
        if c.notify_database_urls.is_empty() {
            assert_eq!(c.listen_urls(), ["db"]);
        }
        let c = Config::try_parse_checked_from([
            "g",
            "--database-url",
            "db",
            "--notify-database-url",
            "host=w1 options='-c a=1,b=2'",
            "--notify-database-url",
            "host=w2",
        ])
        .unwrap();
        assert_eq!(c.listen_urls(), ["host=w1 options='-c a=1,b=2'", "host=w2"], "a command-line value is never split");
    }

    #[test]
    fn notify_urls_from_the_environment_are_comma_separated() {
        const VAR: &str = "SYNCULAR_GATEWAY_NOTIFY_DATABASE_URLS";
        std::env::set_var(VAR, "postgres://a/db, postgres://b/db,,");
        let from_env = Config::try_parse_checked_from(["g", "--database-url", "db"]);
        let overridden = Config::try_parse_checked_from(["g", "--database-url", "db", "--notify-database-url", "host=c"]);
        std::env::remove_var(VAR);
        assert_eq!(from_env.unwrap().listen_urls(), ["postgres://a/db", "postgres://b/db"]);
        assert_eq!(overridden.unwrap().listen_urls(), ["host=c"], "the command line wins");
        assert_eq!(split_list(" , "), Vec::<String>::new());
    }
}
