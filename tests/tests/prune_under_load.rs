//! Pruning under push load (SPEC §4.6; docs/src/sql/lifecycle.md).
//!
//! `call_prune_advances_the_horizon_deletes_in_batches_and_returns_its_counts`:
//! the procedure itself on a small partition, no load — `CALL
//! syncular.prune(partition, 30)` on 1,101 commits prunes commits 1..=101,
//! keeps the push outcome and the client record, returns `(1, 101, 0, 0)`;
//! a second CALL prunes nothing.
//!
//! `a_prune_batch_reads_only_the_change_scope_entries_of_its_commits`: one
//! `prune_batch` of 100 commits on a 20,000-commit partition reads (index
//! statistics) about the change-scope entries it deletes, not all of the
//! partition's.
//!
//! `pruning_a_partition_under_push_load_…`: a partition holding
//! `PRUNE_IT_COMMITS` (default 24,000) commits written through the
//! extension — 200 pushed through `syncular.sync`, the rest plain SQL writes
//! to `public.tasks` captured as commits (single- and three-row inserts,
//! updates, deletes with their tombstones) — is pruned in batches of 2,000
//! while four connections keep pushing single-row commits at 40 requests/s
//! each (two push-only, two push + pull rounds, which take the pruning
//! fence), a raw SSP2 sweeper pulls windows starting at the horizon, and two
//! real `syncular-client`s pull: one following the head, one paused until
//! the horizon has passed its cursor. The prune runs `CALL syncular.prune`;
//! `SYNCULAR_PRUNE_DRIVER=batches` runs the same steps from the client
//! instead (`advance_horizon`, then `prune_batch` until done, each its own
//! transaction — docs/src/sql/lifecycle.md: "call the batch functions yourself").
//!
//! The pruning session's clock runs 15 days ahead (`syncular.now_ms`), so no
//! client record is active and the horizon goes to `maxCommitSeq − 1000` at
//! the moment the prune advances it — between the counter read before the
//! prune and the one right after it. Asserted:
//! - the prune deleted exactly the commits `1..=horizon` (the log was dense
//!   from 1) and no push outcome or client record; no commit, change,
//!   change-scope entry or tombstone at or below the horizon is left, and
//!   every commit above it is still there, byte for byte (header, changes,
//!   change-scope entries compared with a digest taken before the prune),
//!   dense up to the counter;
//! - every push was `applied`, got its own `commitSeq`, its row is in the
//!   app table and, above the final horizon, its change is in the log; a
//!   replay of a pruned pushed commit still answers `cached` with its
//!   original `commitSeq` (outcomes outlive the log);
//! - every window the sweeper received was dense (`cursor+1 ..= nextCursor`,
//!   no commit missed under it) or a `reset` (`sync.cursor_expired`, cursor
//!   echoed) — also across ten more back-to-back prunes that advance the
//!   horizon under its cursor;
//! - both real clients end with exactly the server's rows (values and
//!   versions); the paused one was reset (`sync.cursor_expired`) at least
//!   once and re-bootstrapped under load;
//! - no push waited for more than half the prune (≥ 10 batches, so a push
//!   held across several batches would show). The longest push during the
//!   prune is printed next to the longest in a window of the same length
//!   right after it and the longest batch transaction (sampled from
//!   `pg_stat_activity`): timings are reported, not asserted beyond that.

use std::thread;
use std::time::{Duration, Instant};

use ssp2::model::PushStatus;
use syncular_integration_tests::fixtures::{partition_name, register_schema, server_tasks};
use syncular_integration_tests::pruneload::checks;
use syncular_integration_tests::pruneload::prefill::{
    allowed, capture_session, captured_statements, counters, push_commits,
};
use syncular_integration_tests::pruneload::pruner::{prune, prune_session, Driver, Monitor, PruneCall};
use syncular_integration_tests::pruneload::pullers::{RealPuller, Sweeper};
use syncular_integration_tests::pruneload::pushers::{Kind, PushConfig, PushLoad, Sample};
use syncular_integration_tests::pruneload::{all_projects, ms, ratio, Latency};
use syncular_integration_tests::wire::{decode_response, push_outcomes, RawSession};
use syncular_integration_tests::{connect, dsn, env_usize};

