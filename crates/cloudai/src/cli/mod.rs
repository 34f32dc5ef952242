//! Thin clap layer: parse, set up logging, call one function per subcommand. Flag names are CloudAI's.

mod baseline;
mod dse;
mod find_bad_nodes;
mod history;
mod install;
mod list;
mod quarantine;
mod report;
mod resume;
mod run;
mod status;
mod verify;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::exit_codes::Failure;
use crate::log::{self, Level};

/// `0.1.0 (3f2a9c1d0e4b 2026-12-05)`: the version and the commit it was built from.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("CLOUDAI_COMMIT"), ")");

#[derive(Parser, Debug)]
#[command(
    name = "cloudai",
    version = VERSION,
    about = "Benchmark AI clusters with CloudAI test scenarios",
    long_about = None,
    after_long_help = crate::exit_codes::long_help()
)]
pub(crate) struct Cli {
    /// Log file with every DEBUG line (truncated on each invocation) [default: debug.log; read-only commands —
    /// status, verify-configs, list — write none unless given]
    #[arg(long, global = true)]
    log_file: Option<PathBuf>,
    /// Console log level: DEBUG, INFO, WARNING or ERROR
    #[arg(long, default_value = "INFO", global = true, value_parser = parse_level)]
    log_level: Level,
    /// Colour on the console: auto (a terminal, unless NO_COLOR is set), always or never
    #[arg(long, value_enum, default_value = "auto", global = true)]
    color: crate::util::color::When,
    /// The fleet ledger every graded run is recorded in: a SQLite file or a postgres:// URL (its password from
    /// the URL or PGPASSWORD, never printed) [default: $XDG_DATA_HOME/cloudai/ledger.sqlite]
    #[arg(
        long,
        global = true,
        env = "CLOUDAI_LEDGER",
        value_name = "PATH|URL",
        hide_env_values = true
    )]
    ledger: Option<String>,
    /// Record nothing in the ledger (wins over --ledger and CLOUDAI_LEDGER)
    #[arg(long, global = true)]
    no_ledger: bool,
    #[command(subcommand)]
    command: Command,
}

fn parse_level(s: &str) -> Result<Level, String> {
    Level::parse(s)
        .ok_or_else(|| format!("invalid log level: {s} (use DEBUG, INFO, WARNING or ERROR)"))
}

/// The one man page `cloudai man` writes (and the release tarball ships): clap's sections, with the subcommands
/// described in it rather than referred to pages `cloudai-run(1)` … that do not exist.
fn man_page(w: &mut dyn std::io::Write) -> std::io::Result<()> {
    use clap::CommandFactory;
    let cmd = Cli::command();
    let man = clap_mangen::Man::new(cmd.clone());
    man.render_title(w)?;
    man.render_name_section(w)?;
    man.render_synopsis_section(w)?;
    man.render_description_section(w)?;
    man.render_options_section(w)?;
    writeln!(w, ".SH SUBCOMMANDS")?;
    for sub in cmd.get_subcommands().filter(|c| !c.is_hide_set()) {
        let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
        let esc = |s: &str| s.replace('\\', "\\e").replace('-', "\\-");
        writeln!(
            w,
            ".TP\n\\fB{}\\fR\n{}\n(\\fBcloudai {} \\-\\-help\\fR for its options)",
            esc(sub.get_name()),
            esc(&about).replace("\n.", "\n\\&."),
            esc(sub.get_name())
        )?;
    }
    man.render_extra_section(w)?;
    man.render_version_section(w)?;
    Ok(())
}

