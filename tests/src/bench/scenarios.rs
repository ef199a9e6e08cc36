//! The push scenarios (the four of every round, after `ANALYZE`, and the
//! "1 connection" lane on never-analyzed tables), their partitions and
//! preload, the unreported warm-up, and one measured run ([`Bench::run`]:
//! prepare → counters → commits → counters). Nothing here runs `ANALYZE`.

use std::time::Duration;

use postgres::Client;
use ssp2::model::PushStatus;

use super::backends::{self, Backend, ACTOR};
use super::config::Config;
use super::pg_err;
use super::stats::{Cost, Probe};
use crate::connect_to;
use crate::fixtures::{allow_all_projects, partition_name};
use crate::wire::{commit, upsert, RawSession, Task};

/// One connection layout.
#[derive(Clone, Copy, Debug)]
pub struct Scenario {
    /// Report label (the preloaded one gets its row count appended).
    pub label: &'static str,
    /// Connections committing at once.
    pub connections: usize,
    /// Each connection in its own partition (else all share one).
    pub spread: bool,
    /// Into the partition that already holds [`Config::preload`] rows.
    pub preloaded: bool,
}

/// Index into [`SCENARIOS`] of each scenario (for the goals).
pub const ONE: usize = 0;
pub const EIGHT_SHARED: usize = 1;
pub const EIGHT_SPREAD: usize = 2;
pub const PRELOADED: usize = 3;
/// The "1 connection" layout, run before anything is analyzed (its own lane,
/// never part of a round after `ANALYZE`).
pub const NEVER_ANALYZED: usize = 4;

/// The scenarios every round runs after `ANALYZE`, in that order.
pub const EACH_ROUND: [usize; 4] = [ONE, EIGHT_SHARED, EIGHT_SPREAD, PRELOADED];

/// The order of the report's tables (the never-analyzed lane next to its
/// analyzed twin).
pub const REPORT_ORDER: [usize; 5] = [ONE, NEVER_ANALYZED, EIGHT_SHARED, EIGHT_SPREAD, PRELOADED];

/// The push scenarios: [`EACH_ROUND`] and the never-analyzed lane
/// ([`NEVER_ANALYZED`], the same layout as [`ONE`]).
pub const SCENARIOS: [Scenario; 5] = [
    Scenario {
        label: "1 connection",
        connections: 1,
        spread: false,
        preloaded: false,
    },
    Scenario {
        label: "8 connections, one partition",
        connections: 8,
        spread: false,
        preloaded: false,
    },
    Scenario {
        label: "8 connections, 8 partitions",
        connections: 8,
        spread: true,
        preloaded: false,
    },
    Scenario {
        label: "1 connection, preloaded partition",
        connections: 1,
        spread: false,
        preloaded: true,
    },
    Scenario {
        label: "1 connection, never-analyzed tables",
        connections: 1,
        spread: false,
        preloaded: false,
    },
];

/// One measured run.
#[derive(Clone, Debug)]
pub struct RunResult {
    /// Index into [`SCENARIOS`].
    pub scenario: usize,
    pub backend: Backend,
    /// 0-based round.
    pub round: usize,
    /// Commits made (connections × per-connection commits).
    pub commits: usize,
    /// Wall time of the commits.
    pub elapsed: Duration,
    /// What the run cost the server (totals).
    pub cost: Cost,
}

impl RunResult {
    /// Throughput, commits per second.
    pub fn per_sec(&self) -> f64 {
        self.commits as f64 / self.elapsed.as_secs_f64()
    }
}

/// The benchmark's server state: its admin connection, counters and the
/// preloaded partitions.
pub struct Bench {
    pub dsn: String,
    pub config: Config,
    pub probe: Probe,
    pub admin: Client,
    /// Extension partition holding the preloaded rows.
    preloaded_ext: String,
    /// `bench_plain` partition key holding the preloaded rows (both plain backends).
    preloaded_plain: String,
}

impl Bench {
    /// Wraps the admin connection; creates the plain table.
    ///
    /// Errors: a Postgres error.
    pub fn new(
        dsn: &str,
        config: Config,
        probe: Probe,
        mut admin: Client,
    ) -> Result<Bench, String> {
        admin.batch_execute(backends::PLAIN_DDL).map_err(pg_err)?;
        Ok(Bench {
            dsn: dsn.to_owned(),
            config,
            probe,
            admin,
            preloaded_ext: partition_name("bench-preloaded"),
            preloaded_plain: partition_name("bench-preloaded-plain"),
        })
    }

