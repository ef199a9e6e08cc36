//! Fuzz smoke on the stable toolchain: the cargo-fuzz targets' invariants
//! (`syncular_protocol::fuzz_checks`, the very functions the targets in
//! `fuzz/fuzz_targets/` call) over every committed seed of the target's
//! corpus (`fuzz/corpus/<target>/`), then over `FUZZ_SMOKE_CASES` (default
//! 100,000) deterministic mutations of those seeds per target: bit flips,
//! interesting bytes, boundary integers (1/2/4/8 bytes, either endianness,
//! or near the input's own length) over any field, byte insertions,
//! deletions, range duplications, truncations, extensions to a random
//! length, splices and crossovers of two seeds, and random byte strings of
//! random length, stacked 1–4 deep. The generator is a fixed-seed
//! xorshift64* (`FUZZ_SMOKE_SEED` overrides the seed), so a run is
//! reproducible.
//!
//! Like libFuzzer's `-malloc_limit_mb` (2 GB by default), only tighter, the
//! smoke also bounds the largest single allocation a case may make (1 MiB +
//! 256 bytes per input byte): a decoder that reserves what a length or count
//! field claims before checking it against the remaining bytes fails here.
//!
//! A failing input is printed in hex with the command that adds it to the
//! corpus. libFuzzer's own corpus additions (40-hex-digit names, not
//! committed) are skipped, so a local `cargo fuzz run` changes nothing here.
//!
//! ```sh
//! cargo test -p syncular-protocol --test fuzz_smoke
//! FUZZ_SMOKE_CASES=1000000 cargo test --release -p syncular-protocol --test fuzz_smoke
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

use syncular_protocol::fuzz_checks;

// --- allocation bound ----------------------------------------------------

/// The system allocator, recording on each thread the largest single
/// allocation requested since the last [`take_largest_alloc`].
struct Tracking;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    // `try_with`: allocations during thread teardown find no slot.
    let _ = LARGEST.try_with(|m| {
        if size > m.get() {
            m.set(size)
        }
    });
}

unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        System.realloc(ptr, layout, new_size)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static ALLOC: Tracking = Tracking;

fn take_largest_alloc() -> usize {
    LARGEST.with(|m| m.replace(0))
}

fn alloc_limit(input_len: usize) -> usize {
    (1 << 20) + 256 * input_len
}

// --- generator -----------------------------------------------------------

const DEFAULT_SEED: u64 = 0x5353_5032_f022_5eed;

/// xorshift64* (Vigna), seeded through splitmix64 so any seed works.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform-enough in `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    /// `0..=n`, skewed towards small values (short runs, short lengths).
    fn small(&mut self, n: usize) -> usize {
        let m = self.below(n + 1);
        self.below(m + 1)
    }
    fn byte(&mut self) -> u8 {
        self.next() as u8
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.byte()).collect()
    }
}

/// Boundary values for a 1-, 2-, 4- or 8-byte field (lengths, counts,
/// versions), written little- or big-endian.
const INTERESTING: [u64; 14] = [
    0,
    1,
    2,
    0x7f,
    0x80,
    0xff,
    0x100,
    0x7fff,
    0x8000,
    0xffff,
    0x7fff_ffff,
    0xffff_ffff,
    0x7fff_ffff_ffff_ffff,
    u64::MAX,
];

/// One mutation of `data` in place (`other` is a second seed for splices);
/// returns its name for the failure report.
fn mutate(rng: &mut Rng, data: &mut Vec<u8>, other: &[u8], max_len: usize) -> &'static str {
    let len = data.len();
    match rng.below(11) {
        0 if len > 0 => {
            for _ in 0..=rng.small(7) {
                let i = rng.below(len);
                data[i] ^= 1 << rng.below(8);
            }
            "bit flips"
        }
        1 if len > 0 => {
            let i = rng.below(len);
            data[i] = match rng.below(3) {
                0 => rng.byte(),
                1 => [0x00, 0x01, 0x7f, 0x80, 0xff][rng.below(5)],
                _ => data[i].wrapping_add(if rng.below(2) == 0 { 1 } else { 0xff }),
            };
            "byte set"
        }
        2 if len > 0 => {
            let width = [1usize, 2, 4, 8][rng.below(4)].min(len);
            let i = rng.below(len - width + 1);
            let mut v = INTERESTING[rng.below(INTERESTING.len())];
            if rng.below(3) == 0 {
                // Near the input's own size: lengths that just fit or just don't.
                v = (len as u64).wrapping_add(rng.below(9) as u64).wrapping_sub(4);
            }
            let le = v.to_le_bytes();
            let be = v.to_be_bytes();
            let field = if rng.below(2) == 0 { &le[..width] } else { &be[8 - width..] };
            data[i..i + width].copy_from_slice(field);
            "interesting integer"
        }
        3 => {
            let i = rng.below(len + 1);
            let n = 1 + rng.small(15);
            let ins = if rng.below(2) == 0 { rng.bytes(n) } else { vec![rng.byte(); n] };
            data.splice(i..i, ins);
            "byte insertion"
        }
        4 if len > 0 => {
            let i = rng.below(len);
            let n = 1 + rng.small(len - i - 1);
            data.drain(i..i + n);
            "byte deletion"
        }
        5 if len > 0 => {
            let i = rng.below(len);
            let n = 1 + rng.small(len - i - 1);
            let at = rng.below(len + 1);
            let chunk = data[i..i + n].to_vec();
            data.splice(at..at, chunk);
            "range duplication"
        }
        6 if len > 0 => {
            data.truncate(rng.below(len));
            "truncation"
        }
        7 => {
            let target = len + 1 + rng.small(64);
            let tail = rng.bytes(target - len);
            data.extend(tail);
            "extension to a random length"
        }
        8 if !other.is_empty() => {
            let cut = rng.below(len + 1);
            let from = rng.below(other.len());
            data.truncate(cut);
            data.extend_from_slice(&other[from..]);
            "splice of two seeds"
        }
        9 if len > 0 && !other.is_empty() => {
            // Overwrite a run with bytes from the other seed (keeps the length).
            let from = rng.below(other.len());
            let n = rng.small(other.len() - from).max(1).min(len);
            let at = rng.below(len - n + 1);
            data[at..at + n].copy_from_slice(&other[from..from + n]);
            "crossover"
        }
        _ => {
            let n = rng.small(max_len.min(256));
            *data = rng.bytes(n);
            "random bytes of a random length"
        }
    }
}

