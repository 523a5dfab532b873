//! The HTTP client: one `POST` per model call, the error response or the (streamed) body read
//! into a [`Reply`]. Everything it decides is in the pure modules; this file only moves bytes.

use crate::body::{Bodies, Wire};
use crate::error::{http_failure, retry_after_ms, transport_failure};
use crate::reply::{Options, Reply};
use crate::secret::ApiKey;
use crate::sse::SseDecoder;
use crate::{anthropic, openai, responses};
use async_trait::async_trait;
use reqwest::header::{self, HeaderMap, HeaderValue};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use terminus_kernel::ModelErrorKind;
use terminus_kernel::repetition;
use terminus_runtime::{
    Heuristic, Model, ModelError, ModelFailure, ModelInfo, ModelRequest, Purpose, Tokenizer,
    semconv,
};

/// The wire format of a model server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// OpenAI-compatible Chat Completions: `POST {base_url}/chat/completions`.
    OpenAi,
    /// Anthropic Messages: `POST {base_url}/messages`.
    Anthropic,
    /// OpenAI Responses: `POST {base_url}/responses`.
    OpenAiResponses,
}

impl Provider {
    /// Every provider, in the order configs list them.
    pub const ALL: [Provider; 3] = [
        Provider::OpenAi,
        Provider::OpenAiResponses,
        Provider::Anthropic,
    ];

    /// The config name: `openai`, `openai-responses` or `anthropic`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Provider::OpenAi => "openai",
            Provider::Anthropic => "anthropic",
            Provider::OpenAiResponses => "openai-responses",
        }
    }

    /// The provider called `name` in a config.
    pub fn from_name(name: &str) -> Option<Provider> {
        Provider::ALL.into_iter().find(|p| p.as_str() == name)
    }
}

/// How to reach a model.
#[derive(Debug, Clone)]
pub struct LlmConfig {
    /// The wire format.
    pub provider: Provider,
    /// The API root (`http://127.0.0.1:8000/v1`, `https://api.anthropic.com/v1`);
    /// `/chat/completions`, `/responses` or `/messages` is appended.
    pub base_url: String,
    /// The model name, sent with every request; it also picks the tokenizer.
    pub model: String,
    /// The key, if the server wants one.
    pub api_key: Option<ApiKey>,
    /// Stream replies (server-sent events). Default true.
    pub stream: bool,
    /// Longest wait for an answer to begin, and for a reply that is not streamed to arrive
    /// whole; then it is a retryable `timeout`. A streamed reply is alive while bytes arrive:
    /// each gap is bounded by [`LlmConfig::idle_timeout`], not its whole length. Default 120 s.
    pub timeout: Duration,
    /// The longest reply, in tokens (Chat Completions' `max_completion_tokens`, Responses'
    /// `max_output_tokens`, Anthropic's `max_tokens`). Default none: [`crate::DEFAULT_MAX_OUTPUT_TOKENS`] is sent.
    pub max_output_tokens: Option<u32>,
    /// The sampling temperature (`temperature`); default none: the server's own.
    pub temperature: Option<f64>,
    /// The sampling seed (Chat Completions' `seed`, which llama.cpp and vLLM honour); default
    /// none. Not sent to the Responses or Messages APIs, which have no such field.
    pub seed: Option<u64>,
    /// The longest `Retry-After` honoured; a longer one is cut to this. Default 60 s.
    pub max_retry_after: Duration,
    /// The longest a streamed reply may go without a byte; then it is a retryable `timeout`.
    /// Default none: [`LlmConfig::timeout`] bounds each gap.
    pub idle_timeout: Option<Duration>,
}

impl LlmConfig {
    /// A config with the defaults.
    pub fn new(provider: Provider, base_url: impl Into<String>, model: impl Into<String>) -> Self {
        LlmConfig {
            provider,
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            stream: true,
            timeout: Duration::from_secs(120),
            max_output_tokens: None,
            temperature: None,
            seed: None,
            idle_timeout: None,
            max_retry_after: Duration::from_secs(60),
        }
    }
}

/// A config that cannot make a client.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `base_url` is not an `http://` or `https://` URL.
    #[error("base_url {url:?} is not an http:// or https:// URL")]
    BaseUrl {
        /// The URL given.
        url: String,
    },
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Client(#[source] reqwest::Error),
}

/// Where a streamed reply's text goes as it arrives: called with each new piece (never empty)
/// of an agent turn's text ([`Purpose::Turn`]), in order. A turn retried after a failure starts
/// over, so a receiver closes what it showed when the kernel takes the failure.
pub type TextSink = Arc<dyn Fn(&str) + Send + Sync>;

