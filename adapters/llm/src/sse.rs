//! A server-sent events decoder (the WHATWG `text/event-stream` rules), sans-IO and without
//! per-event allocation: bytes go in as they arrive, in chunks of any size, and each complete
//! event comes out borrowed from buffers that are reused for the whole stream.
//!
//! Lines end with `\n`, `\r\n` or `\r` (a `\r` at the end of one chunk and a `\n` at the start of
//! the next are one line end); `:` starts a comment (`: OPENROUTER PROCESSING`), which is
//! ignored; `data` lines of one event are joined with `\n`; a blank line dispatches the event; an
//! event without any `data` line is not dispatched; `id` and `retry` are ignored (a model reply is
//! never resumed by `Last-Event-ID`). An event that the stream ends in the middle of is dropped,
//! as the standard says: the caller learns from its own terminator (`[DONE]`, `message_stop`)
//! whether the stream was whole.

/// One dispatched event. `event` is empty when the stream gave no `event:` field (the standard's
/// default type, `message`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseEvent<'a> {
    /// The `event:` field.
    pub event: &'a str,
    /// The `data:` lines, joined with `\n`.
    pub data: &'a str,
}

/// The decoder. Feed it with [`SseDecoder::feed`].
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// Bytes of an unfinished line.
    pending: Vec<u8>,
    /// The event being assembled.
    event: String,
    data: String,
    has_data: bool,
    /// The last chunk ended in `\r`: a `\n` that starts the next chunk belongs to that line end.
    skip_lf: bool,
}

impl SseDecoder {
    /// A decoder at the start of a stream.
    pub fn new() -> SseDecoder {
        SseDecoder::default()
    }

    /// Decodes `chunk`, calling `on_event` for every event it completes, in order. `on_event`
    /// returns `Err` to stop decoding; that error is returned and the rest of the chunk is not
    /// decoded.
    pub fn feed<E>(
        &mut self,
        chunk: &[u8],
        mut on_event: impl FnMut(SseEvent<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut rest = chunk;
        if self.skip_lf {
            self.skip_lf = false;
            if let [b'\n', tail @ ..] = rest {
                rest = tail;
            }
        }
        while let Some(end) = memchr::memchr2(b'\n', b'\r', rest) {
            let (line, tail) = rest.split_at(end);
            let lf_after_cr = tail.get(1) == Some(&b'\n');
            if tail[0] == b'\r' && tail.len() == 1 {
                self.skip_lf = true;
            }
            rest = &tail[if tail[0] == b'\r' && lf_after_cr {
                2
            } else {
                1
            }..];
            if self.pending.is_empty() {
                self.line(line, &mut on_event)?;
            } else {
                let mut whole = std::mem::take(&mut self.pending);
                whole.extend_from_slice(line);
                let result = self.line(&whole, &mut on_event);
                whole.clear();
                self.pending = whole;
                result?;
            }
        }
        self.pending.extend_from_slice(rest);
        Ok(())
    }

    fn line<E>(
        &mut self,
        line: &[u8],
        on_event: &mut impl FnMut(SseEvent<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        if line.is_empty() {
            let dispatch = self.has_data;
            self.has_data = false;
            let result = if dispatch {
                on_event(SseEvent {
                    event: &self.event,
                    data: &self.data,
                })
            } else {
                Ok(())
            };
            self.event.clear();
            self.data.clear();
            return result;
        }
        if line[0] == b':' {
            return Ok(());
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &[][..]),
        };
        match field {
            b"data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.has_data = true;
                push_utf8(&mut self.data, value);
            }
            b"event" => {
                self.event.clear();
                push_utf8(&mut self.event, value);
            }
            _ => {}
        }
        Ok(())
    }
}

/// Appends `bytes` as UTF-8, replacing invalid sequences (the standard's decoding).
fn push_utf8(out: &mut String, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(s) => out.push_str(s),
        Err(_) => out.push_str(&String::from_utf8_lossy(bytes)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(chunks: &[&[u8]]) -> Vec<(String, String)> {
        let mut d = SseDecoder::new();
        let mut out = Vec::new();
        for c in chunks {
            d.feed(c, |e| {
                out.push((e.event.to_owned(), e.data.to_owned()));
                Ok::<(), ()>(())
            })
            .expect("never stops");
        }
        out
    }

    #[test]
    fn events_comments_and_multi_line_data() {
        let got =
            decode(&[b": OPENROUTER PROCESSING\n\nevent: ping\ndata: {}\n\ndata: a\ndata: b\n\n"]);
        assert_eq!(
            got,
            [
                ("ping".to_owned(), "{}".to_owned()),
                (String::new(), "a\nb".to_owned())
            ]
        );
    }

    #[test]
    fn every_line_ending_and_a_cr_lf_split_across_chunks() {
        let got = decode(&[b"data: 1\r\n\r\ndata: 2\r", b"\n\r", b"\ndata:3\r\r"]);
        assert_eq!(
            got,
            [
                (String::new(), "1".to_owned()),
                (String::new(), "2".to_owned()),
                (String::new(), "3".to_owned())
            ]
        );
    }

    #[test]
    fn an_event_cut_by_the_end_of_the_stream_is_not_dispatched() {
        assert!(decode(&[b"data: {\"partial\"", b": true}\n"]).is_empty());
        assert!(decode(&[b"event: x\n\n"]).is_empty(), "no data, no event");
    }
}
