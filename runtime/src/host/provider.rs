//! Provider failures onto the kernel's model errors: one table ([`classify`]), used by every host
//! (the HTTP client of `terminus-llm` for error responses and for error events inside a 200
//! stream, and the framework middlewares of the bindings, which pass the status and the text of
//! the error they caught: [`classify_error`]), so that one failure is one class whichever host
//! meets it. The retry decision is not
//! made here: the kernel retries `rate_limited`, `server` and `timeout` with its backoff
//! (honouring the `retry_after_ms` found here) and stops on the others.
//!
//! | what the provider said | kind | retried |
//! |---|---|---|
//! | a context-length error on a 4xx ([`ErrorInfo::is_context_length`]: OpenAI and OpenRouter, Anthropic, llama.cpp, vLLM, SGLang, LiteLLM, Gemini), or llama.cpp's on a 5xx | `context_overflow` | no: the window is pruned, or the run ends `context_exhausted` |
//! | `insufficient_quota` (any status) | `auth` | no: the account must be fixed |
//! | 401, 403 | `auth` | no |
//! | 408 | `timeout` | yes |
//! | 409 | `server` | yes |
//! | 429 | `rate_limited` | yes, after `retry-after-ms` / `Retry-After` (seconds or HTTP date), capped |
//! | 500-599, 529 (overloaded) | `server` | yes |
//! | any other 4xx (400, 404, 413, 422…) | `bad_request` | no |
//! | any other status | `server` | yes |
//! | a connection refused, reset or cut mid-body; a stream that ends before its terminator | `server` | yes |
//! | no answer within `timeout_ms` | `timeout` | yes |
//!
//! An error event inside a stream has no status of its own: its `type` (or, in the Responses
//! API's `error` events and failed responses, which have none, its `code`) stands for one
//! ([`status_of_error_type`]: `overloaded_error` 529, `rate_limit_error` and
//! `rate_limit_exceeded` 429, `api_error` and `server_error` 500, `invalid_request_error`,
//! `invalid_prompt` and `context_length_exceeded` 400…; an unknown one 500), and the table above
//! decides.

use serde::Deserialize;
use terminus_kernel::ModelErrorKind;

/// What an error body says, in either provider's shape: OpenAI's
/// `{"error": {"message", "type", "code"}}` and Anthropic's
/// `{"type": "error", "error": {"type", "message"}}`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorInfo {
    /// `error.type`.
    pub kind: Option<String>,
    /// `error.code` (OpenAI; a string or a number).
    pub code: Option<String>,
    /// `error.message`, or the body itself when it is not JSON.
    pub message: String,
}

#[derive(Deserialize)]
struct Envelope {
    error: Option<Body>,
    message: Option<String>,
}

#[derive(Deserialize)]
struct Body {
    #[serde(rename = "type")]
    kind: Option<serde_json::Value>,
    code: Option<serde_json::Value>,
    message: Option<serde_json::Value>,
}

fn as_text(v: Option<serde_json::Value>) -> Option<String> {
    match v? {
        serde_json::Value::Null => None,
        serde_json::Value::String(s) => Some(s),
        other => Some(other.to_string()),
    }
}

impl ErrorInfo {
    /// Reads an error body leniently: a body that is not one of the two shapes keeps its text
    /// (cut to 500 bytes) as the message.
    pub fn parse(body: &[u8]) -> ErrorInfo {
        match serde_json::from_slice::<Envelope>(body) {
            Ok(Envelope {
                error: Some(e),
                message,
            }) => ErrorInfo {
                kind: as_text(e.kind),
                code: as_text(e.code),
                message: as_text(e.message).or(message).unwrap_or_default(),
            },
            Ok(Envelope {
                error: None,
                message: Some(message),
            }) => ErrorInfo {
                message,
                ..ErrorInfo::default()
            },
            _ => ErrorInfo {
                message: cut(&String::from_utf8_lossy(body), 500),
                ..ErrorInfo::default()
            },
        }
    }

    fn says(&self, needle: &str) -> bool {
        self.kind.as_deref() == Some(needle) || self.code.as_deref() == Some(needle)
    }

