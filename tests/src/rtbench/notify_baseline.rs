//! The baseline of the delta latency: bare `NOTIFY` → `LISTEN` on the same
//! server at the same rate. One connection runs the autocommit statement
//! `SELECT pg_notify('rt_bench_notify', '<i>')` with notification `i` due at
//! `t0 + i / rate` and timestamps it when the statement returns; a second
//! connection that ran `LISTEN rt_bench_notify` timestamps each arrival.
//! Latency = arrival − return, the same definition as the delta latency.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use postgres::fallible_iterator::FallibleIterator;

use super::tally::Dist;

const CHANNEL: &str = "rt_bench_notify";

/// What one baseline run measured.
#[derive(Clone, Debug)]
pub struct BaselineRun {
    /// Target rate, notifications/s.
    pub target: u32,
    /// Notifications/s reached by the sending connection.
    pub achieved: f64,
    /// Arrival − return, ms.
    pub latency: Dist,
    /// Notifications sent and never received.
    pub lost: usize,
}

/// Sends `rate × duration` notifications at `rate`/s and measures them.
///
/// Errors: a connection or statement error.
pub fn run(dsn: &str, rate: u32, duration: Duration, drain: Duration) -> Result<BaselineRun, String> {
    let total = ((rate as f64) * duration.as_secs_f64()).round().max(1.0) as usize;
    let period = Duration::from_secs_f64(1.0 / rate.max(1) as f64);
    let mut listener = crate::connect_to(dsn);
    listener
        .batch_execute(&format!("LISTEN {CHANNEL}"))
        .map_err(|e| e.to_string())?;
    let done = Arc::new(AtomicBool::new(false));
    let done_l = done.clone();
    let receiver = thread::spawn(move || -> Result<HashMap<usize, Instant>, String> {
        let mut seen = HashMap::with_capacity(total);
        let mut notifications = listener.notifications();
        let mut iter = notifications.timeout_iter(Duration::from_millis(100));
        let mut quiet_since: Option<Instant> = None;
        while seen.len() < total {
            match iter.next().map_err(|e| e.to_string())? {
                Some(n) => {
                    let at = Instant::now();
                    if let Ok(i) = n.payload().parse::<usize>() {
                        seen.entry(i).or_insert(at);
                    }
                    quiet_since = None;
                }
                None if done_l.load(Ordering::SeqCst) => {
                    let since = *quiet_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > drain {
                        break;
                    }
                }
                None => {}
            }
        }
        Ok(seen)
    });
    let mut sender = crate::connect_to(dsn);
    let stmt = sender
        .prepare(&format!("SELECT pg_notify('{CHANNEL}', $1)"))
        .map_err(|e| e.to_string())?;
    let t0 = Instant::now() + Duration::from_millis(20);
    let mut returned = Vec::with_capacity(total);
    let mut send_error = None;
    for i in 0..total {
        let due = t0 + period.mul_f64(i as f64);
        let now = Instant::now();
        if due > now {
            thread::sleep(due - now);
        }
        if let Err(e) = sender.execute(&stmt, &[&i.to_string()]) {
            send_error = Some(e.to_string());
            break;
        }
        returned.push(Instant::now());
    }
    done.store(true, Ordering::SeqCst);
    let seen = receiver
        .join()
        .map_err(|_| "the LISTEN thread panicked".to_owned())??;
    if let Some(e) = send_error {
        return Err(format!("pg_notify: {e}"));
    }
    let finished = returned.last().copied().unwrap_or(t0);
    let mut latency = Vec::with_capacity(total);
    for (i, at) in returned.iter().enumerate() {
        if let Some(got) = seen.get(&i) {
            latency.push(signed_ms(*at, *got));
        }
    }
    Ok(BaselineRun {
        target: rate,
        achieved: returned.len() as f64 / finished.duration_since(t0).as_secs_f64().max(1e-9),
        lost: total - latency.len(),
        latency: Dist::new(latency),
    })
}

/// `later − earlier` in milliseconds, negative when `later` came first.
pub fn signed_ms(earlier: Instant, later: Instant) -> f64 {
    if later >= earlier {
        later.duration_since(earlier).as_secs_f64() * 1e3
    } else {
        -(earlier.duration_since(later).as_secs_f64() * 1e3)
    }
}
