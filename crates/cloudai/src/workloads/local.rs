//! Workloads that run on this machine from a script they write themselves (Aiconfigurator's predictor, the Dynamo
//! mocker): the scheduler tells the workload where it stands ([`LocalAt`]), the workload answers with its files and
//! its command ([`LocalJob`]); their Python comes from an environment made from package requirements
//! ([`PythonEnv`], CloudAI's `PythonEnvironment`).

use std::path::{Path, PathBuf};

/// What the machine's scheduler knows that the workload's script states.
#[derive(Clone, Copy, Debug)]
pub struct LocalAt<'a> {
    /// The system's install path as configured (CloudAI writes it as given, relative or not).
    pub install: &'a Path,
    /// The iteration's directory.
    pub dir: &'a Path,
}

/// An iteration's script and what `test-run.toml` records of it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LocalJob {
    /// Files written into the iteration's directory before it runs (name, text).
    pub files: Vec<(String, String)>,
    /// `test_cmd` and `full_cmd` of `test-run.toml`.
    pub test_cmd: String,
    pub full_cmd: String,
    /// The shell text that runs it (in the directory cloudai runs in: the install path may be relative).
    pub runs: String,
}

/// The file of CloudAI's a workload runs from where it was found (its checkout's path when none was).
pub fn script_path(test: &crate::config::test::TestDefinition, spec: &super::Script) -> PathBuf {
    test.script
        .as_ref()
        .map_or_else(|| PathBuf::from(spec.in_cloudai), |s| s.src.clone())
}

/// A Python environment made from package requirements with `uv` under the install path:
/// `<name>-py<version>-<first 12 hex digits of sha256(requirements joined by newlines)>`, so CloudAI's and ours
/// are the same directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PythonEnv {
    pub name: &'static str,
    pub python: &'static str,
    pub requirements: &'static [&'static str],
}

impl PythonEnv {
    /// Its directory's name.
    pub fn venv_name(&self) -> String {
        let digest = ring::digest::digest(
            &ring::digest::SHA256,
            self.requirements.join("\n").as_bytes(),
        );
        let hex: String = digest.as_ref()[..6]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("{}-py{}-{hex}", sanitize(self.name), sanitize(self.python))
    }
    /// Its directory under `install`.
    pub fn path(&self, install: &Path) -> PathBuf {
        install.join(self.venv_name())
    }
    /// Its Python, written as CloudAI writes the path (Python's `pathlib`: `./install/x` is `install/x`).
    pub fn python_in(&self, install: &Path) -> String {
        crate::config::args::pure_path(
            &self
                .path(install)
                .join("bin")
                .join("python")
                .display()
                .to_string(),
        )
    }
}

/// CloudAI's rule for the parts of the name: runs of anything but `A-Za-z0-9_.-` become one `_`.
fn sanitize(s: &str) -> String {
    let mut out = String::new();
    let mut run = false;
    for c in s.chars() {
        if c.is_ascii_alphanumeric() || "_.-".contains(c) {
            out.push(c);
            run = false;
        } else if !run {
            out.push('_');
            run = true;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_cloudai() {
        let e = PythonEnv {
            name: "aiconfigurator",
            python: "3.10",
            requirements: &["aiconfigurator~=0.5.0"],
        };
        assert_eq!(e.venv_name(), "aiconfigurator-py3.10-f5c92280eed1");
        let e = PythonEnv {
            name: "dynamo-mocker",
            python: "3.12",
            requirements: &["ai-dynamo", "genai-perf", "aiperf"],
        };
        assert_eq!(e.venv_name(), "dynamo-mocker-py3.12-73eeb678863b");
        assert_eq!(
            e.python_in(Path::new("./install")),
            "install/dynamo-mocker-py3.12-73eeb678863b/bin/python"
        );
        assert_eq!(sanitize("a b//c"), "a_b_c");
    }
}
