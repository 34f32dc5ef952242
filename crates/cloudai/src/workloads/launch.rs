//! What a workload runs, as data: the seam between workloads and schedulers. A workload describes its program,
//! arguments, image and process layout; each scheduler renders that description into its own vocabulary (an
//! `srun` line, a local process, a Kubernetes Job or MPIJob, a Run:ai training or distributed workload). No
//! scheduler needs to know which workload it runs.

use crate::config::test::TestDefinition;
use crate::util::shell::quote;

/// How the processes of a run are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Procs {
    /// A shell script run by the job itself, without a task launcher (BashCmd): Slurm runs it in the batch script.
    Script,
    /// One process in all, driving `gpus_per_rank` GPUs itself (single-process nccl-tests with `-g N`).
    Single,
    /// As many copies as the scheduler starts tasks (Slurm: srun's tasks; container schedulers: one pod).
    PerTask,
    /// MPI ranks, one per `gpus_per_rank` GPUs of every node, started by an MPI launcher (srun's MPI plugin,
    /// mpirun, an MPIJob).
    Mpi,
    /// Independent copies without MPI (fio): `Some(n)` per node when the workload fixes it, else as many as the
    /// scheduler starts; container schedulers run one.
    Tasks(Option<u64>),
    /// A shell script run once on each node of the allocation, each node's output kept apart
    /// (`<iteration>/nodes/<node>/stdout.txt`; one node — Standalone — writes the iteration's own `stdout.txt`):
    /// checks of the nodes themselves.
    PerNode,
}

/// Where each node's output of a [`Procs::PerNode`] launch goes, under the iteration's directory.
pub(crate) const NODES_DIR: &str = "nodes";

