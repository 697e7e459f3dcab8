//! The `opentelemetry` feature: a job enqueued without a traceparent takes
//! the current trace context (PROTOCOL.md "Trace context").

use opentelemetry::trace::TraceContextExt;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The current tracing span's OpenTelemetry context (or, outside one, the
/// current OpenTelemetry context) as a traceparent and a tracestate (empty
/// for none); None when neither holds a valid span context.
pub(crate) fn current_context() -> Option<(String, String)> {
    let of = |cx: &opentelemetry::Context| {
        let span = cx.span();
        let sc = span.span_context();
        sc.is_valid().then(|| {
            (
                format!(
                    "00-{}-{}-{:02x}",
                    sc.trace_id(),
                    sc.span_id(),
                    sc.trace_flags().to_u8()
                ),
                sc.trace_state().header(),
            )
        })
    };
    of(&tracing::Span::current().context()).or_else(|| of(&opentelemetry::Context::current()))
}
