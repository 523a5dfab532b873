//! The HTTP client's failures as the kernel's model errors: an error response or an error event
//! inside a 200 stream goes through the table every host shares
//! ([`terminus_runtime::host::provider`], re-exported here: [`classify`], [`ErrorInfo`],
//! [`status_of_error_type`]); a transport failure (no status) is classed here; the delay a
//! response asks for is read here.

use std::time::Duration;
use terminus_kernel::ModelErrorKind;
use terminus_runtime::ModelFailure;
use terminus_runtime::host::provider::cut;
pub use terminus_runtime::host::provider::{ErrorInfo, classify, status_of_error_type};

/// A failure of `kind` from an HTTP error response.
pub fn http_failure(status: u16, retry_after_ms: Option<u64>, body: &[u8]) -> ModelFailure {
    let info = ErrorInfo::parse(body);
    let kind = classify(status, &info);
    let mut failure = ModelFailure::new(kind, describe(&format!("HTTP {status}"), &info));
    if kind == ModelErrorKind::RateLimited || kind == ModelErrorKind::Server {
        failure.retry_after_ms = retry_after_ms;
    }
    failure
}

/// A failure from an error event inside a stream (OpenAI's `{"error": ...}` chunk, Anthropic's
/// `event: error`).
pub fn event_failure(info: &ErrorInfo) -> ModelFailure {
    // The Responses API's error events and failed responses have a `code` and no `type`.
    let status = status_of_error_type(info.kind.as_deref().or(info.code.as_deref()));
    ModelFailure::new(
        classify(status, info),
        describe("error event in the stream", info),
    )
}

fn describe(what: &str, info: &ErrorInfo) -> String {
    let mut out = String::from(what);
    if let Some(kind) = &info.kind {
        out.push_str(" (");
        out.push_str(kind);
        if let Some(code) = info.code.as_ref().filter(|c| *c != kind) {
            out.push_str(", ");
            out.push_str(code);
        }
        out.push(')');
    } else if let Some(code) = &info.code {
        out.push_str(" (");
        out.push_str(code);
        out.push(')');
    }
    if !info.message.is_empty() {
        out.push_str(": ");
        out.push_str(&cut(&info.message, 500));
    }
    out
}

/// The delay a response asks for (the host core's one parser, which every binding calls too).
pub use terminus_runtime::host::provider::retry_after_ms;

/// A transport failure (no HTTP status): a timeout, a refused or reset connection, a body cut
/// mid-way.
pub fn transport_failure(error: &reqwest::Error, timeout: Duration) -> ModelFailure {
    if error.is_timeout() {
        return ModelFailure::new(
            ModelErrorKind::Timeout,
            format!("no complete answer within {} ms", timeout.as_millis()),
        );
    }
    let what = if error.is_connect() {
        "cannot connect to the model server"
    } else if error.is_body() || error.is_decode() {
        "the connection dropped while the answer was being read"
    } else {
        "the request failed"
    };
    ModelFailure::new(ModelErrorKind::Server, format!("{what}: {}", chain(error)))
}

/// An error with its sources, one after the other (reqwest's own message is often just "error
/// sending request").
fn chain(error: &dyn std::error::Error) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        out.push_str(": ");
        out.push_str(&e.to_string());
        source = e.source();
    }
    out
}

#[cfg(test)]
mod tests {
    //! One test per row of the table, with bodies in the providers' documented shapes.
    use super::*;
    use ModelErrorKind::*;
    use std::time::SystemTime;

    fn kind(status: u16, body: &str) -> ModelErrorKind {
        http_failure(status, None, body.as_bytes()).kind
    }