/// A real model behind an OpenAI-compatible or Anthropic endpoint: the runtime's [`Model`].
/// Clones share their HTTP connections and their kept request encodings.
#[derive(Clone)]
pub struct LlmModel {
    config: LlmConfig,
    url: String,
    /// `url` parsed once (a URL that does not parse is given to the HTTP client as text at each
    /// call, which refuses it there as it always did).
    parsed: Option<reqwest::Url>,
    headers: HeaderMap,
    http: reqwest::Client,
    bodies: Arc<Bodies>,
    /// Where a streamed turn's text goes while it arrives ([`LlmModel::with_text`]).
    text: Option<TextSink>,
}

impl std::fmt::Debug for LlmModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmModel")
            .field("config", &self.config)
            .field("url", &self.url)
            .field("text", &self.text.is_some())
            .finish_non_exhaustive()
    }
}

impl LlmModel {
    /// A model client for `config`.
    pub fn new(config: LlmConfig) -> Result<LlmModel, ConfigError> {
        let base = config.base_url.trim_end_matches('/');
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(ConfigError::BaseUrl {
                url: config.base_url.clone(),
            });
        }
        let url = match config.provider {
            Provider::OpenAi => format!("{base}/chat/completions"),
            Provider::Anthropic => format!("{base}/messages"),
            Provider::OpenAiResponses => format!("{base}/responses"),
        };
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if config.provider == Provider::Anthropic {
            headers.insert(
                "anthropic-version",
                HeaderValue::from_static(anthropic::API_VERSION),
            );
        }
        if let Some(key) = &config.api_key {
            let (name, value) = match config.provider {
                Provider::OpenAi | Provider::OpenAiResponses => {
                    (header::AUTHORIZATION, format!("Bearer {}", key.expose()))
                }
                Provider::Anthropic => (
                    header::HeaderName::from_static("x-api-key"),
                    key.expose().to_owned(),
                ),
            };
            // A key that cannot be a header value is not sent (and not echoed in an error).
            if let Ok(mut value) = HeaderValue::from_str(&value) {
                value.set_sensitive(true);
                headers.insert(name, value);
            }
        }
        if config.stream {
            headers.insert(
                header::ACCEPT,
                HeaderValue::from_static("text/event-stream"),
            );
        }
        let http = reqwest::Client::builder()
            .build()
            .map_err(ConfigError::Client)?;
        Ok(LlmModel {
            config,
            parsed: reqwest::Url::parse(&url).ok(),
            url,
            headers,
            http,
            bodies: Arc::default(),
            text: None,
        })
    }

    /// This model (sharing its connections), giving each agent turn's text to `sink` piece by
    /// piece while the reply streams. The turn it returns is the same as without a sink. A
    /// reply that is not streamed (`stream = false`, or a server that answers with one JSON
    /// body) gives nothing to the sink; nor do verifier and checkpoint calls.
    #[must_use]
    pub fn with_text(&self, sink: TextSink) -> LlmModel {
        LlmModel {
            text: Some(sink),
            ..self.clone()
        }
    }

    /// The config.
    pub fn config(&self) -> &LlmConfig {
        &self.config
    }

    /// The tokenizer for the context window: tiktoken's for OpenAI model names it knows, and
    /// the 4-characters heuristic otherwise. Anthropic publishes no tokenizer: its models get
    /// the heuristic, which undercounts (see `terminus-tokenizer`'s accuracy corpus), and the
    /// provider's reported usage corrects the count after the first reply.
    pub fn tokenizer(&self) -> Arc<dyn Tokenizer> {
        match self.config.provider {
            Provider::OpenAi | Provider::OpenAiResponses => {
                terminus_tokenizer::for_model(&self.config.model)
            }
            Provider::Anthropic => Arc::new(Heuristic),
        }
    }

    /// One call: the reply, or the failure mapped onto the kernel's classes. A failure's
    /// message never holds the API key, even when a server echoes it back.
    pub async fn reply(&self, request: ModelRequest<'_>) -> Result<Reply, ModelFailure> {
        self.call(request).await.map_err(|mut failure| {
            if let Some(key) = &self.config.api_key
                && !key.expose().is_empty()
                && failure.message.contains(key.expose())
            {
                failure.message = failure.message.replace(key.expose(), "***");
            }
            failure
        })
    }

    async fn call(&self, request: ModelRequest<'_>) -> Result<Reply, ModelFailure> {
        // A checkpoint written for the agent asks its own model (on the same endpoint) for a
        // reply of its own length.
        let (model, max_output_tokens) = match request.purpose {
            Purpose::Checkpoint { model, max_tokens } => (
                model.unwrap_or(&self.config.model),
                Some(max_tokens.min(self.config.max_output_tokens.unwrap_or(u32::MAX))),
            ),
            _ => (self.config.model.as_str(), self.config.max_output_tokens),
        };
        let options = Options {
            model,
            max_output_tokens,
            stream: self.config.stream,
            temperature: self.config.temperature,
            seed: self.config.seed,
        };
        let cap = options
            .max_output_tokens
            .unwrap_or(crate::DEFAULT_MAX_OUTPUT_TOKENS);
        let body = match self.config.provider {
            Provider::OpenAi => self.bodies.write(Wire::Chat, options, &request),
            Provider::OpenAiResponses => self.bodies.write(Wire::Responses, options, &request),
            Provider::Anthropic => anthropic::request_body(options, &request)
                .to_string()
                .into_bytes(),
        };
        let timeout = self.config.timeout;
        let transport = |e: reqwest::Error| transport_failure(&e, timeout);
        let post = match &self.parsed {
            Some(url) => self.http.post(url.clone()),
            None => self.http.post(&self.url),
        };
        // `timeout` bounds the wait for the answer to begin and a reply read whole; a streamed
        // reply lives while bytes arrive (each gap bounded by the idle timeout): on a CPU server
        // a long reply streams for minutes, and cutting it would only generate it again.
        let started = tokio::time::Instant::now();
        let sent = post.headers(self.headers.clone()).body(body).send();
        let mut response = match tokio::time::timeout(timeout, sent).await {
            Ok(response) => response.map_err(transport)?,
            Err(_) => return Err(timed_out("no answer began within", timeout, "timeout_ms")),
        };
        let left = || timeout.saturating_sub(started.elapsed());
        let status = response.status();
        if !status.is_success() {
            let headers = response.headers();
            let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
            let retry = retry_after_ms(
                text("retry-after-ms"),
                text("retry-after"),
                SystemTime::now(),
                self.config.max_retry_after,
            );
            // An error body cut mid-way (or too slow) still has a status that says enough.
            let body = tokio::time::timeout(left(), response.bytes())
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default();
            let mut failure = http_failure(status.as_u16(), retry, &body);
            if matches!(status.as_u16(), 404 | 405) {
                // Most often a base_url that is not the API root: name the address asked.
                failure.message = format!(
                    "{} (POST {}: is base_url the API root, e.g. ending in /v1?)",
                    failure.message, self.url
                );
            }
            return Err(failure);
        }
        let streamed = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if !streamed {
            // A server that ignores `stream: true` answers with one JSON body: read it as such.
            let body = match tokio::time::timeout(left(), response.bytes()).await {
                Ok(body) => body.map_err(transport)?,
                Err(_) => {
                    return Err(timed_out(
                        "no complete answer within",
                        timeout,
                        "timeout_ms",
                    ));
                }
            };
            return match self.config.provider {
                Provider::OpenAi => openai::parse_response(&body),
                Provider::Anthropic => anthropic::parse_response(&body),
                Provider::OpenAiResponses => {
                    responses::parse_response(&body).map(|r| responses::cut_at_cap(r, cap))
                }
            };
        }
        let mut decoder = SseDecoder::new();
        let mut stream = Stream::new(self.config.provider);
        // The text's length when it was last looked at for a degenerate repetition.
        let mut looked = 0;
        let sink = match request.purpose {
            Purpose::Turn { .. } => self.text.as_deref(),
            _ => None,
        };
        // How much of the text the sink has had.
        let mut given = 0;
        loop {
            let idle = self.config.idle_timeout.unwrap_or(timeout);
            let next = match tokio::time::timeout(idle, response.chunk()).await {
                Ok(next) => next,
                Err(_) => {
                    return Err(timed_out(
                        "the stream sent no byte for",
                        idle,
                        "idle_timeout_ms, default timeout_ms",
                    ));
                }
            };
            let Some(chunk) = next.map_err(transport)? else {
                break;
            };
            decoder.feed(&chunk, |event| stream.data(event.data))?;
            let len = stream.text().len();
            // The text only grows; `get` keeps a piece whole at a character's boundary.
            if let Some(sink) = sink
                && len > given
                && let Some(piece) = stream.text().get(given..)
            {
                sink(piece);
                given = len;
            }
            if len >= looked + REPETITION_STRIDE || stream.is_done() && len > looked {
                looked = len;
                if let Some(repeated) = repetition::find(stream.text()) {
                    // Dropping the response closes the connection: the server stops generating.
                    drop(response);
                    // What the cut saved, estimated (four bytes a token): the cap's tokens the
                    // model had not generated yet. An event of the model call's span.
                    let generated = u64::try_from(len / 4).unwrap_or(u64::MAX);
                    let saved = u64::from(cap).saturating_sub(generated);
                    let window = u64::try_from(repeated.window).unwrap_or(u64::MAX);
                    let times = u64::try_from(repeated.times).unwrap_or(u64::MAX);
                    tracing::event!(
                        target: "terminus",
                        tracing::Level::INFO,
                        terminus.repetition.window_bytes = window,
                        terminus.repetition.times = times,
                        terminus.repetition.saved_tokens = saved,
                        "reply_cut_for_repetition"
                    );
                    return Ok(Reply::repetitive(stream.text(), repeated));
                }
            }
            if stream.is_done() {
                break;
            }
        }
        match self.config.provider {
            Provider::OpenAiResponses => stream.finish().map(|r| responses::cut_at_cap(r, cap)),
            _ => stream.finish(),
        }
    }
}