/// `cloudai run --help`'s examples: the commands a first hour needs.
const RUN_EXAMPLES: &str = "Examples:
  # the sleep scenario on this machine (the built-in Standalone system)
  cloudai run --tests-dir conf/common/test --test-scenario conf/common/test_scenario/sleep.toml
  # NCCL on a Slurm cluster: write every file first, then run
  cloudai dry-run --system-config my_slurm.toml --tests-dir conf/common/test \\
      --test-scenario conf/common/test_scenario/nccl_test.toml
  cloudai run --system-config my_slurm.toml --tests-dir conf/common/test \\
      --test-scenario conf/common/test_scenario/nccl_test.toml --junit junit.xml
  # finish a tree whose cloudai was killed
  cloudai resume results/<scenario>_<timestamp>";

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a test scenario on the system
    #[command(after_help = RUN_EXAMPLES)]
    Run(RunArgs),
    /// Generate every file of a run without submitting anything; jobs complete at once
    DryRun(RunArgs),
    /// Check system, test and scenario TOMLs (a file, or a directory searched recursively)
    VerifyConfigs(verify::VerifyArgs),
    /// List what this build provides
    List(list::ListArgs),
    /// Re-grade and re-render the reports of an existing results directory (nothing is re-run)
    GenerateReport(report::ReportArgs),
    /// Baselines of known-good results, to grade later runs against (`--baseline`)
    Baseline(baseline::BaselineCmd),
    /// Run an NCCL test on node pairs, round by round, and name the nodes to blame
    FindBadNodes(find_bad_nodes::FindArgs),
    /// Install what the scenario's tests need (git repositories; images, with cache_docker_images_locally)
    Install(install::InstallArgs),
    /// Remove exactly what `install` made for the scenario's tests
    Uninstall(install::InstallArgs),
    /// Finish a results tree whose cloudai was killed or detached: re-attach to its jobs, run what never started
    Resume(resume::ResumeArgs),
    /// Every iteration of a results tree: state, job, nodes, elapsed, pending reason (one scheduler query)
    Status(status::StatusArgs),
    /// The fleet ledger: import results trees, a node's or test's history, trends, drift, metrics
    History(history::HistoryCmd),
    /// The nodes cloudai holds out of service (and those others hold); give ours back
    Quarantine(quarantine::QuarantineCmd),
    /// Print a shell completion script (bash: `source <(cloudai completions bash)`)
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff): `cloudai man > cloudai.1; man ./cloudai.1`
    Man,
}

#[derive(Args, Debug, Clone)]
pub(crate) struct CommonArgs {
    /// System TOML [default: the built-in standalone system, which runs tests as local processes]
    #[arg(long, env = "CLOUDAI_SYSTEM_CONFIG")]
    system_config: Option<PathBuf>,
    /// Test scenario TOML
    #[arg(long, required_unless_present = "resume")]
    test_scenario: Option<PathBuf>,
    /// Directory of test TOMLs (only *.toml directly inside)
    #[arg(long)]
    tests_dir: Option<PathBuf>,
    /// Hook directory [default: conf/hook under the working directory]
    #[arg(long)]
    hook_dir: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Where scenario results go [default: the system's output_path]
    #[arg(long)]
    output_dir: Option<PathBuf>,
    /// Do not check that the scenario's installables (git repositories, cached images) are installed
    #[arg(long)]
    enable_cache_without_check: bool,
    /// Slurm only: run the whole scenario in one sbatch job (one allocation; iterations one after another)
    #[arg(long)]
    single_sbatch: bool,
    #[command(flatten)]
    outputs: OutputArgs,
    #[command(flatten)]
    baseline: BaselineArgs,
    /// Submit what can be submitted, then exit and leave the jobs running; `cloudai resume DIR` finishes
    #[arg(long)]
    detach: bool,
    /// Resume this results tree instead of starting a new run (the same as `cloudai resume DIR`)
    #[arg(long, value_name = "RESULTS_DIR", conflicts_with_all = ["test_scenario", "system_config", "tests_dir", "hook_dir"])]
    resume: Option<PathBuf>,
}

/// The outputs beyond the results tree, the same for `run`, `resume` and `generate-report` (the report registry:
/// `ending::outputs`).
#[derive(Args, Debug, Clone, Default)]
pub(crate) struct OutputArgs {
    /// Also write a JUnit XML report here (one testcase per test iteration), for CI systems
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// Do not write `<results dir>.tgz` (written after `run` and `resume`, as CloudAI does, when a test did not
    /// pass)
    #[arg(long)]
    no_tarball: bool,
    /// Afterwards, write the ledger's metrics here atomically (OpenMetrics text, for node_exporter's textfile
    /// collector)
    #[arg(long, value_name = "PATH")]
    metrics_file: Option<PathBuf>,
}

impl OutputArgs {
    /// What was asked; `tarball` when the command writes one at all (not `generate-report`).
    pub fn asked(&self, tarball: bool) -> crate::ending::Asked {
        crate::ending::Asked {
            junit: self.junit.clone(),
            tarball: tarball && !self.no_tarball,
            metrics_file: self.metrics_file.clone(),
        }
    }
}

/// Grading against a baseline (`cloudai baseline create`).
#[derive(Args, Debug, Clone)]
pub(crate) struct BaselineArgs {
    /// Fail iterations whose busbw falls below this baseline file by more than --tolerance; `ledger`: below the
    /// same nodes' own history in the ledger (the median of their passed runs of the last 90 days)
    #[arg(long, value_name = "FILE|ledger")]
    baseline: Option<PathBuf>,
    /// Allowed busbw drop per size, in percent (baseline and --compare)
    #[arg(long, default_value_t = 5.0, value_parser = parse_pct)]
    tolerance: f64,
    /// Smallest message size a baseline drop fails (bytes, or with K/M/G)
    #[arg(long, default_value = "1M", value_parser = parse_size)]
    baseline_min_size: u64,
}

impl BaselineArgs {
    fn load(&self) -> Result<Option<crate::baseline::Grading>, Failure> {
        match self.baseline.as_deref() {
            // each node set's own history in the ledger (a file named `ledger`: `./ledger`)
            Some(p) if p == std::path::Path::new("ledger") => {
                crate::ledger::baseline::grading(self.tolerance / 100.0, self.baseline_min_size)
                    .map(Some)
                    .map_err(Failure::Error)
            }
            Some(p) => {
                crate::baseline::Grading::load(p, self.tolerance / 100.0, self.baseline_min_size)
                    .map(Some)
                    .map_err(Failure::from)
            }
            None => Ok(None),
        }
    }
}

fn parse_pct(s: &str) -> Result<f64, String> {
    match s.trim_end_matches('%').parse::<f64>() {
        Ok(v) if (0.0..100.0).contains(&v) => Ok(v),
        _ => Err(format!("{s} is not a percentage between 0 and 100")),
    }
}

/// `1048576`, `1M`, `512K`, `2G` (binary, as nccl-tests reads sizes).
fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 1 << 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    num.trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("{s} is not a size (bytes, or a number with K, M or G)"))
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Mode {
    Run,
    DryRun,
}

