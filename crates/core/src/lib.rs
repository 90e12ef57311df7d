//! The sans-IO core of the ftnet router (COSCANet-FT §III): connection
//! table, per-connection replication state machine, failure detection.
//!
//! Architecture invariant: this crate performs no I/O and never reads the
//! clock or a random source. Time comes in as [`Instant`] arguments,
//! randomness as the secret given to [`Router::new`]; packets come in through
//! [`Router::handle_packet`] and leave through [`Router::poll_transmit`].

mod config;
mod conn;
mod metrics;
mod order;
mod router;
mod time;
mod vote;

pub use config::{Config, Limits, Service, Tie, Timeouts, Voting};
pub use conn::ConnKey;
pub use metrics::{Counters, DropReason};
pub use order::{NumberedInput, OrderReport, ORDER_LOG, ORDER_WAIT};
pub use router::{
    AdoptRecord, Adopted, ConnSample, Event, EvictReason, InputKind, LegSample, Packet,
    OutOfService, ReplicaSetup, ReplicaStatus, Router, ServiceStatus, SetupRecord, Status,
};
pub use time::Instant;