// --- harness -------------------------------------------------------------

fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target);
    let mut seeds: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("corpus entry").path())
        .filter(|p| p.is_file())
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.to_owned();
            // libFuzzer's additions: SHA-1 names, git-ignored.
            let generated = name.len() == 40 && name.bytes().all(|b| b.is_ascii_hexdigit());
            (!generated).then(|| {
                let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                (name, bytes)
            })
        })
        .collect();
    seeds.sort();
    assert!(!seeds.is_empty(), "no seeds in {}", dir.display());
    seeds
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim().replace('_', "");
    let parsed = match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    Some(parsed.unwrap_or_else(|e| panic!("{name}={v:?}: {e}")))
}

const MAX_REPORTED: usize = 8;

/// Runs `check` on one input; `Err` with the reason when it panics or
/// allocates past the bound.
fn run_case(check: fn(&[u8]), data: &[u8]) -> Result<(), String> {
    take_largest_alloc();
    let outcome = catch_unwind(AssertUnwindSafe(|| check(data)));
    let largest = take_largest_alloc();
    match outcome {
        Err(p) => Err(p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panic".into())),
        Ok(()) if largest > alloc_limit(data.len()) => Err(format!(
            "allocated {largest} bytes at once for a {}-byte input (bound {})",
            data.len(),
            alloc_limit(data.len())
        )),
        Ok(()) => Ok(()),
    }
}

fn smoke(target: &str, check: fn(&[u8])) {
    let seeds = corpus(target);
    let cases = env_u64("FUZZ_SMOKE_CASES").unwrap_or(100_000);
    let seed = env_u64("FUZZ_SMOKE_SEED").unwrap_or(DEFAULT_SEED);
    let max_len = 2 * seeds.iter().map(|(_, b)| b.len()).max().unwrap_or(0) + 64;
    let mut failures: Vec<String> = Vec::new();
    let report = |failures: &mut Vec<String>, what: String, reason: String, data: &[u8]| {
        eprintln!(
            "fuzz smoke {target}: {what} FAILED: {reason}\n  input ({} bytes, hex): {}\n  \
             to add it to the corpus (from the repository root): echo <hex> | xxd -r -p > \
             crates/protocol/fuzz/corpus/{target}/<name>.bin",
            data.len(),
            hex::encode(data),
        );
        failures.push(what);
    };

    for (name, data) in &seeds {
        if let Err(reason) = run_case(check, data) {
            report(&mut failures, format!("seed {name}"), reason, data);
        }
    }

    let mut rng = Rng::new(seed ^ target.bytes().fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64)));
    let started = std::time::Instant::now();
    let mut ran = 0;
    for case in 0..cases {
        if failures.len() >= MAX_REPORTED {
            break;
        }
        ran += 1;
        let (base, mut data) = seeds[rng.below(seeds.len())].clone();
        let (other, other_data) = &seeds[rng.below(seeds.len())];
        let mut ops = Vec::new();
        for _ in 0..1 + rng.small(3) {
            ops.push(mutate(&mut rng, &mut data, other_data, max_len));
            data.truncate(max_len);
        }
        if let Err(reason) = run_case(check, &data) {
            report(
                &mut failures,
                format!("case {case} (FUZZ_SMOKE_SEED={seed:#x}; {base}: {}; other seed {other})", ops.join(", ")),
                reason,
                &data,
            );
        }
    }
    eprintln!(
        "fuzz smoke {target}: {} seeds + {ran} mutated cases in {:.1?}",
        seeds.len(),
        started.elapsed()
    );
    assert!(failures.is_empty(), "fuzz smoke {target}: {} failing inputs (hex above): {failures:#?}", failures.len());
}

#[test]
fn request_decode() {
    smoke("request_decode", fuzz_checks::request_decode);
}

#[test]
fn segment_decode() {
    smoke("segment_decode", fuzz_checks::segment_decode);
}

#[test]
fn sparse_row_decode() {
    smoke("sparse_row_decode", fuzz_checks::sparse_row_decode);
}

/// The generator is deterministic and every mutation keeps the length bound.
#[test]
fn mutations_are_reproducible_and_bounded() {
    let seeds = [b"SSP2 seed bytes".to_vec(), vec![], vec![0xff; 40]];
    let run = |seed| {
        let mut rng = Rng::new(seed);
        (0..2_000)
            .map(|i| {
                let mut d = seeds[i % 3].clone();
                mutate(&mut rng, &mut d, &seeds[(i + 1) % 3], 100);
                d.truncate(100);
                d
            })
            .collect::<Vec<_>>()
    };
    let a = run(1);
    assert_eq!(a, run(1));
    assert_ne!(a, run(2));
    assert!(a.iter().all(|d| d.len() <= 100));
    assert!(a.iter().any(|d| d.is_empty()) && a.iter().any(|d| d.len() > 40));
}
