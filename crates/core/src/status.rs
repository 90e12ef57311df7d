//! The operator's snapshot of the router (`ftnet status`).

use crate::event::EvictReason;
use crate::membership::MemberState;
use crate::metrics::Counters;
use serde::Serialize;
use std::net::Ipv4Addr;

#[derive(Debug, Clone, Serialize)]
pub struct ReplicaStatus {
    pub addr: Ipv4Addr,
    /// Its membership: serving, draining, down or removed.
    pub state: MemberState,
    /// Since when it is in that state (router clock, ms); none while
    /// serving.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since_ms: Option<u64>,
    /// In service: gets new connections.
    pub alive: bool,
    /// Not out of service, but its agent has not registered with this
    /// router yet (with agents, a replica serves only once it did).
    pub awaiting_agent: bool,
    /// Connections this replica is part of.
    pub connections: usize,
    /// Largest distance, over its connections, between the bytes this
    /// replica has sent and the bytes the client was sent.
    pub lag_out_bytes: u64,
    /// Largest distance between the client bytes this replica acknowledged
    /// and the most any replica acknowledged.
    pub lag_in_bytes: u64,
    /// Payload bytes that came from it on its connections (every copy,
    /// those withheld from the client too).
    pub bytes_from: u64,
    /// Milliseconds since a segment of one of its connections last came
    /// from it (`None`: none has yet).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heard_ms_ago: Option<u64>,
    /// Out of service: why, and since when.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub down: Option<ReplicaDown>,
}

/// Why and since when a replica is out of service.
#[derive(Debug, Clone, Serialize)]
pub struct ReplicaDown {
    /// The verdict that took it out.
    pub reason: EvictReason,
    /// When, on the router's clock (milliseconds).
    pub since_ms: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ServiceStatus {
    pub name: String,
    pub vip: Ipv4Addr,
    pub ports: Vec<u16>,
    pub replicas: Vec<ReplicaStatus>,
    pub connections: usize,
    /// Payload bytes from the service's clients (counted once) and to them.
    pub client_bytes_in: u64,
    pub client_bytes_out: u64,
    /// Removed at run time (SIGHUP): no new connections; shown while its
    /// open ones finish.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub removed: bool,
}

/// One replica's leg of a connection in [`ConnSample`]: stream offsets
/// (bytes after the SYN, modulo 2^32) as the router knows them; `None`
/// (null) where the router never learnt them (the replica never answered
/// the SYN, or it has not spoken since a takeover).
#[derive(Debug, Clone, Serialize)]
pub struct LegSample {
    pub addr: Ipv4Addr,
    /// The leg's state; `Closed` for one still open in a connection that
    /// closed (the replica's own state is in the replicas' table).
    pub state: String,
    /// Server stream: the end of what this replica sent.
    pub sent: Option<u32>,
    /// Client stream: what this replica acknowledged.
    pub acked: Option<u32>,
    /// Client stream: the right edge of its window.
    pub window_edge: Option<u32>,
    /// Position learnt (after a takeover).
    pub learned: bool,
}

/// A few connections in detail, for an operator (or a failed test's
/// evidence) to see where each side stands.
#[derive(Debug, Clone, Serialize)]
pub struct ConnSample {
    pub conn: String,
    pub phase: String,
    pub recovering: bool,
    pub adopted: bool,
    /// Client stream: the end of what the client sent.
    pub client_sent: u32,
    /// Server stream: the end of what the client was sent, and what it
    /// acknowledged.
    pub client_was_sent: u32,
    pub client_acked: u32,
    /// The client's last window field (unscaled).
    pub client_window: u16,
    pub legs: Vec<LegSample>,
}

/// A snapshot for `ftnet status`.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub services: Vec<ServiceStatus>,
    pub connections: usize,
    pub half_open: usize,
    /// Connections adopted from the agents whose replicas have not all
    /// told their positions yet.
    pub rebuilding: usize,
    pub counters: Counters,
    /// Drops by reason name.
    pub drops: Vec<(&'static str, u64)>,
    /// Up to 8 connections in detail (lowest client address and port first).
    pub sample: Vec<ConnSample>,
}
