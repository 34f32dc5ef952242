//! What a scenario needs installed before it runs, under the system's `install_path`: git repositories cloned at
//! their pinned commit (`<name>__<commit>`, mounted into containers) and, on Slurm with
//! `cache_docker_images_locally`, container images imported with enroot into `.sqsh` files. `install` is
//! idempotent and records what it made in `.cloudai-install.json`, so `uninstall` removes exactly that.

use std::path::{Path, PathBuf};

use crate::config::system::SystemConfig;
use crate::scenario::{Scenario, TestRun};

/// The manifest of what `install` created, inside `install_path`.
pub(crate) const MANIFEST: &str = ".cloudai-install.json";

#[derive(Clone, Debug, PartialEq)]
pub enum Installable {
    Repo {
        url: String,
        commit: String,
        submodules: bool,
        path: PathBuf,
    },
    Image {
        url: String,
        path: PathBuf,
    },
    /// A Python environment for a launcher run from its clone (`project`): `python3 -m venv`, then the project's
    /// dependencies (its `pyproject.toml`, else its `requirements.txt`), as CloudAI makes it.
    Venv {
        project: PathBuf,
        path: PathBuf,
    },
    /// A Python environment made from package requirements with `uv` (CloudAI's `PythonEnvironment`).
    PythonEnv {
        env: crate::workloads::local::PythonEnv,
        path: PathBuf,
    },
    /// A launcher file of CloudAI's, copied from the user's CloudAI (`src`) into the install directory.
    File {
        src: PathBuf,
        path: PathBuf,
        /// The environment variable that names the file when it is elsewhere.
        env: &'static str,
    },
}

impl Installable {
    pub fn path(&self) -> &Path {
        match self {
            Installable::Repo { path, .. }
            | Installable::Image { path, .. }
            | Installable::Venv { path, .. }
            | Installable::PythonEnv { path, .. }
            | Installable::File { path, .. } => path,
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Installable::Repo { url, commit, .. } => format!("git repository {url} at {commit}"),
            Installable::Image { url, .. } => format!("container image {url}"),
            Installable::Venv { project, .. } => format!(
                "Python environment of {}",
                project.file_name().unwrap_or_default().to_string_lossy()
            ),
            Installable::PythonEnv { env, .. } => format!(
                "Python {} environment {} ({})",
                env.python,
                env.name,
                env.requirements.join(", ")
            ),
            Installable::File { src, path, .. } if src == path => format!(
                "CloudAI's {} (run from {})",
                src.file_name().unwrap_or_default().to_string_lossy(),
                src.display()
            ),
            Installable::File { src, .. } => format!(
                "CloudAI's launcher {} (from {})",
                src.file_name().unwrap_or_default().to_string_lossy(),
                src.display()
            ),
        }
    }

    /// Made by `install` (and so removed by `uninstall`): all but a file of CloudAI's run where it is.
    fn ours(&self) -> bool {
        !matches!(self, Installable::File { src, path, .. } if src == path)
    }

    /// Installed: present, and for a copied file the same bytes as its source (as CloudAI checks it).
    pub fn installed(&self) -> bool {
        match self {
            Installable::File { src, path, .. } => {
                match (std::fs::read(src), std::fs::read(path)) {
                    (Ok(a), Ok(b)) => a == b,
                    (Err(_), Ok(_)) => true,
                    _ => false,
                }
            }
            // one being made (or left half made by a crash) carries the mark
            Installable::Venv { path, .. } => path.exists() && !path.join(VENV_PARTIAL).exists(),
            Installable::PythonEnv { path, .. } => {
                path.join("bin").join("python").is_file() && !path.join(VENV_PARTIAL).exists()
            }
            _ => self.path().exists(),
        }
    }
}

/// Inside a Python environment while it is being made: it is not installed until the mark is gone.
const VENV_PARTIAL: &str = ".cloudai-partial";

/// `nvcr.io#nvidia/pytorch:24.02-py3` → `nvcr.io_nvidia__pytorch__24.02-py3.sqsh`: CloudAI's cache file name, by its
/// rules (the tag is what follows the last `:`; the path's parts joined by `_` before `__<last part>`; `#` and `/`
/// become `_`; `_` trimmed at both ends), so a cache one tool built is found by the other.
pub(crate) fn sqsh_name(url: &str) -> String {
    let local = url.starts_with('/') || url.starts_with('.');
    let wo_prefix = url.split_once("://").map_or(url, |(_, r)| r);
    let (wo_tag, tag) = wo_prefix.rsplit_once(':').unwrap_or((wo_prefix, "notag"));
    let name = if local {
        wo_tag
            .rsplit_once('/')
            .map_or(wo_tag, |(_, last)| last)
            .to_string()
    } else {
        let (head, last) = wo_tag.rsplit_once('/').unwrap_or(("", wo_tag));
        format!("{}__{last}", head.replace('/', "_"))
    };
    format!("{}__{tag}.sqsh", name.replace('#', "_"))
        .replace(['/', '#'], "_")
        .trim_matches('_')
        .to_string()
}

