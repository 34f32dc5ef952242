//! Megatron-Bridge (CloudAI's `MegatronBridge`): Megatron-Bridge's performance launcher
//! (`scripts/performance/setup_experiment.py`), run on the login node from NeMo-Run's Python environment, submits
//! the training job itself and stays with it (`--detach false`), writing the job's log into
//! `cloudai_megatron_bridge_launcher.log`; it may submit the job again after a failure (`max_retries`). cloudai
//! writes CloudAI's wrapper byte for byte (`launcher.rs`), follows the job the launcher runs, refuses what the
//! launcher would reject (`constraints.rs`) and grades the log (`log.rs`).

mod constraints;
mod launcher;
mod log;

use std::path::Path;

use super::submit::{PythonLauncher, Submission, SubmitAt};
use super::{IterationReport, JobOutcome, Launch, Needs, Placement, Success, Verdict, Workload};
use crate::config::args::{ArgDefault as D, ArgSpec, ArgType as T, ArgValue, CmdArgs};
use crate::config::decode::{join, Ctx, View};
use crate::config::node::Kind;
use crate::config::test::{TemplateSchema, TestDefinition};

pub struct MegatronBridge;

/// NeMo-Run, whose Python environment runs the launcher (CloudAI's default).
const RUN_URL: &str = "https://github.com/NVIDIA-NeMo/Run.git";
const RUN_COMMIT: &str = "main";
/// The environment variable a Hugging Face token comes from when the test gives none.
pub(super) const HF_TOKEN_ENV: &str = "HF_TOKEN";

const fn opt(name: &'static str, ty: T) -> ArgSpec {
    ArgSpec::new(name, ty, D::Unset).single()
}
const fn sweep(name: &'static str, ty: T) -> ArgSpec {
    ArgSpec::new(name, ty, D::Unset)
}

static ARGS: &[ArgSpec] = &[
    ArgSpec::new("gpu_type", T::Str, D::Str("gb200")).single(),
    ArgSpec::new("log_dir", T::Str, D::Str("")).single(),
    ArgSpec::new("container_image", T::Str, D::Str("")).single(),
    ArgSpec::new("num_gpus", T::Int, D::Int(8))
        .single()
        .at_least(1),
    ArgSpec::new("enable_vboost", T::Bool, D::Bool(false)).single(),
    ArgSpec::new("dryrun", T::Bool, D::Bool(false)).single(),
    ArgSpec::new("enable_nsys", T::Bool, D::Bool(false)).single(),
    opt("domain", T::Str),
    opt("hidden_size", T::Int).at_least(1),
    opt("num_layers", T::Int).at_least(1),
    opt("pipeline_model_parallel_layout", T::Str),
    opt("first_k_dense_replace", T::Int).at_least(0),
    ArgSpec::new("model_family_name", T::Str, D::Str("")).single(),
    ArgSpec::new("model_recipe_name", T::Str, D::Str("")).single(),
    opt("use_recipes", T::Bool),
    ArgSpec::new("task", T::Str, D::Str("pretrain")).single(),
    ArgSpec::new("compute_dtype", T::Str, D::Str("bf16")).single(),
    opt("fp8_recipe", T::Str),
    ArgSpec::new("hf_token", T::Str, D::Str("")).single(),
    opt("nemo_home", T::Str),
    opt("wandb_key", T::Str),
    opt("wandb_project_name", T::Str),
    opt("wandb_entity_name", T::Str),
    opt("wandb_experiment_name", T::Str),
    opt("wandb_save_dir", T::Str),
    ArgSpec::new("max_retries", T::Int, D::Int(1))
        .single()
        .at_least(0),
    sweep("use_tokendrop", T::Bool),
    sweep("use_megatron_fsdp", T::Bool),
    sweep("cuda_graph_impl", T::Str),
    sweep("cuda_graph_scope", T::Str),
    sweep("tp", T::Int).at_least(1),
    sweep("pp", T::Int).at_least(1),
    sweep("cp", T::Int).at_least(1),
    sweep("vp", T::Int).at_least(1),
    sweep("ep", T::Int).at_least(1),
    sweep("et", T::Int).at_least(1),
    sweep("mb", T::Int).at_least(1),
    sweep("gb", T::Int).at_least(1),
    sweep("seq_length", T::Int).at_least(1),
    sweep("lr", T::Float),
    sweep("min_lr", T::Float),
    sweep("warmup_iters", T::Int).at_least(0),
    opt("pretrained_checkpoint", T::Str),
    opt("save_dir", T::Str),
    opt("load_dir", T::Str),
    opt("save_interval", T::Int).at_least(1),
    opt("most_recent_k", T::Int),
    ArgSpec::new(
        "save_config_filepath",
        T::Str,
        D::Str("/nemo_run/configs/ConfigContainer.yaml"),
    )
    .single(),
    opt("data", T::Str),
    sweep("dataset_paths", T::Str),
    opt("dataset_root", T::Str),
    opt("index_mapping_dir", T::Str),
    opt("dataset_name", T::Str),
    opt("packed_sequence", T::Bool),
    opt("head_only", T::Bool),
    opt("tokenizer_type", T::Str),
    opt("tokenizer_model", T::Str),
    opt("vocab_size", T::Int).at_least(1),
    opt("pytorch_profiler", T::Bool),
    opt("profiling_start_step", T::Int).at_least(0),
    opt("profiling_stop_step", T::Int).at_least(0),
    opt("record_memory_history", T::Bool),
    opt("profiling_gpu_metrics", T::Bool),
    sweep("profiling_ranks", T::Text),
    sweep("nsys_trace", T::Str),
    sweep("nsys_extra_args", T::Str),
    sweep("nccl_ub", T::Bool),
    sweep("moe_a2a_overlap", T::Bool),
    ArgSpec::new("max_steps", T::Int, D::Int(10))
        .single()
        .at_least(1),
    sweep("recompute_num_layers", T::Int).at_least(0),
    sweep("activation_offload_layers", T::Int).at_least(0),
    sweep("recompute_modules", T::Str),
    opt("num_distributed_optimizer_instances", T::Int).at_least(1),
    opt("config_variant", T::Str),
    opt("list_config_variants", T::Bool),
];
static REPO: &[ArgSpec] = &[
    ArgSpec::new("url", T::Str, D::Str(RUN_URL)).single(),
    ArgSpec::new("commit", T::Str, D::Str(RUN_COMMIT)).single(),
    ArgSpec::new("init_submodules", T::Bool, D::Bool(false)).single(),
    // where it is cloned on the system (written into test-run.toml, read back from it)
    ArgSpec::new("installed_path", T::Path, D::Unset).single(),
    ArgSpec::new("mount_as", T::Str, D::Unset).single(),
];
static FIELDS: &[ArgSpec] = &[ArgSpec::new(
    "nemo_run_repo",
    T::Model(REPO, false),
    D::Table,
)];

