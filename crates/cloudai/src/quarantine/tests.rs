//! Quarantine against a fake scheduler and store: the ownership rules, kill -9 at every step, and a property test
//! over random interleavings of our drains, an admin's drains and resumes, requalifications and kills.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use super::*;

/// Where a kill lands in the next action.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kill {
    /// After the intent is written, before the scheduler acts.
    BeforeAction,
    /// After the scheduler acted, before it is recorded.
    AfterAction,
}

#[derive(Default)]
struct World {
    /// node → None in service, Some(reason) drained
    nodes: BTreeMap<String, Option<String>>,
    /// The store as the process sees it.
    records: BTreeMap<String, Record>,
    log: Vec<(Intent, bool)>,
    /// The process is dead: nothing more reaches the scheduler or the store.
    dead: bool,
    kill: Option<Kill>,
    violations: Vec<String>,
    actions: usize,
}

#[derive(Clone)]
struct Fake(Rc<RefCell<World>>);

impl Scheduler for Fake {
    fn seen(&mut self, nodes: &[String]) -> Result<BTreeMap<String, Seen>, QuarantineError> {
        let w = self.0.borrow();
        if w.dead {
            return Err(QuarantineError::Scheduler("killed".into()));
        }
        // a node the cluster no longer has is not listed
        Ok(nodes
            .iter()
            .filter_map(|n| {
                let s = match w.nodes.get(n)?.clone() {
                    None => Seen::InService,
                    Some(r) if r.starts_with("cloudai:") => Seen::Ours(r),
                    Some(r) => Seen::Others(r),
                };
                Some((n.clone(), s))
            })
            .collect())
    }

    fn take_out(&mut self, node: &str, tag: &str) -> Result<(), QuarantineError> {
        let mut w = self.0.borrow_mut();
        if w.dead {
            return Err(QuarantineError::Scheduler("killed".into()));
        }
        if w.kill == Some(Kill::BeforeAction) {
            w.dead = true;
            return Err(QuarantineError::Scheduler("killed".into()));
        }
        match w.nodes.get(node).cloned().flatten() {
            Some(r) if r == tag => w.violations.push(format!("duplicate drain of {node}")),
            Some(r) if !r.starts_with("cloudai:") => w
                .violations
                .push(format!("drained {node} over an admin's drain {r:?}")),
            _ => {}
        }
        w.nodes.insert(node.into(), Some(tag.into()));
        w.actions += 1;
        if w.kill == Some(Kill::AfterAction) {
            w.dead = true;
            return Err(QuarantineError::Scheduler("killed".into()));
        }
        Ok(())
    }

    fn put_back(&mut self, node: &str, tag: &str, force: bool) -> Result<(), QuarantineError> {
        let mut w = self.0.borrow_mut();
        if w.dead {
            return Err(QuarantineError::Scheduler("killed".into()));
        }
        if w.kill == Some(Kill::BeforeAction) {
            w.dead = true;
            return Err(QuarantineError::Scheduler("killed".into()));
        }
        match w.nodes.get(node).cloned().flatten() {
            None => w.violations.push(format!("duplicate resume of {node}")),
            Some(r) if r != tag && !force => w
                .violations
                .push(format!("lifted {r:?} on {node}, not our {tag:?}")),
            _ => {}
        }
        w.nodes.insert(node.into(), None);
        w.actions += 1;
        if w.kill == Some(Kill::AfterAction) {
            w.dead = true;
            return Err(QuarantineError::Scheduler("killed".into()));
        }
        Ok(())
    }

    fn command(&self, action: Action, node: &str, _tag: &str) -> String {
        format!("{} {node}", action.as_str())
    }
}

