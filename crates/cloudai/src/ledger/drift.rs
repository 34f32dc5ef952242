//! Drift before failure: a metric that slides beyond its own noise over recent runs, while every run may still
//! pass its threshold. Pure arithmetic on one series (oldest first); documented in docs/ledger.md.
//!
//! The rule, for a series of at least [`MIN_RUNS`] values (the last [`NOISE_WINDOW`] are looked at):
//! - **noise** σ: from the k run-to-run differences Δ (a trend does not count as noise), the larger of
//!   `1.4826 × MAD(Δ)` and their standard deviation, over √2, widened by `1 + 1/√k` (a few runs can look quieter
//!   than they are), and never below [`NOISE_FLOOR`] of the series' median (identical values have no noise, not
//!   zero tolerance);
//! - **slide** over each window of the last w ∈ {5, 10, 20} runs (those it has): the least-squares line's fall from
//!   the window's first run to its last, as a fraction of the median;
//! - the window's **standard error** of that fall: `σ × (w − 1) / √Σ(t − t̄)²`;
//! - **flagged** when, in some window, the fall exceeds both [`MIN_SLIDE`] and [`SIGMAS`] standard errors, and the
//!   newest value lies below the median by more than two σ (a series that already came back is not drifting).
//!
//! For a metric where lower is better (a time, a latency) the series is mirrored first.

use serde::Serialize;

/// Fewest runs a series needs before it is judged.
pub(crate) const MIN_RUNS: usize = 5;
/// The runs looked at (the newest ones).
pub(crate) const NOISE_WINDOW: usize = 30;
/// σ is at least this fraction of the median.
pub(crate) const NOISE_FLOOR: f64 = 0.005;
/// A fall smaller than this fraction is not worth a flag, however clean the series.
pub(crate) const MIN_SLIDE: f64 = 0.02;
/// Standard errors a fall must exceed.
pub(crate) const SIGMAS: f64 = 5.0;
const WINDOWS: [usize; 3] = [5, 10, 20];

/// What the rule saw in a series.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Finding {
    pub flagged: bool,
    /// Runs judged.
    pub runs: usize,
    pub median: f64,
    /// σ as a fraction of the median.
    pub noise: f64,
    /// The largest fall over a window, as a fraction of the median (positive: falling).
    pub slide: f64,
    /// The window (runs) of that fall.
    pub window: usize,
    /// That fall in standard errors.
    pub sigmas: f64,
    /// The newest value against the median, as a fraction (negative: below).
    pub latest: f64,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The noise band of a series: (median, σ), σ robust as the rule says.
pub fn band(values: &[f64]) -> (f64, f64) {
    let tail = &values[values.len().saturating_sub(NOISE_WINDOW)..];
    let m = median(&mut tail.to_vec());
    let d: Vec<f64> = tail.windows(2).map(|w| w[1] - w[0]).collect();
    let sigma = if d.is_empty() {
        0.0
    } else {
        let k = d.len() as f64;
        let md = median(&mut d.clone());
        let mut dev: Vec<f64> = d.iter().map(|x| (x - md).abs()).collect();
        let mad = 1.4826 * median(&mut dev);
        let mean = d.iter().sum::<f64>() / k;
        let sd = (d.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (k - 1.0).max(1.0)).sqrt();
        // the larger of the robust and the plain estimate, widened for few differences (a handful of runs can
        // look quieter than they are)
        mad.max(sd) / std::f64::consts::SQRT_2 * (1.0 + 1.0 / k.sqrt())
    };
    (m, sigma.max(NOISE_FLOOR * m.abs()))
}

