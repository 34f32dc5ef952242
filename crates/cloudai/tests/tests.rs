//! Every integration test of cloudai, in one binary (one link, one summary line), one module per area. Tests run
//! in parallel; those that share the one local Slurm cluster take it through `common::slurm` (shared, or alone
//! for a test that drains nodes or fills the cluster).

mod common;

/// Every cloudai a test starts records into this test build's own ledger, never the user's (a test of the ledger
/// names its own with `--ledger`). Set before `main`, while the process has one thread.
#[used]
#[link_section = ".init_array"]
static ISOLATE_LEDGER: extern "C" fn() = isolate_ledger;

extern "C" fn isolate_ledger() {
    std::env::set_var(
        "CLOUDAI_LEDGER",
        concat!(env!("CARGO_TARGET_TMPDIR"), "/test-ledger.sqlite"),
    );
}

mod ai_dynamo;
mod ai_dynamo_k8s;
mod aiconfigurator;
mod architecture;
mod bad_input;
mod baseline;
mod big_output;
mod chakra_replay;
mod charts;
mod compat_dry_run;
mod config_errors;
mod config_model;
mod ddlb;
mod deepep;
mod disk_full;
mod dist;
mod dse;
mod dynamo_mocker;
mod exit_codes;
mod field_trials;
mod injection;
mod install;
mod interrupted;
mod jax_toolbox;
mod k8s_recipes;
mod kubernetes;
mod kubernetes_faults;
mod launch_seam;
mod ledger;
mod limits;
mod megatron_bridge;
mod megatron_run;
mod moe_benchmark;
mod nccl_launchers;
mod nccl_parse;
mod nemo_launcher;
mod nixl;
mod nixl_ep;
mod node_health;
mod plain_clone;
mod quarantine;
mod readme;
mod reports;
mod resume;
mod run_standalone;
mod runai;
mod runai_faults;
mod runai_round2;
mod sglang;
mod single_sbatch;
mod slurm;
mod slurm_faults;
mod slurm_script;
mod templates;
mod triton_inference;
mod ucc;
mod verdicts;
mod vllm;
