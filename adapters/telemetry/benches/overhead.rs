//! What tracing costs the runtime: the runtime bench's workload (`runtime/benches/steps.rs`: a
//! fake model calling an echo tool, 100 agent steps a run, in-memory store) with no subscriber
//! (the baseline) and with the OTLP HTTP/protobuf exporter installed (batched, sending to a sink
//! on 127.0.0.1 that answers 200), runs alternating in one process so both see the same
//! machine. Prints the median per agent step of each and their ratio.
//!
//! Run: `cargo bench -p terminus-telemetry --bench overhead`.

#[path = "../../../runtime/benches/workload/mod.rs"]
mod workload;

use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use std::hint::black_box;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use terminus_telemetry::Telemetry;
use tracing_subscriber::layer::SubscriberExt as _;
use workload::{execute, runtime, setup};

const TURNS: u32 = 100;
const ROUNDS: usize = 41;

/// An OTLP endpoint that reads each request and answers 200 with an empty body; counts the
/// requests and the body bytes it was sent.
fn sink() -> (String, Arc<AtomicU64>, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let addr = listener.local_addr().expect("an address");
    let requests = Arc::new(AtomicU64::new(0));
    let bytes = Arc::new(AtomicU64::new(0));
    let (r, b) = (requests.clone(), bytes.clone());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let (r, b) = (r.clone(), b.clone());
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream);
                loop {
                    let mut length = 0usize;
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        let header = line.trim_end();
                        if header.is_empty() {
                            break;
                        }
                        if let Some((name, value)) = header.split_once(':')
                            && name.eq_ignore_ascii_case("content-length")
                        {
                            length = value.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    r.fetch_add(1, Ordering::Relaxed);
                    b.fetch_add(length as u64, Ordering::Relaxed);
                    let answer = "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\n\
                                  content-length: 0\r\n\r\n";
                    if reader.get_mut().write_all(answer.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (format!("http://{addr}/v1/traces"), requests, bytes)
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort_unstable();
    xs[xs.len() / 2]
}

fn one_run(rt: &tokio::runtime::Runtime) -> Duration {
    let (run, store) = setup(TURNS);
    let start = Instant::now();
    let report = execute(rt, run, TURNS);
    let took = start.elapsed();
    black_box((report, store));
    took
}

fn main() {
    // `cargo test --benches` runs this without `--bench`: one quick round only.
    let rounds = if std::env::args().any(|a| a == "--bench") {
        ROUNDS
    } else {
        3
    };
    let rt = runtime();
    let (endpoint, requests, bytes) = sink();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(endpoint)
        .build()
        .expect("an OTLP exporter");
    let telemetry = Telemetry::with_exporter(exporter);
    let traced = tracing_subscriber::registry().with(telemetry.layer());
    let traced = tracing::Dispatch::new(traced);

    let mut none = Vec::with_capacity(rounds);
    let mut otlp = Vec::with_capacity(rounds);
    // Warm both paths, then alternate so drift on a shared machine hits both alike. The traced
    // run goes first: a callsite first hit with no dispatcher set caches "never interested".
    for i in 0..rounds + 5 {
        let exported = tracing::dispatcher::with_default(&traced, || one_run(&rt));
        let plain = one_run(&rt);
        if i >= 5 {
            none.push(plain);
            otlp.push(exported);
        }
    }
    drop(traced);
    telemetry.shutdown().expect("the spans flush to the sink");
    let us = |d: Duration| d.as_secs_f64() * 1e6 / f64::from(TURNS);
    let (base, traced) = (us(median(none)), us(median(otlp)));
    eprintln!();
    eprintln!(
        "tracing overhead, {TURNS} agent steps a run, median of {rounds} runs each, alternating:"
    );
    eprintln!("  no subscriber          {base:>8.2} us/step");
    eprintln!(
        "  OTLP exporter          {traced:>8.2} us/step   ({:.2}x the baseline, +{:.2} us/step)",
        traced / base,
        traced - base
    );
    eprintln!(
        "  the sink received {} export requests, {} KiB of spans",
        requests.load(Ordering::Relaxed),
        bytes.load(Ordering::Relaxed) / 1024
    );
    assert!(
        requests.load(Ordering::Relaxed) > 0,
        "the OTLP exporter sent nothing to the sink"
    );
}
