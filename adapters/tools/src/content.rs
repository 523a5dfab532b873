//! What an MCP tool result becomes for the model: its text content, its structured content, and
//! a one-line summary of each image, audio clip or binary resource (type and size, never the
//! base64 itself, which would only fill the context window).

use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};
use serde_json::Value;
use terminus_kernel::{ToolErrorKind, ToolOutcome};

/// The outcome of a call result: `isError: true` is a tool error carrying the server's text,
/// of the kind its text names (see `error_result_kind`); anything else is a success whose text
/// is [`text_of`].
pub fn render(result: &CallToolResult) -> ToolOutcome {
    let text = text_of(result);
    if result.is_error == Some(true) {
        ToolOutcome::Error {
            kind: error_result_kind(&text),
            message: text,
        }
    } else {
        ToolOutcome::ok(Value::String(text))
    }
}

/// The kind of an error result (`isError: true`), from the server's own words: servers send
/// their argument and access errors as results, not as protocol errors (the reference
/// filesystem server: `MCP error -32602: Input validation error: Invalid arguments for tool
/// ...`, `Access denied - path outside allowed directories: ...`). Arguments the model can fix
/// are `invalid_arguments` (a path outside the server's allowed directories among them: the
/// message names the allowed ones, and the next call can use one), an access refused is
/// `permission_denied` (unrecoverable: by default the tool is excluded); anything else `failed`
/// (a missing file is the call's target, not the tool: it stays `failed`, which the model can
/// correct, rather than `not_found`, which would exclude the tool).
pub(crate) fn error_result_kind(text: &str) -> ToolErrorKind {
    let lower = text.to_ascii_lowercase();
    let says = |words: &[&str]| words.iter().any(|w| lower.contains(w));
    if says(&[
        "mcp error -32602",
        "invalid arguments",
        "input validation error",
        "invalid params",
        "outside allowed directories",
    ]) {
        ToolErrorKind::InvalidArguments
    } else if says(&["access denied", "permission denied", "eacces", "eperm"]) {
        ToolErrorKind::PermissionDenied
    } else {
        ToolErrorKind::Failed
    }
}

/// The text of a result: each content block on its own line, then the structured content as
/// JSON unless the text already holds every value of it.
pub fn text_of(result: &CallToolResult) -> String {
    let parts: Vec<String> = result.content.iter().map(block).collect();
    let mut text = parts.join("\n");
    if let Some(structured) = &result.structured_content
        && !says_all(&text, structured)
    {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str("structured content: ");
        text.push_str(&structured.to_string());
    }
    text
}

/// Whether every value in `structured` already appears in `text` (servers usually send the
/// structured content again as text, and a file's contents twice would only cost tokens).
fn says_all(text: &str, structured: &Value) -> bool {
    match structured {
        Value::Null => true,
        Value::String(s) => text.contains(s.as_str()),
        Value::Bool(_) | Value::Number(_) => text.contains(&structured.to_string()),
        Value::Array(items) => items.iter().all(|v| says_all(text, v)),
        Value::Object(map) => map.values().all(|v| says_all(text, v)),
    }
}

fn block(content: &ContentBlock) -> String {
    match content {
        ContentBlock::Text(t) => t.text.clone(),
        ContentBlock::Image(i) => {
            format!("[image {}, {} bytes]", i.mime_type, decoded_len(&i.data))
        }
        ContentBlock::Audio(a) => {
            format!("[audio {}, {} bytes]", a.mime_type, decoded_len(&a.data))
        }
        ContentBlock::Resource(r) => match &r.resource {
            ResourceContents::TextResourceContents { uri, text, .. } => {
                format!("[resource {uri}]\n{text}")
            }
            ResourceContents::BlobResourceContents {
                uri,
                blob,
                mime_type,
                ..
            } => format!(
                "[resource {uri}, {}, {} bytes]",
                mime_type.as_deref().unwrap_or("binary"),
                decoded_len(blob)
            ),
            _ => "[resource of a kind this client does not know]".into(),
        },
        ContentBlock::ResourceLink(link) => format!(
            "[resource link {} ({}{})]",
            link.uri,
            link.name,
            link.mime_type
                .as_deref()
                .map(|m| format!(", {m}"))
                .unwrap_or_default()
        ),
        _ => "[content of a kind this client does not know]".into(),
    }
}

/// The size of base64 data once decoded.
fn decoded_len(base64: &str) -> usize {
    let trimmed = base64.trim_end_matches('=');
    trimmed.len() * 3 / 4
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_filesystem_servers_error_results_have_their_kinds() {
        // The reference filesystem server's words (2026.8.31), as `terminus tools call` shows.
        let cases = [
            (
                "MCP error -32602: Input validation error: Invalid arguments for tool write_file: Invalid input: expected string, received undefined at content",
                ToolErrorKind::InvalidArguments,
            ),
            (
                "Access denied - path outside allowed directories: /etc/passwd not in /tmp/q",
                ToolErrorKind::InvalidArguments,
            ),
            (
                "EACCES: permission denied, open '/tmp/q/locked'",
                ToolErrorKind::PermissionDenied,
            ),
            (
                "ENOENT: no such file or directory, open '/tmp/q/nope.txt'",
                ToolErrorKind::Failed,
            ),
            ("something broke", ToolErrorKind::Failed),
        ];
        for (text, kind) in cases {
            assert_eq!(error_result_kind(text), kind, "{text}");
        }
    }

    fn result(
        content: Vec<ContentBlock>,
        structured: Option<Value>,
        is_error: bool,
    ) -> CallToolResult {
        let mut r = CallToolResult::success(content);
        r.structured_content = structured;
        r.is_error = Some(is_error);
        r
    }

    #[test]
    fn structured_content_is_added_only_when_the_text_lacks_it() {
        let same = result(
            vec![ContentBlock::text("{\"t\": 21, \"sky\": \"clear\"}")],
            Some(json!({ "t": 21, "sky": "clear" })),
            false,
        );
        assert_eq!(text_of(&same), "{\"t\": 21, \"sky\": \"clear\"}");
        let more = result(
            vec![ContentBlock::text("done")],
            Some(json!({ "rows": 3 })),
            false,
        );
        assert_eq!(text_of(&more), "done\nstructured content: {\"rows\":3}");
        let only = result(vec![], Some(json!({ "rows": 3 })), false);
        assert_eq!(text_of(&only), "structured content: {\"rows\":3}");
    }

    #[test]
    fn is_error_is_a_tool_error_with_the_servers_text() {
        let r = result(vec![ContentBlock::text("disk full")], None, true);
        assert_eq!(
            render(&r),
            ToolOutcome::Error {
                kind: ToolErrorKind::Failed,
                message: "disk full".into()
            }
        );
        let r = result(vec![ContentBlock::text("Access denied")], None, true);
        assert_eq!(
            render(&r),
            ToolOutcome::Error {
                kind: ToolErrorKind::PermissionDenied,
                message: "Access denied".into()
            }
        );
    }

    #[test]
    fn binary_content_is_summarised_with_its_type_and_size() {
        let png = ContentBlock::image(
            "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==",
            "image/png",
        );
        let r = result(vec![png], None, false);
        assert_eq!(text_of(&r), "[image image/png, 70 bytes]");
    }
}
