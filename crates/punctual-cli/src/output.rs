//! Printing: times, relative durations, payloads, padded tables and JSON.

use std::borrow::Cow;
use std::io::{self, Write};

use chrono::{DateTime, SecondsFormat};
use serde::Serialize;

/// Writes `text` to stdout. A closed pipe (`punctual topics | head -1`) is not
/// an error: the reader has what it wanted.
pub(crate) fn emit(text: &str) -> anyhow::Result<()> {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}

/// Prints `value` as pretty JSON and a newline.
pub(crate) fn emit_json<T: Serialize + ?Sized>(value: &T) -> anyhow::Result<()> {
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    emit(&text)
}

/// Epoch milliseconds as RFC 3339 UTC with milliseconds:
/// `2030-01-01T09:00:00.250Z`.
pub(crate) fn time(ms: i64) -> String {
    match DateTime::from_timestamp_millis(ms) {
        Some(t) => t.to_rfc3339_opts(SecondsFormat::Millis, true),
        None => format!("{ms} ms since the epoch"),
    }
}

/// `ms` relative to `now_ms`: `in 3m12s`, `4s ago`, `now`.
pub(crate) fn relative(ms: i64, now_ms: i64) -> String {
    let d = ms - now_ms;
    match d {
        0 => "now".to_string(),
        d if d > 0 => format!("in {}", span(d as u64)),
        d => format!("{} ago", span(d.unsigned_abs())),
    }
}

/// A time and where it is relative to now: `2030-01-01T09:00:00.000Z (in 3m12s)`.
pub(crate) fn time_and_relative(ms: i64, now_ms: i64) -> String {
    format!("{} ({})", time(ms), relative(ms, now_ms))
}

/// A compact span of milliseconds: `250ms`, `4s`, `3m12s`, `2h5m`, `3d4h`
/// (the two largest units, truncated).
pub(crate) fn span(ms: u64) -> String {
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let s = ms / 1000;
    if s < 10 && !ms.is_multiple_of(1000) {
        return format!("{}.{}s", s, (ms % 1000) / 100);
    }
    let units = [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)];
    let mut out = String::new();
    let mut rest = s;
    let mut taken = 0;
    for (name, size) in units {
        let n = rest / size;
        if n > 0 || taken > 0 {
            if n > 0 {
                out.push_str(&format!("{n}{name}"));
            }
            rest %= size;
            taken += 1;
            if taken == 2 {
                break;
            }
        }
    }
    out
}

/// A payload for people: its text when it is UTF-8, else the bytes with
/// non-printable ones escaped (`\xff`).
pub(crate) fn payload_text(p: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(p) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => Cow::Owned(p.escape_ascii().to_string()),
    }
}

/// The first `max` characters of `s` on one line (newlines and tabs shown as
/// `\n`, `\t`), with `…` when cut.
pub(crate) fn one_line(s: &str, max: usize) -> String {
    let mut out = String::new();
    for (n, c) in s.chars().enumerate() {
        if n == max {
            out.push('…');
            break;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&c.escape_default().to_string()),
            c => out.push(c),
        }
    }
    out
}

/// A payload as JSON fields: `payload` (its text, when UTF-8) or
/// `payload_hex` (when not), and `payload_bytes`.
pub(crate) fn payload_json(p: &[u8], obj: &mut serde_json::Map<String, serde_json::Value>) {
    match std::str::from_utf8(p) {
        Ok(s) => {
            obj.insert("payload".into(), s.into());
        }
        Err(_) => {
            obj.insert("payload".into(), serde_json::Value::Null);
            let hex: String = p.iter().map(|b| format!("{b:02x}")).collect();
            obj.insert("payload_hex".into(), hex.into());
        }
    }
    obj.insert("payload_bytes".into(), p.len().into());
}

/// A table with padded columns; the last column is not padded.
#[derive(Debug)]
pub(crate) struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these headers.
    pub(crate) fn new(headers: &[&str]) -> Table {
        Table {
            rows: vec![headers.iter().map(|h| h.to_string()).collect()],
        }
    }

    /// Adds a row (as many cells as headers).
    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The rendered table, one line per row.
    pub(crate) fn render(&self) -> String {
        let cols = self.rows[0].len();
        let mut widths = vec![0; cols];
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for row in &self.rows {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                if i + 1 == cols {
                    line.push_str(cell);
                } else {
                    let pad = widths[i] - cell.chars().count();
                    line.push_str(cell);
                    line.push_str(&" ".repeat(pad + 2));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_utc_with_millis() {
        assert_eq!(time(1_893_488_400_250), "2030-01-01T09:00:00.250Z");
        assert_eq!(time(0), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn relative_times() {
        assert_eq!(relative(1000 + 192_000, 1000), "in 3m12s");
        assert_eq!(relative(1000, 5000), "4s ago");
        assert_eq!(relative(5, 5), "now");
        assert_eq!(span(250), "250ms");
        assert_eq!(span(4_300), "4.3s");
        assert_eq!(span(45_000), "45s");
        assert_eq!(span(3_600_000 + 300_000 + 7_000), "1h5m");
        assert_eq!(span(3_600_000 + 7_000), "1h");
        assert_eq!(span(2 * 86_400_000 + 3_600_000), "2d1h");
    }

    #[test]
    fn payloads_are_shown_as_text_or_escaped() {
        assert_eq!(payload_text(b"hello"), "hello");
        assert_eq!(payload_text(b"\xff\x00a"), "\\xff\\x00a");
        assert_eq!(one_line("a\nb", 10), "a\\nb");
        assert_eq!(one_line("abcdef", 3), "abc…");
    }

    #[test]
    fn tables_pad_all_but_the_last_column() {
        let mut t = Table::new(&["A", "LONGER"]);
        t.row(vec!["xyz".into(), "1".into()]);
        assert_eq!(t.render(), "A    LONGER\nxyz  1\n");
    }
}