/// How a hook's success is judged from its run.
#[derive(Clone, Debug)]
pub enum Success {
    /// Its output (`stdout.txt`) contains this text (nccl-tests' `Avg bus bandwidth` summary).
    OutputContains(&'static str),
    /// Its output has a line that `matches` accepts; `ere` is the same test as a `grep -E` pattern for scripts
    /// (fio's `IOPS=… BW=…` summary).
    OutputMatches {
        ere: &'static str,
        matches: fn(&str) -> bool,
    },
    /// Its exit status is 0.
    ExitStatus,
    /// Not judged: CloudAI's default, which fails a pre-test guard on Slurm; container schedulers use the exit
    /// status.
    Unchecked,
}

/// One run of a workload, as every scheduler needs to know it.
#[derive(Clone, Debug)]
pub struct Launch {
    /// The program; for [`Procs::Script`] and [`Procs::PerNode`] the whole shell script.
    pub program: String,
    /// Its arguments as shell words, each already quoted where the shell needs it (user-given
    /// `extra_cmd_args` are passed through as written, as CloudAI does).
    pub args: Vec<String>,
    /// Environment the workload itself sets, over the system's and the test's variables (NeMo-Run's recipe).
    pub env: Vec<(String, String)>,
    /// Environment the workload sets only where neither the system nor the test set the name.
    pub env_default: Vec<(String, String)>,
    /// Container image on container-capable schedulers; `None`: the host's binaries (Slurm, Standalone) or the
    /// system's `job_image` (Kubernetes, Run:ai).
    pub image: Option<String>,
    /// The config field that names the image, when the workload needs one (`cmd_args.docker_image_url`): a
    /// container scheduler refuses the test without it, naming this field.
    pub image_field: Option<&'static str>,
    pub procs: Procs,
    /// GPUs one process drives (0: the workload uses no GPU).
    pub gpus_per_rank: u64,
    /// The number of ranks the program needs, when it needs an exact one (OSU's point-to-point tests: 2).
    pub exact_ranks: Option<u64>,
    /// A program that does the whole work when exactly one process runs without an MPI launcher (nccl-tests'
    /// non-MPI build of an `_mpi` binary).
    pub solo_program: Option<String>,
    /// Whether the workload's own line already carries the `nsys` prefix (BashCmd), so systems add none.
    pub has_profiler: bool,
    pub success: Success,
    /// Arguments for the task launcher that the test itself gives (SlurmContainer's `extra_srun_args`, on every
    /// `srun` of its job); only Slurm-only workloads set them.
    pub launcher_args: Vec<String>,
    /// Container paths where the install directory is mounted as well (NeMo-Run's launcher works in
    /// `/cloudai_workspace`).
    pub install_mounts: Vec<&'static str>,
    /// Paths of the hosts mounted into the container (`src:dst`, a Chakra trace directory); only workloads that
    /// need task steps ([`super::Needs::Srun`]) set them.
    pub host_mounts: Vec<String>,
    /// On a machine without a scheduler (Standalone), the command line itself exports the job's environment and
    /// redirects its output into the iteration directory, as CloudAI writes it for this workload (fio).
    pub shell_env: bool,
    /// A job of several steps instead of one program (`program` and `args` stay empty): schedulers that run task
    /// steps render it (the workload says [`super::Needs::Srun`]).
    pub steps: Option<Steps>,
}

/// A job of several steps in the test's image, for a workload that is more than one program (NIXL: an etcd server
/// on the first node, the benchmark on each node, the server stopped).
#[derive(Clone, Debug, Default)]
pub struct Steps {
    pub steps: Vec<Step>,
    /// The job's own set-up steps (the rank map, the node metadata) run in the test's image too.
    pub setup_in_image: bool,
    /// Variables the batch script exports after the job's environment, written as given (`$(uuidgen)` expands
    /// there), and not into `env_vars.sh`.
    pub job_env: Vec<(String, String)>,
    /// How the steps' `env_vars.sh` is written, as CloudAI writes it for the workload.
    pub env_file: EnvFile,
    /// Paths under the iteration's directory mounted into every step's container; the scheduler creates them
    /// before the job starts.
    pub mounts: Vec<Mount>,
    /// Directories under the iteration's directory the steps write into, created before the job starts.
    pub dirs: Vec<String>,
    /// Shell lines the batch script runs before the job's environment (DeepEP finds its head node's address).
    pub prologue: Vec<String>,
    /// Files the job runs, written into the iteration's directory beside its script (name, text).
    pub files: Vec<(String, String)>,
    /// The image the step marked [`Step::Task::own_image`] runs in, instead of the test's.
    pub other_image: Option<String>,
    /// The MPI plugin of every task launch of the job (its set-up steps too), over the system's (`none`: the
    /// serving workloads start their own processes).
    pub mpi: Option<&'static str>,
    /// The system's Hugging Face cache (`hf_home_path`) mounted at `/root/.cache/huggingface` in every step.
    pub hf_cache: bool,
    /// The [`Step::Shell`] whose text `test-run.toml` and `slurm-job.toml` record as the job's command (the whole
    /// body when `None`).
    pub record: Option<usize>,
}

/// The `env_vars.sh` of a [`Steps`] job.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EnvFile {
    /// `export K="V"` for the job's environment (every scheduler's file).
    #[default]
    Quoted,
    /// `export K=V` as the values are written (CloudAI's NIXL files).
    Bare,
    /// As `Quoted`, then [`Steps::job_env`] too, each value between double quotes as given (the MoE benchmark's).
    WithJobEnv,
    /// None: no step sources it (the batch script's environment is all they use).
    None,
}

/// A path under the iteration's directory mounted into the job's containers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    /// Relative to the iteration's directory (empty: the directory itself).
    pub source: String,
    /// Where the container sees it.
    pub target: String,
    /// A file of this many bytes (sparse), or a directory when `None`; one of [`Steps::files`] is written, not made.
    pub file_size: Option<u64>,
}

/// One step of a [`Steps`] job. [`RUN_DIR`] in its text stands for the iteration's directory.
#[derive(Clone, Debug)]
pub enum Step {
    /// One launch of tasks in the test's image: the job's task-launcher prefix (with the job's node count when
    /// `all_nodes`), then `opts`, then `cmd` (shell text, `&` included when it runs in the background).
    Task {
        all_nodes: bool,
        /// Runs in [`Steps::other_image`] when one is given.
        own_image: bool,
        opts: Vec<String>,
        cmd: String,
    },
    /// Shell text between steps, as written (`etcd_pid=$!`, a wait).
    Shell(String),
}