const PUSHERS: usize = 4;
/// Requests per second per pushing connection.
const RATE: f64 = 40.0;
/// Prefill: pushed requests × commits per request (project p3).
const PUSH_REQUESTS: usize = 4;
const PER_REQUEST: usize = 50;
/// Captured statements per transaction.
const CHUNK: u64 = 1000;
/// Commits per pruning batch.
const BATCH: i32 = 2000;
/// §4.6: the newest commits the horizon always leaves (the default).
const MIN_RETAINED: i64 = 1000;
/// Commits pushed before the prune starts: more than `MIN_RETAINED`, so the
/// horizon passes the paused client's cursor (the prefill's last commit).
const PUSHED_BEFORE_PRUNE: i64 = 1200;
/// Back-to-back prunes after the main one, with the sweeper at the horizon.
const REPEATED_PRUNES: usize = 10;
const DEADLINE: Duration = Duration::from_secs(300);

/// The tests of this file run one at a time (the load test times pushes).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `CALL syncular.prune(partition, batch_rows)` on 1,100 captured commits and
/// one pushed commit, without load: it advances the horizon to 101 (the
/// newest 1,000 stay), deletes commits 1..=101 in batches of 30 (one
/// COMMIT each), keeps the push outcome and the client record, and
/// returns its counts; a second CALL finds nothing to do.
#[test]
fn call_prune_advances_the_horizon_deletes_in_batches_and_returns_its_counts() {
    let _serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut admin = connect();
    register_schema(&mut admin).expect("register the sample schema");
    let partition = partition_name("prune-call");
    let mut pusher = RawSession::new(connect(), &partition, "alice", "pusher", Some(allowed()));
    pusher.acquire_epoch().expect("logEpoch");
    push_commits(&mut pusher, 1, 1, "p3").expect("one pushed commit");
    let mut writer = connect();
    capture_session(&mut writer, &partition, "batch-job").expect("capture session");
    captured_statements(&mut writer, 0, 1100, 1100, |_| {}).expect("1,100 captured commits");
    let (mut pruner, _) = prune_session(&dsn()).expect("pruning session");

    let first = prune(&mut pruner, &partition, Some(30), Driver::Call).expect("CALL syncular.prune");
    assert_eq!(
        (first.partitions, first.commits, first.push_results, first.clients),
        (1, 101, 0, 0),
        "one partition, commits 1..=101, no push outcome, no client record"
    );
    let end = checks::after(&mut admin, &partition).expect("log after");
    assert_eq!((end.horizon_seq, end.max_commit_seq), (101, 1101));
    assert_eq!((end.commits_below, end.changes_below, end.change_scopes_below, end.tombstones_below), (0, 0, 0, 0));
    assert!(end.dense_above(), "{end:?}");
    assert_eq!((end.push_results, end.clients), (1, 1), "the outcome and the client record are kept");
    let again = prune(&mut pruner, &partition, Some(30), Driver::Call).expect("CALL syncular.prune again");
    assert_eq!((again.partitions, again.commits), (1, 0), "nothing left to prune");
}

/// `idx_tup_read` of `syncular.sync_change_scopes_pkey` (the statistics
/// other backends have flushed).
fn change_scope_index_reads(admin: &mut postgres::Client) -> i64 {
    admin.batch_execute("SELECT pg_stat_clear_snapshot()").expect("clear the stats snapshot");
    admin
        .query_one(
            "SELECT idx_tup_read FROM pg_stat_user_indexes WHERE schemaname = 'syncular' \
               AND indexrelname = 'sync_change_scopes_pkey'",
            &[],
        )
        .expect("pg_stat_user_indexes")
        .get(0)
}

