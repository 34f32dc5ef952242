//! A job of steps (a workload's [`Steps`]): each step rendered with the job's launcher prefix, the job's
//! placeholders filled, and what its mounts need made before it starts.

use super::*;

impl Ctx<'_> {
    /// A job of several steps: each task launch with the job's prefix, shell text as written, the iteration's
    /// directory in place of [`RUN_DIR`].
    pub(super) fn steps_body(&self, t: &Target, steps: &Steps) -> String {
        let lines: Vec<String> = steps
            .steps
            .iter()
            .map(|step| match step {
                Step::Task {
                    all_nodes,
                    own_image,
                    opts,
                    cmd,
                } => {
                    let image = match steps.other_image.as_deref() {
                        Some(other) if *own_image => Image::Other(other),
                        _ => Image::Test,
                    };
                    let mut words = self.srun_prefix_with(t, *all_nodes, image);
                    words.extend(opts.iter().cloned());
                    words.push(cmd.clone());
                    words.join(" ")
                }
                Step::Shell(text) => text.clone(),
            })
            .collect();
        self.fill(t, &lines.join("\n"))
    }

    /// A step's or a job file's text with the job's placeholders filled: [`RUN_DIR`], [`SRUN`],
    /// [`SRUN_ALL_NODES`], [`SRUN_ALL_NODES_LINES`], [`RUN_TAG`], [`IMAGE`], [`MOUNTS`], [`SYSTEM_SRUN_ARGS`],
    /// [`HF_HOME`], [`NODELIST_LINE`], [`NODELIST_WORD`], [`NODES_ARRAY_START`], [`NODES_ARRAY_END`]. Each is worked out only when the text holds it (the mounts themselves may hold [`HF_HOME`]).
    pub(super) fn fill(&self, t: &Target, text: &str) -> String {
        if !text.contains('\u{E000}') {
            return text.to_string();
        }
        let prefix = |all_nodes| self.srun_prefix_with(t, all_nodes, Image::Test);
        let nodelist = |sep: &str| {
            if t.nodes.is_empty() {
                String::new()
            } else {
                format!("{sep}--nodelist={}", t.nodes.join(","))
            }
        };
        let values: [(&str, &dyn Fn() -> String); 15] = [
            (RUN_DIR, &|| crate::util::shell::quote_path(t.dir)),
            (RUN_DIR_RAW, &|| t.dir.display().to_string()),
            (SRUN_HOST_LINES, &|| {
                self.srun_prefix_with(t, false, Image::Host).join(" \\\n  ")
            }),
            (NODES_ARRAY_START, &|| {
                if t.nodes.is_empty() {
                    "mapfile -t "
                } else {
                    ""
                }
                .to_string()
            }),
            (NODES_ARRAY_END, &|| {
                if t.nodes.is_empty() {
                    " < <(scontrol show hostnames \"$SLURM_JOB_NODELIST\")".to_string()
                } else {
                    let words: Vec<String> = t.nodes.iter().map(|n| py_quote(n)).collect();
                    format!("=({})", words.join(" "))
                }
            }),
            (NODELIST_LINE, &|| nodelist(" \\\n  ")),
            (NODELIST_WORD, &|| nodelist(" ")),
            (SRUN_ALL_NODES_LINES, &|| prefix(true).join(" \\\n  ")),
            (SRUN_ALL_NODES, &|| prefix(true).join(" ")),
            (SRUN, &|| prefix(false).join(" ")),
            (RUN_TAG, &|| run_tag(&t.run.id, t.iteration)),
            (IMAGE, &|| self.image(t).unwrap_or_default()),
            (MOUNTS, &|| self.mounts(t).join(",")),
            (SYSTEM_SRUN_ARGS, &|| {
                self.slurm.extra_srun_args.clone().unwrap_or_default()
            }),
            (HF_HOME, &|| {
                let hf = &self.sys.hf_home_path;
                let hf = std::path::absolute(hf).unwrap_or_else(|_| hf.clone());
                hf.display().to_string()
            }),
        ];
        let mut out = text.to_string();
        // a launch in an image of the step's own, one word per line
        for (start, end, image) in srun_lines_marks(text).into_iter().rev() {
            let lines = self
                .srun_prefix_with(t, false, Image::Other(image))
                .join(" \\\n  ");
            out.replace_range(start..end, &lines);
        }
        for (mark, value) in values {
            if out.contains(mark) {
                out = out.replace(mark, &value());
            }
        }
        fill_quoted(&out, py_quote)
    }
}

/// What a job of steps mounts and writes into under its iteration's directory, made before it starts: directories,
/// and files of their size (sparse; one already of that size is kept).
pub(crate) fn make_mount_sources(steps: &Steps, dir: &Path) -> Result<(), String> {
    let fail = |p: &Path, e: std::io::Error| format!("cannot create {}: {e}", p.display());
    for rel in steps.dirs.iter().chain(
        steps
            .mounts
            .iter()
            .filter(|m| m.file_size.is_none())
            .map(|m| &m.source),
    ) {
        let p = dir.join(rel);
        std::fs::create_dir_all(&p).map_err(|e| fail(&p, e))?;
    }
    for m in &steps.mounts {
        let Some(size) = m.file_size else { continue };
        // a file the job's own files write (a wrapper script) is not made here
        if steps.files.iter().any(|(name, _)| *name == m.source) {
            continue;
        }
        let p = dir.join(&m.source);
        if p.is_dir() {
            return Err(format!(
                "{} is a directory where the job mounts a file of {size} bytes; remove it",
                p.display()
            ));
        }
        if std::fs::metadata(&p).is_ok_and(|md| md.len() == size) {
            continue;
        }
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).map_err(|e| fail(parent, e))?;
        }
        std::fs::File::create(&p)
            .and_then(|f| f.set_len(size))
            .map_err(|e| fail(&p, e))?;
    }
    Ok(())
}