/// Stands for the iteration's directory in a [`Step`]'s text (a character no configuration value holds).
pub const RUN_DIR: &str = "\u{E000}run_dir\u{E000}";
/// Stands for the image the job's tasks run in (its cached `.sqsh`, else its URL), in [`Step::Shell`] text.
pub const IMAGE: &str = "\u{E000}image\u{E000}";
/// Stands for the job's container mounts, comma-separated, in [`Step::Shell`] text.
pub const MOUNTS: &str = "\u{E000}mounts\u{E000}";
/// Stands for the system's Hugging Face cache (`hf_home_path`, absolute), in [`Step::Shell`] text and
/// [`Launch::host_mounts`].
pub const HF_HOME: &str = "\u{E000}hf_home\u{E000}";
/// The job's task-launcher prefix with the job's node count, one word per line (` \` then two blanks between),
/// in [`Step::Shell`] text.
pub const SRUN_ALL_NODES_LINES: &str = "\u{E000}srun_all_nodes_lines\u{E000}";
/// Stands for the system's extra task-launcher arguments as written (empty when none), in [`Step::Shell`] text.
pub const SYSTEM_SRUN_ARGS: &str = "\u{E000}system_srun_args\u{E000}";
/// Stands for the job's task-launcher prefix without a node count in [`Step::Shell`] text (a step launched with
/// its own `--nodelist`/`--nodes`).
pub const SRUN: &str = "\u{E000}srun\u{E000}";
/// The job's task-launcher prefix with the job's node count, in [`Step::Shell`] text.
pub const SRUN_ALL_NODES: &str = "\u{E000}srun_all_nodes\u{E000}";
/// The job's explicit node list as another word of a one-word-per-line launch (` \` then two blanks, then
/// `--nodelist=a,b`), empty when the run names no nodes, in [`Step::Shell`] text; written right after a word.
pub const NODELIST_LINE: &str = "\u{E000}nodelist_line\u{E000}";
/// The job's explicit node list as another word of a launch (` --nodelist=a,b`), empty when the run names no
/// nodes; written right after a word.
pub const NODELIST_WORD: &str = "\u{E000}nodelist_word\u{E000}";
/// The iteration's directory as it is, unquoted (inside a [`quoted`] region or double quotes), in [`Step::Shell`]
/// text.
pub const RUN_DIR_RAW: &str = "\u{E000}run_dir_raw\u{E000}";
/// The job's task-launcher prefix without a node count and without a container (on the hosts), one word per line,
/// in [`Step::Shell`] text.
pub const SRUN_HOST_LINES: &str = "\u{E000}srun_host_lines\u{E000}";
const SRUN_LINES_IN: &str = "\u{E000}srun_lines_in\u{E001}";
const QUOTE_START: &str = "\u{E000}quote\u{E001}";
const QUOTE_END: &str = "\u{E001}quote\u{E000}";

/// The job's task-launcher prefix without a node count in the container `image`, one word per line, in
/// [`Step::Shell`] text.
pub fn srun_lines_in(image: &str) -> String {
    format!("{SRUN_LINES_IN}{image}\u{E000}")
}

/// `text` as one shell word (Python's `shlex.quote`), quoted once the placeholders in it are filled; regions nest.
pub fn quoted(text: &str) -> String {
    format!("{QUOTE_START}{text}{QUOTE_END}")
}

/// The image of each [`srun_lines_in`] mark in `text`, in order, with where the mark starts and ends.
pub(crate) fn srun_lines_marks(text: &str) -> Vec<(usize, usize, &str)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = text[from..].find(SRUN_LINES_IN) {
        let start = from + i;
        let image_at = start + SRUN_LINES_IN.len();
        let Some(len) = text[image_at..].find('\u{E000}') else {
            break;
        };
        let end = image_at + len + '\u{E000}'.len_utf8();
        out.push((start, end, &text[image_at..image_at + len]));
        from = end;
    }
    out
}

/// `text` with every [`quoted`] region shell-quoted by `quote`, innermost first.
pub(crate) fn fill_quoted(text: &str, quote: impl Fn(&str) -> String) -> String {
    let mut out = text.to_string();
    while let Some(end) = out.find(QUOTE_END) {
        let Some(start) = out[..end].rfind(QUOTE_START) else {
            break;
        };
        let inner = &out[start + QUOTE_START.len()..end];
        let q = quote(inner);
        out.replace_range(start..end + QUOTE_END.len(), &q);
    }
    out
}

/// With [`NODES_ARRAY_END`] after a bash array's name, a line that fills it with the job's node names: the run's
/// explicit nodes (`name=(n1 n2)`), else the allocation's (`mapfile -t name < <(scontrol show hostnames …)`).
pub const NODES_ARRAY_START: &str = "\u{E000}nodes_array_start\u{E000}";
/// See [`NODES_ARRAY_START`].
pub const NODES_ARRAY_END: &str = "\u{E000}nodes_array_end\u{E000}";
/// The run's name and iteration as a shell-name fragment (`vllm.agg.1node` iteration 0: `VLLM_AGG_1NODE_0`), in
/// [`Step::Shell`] text.
pub const RUN_TAG: &str = "\u{E000}run_tag\u{E000}";

