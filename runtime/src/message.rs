//! The conversation the runtime keeps for the model, and the verifier's filtered view of it.
//!
//! Every message says who wrote it ([`Author`]). The kernel's own text (nudges, notices, refusals
//! of excluded tools, budget warnings appended to tool results) is marked [`Author::Kernel`] or
//! kept past [`Message::evidence`], so that the verifier's [`Transcript`] can never show it
//! (`docs/design.md`, rule 4).

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use terminus_kernel::ToolCall;

/// The role of a message, as chat APIs name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Instructions from the host.
    System,
    /// The task, and the kernel's guidance (nudges, and notices with no tool result to ride on).
    User,
    /// A model turn.
    Assistant,
    /// The result of one tool call.
    Tool,
}

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Author {
    /// The host: the system prompt and the task.
    Host,
    /// The model.
    Model,
    /// A tool (or the runtime answering for a tool that does not exist).
    Tool,
    /// The kernel: nudges, notices, refusals of excluded tools. Never shown to the verifier.
    Kernel,
}

/// One message of the conversation.
///
/// Each message made has a [`Message::stamp`] of its own, which its clones keep: an adapter can
/// keep what it derived from a message (its encoding) and know it again by the stamp alone.
/// Equality ignores the stamp.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Message {
    /// The chat role.
    pub role: Role,
    /// Who wrote it.
    pub author: Author,
    /// The text the model sees.
    pub content: String,
    /// The tool calls of an assistant message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// The call a tool message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// The tool a tool message comes from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    /// Bytes of `content` that are evidence; anything after them is kernel text (a budget
    /// warning) that the verifier must not see.
    evidence_len: usize,
    /// This message's identity (see [`Message::stamp`]); a read message gets a new one.
    #[serde(skip, default = "new_stamp")]
    stamp: u64,
}

/// The stamps given so far.
static STAMPS: AtomicU64 = AtomicU64::new(1);

fn new_stamp() -> u64 {
    STAMPS.fetch_add(1, Ordering::Relaxed)
}

impl PartialEq for Message {
    fn eq(&self, other: &Message) -> bool {
        self.role == other.role
            && self.author == other.author
            && self.content == other.content
            && self.tool_calls == other.tool_calls
            && self.tool_call_id == other.tool_call_id
            && self.tool_name == other.tool_name
            && self.evidence_len == other.evidence_len
    }
}

impl Message {
    fn new(role: Role, author: Author, content: String) -> Message {
        let evidence_len = content.len();
        Message {
            role,
            author,
            content,
            tool_calls: Vec::new(),
            tool_call_id: None,
            tool_name: None,
            evidence_len,
            stamp: new_stamp(),
        }
    }

    /// This message's identity: unique to each message made (by a constructor, or read from
    /// JSON), kept by its clones, in this process. Two messages with one stamp are one message
    /// and its copy, unless a field was changed in place since: code that changes a message
    /// makes a new one instead (as the context window does when it cuts a tool result).
    pub fn stamp(&self) -> u64 {
        self.stamp
    }

    /// A system message from the host.
    pub fn system(content: impl Into<String>) -> Message {
        Message::new(Role::System, Author::Host, content.into())
    }

    /// A user message from the host (the task).
    pub fn user(content: impl Into<String>) -> Message {
        Message::new(Role::User, Author::Host, content.into())
    }

    /// A user message carrying the kernel's guidance (a nudge or a notice).
    pub fn kernel(content: impl Into<String>) -> Message {
        Message::new(Role::User, Author::Kernel, content.into())
    }

    /// An assistant message (one model turn).
    pub fn assistant(content: impl Into<String>, tool_calls: Vec<ToolCall>) -> Message {
        let mut m = Message::new(Role::Assistant, Author::Model, content.into());
        m.tool_calls = tool_calls;
        m
    }

    /// The result of one tool call, written by the tool. `kernel_suffix` (a budget warning) is
    /// appended to what the model sees but is not evidence for the verifier.
    pub fn tool_result(
        call_id: impl Into<String>,
        tool: impl Into<String>,
        output: String,
        kernel_suffix: Option<&str>,
    ) -> Message {
        let mut m = Message::new(Role::Tool, Author::Tool, output);
        if let Some(suffix) = kernel_suffix {
            append_kernel_text(&mut m.content, suffix);
        }
        m.tool_call_id = Some(call_id.into());
        m.tool_name = Some(tool.into());
        m
    }

    /// This message with the kernel's `text` appended (after a blank line), which the model
    /// sees and the verifier does not: a new message (a new stamp), the evidence as it was.
    pub fn with_kernel_text(&self, text: &str) -> Message {
        let mut m = self.clone();
        append_kernel_text(&mut m.content, text);
        m.stamp = new_stamp();
        m
    }

