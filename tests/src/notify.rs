//! A `LISTEN syncular_commit` connection and the commit-notification payload
//! format: `<base64url(partition)>:<commitSeq>:<tag>` — the reference server's
//! fanout format (base64url without padding, as Node's `base64url` emits)
//! plus an HMAC tag under the extension's notification key, since any role
//! can NOTIFY. The tag is recomputed here independently (the `hmac` crate).

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::{URL_SAFE, URL_SAFE_NO_PAD};
use base64::Engine;
use hmac::{Hmac, Mac};
use postgres::fallible_iterator::FallibleIterator;
use postgres::Client;
use sha2::Sha256;

/// The NOTIFY channel of applied commits.
pub const CHANNEL: &str = "syncular_commit";

/// The test database's notification key (`syncular.notification_key()`), read once.
pub fn notification_key() -> &'static [u8] {
    static KEY: OnceLock<Vec<u8>> = OnceLock::new();
    KEY.get_or_init(|| {
        crate::connect().query_one("SELECT syncular.notification_key()", &[]).expect("notification key").get(0)
    })
}

/// `base64url(first 16 bytes of HMAC-SHA256(key, channel ‖ "\n" ‖ body))`.
pub fn tag(key: &[u8], channel: &str, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
    mac.update(format!("{channel}\n{body}").as_bytes());
    URL_SAFE_NO_PAD.encode(&mac.finalize().into_bytes()[..16])
}

/// The exact payload of a commit: the reference fanout format plus its tag.
pub fn expected_payload(partition: &str, commit_seq: i64) -> String {
    let body = format!("{}:{commit_seq}", URL_SAFE_NO_PAD.encode(partition.as_bytes()));
    let t = tag(notification_key(), CHANNEL, &body);
    format!("{body}:{t}")
}

/// Parses `<base64url(partition)>:<commitSeq>[:<tag>]` leniently (padded or
/// not, tag unchecked), so a wrong payload is still attributed to its
/// partition and then caught by an exact comparison with [`expected_payload`].
pub fn parse_payload(payload: &str) -> Option<(String, i64)> {
    let mut fields = payload.split(':');
    let (b64, seq) = (fields.next()?, fields.next()?);
    let bytes = URL_SAFE_NO_PAD
        .decode(b64.trim_end_matches('='))
        .or_else(|_| URL_SAFE.decode(b64))
        .ok()?;
    Some((String::from_utf8(bytes).ok()?, seq.parse().ok()?))
}

/// One notification seen by a [`CommitListener`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub channel: String,
    pub payload: String,
    /// The sending backend's pid.
    pub process_id: i32,
}

/// A dedicated connection that has executed `LISTEN syncular_commit`.
pub struct CommitListener {
    conn: Client,
}

impl CommitListener {
    /// Runs `LISTEN syncular_commit` on `conn`.
    ///
    /// Errors: the Postgres error of `LISTEN`.
    pub fn listen(mut conn: Client) -> Result<Self, postgres::Error> {
        conn.batch_execute(&format!("LISTEN {CHANNEL}"))?;
        Ok(CommitListener { conn })
    }

    /// Every notification for `partition` that arrives before `quiet` passes
    /// with nothing new (bounded by `max_wait` overall), in arrival order.
    /// Notifications of other partitions are dropped.
    ///
    /// Errors: the Postgres error of the listening connection.
    pub fn drain(
        &mut self,
        partition: &str,
        quiet: Duration,
        max_wait: Duration,
    ) -> Result<Vec<Seen>, postgres::Error> {
        let deadline = Instant::now() + max_wait;
        let mut seen = Vec::new();
        let mut notifications = self.conn.notifications();
        let mut iter = notifications.timeout_iter(quiet);
        while Instant::now() < deadline {
            match iter.next()? {
                Some(n) => {
                    let mine = parse_payload(n.payload()).is_some_and(|(p, _)| p == partition);
                    if mine || n.channel() != CHANNEL {
                        seen.push(Seen {
                            channel: n.channel().to_owned(),
                            payload: n.payload().to_owned(),
                            process_id: n.process_id(),
                        });
                    }
                }
                None => break,
            }
        }
        Ok(seen)
    }

    /// Waits until `count` notifications for `partition` arrived (or
    /// `max_wait` elapsed), then keeps draining for `quiet` to catch extras.
    ///
    /// Errors: the Postgres error of the listening connection.
    pub fn wait_for(
        &mut self,
        partition: &str,
        count: usize,
        quiet: Duration,
        max_wait: Duration,
    ) -> Result<Vec<Seen>, postgres::Error> {
        let deadline = Instant::now() + max_wait;
        let mut seen = Vec::new();
        while seen.len() < count && Instant::now() < deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            let batch = self.drain(partition, left.min(Duration::from_millis(250)), left)?;
            seen.extend(batch);
        }
        seen.extend(self.drain(partition, quiet, quiet * 4)?);
        Ok(seen)
    }
}