impl Launch {
    /// A plain process with no GPU (Sleep-like).
    pub fn process(program: impl Into<String>, args: Vec<String>) -> Self {
        Self {
            program: program.into(),
            args,
            env: Vec::new(),
            env_default: Vec::new(),
            image: None,
            image_field: None,
            procs: Procs::PerTask,
            gpus_per_rank: 0,
            exact_ranks: None,
            solo_program: None,
            has_profiler: false,
            success: Success::Unchecked,
            install_mounts: Vec::new(),
            host_mounts: Vec::new(),
            launcher_args: Vec::new(),
            shell_env: false,
            steps: None,
        }
    }

    /// An MPI program: one rank per GPU of every node ([`Procs::Mpi`]).
    pub fn mpi(program: impl Into<String>, args: Vec<String>) -> Self {
        Self {
            procs: Procs::Mpi,
            gpus_per_rank: 1,
            ..Self::process(program, args)
        }
    }

    /// Runs in the test's container image (`cmd_args.docker_image_url`): a container scheduler refuses the test
    /// without one, naming that field.
    pub fn in_test_image(mut self, test: &TestDefinition) -> Self {
        self.image = super::docker_image(test);
        self.image_field = Some("cmd_args.docker_image_url");
        self
    }

    /// How a hook's run of it is judged.
    pub fn judged_by(mut self, success: Success) -> Self {
        self.success = success;
        self
    }

    /// The command line as a shell reads it (`test_cmd` in test-run.toml).
    pub fn command_line(&self) -> String {
        line(&self.program, &self.args)
    }

    /// The command line of the program that runs when a single process does the whole work.
    pub(crate) fn solo_command_line(&self) -> String {
        line(
            self.solo_program.as_deref().unwrap_or(&self.program),
            &self.args,
        )
    }

    /// `line` with the test's profiler prefix, unless the launch's own line carries it.
    pub(crate) fn profiled(&self, test: &TestDefinition, line: String) -> String {
        if self.has_profiler {
            line
        } else {
            super::with_nsys(test, line)
        }
    }

    /// Every rank of one node of `gpus_per_node` GPUs under a local `mpirun` (no launcher spans nodes).
    pub(crate) fn local_mpirun(&self, test: &TestDefinition, gpus_per_node: u64) -> String {
        let ranks = self.ranks_per_node(gpus_per_node);
        let cmd = self.profiled(test, self.command_line());
        mpirun(ranks, ranks, None, &self.env, &cmd).join(" ")
    }

    /// What one node runs in a container of `gpus_per_node` GPUs when no launcher spans nodes: every rank under
    /// a local `mpirun`, one rank as the solo program, or the command itself; with the profiler prefix.
    pub(crate) fn node_command(&self, test: &TestDefinition, gpus_per_node: u64) -> String {
        if self.needs_launcher(1, gpus_per_node) {
            self.local_mpirun(test, gpus_per_node)
        } else if self.procs == Procs::Mpi {
            self.profiled(test, self.solo_command_line())
        } else {
            self.profiled(test, self.command_line())
        }
    }

    /// Ranks on one node of `gpus_per_node` GPUs: the node's GPUs shared among processes of `gpus_per_rank`
    /// GPUs each (one for layouts that are not MPI).
    pub(crate) fn ranks_per_node(&self, gpus_per_node: u64) -> u64 {
        match self.procs {
            Procs::Mpi => (gpus_per_node / self.gpus_per_rank.max(1)).max(1),
            _ => 1,
        }
    }

    /// GPUs one node gives the run: every rank's.
    pub fn gpus_per_node(&self, gpus_per_node: u64) -> u64 {
        self.ranks_per_node(gpus_per_node) * self.gpus_per_rank
    }

    /// Whether the run spans `nodes` nodes with MPI ranks (an MPIJob, a distributed workload); other layouts run in
    /// one pod whatever `nodes` says.
    pub(crate) fn across_nodes(&self, nodes: u64) -> bool {
        self.procs == Procs::Mpi && nodes > 1
    }

