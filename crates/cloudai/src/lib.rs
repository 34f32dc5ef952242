//! cloudai-rs: runs CloudAI test scenarios (system, test and scenario TOMLs) on a scheduler and grades them.

pub mod cli;
pub mod log;
pub mod report;
pub mod results;
pub mod runner;
pub mod systems;

pub mod bad_nodes;
pub mod baseline;
pub mod config;
pub mod ending;
pub mod exit_codes;
pub mod html;
pub mod install;
pub mod ledger;
pub mod quarantine;
pub mod scenario;
pub mod util;
pub mod workloads;
