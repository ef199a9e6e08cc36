//! Everything that talks to Postgres: the connection pool, the §10.1 mapping of database
//! errors ([`errors`]), the persist-before-acknowledging sync round ([`round`]) and the
//! realtime SQL calls of the contract ([`realtime`]). The only module that holds SQL text.

pub mod errors;
pub mod realtime;
pub mod round;
pub mod stream;
pub mod blobs;
pub mod segments;
pub mod session;

use std::str::FromStr;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, QueueMode, RecyclingMethod, Runtime};
use tokio_postgres::NoTls;

pub use errors::ApiError;

/// Parses a database URL (libpq key=value or `postgres://`) given as `what` (the flag, for
/// the error) and sets `application_name`.
///
/// Errors: the parse error text (never echoes the URL, which may hold a password).
pub fn pg_config(database_url: &str, what: &str, application_name: &str) -> Result<tokio_postgres::Config, String> {
    let mut config =
        tokio_postgres::Config::from_str(database_url).map_err(|e| format!("{what} does not parse: {e}"))?;
    config.application_name(application_name);
    config.connect_timeout(Duration::from_secs(10));
    Ok(config)
}

/// The pool of sync-round / realtime connections (`size` connections at most, a checkout
/// waits at most 10 s, a connect at most 10 s). Last in, first out: a checkout takes the
/// connection returned last, so a light load keeps reusing one warm backend instead of waking
/// each of `size` backends in turn (first in, first out cost a `POST /sync` round +25 % vs +9 %
/// at one connection, same run).
///
/// Errors: the builder's error text.
pub fn build_pool(config: tokio_postgres::Config, size: usize) -> Result<Pool, String> {
    let manager = Manager::from_config(config, NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
    Pool::builder(manager)
        .max_size(size.max(1))
        .runtime(Runtime::Tokio1)
        .queue_mode(QueueMode::Lifo)
        .wait_timeout(Some(Duration::from_secs(10)))
        .create_timeout(Some(Duration::from_secs(10)))
        .recycle_timeout(Some(Duration::from_secs(5)))
        .build()
        .map_err(|e| format!("cannot build the connection pool: {e}"))
}

/// A pooled connection, or `syncular.unavailable` (503) when none can be had.
pub async fn checkout(pool: &Pool) -> Result<deadpool_postgres::Object, ApiError> {
    pool.get().await.map_err(|e| {
        let mut err = ApiError::unavailable(format!("no database connection: {e}"));
        err.transient = true;
        err
    })
}

/// A pooled connection with an explicit transaction open on it (`BEGIN` sent). Dropped before
/// [`TxConn::ended`] — the future that owned it was dropped mid-transaction (a request timeout,
/// a client gone) or a step failed before `COMMIT`/`ROLLBACK` was answered — the connection is
/// closed instead of going back to the pool: a later round must never run inside an abandoned
/// transaction (its pushes would be acknowledged and never committed). Postgres rolls the
/// abandoned transaction back when it sees the connection gone.
pub struct TxConn(Option<deadpool_postgres::Object>);

impl TxConn {
    /// Wraps a connection on which `BEGIN` is about to be sent.
    pub fn new(client: deadpool_postgres::Object) -> Self {
        TxConn(Some(client))
    }

    /// The transaction ended (`COMMIT` or `ROLLBACK` answered): the connection goes back to the
    /// pool.
    pub fn ended(mut self) {
        self.0.take();
    }
}

impl std::ops::Deref for TxConn {
    type Target = deadpool_postgres::Object;

    fn deref(&self) -> &Self::Target {
        // Present until `ended` (which consumes the guard) or drop.
        self.0.as_ref().unwrap_or_else(|| unreachable!("TxConn used after it ended"))
    }
}

impl Drop for TxConn {
    fn drop(&mut self) {
        if let Some(client) = self.0.take() {
            drop(deadpool_postgres::Object::take(client));
        }
    }
}

/// How long a round waits for a presigned upload it references to be verified
/// (`syncular.blob_pending`, docs/src/operate/object-store.md), and how often it retries.
const BLOB_PENDING_WAIT: Duration = Duration::from_secs(5);
const BLOB_PENDING_RETRY: Duration = Duration::from_millis(100);

/// Runs `attempt` until it succeeds, fails non-transiently, or 4 attempts failed
/// transiently (backoff 25, 100, 400 ms) — then `syncular.unavailable` (503). A
/// `syncular.blob_pending` failure (a push referencing a presigned upload the mover has not
/// verified yet) is retried every 100 ms for up to 5 s, then answered as is.
pub async fn with_retry<T, F, Fut>(mut attempt: F) -> Result<T, ApiError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ApiError>>,
{
    let mut delay = Duration::from_millis(25);
    let started = std::time::Instant::now();
    let mut n = 0;
    loop {
        let outcome = attempt().await;
        if let Err(e) = &outcome {
            if e.code_str() == "syncular.blob_pending" && started.elapsed() < BLOB_PENDING_WAIT {
                tokio::time::sleep(BLOB_PENDING_RETRY).await;
                continue;
            }
        }
        match outcome {
            Err(e) if e.transient && n < 3 => {
                tracing::debug!(code = e.code_str(), attempt = n + 1, "transient database error, retrying");
                tokio::time::sleep(delay).await;
                delay *= 4;
                n += 1;
            }
            Err(e) if e.transient => {
                let message = e.body.get("message").and_then(|m| m.as_str()).unwrap_or("").to_owned();
                let mut out = ApiError::unavailable(format!("database kept failing transiently: {message}"));
                out.transient = true;
                return Err(out);
            }
            other => return other,
        }
    }
}