    /// Loads [`Config::preload`] rows into the preloaded partitions: through
    /// `syncular.sync` in 500-operation commits (so the log, scope index and
    /// app table all hold them) and with one `INSERT … SELECT` into the plain table.
    ///
    /// Errors: a failed or unapplied commit, a Postgres error.
    pub fn preload(&mut self) -> Result<(), String> {
        let rows = self.config.preload;
        let mut s = RawSession::new(
            connect_to(&self.dsn),
            &self.preloaded_ext,
            ACTOR,
            "bench-preload",
            Some(allow_all_projects()),
        );
        s.acquire_epoch()?;
        for (c, start) in (0..rows).step_by(500).enumerate() {
            let ops = (start..(start + 500).min(rows))
                .map(|n| {
                    upsert(
                        &Task::new(format!("pre-{n:06}"), "p1", format!("preloaded row {n}")),
                        None,
                    )
                })
                .collect();
            let out = s.push(vec![commit(format!("pre-{c}"), ops)])?;
            if out[0].status != PushStatus::Applied {
                return Err(format!("preload commit {c} not applied: {:?}", out[0]));
            }
        }
        self.admin
            .execute(
                "INSERT INTO public.bench_plain (partition, id, project_id, title, done, payload)
                 SELECT $1, 'pre-' || lpad(n::text, 6, '0'), 'p1', 'preloaded row ' || n, false, '\\x00'::bytea
                   FROM generate_series(0, $2::bigint - 1) AS n
                 ON CONFLICT DO NOTHING",
                &[&self.preloaded_plain, &(rows as i64)],
            )
            .map_err(pg_err)?;
        Ok(())
    }

    /// The partition of each connection of `backend` in `scenario`, round
    /// `round`: fresh ones (empty) unless the scenario is the preloaded one.
    fn partitions(&self, scenario: &Scenario, backend: Backend, label: &str) -> Vec<String> {
        if scenario.preloaded {
            let p = if backend == Backend::Extension {
                &self.preloaded_ext
            } else {
                &self.preloaded_plain
            };
            return vec![p.clone(); scenario.connections];
        }
        let fresh = |i: usize| partition_name(&format!("{}-{label}-{i}", backend.key()));
        if scenario.spread {
            (0..scenario.connections).map(fresh).collect()
        } else {
            vec![fresh(0); scenario.connections]
        }
    }

    /// An unreported run of every backend (2 connections, one fresh
    /// partition each): backend caches, plans, the schema load. Runs no
    /// `ANALYZE` (the never-analyzed lane warms up with it too).
    ///
    /// Errors: as [`Bench::run`].
    pub fn warm_up(&mut self) -> Result<(), String> {
        let warm = Scenario {
            label: "warm-up",
            connections: 2,
            spread: false,
            preloaded: false,
        };
        for backend in Backend::ALL {
            let partitions = self.partitions(&warm, backend, "warm");
            backends::prepare(&self.dsn, backend, &partitions, self.config.warmup, "warm")?
                .execute()?;
        }
        Ok(())
    }

    /// One measured run of `backend` in `SCENARIOS[scenario]`: prepares the
    /// connections, takes the counters (after a `CHECKPOINT`), makes the
    /// commits, reads the counters again.
    ///
    /// Errors: a failed commit, a Postgres error.
    pub fn run(
        &mut self,
        scenario: usize,
        backend: Backend,
        round: usize,
    ) -> Result<RunResult, String> {
        let tag = format!("s{scenario}-r{round}");
        let partitions = self.partitions(&SCENARIOS[scenario], backend, &tag);
        let prepared =
            backends::prepare(&self.dsn, backend, &partitions, self.config.commits, &tag)?;
        let commits = prepared.commits();
        let mark = self.probe.begin(&mut self.admin)?;
        let elapsed = prepared.execute()?;
        let cost = self.probe.end(&mut self.admin, &mark)?;
        Ok(RunResult {
            scenario,
            backend,
            round,
            commits,
            elapsed,
            cost,
        })
    }
}
