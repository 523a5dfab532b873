//! What a final answer is (`docs/design.md`, "What a final answer is"): the replies that are never
//! accepted as a run's answer, whatever the completion gate says.
//!
//! - **An echo** ([`crate::NoOpKind::Echo`]): a reply that repeats the kernel's own words (its
//!   nudges, notices, continuation guidance, the checkpoint prompt) in whole or in large part. A
//!   small model handed "Continue: call that tool now" often answers with that very sentence.
//!   [`Said`] keeps the word 4-grams of every text the kernel sent in the run; a reply is an echo
//!   when a run of at least [`ECHO_RUN`] of its words, or at least half of its words, lie in
//!   4-grams the kernel wrote. A reply that quotes a word or two (or three) of them never is: no
//!   4-gram of it is the kernel's.
//! - **A hand-back** ([`crate::NoOpKind::NonAnswer`], only under `policy.autonomous`): a reply
//!   whose every sentence asks the user for more, apologises for not understanding, tells the
//!   reader to make the next call, repeats the kernel or talks of the run itself ("the run has
//!   stopped"), only acknowledges ("Understood.") or announces ("continue."), reports
//!   nothing ("None", "No progress") or is a courteous closing, with not one sentence of its own;
//!   or that disclaims itself ("I am an AI language model, and I do not have the ability to ..."),
//!   or says the answer is still to come ("the final answer will be provided"). The items of a
//!   list belong to its lead-in: under a sentence that hands back and ends with `:` ("To
//!   proceed, you can use the following tools:") they hand back with it.
//!   Nobody is there to answer in an autonomous run. A reply with one substantive sentence and a
//!   closing ("The sum is 5555. Let me know if you need anything else!") is an answer.
//! - **An imagined tool result** ([`crate::NoOpKind::ImaginedResult`], in every run): a reply
//!   that is only `<tool_response>` blocks, a tool's answer written by the model itself
//!   ([`imagined_result`]).
//!
//! All are pure functions of the text (and of what the kernel said), the same in every host. A
//! provider's refusal arrives with finish `content_filter` (the model adapters map the OpenAI
//! `refusal` field and Anthropic's `refusal` stop reason onto it): a filtered no-op, never an
//! answer.

use crate::AbortReason;
use serde::{Deserialize, Serialize};

/// The word n-gram length of [`Said`]: a run of this many words the kernel wrote is its phrase.
pub const SHINGLE: usize = 4;

/// A run of this many consecutive words of a reply, each inside a 4-gram the kernel wrote, makes
/// the reply an echo whatever surrounds it.
pub const ECHO_RUN: usize = 12;

/// The most 4-grams [`Said`] keeps (4 bytes each): a run's kernel texts are a few nudges and
/// notices, so the cap bounds the snapshot without losing them.
pub const SAID_CAP: usize = 2048;

