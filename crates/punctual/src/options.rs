//! Per-job options in the record's first field (PROTOCOL.md "Per-job
//! options"): `M` = `<max attempts or empty>[;<letter><value>]*`, with
//! `e<deadline, epoch ms, base 36>`, `t<timeout ms>`, `g<group>`,
//! `p<traceparent>` and `s<tracestate, with % ; : escaped>` as stored (a
//! producer passes `x<ms>`, which enqueue turns into `e`).

use crate::error::{Error, Result};

/// Longest group name, in bytes ([`validate_group`]).
///
/// ```
/// use punctual::{validate_group, MAX_GROUP_LEN};
/// assert!(validate_group(&"g".repeat(MAX_GROUP_LEN)).is_ok());
/// assert!(validate_group(&"g".repeat(MAX_GROUP_LEN + 1)).is_err());
/// ```
pub const MAX_GROUP_LEN: usize = 64;

/// Checks a group name ([`crate::Job::group`]): 1 to [`MAX_GROUP_LEN`]
/// bytes of ASCII letters, digits, `_`, `.`, `@` and `-`, the same rule the
/// enqueue script applies.
///
/// ```
/// assert!(punctual::validate_group("shop-17.eu@acme").is_ok());
/// let err = punctual::validate_group("shop 17").unwrap_err();
/// assert_eq!(err.kind(), punctual::ErrorKind::InvalidInput);
/// assert!(punctual::validate_group("").is_err());
/// ```
pub fn validate_group(group: &str) -> Result<()> {
    let ok = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'@' | b'-');
    if group.is_empty() || group.len() > MAX_GROUP_LEN || !group.bytes().all(|b| ok(&b)) {
        return Err(Error::invalid(format!(
            "invalid group {group:?}: a group is 1 to {MAX_GROUP_LEN} bytes of ASCII letters, digits, _ . @ -"
        )));
    }
    Ok(())
}

/// Longest tracestate, in bytes ([`validate_tracestate`]).
///
/// ```
/// use punctual::{validate_tracestate, MAX_TRACESTATE_LEN};
/// assert!(validate_tracestate(&"k".repeat(MAX_TRACESTATE_LEN)).is_ok());
/// assert!(validate_tracestate(&"k".repeat(MAX_TRACESTATE_LEN + 1)).is_err());
/// ```
pub const MAX_TRACESTATE_LEN: usize = 512;