    /// Whether the run needs ranks started by an MPI launcher on `nodes` nodes of `gpus_per_node` GPUs.
    pub(crate) fn needs_launcher(&self, nodes: u64, gpus_per_node: u64) -> bool {
        self.procs == Procs::Mpi && nodes * self.ranks_per_node(gpus_per_node) > 1
    }

    /// What the shape of the test asks that a system with `gpus_per_node` GPUs per node cannot give, as one
    /// sentence (or None).
    pub(crate) fn shape_problem(
        &self,
        test_id: &str,
        nodes: u64,
        gpus_per_node: u64,
    ) -> Option<String> {
        if self.gpus_per_rank > gpus_per_node {
            return Some(format!(
                "test '{test_id}': one process drives {} GPUs but the system has gpus_per_node = {gpus_per_node}; \
                 lower the GPUs per process (ngpus x nthreads) or set gpus_per_node in the system",
                self.gpus_per_rank
            ));
        }
        if self.procs == Procs::Single && nodes > 1 {
            return Some(format!(
                "test '{test_id}': {} runs as one process but the test asks {nodes} nodes; use its MPI build \
                 (the `_mpi` binary) to run across nodes, or num_nodes = 1",
                self.program
            ));
        }
        if let Some(n) = self.exact_ranks {
            let ranks = nodes * self.ranks_per_node(gpus_per_node);
            if ranks != n {
                return Some(format!(
                    "test '{test_id}': {} runs exactly {n} processes but {nodes} node(s) would start {ranks}; use \
                     num_nodes = {n} (one process each) or 1",
                    self.program
                ));
            }
        }
        if self.procs == Procs::Mpi && !gpus_per_node.is_multiple_of(self.gpus_per_rank.max(1)) {
            return Some(format!(
                "test '{test_id}': {gpus_per_node} GPUs per node cannot be shared by processes of {} GPUs each; \
                 choose GPUs per process (ngpus x nthreads) that divide gpus_per_node",
                self.gpus_per_rank
            ));
        }
        None
    }

    /// The hook check as a shell snippet printing 1 on success, else 0 (CloudAI's `SUCCESS_<i>` form); empty when
    /// unchecked.
    pub(crate) fn shell_check(&self, stdout: &std::path::Path) -> String {
        match self.success {
            Success::OutputContains(text) => format!(
                "grep -q \"{text}\" {} && echo 1 || echo 0",
                quote(&stdout.display().to_string())
            ),
            Success::OutputMatches { ere, .. } => format!(
                "grep -Eq {} {} && echo 1 || echo 0",
                quote(ere),
                quote(&stdout.display().to_string())
            ),
            Success::ExitStatus => "[ $? -eq 0 ] && echo 1 || echo 0".into(),
            Success::Unchecked => String::new(),
        }
    }
}

impl Success {
    /// Whether a finished run succeeded, from whether its job failed and its output: container schedulers judge
    /// unchecked hooks by their status.
    pub fn judge(&self, failed: bool, stdout: &std::path::Path) -> bool {
        match self {
            Success::OutputContains(text) => {
                !failed && std::fs::read_to_string(stdout).is_ok_and(|s| s.contains(text))
            }
            Success::OutputMatches { matches, .. } => {
                !failed && std::fs::read_to_string(stdout).is_ok_and(|s| s.lines().any(matches))
            }
            Success::ExitStatus | Success::Unchecked => !failed,
        }
    }
}

fn line(program: &str, args: &[String]) -> String {
    let mut s = program.to_string();
    for a in args {
        s.push(' ');
        s.push_str(a);
    }
    s
}

/// Where the MPI operator mounts its host file in an MPI job's launcher (Kubernetes MPIJob, Run:ai distributed).
pub(crate) const MPI_HOSTFILE: &str = "/etc/mpi/hostfile";

/// `mpirun` starting `ranks` ranks of `cmd` (`ranks_per_node` per host), every name in `env` forwarded to the
/// ranks (`-x`: ranks started over ssh get a fresh environment), with the host file when one is given (Open MPI
/// 5 ignores the operator's ORTE variables and would put every rank on the launcher).
pub fn mpirun(
    ranks: u64,
    ranks_per_node: u64,
    hostfile: Option<&str>,
    env: &[(String, String)],
    cmd: &str,
) -> Vec<String> {
    let mut v = vec!["mpirun".to_string(), "--allow-run-as-root".into()];
    if let Some(h) = hostfile {
        v.extend(["--hostfile".into(), h.to_string()]);
    }
    v.extend([
        "-np".into(),
        ranks.to_string(),
        "-bind-to".into(),
        "none".into(),
        "-map-by".into(),
        format!("ppr:{ranks_per_node}:node"),
    ]);
    for (k, _) in env {
        v.push("-x".into());
        v.push(k.clone());
    }
    v.push(cmd.to_string());
    v
}

