//! The statistics of the phases' samples: a spread's percentiles
//! (nearest rank) and a rate.

use std::time::Duration;

use serde::Serialize;

use crate::probe::round;

/// Min, p50, p99 and max of samples in microseconds, reported in ms.
pub(crate) struct Spread {
    sorted: Vec<i64>,
}

impl Spread {
    pub(crate) fn of(mut v: Vec<i64>) -> Spread {
        v.sort_unstable();
        Spread { sorted: v }
    }

    /// Nearest-rank percentile, in ms (0 when empty).
    fn ms(&self, p: f64) -> f64 {
        if self.sorted.is_empty() {
            return 0.0;
        }
        let n = self.sorted.len();
        let i = ((p * n as f64).ceil() as usize).clamp(1, n) - 1;
        round(self.sorted[i] as f64 / 1000.0, 2)
    }

    pub(crate) fn percentiles(&self) -> Percentiles {
        Percentiles {
            min: self.ms(0.0),
            p50: self.ms(0.5),
            p99: self.ms(0.99),
            max: self.ms(1.0),
        }
    }

    pub(crate) fn text(&self) -> String {
        format!(
            "min {} ms, p50 {} ms, p99 {} ms, max {} ms",
            self.ms(0.0),
            self.ms(0.5),
            self.ms(0.99),
            self.ms(1.0)
        )
    }
}

pub(crate) fn per_s(n: u64, d: Duration) -> f64 {
    (n as f64 / d.as_secs_f64().max(1e-9)).round()
}

/// Lateness percentiles, ms.
#[derive(Serialize)]
pub(crate) struct Percentiles {
    min: f64,
    p50: f64,
    pub(crate) p99: f64,
    pub(crate) max: f64,
}