/// The repository entry that is Megatron-Bridge's, as CloudAI picks it: the first whose URL names it or that is
/// mounted where the image keeps it.
fn is_bridge_repo(url: &str, mount_as: Option<&str>) -> bool {
    url.contains("Megatron-Bridge")
        || mount_as.is_some_and(|m| m.trim_end_matches('/') == "/opt/Megatron-Bridge")
}

/// The test's Megatron-Bridge clone.
pub(super) fn bridge_repo(test: &TestDefinition) -> Option<&crate::config::test::GitRepo> {
    test.git_repos
        .iter()
        .find(|g| is_bridge_repo(&g.url, g.mount_as.as_deref()))
}

/// A comma list as the launcher reads it (`"[attn, 'mlp']"`, `attn,mlp`): its items without quotes or brackets.
pub(super) fn comma_items(v: &ArgValue) -> Vec<String> {
    let one = |s: &str| -> Vec<String> {
        let s = s.trim().trim_matches(['"', '\'']);
        let s = s
            .strip_prefix('[')
            .and_then(|r| r.strip_suffix(']'))
            .unwrap_or(s);
        s.split(',')
            .map(|p| p.trim().trim_matches(['"', '\'']).to_string())
            .filter(|p| !p.is_empty())
            .collect()
    };
    match v {
        ArgValue::List(l) => l.iter().flat_map(|x| one(&x.py_str())).collect(),
        x => one(&x.py_str()),
    }
}

/// The image a test names (`container_image`), as CloudAI tells them apart: a local file (`/…`, `./…`), or a URL
/// the job's image is pulled or cached from.
pub(super) enum Image<'a> {
    File(&'a str),
    Url(&'a str),
}

pub(super) fn image(test: &TestDefinition) -> Option<Image<'_>> {
    let given = test.cmd_args.str("container_image")?.trim();
    match given {
        "" => None,
        f if f.starts_with(['/', '.']) => Some(Image::File(f)),
        url => Some(Image::Url(url)),
    }
}

fn text<'a>(args: &'a CmdArgs, key: &str) -> &'a str {
    args.str(key).unwrap_or("")
}

