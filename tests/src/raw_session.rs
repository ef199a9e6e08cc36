//! A raw realtime session (`tungstenite`, dev auth) that drives §8.7 socket rounds and reads
//! everything the gateway sends with full control over timing — for the race tests
//! (`tests/tests/gateway_round_races.rs`), where the real client cannot be told to publish
//! the instant a round's `END` arrives or to make a commit land inside a round.
//!
//! What it models is only what any gateway must do (§8): `0x01` round chunks reassembled up
//! to the response's `END`, `0x00` deltas, JSON control messages (`sync` wake-ups,
//! `presence`, `hello`, `heartbeat`). Every read is bounded.

use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use ssp2::model::{Frame, Message};
use tungstenite::stream::MaybeTlsStream;
use tungstenite::Message as WsMessage;

use crate::gateway::{raw_ws, read_until_hello, Gateway};
use crate::wire::decode_response;

/// The socket type of [`raw_ws`].
pub type Ws = tungstenite::WebSocket<MaybeTlsStream<TcpStream>>;

/// One thing read from the socket.
#[derive(Debug, Clone)]
pub enum Incoming {
    /// A complete round response (the `0x01` chunks up to `END`, concatenated).
    RoundEnd(Vec<u8>),
    /// A `0x00` delta (tag stripped) and whether it arrived while a round was in flight
    /// (after the request was sent, before the response's `END`).
    Delta(Vec<u8>, bool),
    /// A JSON control message.
    Text(Value),
}

/// A raw session: the socket plus the state of the round in flight.
pub struct RawSession {
    /// The socket.
    pub ws: Ws,
    /// The `hello` data.
    pub hello: Value,
    /// The clientId of the socket.
    pub client_id: String,
    round: Option<(ssp2::MessageStreamScanner, Vec<u8>)>,
}

impl RawSession {
    /// Connects (dev auth) and reads the `hello`.
    pub fn connect(gw: &Gateway, partition: &str, actor: &str, client_id: &str) -> RawSession {
        let mut ws = raw_ws(gw, partition, actor, client_id);
        let hello = read_until_hello(&mut ws);
        RawSession { ws, hello, client_id: client_id.to_owned(), round: None }
    }

    /// True while a round request was sent and its response's `END` not read yet.
    pub fn in_round(&self) -> bool {
        self.round.is_some()
    }

    /// Sends a round request (one `0x01` message).
    pub fn send_round(&mut self, request: &[u8]) {
        assert!(self.round.is_none(), "one round at a time (§8.7)");
        let mut m = Vec::with_capacity(request.len() + 1);
        m.push(0x01);
        m.extend_from_slice(request);
        self.ws.send(WsMessage::Binary(m.into())).expect("send round");
        self.round = Some((ssp2::MessageStreamScanner::new(), Vec::new()));
    }

    /// Sends a JSON control message.
    pub fn send_json(&mut self, v: &Value) {
        self.ws.send(WsMessage::Text(v.to_string().into())).expect("send text");
    }

    /// `{"type":"ack","cursor":…}` (§8.2).
    pub fn ack(&mut self, cursor: i64) {
        self.send_json(&json!({"type": "ack", "cursor": cursor}));
    }

    /// A presence publish (`Some`) or leave (`None`) on `key` (§8.6.2).
    pub fn publish(&mut self, key: &str, doc: Option<Value>) {
        self.send_json(&json!({"event": "presence", "data": {"scopeKey": key, "doc": doc.unwrap_or(Value::Null)}}));
    }

    /// Reads one message, waiting at most `timeout`; `None` when nothing came. Panics when
    /// the socket closes or breaks the channel rules (a `0x00` inside a response stream, an
    /// unknown tag).
    pub fn read(&mut self, timeout: Duration) -> Option<Incoming> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
            if let MaybeTlsStream::Plain(s) = self.ws.get_mut() {
                s.set_read_timeout(Some(left)).expect("read timeout");
            }
            match self.ws.read() {
                Ok(WsMessage::Binary(b)) => match b.first() {
                    Some(0x01) => {
                        let (scanner, bytes) = self.round.as_mut().expect("a 0x01 chunk outside a round");
                        bytes.extend_from_slice(&b[1..]);
                        if scanner.push(&b[1..]).expect("well-framed response stream").is_some() {
                            let (_, bytes) = self.round.take().expect("round");
                            return Some(Incoming::RoundEnd(bytes));
                        }
                    }
                    Some(0x00) => {
                        let streaming = self.round.as_ref().is_some_and(|(_, bytes)| !bytes.is_empty());
                        assert!(!streaming, "a 0x00 delta inside a round's response stream (§8.7)");
                        return Some(Incoming::Delta(b[1..].to_vec(), self.round.is_some()));
                    }
                    other => panic!("unexpected binary tag {other:?}"),
                },
                Ok(WsMessage::Text(t)) => return Some(Incoming::Text(serde_json::from_str(t.as_str()).expect("JSON control message"))),
                Ok(WsMessage::Close(frame)) => panic!("{} closed by the gateway: {frame:?}", self.client_id),
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) =>
                {
                    if Instant::now() >= deadline {
                        return None;
                    }
                }
                Err(e) => panic!("{}: socket read failed: {e}", self.client_id),
            }
        }
    }

    /// Reads until the round in flight ends, handing every other message to `other`; returns
    /// the response. Bounded by `timeout`.
    pub fn finish_round(&mut self, timeout: Duration, mut other: impl FnMut(Incoming)) -> Message {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            match self.read(deadline.saturating_duration_since(Instant::now())) {
                Some(Incoming::RoundEnd(bytes)) => return decode_response(&bytes).expect("round response decodes"),
                Some(m) => other(m),
                None => {}
            }
        }
        panic!("{}: the round did not end within {timeout:?}", self.client_id);
    }
}

/// The `commitSeq`s of the `COMMIT` frames of a response, in order.
pub fn commit_seqs(msg: &Message) -> Vec<i64> {
    msg.frames
        .iter()
        .filter_map(|f| match f {
            Frame::Commit { commit_seq, .. } => Some(*commit_seq),
            _ => None,
        })
        .collect()
}

/// The `SUB_END.nextCursor`s of a response, in order.
pub fn next_cursors(msg: &Message) -> Vec<i64> {
    msg.frames
        .iter()
        .filter_map(|f| match f {
            Frame::SubEnd { next_cursor, .. } => Some(*next_cursor),
            _ => None,
        })
        .collect()
}

/// The `ERROR` frames' codes of a response.
pub fn error_codes(msg: &Message) -> Vec<String> {
    msg.frames
        .iter()
        .filter_map(|f| match f {
            Frame::Error { code, .. } => Some(code.clone()),
            _ => None,
        })
        .collect()
}

/// A small deterministic generator (xorshift64*): the race tests print their seed.
pub struct Rng(u64);

impl Rng {
    /// Seeded from `SYNCULAR_RACE_SEED` or the clock; prints the seed.
    pub fn from_env(what: &str) -> Rng {
        let seed = std::env::var("SYNCULAR_RACE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
        });
        eprintln!("{what}: SYNCULAR_RACE_SEED={seed}");
        Rng::new(seed)
    }

    /// A generator from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}
