//! Per-job options in the record's first field (PROTOCOL.md "Per-job
//! options"): `M` = `<max attempts or empty>[;<letter><value>]*`, with
//! `e<deadline, epoch ms, base 36>`, `t<timeout ms>` and `g<group>` as
//! stored (a producer passes `x<ms>`, which enqueue turns into `e`).

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
}

/// Decodes an M field as the scripts do (`opts_of` in
/// lua/includes/record.lua): None when it does not match
/// `^%d*(;[etg][^;:]*)*$`. Numbers past i64 saturate.
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
            }
        );
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