    /// Whether the error says the prompt does not fit the model's context, in the wording of
    /// the servers people run (each seen in a real error body; the tests hold them):
    ///
    /// | server | says |
    /// |---|---|
    /// | OpenAI | code `context_length_exceeded`, "This model's maximum context length is ...", and in the Responses API "Your input exceeds the context window of this model." |
    /// | OpenRouter, vLLM | "... maximum context length is N tokens" |
    /// | Anthropic | type `model_context_window_exceeded`, "prompt is too long: ...", "input length and `max_tokens` exceed context limit: ..." |
    /// | llama.cpp `llama-server` | type `exceed_context_size_error` ("request (N tokens) exceeds the available context size"), and "Context size has been exceeded." (a 500) |
    /// | SGLang | "The input (N tokens) is longer than the model's context length (M tokens)." |
    /// | LiteLLM (proxy) | "litellm.ContextWindowExceededError: ..." |
    /// | Gemini's OpenAI-compatible endpoint | "The input token count (N) exceeds the maximum number of tokens allowed (M)." |
    pub fn is_context_length(&self) -> bool {
        const SAYS: [&str; 10] = [
            "prompt is too long",
            "maximum context length",
            "context length exceeded",
            "context_length_exceeded",
            "exceed context limit",
            "exceeds the available context size",
            "longer than the model's context length",
            "contextwindowexceedederror",
            "exceeds the maximum number of tokens allowed",
            "exceeds the context window",
        ];
        let message = self.message.to_ascii_lowercase();
        self.says("context_length_exceeded")
            || self.says("model_context_window_exceeded")
            || SAYS.iter().any(|s| message.contains(s))
            || self.is_llama_cpp_context()
    }

    /// llama.cpp's own over-long prompt, whatever its status.
    fn is_llama_cpp_context(&self) -> bool {
        self.says("exceed_context_size_error")
            || self
                .message
                .eq_ignore_ascii_case("context size has been exceeded.")
    }
}

/// The table: an HTTP status (or the status an error event stands for) and what the body said,
/// to the kernel's error class.
pub fn classify(status: u16, info: &ErrorInfo) -> ModelErrorKind {
    if (400..500).contains(&status) && info.is_context_length() {
        return ModelErrorKind::ContextOverflow;
    }
    // A context-length message on a 5xx is the server's failure, except llama.cpp's, which
    // answers an over-long prompt with a 500 in some releases: the same prompt would fail again.
    if (500..600).contains(&status) && info.is_llama_cpp_context() {
        return ModelErrorKind::ContextOverflow;
    }
    if info.says("insufficient_quota") {
        return ModelErrorKind::Auth;
    }
    match status {
        401 | 403 => ModelErrorKind::Auth,
        408 => ModelErrorKind::Timeout,
        409 => ModelErrorKind::Server,
        429 => ModelErrorKind::RateLimited,
        400..=499 => ModelErrorKind::BadRequest,
        _ => ModelErrorKind::Server,
    }
}

/// The status an error event's `type` stands for (an error inside a 200 stream has none).
pub fn status_of_error_type(kind: Option<&str>) -> u16 {
    match kind.unwrap_or("") {
        "invalid_request_error"
        | "invalid_request"
        | "bad_request"
        | "invalid_prompt"
        | "context_length_exceeded" => 400,
        "authentication_error" | "invalid_api_key" => 401,
        "permission_error" => 403,
        "not_found_error" => 404,
        "timeout_error" => 408,
        "request_too_large" => 413,
        "rate_limit_error" | "rate_limit_exceeded" | "tokens" | "requests" => 429,
        "overloaded_error" => 529,
        _ => 500,
    }
}

/// The kernel's class of a provider failure with HTTP status `status` whose body (or, from a
/// framework that keeps no body, the error's text) is `body`: [`classify`] of what
/// [`ErrorInfo::parse`] reads in it.
pub fn classify_error(status: u16, body: &str) -> ModelErrorKind {
    classify(status, &ErrorInfo::parse(body.as_bytes()))
}

/// `s` cut to at most `max` bytes, at a character boundary, with an ellipsis when cut.
pub fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// The cap the framework adapters put on a provider's delay: the command line's default
/// (`max_retry_after`).
pub const RETRY_AFTER_CAP: std::time::Duration = std::time::Duration::from_secs(60);

/// The delay a response asks for: `retry-after-ms` (OpenAI, milliseconds, rounded up), else
/// `Retry-After` in seconds or as an HTTP date (read against `now`), capped at `cap`. The one
/// reading of these headers: the command line's HTTP client and every framework adapter (the
/// bindings' `retry_after_ms`) call it.
pub fn retry_after_ms(
    retry_after_ms: Option<&str>,
    retry_after: Option<&str>,
    now: std::time::SystemTime,
    cap: std::time::Duration,
) -> Option<u64> {
    let cap_ms = u64::try_from(cap.as_millis()).unwrap_or(u64::MAX);
    let ms = retry_after_ms
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map(|v| v.ceil() as u64)
        .or_else(|| {
            let v = retry_after?.trim();
            if let Ok(secs) = v.parse::<f64>() {
                return (secs.is_finite() && secs >= 0.0).then(|| (secs * 1000.0).ceil() as u64);
            }
            let at = httpdate::parse_http_date(v).ok()?;
            Some(
                at.duration_since(now)
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                    .unwrap_or(0),
            )
        })?;
    Some(ms.min(cap_ms))
}
