//! A phase's report: one JSON line (the protocol's `system` and `phase`,
//! then the phase's own fields in the order of its struct) and one text
//! line for a person; and the `segments` line that sets three of them side
//! by side.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What one phase found: its JSON line (fields in the order of the phase's
/// struct, the protocol's `system` and `phase` first) and the text for a
/// person.
#[derive(Debug, Clone)]
pub(crate) struct Report {
    fields: Vec<(String, Value)>,
    /// The text for a person.
    pub text: String,
}

/// A phase's line: the protocol's two fields, then the phase's own.
#[derive(Serialize)]
struct Line<'a, T> {
    system: &'static str,
    phase: &'a str,
    #[serde(flatten)]
    fields: &'a T,
}

/// The fields of a JSON object, in their order.
struct Ordered(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Fields;
        impl<'de> serde::de::Visitor<'de> for Fields {
            type Value = Ordered;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Ordered, A::Error> {
                let mut out = Vec::new();
                while let Some(entry) = map.next_entry::<String, Value>()? {
                    out.push(entry);
                }
                Ok(Ordered(out))
            }
        }
        d.deserialize_map(Fields)
    }
}

impl Serialize for Report {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.fields.len()))?;
        for (k, v) in &self.fields {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl Report {
    /// The report of `phase` with the fields of its struct `fields`.
    pub(crate) fn of<T: Serialize>(phase: &str, fields: &T) -> Report {
        let line = Line {
            system: "punctual",
            phase,
            fields,
        };
        let text = serde_json::to_string(&line).expect("a phase's fields serialize");
        let Ordered(fields) = serde_json::from_str(&text).expect("a JSON object");
        Report {
            fields,
            text: String::new(),
        }
    }

    /// Adds the fields of `more` after the others (the floor's ratios, once
    /// the floor is known), replacing any of the same name.
    pub(crate) fn extend<T: Serialize>(&mut self, more: &T) {
        let text = serde_json::to_string(more).expect("fields serialize");
        let Ordered(more) = serde_json::from_str(&text).expect("a JSON object");
        for (k, v) in more {
            match self.fields.iter_mut().find(|(name, _)| *name == k) {
                Some(f) => f.1 = v,
                None => self.fields.push((k, v)),
            }
        }
    }

    pub(crate) fn get(&self, k: &str) -> Option<&Value> {
        self.fields.iter().find(|(name, _)| name == k).map(|f| &f.1)
    }

    pub(crate) fn phase(&self) -> &str {
        self.get("phase").and_then(Value::as_str).unwrap_or("?")
    }

    pub(crate) fn ok(&self) -> bool {
        self.get("ok").and_then(Value::as_bool).unwrap_or(false)
    }

    pub(crate) fn jobs_per_s(&self) -> Option<f64> {
        self.get("jobs_per_s").and_then(Value::as_f64)
    }

    /// The JSON line.
    pub(crate) fn line(&self) -> String {
        serde_json::to_string(self).expect("a JSON object")
    }
}

pub(crate) fn emit(r: &Report, json: bool) {
    if json {
        println!("{}", r.line());
    } else {
        println!("{}", r.text);
    }
}

/// The `segments` line.
#[derive(Serialize)]
struct Segments {
    produce_jobs_per_s: f64,
    promote_jobs_per_s: f64,
    consume_jobs_per_s: f64,
    slowest: &'static str,
    ok: bool,
}

/// The three segments side by side, when all three ran: which is slowest.
pub(crate) fn segments(reports: &[Report]) -> Option<Report> {
    let find = |p: &str| {
        reports
            .iter()
            .find(|r| r.phase() == p)
            .and_then(Report::jobs_per_s)
    };
    let produce = find("enqueue")?;
    let promote = find("promote")?;
    let consume = find("consume")?;
    let (slowest, _) = [
        ("produce", produce),
        ("promote", promote),
        ("consume", consume),
    ]
    .into_iter()
    .min_by(|a, b| a.1.total_cmp(&b.1))?;
    let ok = ["enqueue", "promote", "consume"].iter().all(|p| {
        reports
            .iter()
            .find(|r| r.phase() == *p)
            .is_some_and(Report::ok)
    });
    let mut r = Report::of(
        "segments",
        &Segments {
            produce_jobs_per_s: produce,
            promote_jobs_per_s: promote,
            consume_jobs_per_s: consume,
            slowest,
            ok,
        },
    );
    r.text = format!(
        "{:<10} produce {:.0}, promote {:.0}, consume {:.0} jobs/s: the slowest is {slowest}",
        "segments", produce, promote, consume
    );
    Some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slowest_segment_is_named() {
        #[derive(Serialize)]
        struct Throughput {
            jobs_per_s: f64,
            ok: bool,
        }
        let mk = |p: &str, v: f64| {
            Report::of(
                p,
                &Throughput {
                    jobs_per_s: v,
                    ok: true,
                },
            )
        };
        let rs = vec![mk("enqueue", 3.0), mk("promote", 2.0), mk("consume", 1.0)];
        let s = segments(&rs).unwrap();
        assert_eq!(s.get("slowest").unwrap(), "consume");
        assert!(s.ok());
        assert!(s
            .line()
            .starts_with(r#"{"system":"punctual","phase":"segments","produce_jobs_per_s":3.0"#));
        assert!(segments(&rs[..2]).is_none());
    }

    #[test]
    fn a_line_keeps_the_order_of_its_struct_and_leaves_out_what_is_absent() {
        #[derive(Serialize)]
        struct Phase {
            n: u64,
            ok: bool,
            #[serde(skip_serializing_if = "Option::is_none")]
            lost: Option<u64>,
            #[serde(flatten)]
            left: Option<Left>,
            profile: std::collections::BTreeMap<&'static str, f64>,
        }
        #[derive(Serialize)]
        struct Left {
            zeta: u64,
            alpha: u64,
        }
        let profile = [("b", 1.5), ("a", 2.0)].into_iter().collect();
        let mut r = Report::of(
            "drain",
            &Phase {
                n: 3,
                ok: false,
                lost: None,
                left: Some(Left { zeta: 1, alpha: 2 }),
                profile,
            },
        );
        assert_eq!(
            r.line(),
            r#"{"system":"punctual","phase":"drain","n":3,"ok":false,"zeta":1,"alpha":2,"profile":{"a":2.0,"b":1.5}}"#
        );
        assert_eq!((r.phase(), r.ok()), ("drain", false));
        #[derive(Serialize)]
        struct Ratio {
            floor_ratio: f64,
            ok: bool,
        }
        r.extend(&Ratio {
            floor_ratio: 1.25,
            ok: true,
        });
        assert!(r.line().ends_with(
            r#""ok":true,"zeta":1,"alpha":2,"profile":{"a":2.0,"b":1.5},"floor_ratio":1.25}"#
        ));
    }
}