impl Store for Fake {
    fn records(&mut self) -> Result<Vec<Record>, QuarantineError> {
        let w = self.0.borrow();
        if w.dead {
            return Err(QuarantineError::Scheduler("killed".into()));
        }
        Ok(w.records.values().cloned().collect())
    }
    fn pending(&mut self) -> Result<Vec<Intent>, QuarantineError> {
        let w = self.0.borrow();
        Ok(w.log
            .iter()
            .filter(|(_, d)| !d)
            .map(|(i, _)| i.clone())
            .collect())
    }
    fn intend(&mut self, i: &Intent) -> Result<i64, QuarantineError> {
        let mut w = self.0.borrow_mut();
        if w.dead {
            return Err(QuarantineError::Scheduler("killed".into()));
        }
        let mut i = i.clone();
        i.id = w.log.len() as i64 + 1;
        w.log.push((i.clone(), false));
        Ok(i.id)
    }
    fn done(
        &mut self,
        id: i64,
        record: Option<&Record>,
        _outcome: &str,
    ) -> Result<(), QuarantineError> {
        let mut w = self.0.borrow_mut();
        if w.dead {
            return Err(QuarantineError::Scheduler("killed".into()));
        }
        w.log[id as usize - 1].1 = true;
        if let Some(r) = record {
            w.records.insert(r.node.clone(), r.clone());
        }
        Ok(())
    }
}

fn world(nodes: &[&str]) -> Fake {
    let mut w = World::default();
    for n in nodes {
        w.nodes.insert(n.to_string(), None);
    }
    Fake(Rc::new(RefCell::new(w)))
}

fn q(f: &Fake) -> (Fake, Fake) {
    (f.clone(), f.clone())
}

/// A new process after a kill: the world goes on, the process starts fresh.
fn restart(f: &Fake) {
    let mut w = f.0.borrow_mut();
    w.dead = false;
    w.kill = None;
}

macro_rules! quarantine {
    ($f:expr) => {{
        let (mut s, mut st) = q($f);
        // a closure cannot hold two &mut to one Fake's halves: each call builds its own
        move |op: &mut dyn FnMut(&mut Quarantine) -> Result<(), QuarantineError>| {
            let mut qq = Quarantine {
                sched: &mut s,
                store: &mut st,
                dry_run: false,
            };
            op(&mut qq)
        }
    }};
}

#[test]
fn an_admins_drain_is_never_touched_and_only_ours_is_released() {
    let f = world(&["n1", "n2"]);
    f.0.borrow_mut()
        .nodes
        .insert("n2".into(), Some("admin: RMA".into()));
    let mut run = quarantine!(&f);
    let mut outs = Vec::new();
    run(&mut |q| {
        outs = q.take_out(
            "fbn_1",
            &[("n1".into(), "slow".into()), ("n2".into(), "slow".into())],
        )?;
        Ok(())
    })
    .unwrap();
    assert_eq!(outs[0].what, "quarantined");
    assert_eq!(outs[1].what, "not ours");
    assert!(outs[1].detail.contains("admin: RMA"));
    assert_eq!(f.0.borrow().nodes["n2"].as_deref(), Some("admin: RMA"));
    // an admin re-drains ours with their reason: it is theirs now
    f.0.borrow_mut()
        .nodes
        .insert("n1".into(), Some("admin: cable".into()));
    let mut o = None;
    run(&mut |q| {
        o = Some(q.put_back("n1", false, Held::Released, "")?);
        Ok(())
    })
    .unwrap();
    assert_eq!(o.take().unwrap().what, "not ours");
    assert_eq!(f.0.borrow().nodes["n1"].as_deref(), Some("admin: cable"));
    // --force says what it overrides
    run(&mut |q| {
        o = Some(q.put_back("n1", true, Held::Released, "")?);
        Ok(())
    })
    .unwrap();
    let o = o.unwrap();
    assert_eq!(o.what, "released");
    assert!(o.detail.contains("admin: cable"), "{o:?}");
    assert!(f.0.borrow().violations.is_empty());
}

