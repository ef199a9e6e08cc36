//! Prometheus metrics (`GET /metrics`, text exposition format), all prefixed `syncular_gateway_`.
//!
//! Sessions open, deltas sent, wake-ups by reason, sync rounds by binding and outcome with a
//! latency histogram (seconds), `realtime_pass` calls, HTTP requests by route and status,
//! errors by §10.1 code, LISTEN connections up (by node index) and reconnects, acks persisted,
//! presence events by kind.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// Label `reason` (wake-ups).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// `delta-too-large` | `catchup-required` | `reset-required`.
    pub reason: String,
}

/// Labels of a sync round.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RoundLabels {
    /// `http` | `socket`.
    pub binding: String,
    /// `ok` | `error`.
    pub outcome: String,
}

/// Labels of an HTTP request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    /// The route template, e.g. `/sync`.
    pub route: String,
    /// HTTP status code.
    pub status: u16,
}

/// Label `code` (§10.1 error code).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabel {
    /// e.g. `sync.invalid_request`.
    pub code: String,
}

/// Labels of a registration reload.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefreshLabels {
    /// `round-end` | `host`.
    pub mode: String,
    /// `applied` | `kept` (round-end failure) | `emptied` (host failure) | `stale` (a newer
    /// reload won).
    pub outcome: String,
}

/// Label `channel` (NOTIFY channels).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ChannelLabel {
    /// `syncular_commit` | `syncular_scopes` | `syncular_presence`.
    pub channel: String,
}

/// Label `node`: a LISTEN connection's index (never its URL).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeLabel {
    /// 0-based position in `--notify-database-url` (0 = `--database-url` when none is given).
    pub node: String,
}

/// Label `kind` (presence events: join, update, leave, rejected).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// Event kind.
    pub kind: String,
}

/// The failure codes `syncular-client` 0.49 reports for what never reached the server
/// (`crates/protocol/WIRE_V3.md` §2.6): labelled as themselves.
const CLIENT_FAILURE_CODES: &[&str] = &[
    "transport.failed",
    "transport.timeout",
    "transport.redirect",
    "transport.unavailable",
    "transport.request_too_large",
    "transport.response_too_large",
    "sync.transport_failed",
    "syncular.unavailable",
    "syncular.internal",
];

fn round_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

