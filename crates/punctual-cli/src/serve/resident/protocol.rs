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

/// Most jobs a sequential program may be written ahead of the one it runs.
pub(super) const MAX_LOOKAHEAD: u64 = 64;

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
    #[serde(skip_serializing_if = "Option::is_none")]
    start_by_us: Option<u64>,
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

/// A job as the line written to fd 3; `start_by_us` for a program that
/// checks it (see `monotonic_us`).
pub(super) fn job_line(d: &Delivery, timeout: Duration, start_by_us: Option<u64>) -> Vec<u8> {
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
        start_by_us,
    };
    let mut line = serde_json::to_vec(&msg).expect("a job serializes");
    line.push(b'\n');
    line
}

/// An instant as the host's `CLOCK_MONOTONIC` in microseconds, the clock
/// a program compares `start_by_us` with (std's `Instant` reads the same
/// clock on Linux, but does not show its value).
pub(super) fn monotonic_us(at: std::time::Instant) -> u64 {
    let now = std::time::Instant::now();
    let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .expect("CLOCK_MONOTONIC is always there");
    let now_us = ts.tv_sec() as u64 * 1_000_000 + ts.tv_nsec() as u64 / 1000;
    if at >= now {
        now_us + at.duration_since(now).as_micros() as u64
    } else {
        now_us.saturating_sub(now.duration_since(at).as_micros() as u64)
    }
}

/// A resident program's reply: an outcome, or `skip` (a job written ahead
/// that it did not start).
#[derive(Debug, PartialEq)]
pub(super) enum Reply {
    Outcome(Outcome),
    Skip,
}

/// A reply line: (id, reply), or why it breaks the protocol.
pub(super) fn parse_reply(line: &[u8]) -> Result<(String, Reply), String> {
    let (id, reply) = parse(line)?;
    Ok((id.ok_or("a reply must name the job's id")?, reply))
}

/// A reply line where the id is optional (an exec handler's fd 3).
pub(crate) fn parse_reply_any(line: &[u8]) -> Result<(Option<String>, Outcome), String> {
    match parse(line)? {
        (id, Reply::Outcome(o)) => Ok((id, o)),
        (_, Reply::Skip) => Err("a skip reply is for a resident program's look-ahead".into()),
    }
}

fn parse(line: &[u8]) -> Result<(Option<String>, Reply), String> {
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
        "skip" => return Ok((id, Reply::Skip)),
        other => return Err(format!("unknown reply type {other:?}")),
    };
    Ok((id, Reply::Outcome(outcome)))
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
            (
                "a",
                Reply::Outcome(Outcome::retry_after("x", Duration::from_secs(600)))
            )
        );
        let (_, o) = parse_reply(br#"{"type":"dead","id":"a"}"#).unwrap();
        assert!(matches!(o, Reply::Outcome(Outcome::Permanent { .. })));
        assert_eq!(
            parse_reply(br#"{"type":"done","id":"a"}"#).unwrap().1,
            Reply::Outcome(Outcome::Done)
        );
        assert_eq!(
            parse_reply(br#"{"type":"skip","id":"a"}"#).unwrap().1,
            Reply::Skip
        );
        assert!(parse_reply_any(br#"{"type":"skip"}"#)
            .unwrap_err()
            .contains("look-ahead"));
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
            Reply::Outcome(Outcome::Retry { error, .. }) => {
                assert!(error.len() <= ERROR_MAX && !error.is_empty())
            }
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn monotonic_us_reads_the_clock_programs_compare_with() {
        let now = std::time::Instant::now();
        let a = monotonic_us(now);
        let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).unwrap();
        let b = ts.tv_sec() as u64 * 1_000_000 + ts.tv_nsec() as u64 / 1000;
        assert!(a <= b && b - a < 1_000_000, "{a} {b}");
        let later = monotonic_us(now + Duration::from_secs(5));
        assert!((later - a).abs_diff(5_000_000) < 1_000, "{a} {later}");
    }
}