impl TemplateSchema for MegatronBridge {
    fn template(&self) -> &'static str {
        "MegatronBridge"
    }
    fn args(&self) -> &'static [ArgSpec] {
        ARGS
    }
    fn fields(&self) -> &'static [ArgSpec] {
        FIELDS
    }
    fn validate(&self, ctx: &mut Ctx, v: &View, args: &CmdArgs) {
        let field = |k: &str| join(&v.field("cmd_args"), k);
        for k in ["model_family_name", "model_recipe_name"] {
            if text(args, k).trim().is_empty() {
                ctx.err(
                    &v.cmd_arg_loc(k),
                    &field(k),
                    "cannot be empty",
                    Some(format!(
                        "the launcher's {} names the model (e.g. \"qwen\" / \"qwen3_30b_a3b\")",
                        if k == "model_family_name" {
                            "-m"
                        } else {
                            "-mr"
                        }
                    )),
                );
            }
        }
        if args.get("list_config_variants") == Some(&ArgValue::Bool(true)) {
            ctx.err(
                &v.cmd_arg_loc("list_config_variants"),
                &field("list_config_variants"),
                "asks the launcher to choose a config variant interactively",
                Some(
                    "cloudai runs the launcher without a terminal: name the variant with config_variant instead"
                        .into(),
                ),
            );
        }
        // the Megatron-Bridge clone, pinned in [[git_repos]]
        let repos: Vec<(String, Option<String>)> = match v.get("git_repos").map(|n| &n.kind) {
            Some(Kind::Array(items)) => items
                .iter()
                .filter_map(|it| match &it.kind {
                    Kind::Table(t) => {
                        let s = |k: &str| match t.get(k).map(|n| &n.kind) {
                            Some(Kind::Str(s)) => Some(s.clone()),
                            _ => None,
                        };
                        Some((s("url").unwrap_or_default(), s("mount_as")))
                    }
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        if !repos
            .iter()
            .any(|(url, mount)| is_bridge_repo(url, mount.as_deref()))
        {
            let loc = v.get("git_repos").map_or(v.loc.clone(), |n| n.loc.clone());
            ctx.err(
                &loc,
                &v.field("git_repos"),
                if repos.is_empty() {
                    "MegatronBridge needs the Megatron-Bridge repository pinned in [[git_repos]]"
                } else {
                    "names no Megatron-Bridge repository (a url containing \"Megatron-Bridge\", or mount_as = \
                     \"/opt/Megatron-Bridge\")"
                },
                Some(
                    "add [[git_repos]] url = \"https://github.com/NVIDIA-NeMo/Megatron-Bridge.git\", commit = \
                     \"<tag or sha matching the image>\""
                        .into(),
                ),
            );
        }
    }
}

impl Workload for MegatronBridge {
    fn needs(&self) -> Needs {
        Needs::Submit
    }

    fn python_launcher(&self, test: &TestDefinition) -> Option<PythonLauncher> {
        Some(PythonLauncher::from_field(
            test,
            "nemo_run_repo",
            RUN_URL,
            RUN_COMMIT,
        ))
    }

    /// `installed_path` of NeMo-Run's clone, as `test-run.toml` records it.
    fn record_installed(&self, test: &mut TestDefinition, install: &Path) {
        let Some(launcher) = self.python_launcher(test) else {
            return;
        };
        let path = crate::config::args::pure_path(&launcher.repo(install).display().to_string());
        if let Some(ArgValue::Table(t)) = test.template_fields.get_mut("nemo_run_repo") {
            match t.get_mut("installed_path") {
                Some(v) => *v = ArgValue::Path(path),
                None => {
                    let at = t.get_index_of("mount_as").unwrap_or(t.len());
                    t.shift_insert(at, "installed_path".into(), ArgValue::Path(path));
                }
            }
        }
    }

    /// The job's `srun` line CloudAI records (the launcher writes the job), in the image the test names.
    fn launch(&self, test: &TestDefinition, _at: &Placement) -> Launch {
        let mut l = Launch::process("", Vec::new()).judged_by(Success::ExitStatus);
        l.image = match image(test) {
            Some(Image::Url(url)) => Some(url.to_string()),
            _ => None,
        };
        l
    }

    fn check(&self, test: &TestDefinition, _at: &Placement) -> Vec<String> {
        let mut problems: Vec<String> = self
            .constraints(test)
            .into_iter()
            .map(|c| format!("test '{}': {c}", test.name))
            .collect();
        if let Some(Image::File(file)) = image(test) {
            if !Path::new(file).exists() {
                problems.push(format!(
                    "test '{}': the image file {file:?} (cmd_args.container_image) does not exist; give a .sqsh \
                     that does, or the image's URL",
                    test.name
                ));
            }
        }
        let token = std::env::var(HF_TOKEN_ENV).unwrap_or_default();
        if text(&test.cmd_args, "hf_token").trim().is_empty() && token.trim().is_empty() {
            problems.push(format!(
                "test '{}': the launcher needs a Hugging Face token, and neither cmd_args.hf_token nor \
                 {HF_TOKEN_ENV} gives one; export {HF_TOKEN_ENV}=<token> (cloudai passes it by name and writes it \
                 into no file)",
                test.name
            ));
        }
        problems
    }

    fn constraints(&self, test: &TestDefinition) -> Vec<String> {
        constraints::failed(&test.cmd_args)
    }

    fn pre_test_job(&self) -> bool {
        true
    }
    fn submission(&self, test: &TestDefinition, at: &SubmitAt) -> Option<Submission> {
        let launcher = self.python_launcher(test)?;
        Some(launcher::submission(test, at, &launcher))
    }

    /// The last ten steps' time (`default`, `step-time`, s) and GPU throughput (`tflops-per-gpu`), their means.
    fn metric(&self, _test: &TestDefinition, dir: &Path, name: &str) -> Option<f64> {
        let log = log::read(dir).ok()?;
        match name {
            "default" | "step-time" => super::kit::mean(&log.window().0),
            "tflops-per-gpu" => super::kit::mean(&log.window().1),
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
