//! The sans-IO core of the ftnet router (COSCANet-FT §III): connection
//! table, per-connection replication state machine, failure detection.
//!
//! Architecture invariant: this crate performs no I/O and never reads the
//! clock or a random source. Time comes in as [`Instant`] arguments,
//! randomness as the secret given to [`Router::new`]; packets come in through
//! [`Router::handle_packet`] and leave through [`Router::poll_transmit`].

#![forbid(unsafe_code)]

mod config;
mod conn;
mod event;
mod ids;
mod key;
mod membership;
mod metrics;
mod order;
mod packet;
mod record;
mod router;
mod status;
mod time;
mod vote;
mod wrap;

pub use config::{Ack, Config, Delivery, Limits, Service, Tie, Timeouts, Voting};
pub use event::{Adopted, AgentMsg, Event, EvictReason, InputKind, OutOfService};
pub use key::ConnKey;
pub use membership::{MemberState, MembershipError};
pub use metrics::{Counters, DropReason, Histogram, HISTOGRAM_BUCKETS};
pub use order::{NumberedInput, OrderReport, ORDER_LOG, ORDER_WAIT};
pub use packet::Packet;
pub use record::{ConnRecord, ReplicaSetup};
pub use router::{
    Router, StatusPass, JOIN_ATTEMPTS, ORPHANS_MAX, ORPHANS_PER_CONN, ORPHAN_KEEP, ORPHAN_WINDOW,
    PAUSE_PROBATION, PROBE_EVERY,
};
pub use status::{ConnSample, LegSample, ReplicaDown, ReplicaStatus, ServiceStatus, Status};
pub use time::Instant;
