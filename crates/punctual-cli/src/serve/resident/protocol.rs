//! The resident protocol as this side speaks it (docs/RESIDENT.md): the
//! version, the `job` and `cancel` lines written to fd 3, and the reply
//! lines read from fd 4 (also an exec handler's one reply line on fd 3).

use std::time::Duration;

use base64::Engine;
use punctual::{Delivery, Outcome};
use serde::Serialize;

/// The protocol version this side speaks.
pub(crate) const PROTOCOL: u64 = 1;

/// Most jobs one program may take at once.
pub(super) const MAX_INFLIGHT: u64 = 1000;

/// How much of a reply's `error` is kept.
const ERROR_MAX: usize = 2048;

#[derive(Serialize)]
struct JobMsg<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    id: &'a str,
    topic: &'a str,
    attempt: u32,
    max_attempts: u32,
    due_ms: i64,
    created_ms: i64,
    timeout_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload_b64: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    traceparent: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tracestate: Option<&'a str>,
}

#[derive(Serialize)]
struct CancelMsg<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    id: &'a str,
}

/// The line written to fd 3 when an operator cancels a job the program
/// holds.
pub(super) fn cancel_line(id: &str) -> Vec<u8> {
    let mut line = serde_json::to_vec(&CancelMsg { kind: "cancel", id }).expect("plain JSON");
    line.push(b'\n');
    line
}

/// A job as the line written to fd 3.
pub(super) fn job_line(d: &Delivery, timeout: Duration) -> Vec<u8> {
    let (payload, payload_b64) = match std::str::from_utf8(&d.payload) {
        Ok(s) => (Some(s), None),
        Err(_) => (
            None,
            Some(base64::engine::general_purpose::STANDARD.encode(&d.payload)),
        ),
    };
    let msg = JobMsg {
        kind: "job",
        id: &d.id,
        topic: &d.topic,
        attempt: d.attempt,
        max_attempts: d.max_attempts,
        due_ms: d.due_ms,
        created_ms: d.created_ms,
        timeout_ms: timeout.as_millis() as u64,
        payload,
        payload_b64,
        traceparent: d.traceparent.as_deref(),
        tracestate: d.tracestate.as_deref(),
    };
    let mut line = serde_json::to_vec(&msg).expect("a job serializes");
    line.push(b'\n');
    line
}

/// A reply line: (id, outcome), or why it breaks the protocol.
pub(crate) fn parse_reply(line: &[u8]) -> Result<(String, Outcome), String> {
    let (id, outcome) = parse_reply_any(line)?;
    Ok((id.ok_or("a reply must name the job's id")?, outcome))
}

/// A reply line where the id is optional (an exec handler's fd 3).
pub(crate) fn parse_reply_any(line: &[u8]) -> Result<(Option<String>, Outcome), String> {
    let v: serde_json::Value = serde_json::from_slice(line).map_err(|_| {
        format!(
            "not a JSON object: {:?}",
            String::from_utf8_lossy(&line[..line.len().min(200)])
        )
    })?;
    let obj = v.as_object().ok_or("a reply must be a JSON object")?;
    let kind = obj.get("type").and_then(|t| t.as_str()).unwrap_or("");
    let id = obj.get("id").and_then(|t| t.as_str()).map(String::from);
    let error = obj
        .get("error")
        .and_then(|e| e.as_str())
        .map(|e| truncate(e, ERROR_MAX));
    let outcome = match kind {
        "done" => Outcome::Done,
        "retry" => {
            let error = error.unwrap_or_else(|| "the handler asked for a retry".into());
            match obj.get("delay_ms").and_then(|d| d.as_u64()) {
                Some(ms) => Outcome::retry_after(error, Duration::from_millis(ms)),
                None => Outcome::retry(error),
            }
        }
        "dead" => {
            Outcome::permanent(error.unwrap_or_else(|| "the handler declared it dead".into()))
        }
        other => return Err(format!("unknown reply type {other:?}")),
    };
    Ok((id, outcome))
}

pub(super) fn truncate(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse_and_violations_say_why() {
        let (id, o) =
            parse_reply(br#"{"type":"retry","id":"a","error":"x","delay_ms":600000,"extra":1}"#)
                .unwrap();
        assert_eq!(
            (id.as_str(), o),
            ("a", Outcome::retry_after("x", Duration::from_secs(600)))
        );
        let (_, o) = parse_reply(br#"{"type":"dead","id":"a"}"#).unwrap();
        assert!(matches!(o, Outcome::Permanent { .. }));
        assert_eq!(
            parse_reply(br#"{"type":"done","id":"a"}"#).unwrap().1,
            Outcome::Done
        );
        assert!(parse_reply(b"not json")
            .unwrap_err()
            .contains("not a JSON object"));
        assert!(parse_reply(b"[1]").unwrap_err().contains("object"));
        assert!(parse_reply(br#"{"type":"done"}"#)
            .unwrap_err()
            .contains("id"));
        assert!(parse_reply(br#"{"type":"ok","id":"a"}"#)
            .unwrap_err()
            .contains("unknown reply type"));
        assert!(
            parse_reply_any(br#"{"type":"done"}"#).is_ok(),
            "exec replies need no id"
        );
        let long = format!(
            r#"{{"type":"retry","id":"a","error":"{}"}}"#,
            "\u{e9}".repeat(3000)
        );
        match parse_reply(long.as_bytes()).unwrap().1 {
            Outcome::Retry { error, .. } => assert!(error.len() <= ERROR_MAX && !error.is_empty()),
            o => panic!("{o:?}"),
        }
    }
}
