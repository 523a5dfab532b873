//! # terminus-tokenizer
//!
//! Exact token counts for OpenAI model families behind the runtime's
//! [`Tokenizer`] trait: tiktoken's `o200k_base` (GPT-4o, GPT-4.1,
//! GPT-5, o1, o3, o4) and `cl100k_base` (GPT-4, GPT-3.5), chosen by model name, with the
//! runtime's [`Heuristic`] as the fallback for every other model. The BPE tables are compiled
//! in (no download at run time); each is loaded once per process, on first use.
//!
//! ```
//! use terminus_tokenizer::{for_model, Encoding};
//! let t = for_model("gpt-4o-mini");
//! assert_eq!(t.name(), Encoding::O200kBase.name());
//! assert!(t.exact());
//! assert_eq!(for_model("claude-sonnet-4").name(), "heuristic");
//! ```

#![forbid(unsafe_code)]

#[doc(hidden)]
pub mod corpus;

use std::sync::Arc;
use terminus_runtime::{Heuristic, Tokenizer};
use tiktoken_rs::CoreBPE;
use tiktoken_rs::tokenizer::{Tokenizer as Family, get_tokenizer};

/// The encodings this crate counts exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// GPT-4o, GPT-4.1, GPT-5, o1, o3, o4 and later.
    O200kBase,
    /// GPT-4, GPT-3.5-turbo, text-embedding-3.
    Cl100kBase,
}

impl Encoding {
    /// Every encoding.
    pub const ALL: [Encoding; 2] = [Encoding::O200kBase, Encoding::Cl100kBase];

    /// The tiktoken name.
    pub const fn name(self) -> &'static str {
        match self {
            Encoding::O200kBase => "o200k_base",
            Encoding::Cl100kBase => "cl100k_base",
        }
    }

    /// The encoding of that tiktoken name.
    pub fn from_name(name: &str) -> Option<Encoding> {
        Encoding::ALL.into_iter().find(|e| e.name() == name)
    }

    /// The encoding a model name uses, by tiktoken's own table (exact names, then prefixes,
    /// `ft:` fine-tunes by their base). `None`: not an OpenAI model this crate knows.
    pub fn for_model(model: &str) -> Option<Encoding> {
        match get_tokenizer(model)? {
            Family::O200kBase | Family::O200kHarmony => Some(Encoding::O200kBase),
            Family::Cl100kBase => Some(Encoding::Cl100kBase),
            _ => None,
        }
    }

    fn bpe(self) -> &'static CoreBPE {
        match self {
            Encoding::O200kBase => tiktoken_rs::o200k_base_singleton(),
            Encoding::Cl100kBase => tiktoken_rs::cl100k_base_singleton(),
        }
    }
}

/// An exact tokenizer: one of tiktoken's encodings. Special-token text (`<|endoftext|>`) in a
/// message counts as ordinary text, as providers treat it in user content.
#[derive(Clone, Copy)]
pub struct Tiktoken {
    encoding: Encoding,
    bpe: &'static CoreBPE,
}

impl std::fmt::Debug for Tiktoken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Tiktoken").field(&self.encoding).finish()
    }
}

impl Tiktoken {
    /// The tokenizer of `encoding` (loads its table on first use: tens of milliseconds).
    pub fn new(encoding: Encoding) -> Tiktoken {
        Tiktoken {
            encoding,
            bpe: encoding.bpe(),
        }
    }

    /// Its encoding.
    pub fn encoding(&self) -> Encoding {
        self.encoding
    }
}

impl Tokenizer for Tiktoken {
    fn name(&self) -> &str {
        self.encoding.name()
    }

    fn exact(&self) -> bool {
        true
    }

    fn count(&self, text: &str) -> u32 {
        u32::try_from(self.bpe.count_ordinary(text)).unwrap_or(u32::MAX)
    }

    fn prefix(&self, text: &str, max: u32) -> usize {
        let tokens = self.bpe.encode_ordinary(text);
        let max = usize::try_from(max).unwrap_or(usize::MAX);
        if tokens.len() <= max {
            return text.len();
        }
        // The bytes of the first `max` tokens; a token may end inside a character, so step
        // back to the boundary before it.
        let bytes = self
            .bpe
            .decode_bytes(&tokens[..max])
            .map_or(0, |b| b.len())
            .min(text.len());
        (0..=bytes)
            .rev()
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(0)
    }
}