    const OPENAI_CONTEXT: &str = r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130532 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;
    const ANTHROPIC_TOO_LONG: &str = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}"#;
    const OPENAI_QUOTA: &str = r#"{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#;
    const OPENAI_AUTH: &str = r#"{"error":{"message":"Incorrect API key provided: sk-proj-****. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#;
    const ANTHROPIC_AUTH: &str =
        r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#;
    const ANTHROPIC_OVERLOADED: &str =
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    const OPENAI_RATE: &str = r#"{"error":{"message":"Rate limit reached for gpt-4o-mini in organization org-x on requests per min (RPM): Limit 3, Used 3, Requested 1.","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#;
    const OPENAI_BAD: &str = r#"{"error":{"message":"Invalid type for 'messages[1].content': expected one of a string or array of objects, but got an integer instead.","type":"invalid_request_error","param":"messages[1].content","code":"invalid_type"}}"#;

    #[test]
    fn context_length_errors_are_context_overflow() {
        assert_eq!(kind(400, OPENAI_CONTEXT), ContextOverflow);
        assert_eq!(kind(400, ANTHROPIC_TOO_LONG), ContextOverflow);
        let window =
            r#"{"type":"error","error":{"type":"model_context_window_exceeded","message":"x"}}"#;
        assert_eq!(kind(400, window), ContextOverflow);
        // vLLM's wording, without a code.
        let vllm = r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.","type":"BadRequestError","param":null,"code":400}"#;
        assert_eq!(kind(400, vllm), ContextOverflow);
        // The Responses API's wording.
        let responses = r#"{"error":{"message":"Your input exceeds the context window of this model. Please adjust your input and try again.","type":"invalid_request_error","param":"input","code":"context_length_exceeded"}}"#;
        assert_eq!(kind(400, responses), ContextOverflow);
        let unlabelled = r#"{"error":{"message":"Your input exceeds the context window of this model.","type":"invalid_request_error","param":"input","code":null}}"#;
        assert_eq!(kind(400, unlabelled), ContextOverflow);
    }

    /// The real bodies of the OpenAI-compatible servers people run, as they answer a prompt
    /// longer than their context.
    #[test]
    fn the_servers_people_run_say_context_overflow_in_their_own_words() {
        let bodies = [
            // llama.cpp's llama-server, since its exceed_context_size_error type (400).
            (
                400,
                r#"{"error":{"code":400,"message":"request (4390 tokens) exceeds the available context size (4096 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":4390,"n_ctx":4096}}"#,
            ),
            // ... the same type in its first releases, with a 500.
            (
                500,
                r#"{"error":{"code":500,"message":"the request exceeds the available context size. try increasing the context size or enable context shift","type":"exceed_context_size_error","n_prompt_tokens":1407,"n_ctx":256}}"#,
            ),
            // ... and when generation fills the context.
            (
                500,
                r#"{"error":{"code":500,"message":"Context size has been exceeded.","type":"server_error"}}"#,
            ),
            // LiteLLM's proxy, wrapping Anthropic's answer.
            (
                400,
                r#"{"error":{"message":"litellm.BadRequestError: litellm.ContextWindowExceededError: AnthropicError - {\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"prompt is too long: 200480 tokens > 200000 maximum\"}}\nReceived Model Group=anthropic/claude-3-5-sonnet-20241022\nAvailable Model Group Fallbacks=None","type":null,"param":null,"code":"400"}}"#,
            ),
            // SGLang.
            (
                400,
                r#"{"object":"error","message":"The input (5120 tokens) is longer than the model's context length (4096 tokens).","type":"BadRequestError","param":null,"code":400}"#,
            ),
            // OpenRouter.
            (
                400,
                r#"{"error":{"message":"This endpoint's maximum context length is 8192 tokens. However, you requested about 9000 tokens (9000 of text input). Please reduce the length of either one, or use the \"middle-out\" transform to compress your prompt automatically.","code":400}}"#,
            ),
            // Anthropic, the prompt and the output cap together.
            (
                400,
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"input length and `max_tokens` exceed context limit: 179413 + 32768 > 200000, decrease input length or `max_tokens` and try again"}}"#,
            ),
            // Gemini's OpenAI-compatible endpoint.
            (
                400,
                r#"[{"error":{"code":400,"message":"The input token count (2800010) exceeds the maximum number of tokens allowed (1048575).","status":"INVALID_ARGUMENT"}}]"#,
            ),
        ];
        for (status, body) in bodies {
            assert_eq!(kind(status, body), ContextOverflow, "{status} {body}");
        }
        // A 5xx that says nothing of the context is still a server error, retried.
        assert_eq!(
            kind(
                500,
                r#"{"error":{"code":500,"message":"Internal server error","type":"server_error"}}"#
            ),
            Server
        );
    }

    #[test]
    fn insufficient_quota_is_not_retried() {
        assert_eq!(kind(429, OPENAI_QUOTA), Auth);
    }

    #[test]
    fn a_401_or_403_is_auth() {
        assert_eq!(kind(401, OPENAI_AUTH), Auth);
        assert_eq!(kind(401, ANTHROPIC_AUTH), Auth);
        let perm = r#"{"type":"error","error":{"type":"permission_error","message":"no"}}"#;
        assert_eq!(kind(403, perm), Auth);
    }

    #[test]
    fn a_408_is_timeout_and_a_409_is_server() {
        assert_eq!(kind(408, "request timeout"), Timeout);
        assert_eq!(kind(409, "conflict"), Server);
    }

    #[test]
    fn a_429_is_rate_limited_with_its_delay() {
        assert_eq!(kind(429, OPENAI_RATE), RateLimited);
        let f = http_failure(429, Some(1500), OPENAI_RATE.as_bytes());
        assert_eq!(f.retry_after_ms, Some(1500));
        assert!(f.message.contains("rate_limit_exceeded"), "{}", f.message);
    }

    #[test]
    fn a_5xx_and_529_overloaded_are_server() {
        assert_eq!(
            kind(
                500,
                r#"{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}"#
            ),
            Server
        );
        assert_eq!(kind(502, "<html>Bad Gateway</html>"), Server);
        assert_eq!(kind(503, ""), Server);
        assert_eq!(kind(529, ANTHROPIC_OVERLOADED), Server);
    }

    #[test]
    fn other_4xx_are_bad_request() {
        assert_eq!(kind(400, OPENAI_BAD), BadRequest);
        assert_eq!(
            kind(
                404,
                r#"{"type":"error","error":{"type":"not_found_error","message":"model: claude-x"}}"#
            ),
            BadRequest
        );
        assert_eq!(
            kind(
                413,
                r#"{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}"#
            ),
            BadRequest
        );
        assert_eq!(kind(422, "unprocessable"), BadRequest);
        // A context-length message on a 5xx is still the server's failure.
        assert_eq!(kind(500, ANTHROPIC_TOO_LONG), Server);
    }

    #[test]
    fn error_events_map_through_the_same_table() {
        let over = ErrorInfo::parse(ANTHROPIC_OVERLOADED.as_bytes());
        assert_eq!(event_failure(&over).kind, Server);
        let rate = ErrorInfo::parse(
            br#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#,
        );
        assert_eq!(event_failure(&rate).kind, RateLimited);
        let openai = ErrorInfo::parse(
            br#"{"error":{"message":"The server had an error","type":"server_error"}}"#,
        );
        assert_eq!(event_failure(&openai).kind, Server);
        let bad = ErrorInfo::parse(
            br#"{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}"#,
        );
        assert_eq!(event_failure(&bad).kind, BadRequest);
        let context = ErrorInfo::parse(ANTHROPIC_TOO_LONG.as_bytes());
        assert_eq!(event_failure(&context).kind, ContextOverflow);
        assert_eq!(event_failure(&ErrorInfo::default()).kind, Server);
    }

    #[test]
    fn retry_after_in_ms_seconds_or_a_date_and_capped() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let cap = Duration::from_secs(60);
        assert_eq!(
            retry_after_ms(Some("250.5"), Some("9"), now, cap),
            Some(251)
        );
        assert_eq!(retry_after_ms(None, Some("2"), now, cap), Some(2000));
        assert_eq!(retry_after_ms(None, Some("0.5"), now, cap), Some(500));
        let in_30s = httpdate::fmt_http_date(now + Duration::from_secs(30));
        assert_eq!(retry_after_ms(None, Some(&in_30s), now, cap), Some(30_000));
        let past = httpdate::fmt_http_date(now - Duration::from_secs(30));
        assert_eq!(retry_after_ms(None, Some(&past), now, cap), Some(0));
        assert_eq!(retry_after_ms(None, Some("3600"), now, cap), Some(60_000));
        assert_eq!(retry_after_ms(None, Some("soon"), now, cap), None);
        assert_eq!(retry_after_ms(None, None, now, cap), None);
    }

    #[test]
    fn a_body_that_is_not_json_keeps_its_text() {
        let f = http_failure(502, None, b"<html>Bad Gateway</html>");
        assert_eq!(f.message, "HTTP 502: <html>Bad Gateway</html>");
    }
}
