//! The [`Tokenizer`] port and the heuristic fallback.
//!
//! Exact tokenizers for OpenAI model families live in the `terminus-tokenizer` adapter (tiktoken's
//! `o200k_base` and `cl100k_base`); the runtime only needs the trait. The heuristic is the
//! fallback for models whose tokenizer is unknown: the usual "four characters a token". Whatever
//! the tokenizer, a turn's reported usage is preferred over it ([`crate::ContextWindow`]).

use crate::message::Message;

/// Counts tokens of text as one model family does.
pub trait Tokenizer: Send + Sync {
    /// The tokenizer's name (`o200k_base`, `cl100k_base`, `heuristic`), for reports.
    fn name(&self) -> &str;

    /// Whether counts are the model's own (false: an estimate).
    fn exact(&self) -> bool;

    /// The number of tokens of `text`.
    fn count(&self, text: &str) -> u32;

    /// The byte length of the longest prefix of `text` that ends on a character boundary and
    /// counts at most `max` tokens.
    fn prefix(&self, text: &str, max: u32) -> usize;
}

/// The fallback for unknown models: one token per four characters, rounded up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Heuristic;

impl Tokenizer for Heuristic {
    fn name(&self) -> &str {
        "heuristic"
    }

    fn exact(&self) -> bool {
        false
    }

    fn count(&self, text: &str) -> u32 {
        let chars = text.chars().count();
        u32::try_from(chars.div_ceil(4)).unwrap_or(u32::MAX)
    }

    fn prefix(&self, text: &str, max: u32) -> usize {
        let chars = usize::try_from(max).unwrap_or(usize::MAX).saturating_mul(4);
        text.char_indices()
            .nth(chars)
            .map_or(text.len(), |(i, _)| i)
    }
}

/// Tokens a chat message costs beyond its text: its role and the separators around it
/// (OpenAI's chat format spends 3 to 4 a message).
pub const MESSAGE_OVERHEAD: u32 = 4;

/// Tokens each tool call of an assistant message costs beyond its name and arguments.
pub const CALL_OVERHEAD: u32 = 4;

/// The tokens one message costs in a request: its text, its tool calls (name and JSON
/// arguments), the id of the call it answers, and the per-message overhead.
pub fn message_tokens(tokenizer: &dyn Tokenizer, message: &Message) -> u32 {
    let mut n = MESSAGE_OVERHEAD.saturating_add(tokenizer.count(&message.content));
    for call in &message.tool_calls {
        n = n
            .saturating_add(CALL_OVERHEAD)
            .saturating_add(tokenizer.count(&call.name))
            .saturating_add(tokenizer.count(&call.arguments.to_string()));
    }
    if let Some(id) = &message.tool_call_id {
        n = n.saturating_add(tokenizer.count(id));
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heuristic_counts_four_characters_a_token_rounding_up() {
        assert_eq!(Heuristic.count(""), 0);
        assert_eq!(Heuristic.count("abcd"), 1);
        assert_eq!(Heuristic.count("abcde"), 2);
        // Characters, not bytes: four 3-byte characters are one token.
        assert_eq!(Heuristic.count("日本語だ"), 1);
    }

    #[test]
    fn heuristic_prefix_ends_on_a_character_boundary() {
        let text = "日本語のテキストです";
        let cut = Heuristic.prefix(text, 1);
        assert_eq!(&text[..cut], "日本語の");
        assert_eq!(Heuristic.prefix("abc", 5), 3);
        assert_eq!(Heuristic.prefix("abcdefgh", 0), 0);
    }
}
