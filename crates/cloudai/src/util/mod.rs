pub mod fsx;
pub mod nodelist;
pub mod pytoml;
pub mod shell;
