//! `install` / `uninstall`: the installables of a scenario's tests and hooks under the system's install_path.

use crate::exit_codes::Failure;
use std::path::PathBuf;

use clap::Args;

use crate::scenario::{self, Inputs};
use crate::{error, info};

#[derive(Args, Debug)]
pub(crate) struct InstallArgs {
    /// System TOML [default: the built-in standalone system]
    #[arg(long, env = "CLOUDAI_SYSTEM_CONFIG")]
    system_config: Option<PathBuf>,
    /// Test scenario TOML
    #[arg(long)]
    test_scenario: PathBuf,
    /// Directory of test TOMLs (only *.toml directly inside)
    #[arg(long)]
    tests_dir: Option<PathBuf>,
    /// Hook directory [default: conf/hook under the working directory]
    #[arg(long)]
    hook_dir: Option<PathBuf>,
}

pub fn install(args: &InstallArgs, remove: bool) -> Result<(), Failure> {
    let (system, scenario) = match scenario::load_all(&Inputs {
        system: args.system_config.as_deref(),
        tests_dir: args.tests_dir.as_deref(),
        scenario: &args.test_scenario,
        hook_dir: args.hook_dir.as_deref(),
        survey: None,
    }) {
        Ok(x) => x,
        Err(e) => {
            return Err(e.into());
        }
    };
    let items = crate::install::installables(&system, &scenario);
    if items.is_empty() {
        info!(
            "Nothing to {}: the scenario's tests need no installables on this system",
            if remove { "uninstall" } else { "install" }
        );
        return Ok(());
    }
    let failures = if remove {
        info!("Uninstalling test templates.");
        crate::install::uninstall(&system, &items)
    } else {
        crate::install::install(&system, &items)
    };
    if failures.is_empty() {
        if remove {
            info!("Uninstallation successful.");
        } else {
            info!(
                "CloudAI is successfully installed into '{}'.",
                std::path::absolute(&system.install_path)
                    .unwrap_or_else(|_| system.install_path.clone())
                    .display()
            );
        }
        return Ok(());
    }
    for f in &failures {
        error!("{f}");
    }
    Err(Failure::Error(format!(
        "{} of {} installable(s) failed",
        failures.len(),
        items.len()
    )))
}
