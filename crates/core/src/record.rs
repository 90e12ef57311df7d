//! The connection records the replicas' agents keep for a router that
//! restarts or takes over (see `ftnet-control`).

use crate::key::ConnKey;
use serde::Serialize;
use std::net::Ipv4Addr;

/// What a replica's agent keeps of a connection for a recovering router:
/// the facts the next packets cannot tell (see `ftnet-control`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SetupRecord {
    pub key: ConnKey,
    pub client_isn: u32,
    pub router_isn: u32,
    pub wscale_out: u8,
    pub ts_base: Option<u32>,
    /// The MSS the client announced.
    pub client_mss: u16,
    /// The MSS the router announced to the client (the replicas' minimum).
    pub mss_out: u16,
    /// Each replica of the connection.
    pub replicas: Vec<ReplicaSetup>,
}

/// One replica's part of a [`SetupRecord`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ReplicaSetup {
    pub addr: Ipv4Addr,
    /// Its initial sequence number.
    pub isn: u32,
    /// The window scale it announced (applies to its window fields).
    pub wscale: u8,
}

/// What one replica's agent tells a router that takes over about one
/// connection: the connection's set-up and that replica's part of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AdoptRecord {
    pub key: ConnKey,
    pub client_isn: u32,
    pub router_isn: u32,
    pub wscale_out: u8,
    pub ts_base: Option<u32>,
    pub client_mss: u16,
    pub mss_out: u16,
    pub replica: ReplicaSetup,
    /// Every replica of the connection (their agents send their own
    /// records): the rebuild waits for all of them, for a while.
    pub expected: Vec<Ipv4Addr>,
    /// The agent passed on the connection's Accept (sequencer).
    pub accepted: bool,
    /// The end of the last chunk of the connection the agent passed on.
    pub input_end: Option<u32>,
}