/// The directory a repository is cloned into: `<install_path>/<repo name>__<commit>`.
pub(crate) fn repo_dir(install: &Path, url: &str, commit: &str) -> PathBuf {
    crate::config::test::repo_dir(install, url, commit)
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// The cached image of a test on this system, when images are cached.
pub(crate) fn cached_image(sys: &SystemConfig, run: &TestRun) -> Option<PathBuf> {
    cached_image_of(sys, &run.launch().image?)
}

/// Where this system caches the image `url`, when it caches images.
pub(crate) fn cached_image_of(sys: &SystemConfig, url: &str) -> Option<PathBuf> {
    sys.kind
        .caches_images()
        .then(|| absolute(&sys.install_path).join(sqsh_name(url)))
}

/// Every installable of the scenario's tests and hooks, once each.
pub(crate) fn installables(sys: &SystemConfig, scenario: &Scenario) -> Vec<Installable> {
    let install = absolute(&sys.install_path);
    let mut out: Vec<Installable> = Vec::new();
    let runs = scenario.test_runs.iter().flat_map(|r| {
        let hooks = [&r.pre_test, &r.post_test]
            .into_iter()
            .flatten()
            .flat_map(|h| h.test_runs.iter().cloned());
        std::iter::once(r.clone()).chain(hooks)
    });
    for r in runs {
        for g in &r.test.git_repos {
            out.push(Installable::Repo {
                url: g.url.clone(),
                commit: g.commit.clone(),
                submodules: g.init_submodules,
                path: repo_dir(&install, &g.url, &g.commit),
            });
        }
        if let (Some(path), Some(url)) = (cached_image(sys, &r), r.launch().image) {
            out.push(Installable::Image { url, path });
        }
        if let Some(l) = r.workload.python_launcher(&r.test) {
            out.push(Installable::Repo {
                url: l.url.clone(),
                commit: l.commit.clone(),
                submodules: false,
                path: l.repo(&install),
            });
            out.push(Installable::Venv {
                project: l.repo(&install),
                path: l.venv(&install),
            });
        }
        if let (Some(f), Some(spec)) = (&r.test.script, r.workload.script()) {
            out.push(Installable::File {
                src: f.src.clone(),
                path: if spec.in_place {
                    f.src.clone()
                } else {
                    install.join(spec.name)
                },
                env: spec.env,
            });
        }
        for (at, spec) in r.workload.scripts(&r.test) {
            let src = r
                .test
                .cmd_args
                .at(&format!("{at}.src"))
                .and_then(|v| v.as_str());
            if let Some(src) = src {
                out.push(Installable::File {
                    src: PathBuf::from(src),
                    path: install.join(spec.name),
                    env: spec.env,
                });
            }
        }
        if let Some((url, commit)) = r.workload.repo(&r.test) {
            out.push(Installable::Repo {
                path: repo_dir(&install, &url, &commit),
                url,
                commit,
                submodules: false,
            });
        }
        if let Some(e) = r.workload.python_env(&r.test) {
            out.push(Installable::PythonEnv {
                path: e.path(&install),
                env: e,
            });
        }
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|i| seen.insert(i.path().to_path_buf()));
    out
}

fn run(cmd: &mut std::process::Command) -> Result<(), String> {
    let shown = format!("{cmd:?}");
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {shown}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{shown} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A Python environment is made where it stays (its scripts name their own path), marked until it is complete; a
/// failure removes it.
fn make_venv(project: &Path, path: &Path) -> Result<(), String> {
    if !project.is_dir() {
        return Err(format!(
            "its repository {} is not installed (see above), so there is nothing to build it from",
            project.display()
        ));
    }
    let _ = std::fs::remove_dir_all(path);
    let python = path.join("bin").join("python");
    let r = run(std::process::Command::new("python3")
        .args(["-m", "venv"])
        .arg(path))
    .and_then(|_| {
        std::fs::write(path.join(VENV_PARTIAL), b"").map_err(|e| format!("{}: {e}", path.display()))
    })
    .and_then(|_| {
        let mut pip = std::process::Command::new(&python);
        pip.args(["-m", "pip", "install", "--quiet"]);
        if project.join("pyproject.toml").is_file() {
            pip.arg(project);
        } else if project.join("requirements.txt").is_file() {
            pip.arg("-r").arg(project.join("requirements.txt"));
        } else {
            return Err(format!(
                "{} has neither pyproject.toml nor requirements.txt to install from",
                project.display()
            ));
        }
        run(&mut pip)
    })
    .and_then(|_| {
        std::fs::remove_file(path.join(VENV_PARTIAL))
            .map_err(|e| format!("{}: {e}", path.display()))
    });
    if r.is_err() {
        let _ = std::fs::remove_dir_all(path);
    }
    r
}

/// A program on `PATH`.
fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|f| f.is_file())
    })
}