/// The tokenizer for a model name: exact for OpenAI families ([`Encoding::for_model`]), the
/// [`Heuristic`] for any other.
pub fn for_model(model: &str) -> Arc<dyn Tokenizer> {
    match Encoding::for_model(model) {
        Some(e) => Arc::new(Tiktoken::new(e)),
        None => Arc::new(Heuristic),
    }
}

/// The tokenizer a configuration names: `heuristic`, an encoding (`o200k_base`,
/// `cl100k_base`) or a model name (`gpt-4o`). `None`: none of those.
pub fn by_name(name: &str) -> Option<Arc<dyn Tokenizer>> {
    if name == Heuristic.name() {
        return Some(Arc::new(Heuristic));
    }
    Encoding::from_name(name)
        .or_else(|| Encoding::for_model(name))
        .map(|e| Arc::new(Tiktoken::new(e)) as Arc<dyn Tokenizer>)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_names_choose_the_encoding() {
        for (model, encoding) in [
            ("gpt-4o", Some(Encoding::O200kBase)),
            ("gpt-4o-mini-2024-07-18", Some(Encoding::O200kBase)),
            ("gpt-4.1", Some(Encoding::O200kBase)),
            ("gpt-5-mini", Some(Encoding::O200kBase)),
            ("o3-mini", Some(Encoding::O200kBase)),
            ("gpt-4", Some(Encoding::Cl100kBase)),
            ("gpt-4-turbo", Some(Encoding::Cl100kBase)),
            ("gpt-3.5-turbo", Some(Encoding::Cl100kBase)),
            ("ft:gpt-4o-mini:acme::abc", Some(Encoding::O200kBase)),
            ("claude-sonnet-4", None),
            ("llama-3.1-70b", None),
        ] {
            assert_eq!(Encoding::for_model(model), encoding, "{model}");
        }
    }

    #[test]
    fn counts_match_tiktoken_reference_values() {
        // Reference counts from OpenAI's tiktoken (Python) for the same strings.
        let o200k = Tiktoken::new(Encoding::O200kBase);
        let cl100k = Tiktoken::new(Encoding::Cl100kBase);
        assert_eq!(cl100k.count("hello world"), 2);
        assert_eq!(o200k.count("hello world"), 2);
        assert_eq!(cl100k.count("tiktoken is great!"), 6);
        assert_eq!(o200k.count(""), 0);
    }

    #[test]
    fn prefix_counts_at_most_max_and_ends_on_a_character_boundary() {
        let text = "Résumé: 日本語のテキスト and some ASCII, then emoji 🦀🦀🦀 at the end.";
        for e in Encoding::ALL {
            let t = Tiktoken::new(e);
            let total = t.count(text);
            for max in 0..=total + 1 {
                let at = t.prefix(text, max);
                assert!(text.is_char_boundary(at), "{e:?} max {max}");
                assert!(t.count(&text[..at]) <= max + 1, "{e:?} max {max}");
                if max >= total {
                    assert_eq!(at, text.len());
                }
            }
        }
    }

    #[test]
    fn scenario_filler_is_one_token_a_word_in_every_tokenizer() {
        // `filler_tokens: N` in a scenario appends N times " log" (spec/scenarios/README.md).
        let filler = " log".repeat(1_000);
        for e in Encoding::ALL {
            assert_eq!(Tiktoken::new(e).count(&filler), 1_000, "{e:?}");
        }
        assert_eq!(Heuristic.count(&filler), 1_000);
    }

    #[test]
    fn names_resolve() {
        assert_eq!(by_name("heuristic").map(|t| t.exact()), Some(false));
        assert_eq!(by_name("o200k_base").map(|t| t.exact()), Some(true));
        assert_eq!(
            by_name("gpt-4").map(|t| t.name().to_owned()),
            Some("cl100k_base".into())
        );
        assert!(by_name("nonsense").is_none());
    }
}
