//! NeMo launcher (CloudAI's `NeMoLauncher`): NeMo-Framework-Launcher's `main.py`, run on the login node from a
//! Python environment of its own, submits the training job itself; cloudai gives it the test's `cmd_args` as Hydra
//! overrides (`training.trainer.max_steps=20`, the environment as `+env_vars.K="V"`) plus the cluster's partition,
//! account, nodes, image and this iteration's directory as its results directory, then watches the job it prints.
//! The command is CloudAI's byte for byte (`hydra.rs`); the grade reads the job's training log (`log.rs`).

mod hydra;
mod log;

use std::path::Path;

use super::submit::{PythonLauncher, Submission, SubmitAt};
use super::{IterationReport, JobOutcome, Launch, Needs, Placement, Success, Verdict, Workload};
use crate::config::args::{ArgDefault as D, ArgSpec, ArgType as T, ArgValue, CmdArgs};
use crate::config::decode::{join, Ctx, View};
use crate::config::test::{TemplateSchema, TestDefinition};

pub struct NeMoLauncher;

/// The launcher CloudAI pins.
const LAUNCHER_URL: &str = "https://github.com/NVIDIA/NeMo-Framework-Launcher.git";
const LAUNCHER_COMMIT: &str = "599ecfcbbd64fd2de02f2cc093b1610d73854022";

static NUMA: &[ArgSpec] = &[ArgSpec::new("enable", T::Bool, D::Bool(true)).single()];
static CLUSTER: &[ArgSpec] = &[ArgSpec::new("gpus_per_node", T::Int, D::Int(8))
    .single()
    .at_least(1)];
static EXP_MANAGER: &[ArgSpec] =
    &[ArgSpec::new("create_checkpoint_callback", T::Bool, D::Bool(false)).single()];
static TRAINER: &[ArgSpec] = &[
    ArgSpec::new("max_steps", T::Int, D::Int(20))
        .single()
        .at_least(1),
    ArgSpec::new("val_check_interval", T::Int, D::Int(10))
        .single()
        .at_least(1),
    ArgSpec::new("log_every_n_steps", T::Enum(&["1", "2"]), D::Str("1")).single(),
    ArgSpec::new("enable_checkpointing", T::Bool, D::Bool(false)).single(),
];
static DATA: &[ArgSpec] = &[
    ArgSpec::new("data_prefix", T::Str, D::Str("[]")).single(),
    ArgSpec::new("data_impl", T::Str, D::Str("mock")).single(),
];
static MODEL: &[ArgSpec] = &[
    ArgSpec::new("global_batch_size", T::Int, D::Int(128))
        .single()
        .at_least(1),
    ArgSpec::new("micro_batch_size", T::Int, D::Int(2))
        .single()
        .at_least(1),
    ArgSpec::new("tensor_model_parallel_size", T::Int, D::Int(4))
        .single()
        .at_least(1),
    ArgSpec::new("pipeline_model_parallel_size", T::Int, D::Int(4))
        .single()
        .at_least(1),
    ArgSpec::new("data", T::Model(DATA, true), D::Table),
];
static RUN: &[ArgSpec] = &[
    ArgSpec::new("time_limit", T::Str, D::Str("3:00:00")).single(),
    ArgSpec::new("name", T::Str, D::Str("run")).single(),
];
static TRAINING: &[ArgSpec] = &[
    ArgSpec::new("values", T::Str, D::Str("gpt3/40b_improved")).single(),
    ArgSpec::new("exp_manager", T::Model(EXP_MANAGER, true), D::Table),
    ArgSpec::new("trainer", T::Model(TRAINER, true), D::Table),
    ArgSpec::new("model", T::Model(MODEL, true), D::Table),
    ArgSpec::new("run", T::Model(RUN, true), D::Table),
];
static ARGS: &[ArgSpec] = &[
    ArgSpec::new(
        "launcher_script",
        T::Str,
        D::Str("launcher_scripts/main.py"),
    )
    .single(),
    ArgSpec::new(
        "docker_image_url",
        T::Str,
        D::Str("nvcr.io/nvidia/nemo:24.12.01"),
    )
    .single(),
    ArgSpec::new("stages", T::Str, D::Str("[\"training\"]")).single(),
    ArgSpec::new("numa_mapping", T::Model(NUMA, true), D::Table),
    ArgSpec::new("cluster", T::Model(CLUSTER, true), D::Table),
    ArgSpec::new("training", T::Model(TRAINING, true), D::Table),
];
static REPO: &[ArgSpec] = &[
    ArgSpec::new("url", T::Str, D::Str(LAUNCHER_URL)).single(),
    ArgSpec::new("commit", T::Str, D::Str(LAUNCHER_COMMIT)).single(),
    ArgSpec::new("init_submodules", T::Bool, D::Bool(false)).single(),
];
static FIELDS: &[ArgSpec] = &[ArgSpec::new(
    "launcher_repo",
    T::Model(REPO, false),
    D::Table,
)];