/// CloudAI's steps with `uv`: the Python version (fetched only when this machine has none: a login node without
/// internet still works with its own), `uv venv`, then `uv pip install` of the requirements. Marked until
/// complete; a failure removes it.
fn make_python_env(env: &crate::workloads::local::PythonEnv, path: &Path) -> Result<(), String> {
    let uv = which("uv").ok_or_else(|| {
        format!(
            "`uv` is not installed here, and this environment is made with it as CloudAI makes it: install uv \
             (`pip install --user uv` or `pipx install uv`), or make {} yourself with Python {} and {}",
            path.display(),
            env.python,
            env.requirements.join(" ")
        )
    })?;
    let have = std::process::Command::new(&uv)
        .args(["python", "find", env.python])
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        run(std::process::Command::new(&uv).args(["python", "install", env.python])).map_err(
            |e| {
                format!(
                    "Python {} is not on this machine and uv could not fetch it: {e}",
                    env.python
                )
            },
        )?;
    }
    let _ = std::fs::remove_dir_all(path);
    let python = path.join("bin").join("python");
    let r = run(std::process::Command::new(&uv)
        .args(["venv", "--python", env.python])
        .arg(path))
    .and_then(|_| {
        std::fs::write(path.join(VENV_PARTIAL), b"").map_err(|e| format!("{}: {e}", path.display()))
    })
    .and_then(|_| {
        if env.requirements.is_empty() {
            return Ok(());
        }
        run(std::process::Command::new(&uv)
            .args(["pip", "install", "--python"])
            .arg(&python)
            .args(env.requirements))
    })
    .and_then(|_| {
        std::fs::remove_file(path.join(VENV_PARTIAL))
            .map_err(|e| format!("{}: {e}", path.display()))
    });
    if r.is_err() {
        let _ = std::fs::remove_dir_all(path);
    }
    r
}

fn install_one(i: &Installable) -> Result<(), String> {
    // beside it, named after all of it (`with_extension` would make `x__v0.3.0` and `x__v0.3.1` share one)
    let mut tmp = i.path().as_os_str().to_os_string();
    tmp.push(".partial");
    let tmp = PathBuf::from(tmp);
    let _ = std::fs::remove_dir_all(&tmp);
    let _ = std::fs::remove_file(&tmp);
    if let Some(parent) = i.path().parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    // built under a temporary name and renamed: a failure never leaves something that looks installed
    let r = match i {
        Installable::Repo {
            url,
            commit,
            submodules,
            ..
        } => run(std::process::Command::new("git")
            .args(["clone", "--quiet", url])
            .arg(&tmp))
        .and_then(|_| {
            run(std::process::Command::new("git")
                .arg("-C")
                .arg(&tmp)
                .args(["checkout", "--quiet", commit]))
        })
        .and_then(|_| {
            if *submodules {
                run(std::process::Command::new("git").arg("-C").arg(&tmp).args([
                    "submodule",
                    "update",
                    "--init",
                    "--recursive",
                    "--quiet",
                ]))
            } else {
                Ok(())
            }
        }),
        Installable::File { src, env, path } => {
            if src.is_file() && src == path {
                return Ok(());
            } else if src.is_file() {
                std::fs::copy(src, &tmp)
                    .map(|_| ())
                    .map_err(|e| format!("cannot copy {}: {e}", src.display()))
            } else {
                Err(format!(
                    "{} does not exist: it is part of CloudAI, not of this tool; point {env} at it (it is in a \
                     CloudAI checkout under {}, or in an installed `cloudai` Python package)",
                    src.display(),
                    src.parent()
                        .and_then(|p| p.to_str())
                        .and_then(|p| p.find("src/cloudai").map(|i| &p[i..]))
                        .unwrap_or("src/cloudai/workloads")
                ))
            }
        }
        Installable::Venv { project, path } => return make_venv(project, path),
        Installable::PythonEnv { env, path } => return make_python_env(env, path),
        Installable::Image { url, .. } => run(std::process::Command::new("enroot")
            .arg("import")
            .arg("-o")
            .arg(&tmp)
            .arg(format!("docker://{}", url.replacen('#', "/", 1)))),
    };
    match r.and_then(|_| std::fs::rename(&tmp, i.path()).map_err(|e| e.to_string())) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

fn read_manifest(install: &Path) -> Vec<PathBuf> {
    std::fs::read(install.join(MANIFEST))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

fn write_manifest(install: &Path, paths: &[PathBuf]) -> std::io::Result<()> {
    std::fs::create_dir_all(install)?;
    let json = serde_json::to_vec_pretty(paths).map_err(std::io::Error::other)?;
    crate::util::fsx::write_atomic(&install.join(MANIFEST), &json)
}

fn enroot_available() -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("enroot").is_file()))
}

