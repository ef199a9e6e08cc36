//! CPU time of the parties sharing the machine — the gateway, the Postgres
//! server (postmaster and all its children), this benchmark process — read
//! from `/proc/<pid>/stat` (`utime + stime`), and of everything else on the
//! machine (busy time of `/proc/stat` minus those three), so a cell can say
//! where its time went and whether other work competed for the cores (a
//! saturated machine shows up as ≈ 100 % × cores).

use std::time::Instant;

/// Clock ticks per second of `/proc/<pid>/stat` (`sysconf(_SC_CLK_TCK)`,
/// 100 on every Linux this runs on).
const TICKS_PER_SEC: f64 = 100.0;

/// `(utime + stime, ppid, cutime + cstime)` of `pid` in ticks — the last is
/// the time of its exited and reaped children (a backend that ended counts there).
fn stat(pid: u32) -> Option<(u64, u32, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesized command name (which may hold spaces).
    let rest = &text[text.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] = state (field 3), so field N is f[N - 3].
    let ppid = f.get(1)?.parse().ok()?;
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    let cutime: u64 = f.get(13)?.parse().ok()?;
    let cstime: u64 = f.get(14)?.parse().ok()?;
    Some((utime + stime, ppid, cutime + cstime))
}

/// Ticks of `root`, of its reaped children, and of every live process whose
/// parent is `root`.
fn tree_ticks(root: u32) -> u64 {
    let mut total = stat(root).map(|s| s.0 + s.2).unwrap_or(0);
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if let Some((ticks, ppid, _)) = stat(pid) {
                if ppid == root {
                    total += ticks;
                }
            }
        }
    }
    total
}

/// Busy ticks of the whole machine (`/proc/stat` line `cpu`: user, nice,
/// system, irq, softirq, steal).
fn machine_busy_ticks() -> u64 {
    let Ok(text) = std::fs::read_to_string("/proc/stat") else {
        return 0;
    };
    let Some(line) = text.lines().find(|l| l.starts_with("cpu ")) else {
        return 0;
    };
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // user nice system idle iowait irq softirq steal …
    [0usize, 1, 2, 5, 6, 7].iter().map(|&i| v.get(i).copied().unwrap_or(0)).sum()
}

/// The inodes of the TCP sockets listening on `port` (`/proc/net/tcp{,6}`, state `0A`).
fn listening_inodes(port: u16) -> Vec<String> {
    let mut out = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else { continue };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state), Some(inode)) = (f.get(1), f.get(3), f.get(9)) else { continue };
            let on_port = local
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
                == Some(port);
            if on_port && *state == "0A" {
                out.push(inode.to_string());
            }
        }
    }
    out
}

/// `root` and its live descendants.
fn descendants(root: u32) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            if let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) {
                if let Some((_, ppid, _)) = stat(pid) {
                    parents.push((pid, ppid));
                }
            }
        }
    }
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(parents.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    out
}

/// The process, among `root` and its descendants, holding the socket that
/// listens on `port` — the server itself, whatever launched it.
pub fn listener_pid(root: u32, port: u16) -> Option<u32> {
    let inodes = listening_inodes(port);
    descendants(root).into_iter().find(|pid| {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
        fds.flatten().any(|fd| {
            std::fs::read_link(fd.path())
                .ok()
                .and_then(|l| l.to_str().map(str::to_owned))
                .and_then(|l| l.strip_prefix("socket:[").and_then(|r| r.strip_suffix(']')).map(str::to_owned))
                .is_some_and(|ino| inodes.contains(&ino))
        })
    })
}

/// The pid of the postmaster serving `backend_pid` (its parent).
pub fn postmaster_of(backend_pid: u32) -> Option<u32> {
    stat(backend_pid).map(|s| s.1)
}

/// A CPU-time sample of the three parties.
#[derive(Clone, Copy, Debug)]
pub struct CpuSample {
    at: Instant,
    gateway: u64,
    postgres: u64,
    bench: u64,
    machine: u64,
}

impl CpuSample {
    /// CPU seconds used since `earlier`: `(gateway, postgres, bench)`.
    pub fn cpu_secs_since(&self, earlier: &CpuSample) -> (f64, f64, f64) {
        let secs = |a: u64, b: u64| b.saturating_sub(a) as f64 / TICKS_PER_SEC;
        (
            secs(earlier.gateway, self.gateway),
            secs(earlier.postgres, self.postgres),
            secs(earlier.bench, self.bench),
        )
    }
}

/// Who to sample.
#[derive(Clone, Copy, Debug)]
pub struct CpuProbe {
    pub gateway_pid: u32,
    pub postmaster_pid: Option<u32>,
}

impl CpuProbe {
    /// Samples now.
    pub fn sample(&self) -> CpuSample {
        CpuSample {
            at: Instant::now(),
            gateway: tree_ticks(self.gateway_pid),
            postgres: self.postmaster_pid.map(tree_ticks).unwrap_or(0),
            bench: stat(std::process::id()).map(|s| s.0).unwrap_or(0),
            machine: machine_busy_ticks(),
        }
    }
}

/// CPU use between two samples, in percent of one core (200 % = both of 2 cores).
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuUse {
    pub gateway: f64,
    pub postgres: f64,
    pub bench: f64,
    /// Every other process on the machine.
    pub other: f64,
}

impl CpuUse {
    /// Use between `a` and `b` (`b` later). Backends that exited in between
    /// lose their ticks (the benchmark's connections are long-lived).
    pub fn between(a: &CpuSample, b: &CpuSample) -> CpuUse {
        let secs = b.at.duration_since(a.at).as_secs_f64().max(1e-9);
        let pct = |x: u64, y: u64| y.saturating_sub(x) as f64 / TICKS_PER_SEC / secs * 100.0;
        CpuUse {
            gateway: pct(a.gateway, b.gateway),
            postgres: pct(a.postgres, b.postgres),
            bench: pct(a.bench, b.bench),
            other: pct(
                a.machine + b.gateway + b.postgres + b.bench,
                b.machine + a.gateway + a.postgres + a.bench,
            ),
        }
    }

    /// `gw 35% pg 80% bench 40% other 5%`.
    pub fn render(&self) -> String {
        format!(
            "gw {:.0}% pg {:.0}% bench {:.0}% other {:.0}%",
            self.gateway, self.postgres, self.bench, self.other
        )
    }
}