/// Every metric of the gateway.
pub struct Metrics {
    registry: Registry,
    /// Realtime sessions currently open.
    pub sessions_open: Gauge,
    /// Binary deltas sent (`0x00` messages).
    pub deltas_sent: Counter,
    /// Wake-ups sent, by reason.
    pub wakes: Family<ReasonLabel, Counter>,
    /// Sync rounds, by binding and outcome.
    pub rounds: Family<RoundLabels, Counter>,
    /// Sync round latency (request complete → response ready), seconds, by binding.
    pub round_seconds: Family<RoundLabels, Histogram, fn() -> Histogram>,
    /// `syncular.realtime_pass` calls.
    pub delta_calls: Counter,
    /// `syncular.realtime_pass` latency, seconds.
    pub delta_call_seconds: Histogram,
    /// HTTP responses by route and status.
    pub http_requests: Family<HttpLabels, Counter>,
    /// Errors answered (HTTP JSON or socket round ERROR), by code.
    pub errors: Family<CodeLabel, Counter>,
    /// Re-established LISTEN connections (all nodes).
    pub listen_reconnects: Counter,
    /// 1 while the LISTEN connection of a node is up, else 0, by node index.
    pub listen_connections_up: Family<NodeLabel, Gauge>,
    /// Acks received from clients (in memory, before batching).
    pub acks_received: Counter,
    /// Client records updated by `syncular.realtime_ack`.
    pub acks_persisted: Counter,
    /// Presence events, by kind.
    pub presence_events: Family<KindLabel, Counter>,
    /// Registration reloads (`realtime_reload` after the hello), by mode and outcome.
    pub refreshes: Family<RefreshLabels, Counter>,
    /// Notifications dropped because their tag or seal did not verify (forged, or another
    /// install's key), by channel.
    pub notifications_rejected: Family<ChannelLabel, Counter>,
    /// `ROUND_FAILURE` reports carried by requests (wire version 3), by code: a §10 catalog
    /// code or a client transport code as is, anything else as `other` (the label set stays
    /// bounded whatever clients send).
    pub round_failures: Family<CodeLabel, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("syncular_gateway");
        let m = Metrics {
            sessions_open: Gauge::default(),
            deltas_sent: Counter::default(),
            wakes: Family::default(),
            rounds: Family::default(),
            round_seconds: Family::new_with_constructor(round_histogram as fn() -> Histogram),
            delta_calls: Counter::default(),
            delta_call_seconds: round_histogram(),
            http_requests: Family::default(),
            errors: Family::default(),
            listen_reconnects: Counter::default(),
            listen_connections_up: Family::default(),
            acks_received: Counter::default(),
            acks_persisted: Counter::default(),
            presence_events: Family::default(),
            refreshes: Family::default(),
            notifications_rejected: Family::default(),
            round_failures: Family::default(),
            registry: Registry::default(),
        };
        registry.register("sessions_open", "Realtime sessions currently open", m.sessions_open.clone());
        registry.register("deltas_sent", "Binary realtime deltas sent", m.deltas_sent.clone());
        registry.register("wakes", "Realtime wake-ups sent, by reason", m.wakes.clone());
        registry.register("rounds", "Sync rounds, by binding and outcome", m.rounds.clone());
        registry.register("round_seconds", "Sync round latency in seconds", m.round_seconds.clone());
        registry.register("delta_calls", "syncular.realtime_pass calls", m.delta_calls.clone());
        registry.register("delta_call_seconds", "syncular.realtime_pass latency in seconds", m.delta_call_seconds.clone());
        registry.register("http_requests", "HTTP responses, by route and status", m.http_requests.clone());
        registry.register("errors", "Errors answered, by code", m.errors.clone());
        registry.register("listen_reconnects", "Re-established LISTEN connections", m.listen_reconnects.clone());
        registry.register(
            "listen_connections_up",
            "1 while the LISTEN connection of a node is up, by node index",
            m.listen_connections_up.clone(),
        );
        registry.register("acks_received", "Acks received from clients", m.acks_received.clone());
        registry.register("acks_persisted", "Client records updated by realtime_ack", m.acks_persisted.clone());
        registry.register("presence_events", "Presence events, by kind", m.presence_events.clone());
        registry.register("refreshes", "Registration reloads, by mode and outcome", m.refreshes.clone());
        registry.register(
            "notifications_rejected",
            "Notifications dropped because their tag or seal did not verify, by channel",
            m.notifications_rejected.clone(),
        );
        registry.register(
            "round_failures",
            "ROUND_FAILURE reports carried by sync requests (wire version 3), by code",
            m.round_failures.clone(),
        );
        Metrics { registry, ..m }
    }

    /// Counts one wake-up.
    pub fn wake(&self, reason: &str) {
        self.wakes.get_or_create(&ReasonLabel { reason: reason.to_owned() }).inc();
    }

    /// Counts one error answer.
    pub fn error(&self, code: &str) {
        self.errors.get_or_create(&CodeLabel { code: code.to_owned() }).inc();
    }

    /// Counts one `ROUND_FAILURE` report of `code` (labelled as in [`Metrics::round_failures`]).
    pub fn round_failure(&self, code: &str) {
        let known = syncular_protocol::ErrorCode::parse(code).is_some() || CLIENT_FAILURE_CODES.contains(&code);
        let code = if known { code } else { "other" };
        self.round_failures.get_or_create(&CodeLabel { code: code.to_owned() }).inc();
    }

    /// Counts one presence event.
    pub fn presence(&self, kind: &str) {
        self.presence_events.get_or_create(&KindLabel { kind: kind.to_owned() }).inc();
    }

    /// Counts one notification dropped as unverifiable.
    pub fn notification_rejected(&self, channel: &str) {
        self.notifications_rejected.get_or_create(&ChannelLabel { channel: channel.to_owned() }).inc();
    }

    /// Records whether the LISTEN connection of `node` is up.
    pub fn listen_up(&self, node: usize, up: bool) {
        self.listen_connections_up.get_or_create(&NodeLabel { node: node.to_string() }).set(i64::from(up));
    }

    /// Counts one registration reload.
    pub fn refresh(&self, mode: &str, outcome: &str) {
        self.refreshes.get_or_create(&RefreshLabels { mode: mode.to_owned(), outcome: outcome.to_owned() }).inc();
    }

    /// Records one finished round.
    pub fn round(&self, binding: &str, ok: bool, seconds: f64) {
        let labels = RoundLabels { binding: binding.to_owned(), outcome: if ok { "ok" } else { "error" }.to_owned() };
        self.rounds.get_or_create(&labels).inc();
        self.round_seconds.get_or_create(&labels).observe(seconds);
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_registered_metrics() {
        let m = Metrics::new();
        m.sessions_open.inc();
        m.wake("catchup-required");
        m.round("http", true, 0.002);
        m.error("sync.invalid_request");
        m.listen_up(1, true);
        m.round_failure("transport.timeout");
        m.round_failure("transport.timeout");
        m.round_failure("sync.rate_limited");
        m.round_failure("made.up_code");
        let text = m.render();
        assert!(text.contains("syncular_gateway_round_failures_total{code=\"transport.timeout\"} 2"), "{text}");
        assert!(text.contains("syncular_gateway_round_failures_total{code=\"sync.rate_limited\"} 1"), "{text}");
        assert!(text.contains("syncular_gateway_round_failures_total{code=\"other\"} 1"), "{text}");
        assert!(!text.contains("made.up_code"), "{text}");
        assert!(text.contains("syncular_gateway_listen_connections_up{node=\"1\"} 1"), "{text}");
        assert!(text.contains("syncular_gateway_sessions_open 1"), "{text}");
        assert!(text.contains("syncular_gateway_wakes_total{reason=\"catchup-required\"} 1"), "{text}");
        assert!(text.contains("syncular_gateway_round_seconds_bucket"), "{text}");
        assert!(text.contains("syncular_gateway_errors_total{code=\"sync.invalid_request\"} 1"), "{text}");
    }
}
