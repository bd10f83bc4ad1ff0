//! The serving flags every agent binary takes (feature `cli`), so that each listener of
//! each agent is bounded the same way and says so in `--help` the same way.

use std::time::Duration;

use crate::server::{
    ConnectionLimits, DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_MAX_CONCURRENT_REQUESTS,
    DEFAULT_MAX_CONNECTIONS, Serving,
};

/// How many connections and requests one listener takes, and how long it waits for a
/// request's head.
#[derive(Debug, Clone, clap::Args)]
pub struct ServingArgs {
    /// Connections open at once on the listener; beyond it no more are accepted until
    /// one closes (they wait in the kernel's backlog).
    #[arg(long, default_value_t = DEFAULT_MAX_CONNECTIONS, value_name = "N",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    pub max_connections: usize,
    /// Requests handled at once (the agent card and the health probes aside); more wait
    /// on their connection for a turn, their bodies not yet read.
    #[arg(long, default_value_t = DEFAULT_MAX_CONCURRENT_REQUESTS, value_name = "N",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    pub max_concurrent_requests: usize,
    /// How long (s) a connection may take to send a request's head; also how long a
    /// kept-alive connection may stay idle between requests.
    #[arg(long, default_value_t = DEFAULT_HEADER_READ_TIMEOUT.as_secs(), value_name = "SECONDS",
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub header_read_timeout_secs: u64,
}

impl ServingArgs {
    /// The connection limits and the request cap together.
    pub fn serving(&self) -> Serving {
        Serving {
            connections: self.connection_limits(),
            max_concurrent_requests: self.max_concurrent_requests,
        }
    }

    pub fn connection_limits(&self) -> ConnectionLimits {
        ConnectionLimits {
            header_read_timeout: Duration::from_secs(self.header_read_timeout_secs),
            max_connections: self.max_connections,
        }
    }
}
