//! Spans in memory: [`capture`] runs a closure under a subscriber of its own (this thread only)
//! and returns the spans it exported, through the same layer the OTLP pipeline uses;
//! [`render`] draws them as a tree with no ids, times or other run-to-run noise.

use opentelemetry::Value;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};
use tracing_subscriber::layer::SubscriberExt as _;

/// Keeps what it is given.
#[derive(Debug, Clone, Default)]
struct Memory(Arc<Mutex<Vec<SpanData>>>);

impl SpanExporter for Memory {
    fn export(
        &self,
        batch: Vec<SpanData>,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(batch);
        std::future::ready(Ok(()))
    }
}

/// Runs `f` with the runtime's spans exported into memory (on this thread: run a
/// current-thread tokio runtime inside `f`), and returns its value and the spans, each as it
/// ended. `tracing` caches a callsite's interest the first time it is hit: in a process that
/// ran the runtime with no subscriber at all before, spans may be missed, so capture first.
pub fn capture<T>(f: impl FnOnce() -> T) -> (T, Vec<SpanData>) {
    let memory = Memory::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(memory.clone())
        .build();
    let subscriber = tracing_subscriber::registry().with(super::layer(&provider));
    let out = tracing::subscriber::with_default(subscriber, f);
    let _ = provider.force_flush();
    let spans = std::mem::take(&mut *memory.0.lock().unwrap_or_else(PoisonError::into_inner));
    (out, spans)
}

/// The spans as an indented tree: each span's name, kind and status, its attributes sorted by
/// key, its events in order, then its children in the order they started. Ids and times are
/// left out, so the same run draws the same tree.
pub fn render(spans: &[SpanData]) -> String {
    let ids: std::collections::HashSet<_> =
        spans.iter().map(|s| s.span_context.span_id()).collect();
    let mut children: BTreeMap<Option<usize>, Vec<usize>> = BTreeMap::new();
    for (i, span) in spans.iter().enumerate() {
        let parent = ids
            .contains(&span.parent_span_id)
            .then(|| {
                spans
                    .iter()
                    .position(|p| p.span_context.span_id() == span.parent_span_id)
            })
            .flatten();
        children.entry(parent).or_default().push(i);
    }
    for list in children.values_mut() {
        list.sort_by(|a, b| {
            let (a, b) = (&spans[*a], &spans[*b]);
            a.start_time.cmp(&b.start_time).then(a.name.cmp(&b.name))
        });
    }
    let mut out = String::new();
    let mut stack: Vec<(usize, usize)> = children
        .get(&None)
        .map(|roots| roots.iter().rev().map(|&i| (i, 0)).collect())
        .unwrap_or_default();
    while let Some((i, depth)) = stack.pop() {
        draw(&mut out, &spans[i], depth);
        if let Some(kids) = children.get(&Some(i)) {
            stack.extend(kids.iter().rev().map(|&k| (k, depth + 1)));
        }
    }
    out
}

fn draw(out: &mut String, span: &SpanData, depth: usize) {
    let pad = "  ".repeat(depth);
    let status = match &span.status {
        opentelemetry::trace::Status::Unset => String::new(),
        opentelemetry::trace::Status::Ok => " status=ok".into(),
        opentelemetry::trace::Status::Error { description } if description.is_empty() => {
            " status=error".into()
        }
        opentelemetry::trace::Status::Error { description } => {
            format!(" status=error({description})")
        }
    };
    let _ = writeln!(out, "{pad}{} [{:?}]{status}", span.name, span.span_kind);
    let mut attributes: Vec<_> = span.attributes.iter().collect();
    attributes.sort_by(|a, b| a.key.as_str().cmp(b.key.as_str()));
    for kv in attributes {
        let _ = writeln!(out, "{pad}  {} = {}", kv.key, show(&kv.value));
    }
    for event in span.events.iter() {
        let fields: Vec<String> = event
            .attributes
            .iter()
            .map(|kv| format!("{}={}", kv.key, show(&kv.value)))
            .collect();
        let _ = writeln!(out, "{pad}  * {} {}", event.name, fields.join(" "));
    }
}

fn show(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{:?}", s.as_str()),
        other => other.to_string(),
    }
}