/// The stages a `stages` value names (`["training"]`, `[training, conversion]`).
fn stages(value: &str) -> Vec<String> {
    value
        .trim()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .split(',')
        .map(|s| s.trim().trim_matches(['"', '\'']).trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The training's run name: the launcher's results directory under the iteration's (`run`).
fn run_name(test: &TestDefinition) -> String {
    test.cmd_args
        .at("training.run.name")
        .map_or_else(|| "run".to_string(), ArgValue::py_str)
}

/// The tokenizer file a test names (`training.model.tokenizer.model`, in `cmd_args` or `extra_cmd_args`).
fn tokenizer(test: &TestDefinition) -> Option<String> {
    const KEY: &str = "training.model.tokenizer.model";
    test.cmd_args
        .at(KEY)
        .map(ArgValue::py_str)
        .or_else(|| test.extra_cmd_args.get(KEY).cloned())
}

impl TemplateSchema for NeMoLauncher {
    fn template(&self) -> &'static str {
        "NeMoLauncher"
    }
    fn args(&self) -> &'static [ArgSpec] {
        ARGS
    }
    /// Undeclared keys are Hydra overrides, passed on as CloudAI passes them.
    fn extra_args(&self) -> bool {
        true
    }
    fn fields(&self) -> &'static [ArgSpec] {
        FIELDS
    }
    fn validate(&self, ctx: &mut Ctx, v: &View, args: &CmdArgs) {
        let field = |k: &str| join(&v.field("cmd_args"), k);
        let asked = args.str("stages").unwrap_or("");
        let n = stages(asked).len();
        if n != 1 {
            ctx.err(
                &v.cmd_arg_loc("stages"),
                &field("stages"),
                format!("must name exactly one stage, found {n} in {asked:?}"),
                Some(
                    "cloudai watches the one job the launcher submits; run each stage as a test of its own \
                     (stages = '[\"training\"]')"
                        .into(),
                ),
            );
        }
        let data = |k: &str| {
            args.at(&format!("training.model.data.{k}"))
                .map(ArgValue::py_str)
        };
        if data("data_impl").as_deref() != Some("mock")
            && data("data_prefix").map(|p| p.replace('\\', "")).as_deref() == Some("[]")
        {
            ctx.err(
                &v.cmd_arg_loc("training"),
                &field("training.model.data.data_prefix"),
                "is empty while training.model.data.data_impl is not \"mock\"",
                Some(
                    "give the prefix of the training datasets, or set data_impl = \"mock\"".into(),
                ),
            );
        }
    }
}

impl Workload for NeMoLauncher {
    fn needs(&self) -> Needs {
        Needs::Submit
    }

    fn python_launcher(&self, test: &TestDefinition) -> Option<PythonLauncher> {
        Some(PythonLauncher::from_field(
            test,
            "launcher_repo",
            LAUNCHER_URL,
            LAUNCHER_COMMIT,
        ))
    }

    /// The job's `srun` line CloudAI records (no program of its own: the launcher writes the job).
    fn launch(&self, test: &TestDefinition, _at: &Placement) -> Launch {
        Launch::process("", Vec::new())
            .in_test_image(test)
            .judged_by(Success::ExitStatus)
    }

    fn check(&self, test: &TestDefinition, _at: &Placement) -> Vec<String> {
        match tokenizer(test) {
            Some(t) if !Path::new(&t).is_file() => vec![format!(
                "test '{}': the tokenizer file {t:?} (training.model.tokenizer.model) does not exist; download \
                 the tokenizer and put its path in the test's file",
                test.name
            )],
            _ => Vec::new(),
        }
    }

    fn submission(&self, test: &TestDefinition, at: &SubmitAt) -> Option<Submission> {
        let launcher = self.python_launcher(test)?;
        Some(hydra::submission(test, at, &launcher))
    }

    /// `default` and `train-step-timing`: the median training step time (s), as CloudAI's grade measures it.
    fn metric(&self, test: &TestDefinition, dir: &Path, name: &str) -> Option<f64> {
        match name {
            "default" | "train-step-timing" => log::read(test, dir).ok()?.median_step_time(),
            _ => None,
        }
    }

    fn grade(&self, test: &TestDefinition, dir: &Path, outcome: &JobOutcome) -> Verdict {
        log::verdict(test, dir, outcome)
    }

    fn report(&self, test: &TestDefinition, dir: &Path, title: &str) -> Option<IterationReport> {
        log::report(test, dir, title)
    }
}
