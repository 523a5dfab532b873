//! Any byte split of a recorded SSE stream into chunks parses to the same turn: the network may
//! cut a body anywhere (inside a UTF-8 character, between `\r` and `\n`, inside an escape).

use proptest::prelude::*;
use terminus_llm::{Provider, Reply, Stream};

fn recorded(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("the recorded stream")
}

const RECORDED: [(&str, Provider); 3] = [
    ("openai-parallel-tools.sse", Provider::OpenAi),
    ("openrouter-reasoning.sse", Provider::OpenAi),
    ("anthropic-tool-use.sse", Provider::Anthropic),
];

fn parse_split(provider: Provider, body: &[u8], cuts: &[usize]) -> Reply {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
    points.sort_unstable();
    let mut chunks = Vec::new();
    let mut start = 0;
    for p in points {
        chunks.push(&body[start..p]);
        start = p;
    }
    chunks.push(&body[start..]);
    Stream::parse(provider, chunks).expect("a whole stream parses")
}

#[test]
fn each_recording_parses_whole_and_byte_by_byte() {
    for (name, provider) in RECORDED {
        let body = recorded(name);
        let whole = Stream::parse(provider, [&body[..]]).expect("parses");
        assert!(
            !whole.turn.text.is_empty() || !whole.turn.tool_calls.is_empty(),
            "{name}"
        );
        let bytes = Stream::parse(provider, body.chunks(1)).expect("parses");
        assert_eq!(whole, bytes, "{name}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_byte_split_parses_to_the_same_turn(
        which in 0..RECORDED.len(),
        cuts in proptest::collection::vec(any::<usize>(), 0..64),
    ) {
        let (name, provider) = RECORDED[which];
        let body = recorded(name);
        let whole = Stream::parse(provider, [&body[..]]).expect("parses");
        prop_assert_eq!(parse_split(provider, &body, &cuts), whole);
    }

    #[test]
    fn a_stream_cut_anywhere_before_its_end_is_never_an_answer(
        which in 0..RECORDED.len(),
        cut in any::<usize>(),
    ) {
        let (name, provider) = RECORDED[which];
        let body = recorded(name);
        // Cut before the finish event: everything from the finish reason on is lost.
        let finish = if provider == Provider::OpenAi { &b"\"finish_reason\":\"t"[..] } else { &b"event: message_delta"[..] };
        let end = body
            .windows(finish.len())
            .position(|w| w == finish)
            .or_else(|| body.windows(b"\"finish_reason\":\"stop".len()).position(|w| w == b"\"finish_reason\":\"stop"))
            .expect("a finish in the recording");
        let line_start = body[..end].iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        let at = cut % (line_start + 1);
        prop_assert!(Stream::parse(provider, [&body[..at]]).is_err());
    }
}
