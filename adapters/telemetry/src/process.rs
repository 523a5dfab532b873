//! The telemetry of a process that embeds Terminus and has no command line to set it up: the
//! Python and Node packages, whose plan runs make the same spans and metrics as `terminus
//! orchestrate`.
//!
//! A process [`start`]s it once. The spans (target `terminus`) then go where
//! [`Telemetry::from_env`] says (the standard `OTEL_*` variables; nowhere when no endpoint is
//! set), and the metrics ([`terminus_runtime::meters`]) are recorded for the host to serve as
//! Prometheus text ([`metrics_text`]) from its own web server. [`flush`] sends what is batched
//! (a process about to be frozen, as a Lambda is after its handler returns); [`shutdown`] flushes
//! and stops the exporter, for good: a process starts its telemetry once, because the global
//! `tracing` subscriber and `metrics` recorder can be set once.

use std::sync::{Mutex, PoisonError};

use metrics_exporter_prometheus::PrometheusHandle;

use crate::{Telemetry, TelemetryError};

/// What [`start`] set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Started {
    /// Whether spans are exported over OTLP (an endpoint variable is set).
    pub exporting_spans: bool,
    /// Whether an earlier call had started it already (nothing was done this time).
    pub already: bool,
}

/// The process's telemetry.
#[derive(Debug)]
enum State {
    /// Not started.
    Off,
    /// Started: the span pipeline (none when no endpoint is set) and the metrics.
    On {
        spans: Option<Telemetry>,
        metrics: PrometheusHandle,
    },
    /// Shut down: the metrics can still be read; nothing starts again.
    Ended { metrics: PrometheusHandle },
}

static STATE: Mutex<State> = Mutex::new(State::Off);

fn state() -> std::sync::MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Starts the process's telemetry: the OTLP span exporter of [`Telemetry::from_env`] installed
/// as the global `tracing` subscriber when an endpoint is set, and the Prometheus recorder as the
/// global `metrics` recorder. A second call does nothing and says so; a call after [`shutdown`]
/// is refused ([`TelemetryError::Ended`]), as is one in a process where another global
/// subscriber or recorder is set already (nothing is left half set up: the recorder is
/// installed only once the exporter is built).
pub fn start() -> Result<Started, TelemetryError> {
    let mut state = state();
    match &*state {
        State::On { spans, .. } => {
            return Ok(Started {
                exporting_spans: spans.is_some(),
                already: true,
            });
        }
        State::Ended { .. } => return Err(TelemetryError::Ended),
        State::Off => {}
    }
    let spans = Telemetry::from_env()?;
    let metrics = crate::prometheus()
        .and_then(|b| b.install_recorder())
        .map_err(|e| TelemetryError::Metrics(e.to_string()))?;
    if let Some(spans) = &spans {
        spans.install()?;
    }
    let exporting_spans = spans.is_some();
    *state = State::On { spans, metrics };
    Ok(Started {
        exporting_spans,
        already: false,
    })
}

/// The metrics recorded since [`start`], as Prometheus text (the exposition format `terminus
/// serve --metrics` serves); `None` before [`start`].
pub fn metrics_text() -> Option<String> {
    match &*state() {
        State::Off => None,
        State::On { metrics, .. } | State::Ended { metrics } => Some(metrics.render()),
    }
}

/// Sends the spans batched so far and waits for the collector's answer; nothing to do when no
/// span is exported.
pub fn flush() -> Result<(), TelemetryError> {
    match &*state() {
        State::On {
            spans: Some(spans), ..
        } => spans
            .provider
            .force_flush()
            .map_err(|e| TelemetryError::Flush(e.to_string())),
        _ => Ok(()),
    }
}

/// Flushes and stops the span exporter; the metrics stay readable. Nothing to do when the
/// telemetry was never started or is shut down already.
pub fn shutdown() -> Result<(), TelemetryError> {
    let mut state = state();
    let spans = match std::mem::replace(&mut *state, State::Off) {
        State::On { spans, metrics } => {
            *state = State::Ended { metrics };
            spans
        }
        other => {
            *state = other;
            None
        }
    };
    drop(state);
    spans.map_or(Ok(()), Telemetry::shutdown)
}