/// A retryable `timeout`: `what` did not happen within `limit` (the config's `setting`).
fn timed_out(what: &str, limit: Duration, setting: &str) -> ModelFailure {
    ModelFailure::new(
        ModelErrorKind::Timeout,
        format!("{what} {} ms ({setting})", limit.as_millis()),
    )
}

/// How much new text a stream takes between two looks for a degenerate repetition.
const REPETITION_STRIDE: usize = 256;

/// A streamed reply of either provider.
#[derive(Debug)]
pub enum Stream {
    /// Chat Completions chunks.
    OpenAi(openai::Stream),
    /// Messages events.
    Anthropic(anthropic::Stream),
    /// Responses events.
    OpenAiResponses(responses::Stream),
}

impl Stream {
    /// A stream of `provider` at its start.
    pub fn new(provider: Provider) -> Stream {
        match provider {
            Provider::OpenAi => Stream::OpenAi(openai::Stream::new()),
            Provider::Anthropic => Stream::Anthropic(anthropic::Stream::new()),
            Provider::OpenAiResponses => Stream::OpenAiResponses(responses::Stream::new()),
        }
    }

    /// One SSE event's data.
    pub fn data(&mut self, data: &str) -> Result<(), ModelFailure> {
        match self {
            Stream::OpenAi(s) => s.data(data),
            Stream::Anthropic(s) => s.data(data),
            Stream::OpenAiResponses(s) => s.data(data),
        }
    }

