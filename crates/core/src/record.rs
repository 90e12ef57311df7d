//! The connection record: what the router stores at each replica's agent
//! when a connection is set up, and what the agents hand a router that
//! restarts or takes over (COSCANet-FT §III-C). One type from end to end:
//! the core emits it ([`crate::AgentMsg::Established`]), the control
//! protocol carries it as JSON (`ftnet-control`), the agents keep it, and
//! [`crate::Router::adopt`] takes it back.

use crate::key::ConnKey;
use serde::{Deserialize, Serialize};
use std::net::Ipv4Addr;

/// The facts of a connection the next packets cannot tell a new router:
/// the sequence spaces, window scales, timestamp base and MSS, for every
/// replica of the connection. Every replica's agent keeps the same record;
/// the agent adds what it alone knows (`accepted`, `input_end`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnRecord {
    pub key: ConnKey,
    /// The client's initial sequence number.
    pub client_isn: u32,
    /// The ISN the router gave the client.
    pub router_isn: u32,
    /// The window scale the router announced to the client.
    pub wscale_out: u8,
    /// The router's TSval base, if timestamps were agreed.
    pub ts_base: Option<u32>,
    /// The MSS the client announced.
    pub client_mss: u16,
    /// The MSS the router announced to the client (the replicas' minimum).
    pub mss_out: u16,
    /// Each replica of the connection when it was set up.
    pub replicas: Vec<ReplicaSetup>,
    /// The window scale the client announced (the replicas scale its
    /// windows by it), if it announced one: a replica that joins the
    /// connection after a takeover is told the same. Absent in a record of
    /// an older router: then no replica can join the adopted connection.
    #[serde(default)]
    pub client_wscale: Option<u8>,
    /// Kept by the agent, not sent by the router: it passed on this
    /// connection's Accept (sequencer).
    #[serde(default)]
    pub accepted: bool,
    /// Kept by the agent: the end of the last chunk of this connection it
    /// passed on (sequencer).
    #[serde(default)]
    pub input_end: Option<u32>,
    /// Kept by the agent, read from its kernel as it hands the record to a
    /// new router: its replica's SND.UNA on this connection (the replica's
    /// sequence space), so that the router can prompt a replica whose
    /// output died with the router before to resend at once (RFC 6069)
    /// before any ACK moves it.
    #[serde(default)]
    pub snd_una: Option<u32>,
    /// Kept by the agent, read from its kernel as it hands the record to a
    /// new router: its replica took the client's FIN (the socket is in
    /// CLOSE-WAIT, LAST-ACK, CLOSING or TIME-WAIT), so that its RCV.NXT,
    /// which counts the FIN, is not taken for one more byte of input. A
    /// client that closed while no router was up (or just before) may never
    /// send its FIN again: the replicas acknowledged it.
    #[serde(default)]
    pub fin_received: bool,
}

/// One replica's part of a [`ConnRecord`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaSetup {
    pub addr: Ipv4Addr,
    /// Its initial sequence number.
    pub isn: u32,
    /// The window scale it announced (applies to its window fields).
    pub wscale: u8,
}

impl ConnRecord {
    /// Replica `addr`'s part, if it is one of the connection's replicas.
    pub fn replica(&self, addr: Ipv4Addr) -> Option<&ReplicaSetup> {
        self.replicas.iter().find(|r| r.addr == addr)
    }

    /// The addresses of the connection's replicas.
    pub fn addrs(&self) -> Vec<Ipv4Addr> {
        self.replicas.iter().map(|r| r.addr).collect()
    }
}
