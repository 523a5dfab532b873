//! Parse cost of a streamed reply: 1,000 SSE chunks, text deltas followed by the argument deltas
//! of two parallel tool calls, for each provider, chunk by chunk as the network delivers them.
//! Run: `cargo bench -p terminus-llm --bench stream`. The figure per chunk is the time per
//! iteration divided by 1,000 (criterion prints it as throughput in elements/s too). `chunks`
//! is the per-chunk work alone; `whole_reply` adds the once-per-reply parse of the arguments.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use terminus_llm::sse::SseDecoder;
use terminus_llm::{Provider, Stream};

#[path = "common/streams.rs"]
mod streams;

use streams::{CHUNKS, anthropic_stream, openai_stream};

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("stream_1000_chunks");
    group.throughput(Throughput::Elements(CHUNKS as u64));
    for (name, provider, chunks) in [
        ("openai", Provider::OpenAi, openai_stream()),
        ("anthropic", Provider::Anthropic, anthropic_stream()),
    ] {
        let reply = Stream::parse(provider, chunks.iter().map(Vec::as_slice)).expect("parses");
        assert_eq!(reply.turn.tool_calls.len(), 2);
        // The per-chunk work: decode the events and fold each into the reply being assembled.
        group.bench_function(format!("{name}/chunks"), |b| {
            b.iter(|| {
                let mut decoder = SseDecoder::new();
                let mut stream = Stream::new(provider);
                for chunk in black_box(&chunks) {
                    decoder
                        .feed(chunk, |event| stream.data(event.data))
                        .expect("a valid chunk");
                }
                black_box(stream)
            });
        });
        // The same plus the once-per-reply work: parsing each call's arguments into JSON.
        group.bench_function(format!("{name}/whole_reply"), |b| {
            b.iter(|| {
                black_box(Stream::parse(
                    provider,
                    black_box(&chunks).iter().map(Vec::as_slice),
                ))
            });
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
