//! Parsers for values given on the command line or in batch input: durations,
//! times, sizes. Each error says what was wrong and what to give instead.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

const DURATION_HINT: &str = "give e.g. 250ms, 30s, 15m, 2h or 1h30m";
const TIME_HINT: &str = "give an RFC 3339 time such as 2030-01-01T09:00:00Z";

/// Largest `--max-payload`: Redis refuses bulk strings over 512 MiB.
const MAX_MAX_PAYLOAD: usize = 512 * 1024 * 1024;

/// A non-negative duration such as `30s`, `15m`, `2h`, `1h30m`, `250ms`, of at
/// most [`punctual::MAX_DELAY`].
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err(format!("empty duration; {DURATION_HINT}"));
    }
    if t.starts_with('-') {
        return Err(format!("durations may not be negative; {DURATION_HINT}"));
    }
    let d = humantime::parse_duration(t).map_err(|e| format!("{e}; {DURATION_HINT}"))?;
    if d > punctual::MAX_DELAY {
        return Err("durations are at most ten years".to_string());
    }
    Ok(d)
}

/// A rate such as `100/s`, `6000/m`, `500/h` or `50/10s` (jobs per period);
/// a plain number is per second. At least one job per period.
pub(crate) fn parse_rate(s: &str) -> Result<punctual::ReplayPace, String> {
    const HINT: &str = "give jobs per period, e.g. 100/s, 6000/m or 50/10s";
    let t = s.trim();
    let (n, per) = t.split_once('/').unwrap_or((t, "s"));
    let jobs: u64 = n
        .trim()
        .parse()
        .map_err(|_| format!("{t:?} is not a rate; {HINT}"))?;
    let per = per.trim();
    let per = if per.starts_with(|c: char| c.is_ascii_digit()) {
        parse_duration(per)
    } else {
        parse_duration(&format!("1{per}"))
    }
    .map_err(|e| format!("{t:?}: bad period: {e}"))?;
    let pace = punctual::ReplayPace::Rate { jobs, per };
    pace.validate().map_err(|e| format!("{t:?}: {e}; {HINT}"))?;
    Ok(pace)
}

/// An RFC 3339 time, not before 1970.
pub(crate) fn parse_time(s: &str) -> Result<SystemTime, String> {
    let t = s.trim();
    let dt = chrono::DateTime::parse_from_rfc3339(t).map_err(|e| {
        if humantime::parse_duration(t).is_ok() {
            format!("not a time ({e}); this looks like a duration: use --delay for that")
        } else {
            format!("not an RFC 3339 time ({e}); {TIME_HINT}")
        }
    })?;
    let st = SystemTime::from(dt);
    if st < UNIX_EPOCH {
        return Err(format!("times before 1970 are not supported; {TIME_HINT}"));
    }
    Ok(st)
}

/// A payload limit in bytes: 1 to 512 MiB.
pub(crate) fn parse_max_payload(s: &str) -> Result<usize, String> {
    let n: usize = s
        .trim()
        .parse()
        .map_err(|_| "expected a number of bytes, e.g. 65536".to_string())?;
    if n == 0 || n > MAX_MAX_PAYLOAD {
        return Err(format!(
            "the payload limit must be 1 to {MAX_MAX_PAYLOAD} bytes (Redis's largest string)"
        ));
    }
    Ok(n)
}

/// Refuses JSON that gives one key twice in an object (at any depth), which
/// serde_json would otherwise take silently, keeping the last value. The
/// error names the key. Syntax errors are left to the real parse.
pub(crate) fn no_duplicate_keys(json: &[u8]) -> Result<(), String> {
    let mut de = serde_json::Deserializer::from_slice(json);
    match serde::Deserialize::deserialize(&mut de) {
        Ok(NoDuplicates) => Ok(()),
        Err(e) if e.is_data() => Err(e
            .to_string()
            .split(" at line ")
            .next()
            .unwrap_or_default()
            .to_string()),
        Err(_) => Ok(()),
    }
}

/// Any JSON value, checked for keys given twice.
struct NoDuplicates;

impl<'de> serde::Deserialize<'de> for NoDuplicates {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NoDuplicates)
    }
}

impl<'de> serde::de::Visitor<'de> for NoDuplicates {
    type Value = NoDuplicates;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(NoDuplicates)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(NoDuplicates)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(NoDuplicates)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(NoDuplicates)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(NoDuplicates)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(NoDuplicates)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<NoDuplicates>()?.is_some() {}
        Ok(NoDuplicates)
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            map.next_value::<NoDuplicates>()?;
            if !seen.insert(key.clone()) {
                return Err(serde::de::Error::custom(format!(
                    "the key {key:?} is given twice in one object (JSON keys must be unique)"
                )));
            }
        }
        Ok(NoDuplicates)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_jobs_per_period() {
        let rate = |s| match parse_rate(s).unwrap() {
            punctual::ReplayPace::Rate { jobs, per } => (jobs, per.as_millis()),
            p => panic!("{p:?}"),
        };
        assert_eq!(rate("100/s"), (100, 1000));
        assert_eq!(rate("100"), (100, 1000));
        assert_eq!(rate("6000/m"), (6000, 60_000));
        assert_eq!(rate("500/h"), (500, 3_600_000));
        assert_eq!(rate("50/10s"), (50, 10_000));
        for bad in ["0/s", "fast", "-1/s", "10/", "10/0s", "1.5/s"] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations_in_human_units() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn bad_durations_say_what_to_give() {
        for bad in ["-5s", "5x", "", "30", "11years"] {
            let err = parse_duration(bad).unwrap_err();
            assert!(!err.is_empty(), "{bad}");
        }
        assert!(parse_duration("-5s").unwrap_err().contains("negative"));
        assert!(parse_duration("5x").unwrap_err().contains("30s"));
    }

    #[test]
    fn times_are_rfc3339() {
        let t = parse_time("2030-01-01T09:00:00.250Z").unwrap();
        let ms = t.duration_since(UNIX_EPOCH).unwrap().as_millis();
        assert_eq!(ms, 1_893_488_400_250);
        let with_offset = parse_time("2030-01-01T10:00:00.250+01:00").unwrap();
        assert_eq!(t, with_offset);
        assert!(parse_time("not-a-time").unwrap_err().contains("RFC 3339"));
        assert!(parse_time("30s").unwrap_err().contains("--delay"));
        assert!(parse_time("1969-12-31T23:59:59Z").is_err());
    }

    #[test]
    fn payload_limit_is_positive() {
        assert_eq!(parse_max_payload("65536"), Ok(65536));
        assert!(parse_max_payload("0").is_err());
        assert!(parse_max_payload("64k").is_err());
    }

    #[test]
    fn keys_given_twice_are_refused_by_name() {
        assert_eq!(no_duplicate_keys(br#"{"a":1,"b":[{"a":2}]}"#), Ok(()));
        let e = no_duplicate_keys(br#"{"payload":1,"payload":2}"#).unwrap_err();
        assert!(e.contains("\"payload\" is given twice"), "{e}");
        let e = no_duplicate_keys(br#"[{"payload":{"x":1,"y":2,"x":3}}]"#).unwrap_err();
        assert!(e.contains("\"x\""), "{e}");
        // Escapes are decoded first: "\u0061" is "a".
        assert!(no_duplicate_keys(br#"{"a":1,"\u0061":2}"#).is_err());
        // Syntax errors are for the real parser to report.
        assert_eq!(no_duplicate_keys(b"{not json"), Ok(()));
    }
}