/// Judges one series (oldest first); `higher_is_better` false mirrors it (times, latencies).
pub fn judge(values: &[f64], higher_is_better: bool) -> Finding {
    let v: Vec<f64> = values
        .iter()
        .copied()
        .filter(|x| x.is_finite())
        .map(|x| if higher_is_better { x } else { -x })
        .collect();
    let tail = &v[v.len().saturating_sub(NOISE_WINDOW)..];
    if tail.len() < MIN_RUNS {
        return Finding {
            runs: tail.len(),
            ..Default::default()
        };
    }
    let (m, sigma) = band(tail);
    let scale = m.abs().max(f64::MIN_POSITIVE);
    let latest = (tail[tail.len() - 1] - m) / scale;
    let mut best = Finding {
        runs: tail.len(),
        median: if higher_is_better { m } else { -m },
        noise: sigma / scale,
        latest: if higher_is_better { latest } else { -latest },
        ..Default::default()
    };
    for w in WINDOWS.iter().copied().filter(|w| *w <= tail.len()) {
        let win = &tail[tail.len() - w..];
        let n = w as f64;
        let tbar = (n - 1.0) / 2.0;
        let ybar = win.iter().sum::<f64>() / n;
        let sxx: f64 = (0..w).map(|t| (t as f64 - tbar).powi(2)).sum();
        let sxy: f64 = win
            .iter()
            .enumerate()
            .map(|(t, y)| (t as f64 - tbar) * (y - ybar))
            .sum();
        let slope = sxy / sxx;
        let fall = -slope * (n - 1.0) / scale;
        let se = sigma * (n - 1.0) / sxx.sqrt() / scale;
        let sig = if se > 0.0 { fall / se } else { 0.0 };
        if fall > best.slide {
            best.slide = fall;
            best.window = w;
            best.sigmas = sig;
        }
        if fall > MIN_SLIDE && sig > SIGMAS && (tail[tail.len() - 1] - m) < -2.0 * sigma {
            best.flagged = true;
            best.slide = fall;
            best.window = w;
            best.sigmas = sig;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (the tests need no crate for it).
    struct Lcg(u64);
    impl Lcg {
        fn uniform(&mut self) -> f64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((self.0 >> 11) as f64) / ((1u64 << 53) as f64)
        }
    }

    #[test]
    fn a_steady_one_percent_fall_is_flagged_within_five_runs() {
        let series: Vec<f64> = (0..5).map(|k| 180.0 * 0.99f64.powi(k)).collect();
        let f = judge(&series, true);
        assert!(f.flagged, "{f:?}");
        assert!((f.slide - 0.04).abs() < 0.005, "{f:?}");
        // four runs are too few to judge
        assert!(!judge(&series[..4], true).flagged);
    }

    #[test]
    fn two_percent_noise_is_never_flagged_over_a_hundred_runs() {
        for seed in 1..=20u64 {
            let mut r = Lcg(seed);
            let series: Vec<f64> = (0..100)
                .map(|_| 180.0 * (1.0 + (r.uniform() * 2.0 - 1.0) * 0.02))
                .collect();
            for n in MIN_RUNS..=series.len() {
                let f = judge(&series[..n], true);
                assert!(!f.flagged, "seed {seed}, run {n}: {f:?}");
            }
        }
    }

    #[test]
    fn a_fall_under_noise_is_found_over_a_longer_window_and_times_are_mirrored() {
        let mut r = Lcg(7);
        let mut series: Vec<f64> = (0..20)
            .map(|_| 100.0 * (1.0 + (r.uniform() * 2.0 - 1.0) * 0.02))
            .collect();
        series.extend(
            (1..=10).map(|k| {
                100.0 * (1.0 - 0.01 * k as f64) * (1.0 + (r.uniform() * 2.0 - 1.0) * 0.02)
            }),
        );
        assert!(judge(&series, true).flagged);
        // a time that grows 1 % per run is the same slide
        let times: Vec<f64> = (0..6).map(|k| 50.0 * 1.01f64.powi(k)).collect();
        assert!(judge(&times, false).flagged);
        assert!(!judge(&times, true).flagged);
        // a series that fell and came back is not drifting
        let back = [100.0, 100.0, 97.0, 94.0, 91.0, 100.0];
        assert!(!judge(&back, true).flagged);
    }
}
