//! The gateway process under test — `syncular-gateway` (Rust) or
//! `syncular-gateway-node` (TypeScript, `gateways/node`), same flags: started
//! with `--auth dev` on `127.0.0.1:0`, its bound address read from the one
//! stdout line `listening on http://ADDR`. Its pid (for CPU time and VmRSS) is
//! found the same way for both: the process, among the started one and its
//! descendants, that holds the listening socket (so a wrapper script that does
//! not `exec` is not mistaken for the server). Its Prometheus `/metrics` is
//! scraped for diagnostics. Stopped with SIGTERM (graceful) when dropped.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use super::config::Config;

/// Which gateway.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Rust,
    Node,
    /// The Rust gateway of the last release (or of `BENCH_RT_RELEASE_REF`): the same flags,
    /// against this tree's extension (which keeps the release's SQL functions).
    Release,
}

impl Kind {
    /// `rust` / `node` / `release`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Rust => "rust",
            Kind::Node => "node",
            Kind::Release => "release",
        }
    }

    /// Why this gateway cannot run here (the Node and release lanes are skipped, not failed).
    pub fn unavailable(self, config: &Config) -> Option<String> {
        match self {
            Kind::Rust => return None,
            Kind::Release => {
                let bin = config.bin_of(self);
                return config.release_skip.clone().or_else(|| {
                    (!bin.is_file()).then(|| format!("no release gateway at {} (set SYNCULAR_RELEASE_GATEWAY_BIN)", bin.display()))
                });
            }
            Kind::Node => {}
        }
        if let Some(why) = &config.node_skip {
            return Some(why.clone());
        }
        let bin = config.bin_of(self);
        if !bin.is_file() {
            return Some(format!("no Node gateway at {} (gateways/node not on this branch, or not built)", bin.display()));
        }
        let has_node = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).any(|d| d.join("node").is_file()))
            .unwrap_or(false);
        (!has_node).then(|| "no `node` on PATH".to_owned())
    }
}

/// A running gateway.
pub struct Gateway {
    child: Child,
    /// The process holding the listening socket.
    pid: u32,
    pub kind: Kind,
    /// The bound address (`listening on http://ADDR`).
    pub addr: SocketAddr,
}

impl Gateway {
    /// Starts `kind`'s gateway against `config.dsn` and waits (≤ 30 s) for
    /// its `listening on` line. Logs (`warn` and up unless
    /// `SYNCULAR_GATEWAY_LOG` says otherwise; both gateways read it) go to
    /// `config.log_of(kind)`.
    ///
    /// Errors: the binary is missing, exits early, or never prints the line.
    pub fn start(config: &Config, kind: Kind) -> Result<Gateway, String> {
        let bin = &config.bin_of(kind);
        let log_path = config.log_of(kind);
        if !bin.is_file() {
            return Err(format!(
                "no gateway binary at {} (build it: cargo build --release -p syncular-gateway, or set SYNCULAR_GATEWAY_BIN)",
                bin.display()
            ));
        }
        let log = File::create(&log_path)
            .map_err(|e| format!("cannot create {}: {e}", log_path.display()))?;
        let mut cmd = Command::new(bin);
        cmd.args(["--database-url", &config.dsn, "--listen", "127.0.0.1:0", "--auth", "dev"])
            .args(&config.gateway_args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log));
        if std::env::var_os("SYNCULAR_GATEWAY_LOG").is_none() {
            cmd.env("SYNCULAR_GATEWAY_LOG", "warn");
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
                    log_path.display()
                ));
            }
        };
        let addr: SocketAddr = addr
            .parse()
            .map_err(|e| format!("bad gateway address {addr:?}: {e}"))?;
        let pid = super::procstat::listener_pid(child.id(), addr.port()).unwrap_or(child.id());
        Ok(Gateway { child, pid, kind, addr })
    }

    /// The id of the process holding the listening socket.
    pub fn pid(&self) -> u32 {
        self.pid
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
            .args(["-TERM", &self.pid.to_string()])
            .status();
        if self.pid != self.child.id() {
            let _ = Command::new("kill")
                .args(["-TERM", &self.child.id().to_string()])
                .status();
        }
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
