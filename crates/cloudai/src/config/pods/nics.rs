//! NCCL's network variables against the network a pod has: an interface name that cannot exist in the pod
//! (`NCCL_SOCKET_IFNAME=ib0` on the pod network, where there are `eth0` and Multus' `net1`…) is refused; an
//! `NCCL_IB_HCA` that names fewer HCAs than the RDMA devices or networks a GPU pod gets is a warning (NCCL would
//! leave rails unused).

use super::PodSettings;

/// Interface names a pod off the host network has: the pod network's `eth0`, loopback, and one per secondary
/// network (`net1`… unless the attachment names it, `ns/name@ifname`).
pub(crate) fn pod_interfaces(networks: &[String]) -> Vec<String> {
    let mut out = vec!["eth0".to_string(), "lo".to_string()];
    for (i, n) in networks.iter().enumerate() {
        out.push(match n.split_once('@') {
            Some((_, ifname)) if !ifname.is_empty() => ifname.to_string(),
            _ => format!("net{}", i + 1),
        });
    }
    out
}

/// An NCCL interface or HCA list as NCCL reads it: a leading `^` excludes the list, a leading `=` (after it)
/// makes its names exact rather than prefixes, then comma-separated names.
struct List<'a> {
    exclude: bool,
    exact: bool,
    names: Vec<&'a str>,
}

fn list(value: &str) -> List<'_> {
    let v = value.trim();
    let (exclude, v) = v.strip_prefix('^').map_or((false, v), |r| (true, r));
    let (exact, v) = v.strip_prefix('=').map_or((false, v), |r| (true, r));
    List {
        exclude,
        exact,
        names: v
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .collect(),
    }
}

/// Whether an `NCCL_SOCKET_IFNAME` value can select one of `have` (loopback only when named).
pub(crate) fn socket_ifname_matches(value: &str, have: &[String]) -> bool {
    let l = list(value);
    let hit = |h: &str| {
        l.names
            .iter()
            .any(|n| if l.exact { h == *n } else { h.starts_with(n) })
    };
    if l.exclude {
        have.iter().any(|h| h != "lo" && !hit(h))
    } else {
        have.iter().any(|h| hit(h))
    }
}

/// HCAs an `NCCL_IB_HCA` value names one by one (`mlx5_0,mlx5_1:1`, `=mlx5_0`); None when an entry is a prefix
/// of several (`mlx5`) or an exclusion, so the count is unknown.
pub(crate) fn named_hcas(value: &str) -> Option<usize> {
    let l = list(value);
    if l.exclude || l.names.is_empty() {
        return None;
    }
    let numbered = |e: &str| {
        let name = e.split(':').next().unwrap_or("");
        name.rsplit_once('_')
            .is_some_and(|(_, d)| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
    };
    l.names.iter().all(|e| numbered(e)).then_some(l.names.len())
}

impl PodSettings {
    /// [`PodSettings::nic_problems`], its warnings logged: the errors.
    pub(crate) fn nic_errors(&self, test: &str, env: &[(String, String)]) -> Vec<String> {
        let (errors, warnings) = self.nic_problems(test, env);
        for w in warnings {
            crate::warn!("{w}");
        }
        errors
    }

    /// What the job's NCCL network variables (`env`) ask that its GPU pods cannot have, as (errors, warnings),
    /// each a sentence naming the test.
    pub(crate) fn nic_problems(
        &self,
        test: &str,
        env: &[(String, String)],
    ) -> (Vec<String>, Vec<String>) {
        let (mut errors, mut warnings) = (Vec::new(), Vec::new());
        let get = |k: &str| {
            env.iter()
                .rev()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.as_str())
        };
        if !self.host_network(env) {
            if let Some(v) = get("NCCL_SOCKET_IFNAME") {
                let have = pod_interfaces(&self.networks);
                if !socket_ifname_matches(v, &have) {
                    errors.push(format!(
                        "test '{test}': NCCL_SOCKET_IFNAME={v} names no interface a pod off the host network has \
                         ({}): NCCL would find no socket interface; name one of those, or set use_host_network = \
                         true",
                        have.join(", ")
                    ));
                }
            }
        }
        if let Some(v) = get("NCCL_IB_HCA") {
            let devices = self
                .extended_resources
                .iter()
                .filter(|(r, _)| r.starts_with("rdma/"))
                .filter_map(|(_, q)| q.parse::<usize>().ok())
                .max()
                .unwrap_or(0)
                .max(self.networks.len());
            if let Some(named) = named_hcas(v) {
                if devices > named {
                    warnings.push(format!(
                        "test '{test}': NCCL_IB_HCA={v} names {named} HCA(s) but each GPU pod gets {devices} RDMA \
                         device(s) or networks: NCCL uses only the named ones (a prefix like \"mlx5\" takes all)"
                    ));
                }
            }
        }
        (errors, warnings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_names_follow_ncclss_prefix_rules() {
        let have = pod_interfaces(&["default/ib-a".into(), "default/ib-b@ib1".into()]);
        assert_eq!(have, ["eth0", "lo", "net1", "ib1"]);
        assert!(socket_ifname_matches("eth", &have));
        assert!(socket_ifname_matches("=net1", &have));
        assert!(socket_ifname_matches("ib", &have));
        assert!(!socket_ifname_matches("ens", &have));
        assert!(!socket_ifname_matches("=eth", &have));
        assert!(socket_ifname_matches("^docker,lo", &have));
        assert!(!socket_ifname_matches("^eth,net,ib", &have));
        assert!(!socket_ifname_matches("^=eth0,net1,ib1", &have));
        assert!(!socket_ifname_matches("ib0", &pod_interfaces(&[])));
    }

    #[test]
    fn hcas_are_counted_only_when_named_one_by_one() {
        assert_eq!(named_hcas("mlx5_0"), Some(1));
        assert_eq!(named_hcas("=mlx5_0:1,mlx5_3:1"), Some(2));
        assert_eq!(named_hcas("^=mlx5_1"), None);
        assert_eq!(named_hcas("mlx5"), None);
        assert_eq!(named_hcas("^mlx5_1"), None);
    }

    #[test]
    fn a_pod_network_pod_with_a_host_nic_name_is_refused_and_one_rail_warned() {
        let p = PodSettings {
            networks: (0..8).map(|i| format!("default/ib-{i}")).collect(),
            ..PodSettings::default()
        };
        let env = [
            ("NCCL_SOCKET_IFNAME".to_string(), "ib0".to_string()),
            ("NCCL_IB_HCA".to_string(), "mlx5_0".to_string()),
        ];
        let (e, w) = p.nic_problems("t", &env);
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].contains("NCCL_SOCKET_IFNAME=ib0 names no interface"),
            "{e:?}"
        );
        assert_eq!(w.len(), 1);
        assert!(
            w[0].contains("names 1 HCA(s) but each GPU pod gets 8"),
            "{w:?}"
        );
        // on the host's network every name may exist
        let host = PodSettings::default();
        assert_eq!(host.nic_problems("t", &env), (vec![], vec![]));
    }
}