    /// The text streamed so far.
    pub fn text(&self) -> &str {
        match self {
            Stream::OpenAi(s) => s.text(),
            Stream::Anthropic(s) => s.text(),
            Stream::OpenAiResponses(s) => s.text(),
        }
    }

    /// Whether the stream's terminator arrived.
    pub fn is_done(&self) -> bool {
        match self {
            Stream::OpenAi(s) => s.is_done(),
            Stream::Anthropic(s) => s.is_done(),
            Stream::OpenAiResponses(s) => s.is_done(),
        }
    }

    /// The reply, once the body has ended.
    pub fn finish(self) -> Result<Reply, ModelFailure> {
        match self {
            Stream::OpenAi(s) => s.finish(),
            Stream::Anthropic(s) => s.finish(),
            Stream::OpenAiResponses(s) => s.finish(),
        }
    }

    /// Decodes a whole recorded SSE body, given in `chunks` of any size: what the client does
    /// with a response, without the network.
    pub fn parse<'a>(
        provider: Provider,
        chunks: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<Reply, ModelFailure> {
        let mut decoder = SseDecoder::new();
        let mut stream = Stream::new(provider);
        for chunk in chunks {
            decoder.feed(chunk, |event| stream.data(event.data))?;
            if stream.is_done() {
                break;
            }
        }
        stream.finish()
    }
}

#[async_trait]
impl Model for LlmModel {
    async fn complete(
        &self,
        request: ModelRequest<'_>,
    ) -> Result<terminus_kernel::ModelTurn, ModelError> {
        let reply = self.reply(request).await.map_err(ModelError::Failure)?;
        // The runtime's `chat` span declares these; outside one, recording does nothing.
        let span = tracing::Span::current();
        if let Some(model) = &reply.model {
            span.record(semconv::GEN_AI_RESPONSE_MODEL, model.as_str());
        }
        if let Some(id) = &reply.id {
            span.record(semconv::GEN_AI_RESPONSE_ID, id.as_str());
        }
        Ok(reply.turn)
    }

    fn info(&self) -> ModelInfo {
        ModelInfo {
            provider: match self.config.provider {
                Provider::OpenAi | Provider::OpenAiResponses => "openai",
                Provider::Anthropic => "anthropic",
            }
            .into(),
            model: self.config.model.clone(),
        }
    }
}