/// Installs what is missing; returns the failures (each named). Images are skipped, with a message, without enroot.
pub fn install(sys: &SystemConfig, items: &[Installable]) -> Vec<String> {
    let install = absolute(&sys.install_path);
    let mut made = read_manifest(&install);
    let mut failures = Vec::new();
    let n = items.len();
    for (k, i) in items.iter().enumerate() {
        if i.installed() {
            crate::info!(
                "[{}/{n}] {} is already installed at {}",
                k + 1,
                i.describe(),
                i.path().display()
            );
            continue;
        }
        if matches!(i, Installable::Image { .. }) && !enroot_available() {
            crate::warn!(
                "[{}/{n}] skipping {}: enroot is not installed here (install enroot, or set cache_docker_images_locally = false)",
                k + 1,
                i.describe()
            );
            continue;
        }
        crate::info!(
            "[{}/{n}] installing {} into {}",
            k + 1,
            i.describe(),
            i.path().display()
        );
        match install_one(i) {
            Ok(()) if i.ours() => made.push(i.path().to_path_buf()),
            Ok(()) => {}
            Err(e) => failures.push(format!("{}: {e}", i.describe())),
        }
    }
    if let Err(e) = write_manifest(&install, &made) {
        failures.push(format!(
            "cannot record what was installed in {}: {e}",
            install.join(MANIFEST).display()
        ));
    }
    failures
}

/// Removes what `install` made (and nothing else); returns the failures.
pub fn uninstall(sys: &SystemConfig, items: &[Installable]) -> Vec<String> {
    let install = absolute(&sys.install_path);
    let made = read_manifest(&install);
    let mut keep = Vec::new();
    let mut failures = Vec::new();
    for p in made {
        if !items.iter().any(|i| i.path() == p) {
            keep.push(p);
            continue;
        }
        let r = if p.is_dir() {
            std::fs::remove_dir_all(&p)
        } else {
            std::fs::remove_file(&p)
        };
        match r {
            Ok(()) => crate::info!("removed {}", p.display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                failures.push(format!("{}: {e}", p.display()));
                keep.push(p);
            }
        }
    }
    for i in items.iter().filter(|i| i.installed()) {
        if !keep.iter().any(|k| k == i.path()) {
            crate::info!(
                "{} was not installed by cloudai: left in place",
                i.path().display()
            );
        }
    }
    if let Err(e) = write_manifest(&install, &keep) {
        failures.push(format!(
            "cannot update {}: {e}",
            install.join(MANIFEST).display()
        ));
    }
    failures
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_names() {
        assert_eq!(
            sqsh_name("nvcr.io#nvidia/pytorch:24.02-py3"),
            "nvcr.io_nvidia__pytorch__24.02-py3.sqsh"
        );
        assert_eq!(sqsh_name("ubuntu"), "ubuntu__notag.sqsh");
        assert_eq!(sqsh_name("/img/local.sqsh"), "local.sqsh__notag.sqsh");
        // CloudAI's rule: the tag is whatever follows the last colon, a registry port included
        assert_eq!(sqsh_name("registry:5000/a/b"), "registry__5000_a_b.sqsh");
        assert_eq!(
            sqsh_name("docker://ghcr.io/x/y/z:1"),
            "ghcr.io_x_y__z__1.sqsh"
        );
        assert_eq!(
            repo_dir(
                Path::new("/i"),
                "https://github.com/NVIDIA/nccl-tests.git",
                "abc"
            ),
            Path::new("/i/nccl-tests__abc")
        );
    }
}
