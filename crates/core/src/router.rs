//! The router: classifies packets, owns the connection table, runs timers.

use crate::config::Config;
use crate::metrics::{Counters, DropReason};
use crate::time::Instant;
use ftnet_wire::vnet::VnetHdr;
use serde::Serialize;
use std::collections::VecDeque;
use std::net::Ipv4Addr;

/// One IPv4 packet with its offload metadata, as read from or written to
/// the TUN device. `data` starts at the IPv4 header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    pub vnet: VnetHdr,
    pub data: Vec<u8>,
}

impl Packet {
    /// A plain packet with a complete checksum and no GSO.
    pub fn plain(data: Vec<u8>) -> Packet {
        Packet { vnet: VnetHdr::NONE, data }
    }
}

/// Why a replica left a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EvictReason {
    /// RST from this replica while the others carry on (COSCANet-FT §III-D).
    Reset,
    /// FIN from this replica at a point the others went past.
    Fin,
    /// No SYN-ACK after the configured SYN retries (§III-E), or none while
    /// the others answered for longer than the failure-detection time.
    NoSynAck,
    /// No progress for the failure-detection time while others progressed.
    Stalled,
    /// ICMP destination unreachable for this replica.
    Unreachable,
    /// Its TCP options disagree with the group's (window scale, timestamps).
    OptionMismatch,
    /// The replica was marked down for the whole service.
    ReplicaDown,
}

/// Something an operator wants in the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Event {
    /// A replica left one connection; the rest carry on.
    Evicted { conn: String, replica: Ipv4Addr, reason: EvictReason, remaining: usize },
    /// A replica was declared down for its service: new connections skip it.
    ReplicaDown { service: String, replica: Ipv4Addr, reason: EvictReason },
    /// The last replica of a connection left; the client was sent a RST.
    ConnectionLost { conn: String },
}

#[derive(Debug, Clone, Serialize)]
pub struct ReplicaStatus {
    pub addr: Ipv4Addr,
    pub alive: bool,
    /// Connections this replica is part of.
    pub connections: usize,
    /// Largest distance, over its connections, between the bytes this
    /// replica has sent and the bytes the client was sent.
    pub lag_out_bytes: u64,
    /// Largest distance between the client bytes this replica acknowledged
    /// and the most any replica acknowledged.
    pub lag_in_bytes: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ServiceStatus {
    pub name: String,
    pub vip: Ipv4Addr,
    pub ports: Vec<u16>,
    pub replicas: Vec<ReplicaStatus>,
    pub connections: usize,
}

/// A snapshot for `ftnet status`.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub services: Vec<ServiceStatus>,
    pub connections: usize,
    pub half_open: usize,
    pub counters: Counters,
    /// Drops by reason name.
    pub drops: Vec<(&'static str, u64)>,
}

/// The router state machine.
pub struct Router {
    config: Config,
    secret: [u8; 16],
    counters: Counters,
    transmit: VecDeque<Packet>,
    events: VecDeque<Event>,
}

impl Router {
    /// `secret` keys the RFC 6528 ISN function; give it 16 random bytes.
    pub fn new(config: Config, secret: [u8; 16]) -> Router {
        Router { config, secret, counters: Counters::default(), transmit: VecDeque::new(), events: VecDeque::new() }
    }

    /// Feed one packet read from the network.
    pub fn handle_packet(&mut self, _now: Instant, _pkt: Packet) {
        self.counters.packets_in += 1;
        self.counters.drop(DropReason::NotOurs);
    }

    /// Run timers due at `now`.
    pub fn handle_timeout(&mut self, _now: Instant) {}

    /// Next packet to write to the network.
    pub fn poll_transmit(&mut self) -> Option<Packet> {
        self.transmit.pop_front()
    }

    /// When [`Router::handle_timeout`] next needs to run.
    pub fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    /// Next event for the log.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// A snapshot of services, replicas, connections and counters.
    pub fn status(&self) -> Status {
        let _ = self.secret;
        Status {
            services: Vec::new(),
            connections: 0,
            half_open: 0,
            counters: self.counters.clone(),
            drops: self.counters.drop_table(),
        }
    }
}