#[test]
fn a_held_node_removed_from_the_cluster_is_no_longer_ours_and_blocks_nothing() {
    let f = world(&["n1", "n2"]);
    let mut run = quarantine!(&f);
    run(&mut |q| {
        q.take_out("fbn_1", &[("n1".into(), "slow".into())])?;
        Ok(())
    })
    .unwrap();
    // the cluster drops n1 (scaled away, replaced)
    f.0.borrow_mut().nodes.remove("n1");
    let mut outs = Vec::new();
    run(&mut |q| {
        outs = q.refresh()?;
        outs.extend(q.take_out("fbn_2", &[("n2".into(), "slow".into())])?);
        Ok(())
    })
    .unwrap();
    assert_eq!(outs[0].node, "n1");
    assert_eq!(outs[0].what, "no longer ours");
    assert!(outs[0].detail.contains("no longer listed"), "{:?}", outs[0]);
    assert_eq!(outs[1].what, "quarantined", "{outs:?}");
    let held: Vec<String> = run_records(&f)
        .into_iter()
        .filter(|r| r.state.is_out())
        .map(|r| r.node)
        .collect();
    assert_eq!(held, vec!["n2".to_string()]);
}

fn run_records(f: &Fake) -> Vec<Record> {
    f.0.borrow().records.values().cloned().collect()
}

#[test]
fn a_kill_at_every_step_ends_in_the_same_state_with_no_duplicate_action() {
    for kill in [Kill::BeforeAction, Kill::AfterAction] {
        let f = world(&["n1"]);
        let mut run = quarantine!(&f);
        f.0.borrow_mut().kill = Some(kill);
        assert!(run(&mut |q| q
            .take_out("r1", &[("n1".into(), "slow".into())])
            .map(|_| ()))
        .is_err());
        restart(&f);
        run(&mut |q| q.reconcile().map(|_| ())).unwrap();
        {
            let w = f.0.borrow();
            assert!(
                w.nodes["n1"].as_deref().unwrap().starts_with("cloudai:r1"),
                "{kill:?}"
            );
            assert_eq!(w.records["n1"].state, Held::Quarantined);
            assert_eq!(w.actions, 1, "{kill:?}: one drain");
        }
        f.0.borrow_mut().kill = Some(kill);
        assert!(run(&mut |q| q.put_back("n1", false, Held::Released, "").map(|_| ())).is_err());
        restart(&f);
        run(&mut |q| q.reconcile().map(|_| ())).unwrap();
        let w = f.0.borrow();
        assert_eq!(w.nodes["n1"], None, "{kill:?}");
        assert_eq!(w.records["n1"].state, Held::Released);
        assert_eq!(w.actions, 2, "{kill:?}: one resume");
        assert!(w.violations.is_empty(), "{:?}", w.violations);
    }
}

/// One requalification of n1 (K = 2, escalated after 3 failures).
fn requalify(f: &Fake, passed: bool) -> Outcome {
    let (mut s, mut st) = q(f);
    let mut qq = Quarantine {
        sched: &mut s,
        store: &mut st,
        dry_run: false,
    };
    qq.put_back("n1", false, Held::Requalifying, "").unwrap();
    qq.conclude("n1", passed, "evidence", 2, 3).unwrap()
}

#[test]
fn k_passes_in_a_row_release_and_failures_escalate() {
    let f = world(&["n1"]);
    let mut run = quarantine!(&f);
    run(&mut |q| {
        q.take_out("r1", &[("n1".into(), "slow".into())])
            .map(|_| ())
    })
    .unwrap();
    assert_eq!(requalify(&f, true).what, "quarantined");
    assert_eq!(requalify(&f, false).what, "quarantined");
    assert_eq!(f.0.borrow().records["n1"].passes, 0);
    assert_eq!(requalify(&f, true).what, "quarantined");
    assert_eq!(requalify(&f, true).what, "released");
    assert_eq!(f.0.borrow().nodes["n1"], None);
    // three failures: escalated, still out
    run(&mut |q| {
        q.take_out("r2", &[("n1".into(), "slow again".into())])
            .map(|_| ())
    })
    .unwrap();
    for _ in 0..2 {
        assert_eq!(requalify(&f, false).what, "quarantined");
    }
    assert_eq!(requalify(&f, false).what, "escalated");
    assert!(f.0.borrow().nodes["n1"].is_some());
    assert!(f.0.borrow().violations.is_empty());
}

