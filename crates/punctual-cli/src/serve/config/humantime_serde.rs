//! Serde helpers for durations written as "30s", "2m", "250ms".

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer};

pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&humantime::format_duration(*d).to_string())
}

pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = String::deserialize(d)?;
    humantime::parse_duration(&s).map_err(|e| {
        serde::de::Error::custom(format!(
            "{s:?} is not a duration like 30s, 5m or 250ms ({e})"
        ))
    })
}

pub(super) mod option {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => super::serialize(d, s),
            None => s.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        // Absent or null (as the supervisor passes it on to its children).
        match Option::<String>::deserialize(d)? {
            None => Ok(None),
            Some(s) => humantime::parse_duration(&s).map(Some).map_err(|e| {
                serde::de::Error::custom(format!(
                    "{s:?} is not a duration like 30s, 5m or 250ms ({e})"
                ))
            }),
        }
    }
}
