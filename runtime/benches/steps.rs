//! Runtime overhead per agent step (issue 3): scripted runs of 10, 100 and 1,000 turns on the
//! in-memory store, each turn (one agent step) a model turn calling one echo tool plus the tool's
//! result, with a fake model that answers at once. The figure is the runtime's own cost (driver,
//! kernel, journal records, conversation), since the model and the tool do no work.
//!
//! The host holds the store, as it holds a real journal: the records a run leaves are freed when
//! the host drops the store, outside the measured run (the summary also shows the cost with that
//! teardown included).
//!
//! Targets: under 5 us per agent step, and flat (1,000 turns within 1.5x of 10 turns per step).
//! Run: `cargo bench -p terminus-runtime --bench steps`. After criterion's own report, a summary
//! prints the median of repeated runs per agent step at each size and the 1,000 / 10 ratio.
//! glibc's heap thresholds are fixed first (see `HEAP`).

mod workload;

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;
use std::time::{Duration, Instant};
use workload::{execute, runtime, setup};

const SIZES: [u32; 3] = [10, 100, 1000];

fn criterion_group(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("agent_steps");
    for turns in SIZES {
        group.throughput(Throughput::Elements(u64::from(turns)));
        group.bench_with_input(BenchmarkId::from_parameter(turns), &turns, |b, &turns| {
            b.iter_batched(
                || setup(turns),
                // The store goes back to the host: dropped outside the measurement.
                |(run, store)| (execute(&rt, run, turns), store),
                BatchSize::LargeInput,
            );
        });
    }
    group.finish();
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort_unstable();
    xs[xs.len() / 2]
}

/// Medians of repeated runs, per agent step, and the flatness ratio.
fn summary() {
    let rt = runtime();
    let mut per_step = Vec::new();
    eprintln!();
    eprintln!("agent steps (model turn + echo tool call), median of repeated runs:");
    eprintln!(
        "{:>6} {:>6} {:>13} {:>15} {:>19}",
        "turns", "runs", "us/step", "us/transition", "us/step +teardown"
    );
    for turns in SIZES {
        // About 0.5 s of runs per size, at least 31.
        let runs = (60_000 / turns).max(31) as usize;
        for _ in 0..runs.min(50) {
            let (run, store) = setup(turns);
            black_box((execute(&rt, run, turns), store));
        }
        let mut times = Vec::with_capacity(runs);
        let mut with_teardown = Vec::with_capacity(runs);
        for _ in 0..runs {
            let (run, store) = setup(turns);
            let start = Instant::now();
            let report = execute(&rt, run, turns);
            let run_time = start.elapsed();
            drop(store);
            let total = start.elapsed();
            black_box(report);
            times.push(run_time);
            with_teardown.push(total);
        }
        let us = |d: Duration| d.as_secs_f64() * 1e6 / f64::from(turns);
        let step = us(median(times));
        per_step.push(step);
        eprintln!(
            "{turns:>6} {runs:>6} {step:>13.2} {:>15.2} {:>19.2}",
            step / 2.0,
            us(median(with_teardown))
        );
    }
    let ratio = per_step[2] / per_step[0];
    eprintln!(
        "per-step cost at 1000 turns / 10 turns: {ratio:.2} (target <= 1.5); \
         under 5 us per step: {}",
        if per_step.iter().all(|&s| s < 5.0) {
            "yes"
        } else {
            "no"
        }
    );
}

/// glibc's heap thresholds, fixed for the whole bench. By default glibc returns the free top
/// of the heap to the system whenever it passes 128 KiB, so whether a run pays page faults for
/// the memory it touches depends on which allocation the previous run's teardown freed last,
/// and that changes with unrelated code (one edition measured 5.5 us a step at 1,000 turns with
/// 54,741 page faults in the bench, the next 7.5 us with 145,802). With fixed thresholds every
/// run starts on the same heap, and the figures compare editions.
const HEAP: [(&str, &str); 2] = [
    ("MALLOC_TRIM_THRESHOLD_", "268435456"),
    ("MALLOC_MMAP_THRESHOLD_", "33554432"),
];

/// Runs this bench again with [`HEAP`] set (glibc reads it at start), unless it is set: the
/// exit code of that run, or `None` to go on here.
fn with_steady_heap() -> Option<i32> {
    if HEAP.iter().all(|(k, _)| std::env::var_os(k).is_some()) {
        return None;
    }
    let me = std::env::current_exe().ok()?;
    let status = std::process::Command::new(me)
        .args(std::env::args_os().skip(1))
        .envs(HEAP)
        .status()
        .ok()?;
    Some(status.code().unwrap_or(1))
}

fn main() {
    if let Some(code) = with_steady_heap() {
        std::process::exit(code);
    }
    let mut c = Criterion::default().configure_from_args();
    criterion_group(&mut c);
    c.final_summary();
    // `cargo bench` passes `--bench`; `cargo test --benches` does not (criterion's quick test
    // mode), and the summary is skipped there.
    if std::env::args().any(|a| a == "--bench") {
        summary();
    }
}