    /// A tool-result message written by the kernel: the refusal of a call to an excluded tool.
    pub fn tool_refusal(
        call_id: impl Into<String>,
        tool: impl Into<String>,
        text: String,
    ) -> Message {
        let mut m = Message::new(Role::Tool, Author::Kernel, text);
        m.tool_call_id = Some(call_id.into());
        m.tool_name = Some(tool.into());
        m
    }

    /// The part of `content` that is evidence of the work: empty for kernel messages, the
    /// content without any appended budget warning otherwise.
    pub fn evidence(&self) -> &str {
        if self.author == Author::Kernel {
            return "";
        }
        self.content
            .get(..self.evidence_len)
            .unwrap_or(&self.content)
    }
}

/// `text` of the kernel's appended to `content` after a blank line, or alone when `content` is
/// empty (as every host appends it).
/// A checkpoint written for the agent as the conversation holds it: the kernel's note, a blank
/// line, the summary ([`crate::host::messages::summary_text`]).
pub(crate) fn checkpoint_text(note: &str, summary: &str) -> String {
    let mut content = note.to_owned();
    append_kernel_text(&mut content, summary);
    content
}

pub(crate) fn append_kernel_text(content: &mut String, text: &str) {
    if !content.is_empty() {
        content.push_str("\n\n");
    }
    content.push_str(text);
}

/// The verifier's view of the conversation: every message except the kernel's own, and tool
/// results without the kernel's budget warnings (`docs/design.md`, rule 4). It borrows the
/// runtime's conversation; nothing is copied.
#[derive(Debug, Clone, Copy)]
pub struct Transcript<'a> {
    messages: &'a [Message],
}

/// One message as the verifier sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Evidence<'a> {
    /// The chat role.
    pub role: Role,
    /// Who wrote it (never [`Author::Kernel`]).
    pub author: Author,
    /// The text, without kernel text.
    pub content: &'a str,
    /// The tool calls of an assistant message.
    pub tool_calls: &'a [ToolCall],
    /// The tool a tool message comes from.
    pub tool_name: Option<&'a str>,
}

impl<'a> Transcript<'a> {
    /// A view of `messages` that hides the kernel's text.
    pub fn new(messages: &'a [Message]) -> Transcript<'a> {
        Transcript { messages }
    }

    /// The messages the verifier may use as evidence, in order.
    pub fn iter(&self) -> impl Iterator<Item = Evidence<'a>> + 'a {
        self.messages
            .iter()
            .filter(|m| m.author != Author::Kernel)
            .map(|m| Evidence {
                role: m.role,
                author: m.author,
                content: m.evidence(),
                tool_calls: &m.tool_calls,
                tool_name: m.tool_name.as_deref(),
            })
    }

    /// A plain-text rendering for a verifier prompt: one block per message, tool calls with
    /// their arguments, tool results with their tool's name.
    pub fn render(&self) -> String {
        self.render_blocks().concat()
    }

    /// The blocks of [`Transcript::render`], oldest first: one per message (system messages
    /// have none).
    pub fn render_blocks(&self) -> Vec<String> {
        let mut blocks = Vec::new();
        for e in self.iter() {
            let mut out = String::new();
            match e.role {
                Role::System => continue,
                Role::User => out.push_str("[user]\n"),
                Role::Assistant => out.push_str("[assistant]\n"),
                Role::Tool => {
                    out.push_str("[tool result: ");
                    out.push_str(e.tool_name.unwrap_or("?"));
                    out.push_str("]\n");
                }
            }
            if !e.content.is_empty() {
                out.push_str(e.content);
                out.push('\n');
            }
            for call in e.tool_calls {
                out.push_str("(calls ");
                out.push_str(&call.name);
                out.push(' ');
                out.push_str(&call.arguments.to_string());
                out.push_str(")\n");
            }
            out.push('\n');
            blocks.push(out);
        }
        blocks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernels_text_follows_a_blank_line_or_stands_alone_on_an_empty_result() {
        let read = Message::tool_result("c1", "read_file", "fn add".to_owned(), Some("80 %"));
        assert_eq!(read.content, "fn add\n\n80 %");
        assert_eq!(read.evidence(), "fn add");
        let empty = Message::tool_result("c2", "touch", String::new(), Some("80 %"));
        assert_eq!(empty.content, "80 %");
        assert_eq!(empty.evidence(), "");
        let noticed = Message::tool_result("c3", "touch", String::new(), None)
            .with_kernel_text("a loop was seen");
        assert_eq!(noticed.content, "a loop was seen");
        assert_eq!(noticed.evidence(), "");
        let noticed = read.with_kernel_text("a loop was seen");
        assert_eq!(noticed.content, "fn add\n\n80 %\n\na loop was seen");
        assert_eq!(noticed.evidence(), "fn add");
    }
}
