//! What a benchmark measures, named: a [`Metric`] (name, unit, which way is better) and the [`Point`]s of an
//! iteration, each one value of one metric at one message size, keyed for baselines and the ledger. NCCL's bus
//! bandwidth is one metric among others: OSU's latency tests are graded on latency (lower is better), its bandwidth
//! tests on their bandwidth, never squeezed into a bus bandwidth.

use serde::Serialize;

/// A measured quantity: its name, its unit and whether more of it is better. Serialized as its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Metric {
    pub name: &'static str,
    pub unit: &'static str,
    pub higher_is_better: bool,
}

impl Metric {
    /// Bus bandwidth (nccl-tests' `busbw`, UCC perftest's bandwidth): comparable across rank counts.
    pub const BUSBW: Metric = Metric {
        name: "busbw",
        unit: "GB/s",
        higher_is_better: true,
    };
    /// Bandwidth of a transfer (OSU's `MB/s` column over 1,000, nixlbench's GB/s).
    pub const BANDWIDTH: Metric = Metric {
        name: "bandwidth",
        unit: "GB/s",
        higher_is_better: true,
    };
    /// Time of one operation (OSU's average latency).
    pub const LATENCY: Metric = Metric {
        name: "latency",
        unit: "us",
        higher_is_better: false,
    };
    /// Every metric a point can carry: what a baseline file or the ledger may name.
    pub const ALL: &'static [Metric] = &[Metric::BUSBW, Metric::BANDWIDTH, Metric::LATENCY];

    /// The metric of this name.
    pub fn named(name: &str) -> Option<Metric> {
        Self::ALL.iter().copied().find(|m| m.name == name)
    }

    /// The names [`Metric::named`] knows, for an error's "expected".
    pub fn names() -> String {
        Self::ALL
            .iter()
            .map(|m| m.name)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// How much worse `value` is than `base`, as a fraction of `base` (negative: better). None when `base` cannot
    /// be compared against (not positive, not finite) or `value` is not finite.
    pub fn loss(&self, base: f64, value: f64) -> Option<f64> {
        if !(base.is_finite() && base > 0.0 && value.is_finite()) {
            return None;
        }
        Some(if self.higher_is_better {
            (base - value) / base
        } else {
            (value - base) / base
        })
    }

    /// `busbw (GB/s)`: a chart axis or a table header.
    pub fn label(&self) -> String {
        format!("{} ({})", self.name, self.unit)
    }
}

/// One measured value at one message size, with what identifies it across runs (collective, data type, shape).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Point {
    pub collective: String,
    pub dtype: String,
    /// Nodes × GPUs per node of the run that measured it (0 when the output does not say).
    pub nodes: u64,
    pub gpus_per_node: u64,
    pub size: u64,
    /// What `value` and `in_place` measure.
    pub metric: Metric,
    pub value: f64,
    /// The same metric measured in place, for benchmarks that measure both sides (nccl-tests).
    pub in_place: Option<f64>,
    /// Time of one operation, microseconds, where the output gives it (out of place, in place).
    pub time_us: Option<f64>,
    pub time_ip_us: Option<f64>,
}

impl Point {
    /// A point of `metric` with no in-place side and no time.
    pub fn new(collective: String, dtype: String, size: u64, metric: Metric, value: f64) -> Self {
        Point {
            collective,
            dtype,
            nodes: 0,
            gpus_per_node: 0,
            size,
            metric,
            value,
            in_place: None,
            time_us: None,
            time_ip_us: None,
        }
    }

    /// The measured sides: (`out-of-place`, value) and, when measured, (`in-place`, value).
    pub fn sides(&self) -> impl Iterator<Item = (&'static str, f64)> {
        std::iter::once(("out-of-place", self.value)).chain(self.in_place.map(|v| ("in-place", v)))
    }
}

impl Serialize for Metric {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name)
    }
}

/// One value per message size of one metric: an iteration's curve, charted and compared within and across runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Curve {
    pub metric: Metric,
    pub points: Vec<(u64, f64)>,
}

impl Default for Curve {
    /// No values (of bus bandwidth, what most curves are).
    fn default() -> Self {
        Curve {
            metric: Metric::BUSBW,
            points: Vec::new(),
        }
    }
}

impl Curve {
    pub fn new(metric: Metric, points: Vec<(u64, f64)>) -> Self {
        Curve { metric, points }
    }

    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_follows_the_direction_of_the_metric() {
        // 20% less bandwidth and 20% more latency are both a 20% loss
        assert_eq!(Metric::BUSBW.loss(100.0, 80.0), Some(0.2));
        assert_eq!(
            Metric::LATENCY.loss(10.0, 12.0).map(|l| (l * 1e6).round()),
            Some(200_000.0)
        );
        assert!(Metric::LATENCY.loss(10.0, 8.0).unwrap() < 0.0);
        assert!(Metric::BUSBW.loss(100.0, 120.0).unwrap() < 0.0);
        assert_eq!(Metric::BUSBW.loss(0.0, 1.0), None);
        assert_eq!(Metric::BUSBW.loss(1.0, f64::NAN), None);
    }

    #[test]
    fn names_round_trip() {
        for m in Metric::ALL {
            assert_eq!(Metric::named(m.name), Some(*m));
        }
        assert_eq!(Metric::named("busbw_oop"), None);
        assert_eq!(Metric::names(), "busbw, bandwidth, latency");
    }
}