/// One `syncular.prune_batch(partition, 100)` on a partition of 20,000
/// commits reads the change-scope entries of its 100 commits, not the
/// partition's: the batches of docs/src/sql/lifecycle.md are bounded, and the statement's own
/// comment promises primary-key probes. Counted with `idx_tup_read` of
/// `sync_change_scopes_pkey` (the only index of the table) before and after
/// the batch, whose session flushes its statistics right after it
/// (`pg_stat_force_next_flush`, Postgres 15+). Fails on 8f37de3: the generic plan builds a
/// hash table from an index scan over every change-scope entry of the
/// partition (~24,000 here, ~1.2 million for a partition of a million
/// commits), so a batch costs time proportional to the partition, whatever
/// `max_rows` — on a durable server and a 200,000-commit partition a batch of
/// 100 commits takes as long as one of 1,000 (≈ 0.12 s with `jit = off`;
/// ≈ 0.6 s with the default JIT settings, which compile the plan's ~3.4
/// million estimated cost every batch).
#[test]
fn a_prune_batch_reads_only_the_change_scope_entries_of_its_commits() {
    let _serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut admin = connect();
    register_schema(&mut admin).expect("register the sample schema");
    let partition = partition_name("prune-batch-cost");
    {
        let mut session = RawSession::new(connect(), &partition, "alice", "epoch", Some(allowed()));
        session.acquire_epoch().expect("logEpoch");
        let mut writer = connect();
        capture_session(&mut writer, &partition, "batch-job").expect("capture session");
        captured_statements(&mut writer, 0, 20_000, CHUNK, |_| {}).expect("20,000 captured commits");
        let (mut pruner, _) = prune_session(&dsn()).expect("pruning session");
        let horizon: i64 = pruner
            .query_one("SELECT syncular.advance_horizon($1)", &[&partition])
            .expect("advance_horizon")
            .get(0);
        assert_eq!(horizon, 19_000);
    }
    let entries: i64 = admin
        .query_one("SELECT count(*) FROM syncular.sync_change_scopes WHERE partition = $1", &[&partition])
        .expect("count")
        .get(0);
    let before = change_scope_index_reads(&mut admin);
    let (mut pruner, _) = prune_session(&dsn()).expect("pruning session");
    let row = pruner
        .query_one("SELECT commits, change_scopes FROM syncular.prune_batch($1, 100)", &[&partition])
        .expect("prune_batch");
    assert_eq!(row.get::<_, i64>(0), 100, "one batch of 100 commits");
    let deleted: i64 = row.get(1);
    // The flag makes the report at the end of the next statement flush (no 1 s rate limit).
    pruner.batch_execute("SELECT pg_stat_force_next_flush()").expect("force a statistics flush");
    pruner.batch_execute("SELECT 1").expect("a statement that flushes");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut read = change_scope_index_reads(&mut admin) - before;
    while read == 0 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(50));
        read = change_scope_index_reads(&mut admin) - before;
    }
    println!("prune_batch(…, 100): deleted {deleted} change-scope entries, read {read} of the partition's {entries}");
    assert!(
        read <= 10 * deleted + 100,
        "one batch of 100 commits read {read} change-scope index entries to delete {deleted} (the partition holds \
         {entries}): a batch costs O(partition), not O(batch)"
    );
}

/// Whether every pusher and reader is still running (one that ended failed).
fn alive(load: &PushLoad, sweeper: &Sweeper, follower: &RealPuller, laggard: &RealPuller) -> bool {
    !load.any_finished() && !sweeper.is_finished() && !follower.is_finished() && !laggard.is_finished()
}

/// Stops everything and fails with what went wrong.
fn fail(load: PushLoad, sweeper: Sweeper, follower: RealPuller, laggard: RealPuller) -> ! {
    let errors = [
        load.stop().err().map(|e| format!("pushers: {e}")),
        sweeper.stop().err().map(|e| format!("sweeper: {e}")),
        follower.finish().err().map(|e| format!("follower: {e}")),
        laggard.finish().err().map(|e| format!("laggard: {e}")),
    ];
    panic!("a pusher or reader failed: {:?}", errors.into_iter().flatten().collect::<Vec<_>>());
}

fn latency(samples: &[&Sample]) -> Latency {
    Latency::of(samples.iter().map(|s| s.latency).collect())
}

fn line(label: &str, l: &Latency) -> String {
    format!("{label:<34} n={:<5} p50={:>8} ms  p99={:>8} ms  max={:>8} ms", l.count, ms(l.p50), ms(l.p99), ms(l.max))
}