/// Checks a W3C `traceparent` ([`crate::Job::traceparent`]):
/// `version-traceid-spanid-flags`, 2, 32, 16 and 2 lowercase hex digits,
/// the version not `ff`, neither id all zeros. The enqueue script applies
/// the same rule.
///
/// ```
/// let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
/// assert!(punctual::validate_traceparent(tp).is_ok());
/// let err = punctual::validate_traceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01")
///     .unwrap_err();
/// assert!(err.to_string().contains("trace id is all zeros"), "{err}");
/// assert!(punctual::validate_traceparent("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01").is_err());
/// ```
pub fn validate_traceparent(tp: &str) -> Result<()> {
    let bad = |why: &str| {
        Err(Error::invalid(format!(
            "invalid traceparent {tp:?}: {why}; a W3C traceparent is version-traceid-spanid-flags, \
             2, 32, 16 and 2 lowercase hex digits, e.g. 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        )))
    };
    let parts: Vec<&str> = tp.split('-').collect();
    let hex = |s: &str, n: usize| {
        s.len() == n && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    if parts.len() != 4
        || !hex(parts[0], 2)
        || !hex(parts[1], 32)
        || !hex(parts[2], 16)
        || !hex(parts[3], 2)
    {
        return bad("not four dash-separated fields of lowercase hex");
    }
    if parts[0] == "ff" {
        return bad("version ff is invalid");
    }
    if parts[1].bytes().all(|b| b == b'0') {
        return bad("the trace id is all zeros");
    }
    if parts[2].bytes().all(|b| b == b'0') {
        return bad("the parent span id is all zeros");
    }
    Ok(())
}

/// Checks a W3C `tracestate` ([`crate::Job::tracestate`]): at most
/// [`MAX_TRACESTATE_LEN`] bytes of printable ASCII. Its list members are
/// not parsed: the job carries it as given.
///
/// ```
/// assert!(punctual::validate_tracestate("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE").is_ok());
/// assert!(punctual::validate_tracestate("a=b\n").is_err());
/// ```
pub fn validate_tracestate(ts: &str) -> Result<()> {
    if ts.len() > MAX_TRACESTATE_LEN || !ts.bytes().all(|b| (b' '..=b'~').contains(&b)) {
        return Err(Error::invalid(format!(
            "invalid tracestate: a W3C tracestate is at most {MAX_TRACESTATE_LEN} bytes of printable ASCII (got {} bytes)",
            ts.len()
        )));
    }
    Ok(())
}

/// A tracestate as the record's `s` option holds it: `%`, `;` and `:`
/// written `%25`, `%3B` and `%3A`.
pub(crate) fn escape_tracestate(ts: &str) -> String {
    let mut out = String::with_capacity(ts.len());
    for c in ts.chars() {
        match c {
            '%' => out.push_str("%25"),
            ';' => out.push_str("%3B"),
            ':' => out.push_str("%3A"),
            c => out.push(c),
        }
    }
    out
}

/// The tracestate of an `s` option (any `%XX` decoded).
pub(crate) fn unescape_tracestate(v: &[u8]) -> String {
    let mut out = Vec::with_capacity(v.len());
    let mut i = 0;
    while i < v.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if v[i] == b'%' && i + 2 < v.len() {
            if let (Some(hi), Some(lo)) = (hex(v[i + 1]), hex(v[i + 2])) {
                out.push((hi * 16 + lo) as u8);
                i += 3;
                continue;
            }
        }
        out.push(v[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The first field of a record, decoded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RecordField {
    /// Max attempts, None for the topic's default.
    pub(crate) max: Option<i64>,
    /// `e`: the job may start only until this time, epoch ms.
    pub(crate) deadline_ms: Option<i64>,
    /// `t`: the handler timeout, ms.
    pub(crate) timeout_ms: Option<u64>,
    /// `g`: the group.
    pub(crate) group: Option<String>,
    /// `p`: the W3C traceparent.
    pub(crate) traceparent: Option<String>,
    /// `s`: the W3C tracestate, unescaped.
    pub(crate) tracestate: Option<String>,
}

/// Decodes an M field as the scripts do (`opts_of` in
/// lua/includes/opts_of.lua): None when it does not match
/// `^%d*(;[etgps][^;:]*)*$`. Numbers past i64 saturate.
pub(crate) fn parse_field(m: &[u8]) -> Option<RecordField> {
    let num = |s: &[u8], radix: u32| -> Option<i64> {
        let s = std::str::from_utf8(s).ok()?;
        if s.is_empty() || !s.bytes().all(|b| (b as char).is_digit(radix)) {
            return None;
        }
        Some(i64::from_str_radix(s, radix).unwrap_or(i64::MAX))
    };
    let mut parts = m.split(|&b| b == b';');
    let digits = parts.next().unwrap_or_default();
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut out = RecordField {
        max: if digits.is_empty() {
            None
        } else {
            Some(num(digits, 10)?)
        },
        ..RecordField::default()
    };
    for opt in parts {
        let (&letter, v) = opt.split_first()?;
        if v.contains(&b':') {
            return None;
        }
        match letter {
            b'e' => out.deadline_ms = num(v, 36),
            b't' => out.timeout_ms = num(v, 10).map(|t| t as u64),
            b'g' => out.group = Some(String::from_utf8_lossy(v).into_owned()),
            b'p' => out.traceparent = Some(String::from_utf8_lossy(v).into_owned()),
            b's' => out.tracestate = Some(unescape_tracestate(v)),
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_decode_as_the_lua_does() {
        assert_eq!(parse_field(b""), Some(RecordField::default()));
        assert_eq!(parse_field(b"5").unwrap().max, Some(5));
        let f = parse_field(b"3;ezz;t5000;gacme").unwrap();
        assert_eq!(
            f,
            RecordField {
                max: Some(3),
                deadline_ms: Some(36 * 36 - 1),
                timeout_ms: Some(5000),
                group: Some("acme".into()),
                ..RecordField::default()
            }
        );
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let f = parse_field(format!(";gacme;p{tp};sk=a%3Bb%3Ac%25").as_bytes()).unwrap();
        assert_eq!(f.traceparent.as_deref(), Some(tp));
        assert_eq!(f.tracestate.as_deref(), Some("k=a;b:c%"));
        assert_eq!(escape_tracestate("k=a;b:c%"), "k=a%3Bb%3Ac%25");
        let f = parse_field(b";gshop-1").unwrap();
        assert_eq!((f.max, f.group.as_deref()), (None, Some("shop-1")));
        for bad in [
            &b"x"[..],
            b"3x",
            b";",
            b"3;",
            b";q1",
            b";t1;",
            b";;t1",
            b"-1",
        ] {
            assert!(
                parse_field(bad).is_none(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn traceparents_follow_the_w3c_format() {
        let ok = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert!(validate_traceparent(ok).is_ok());
        for (bad, why) in [
            ("", "four"),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
                "four",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
                "four",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
                "four",
            ),
            (
                "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                "version ff",
            ),
            (
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                "trace id",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                "span id",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
                "four",
            ),
        ] {
            let err = validate_traceparent(bad).unwrap_err().to_string();
            assert!(
                err.contains(why) && err.contains("traceparent"),
                "{bad}: {err}"
            );
        }
        assert!(validate_tracestate(&"a".repeat(512)).is_ok());
        assert!(validate_tracestate(&"a".repeat(513)).is_err());
        assert!(validate_tracestate("a=é").is_err());
        assert_eq!(unescape_tracestate(b"a%3B%"), "a;%");
    }

    #[test]
    fn groups_follow_the_scripts_rule() {
        for ok in ["a", "A-z_0.9@x", &"g".repeat(64)] {
            assert!(validate_group(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a b", "a;b", "a:b", "é", "a/b", &"g".repeat(65)] {
            let err = validate_group(bad).unwrap_err();
            assert!(err.to_string().contains("group"), "{err}");
        }
    }
}
