//! The `syncular-gateway` process under test: started with `--auth dev` on
//! `127.0.0.1:0`, its bound address read from the one stdout line
//! `listening on http://ADDR`, its resident memory read from
//! `/proc/<pid>/status` (VmRSS), its Prometheus `/metrics` scraped for
//! diagnostics. Stopped with SIGTERM (graceful) when dropped.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use super::config::Config;

/// A running gateway.
pub struct Gateway {
    child: Child,
    /// The bound address (`listening on http://ADDR`).
    pub addr: SocketAddr,
}

impl Gateway {
    /// Starts the binary of `config` against `config.dsn` and waits (≤ 30 s) for
    /// its `listening on` line. Logs (`warn` and up unless
    /// `SYNCULAR_GATEWAY_LOG_FILTER` says otherwise) go to `config.gateway_log`.
    ///
    /// Errors: the binary is missing, exits early, or never prints the line.
    pub fn start(config: &Config) -> Result<Gateway, String> {
        let bin = &config.gateway_bin;
        if !bin.is_file() {
            return Err(format!(
                "no gateway binary at {} (build it: cargo build --release -p syncular-gateway, or set SYNCULAR_GATEWAY_BIN)",
                bin.display()
            ));
        }
        let log = File::create(&config.gateway_log)
            .map_err(|e| format!("cannot create {}: {e}", config.gateway_log.display()))?;
        let mut cmd = Command::new(bin);
        cmd.args(["--database-url", &config.dsn, "--listen", "127.0.0.1:0", "--auth", "dev"])
            .args(&config.gateway_args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log));
        if std::env::var_os("SYNCULAR_GATEWAY_LOG_FILTER").is_none() {
            cmd.env("SYNCULAR_GATEWAY_LOG_FILTER", "warn");
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let stdout = child.stdout.take().ok_or("gateway stdout not piped")?;
        let (tx, rx) = mpsc::channel();
        // Keeps reading stdout for the gateway's whole life (a full pipe would block it).
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(addr) = line.strip_prefix("listening on http://") {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(addr.trim().to_owned());
                    }
                }
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(a) => a,
            Err(_) => {
                let _ = child.kill();
                let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
                return Err(format!(
                    "the gateway printed no `listening on` line within 30 s ({status}); see {}",
                    config.gateway_log.display()
                ));
            }
        };
        let addr = addr
            .parse()
            .map_err(|e| format!("bad gateway address {addr:?}: {e}"))?;
        Ok(Gateway { child, addr })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// True while the process runs.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Resident set size, KiB (`VmRSS` of `/proc/<pid>/status`).
    ///
    /// Errors: the process is gone or the file has no `VmRSS` line.
    pub fn rss_kib(&self) -> Result<u64, String> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .map_err(|e| format!("cannot read the gateway's /proc status: {e}"))?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .ok_or_else(|| "no VmRSS in the gateway's /proc status".to_owned())
    }

    /// Sends SIGTERM and waits (≤ 15 s) for a graceful exit, else kills it.
    pub fn stop(&mut self) {
        if !self.alive() {
            return;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
        for _ in 0..150 {
            if !self.alive() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One scrape of `/metrics`: sample name with labels → value.
#[derive(Clone, Debug, Default)]
pub struct Metrics(pub HashMap<String, f64>);

impl Metrics {
    /// Parses the Prometheus text exposition (comments skipped).
    pub fn parse(text: &str) -> Metrics {
        let mut m = HashMap::new();
        for line in text.lines() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            if let Some((name, value)) = line.rsplit_once(' ') {
                if let Ok(v) = value.trim().parse::<f64>() {
                    m.insert(name.trim().to_owned(), v);
                }
            }
        }
        Metrics(m)
    }

    /// `self[name] − before[name]` (0 when absent from both).
    pub fn delta(&self, before: &Metrics, name: &str) -> Option<f64> {
        let now = self.0.get(name)?;
        Some(now - before.0.get(name).copied().unwrap_or(0.0))
    }

    /// Sum over every sample whose name starts with `prefix` (label sets), as a delta.
    pub fn delta_prefix(&self, before: &Metrics, prefix: &str) -> f64 {
        let sum = |m: &Metrics| -> f64 {
            m.0.iter()
                .filter(|(k, _)| k.starts_with(prefix))
                .map(|(_, v)| v)
                .sum()
        };
        sum(self) - sum(before)
    }
}
