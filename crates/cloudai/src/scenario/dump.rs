//! `test-run.toml`: what ran, as CloudAI dumps its TestRun model.

use std::path::Path;

use super::TestRun;
use crate::config::args::ArgValue;
use crate::config::test::TestDefinition;
use crate::util::pytoml::{dumps, PyVal};

fn arg(v: &ArgValue) -> PyVal {
    match v {
        ArgValue::Str(s) => PyVal::str(s.clone()),
        ArgValue::Path(_) => PyVal::str(v.py_repr()),
        ArgValue::Int(i) => PyVal::Int(*i),
        ArgValue::Float(f) => PyVal::Float(*f),
        ArgValue::Bool(b) => PyVal::Bool(*b),
        ArgValue::List(l) => PyVal::List(l.iter().map(arg).collect()),
        ArgValue::Table(t) => PyVal::Table(t.iter().map(|(k, v)| (k.clone(), arg(v))).collect()),
    }
}

fn kv(k: &str, v: PyVal) -> (String, PyVal) {
    (k.to_string(), v)
}

/// The test definition in CloudAI's model field order (pydantic `model_dump`).
pub fn definition(t: &TestDefinition) -> PyVal {
    let table = |m: &indexmap::IndexMap<String, ArgValue>| {
        PyVal::Table(m.iter().map(|(k, v)| (k.clone(), arg(v))).collect())
    };
    let git = t
        .git_repos
        .iter()
        .map(|g| {
            PyVal::Table(vec![
                kv("url", PyVal::str(g.url.clone())),
                kv("commit", PyVal::str(g.commit.clone())),
                kv("init_submodules", PyVal::Bool(g.init_submodules)),
                kv(
                    "installed_path",
                    g.installed
                        .as_ref()
                        .map_or(PyVal::None, |p| PyVal::str(posix_path(p))),
                ),
                kv("mount_as", PyVal::opt_str(&g.mount_as)),
            ])
        })
        .collect();
    let nsys = t.nsys.as_ref().map_or(PyVal::None, |n| {
        PyVal::Table(vec![
            kv("enable", PyVal::Bool(n.enable)),
            kv("nsys_binary", PyVal::str(n.nsys_binary.clone())),
            kv("task", PyVal::str(n.task.clone())),
            kv("output", PyVal::opt_str(&n.output)),
            kv("sample", PyVal::opt_str(&n.sample)),
            kv("trace", PyVal::opt_str(&n.trace)),
            kv(
                "force_overwrite",
                n.force_overwrite.map_or(PyVal::None, PyVal::Bool),
            ),
            kv("capture_range", PyVal::opt_str(&n.capture_range)),
            kv("capture_range_end", PyVal::opt_str(&n.capture_range_end)),
            kv("cuda_graph_trace", PyVal::opt_str(&n.cuda_graph_trace)),
            kv(
                "gpu_metrics_devices",
                PyVal::opt_str(&n.gpu_metrics_devices),
            ),
            kv("extra_args", PyVal::str_list(&n.extra_args)),
        ])
    });
    let mut fields = vec![
        kv("name", PyVal::str(t.name.clone())),
        kv("description", PyVal::str(t.description.clone())),
        kv(
            "test_template_name",
            PyVal::str(t.test_template_name.clone()),
        ),
        kv("cmd_args", table(&t.cmd_args.values)),
        kv("extra_env_vars", table(&t.extra_env_vars)),
        kv(
            "extra_cmd_args",
            PyVal::Table(
                t.extra_cmd_args
                    .iter()
                    .map(|(k, v)| (k.clone(), PyVal::str(v.clone())))
                    .collect(),
            ),
        ),
        kv("dse_excluded_args", PyVal::str_list(&t.dse_excluded_args)),
        kv(
            "extra_container_mounts",
            PyVal::str_list(&t.extra_container_mounts),
        ),
        kv("git_repos", PyVal::List(git)),
        kv("nsys", nsys),
        kv("predictor", t.predictor.as_ref().map_or(PyVal::None, arg)),
        kv("agent", PyVal::str(t.agent.clone())),
        kv("agent_steps", PyVal::Int(t.agent_steps as i64)),
        kv("agent_metrics", PyVal::str_list(&t.agent_metrics)),
        kv(
            "agent_reward_function",
            PyVal::str(t.agent_reward_function.clone()),
        ),
        kv(
            "agent_config",
            t.agent_config.as_ref().map_or(PyVal::None, arg),
        ),
        kv("env_params", table(&t.env_params)),
        kv(
            "training_report",
            t.training_report.map_or(PyVal::None, |(a, b)| {
                PyVal::Table(vec![
                    kv("exclude_start_steps", PyVal::Int(a as i64)),
                    kv("exclude_post_profiling_steps", PyVal::Int(b as i64)),
                ])
            }),
        ),
        kv(
            "script",
            // a file of CloudAI's run where it is (installed = src) is no field of CloudAI's test definition
            t.script
                .as_ref()
                .filter(|f| f.src != f.installed)
                .map_or(PyVal::None, |f| {
                    PyVal::Table(vec![
                        kv("src", PyVal::str(posix_path(&f.src))),
                        kv("_installed_path", PyVal::str(posix_path(&f.installed))),
                    ])
                }),
        ),
    ];
    fields.extend(t.template_fields.iter().map(|(k, v)| (k.clone(), arg(v))));
    PyVal::Table(fields)
}

/// `PosixPath('install_dir/x.py')`: how CloudAI's dump writes a path (Python's `repr` of a `pathlib` path, which
/// drops `.` parts, repeated and trailing slashes).
fn posix_path(p: &Path) -> String {
    let parts: Vec<_> = p
        .components()
        .filter(|c| !matches!(c, std::path::Component::CurDir))
        .collect();
    let s = if parts.is_empty() {
        ".".to_string()
    } else {
        parts
            .iter()
            .collect::<std::path::PathBuf>()
            .display()
            .to_string()
    };
    format!("PosixPath({})", py_str_repr(&s))
}

/// Python's `repr` of a string: single quotes unless it holds one and no double quote.
fn py_str_repr(s: &str) -> String {
    let q = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::from(q);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c == q => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out.push(q);
    out
}

pub(crate) fn render(
    run: &TestRun,
    iteration: u64,
    dir: &Path,
    test_cmd: &str,
    full_cmd: &str,
) -> String {
    let doc = vec![
        kv("name", PyVal::str(run.id.clone())),
        kv("nnodes", PyVal::Int(run.num_nodes as i64)),
        kv("nodes", PyVal::str_list(&run.nodes)),
        kv("output_path", PyVal::str(dir.display().to_string())),
        kv("iterations", PyVal::Int(run.iterations as i64)),
        kv("current_iteration", PyVal::Int(iteration as i64)),
        kv("step", PyVal::Int(run.step as i64)),
        kv("test_cmd", PyVal::str(test_cmd)),
        kv("full_cmd", PyVal::str(full_cmd)),
        kv("test_definition", definition(&run.test)),
    ];
    dumps(&doc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_as_python_prints_them() {
        assert_eq!(
            posix_path(Path::new("./install_dir/x.py")),
            "PosixPath('install_dir/x.py')"
        );
        assert_eq!(posix_path(Path::new("/a//b/./c/")), "PosixPath('/a/b/c')");
        assert_eq!(posix_path(Path::new("./")), "PosixPath('.')");
        assert_eq!(posix_path(Path::new("/it's")), "PosixPath(\"/it's\")");
    }
}