/// The words of a text: maximal runs of letters, digits and `_`, lowercased. Punctuation,
/// quotes, backticks and markup separate words, so `call \`write_file\`.` and `Call write_file`
/// are the same two words.
pub fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    for c in text.chars() {
        if c.is_alphanumeric() || c == '_' {
            word.extend(c.to_lowercase());
        } else if !word.is_empty() {
            out.push(std::mem::take(&mut word));
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

/// A stable 32-bit hash of one 4-gram (FNV-1a over the words, a separator between them), the
/// same on every platform and release.
fn shingle(words: &[String]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for (i, w) in words.iter().enumerate() {
        if i > 0 {
            h ^= u32::from(b' ');
            h = h.wrapping_mul(0x0100_0193);
        }
        for b in w.bytes() {
            h ^= u32::from(b);
            h = h.wrapping_mul(0x0100_0193);
        }
    }
    h
}

/// The word 4-grams of every text the kernel sent the model in a run, as sorted hashes.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Said(Vec<u32>);

impl Said {
    /// Nothing said yet.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many distinct 4-grams are kept.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Remembers the 4-grams of `text`, a text the kernel sends the model (up to [`SAID_CAP`]).
    pub fn remember(&mut self, text: &str) {
        let words = words(text);
        for gram in words.windows(SHINGLE) {
            let h = shingle(gram);
            if let Err(at) = self.0.binary_search(&h)
                && self.0.len() < SAID_CAP
            {
                self.0.insert(at, h);
            }
        }
    }

    /// Whether `reply` repeats the kernel's words in whole or in large part: a run of at least
    /// [`ECHO_RUN`] consecutive words covered by the kernel's 4-grams, or at least half of its
    /// words (and at least one whole 4-gram).
    pub fn echoed_by(&self, reply: &str) -> bool {
        if self.0.is_empty() {
            return false;
        }
        let words = words(reply);
        if words.len() < SHINGLE {
            return false;
        }
        let mut covered = vec![false; words.len()];
        for (i, gram) in words.windows(SHINGLE).enumerate() {
            if self.0.binary_search(&shingle(gram)).is_ok() {
                covered[i..i + SHINGLE].iter_mut().for_each(|c| *c = true);
            }
        }
        let total = covered.iter().filter(|c| **c).count();
        let mut run = 0usize;
        let mut longest = 0usize;
        for c in &covered {
            run = if *c { run + 1 } else { 0 };
            longest = longest.max(run);
        }
        longest >= ECHO_RUN || (total >= SHINGLE && total * 2 >= words.len())
    }
}

/// What one sentence of a reply does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sentence {
    /// Says something of its own.
    Substantive,
    /// Asks for more, apologises for not understanding, or tells the reader to act.
    HandsBack,
    /// A courteous closing or an offer of more help: says nothing, asks nothing of substance.
    Closing,
}

/// Phrases (in [`words`] form) that apologise for not understanding or say the task lacks
/// information.
const CONFUSED: &[&str] = &[
    "not sure what you",
    "not sure what i",
    "not sure what to",
    "not sure how to proceed",
    "don't understand",
    "do not understand",
    "didn't understand",
    "did not understand",
    "unclear what",
    "not clear what",
    "not clear to me",
    "what you're asking",
    "what you are asking",
    "what you mean",
    "what you would like",
    "what you'd like",
    "what would you like",
    "what do you want",
    "don't have any more information",
    "don't have enough information",
    "do not have enough information",
    "don't have any information",
    "do not have any information",
    "don't have any more details",
    "no more information",
    "need more information",
    "need more context",
    "need more details",
    "more information or context",
    "provide more information",
    "provide more details",
    "provide more context",
    "provide me with more",
    "provide additional",
    "please clarify",
    "could you clarify",
    "can you clarify",
    "please specify",
    "could you specify",
    "can you specify",
    "please provide",
    "not being able to assist",
    "unable to assist",
    "can't assist with",
    "cannot assist with",
    "could you please provide",
    "could you provide",
    "can you provide",
    "how can i help",
    "how can i assist",
    "how may i help",
    "how may i assist",
    // `recording-5-poll-4-no-context`: "I apologize, but I don't have the context to
    // understand what part of the task you are referring to."
    "don't have the context",
    "do not have the context",
    "what part of the task",
    // `recording-6-wait-5-incomplete`: "The task is incomplete and requires further steps or
    // inputs to proceed."
    "further steps or inputs",
    "inputs to proceed",
    "requires further input",
];

/// Openings and phrases that tell the reader to make the next move (in an autonomous run the
/// model is the one who must).
const HAND_BACK: &[&str] = &[
    "to continue",
    "you can call",
    "you could call",
    "you should call",
    "you need to call",
    "you will need to call",
    "you'll need to call",
    "you may call",
    "you can use the",
    "you could use the",
    "you should use the",
    "you can run the",
    "you can invoke",
    "please call",
    "please select",
    "you need to wait",
    "you can proceed",
    "you can continue",
    "continue as you wish",
    "you need to proceed",
    "if you provide",
    "once you provide",
    "when you provide",
    "please choose",
    "you can choose",
    "you can select",
    "best fits your",
    // Telling the reader how to reply (the wait task's recording: "You should not response with
    // the tool response within the XML tags.").
    "you should not respond",
    "you should not response",
    "you should not reply",
];

/// Phrases about the run itself (its stopping, restarting, changing course: the kernel's loop
/// notice retold) rather than the task.
const RUN_TALK: &[&str] = &[
    "the run has stopped",
    "the run stopped",
    "the run stops",
    "the run will stop",
    "the run should stop",
    "the run has been stopped",
    "the run will be restarted",
    "the run will be stopped",
    "stop the run",
    "change course",
    // `recording-5-wait-5-in-a-loop`: "The task is currently in a loop, attempting to write to
    // the same file multiple times in a row. The run should be stopped without completing the
    // task."
    "the run should be stopped",
    "is currently in a loop",
    "the task is in a loop",
    // The continuation guidance retold as the model's plan ("If part of the task is left, I will
    // do it with my tools. If the task is done, I will state its result...": `never`'s first
    // recordings), whatever its wording at the time.
    "if part of the task is left",
    "if the task is done",
];

/// A model's disclaimer of itself ("I am an AI language model, and I do not have the ability to
/// write files"): a reply that says it is never the result of an agent's task, whatever else it
/// says (the recorded run that wrote `sum.txt` and then answered so).
const DISCLAIMER: &[&str] = &[
    "as a language model",
    "i am a language model",
    "i'm a language model",
    "do not have access to any external",
    "don't have access to any external",
    "as an ai",
    "i am an ai",
    "i'm an ai",
    "ai language model",
    "ai assistant, i",
    "do not have the ability to",
    "don't have the ability to",
    "outside of my programming",
];

/// Replies that say the answer is still to come ("After running these steps ... the final
/// answer will be provided"): by their own words not the answer, whatever else they say
/// (`recording-4-wait-2-steps-then-answer-later` of `spec/eval/non-answers`: a plan of the
/// steps, then this).
const DEFERS: &[&str] = &[
    "final answer will be",
    "the answer will be provided",
    "the result will be provided",
    "will be provided in the response",
    "after running these steps",
];

/// Courteous closings, offers of further help, apologies without content, a restatement of the
/// task and an announcement of what the model will do instead of doing it.
const CLOSING: &[&str] = &[
    "apologize for not",
    "apologise for not",
    "sorry for not",
    "i will wait",
    "i will now",
    "i'll now",
    "i will proceed",
    "before proceeding",
    "i am going to",
    "i'm going to",
    "apologize for any",
    "apologise for any",
    "apologies for any",
    "apologize for the confusion",
    "apologise for the confusion",
    "apologies for the confusion",
    "sorry for any",
    "sorry for the confusion",
    "sorry if i",
    "apologize if i",
    "apologise if i",
    "i understand the instructions",
    "i understand your instructions",
    "i understand the task",
    "let me know if",
    "let me know whether",
    "let me know how",
    "please let me know",
    "anything specific you",
    "feel free to",
    "is there anything else",
    "anything else i can",
    "hope this helps",
    "hope that helps",
    "happy to help",
    "glad to help",
    "if you need anything else",
    "if you have any other",
    "if you have any further",
    "if you have any more",
    "if you have any questions",
    "i understand that you",
    "continuing the conversation",
    // `recording-4-wait-1-letting-me-know`: "Thank you for letting me know. I'll do my best to
    // complete the task as requested."
    "for letting me know",
    "do my best",
    // Thanks, for anything ("Thank you for informing me. I will now proceed to fetch the
    // quarterly report...": `recording-7-poll-1-thank-you-for-informing-me`). A
    // sentence of thanks is never the result; a reply with one besides it answers.
    "thank you for",
    "thanks for",
    // `recording-5-wait-1-youre-welcome`: "You're welcome. I'll do my best to complete the task
    // as requested."
    "you're welcome",
    "you are welcome",
];

/// Words that, when a sentence has no other, make it say nothing: an acknowledgement
/// ("Understood.", "Got it."), an apology without content ("I apologize for that."), an
/// announcement or offer without content ("Continue.", "I will continue the task with my
/// tools.", "Ok, I am ready to assist you with the task.") or a
/// give-up that says no more than that ("I apologize, but I cannot continue this task."; one that
/// says why, "I cannot: the report is not ready", is an answer).
const HOLLOW: &[&str] = &[
    "ready",
    "assist",
    "help",
    "tools",
    "but",
    "cannot",
    "can",
    "t",
    "not",
    "unable",
    "to",
    "task",
    "complete",
    "finish",
    "further",
    "with",
    "continue",
    "continuing",
    "proceed",
    "proceeding",
    "let",
    "s",
    "go",
    "ahead",
    "will",
    "ll",
    "now",
    "understood",
    "ok",
    "okay",
    "alright",
    "noted",
    "sure",
    "got",
    "it",
    "i",
    "m",
    "am",
    "understand",
    "thank",
    "thanks",
    "you",
    "sorry",
    "apologize",
    "apologise",
    "apologies",
    "my",
    "for",
    "that",
    "this",
    "about",
    "the",
    "any",
    "confusion",
    "mistake",
    "oversight",
    "inconvenience",
    "again",
    "oh",
];

/// Whole sentences that report nothing: the model naming the state of the run ("No progress",
/// "No tool call") or an empty value ("None") in place of the result. A task whose answer is
/// "none" is answered by saying what there is none of ("No test failed.").
const NULL_REPLY: &[&str] = &[
    "none",
    "null",
    "nil",
    "nothing",
    "n a",
    "no progress",
    "no tool call",
    "no tool calls",
    "no content",
    "no answer",
    "no result",
    "no response",
];

/// Whether the words name one of the run's own ways of stopping by its identifier
/// (`no_progress`, `tool_failures`, ...): a sentence about how the run stops, learnt from the
/// kernel's notices, not about the task. The identifiers that are also policy fields
/// (`max_steps`, `token_budget`, ...) are left out: a task may be about configuring them.
fn names_a_stop(words: &[String]) -> bool {
    AbortReason::ALL
        .iter()
        .filter(|r| {
            !matches!(
                r,
                AbortReason::MaxSteps
                    | AbortReason::MaxModelCalls
                    | AbortReason::TokenBudget
                    | AbortReason::ToolCallBudget
            )
        })
        .map(|r| r.as_str())
        .filter(|id| id.contains('_'))
        .any(|id| words.iter().any(|w| w == id))
}

fn contains(hay: &[String], phrase: &str) -> bool {
    let needle = words(phrase);
    !needle.is_empty()
        && hay
            .windows(needle.len())
            .any(|w| w.iter().zip(&needle).all(|(a, b)| a == b))
}

fn sentence(text: &str, said: &Said) -> Option<Sentence> {
    let w = words(text);
    if w.is_empty() {
        return None;
    }
    let any = |list: &[&str]| list.iter().any(|p| contains(&w, p));
    // A number is content: "I apologize for any confusion; the sum is 5555." answers.
    let numbers = w.iter().any(|w| w.chars().any(|c| c.is_ascii_digit()));
    let hollow = w.iter().all(|w| HOLLOW.contains(&w.as_str()));
    // Written as an identifier too: "no_tool_call" says what "no tool call" says.
    let spaced = if text.contains('_') {
        words(&text.replace('_', " "))
    } else {
        Vec::new()
    };
    let null = NULL_REPLY
        .iter()
        .any(|p| words(p) == w || words(p) == spaced);
    let about_the_run = any(RUN_TALK) || names_a_stop(&w);
    Some(
        if any(CONFUSED) || any(HAND_BACK) || about_the_run || said.echoed_by(text) {
            Sentence::HandsBack
        } else if hollow || null || (any(CLOSING) && !numbers) {
            Sentence::Closing
        } else {
            Sentence::Substantive
        },
    )
}

/// The sentences of a text: split after `.`, `!` or `?` followed by white space (so `units.txt`
/// and `3.5` stay whole), and at line breaks.
fn sentences(text: &str) -> impl Iterator<Item = &str> {
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    std::iter::from_fn(move || {
        while let Some((i, c)) = chars.next() {
            let next = chars.peek().map(|&(_, n)| n);
            let end =
                c == '\n' || (matches!(c, '.' | '!' | '?') && next.is_none_or(char::is_whitespace));
            if end {
                let part = &text[start..i + c.len_utf8()];
                start = i + c.len_utf8();
                return Some(part);
            }
        }
        (start < text.len()).then(|| {
            let part = &text[start..];
            start = text.len();
            part
        })
    })
}

/// The tag of a tool's answer in Hermes/Qwen chat templates.
const RESULT_TAG: &str = "<tool_response>";
/// Its end.
const RESULT_END: &str = "</tool_response>";

/// Whether `reply` is only a tool's result that the model wrote itself: one or more
/// `<tool_response>` blocks (the tag the Hermes/Qwen chat templates give a tool's answer, the last
/// one possibly unclosed) and nothing else but white space. A small model on a polling task
/// answered `<tool_response>not ready, try again</tool_response>` after its poll, and that was
/// once taken for its final answer. A call written before such a block is a written call
/// ([`crate::textcall::find`]), and a reply with words of its own around a block is judged by
/// those words.
pub fn imagined_result(reply: &str) -> bool {
    let mut rest = reply.trim();
    if !rest.starts_with(RESULT_TAG) {
        return false;
    }
    while let Some(after) = rest.strip_prefix(RESULT_TAG) {
        match after.find(RESULT_END) {
            Some(end) => rest = after[end + RESULT_END.len()..].trim_start(),
            None => return true,
        }
    }
    rest.is_empty()
}

/// Whether `text` is only courtesy: it has sentences, and every one is a courteous closing, an
/// acknowledgement or an apology without content ("Let me know if you need anything else!"). A
/// written tool call followed by such a line is still the call ([`crate::textcall::find`]).
pub fn only_courtesy(text: &str) -> bool {
    let none = Said::default();
    let mut any = false;
    for part in sentences(text) {
        match sentence(part, &none) {
            Some(Sentence::Closing) => any = true,
            Some(_) => return false,
            None => {}
        }
    }
    any
}

/// Whether `reply` only hands the task back: it has sentences, and every one asks for more,
/// apologises for not understanding, tells the reader to act, repeats what the kernel said
/// (`said`), talks of the run itself ("the run has stopped", `no_progress`), acknowledges,
/// reports nothing ("None", "No progress") or closes courteously (an apology without content is
/// a closing; a sentence with a number never is); or it disclaims itself as an AI that cannot
/// act. A reply with a code block is never one (it carries work).
pub fn hands_back(reply: &str, said: &Said) -> bool {
    if reply.contains("```") {
        return false;
    }
    let all = words(reply);
    if DISCLAIMER.iter().chain(DEFERS).any(|p| contains(&all, p)) {
        return true;
    }
    let mut handed = false;
    // Whether the lines before are a list whose lead-in hands back ("To proceed, you can use
    // the following tools:"): its items are what the reader is told to use, so they hand back
    // with it (`recording-8-poll-1-tools-to-use`).
    let mut handed_list = false;
    for line in reply.lines() {
        if handed_list && list_item(line) {
            handed = true;
            continue;
        }
        let mut last = None;
        for part in sentences(line) {
            let kind = sentence(part, said);
            match kind {
                Some(Sentence::Substantive) => return false,
                Some(Sentence::HandsBack | Sentence::Closing) => handed = true,
                None => {}
            }
            if kind.is_some() {
                last = Some((part, kind));
            }
        }
        handed_list = matches!(last, Some((part, Some(Sentence::HandsBack))) if part.trim_end().ends_with(':'));
    }
    handed
}

/// Whether `line` is an item of a list: `1.`, `2)`, `-`, `*` or `•` then a space.
fn list_item(line: &str) -> bool {
    let t = line.trim_start();
    let digits = t.chars().take_while(char::is_ascii_digit).count();
    let rest = &t[digits..];
    if digits > 0 {
        return rest.starts_with(". ") || rest.starts_with(") ");
    }
    ["- ", "* ", "• "].iter().any(|b| t.starts_with(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's continuation guidance and its text-call nudge, as the recorded runs got them.
    const GUIDANCE: &str = "Your last reply had no content and no tool call.\nStill required \
        before the task can finish: call `write_file` (not yet run successfully).\nContinue: call \
        that tool now; reply with your final answer only when that is done.";

    fn said(texts: &[&str]) -> Said {
        let mut s = Said::default();
        for t in texts {
            s.remember(t);
        }
        s
    }

    #[test]
    fn a_tool_result_the_model_wrote_itself_is_no_answer() {
        // As the eval's `poll` task received it (kernel trial 1, at a85580f).
        assert!(imagined_result(
            "<tool_response>not ready, try again</tool_response>"
        ));
        assert!(imagined_result(
            "\n<tool_response>\nnot ready\n</tool_response>\n<tool_response>\nnot ready"
        ));
        assert!(imagined_result("<tool_response>"));
        // Words of its own: judged by them.
        assert!(!imagined_result(
            "<tool_response>4217 units</tool_response>\nThe report says 4217 units were shipped."
        ));
        assert!(!imagined_result(
            "The tool said: <tool_response>4217</tool_response>"
        ));
        assert!(!imagined_result("4217 units were shipped."));
        assert!(!imagined_result(""));
    }

    #[test]
    fn the_recorded_paraphrase_of_the_guidance_is_an_echo() {
        let s = said(&[GUIDANCE]);
        assert!(s.echoed_by(
            "To continue, call the `write_file` tool now; reply with your final answer only when \
             that is done."
        ));
        assert!(s.echoed_by(GUIDANCE));
        assert!(s.echoed_by(&format!(
            "Sure! Here is what I will do.\n\n{GUIDANCE}\n\nThanks."
        )));
    }

    #[test]
    fn an_answer_quoting_a_few_words_is_not_an_echo() {
        let s = said(&[GUIDANCE]);
        assert!(!s.echoed_by("The plan is written to plan.md: write_file succeeded."));
        assert!(!s.echoed_by("Done. The final answer is 51."));
        assert!(!s.echoed_by("51"));
        assert!(!Said::default().echoed_by(GUIDANCE));
    }

    #[test]
    fn words_ignore_punctuation_and_case() {
        assert_eq!(
            words("Call `write_file`, NOW!"),
            ["call", "write_file", "now"]
        );
        assert_eq!(words("don’t Ünïcode"), ["don", "t", "ünïcode"]);
    }

    #[test]
    fn the_recorded_hand_backs_are_refused_and_answers_are_not() {
        for reply in [
            "I'm sorry, but I'm not sure what you're asking. Could you please provide more \
             information or context?",
            "I'm sorry, but I don't have any more information to work with. Could you please \
             provide me with more details or instructions on what you would like me to do?",
            "To continue, you can call the `write_file` function again with the same arguments \
             to write the number of units shipped to the `units.txt` file.",
            "How can I help you today?",
            "Let me know if you need anything else!",
            "I am an AI language model, and I do not have the ability to write files or perform \
             actions outside of my programming environment. Therefore, I cannot write the sum to \
             sum.txt, as I do not have permission to do so.",
            "I apologize for any inconvenience caused. If you have any other questions or need \
             help with a different task, please let me know.",
            "I understand the instructions. If you have any other questions, feel free to ask.",
            "I understand the task is to fetch the quarterly report, write the number of units \
             shipped to a file, and then continue with the task. The quarterly report is not \
             ready yet, but I will wait for it before proceeding.",
            "I apologize for not being able to assist with that. If you have any other \
             questions or need help with something else, please feel free to ask!",
            "I'm sorry if I didn't provide an appropriate response. Please provide the task you \
             want me to complete.",
        ] {
            assert!(hands_back(reply, &Said::default()), "{reply}");
        }
        for reply in [
            "51. Let me know if you need anything else!",
            "The sum is 5555; I wrote it to sum.txt.",
            "I could not write answer.txt: permission was denied.",
            "",
            "The notes say the cache needs more information about expiry.",
        ] {
            assert!(!hands_back(reply, &Said::default()), "{reply}");
        }
    }

    /// `recording-8-poll-1-tools-to-use`: a list of the tools to use, introduced by a sentence
    /// that hands back, is the hand-back's; a list under a lead-in of the model's own answers.
    #[test]
    fn a_list_of_what_to_use_under_a_hand_back_hands_back() {
        let recorded = "To proceed, you can use the following tools:\n1. `fetch_report` to \
            retrieve the quarterly report. This function does not provide a specific time limit \
            for the report to be ready, so you may need to wait for a few minutes or hours.\n2. \
            `write_file` to create a new file or overwrite an existing file with new content. \
            This function requires the path and content of the file to be written, so you will \
            need to specify the path to the `units.txt` file and the content you want to write.\n\
            Once you have fetched the quarterly report and written the number of units shipped \
            to `units.txt`, you can proceed with the rest of the task.";
        assert!(hands_back(recorded, &Said::default()));
        assert!(hands_back(
            "You can use the following tools:\n- `fetch_report`\n* `write_file`",
            &Said::default()
        ));
        for reply in [
            "The report is in:\n1. 4217 units shipped.\n2. I wrote 4217 to units.txt.",
            "You can use the following tools:\n1. `fetch_report`\nThe report says 4217 units.",
            "Steps taken:\n- fetched the report\n- wrote units.txt",
        ] {
            assert!(!hands_back(reply, &Said::default()), "{reply}");
        }
        assert!(list_item("  12) twelve") && list_item("- a") && list_item("• b"));
        assert!(!list_item("1.5 units") && !list_item("-1 degrees") && !list_item("2024."));
    }

    /// The replies the kernel trials of the eval's second recording still ended `complete` on.
    #[test]
    fn the_second_recordings_non_answers_are_refused() {
        let s = said(&[
            "Your last reply had no content and no tool call.\nContinue: if part of the task is \
             left, do it with your tools; if the task is done, reply with no tool call and state \
             its result, the answer the task asked for, in your own words.",
        ]);
        for reply in [
            "Understood. No tool call.",
            "I understand that you are not interested in continuing the conversation. If you \
             have any other questions or tasks, please let me know.",
            "Please select the tool that best fits your requirements.",
            "No progress",
            "None",
            "Your last reply had no content and no tool call. Please provide a task to be \
             completed using the tools provided.",
            "I apologize for that. Please provide the task you want me to complete.",
            // The third recordings: a word of the guidance; the kernel's loop notice, paraphrased.
            "continue.",
            "Let's proceed.",
            "I apologize, but I cannot continue this task.",
            // The fourth recordings.
            "ok, I am ready to assist you with the task.",
            "I will continue the task with my tools.",
            "I am sorry for the confusion. I can continue with the task if you provide the \
             remaining steps or details.",
            "I understand the task is to fetch the quarterly report, write the number of units \
             shipped to a file, and then continue with the task. The report is not ready yet, so \
             you need to wait. Once it is ready, you can proceed with the write file step.",
            "The run has stopped because the same sequence of calls with the same results has \
             been repeated 3 times in a row. The run will be restarted to change course.",
            "To address the repeated calls and ensure the sequence is followed correctly, the run \
             should stop with no_progress.",
            // The wait task's recordings: the guidance's words as an identifier, and alone.
            "no_tool_call",
            "no tool call",
            "You should not response with the tool response within the XML tags.",
            "Okay, I'm ready to continue. If there's anything specific you'd like me to help \
             with, please let me know.",
            "You can continue as you wish.",
            // The wait and poll tasks' recordings of `spec/eval/non-answers/recording-4-*` to
            // `recording-7-*`, each accepted as a kernel trial's answer
            // under the reworded guidance.
            "Thank you for letting me know. I'll do my best to complete the task as requested.",
            "The task requires fetching the quarterly report and writing the number of units \
             shipped to a file. The steps are as follows:\n\n1. Fetch the quarterly report using \
             the `fetch_report` function.\n2. Write the number of units shipped to a file using \
             the `write_file` function.\n\nAfter running these steps, the run will stop with no \
             progress, and the final answer will be provided in the response.",
            "As a language model, I am programmed to answer questions and provide information. \
             However, I do not have access to any external information or resources, so I cannot \
             fetch the quarterly report or write to a file.",
            // `recording-5-*` to `recording-7-*`, under the answer rules above.
            "You're welcome. I'll do my best to complete the task as requested.",
            "The task is currently in a loop, attempting to write to the same file multiple times \
             in a row. The run should be stopped without completing the task.",
            "I apologize, but I don't have the context to understand what part of the task you \
             are referring to. Can you please provide more details or instructions so I can \
             assist you better?",
            "The task is incomplete and requires further steps or inputs to proceed.",
            "If part of the task is left, I will do it with my tools. If the task is done, I will \
             state its result and the answer to the task asked for.",
            "Thank you for informing me. I will now proceed to fetch the quarterly report using \
             the `fetch_report` function and then write the number of units shipped to \
             `units.txt` using the `write_file` function.",
        ] {
            assert!(hands_back(reply, &s), "{reply}");
        }
        for reply in [
            "I apologize for any confusion; the sum is 5555.",
            "I'm sorry, but the report is not ready yet, so units.txt was not written.",
            "No test failed.",
            "Understood: the report has 4217 units shipped.",
            "The plan for the TODO items has been written to plan.md.",
            "Yes.",
            "Done. I wrote 51 to answer.txt.",
            "The sum is 5555.\nRun stopped with no_progress. Change course.",
            "I set max_steps to 40 in the policy.",
            "I will now continue with 4217 units.",
            "The test run stopped at test_upload_retry; the other 41 passed.",
            "I cannot write units.txt: the report is not ready.",
            "This task is complete.",
            "The report is ready: 4217 units shipped.",
            "Total units shipped: 100",
            "Thank you: the report says 4217 units were shipped, and units.txt holds 4217.",
            "The final answer: 4217 units, written to units.txt.",
            "I did my best with the flaky test: it passes 9 runs in 10 now.",
            "The quarterly report shows 4217 units shipped.",
            "The final answer is: The quarterly report contains 4217 units shipped.",
            "The retry was in a loop on the same file; I fixed its exit condition in upload.py.",
            "The file you are referring to, notes-5.md, does not exist: there are four notes.",
            "The task is incomplete: the report never became ready, so units.txt is not written.",
            "Thanks for waiting. The summary of the four notes is in summary.md.",
        ] {
            assert!(!hands_back(reply, &s), "{reply}");
        }
        // A bare claim answers as "This task is complete." does; it was an echo only while the
        // guidance said "if the task is done" (the 4-gram `the task is done`).
        let now = said(&[
            "Your last reply had no content and no tool call.\nContinue: if part of the task is \
             left, do it with your tools; if nothing is left to do, write your final answer now: \
             the result the task asked for, in your own words.",
        ]);
        assert!(!hands_back("The task is done.", &now));
        assert!(hands_back("The task is done.", &s));
    }
}
