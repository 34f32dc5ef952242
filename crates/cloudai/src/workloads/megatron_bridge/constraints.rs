//! The rules one Megatron-Bridge run's parallelism, batch, CUDA-graph and recompute settings must keep
//! (CloudAI's `constraint_check`): the launcher or Megatron would reject the run, or run it wrongly. A single run
//! that breaks one is refused before anything is written; a sweep skips the steps that break one, as CloudAI's
//! agent does.

use crate::config::args::{ArgValue, CmdArgs};

/// A comma list's items, lower case.
fn items(v: Option<&ArgValue>) -> Vec<String> {
    v.map(super::comma_items)
        .unwrap_or_default()
        .into_iter()
        .map(|s| s.to_lowercase())
        .collect()
}

/// Scopes a transformer_engine CUDA graph may capture.
const TE_SCOPES: &[&str] = &[
    "attn",
    "mlp",
    "moe",
    "moe_router",
    "moe_preprocess",
    "mamba",
];
/// (pipeline, virtual pipeline) sizes DeepSeek V3's layer layout has a mapping for.
const DEEPSEEK_V3_PP_VP: &[(i64, i64)] = &[(1, 1), (4, 1), (8, 1), (4, 2), (16, 1), (8, 2), (4, 4)];

/// The rules `args` breaks, one sentence each (empty: none).
pub(super) fn failed(args: &CmdArgs) -> Vec<String> {
    let int = |k: &str| args.get(k).and_then(ArgValue::as_int);
    let flag = |k: &str| args.get(k) == Some(&ArgValue::Bool(true));
    let gpus = int("num_gpus").unwrap_or(8);
    let (tp, pp, cp) = (
        int("tp").unwrap_or(1),
        int("pp").unwrap_or(1),
        int("cp").unwrap_or(1),
    );
    let vp = int("vp");
    let model = tp * pp * cp;
    let dp = if model > 0 { gpus / model } else { 0 };
    let fsdp = flag("use_megatron_fsdp");
    let ndo = int("num_distributed_optimizer_instances");
    let offload = int("activation_offload_layers").unwrap_or(0);
    let graph_impl = args
        .get("cuda_graph_impl")
        .map(|v| v.py_str().trim().to_lowercase())
        .unwrap_or_default();
    let impl_on = !matches!(graph_impl.as_str(), "" | "none" | "null");
    let scopes = items(args.get("cuda_graph_scope"));
    let has = |s: &str| scopes.iter().any(|x| x == s);
    let graphs = impl_on && !scopes.is_empty();
    let recompute = items(args.get("recompute_modules"));
    let recomputes = |m: &[&str]| recompute.iter().any(|r| m.contains(&r.as_str()));

    let mut out = Vec::new();
    let mut rule = |broken: bool, why: String| {
        if broken {
            out.push(why);
        }
    };
    rule(
        model > 0 && gpus % model != 0,
        format!("num_gpus = {gpus} is not a multiple of tp × pp × cp = {tp} × {pp} × {cp}"),
    );
    rule(
        dp == 0,
        format!("num_gpus = {gpus} leaves no data-parallel rank for tp × pp × cp = {model}"),
    );
    if let (Some(mb), Some(gb)) = (int("mb"), int("gb")) {
        let per = mb * dp * if fsdp { ndo.unwrap_or(1) } else { 1 };
        rule(
            per == 0 || gb % per != 0,
            format!(
                "gb = {gb} is not a multiple of mb × data-parallel size{} = {per}",
                if fsdp {
                    " × num_distributed_optimizer_instances"
                } else {
                    ""
                }
            ),
        );
    }
    rule(
        fsdp && graphs,
        "use_megatron_fsdp cannot run with CUDA graphs (cuda_graph_impl with a cuda_graph_scope)"
            .into(),
    );
    rule(
        fsdp && (pp != 1 || cp != 1 || vp.is_some_and(|v| v != 1)),
        format!("use_megatron_fsdp needs pp = cp = vp = 1 (pp = {pp}, cp = {cp}, vp = {vp:?})"),
    );
    if let (Some(et), Some(ep)) = (int("et"), int("ep")) {
        let moe = et * ep * pp;
        rule(
            moe == 0 || gpus % moe != 0,
            format!("num_gpus = {gpus} is not a multiple of et × ep × pp = {et} × {ep} × {pp}"),
        );
    }
    rule(
        ndo.is_some_and(|n| n > 1) && !fsdp,
        "num_distributed_optimizer_instances above 1 needs use_megatron_fsdp = true".into(),
    );
    rule(
        pp > 1 && offload > 0,
        format!("pp = {pp} cannot run with activation_offload_layers = {offload}"),
    );
    rule(
        impl_on && flag("moe_a2a_overlap"),
        format!("moe_a2a_overlap must be false with cuda_graph_impl = {graph_impl:?}"),
    );
    rule(
        graphs && offload > 0,
        "CUDA graphs cannot run with activation_offload_layers".into(),
    );
    rule(
        !matches!(
            graph_impl.as_str(),
            "" | "none" | "null" | "transformer_engine" | "local"
        ),
        format!("cuda_graph_impl = {graph_impl:?} is not one of none, transformer_engine, local"),
    );
    match graph_impl.as_str() {
        "local" => rule(
            !(scopes.is_empty() || scopes == ["full_iteration"]),
            format!("cuda_graph_impl = \"local\" takes only cuda_graph_scope = full_iteration, not {scopes:?}"),
        ),
        "transformer_engine" => {
            let bad: Vec<&String> = scopes
                .iter()
                .filter(|s| !TE_SCOPES.contains(&s.as_str()))
                .collect();
            rule(
                !bad.is_empty(),
                format!("cuda_graph_impl = \"transformer_engine\" cannot capture {bad:?}"),
            );
        }
        _ => {}
    }
    rule(
        has("moe") && has("moe_router"),
        "cuda_graph_scope cannot hold both moe and moe_router".into(),
    );
    rule(
        has("moe_preprocess") && !has("moe_router"),
        "cuda_graph_scope moe_preprocess needs moe_router too".into(),
    );
    if !scopes.is_empty() {
        rule(
            has("attn") && recomputes(&["core_attn", "mla_up_proj"]),
            "an attn CUDA graph cannot run with core_attn or mla_up_proj recompute".into(),
        );
        rule(
            has("mlp") && recomputes(&["mlp"]),
            "an mlp CUDA graph cannot run with mlp recompute".into(),
        );
        rule(
            has("moe") && recomputes(&["moe_act", "moe", "shared_experts"]),
            "a moe CUDA graph cannot run with moe_act, moe or shared_experts recompute".into(),
        );
        rule(
            has("moe_router") && recomputes(&["moe", "shared_experts"]),
            "a moe_router CUDA graph cannot run with moe or shared_experts recompute".into(),
        );
        rule(
            recomputes(&["layernorm"])
                && has("attn")
                && has("mlp")
                && (has("moe") || has("moe_router")),
            "layernorm recompute cannot run with CUDA graphs over attn, mlp and moe or moe_router"
                .into(),
        );
    }
    let recipe = args.str("model_recipe_name").unwrap_or("").to_lowercase();
    if recipe.contains("deepseek_v3") || recipe.contains("deepseekv3") {
        let pair = (pp, vp.unwrap_or(1));
        rule(
            !DEEPSEEK_V3_PP_VP.contains(&pair),
            format!(
                "DeepSeek V3's layer layout has no mapping for pp = {}, vp = {}; use one of {DEEPSEEK_V3_PP_VP:?}",
                pair.0, pair.1
            ),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(pairs: &[(&str, ArgValue)]) -> CmdArgs {
        CmdArgs {
            values: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
            fixed_lists: Vec::new(),
        }
    }
    use ArgValue::{Bool as B, Int as I, Str as S};

    #[test]
    fn a_sound_run_breaks_no_rule() {
        let a = args(&[
            ("num_gpus", I(16)),
            ("tp", I(2)),
            ("pp", I(2)),
            ("mb", I(1)),
            ("gb", I(64)),
            ("ep", I(8)),
            ("et", I(1)),
            ("cuda_graph_impl", S("transformer_engine".into())),
            (
                "cuda_graph_scope",
                S("[attn, moe_router, moe_preprocess]".into()),
            ),
        ]);
        assert!(failed(&a).is_empty(), "{:?}", failed(&a));
        assert!(failed(&args(&[])).is_empty());
    }

    #[test]
    fn each_broken_rule_is_named() {
        let one = |pairs: &[(&str, ArgValue)], word: &str| {
            let f = failed(&args(pairs));
            assert!(f.iter().any(|m| m.contains(word)), "{pairs:?}: {f:?}");
        };
        one(&[("num_gpus", I(12)), ("tp", I(8))], "not a multiple of tp");
        one(&[("num_gpus", I(4)), ("tp", I(8))], "no data-parallel");
        one(
            &[("num_gpus", I(8)), ("mb", I(2)), ("gb", I(24))],
            "gb = 24",
        );
        one(
            &[
                ("use_megatron_fsdp", B(true)),
                ("cuda_graph_impl", S("local".into())),
                ("cuda_graph_scope", S("full_iteration".into())),
            ],
            "cannot run with CUDA graphs",
        );
        one(
            &[("use_megatron_fsdp", B(true)), ("pp", I(2))],
            "pp = cp = vp = 1",
        );
        one(
            &[("num_gpus", I(8)), ("ep", I(3)), ("et", I(1))],
            "et × ep × pp",
        );
        one(
            &[("num_distributed_optimizer_instances", I(2))],
            "needs use_megatron_fsdp",
        );
        one(
            &[("pp", I(2)), ("activation_offload_layers", I(1))],
            "activation_offload_layers = 1",
        );
        one(
            &[
                ("cuda_graph_impl", S("local".into())),
                ("moe_a2a_overlap", B(true)),
            ],
            "moe_a2a_overlap must be false",
        );
        one(
            &[("cuda_graph_impl", S("cudagraph".into()))],
            "is not one of",
        );
        one(
            &[
                ("cuda_graph_impl", S("local".into())),
                ("cuda_graph_scope", S("attn".into())),
            ],
            "only cuda_graph_scope = full_iteration",
        );
        one(
            &[
                ("cuda_graph_impl", S("transformer_engine".into())),
                ("cuda_graph_scope", S("full_iteration".into())),
            ],
            "cannot capture",
        );
        one(
            &[("cuda_graph_scope", S("moe,moe_router".into()))],
            "both moe and moe_router",
        );
        one(
            &[("cuda_graph_scope", S("moe_preprocess".into()))],
            "needs moe_router",
        );
        one(
            &[
                ("cuda_graph_scope", S("attn".into())),
                ("recompute_modules", S("core_attn".into())),
            ],
            "attn CUDA graph",
        );
        one(
            &[("model_recipe_name", S("deepseek_v3".into())), ("pp", I(2))],
            "DeepSeek V3",
        );
    }
}
