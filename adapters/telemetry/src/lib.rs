//! # terminus-telemetry
//!
//! Where a run's traces and metrics go. The runtime emits `tracing` spans and events with the
//! OpenTelemetry GenAI attribute names ([`terminus_runtime::semconv`]) and `metrics` counters
//! ([`terminus_runtime::meters`]); with nothing installed they cost a callsite check. This crate
//! installs what turns them into something a person reads:
//!
//! - [`Telemetry::from_env`] (feature `otlp`, on by default): an OTLP HTTP/protobuf span
//!   exporter, on when `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is
//!   set, with headers from `OTEL_EXPORTER_OTLP_HEADERS` (Langfuse's `Authorization=Basic …`),
//!   timeout from `OTEL_EXPORTER_OTLP_TIMEOUT` and the service name from `OTEL_SERVICE_NAME`
//!   (default `terminus`). Runs then show in Langfuse, Jaeger, Tempo or Phoenix. Call
//!   [`Telemetry::shutdown`] before the process exits: it flushes what is batched.
//! - [`Telemetry::with_exporter`]: the same pipeline into any OpenTelemetry `SpanExporter`.
//! - [`capture`] and [`render`]: the spans of a closure, in memory, drawn as a stable tree
//!   (the span snapshot tests use them).
//! - [`serve_metrics`] (feature `prometheus`, on by default): the runtime's metrics as
//!   Prometheus text on `http://ADDR/metrics`.
//! - [`process`] (features `otlp` and `metrics-text`): the telemetry of a process that embeds
//!   Terminus and has no command line to set it up (the Python and Node packages): started once,
//!   the spans exported as [`Telemetry::from_env`] says, the metrics kept for the host to serve
//!   as Prometheus text, flushed at shutdown.
//!
//! Only the runtime's spans are exported (target `terminus`): the HTTP and MCP clients' own
//! spans stay out of the trace.

#![forbid(unsafe_code)]

mod memory;
#[cfg(all(feature = "otlp", feature = "metrics-text"))]
pub mod process;

pub use memory::{capture, render};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanExporter};
use tracing::Subscriber;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;

/// The variable that turns prompt and completion capture on (`true`), as the OpenTelemetry
/// GenAI instrumentations name it.
pub const CAPTURE_CONTENT_VAR: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";

/// Why telemetry could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The OTLP exporter's configuration is invalid (an endpoint that is not a URL, an unknown
    /// protocol or compression).
    #[error("OTLP exporter: {0}")]
    Exporter(String),
    /// A global `tracing` subscriber is installed already.
    #[error("a global tracing subscriber is installed already: {0}")]
    Installed(String),
    /// Spans could not be flushed at shutdown (the collector did not answer).
    #[error("flushing spans: {0}")]
    Flush(String),
    /// The metrics endpoint could not start.
    #[error("metrics endpoint: {0}")]
    Metrics(String),
    /// The process's telemetry was shut down ([`process::shutdown`]); a process starts it once.
    #[error("telemetry was shut down: a process starts it once")]
    Ended,
}

/// A span pipeline: the tracer provider the runtime's spans go to. Dropping it without
/// [`Telemetry::shutdown`] loses the spans still batched.
#[derive(Debug)]
pub struct Telemetry {
    provider: SdkTracerProvider,
}

impl Telemetry {
    /// The OTLP HTTP/protobuf exporter the standard variables describe, or `None` when neither
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` nor `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set (or
    /// `OTEL_SDK_DISABLED` is `true`). Spans are batched and sent from a thread of their own.
    #[cfg(feature = "otlp")]
    pub fn from_env() -> Result<Option<Telemetry>, TelemetryError> {
        let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
        let disabled =
            std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.trim().eq_ignore_ascii_case("true"));
        if disabled
            || !(set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
        {
            return Ok(None);
        }
        use opentelemetry_otlp::{Protocol, WithExportConfig as _};
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .build()
            .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
        Ok(Some(Telemetry::with_exporter(exporter)))
    }

    /// Spans batched into `exporter` (sent from a thread of the SDK's own).
    pub fn with_exporter(exporter: impl SpanExporter + 'static) -> Telemetry {
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource())
            .build();
        Telemetry { provider }
    }

    /// The `tracing` layer that turns the runtime's spans into OpenTelemetry spans of this
    /// pipeline, for a host that composes its own subscriber.
    pub fn layer<S>(&self) -> impl Layer<S> + use<S>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        layer(&self.provider)
    }

    /// Installs [`Telemetry::layer`] as the process's global subscriber.
    pub fn install(&self) -> Result<(), TelemetryError> {
        let subscriber = tracing_subscriber::registry().with(self.layer());
        tracing::subscriber::set_global_default(subscriber)
            .map_err(|e| TelemetryError::Installed(e.to_string()))
    }

    /// Sends what is batched and stops the pipeline.
    pub fn shutdown(self) -> Result<(), TelemetryError> {
        self.provider
            .shutdown()
            .map_err(|e| TelemetryError::Flush(e.to_string()))
    }
}

/// The service name from `OTEL_SERVICE_NAME`, or `terminus`; `OTEL_RESOURCE_ATTRIBUTES` apply.
fn resource() -> Resource {
    let named = std::env::var("OTEL_SERVICE_NAME").is_ok_and(|v| !v.trim().is_empty());
    let builder = Resource::builder();
    if named {
        builder.build()
    } else {
        builder.with_service_name("terminus").build()
    }
}

/// The layer from `tracing` to `provider`: the runtime's spans only, with no source locations,
/// thread ids or busy/idle times (they would say nothing about the run).
fn layer<S>(provider: &SdkTracerProvider) -> impl Layer<S> + use<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("terminus"))
        .with_location(false)
        .with_threads(false)
        .with_tracked_inactivity(false)
        .with_target(false)
        .with_level(false)
        .with_filter(
            Targets::new().with_target(terminus_runtime::semconv::TARGET, tracing::Level::INFO),
        )
}

/// Whether [`CAPTURE_CONTENT_VAR`] asks for prompts and completions on the spans
/// (`RuntimeConfig::capture_content`).
pub fn capture_content_from_env() -> bool {
    std::env::var(CAPTURE_CONTENT_VAR).is_ok_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// Serves the runtime's metrics ([`terminus_runtime::meters`]) as Prometheus text at
/// `http://{addr}/metrics`, from a task of the current tokio runtime (call it inside one).
/// Steps per run and model-call latency are histograms with fixed buckets.
#[cfg(feature = "prometheus")]
pub fn serve_metrics(addr: std::net::SocketAddr) -> Result<(), TelemetryError> {
    prometheus()
        .map(|b| b.with_http_listener(addr))
        .and_then(metrics_exporter_prometheus::PrometheusBuilder::install)
        .map_err(|e| TelemetryError::Metrics(e.to_string()))
}

/// The Prometheus recorder's settings: steps per run and model-call latency are histograms with
/// fixed buckets (the rest are counters).
#[cfg(feature = "metrics-text")]
fn prometheus()
-> Result<metrics_exporter_prometheus::PrometheusBuilder, metrics_exporter_prometheus::BuildError> {
    use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
    use terminus_runtime::meters;
    let steps = [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0];
    let seconds = [
        0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
    ];
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(meters::RUN_STEPS.into()), &steps)
        .and_then(|b| {
            b.set_buckets_for_metric(Matcher::Full(meters::MODEL_CALL_SECONDS.into()), &seconds)
        })
}