/// Entry point of the binary; returns the process exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return e.exit_code();
        }
    };
    crate::util::color::init(cli.color);
    crate::ledger::set_location(crate::ledger::Location::resolve(
        cli.ledger.as_deref(),
        cli.no_ledger,
    ));
    // hundreds of tests at once hold hundreds of descriptors: take what the hard limit allows
    crate::util::fds::raise_limit();
    match cli.command {
        Command::List(args) => list::list(&args),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "cloudai",
                &mut std::io::stdout(),
            );
            0
        }
        Command::Man => match man_page(&mut std::io::stdout()) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("cannot write the man page: {e}");
                1
            }
        },
        command => {
            // read-only commands never touch the working directory's log (a live run's may be there)
            let read_only = matches!(
                command,
                Command::Status(_) | Command::VerifyConfigs(_) | Command::History(_)
            );
            let log_file = match (&cli.log_file, read_only) {
                (Some(f), _) => Some(f.clone()),
                (None, false) => Some(PathBuf::from("debug.log")),
                (None, true) => None,
            };
            log::init(cli.log_level, log_file.as_deref());
            // commands that start jobs count every ending signal from here on, whatever they are doing when it
            // comes (the runner cancels; reports, tarball, sweep steps and rounds stop early)
            if matches!(
                command,
                Command::Run(_) | Command::Resume(_) | Command::FindBadNodes(_)
            ) {
                if let Err(e) = crate::util::signals::install() {
                    crate::error!("{e}; refusing to start jobs that could not be cancelled");
                    return 1;
                }
            }
            let result = match command {
                Command::Run(args) => run::run(&args, false),
                Command::DryRun(args) => run::run(&args, true),
                Command::VerifyConfigs(args) => Failure::of_code(verify::verify(&args)),
                Command::GenerateReport(args) => report::generate(&args),
                Command::Baseline(args) => baseline::baseline(&args),
                Command::FindBadNodes(args) => find_bad_nodes::find(&args),
                Command::Resume(args) => resume::resume_cmd(&args),
                Command::Install(args) => install::install(&args, false),
                Command::Uninstall(args) => install::install(&args, true),
                Command::Status(args) => status::status(&args),
                Command::History(args) => history::history(&args),
                Command::Quarantine(args) => quarantine::quarantine(&args),
                Command::List(_) | Command::Completions { .. } | Command::Man => unreachable!(),
            };
            // the one place a command's failure is printed and becomes the exit code
            match result {
                Ok(()) => crate::exit_codes::OK,
                Err(f) => f.report(),
            }
        }
    }
}
