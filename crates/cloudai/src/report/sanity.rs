//! Physical sanity: a bus bandwidth above what the links can carry is a measurement to distrust, not a record.

#[derive(Clone, Copy, Debug, Default)]
pub struct Peaks {
    pub nvlink_gbps: Option<f64>,
    pub net_gbps: Option<f64>,
}

impl Peaks {
    pub fn of(sys: &crate::config::system::SystemConfig) -> Self {
        Peaks {
            nvlink_gbps: sys.nvlink_peak_gbps,
            net_gbps: sys.net_peak_gbps,
        }
    }

    /// A busbw no link of this shape can carry: the measurement is suspect (nccl-tests' 2-node tree busbw is known
    /// to exceed the wire rate).
    pub(super) fn suspect(
        &self,
        metrics: &serde_json::Map<String, serde_json::Value>,
        nodes: usize,
    ) -> Option<String> {
        let busbw = metrics.get("peak_busbw_gbps")?.as_f64()?;
        let size = metrics
            .get("peak_size_bytes")
            .and_then(|v| v.as_u64())
            .unwrap_or(0);
        let (limit, link) = if nodes <= 1 {
            (self.nvlink_gbps?, "NVLink")
        } else {
            (self.net_gbps?, "network")
        };
        (busbw > limit).then(|| {
            format!(
                "above the physical peak: measurement suspect (busbw {busbw:.2} GB/s at {} exceeds the {link} peak of {limit} GB/s for a {nodes}-node run)",
                crate::html::size_iec(size)
            )
        })
    }
}
