//! Reports over a scenario's results: per-iteration files, the scenario page and summary, the status table.

pub mod baseline;
pub mod junit;
mod page;
mod sanity;
pub mod scenario;
pub mod status_table;
pub mod summary;
pub mod tarball;
