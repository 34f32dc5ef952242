//! One test of a scenario as it runs: the resolved definition, where and how often it runs, its hooks and what
//! it starts after, and what its workload launches there.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::HookScenario;
use crate::config::scenario::Dependency;
use crate::config::test::TestDefinition;
use crate::workloads::Workload;

#[derive(Clone)]
pub struct TestRun {
    pub id: String,
    pub test: TestDefinition,
    pub workload: &'static dyn Workload,
    pub num_nodes: u64,
    pub nodes: Vec<String>,
    pub exclude_nodes: Vec<String>,
    pub iterations: u64,
    /// Seconds, as written in the scenario.
    pub time_limit: Option<u64>,
    /// Seconds a job may wait in the queue before it is cancelled (`pending_too_long`); the scenario entry's
    /// value, else the system's.
    pub max_pending_time: Option<u64>,
    pub dependencies: Vec<Dependency>,
    pub extra_srun_args: Option<String>,
    pub weight: i64,
    pub sol: Option<f64>,
    pub ideal_perf: f64,
    pub pre_test: Option<Arc<HookScenario>>,
    pub post_test: Option<Arc<HookScenario>>,
    /// `num_nodes` given as a list: a sweep over node counts.
    pub num_nodes_sweep: Vec<u64>,
    /// The step of a design-space exploration this run is (0: not a DSE step).
    pub step: u64,
    /// The system's GPUs per node, when its config states them.
    pub gpus_per_node: Option<u64>,
    /// Tasks per node of an MPI test on the system, when known.
    pub tasks_per_node: Option<u64>,
    /// The scheduler starts `tasks_per_node` MPI ranks per node, whatever GPUs each drives (Slurm); otherwise one
    /// rank per group of a node's GPUs.
    pub ranks_are_tasks: bool,
    /// The system's declared fabric and hardware, for the verdict's checks.
    pub fabric: crate::workloads::judge::Fabric,
    /// The scenario gave a node count or list: a workload's own count ([`Workload::nodes_needed`]) does not apply.
    pub nodes_given: bool,
    /// The system's scheduler (`slurm`, `kubernetes`, …); empty when the scenario is resolved without one.
    pub scheduler: &'static str,
    /// The tests it starts after, following `start_post_comp` from one to the next (nearest first): where a
    /// handoff ([`crate::workloads::Workload::handed`]) looks.
    pub post_comp_chain: Vec<String>,
}

impl TestRun {
    /// The nodes its roles name (AI Dynamo's workers' node lists, before the scenario's), else the count they
    /// need when the scenario gave none (AI Dynamo: prefill nodes + decode nodes).
    pub(crate) fn apply_nodes_needed(&mut self) {
        let named = self.workload.nodes_named(&self.test, self.scheduler);
        if !named.is_empty() {
            let mut nodes: Vec<String> = Vec::new();
            for n in named.into_iter().chain(std::mem::take(&mut self.nodes)) {
                if !nodes.contains(&n) {
                    nodes.push(n);
                }
            }
            self.num_nodes = nodes.len() as u64;
            self.nodes = nodes;
            return;
        }
        if !self.nodes_given {
            if let Some(n) = self.workload.nodes_needed(&self.test, self.scheduler) {
                self.num_nodes = n.max(1);
            }
        }
    }

    /// What the test runs, as every scheduler renders it.
    pub fn launch(&self) -> crate::workloads::Launch {
        self.workload.launch(&self.test, &self.placement())
    }

    /// What the run launches, as its output should show it: hosts, and GPUs (ranks × GPUs per rank) per host.
    pub fn asked(&self) -> crate::workloads::judge::Asked {
        use crate::workloads::Procs;
        let launch = self.launch();
        let (nodes, gpus_per_node) = match launch.procs {
            // one process drives its GPUs itself, on one node
            Procs::Single => (1, Some(launch.gpus_per_rank)),
            Procs::Mpi => {
                let ranks = if self.ranks_are_tasks {
                    self.tasks_per_node
                } else {
                    self.gpus_per_node.map(|g| launch.ranks_per_node(g))
                };
                (self.num_nodes, ranks.map(|r| r * launch.gpus_per_rank))
            }
            _ => (self.num_nodes, None),
        };
        crate::workloads::judge::Asked {
            nodes,
            gpus_per_node,
            fabric: self.fabric.clone(),
        }
    }

    /// Where the run is placed, as its workload sees it.
    pub(crate) fn placement(&self) -> crate::workloads::Placement {
        crate::workloads::Placement {
            nodes: self.num_nodes,
            gpus_per_node: self.gpus_per_node,
            tasks_per_node: self.tasks_per_node,
            time_limit: self.time_limit,
            scheduler: self.scheduler,
        }
    }
}

impl std::fmt::Debug for TestRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestRun")
            .field("id", &self.id)
            .field("test", &self.test.name)
            .finish()
    }
}

impl TestRun {
    /// The job's whole time limit: the test's own plus every hook run's, as CloudAI computes `--time`.
    pub fn effective_time_limit(&self) -> Option<u64> {
        let own = self.time_limit?;
        let hooks: u64 = [&self.pre_test, &self.post_test]
            .into_iter()
            .flatten()
            .flat_map(|h| h.test_runs.iter())
            .filter_map(|r| r.time_limit)
            .sum();
        Some(own + hooks)
    }

    pub(crate) fn is_dse(&self) -> bool {
        self.step == 0 && (self.test.is_dse() || !self.num_nodes_sweep.is_empty())
    }
}

impl TestRun {
    /// The last iteration directory of each test along [`TestRun::post_comp_chain`], nearest first, in the results
    /// tree of `dir` (`<root>/<test id>/<iteration>`): the iteration with the highest number, which ran last.
    pub(crate) fn post_comp_dirs(&self, dir: &Path) -> Vec<PathBuf> {
        let Some(root) = dir.parent().and_then(Path::parent) else {
            return Vec::new();
        };
        self.post_comp_chain
            .iter()
            .filter_map(|id| {
                std::fs::read_dir(root.join(id))
                    .ok()?
                    .flatten()
                    .filter_map(|e| Some((e.file_name().to_str()?.parse::<u64>().ok()?, e.path())))
                    .max_by_key(|(n, _)| *n)
                    .map(|(_, p)| p)
            })
            .collect()
    }
}
