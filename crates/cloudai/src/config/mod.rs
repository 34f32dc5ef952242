//! The three CloudAI schemas (system, test, test scenario), loaded with locations for every value.

pub mod args;
pub mod decode;
pub mod error;
pub mod node;
pub mod pods;
pub mod scenario;
pub mod system;
pub mod test;
pub mod time_limit;

pub use error::{ConfigError, ConfigErrors};
