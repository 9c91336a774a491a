//! One module per subcommand.

pub mod pull;
