//! OpenTelemetry export (`[otel]`, docs/operations/configure.md "Tracing"): a span
//! per attempt, the child of the producer's trace context, sent over
//! OTLP/HTTP by the opentelemetry SDK's batch processor. Off, nothing of
//! this runs: the worker has no observer and handlers get the stored
//! context as it is.

use std::hash::{Hash, Hasher};
use std::str::FromStr;

use anyhow::{Context as _, Result};
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
    Tracer, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use punctual::{AttemptEnd, Delivery};

use super::config::OtelConfig;

/// The exporter of a worker process.
#[derive(Debug, Clone)]
pub(crate) struct Otel {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

/// Where spans go: `[otel] endpoint` (a base URL, `/v1/traces` added),
/// else the standard environment variables; None when neither is set.
fn endpoint(cfg: &OtelConfig) -> Option<Option<String>> {
    if let Some(e) = cfg.endpoint.as_deref().filter(|e| !e.is_empty()) {
        let e = e.trim_end_matches('/');
        return Some(Some(if e.ends_with("/v1/traces") {
            e.to_string()
        } else {
            format!("{e}/v1/traces")
        }));
    }
    let set = |v: &str| std::env::var(v).is_ok_and(|v| !v.is_empty());
    (set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") || set("OTEL_EXPORTER_OTLP_ENDPOINT"))
        .then_some(None)
}

impl Otel {
    /// The exporter, or None when tracing is not configured.
    pub(crate) fn start(cfg: &OtelConfig) -> Result<Option<Otel>> {
        let Some(url) = endpoint(cfg) else {
            return Ok(None);
        };
        let mut builder = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary);
        if let Some(url) = &url {
            builder = builder.with_endpoint(url.clone());
        }
        let exporter = builder
            .build()
            .context("cannot set up the OpenTelemetry exporter ([otel] endpoint)")?;
        let service = cfg
            .service_name
            .clone()
            .or_else(|| std::env::var("OTEL_SERVICE_NAME").ok())
            .unwrap_or_else(|| "punctual".into());
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(
                opentelemetry_sdk::Resource::builder()
                    .with_service_name(service)
                    .build(),
            )
            .build();
        let tracer = provider.tracer("punctual");
        tracing::info!(
            endpoint = url.as_deref().unwrap_or("from OTEL_EXPORTER_OTLP_*"),
            "exporting a span per attempt (OpenTelemetry)"
        );
        Ok(Some(Otel { provider, tracer }))
    }

    /// The span of one attempt, ended: a child of the job's traceparent
    /// (a root without one), with the id `attempt_span_id` gave its handler.
    pub(crate) fn record(&self, end: AttemptEnd) {
        let parent = end
            .traceparent
            .as_deref()
            .and_then(|tp| span_context(tp, end.tracestate.as_deref()));
        let cx = match &parent {
            Some(sc) => Context::new().with_remote_span_context(sc.clone()),
            None => Context::new(),
        };
        let mut attributes = vec![
            KeyValue::new("messaging.system", "punctual"),
            KeyValue::new("messaging.operation.type", "process"),
            KeyValue::new("messaging.destination.name", end.topic.clone()),
            KeyValue::new("messaging.message.id", end.id.clone()),
            KeyValue::new("punctual.topic", end.topic.clone()),
            KeyValue::new("punctual.job_id", end.id.clone()),
            KeyValue::new("punctual.attempt", i64::from(end.attempt)),
            KeyValue::new("punctual.lateness_ms", end.lateness_us as f64 / 1000.0),
            KeyValue::new("punctual.outcome", end.outcome),
        ];
        if let Some(e) = &end.error {
            attributes.push(KeyValue::new("punctual.error", e.clone()));
        }
        let mut builder = self
            .tracer
            .span_builder(format!("process {}", end.topic))
            .with_kind(SpanKind::Consumer)
            .with_start_time(end.started)
            .with_attributes(attributes);
        if let Some(sc) = &parent {
            builder = builder.with_span_id(attempt_span_id(
                sc.trace_id(),
                &end.topic,
                &end.id,
                end.token,
            ));
        }
        let mut span = builder.start_with_context(&self.tracer, &cx);
        use opentelemetry::trace::Span as _;
        span.set_status(status(end.outcome, end.error.as_deref()));
        span.end_with_timestamp(end.ended);
    }

    /// The context the handler of `d` is given when spans are exported:
    /// the producer's trace, with this attempt's span as the parent.
    pub(crate) fn handler_context(d: &mut Delivery) {
        let Some(sc) = d
            .traceparent
            .as_deref()
            .and_then(|tp| span_context(tp, None))
        else {
            return;
        };
        let span = attempt_span_id(sc.trace_id(), &d.topic, &d.id, d.token);
        d.traceparent = Some(format!(
            "00-{}-{}-{:02x}",
            sc.trace_id(),
            span,
            sc.trace_flags().to_u8()
        ));
    }

    /// Sends what is buffered and stops (a worker process's exit).
    pub(crate) fn shutdown(&self) {
        let provider = self.provider.clone();
        // The SDK's shutdown blocks: not on the runtime's thread.
        let _ = std::thread::spawn(move || provider.shutdown()).join();
    }
}

/// A traceparent (and tracestate) as a remote span context; None when it
/// does not parse.
/// An attempt's span status by its outcome: Ok when done (or handed
/// back, which is no attempt), Error with the error for a failure (retry,
/// dead, expired, ...). A cancel is an operator's decision, not a failure
/// of the handler: Unset, as OpenTelemetry keeps Error for failures; the
/// `punctual.outcome` attribute says what happened.
fn status(outcome: &str, error: Option<&str>) -> Status {
    match outcome {
        "done" | "handed back" => Status::Ok,
        "cancelled" => Status::Unset,
        _ => Status::error(error.unwrap_or(outcome).to_string()),
    }
}

fn span_context(tp: &str, ts: Option<&str>) -> Option<SpanContext> {
    let mut parts = tp.split('-');
    let (_, trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let trace = TraceId::from_hex(trace).ok()?;
    let span = SpanId::from_hex(span).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let state = ts
        .and_then(|s| TraceState::from_str(s).ok())
        .unwrap_or_default();
    let sc = SpanContext::new(trace, span, TraceFlags::new(flags), true, state);
    sc.is_valid().then_some(sc)
}

/// The span id of one attempt: derived from the trace, the job and its
/// lease token (unique per claim), so the worker's observer and the
/// handler's wrapper agree on it without sharing state.
fn attempt_span_id(trace: TraceId, topic: &str, id: &str, token: i64) -> SpanId {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (trace.to_bytes(), topic, id, token).hash(&mut h);
    let v = h.finish().max(1);
    SpanId::from_bytes(v.to_be_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handlers_parent_is_the_attempts_span() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let sc = span_context(tp, Some("k=v")).unwrap();
        assert_eq!(sc.trace_state().get("k"), Some("v"));
        let a = attempt_span_id(sc.trace_id(), "t", "j", 7);
        assert_eq!(a, attempt_span_id(sc.trace_id(), "t", "j", 7));
        assert_ne!(a, attempt_span_id(sc.trace_id(), "t", "j", 8));
        assert!(span_context(
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            None
        )
        .is_none());
    }

    #[test]
    fn a_cancelled_attempt_is_no_error_and_failures_are() {
        assert_eq!(status("done", None), Status::Ok);
        assert_eq!(status("cancelled", Some("stopped")), Status::Unset);
        assert_eq!(status("retry", Some("503")), Status::error("503"));
        for failed in ["dead", "expired"] {
            assert_eq!(status(failed, None), Status::error(failed));
        }
    }
}
