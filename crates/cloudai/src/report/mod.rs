//! Reports over a scenario's results.

pub mod status_table;
