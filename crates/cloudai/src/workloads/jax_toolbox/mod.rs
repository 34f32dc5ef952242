//! The JAX toolbox's Paxml training templates (CloudAI's `JaxToolboxGPT`, `JaxToolboxGrok`,
//! `JaxToolboxNemotron`): one task per node runs `run.sh` in a named container — a profiling stage (Paxml under
//! `nsys` on the first task, its profile turned into a PGLE file) and the measured stage — with XLA flags built
//! from the test. CloudAI's own dry-run stops on these templates (a `KeyError` on `.setup_flags.…`: its test name is
//! read before it is set); the job written here is the one its test suite's reference files show.
//!
//! Graded as CloudAI grades it (every task's log ends its run, the profiling stage's too, none of the known errors)
//! and further: one log per task of the run asked, the measured stage's step times read.

mod grade;
mod job;

use std::path::Path;

use super::{IterationReport, JobOutcome, Launch, Placement, Verdict, Workload};
use crate::config::args::{ArgDefault as D, ArgSpec, ArgType as T};
use crate::config::test::{TemplateSchema, TestDefinition};

/// Which of the three: its template name, its schema, and the prefix CloudAI files its values under (Nemotron's are
/// Grok's: it inherits Grok's reading of them).
pub(crate) struct JaxToolbox {
    template: &'static str,
    args: &'static [ArgSpec],
    model: Model,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Model {
    /// XLA flags in one `xla_flags` table, which CloudAI's job never reads (its stages look for `GPT.profile…`).
    Gpt,
    /// XLA flags per stage (`profile`, `perf`), PGLE optional (`enable_pgle`).
    Grok,
}

pub(crate) const GPT: JaxToolbox = JaxToolbox {
    template: "JaxToolboxGPT",
    args: GPT_ARGS,
    model: Model::Gpt,
};
pub(crate) const GROK: JaxToolbox = JaxToolbox {
    template: "JaxToolboxGrok",
    args: GROK_ARGS,
    model: Model::Grok,
};
pub(crate) const NEMOTRON: JaxToolbox = JaxToolbox {
    template: "JaxToolboxNemotron",
    args: NEMOTRON_ARGS,
    model: Model::Grok,
};

const fn int(name: &'static str, v: i64) -> ArgSpec {
    ArgSpec::new(name, T::Int, D::Int(v))
}
const fn boolean(name: &'static str, v: bool) -> ArgSpec {
    ArgSpec::new(name, T::Bool, D::Bool(v))
}
const fn text(name: &'static str, v: &'static str) -> ArgSpec {
    ArgSpec::new(name, T::Str, D::Str(v))
}
const fn float(name: &'static str, v: f64) -> ArgSpec {
    ArgSpec::new(name, T::Float, D::Float(v))
}

/// CloudAI's `JaxFdl` fields with a model's defaults (pydantic keeps a parent's order for a field a child
/// overrides and puts new ones after).
macro_rules! fdl {
    ($policy:expr, $dcn:expr, $ici:expr, $gpus:expr, $batch:expr, $repeated:expr $(, $extra:expr)* $(,)?) => {
        &[
            text("checkpoint_policy", $policy),
            text("dcn_mesh_shape", $dcn),
            text("fprop_dtype", "bfloat16"),
            text("ici_mesh_shape", $ici),
            int("max_steps", 20).at_least(1),
            int("num_gpus", $gpus).at_least(1),
            int("num_microbatches", 1).at_least(1),
            int("num_stages", 1).at_least(1),
            float("percore_batch_size", $batch),
            int("use_fp8", 1).at_least(0),
            boolean("use_repeated_layer", $repeated),
            $($extra,)*
        ]
    };
}

static GPT_FDL: &[ArgSpec] = fdl!(
    "save_nothing",
    "'[1, 1, 1]'",
    "'[1, 8, 1]'",
    64,
    4.0,
    false,
    int("num_groups", 64).single().at_least(1),
);
static GROK_FDL: &[ArgSpec] = fdl!(
    "\"save_iteration_input\"",
    "'[1, 8, 1, 1]'",
    "'[1, 1, 8, 1]'",
    64,
    1.0,
    false,
    boolean("combine_qkv", false),
    int("dims_per_head", 128).at_least(1),
    int("hidden_dims", 32768).at_least(1),
    int("max_seq_len", 8192).at_least(1),
    int("model_dims", 6144).at_least(1),
    int("num_experts", 8).at_least(1),
    int("num_groups", 64).at_least(1),
    int("num_heads", 48).at_least(1),
    int("num_kv_heads", 8).at_least(1),
    int("num_layers", 64).at_least(1),
    boolean("use_expert_parallel", true),
    boolean("use_te_dpa", true),
    int("vocab_size", 131072).at_least(1),
);
static NEMOTRON_FDL: &[ArgSpec] = fdl!(
    "save_dot_except_logits_ffn1",
    "'[1, 1, 1]'",
    "'[1, 8, 1]'",
    8,
    0.25,
    true,
    int("num_layers", 2).at_least(1),
);

/// CloudAI's `XLAFlags` with a model's overrides and additions.
macro_rules! xla {
    ($latency:expr, $double_buffering:expr $(, $extra:expr)* $(,)?) => {
        &[
            text("xla_disable_hlo_passes", "rematerialization"),
            text("xla_dump_hlo_pass_re", ".*"),
            boolean("xla_gpu_enable_all_gather_combine_by_dim", false),
            boolean("xla_gpu_enable_highest_priority_async_stream", true),
            boolean("xla_gpu_enable_latency_hiding_scheduler", $latency),
            boolean("xla_gpu_enable_pipelined_all_gather", true),
            boolean("xla_gpu_enable_pipelined_all_reduce", true),
            boolean("xla_gpu_enable_pipelined_reduce_scatter", true),
            boolean("xla_gpu_enable_reduce_scatter_combine_by_dim", false),
            boolean("xla_gpu_enable_triton_gemm", false),
            boolean("xla_gpu_enable_triton_softmax_fusion", false),
            boolean("xla_gpu_enable_while_loop_double_buffering", $double_buffering),
            int("xla_gpu_graph_level", 0).at_least(0),
            $($extra,)*
        ]
    };
}

static GPT_XLA: &[ArgSpec] = xla!(
    true,
    false,
    int("xla_gpu_all_reduce_combine_threshold_bytes", 447741952).at_least(0),
);
static GROK_PROFILE: &[ArgSpec] = xla!(
    false,
    true,
    text(
        "xla_gpu_disable_async_collectives",
        "ALLREDUCE,ALLGATHER,REDUCESCATTER,COLLECTIVEBROADCAST,ALLTOALL,COLLECTIVEPERMUTE",
    ),
    boolean("xla_gpu_run_post_layout_collective_pipeliner", false),
);
static GROK_PERF: &[ArgSpec] = xla!(
    true,
    true,
    int("combine_threshold_bytes", 301989888).at_least(0),
    boolean("xla_gpu_run_post_layout_collective_pipeliner", false),
    boolean("xla_gpu_use_memcpy_local_p2p", false),
    text(
        "xla_gpu_pgle_profile_file_or_directory_path",
        "/opt/paxml/workspace/pgle_output_profile.pbtxt",
    )
    .single(),
);
static NEMOTRON_XLA: &[ArgSpec] = xla!(
    true,
    true,
    int("xla_gpu_all_gather_combine_threshold_bytes", 3221225472)
        .single()
        .at_least(0),
    int("xla_gpu_all_reduce_combine_threshold_bytes", 3221225472)
        .single()
        .at_least(0),
    int("xla_gpu_reduce_scatter_combine_threshold_bytes", 6291456)
        .single()
        .at_least(0),
);

macro_rules! setup {
    ($($extra:expr),* $(,)?) => {
        &[
            text("docker_workspace_dir", "/opt/paxml/workspace/").single(),
            boolean("enable_checkpoint_saving", false).single(),
            int("gpus_per_node", 8).single().at_least(1),
            text("mpi", "pmix").single(),
            int("num_nodes", 8).single().at_least(1),
            text("tfds_data_dir", "/opt/dataset").single(),
            $($extra.single(),)*
        ]
    };
}
static SETUP: &[ArgSpec] = setup!();
static GPT_SETUP: &[ArgSpec] = setup!(text(
    "gpt_vocab_path",
    "gs://t5-data/vocabs/cc_all.32000.100extra/sentencepiece.model"
));
static NEMOTRON_SETUP: &[ArgSpec] = setup!(text("vocab_path", "/mnt/vocab"));

const fn model(name: &'static str, fields: &'static [ArgSpec]) -> ArgSpec {
    ArgSpec::new(name, T::Model(fields, false), D::Table)
}
const IMAGE: ArgSpec = ArgSpec::new("docker_image_url", T::Str, D::Required).single();
const LOAD: ArgSpec = boolean("load_container", true).single();
const OUTPUT: ArgSpec = ArgSpec::new("output_path", T::Str, D::Unset).single();
const GROK_CONFIG: ArgSpec = text("fdl_config", "paxml.tasks.lm.params.nvidia.Grok_Proxy").single();
const PGLE: ArgSpec = boolean("enable_pgle", true).single();

static GPT_ARGS: &[ArgSpec] = &[
    IMAGE,
    LOAD,
    OUTPUT,
    ArgSpec::new("fdl_config", T::Str, D::Required).single(),
    model("fdl", GPT_FDL),
    model("xla_flags", GPT_XLA),
    model("setup_flags", GPT_SETUP),
];
static GROK_ARGS: &[ArgSpec] = &[
    IMAGE,
    LOAD,
    OUTPUT,
    model("fdl", GROK_FDL),
    GROK_CONFIG,
    PGLE,
    model("setup_flags", SETUP),
    model("profile", GROK_PROFILE),
    model("perf", GROK_PERF),
];
static NEMOTRON_ARGS: &[ArgSpec] = &[
    IMAGE,
    LOAD,
    OUTPUT,
    model("fdl", NEMOTRON_FDL),
    GROK_CONFIG,
    PGLE,
    model("setup_flags", NEMOTRON_SETUP),
    model("profile", GROK_PROFILE),
    model("perf", GROK_PERF),
    model("xla_flags", NEMOTRON_XLA),
];

impl TemplateSchema for JaxToolbox {
    fn template(&self) -> &'static str {
        self.template
    }
    fn args(&self) -> &'static [ArgSpec] {
        self.args
    }
}

impl Workload for JaxToolbox {
    fn needs(&self) -> super::Needs {
        super::Needs::Srun
    }

    fn check(&self, test: &TestDefinition, _at: &Placement) -> Vec<String> {
        job::combine_threshold(test).err().into_iter().collect()
    }

    fn launch(&self, test: &TestDefinition, at: &Placement) -> Launch {
        job::launch(test, at, self.model)
    }

    fn grade(&self, test: &TestDefinition, dir: &Path, outcome: &JobOutcome) -> Verdict {
        grade::verdict(test, dir, outcome)
    }

    /// CloudAI's metric: none (its grading strategy scores 0); `default` and `step-time` here are the measured
    /// stage's mean step time after its first ten steps.
    fn metric(&self, _test: &TestDefinition, dir: &Path, name: &str) -> Option<f64> {
        match name {
            "default" | "step-time" => {
                grade::Stats::of(&grade::read(dir).ok()?.times).map(|s| s.average)
            }
            _ => None,
        }
    }

    fn report(&self, test: &TestDefinition, dir: &Path, title: &str) -> Option<IterationReport> {
        grade::report(test, dir, title)
    }
}
