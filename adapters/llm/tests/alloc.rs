//! A streamed reply costs no allocation per chunk beyond the text it keeps: the text and the
//! argument buffers grow by doubling, so 1,000 chunks cost a few dozen allocations, not 1,000.

use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use std::alloc::System;
use terminus_llm::sse::SseDecoder;
use terminus_llm::{Provider, Stream};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

#[path = "../benches/common/streams.rs"]
mod streams;

#[test]
fn a_thousand_chunks_allocate_only_for_the_text_they_keep() {
    for (provider, chunks) in [
        (Provider::OpenAi, streams::openai_stream()),
        (Provider::Anthropic, streams::anthropic_stream()),
    ] {
        assert_eq!(chunks.len(), streams::CHUNKS);
        let mut decoder = SseDecoder::new();
        let mut stream = Stream::new(provider);
        let region = Region::new(GLOBAL);
        for chunk in &chunks {
            decoder
                .feed(chunk, |event| stream.data(event.data))
                .expect("a valid chunk");
        }
        let fed = region.change();
        let reply = stream.finish().expect("a whole stream");
        assert_eq!(reply.turn.tool_calls.len(), 2);
        assert!(reply.turn.text.len() > 4_000, "the text was kept");
        eprintln!(
            "{provider:?}: {} allocations and {} reallocations for {} chunks",
            fed.allocations,
            fed.reallocations,
            chunks.len()
        );
        // Buffers that double (text, two argument buffers, the decoder's line and data
        // buffers), two call records with their ids and names, the reply id: about 60 at most.
        assert!(
            fed.allocations + fed.reallocations < 100,
            "{provider:?}: {} allocations and {} reallocations for {} chunks",
            fed.allocations,
            fed.reallocations,
            chunks.len()
        );
    }
}