#[cfg(test)]
mod tests {

    #[test]
    fn quoted_regions_are_quoted_innermost_first_and_image_marks_found() {
        let q = |s: &str| crate::util::shell::py_quote(s);
        let text = format!(
            "run {}",
            quoted(&format!("mkdir -p {}; true", quoted("a b")))
        );
        assert_eq!(
            fill_quoted(&text, q),
            "run 'mkdir -p '\"'\"'a b'\"'\"'; true'"
        );
        assert_eq!(fill_quoted(&quoted("plain/path"), q), "plain/path");
        let t = format!("{} x {}", srun_lines_in("img:1"), srun_lines_in("other"));
        let marks = srun_lines_marks(&t);
        assert_eq!(
            marks.iter().map(|m| m.2).collect::<Vec<_>>(),
            ["img:1", "other"]
        );
        assert_eq!(&t[marks[0].1..marks[1].0], " x ");
    }
    use super::*;

    fn mpi(gpus_per_rank: u64) -> Launch {
        Launch {
            procs: Procs::Mpi,
            gpus_per_rank,
            ..Launch::process("all_reduce_perf_mpi", vec!["--ngpus".into(), "1".into()])
        }
    }

    #[test]
    fn ranks_fill_the_node() {
        let l = mpi(1);
        assert_eq!(l.ranks_per_node(8), 8);
        assert_eq!(l.gpus_per_node(8), 8);
        assert!(l.needs_launcher(1, 8));
        assert!(!l.needs_launcher(1, 1));
        let l = mpi(8);
        assert_eq!((l.ranks_per_node(8), l.gpus_per_node(8)), (1, 8));
        assert!(l.needs_launcher(2, 8) && !l.needs_launcher(1, 8));
        let sleep = Launch::process("sleep", vec!["5".into()]);
        assert_eq!((sleep.ranks_per_node(8), sleep.gpus_per_node(8)), (1, 0));
        assert!(!sleep.needs_launcher(4, 8));
    }

    #[test]
    fn shapes_that_cannot_be_placed_are_named() {
        assert!(mpi(3).shape_problem("t", 2, 8).unwrap().contains("divide"));
        assert!(mpi(16)
            .shape_problem("t", 1, 8)
            .unwrap()
            .contains("gpus_per_node = 8"));
        let single = Launch {
            procs: Procs::Single,
            gpus_per_rank: 8,
            ..Launch::process("all_reduce_perf", vec![])
        };
        assert!(single.shape_problem("t", 2, 8).unwrap().contains("_mpi"));
        assert_eq!(single.shape_problem("t", 1, 8), None);
        assert_eq!(mpi(2).shape_problem("t", 4, 8), None);
    }

    #[test]
    fn mpirun_forwards_env_and_uses_the_hostfile() {
        let env = vec![("NCCL_DEBUG".to_string(), "INFO".to_string())];
        assert_eq!(
            mpirun(16, 8, Some("/etc/mpi/hostfile"), &env, "x --ngpus 1").join(" "),
            "mpirun --allow-run-as-root --hostfile /etc/mpi/hostfile -np 16 -bind-to none -map-by ppr:8:node \
             -x NCCL_DEBUG x --ngpus 1"
        );
    }

    #[test]
    fn hook_checks() {
        let mut l = mpi(1);
        l.success = Success::OutputContains("Avg bus bandwidth");
        assert_eq!(
            l.shell_check(std::path::Path::new("/r/a b/stdout.txt")),
            "grep -q \"Avg bus bandwidth\" '/r/a b/stdout.txt' && echo 1 || echo 0"
        );
        l.success = Success::Unchecked;
        assert_eq!(l.shell_check(std::path::Path::new("/x")), "");
        assert!(l.success.judge(false, std::path::Path::new("/nonexistent")));
        l.success = Success::OutputContains("Avg bus bandwidth");
        assert!(!l.success.judge(false, std::path::Path::new("/nonexistent")));
    }
}