mod property {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Copy, Debug)]
    enum Step {
        OurDrain(usize),
        AdminDrain(usize),
        AdminResume(usize),
        Requalify(usize, bool),
        Release(usize),
        KillNext(bool),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (0..3usize).prop_map(Step::OurDrain),
            (0..3usize).prop_map(Step::AdminDrain),
            (0..3usize).prop_map(Step::AdminResume),
            ((0..3usize), any::<bool>()).prop_map(|(n, p)| Step::Requalify(n, p)),
            (0..3usize).prop_map(Step::Release),
            any::<bool>().prop_map(Step::KillNext),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 400, .. ProptestConfig::default() })]
        #[test]
        fn never_an_admin_drain_lifted_never_a_duplicate_never_a_passed_node_held(steps in proptest::collection::vec(step(), 1..40)) {
            let names = ["n1", "n2", "n3"];
            let f = world(&names);
            let mut run = quarantine!(&f);
            const K: u32 = 2;
            for s in steps {
                match s {
                    Step::OurDrain(i) => {
                        let _ = run(&mut |q| q.take_out("r", &[(names[i].into(), "slow".into())]).map(|_| ()));
                    }
                    Step::AdminDrain(i) => {
                        let mut w = f.0.borrow_mut();
                        if w.nodes[names[i]].is_none() {
                            w.nodes.insert(names[i].into(), Some("admin: maintenance".into()));
                        }
                    }
                    Step::AdminResume(i) => {
                        f.0.borrow_mut().nodes.insert(names[i].into(), None);
                    }
                    Step::Requalify(i, passed) => {
                        let held = f.0.borrow().records.get(names[i]).is_some_and(|r| r.state == Held::Quarantined);
                        let ours = f.0.borrow().nodes[names[i]].as_deref().is_some_and(|r| r.starts_with("cloudai:"));
                        if held && ours {
                            let r = run(&mut |q| {
                                let o = q.put_back(names[i], false, Held::Requalifying, "")?;
                                if o.what == "requalifying" {
                                    q.conclude(names[i], passed, "e", K, 5)?;
                                }
                                Ok(())
                            });
                            if r.is_ok() {
                                let w = f.0.borrow();
                                let rec = &w.records[names[i]];
                                // K passes in a row: given back, and in service
                                if rec.passes >= K {
                                    prop_assert_eq!(rec.state, Held::Released, "{:?}", rec);
                                    prop_assert!(w.nodes[names[i]].is_none(), "released but still out");
                                }
                            }
                        }
                    }
                    Step::Release(i) => {
                        let _ = run(&mut |q| q.put_back(names[i], false, Held::Released, "").map(|_| ()));
                    }
                    Step::KillNext(after) => {
                        f.0.borrow_mut().kill = Some(if after { Kill::AfterAction } else { Kill::BeforeAction });
                    }
                }
                if f.0.borrow().dead {
                    restart(&f);
                    let _ = run(&mut |q| q.reconcile().map(|_| ()));
                }
                let w = f.0.borrow();
                prop_assert!(w.violations.is_empty(), "{:?}", w.violations);
            }
            // at the end, nothing pending and every record agrees with the scheduler where the node is still ours
            restart(&f);
            run(&mut |q| q.reconcile().map(|_| ())).unwrap();
            let w = f.0.borrow();
            prop_assert!(w.log.iter().all(|(_, d)| *d));
            for (n, r) in &w.records {
                if let Some(reason) = w.nodes[n].as_deref() {
                    if reason == r.tag {
                        prop_assert!(r.state.is_out(), "{n} out with our mark but recorded {:?}", r.state);
                    }
                }
            }
        }
    }
}