#[test]
fn pruning_a_partition_under_push_load_keeps_the_log_above_the_horizon_and_clients_converge() {
    let dsn = dsn();
    let mut admin = connect();
    register_schema(&mut admin).expect("register the sample schema");
    let partition = partition_name("prune-load");
    let _serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let driver = Driver::from_env();
    let total = env_usize("PRUNE_IT_COMMITS", 24_000).max(5_000) as i64;
    let pushed_prefill = (PUSH_REQUESTS * PER_REQUEST) as i64;

    // 1. The log, through the extension.
    let t = Instant::now();
    let mut prefiller = RawSession::new(connect(), &partition, "prefill", "prefill", Some(allowed()));
    let epoch = prefiller.acquire_epoch().expect("logEpoch");
    let pushed = push_commits(&mut prefiller, PUSH_REQUESTS, PER_REQUEST, "p3").expect("prefill pushes");
    let mut writer = connect();
    capture_session(&mut writer, &partition, "batch-job").expect("capture session");
    captured_statements(&mut writer, 0, (total - pushed_prefill) as u64, CHUNK, |_| {}).expect("captured statements");
    let (prefilled, horizon0) = counters(&mut admin, &partition).expect("counters");
    assert_eq!((prefilled, horizon0), (total, 0), "the prefill wrote one commit per statement");
    let tombstones0: i64 = admin
        .query_one("SELECT count(*) FROM syncular.sync_tombstones WHERE partition = $1", &[&partition])
        .expect("tombstones")
        .get(0);
    assert!(tombstones0 > 0, "the prefill's deletes left tombstones");
    println!("prefill: {total} commits ({pushed_prefill} pushed, the rest captured SQL; {tombstones0} tombstones) in {:.1} s", t.elapsed().as_secs_f64());

    // 2. Readers and pushers.
    let projects = all_projects(PUSHERS);
    let follower = RealPuller::start(&dsn, &partition, "real-follower", projects.clone(), false).expect("follower");
    let laggard = RealPuller::start(&dsn, &partition, "real-laggard", projects.clone(), true).expect("laggard");
    let sweeper = Sweeper::start(&dsn, &partition, &epoch, projects.clone(), 200);
    let load = PushLoad::start(&PushConfig {
        dsn: dsn.clone(),
        partition: partition.clone(),
        epoch: epoch.clone(),
        connections: PUSHERS,
        rate: RATE,
        statement_timeout: "120s".to_owned(),
    })
    .expect("pushers");
    let before_from = load.now();
    let deadline = Instant::now() + DEADLINE;
    while counters(&mut admin, &partition).expect("counters").0 < total + PUSHED_BEFORE_PRUNE {
        if !alive(&load, &sweeper, &follower, &laggard) {
            fail(load, sweeper, follower, laggard);
        }
        assert!(Instant::now() < deadline, "pushers did not reach {PUSHED_BEFORE_PRUNE} commits");
        thread::sleep(Duration::from_millis(20));
    }
    let before_to = load.now();

    // 3. The prune (the paused client resumes once the horizon passed its cursor).
    let snapshot = checks::before(&mut admin, &partition, MIN_RETAINED).expect("digests before the prune");
    let cursors: Vec<(String, i64)> = admin
        .query(
            "SELECT client_id, cursor FROM syncular.sync_clients WHERE partition = $1 AND cursor >= 0 ORDER BY 1",
            &[&partition],
        )
        .expect("cursors")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let (mut pruner, pid) = prune_session(&dsn).expect("pruning session");
    let monitor = Monitor::start(&dsn, pid, Duration::from_millis(5));
    let resume = laggard.pause_flag();
    let (dsn2, partition2) = (dsn.clone(), partition.clone());
    let resumer = thread::spawn(move || {
        let mut conn = syncular_integration_tests::connect_to(&dsn2);
        let deadline = Instant::now() + DEADLINE;
        while counters(&mut conn, &partition2).expect("counters").1 <= total && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(2));
        }
        resume.store(false, std::sync::atomic::Ordering::SeqCst);
    });
    let prune_from = load.now();
    let call = prune(&mut pruner, &partition, Some(BATCH), driver).expect("prune");
    let prune_to = load.now();
    let (max1, horizon1) = counters(&mut admin, &partition).expect("counters");
    let watched = monitor.stop().expect("monitor");
    resumer.join().expect("resumer");
    let during = prune_to - prune_from;

    // The horizon went to maxCommitSeq − 1000 at the advance, and everything at or below it is gone.
    assert!(
        snapshot.max_commit_seq - MIN_RETAINED <= horizon1 && horizon1 <= max1 - MIN_RETAINED,
        "horizon {horizon1} not within [{} − {MIN_RETAINED}, {max1} − {MIN_RETAINED}]",
        snapshot.max_commit_seq
    );
    assert_eq!(
        call,
        PruneCall { partitions: 1, commits: horizon1, push_results: 0, clients: 0, elapsed: call.elapsed },
        "the procedure pruned commits 1..={horizon1} and kept every push outcome and client record"
    );
    let kept = checks::digests(&mut admin, &partition, horizon1, snapshot.max_commit_seq).expect("digests after");
    let expected: std::collections::BTreeMap<_, _> =
        snapshot.digests.iter().filter(|(seq, _)| **seq > horizon1).map(|(k, v)| (*k, v.clone())).collect();
    assert_eq!(
        kept.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>(),
        "every commit in ({horizon1}, {}] is still there",
        snapshot.max_commit_seq
    );
    assert!(kept == expected, "the commits above the horizon are unchanged (header, changes, change scopes)");
    let tombstones1: i64 = admin
        .query_one("SELECT count(*) FROM syncular.sync_tombstones WHERE partition = $1", &[&partition])
        .expect("tombstones")
        .get(0);
    let tombstones_kept = snapshot.tombstones.iter().filter(|(_, seq)| *seq > horizon1).count() as i64;
    assert_eq!(tombstones1, tombstones_kept, "tombstones at or below the horizon are pruned, the others kept");

    // 4. A window of the same length without pruning, then back-to-back prunes under the sweeper.
    let after_from = load.now();
    while load.now() < after_from + during {
        if !alive(&load, &sweeper, &follower, &laggard) {
            fail(load, sweeper, follower, laggard);
        }
        thread::sleep(Duration::from_millis(20));
    }
    let after_to = load.now();
    let mut repeated = Vec::new();
    let mut last_max_before = 0;
    for _ in 0..REPEATED_PRUNES {
        thread::sleep(Duration::from_millis(150));
        last_max_before = counters(&mut admin, &partition).expect("counters").0;
        repeated.push(prune(&mut pruner, &partition, Some(BATCH), driver).expect("prune (repeated)"));
    }
    if !alive(&load, &sweeper, &follower, &laggard) {
        fail(load, sweeper, follower, laggard);
    }

    // 5. Stop writing; readers finish.
    let reports = load.stop().expect("every push applied");
    let sweep = sweeper.stop().expect("every sweeper window dense or reset");
    let follower = follower.finish().expect("the follower syncs to the end");
    let laggard = laggard.finish().expect("the laggard syncs to the end");
    let end = checks::after(&mut admin, &partition).expect("log after");

    // The log at the end.
    assert_eq!(
        (end.commits_below, end.changes_below, end.change_scopes_below, end.tombstones_below),
        (0, 0, 0, 0),
        "nothing at or below the final horizon {}: {end:?}",
        end.horizon_seq
    );
    assert!(
        last_max_before - MIN_RETAINED <= end.horizon_seq && end.horizon_seq <= end.max_commit_seq - MIN_RETAINED,
        "the last prune left the newest 1000 commits at its advance (max was ≥ {last_max_before} then): {end:?}"
    );
    assert!(end.dense_above(), "commits horizon+1..=max all present: {end:?}");
    assert_eq!(
        (end.orphan_changes, end.orphan_change_scopes, end.commits_without_changes),
        (0, 0, 0),
        "no change or change-scope entry outlived its commit: {end:?}"
    );
    let samples: Vec<&Sample> = reports.iter().flat_map(|r| r.samples.iter()).collect();
    assert_eq!(
        end.push_results,
        pushed_prefill + samples.len() as i64,
        "every push outcome is kept (retention 180 d)"
    );
    assert_eq!(
        end.max_commit_seq,
        total + samples.len() as i64,
        "every commit after the prefill is one load push"
    );

    // Every push: its own commitSeq, its row in the app table, its change above the horizon.
    let mut seqs: Vec<i64> = samples.iter().map(|s| s.commit_seq).collect();
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(seqs.len(), samples.len(), "every push got its own commitSeq");
    let changes = checks::changed_rows(&mut admin, &partition, end.horizon_seq).expect("changes above the horizon");
    for s in samples.iter().filter(|s| s.commit_seq > end.horizon_seq) {
        assert_eq!(
            changes.get(&s.commit_seq),
            Some(&vec![s.row_id.clone()]),
            "pushed commit {} ({}) is in the log",
            s.commit_seq,
            s.row_id
        );
    }
    let mut pushed_rows: Vec<String> = samples.iter().map(|s| s.row_id.clone()).collect();
    pushed_rows.sort();
    assert_eq!(
        checks::app_row_ids(&mut admin, &partition, "load-").expect("app rows"),
        pushed_rows,
        "every pushed row is in the app table"
    );

    // A replay of pruned pushed commits still answers `cached` with the original commitSeqs.
    let replay = prefiller.send_bytes(&pushed[0].bytes).expect("replay");
    let outcomes = push_outcomes(&decode_response(&replay).expect("replay decodes"));
    let replayed: Vec<(String, i64)> = outcomes
        .iter()
        .map(|o| {
            assert_eq!(o.status, PushStatus::Cached, "replay of {}", o.client_commit_id);
            (o.client_commit_id.clone(), o.commit_seq.unwrap_or(-1))
        })
        .collect();
    assert_eq!(replayed, pushed[0].outcomes, "a replay answers the original commitSeqs");
    assert!(pushed[0].outcomes.iter().all(|(_, seq)| *seq <= horizon1), "those commits were pruned");

    // Readers converge.
    let server = server_tasks(&mut admin, &partition).expect("server rows");
    assert_eq!(follower.rows.len(), server.len(), "the follower holds as many rows as the server");
    assert!(follower.rows == server, "the follower holds exactly the server's rows and versions");
    assert_eq!(laggard.rows.len(), server.len(), "the laggard holds as many rows as the server");
    assert!(laggard.rows == server, "the laggard holds exactly the server's rows and versions");
    assert!(laggard.resets >= 1, "the paused client's cursor fell behind the horizon: reset, re-bootstrap ({laggard:?})");
    assert!(sweep.windows > 0 && sweep.resets + sweep.sweeps > 0, "the sweeper pulled: {sweep:?}");

    // Latency: reported; asserted only structurally.
    let in_window = |from: Duration, to: Duration| -> Vec<&Sample> {
        samples.iter().copied().filter(|s| s.sent >= from && s.sent < to).collect()
    };
    let before = in_window(before_from + Duration::from_secs(1), before_to);
    let during_s: Vec<&Sample> = samples.iter().copied().filter(|s| s.overlaps(prune_from, prune_to)).collect();
    let after = in_window(after_from, after_to);
    let batches = (call.commits + i64::from(BATCH) - 1) / i64::from(BATCH);
    println!(
        "prune: {} commits in {:.2} s ({:.0} commits/s), {batches} batches, {} transactions observed, \
         longest {} ms; horizon {horizon1} (max {max1}); then {REPEATED_PRUNES} more prunes: {} commits",
        call.commits,
        during.as_secs_f64(),
        call.commits as f64 / during.as_secs_f64(),
        watched.xacts.len(),
        ms(watched.longest()),
        repeated.iter().map(|c| c.commits).sum::<i64>()
    );
    println!("client cursors before the prune (max {}): {cursors:?}", snapshot.max_commit_seq);
    for (label, set) in [("before the prune", &before), ("during the prune", &during_s), ("after (same length)", &after)] {
        println!("{}", line(&format!("pushes {label}"), &latency(set)));
        for kind in [Kind::PushOnly, Kind::PushPull] {
            let of_kind: Vec<&Sample> = set.iter().copied().filter(|s| s.kind == kind).collect();
            println!("{}", line(&format!("  {}", kind.label()), &latency(&of_kind)));
        }
    }
    let (l_during, l_after) = (latency(&during_s), latency(&after));
    println!(
        "max push latency during ÷ after: {}; p99: {}; longest batch transaction {} ms",
        ratio(l_during.max, l_after.max),
        ratio(l_during.p99, l_after.p99),
        ms(watched.longest())
    );
    println!(
        "sweeper: {sweep:?}; follower: rounds {}, resets {} (cursor, max, horizon: {:?}); laggard: rounds {}, resets {} \
         ({:?}), bootstrap rows {}; push+pull resets {}",
        follower.rounds,
        follower.resets,
        follower.reset_at,
        laggard.rounds,
        laggard.resets,
        laggard.reset_at,
        laggard.segment_rows_applied,
        reports.iter().map(|r| r.pull_resets).sum::<usize>()
    );
    assert!(l_during.count > 0, "pushes ran during the prune");
    // With ≥ 10 batches, a push held across several of them would wait over half the prune.
    assert!(
        batches < 10 || l_during.max < during / 2,
        "a push waited {} ms, more than half the {} ms prune: a push was held across batches",
        ms(l_during.max),
        ms(during)
    );
}
