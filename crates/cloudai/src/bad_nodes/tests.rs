use super::*;

/// 16 nodes of which 12 run at 30 %: the four fast ones paired together in round 1, six slow pairs.
fn round1(bar: f64) -> Vec<Evidence> {
    let names: Vec<String> = (1..=16).map(|i| format!("node{i:03}")).collect();
    names
        .chunks(2)
        .enumerate()
        .map(|(i, c)| {
            let busbw = if i < 2 { 182.9 } else { 54.9 };
            Evidence {
                round: 1,
                pair: [c[0].clone(), c[1].clone()],
                job_id: None,
                busbw: Some(busbw),
                threshold: Some(bar),
                passed: busbw >= bar,
                reason: String::new(),
            }
        })
        .collect()
}

#[test]
fn a_slow_majority_does_not_set_the_bar_and_is_called_cluster_wide() {
    let peaks = round1(0.0)
        .iter()
        .map(|e| e.busbw.unwrap())
        .collect::<Vec<_>>();
    // the median of these pairs is a slow one: against it every pair would pass
    let mut sorted = peaks.clone();
    sorted.sort_by(f64::total_cmp);
    assert_eq!(sorted[sorted.len() / 2], 54.9);
    let (fast, bar) = fastest(peaks.into_iter(), 0.05).unwrap();
    assert_eq!(fast, 182.9);
    assert!((bar - 173.755).abs() < 1e-9);
    let results = round1(bar);
    assert_eq!(results.iter().filter(|e| !e.passed).count(), 6);
    let wide = cluster_wide(&results, Some(bar)).unwrap();
    assert!(
        wide.starts_with("cluster-wide: 6 of 8 pairs failed or ran slower than 173.75 GB/s"),
        "{wide}"
    );
    // the search then names the twelve slow nodes, each against a cleared partner
    let slow = |n: &String| n.as_str() > "node004";
    let plan = sim::drive(
        Plan::new((1..=16).map(|i| format!("node{i:03}")).collect()),
        usize::MAX,
        |p| !slow(&p[0]) && !slow(&p[1]),
    );
    let bad: Vec<String> = plan
        .verdicts()
        .into_iter()
        .filter(|(_, v)| *v == Verdict::Bad)
        .map(|(n, _)| n)
        .collect();
    assert_eq!(bad.len(), 12, "{bad:?}");
    assert!(act::refusal(bad.len(), 16, 0.25).is_some());
}

#[test]
fn one_bad_node_of_four_is_its_own_finding_not_a_cluster_wide_one() {
    let ev = |passed| Evidence {
        round: 1,
        pair: ["a".into(), "b".into()],
        job_id: None,
        busbw: None,
        threshold: None,
        passed,
        reason: String::new(),
    };
    assert_eq!(cluster_wide(&[ev(true), ev(false)], None), None);
    assert!(cluster_wide(&[ev(false), ev(false)], None).is_some());
    assert_eq!(fastest([f64::NAN, 0.0].into_iter(), 0.05), None);
}
