//! `bench_wire`: wire version 3 next to wire version 2 on the same server in
//! the same run (modules in `tests/src/bench_wire/`; `scripts/bench-wire`
//! builds it in release mode and starts a durable throughput server).
//!
//! 1. Warm-up: a few hundred pushes in each wire version.
//! 2. `BENCH_WIRE_ROUNDS` rounds, the wire versions alternated (v2 first in
//!    even rounds): `BENCH_WIRE_COMMITS` single-row pushes inserting fresh
//!    rows, then as many single-row pushes updating one column of one row.
//! 3. The incremental pull of 1,000 one-row commits, `BENCH_WIRE_PULL_REPS`
//!    times per wire version, alternated.
//! 4. WAL bytes per one-column update of a 20-column row: v3 sparse, v3 full
//!    row, v2 full row; short values and with one 4 KiB value; three runs of
//!    `BENCH_WIRE_WAL_UPDATES` updates each, shapes alternated.
//! 5. Medians, the ratios and the goals (v3 ÷ v2 ≥ 0.95 for a push
//!    and a pull; sparse < full in WAL bytes).
//!
//! Usage: `bench_wire [DSN]` (default `$SYNCULAR_TEST_DSN`).

use std::process::ExitCode;
use std::time::Duration;

use syncular_integration_tests::bench::median;
use syncular_integration_tests::bench_wire::requests::schema_ir;
use syncular_integration_tests::bench_wire::throughput::{push_inserts, push_updates, PullFixture};
use syncular_integration_tests::bench_wire::wal::{update_bytes, Shape};
use syncular_integration_tests::bench_wire::Wire;
use syncular_integration_tests::{connect_to, env_usize};

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("bench_wire: some goals are not met (see above)");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("bench_wire failed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn per_second(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64()
}

fn run() -> Result<bool, String> {
    let dsn = std::env::args()
        .nth(1)
        .or_else(|| std::env::var(syncular_integration_tests::DSN_ENV).ok())
        .ok_or("usage: bench_wire DSN (or set SYNCULAR_TEST_DSN)")?;
    let commits = env_usize("BENCH_WIRE_COMMITS", 2000).max(1);
    let rounds = env_usize("BENCH_WIRE_ROUNDS", 5).max(1);
    let pull_reps = env_usize("BENCH_WIRE_PULL_REPS", 20).max(1);
    let wal_updates = env_usize("BENCH_WIRE_WAL_UPDATES", 500).max(1);
    let mut admin = connect_to(&dsn);
    admin
        .execute("SELECT syncular.register_schema($1::text::jsonb)", &[&schema_ir().to_string()])
        .map_err(syncular_integration_tests::bench::pg_err)?;

    println!("warm-up: 300 pushes per wire version");
    for wire in [Wire::V2, Wire::V3] {
        push_inserts(&dsn, wire, 300)?;
        push_updates(&dsn, wire, 300)?;
    }

    let mut inserts: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut updates: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        let order = if round % 2 == 0 { [Wire::V2, Wire::V3] } else { [Wire::V3, Wire::V2] };
        for wire in order {
            let i = usize::from(wire == Wire::V3);
            inserts[i].push(per_second(commits, push_inserts(&dsn, wire, commits)?));
            updates[i].push(per_second(commits, push_updates(&dsn, wire, commits)?));
            println!(
                "round {round} {}: inserts {:.0}/s, one-column updates {:.0}/s",
                wire.label(),
                inserts[i].last().unwrap(),
                updates[i].last().unwrap()
            );
        }
    }

    let mut fixture = PullFixture::build(&dsn, 1000)?;
    admin
        .batch_execute("ANALYZE syncular.sync_commits, syncular.sync_changes, syncular.sync_change_scopes, syncular.sync_row_scopes")
        .map_err(syncular_integration_tests::bench::pg_err)?;
    let mut pulls: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for rep in 0..pull_reps {
        let order = if rep % 2 == 0 { [Wire::V2, Wire::V3] } else { [Wire::V3, Wire::V2] };
        for wire in order {
            pulls[usize::from(wire == Wire::V3)].push(fixture.pull(wire)?.as_secs_f64() * 1000.0);
        }
    }

    let shapes = [Shape::SparseV3, Shape::FullV3, Shape::FullV2];
    let mut wal: Vec<(bool, Shape, f64)> = Vec::new();
    for long in [false, true] {
        let mut runs: Vec<Vec<f64>> = vec![Vec::new(); shapes.len()];
        for run in 0..3 {
            for k in 0..shapes.len() {
                let k = (k + run) % shapes.len();
                runs[k].push(update_bytes(&dsn, shapes[k], long, 50, wal_updates)?);
            }
        }
        for (k, shape) in shapes.iter().enumerate() {
            wal.push((long, *shape, median(runs[k].clone())));
        }
    }

    let m = |v: &[f64]| median(v.to_vec());
    let (ins2, ins3, upd2, upd3) = (m(&inserts[0]), m(&inserts[1]), m(&updates[0]), m(&updates[1]));
    let (pull2, pull3) = (m(&pulls[0]), m(&pulls[1]));
    println!();
    println!("== medians ({rounds} rounds of {commits} pushes; {pull_reps} pulls; durable server)");
    println!("| | v2 | v3 | v3 ÷ v2 | goal |");
    println!("|---|---|---|---|---|");
    let goal = |ok: bool| if ok { "met" } else { "NOT MET" };
    let r_ins = ins3 / ins2;
    let r_upd = upd3 / upd2;
    let r_pull = pull2 / pull3;
    println!("| single-row push, insert (commits/s) | {ins2:.0} | {ins3:.0} | {r_ins:.2} | ≥ 0.95 {} |", goal(r_ins >= 0.95));
    println!("| single-row push, one-column update (commits/s) | {upd2:.0} | {upd3:.0} | {r_upd:.2} | ≥ 0.95 {} |", goal(r_upd >= 0.95));
    println!("| pull of 1,000 one-row commits (ms; ratio = v2 time ÷ v3 time) | {pull2:.2} | {pull3:.2} | {r_pull:.2} | ≥ 0.95 {} |", goal(r_pull >= 0.95));
    println!();
    println!("== WAL bytes per one-column update of a 20-column row (median of 3 runs × {wal_updates} updates)");
    println!("| row | v3 sparse | v3 full row | v2 full row | sparse < v2 full |");
    println!("|---|---|---|---|---|");
    let mut wal_ok = true;
    for long in [false, true] {
        let of = |shape: Shape| wal.iter().find(|(l, s, _)| *l == long && *s == shape).map_or(f64::NAN, |x| x.2);
        let (sparse, full3, full2) = (of(Shape::SparseV3), of(Shape::FullV3), of(Shape::FullV2));
        let ok = sparse < full2;
        wal_ok &= ok;
        println!(
            "| {} | {sparse:.0} | {full3:.0} | {full2:.0} | {} |",
            if long { "18 short values + one 4 KiB value" } else { "18 short values" },
            goal(ok)
        );
    }
    Ok(r_ins >= 0.95 && r_upd >= 0.95 && r_pull >= 0.95 && wal_ok)
}
