//! What the router serves. Parsing and validation of the operator's file
//! live in the binary; this is the validated form.

use core::time::Duration;
use serde::Serialize;
use std::net::Ipv4Addr;

/// One replicated service: a virtual IP and ports, served by every replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Service {
    pub name: String,
    pub vip: Ipv4Addr,
    pub ports: Vec<u16>,
    /// Real addresses of the replicas; each listens on the same ports.
    pub replicas: Vec<Ipv4Addr>,
    /// Output voting (see [`Voting`]).
    pub voting: Voting,
    /// Its replicas keep no state between connections (static files, a
    /// stateless proxy): a replica that left the group is probed (a SYN to
    /// its first port, as a load balancer's health check) and serves again
    /// as soon as it answers — a restarted server, a host that came back.
    /// A service whose replicas keep state (the default) never readmits a
    /// replica by itself: its server missed input while it was out.
    pub stateless: bool,
    /// When the client is acknowledged (see [`Ack`]).
    pub ack: Ack,
    /// When the servers get a chunk of input (see [`Delivery`]).
    pub delivery: Delivery,
}

/// When a chunk of client input is released to the replicas' servers
/// (AR-TCP §4.1's best-effort and safe delivery).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// As soon as the router forwarded it within every live replica's
    /// window: the servers read it as it arrives. A replica that lacks
    /// bytes another's server read when the client resets is taken out
    /// (`EvictReason::InputLost`).
    #[default]
    BestEffort,
    /// Only once every live replica acknowledged it (the stable
    /// watermark): a chunk the client's reset, the client's crash or an
    /// eviction left on some replicas only is read by no server, so the
    /// replicas keep the same input and none is taken out for it. Costs
    /// the slowest replica's acknowledgment before any server reads.
    Safe,
}

/// When the router acknowledges the client's bytes (FT-TCP §4.4's ack
/// strategies).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Ack {
    /// Once every live replica acknowledged them (COSCANet-FT §III-C): the
    /// slowest replica sets the client's pace, and the router keeps no
    /// copy of client bytes.
    #[default]
    All,
    /// Once the router's input log holds them and `replicas` live replicas
    /// (at least one; all, if fewer are live) acknowledged them: two
    /// hosts or more hold every acknowledged byte. The router keeps each
    /// connection's bytes until every live replica has them and sends a
    /// lagging replica what it lacks itself (the client will not: it saw
    /// them acknowledged). A slow or lossy replica no longer slows the
    /// client; it falls behind by at most the log's bound
    /// ([`Limits::log_per_connection`]), then the client waits for it.
    Log { replicas: u8 },
}

/// How the replicas' replies become the client's stream (the output
/// policy).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Voting {
    /// The client follows one replica's stream per connection: the
    /// service's first live replica (its primary, as FT-TCP and COLO
    /// release the primary's output). The others' copies are compared
    /// after the fact (block hashes) and stand by: one whose bytes differ
    /// from what the client got leaves the connection (a majority against
    /// it: the service, when stateful). A reply whose length or content
    /// differs between replicas (Redis `INFO`, an HTTP `Date:`) is never
    /// spliced: every byte of it comes from one replica. When the
    /// followed replica fails, the connection follows the next whose
    /// stream matched what the client got; one that differs there is
    /// taken out, and with none left the client is reset rather than
    /// handed another replica's bytes.
    #[default]
    Primary,
    /// First copy wins: each byte range goes to the client as soon as any
    /// live replica sent it (COSCANet-FT §III-D). For replicas that are
    /// deterministic by construction (byte for byte, lengths included):
    /// the fastest replica sets the pace, and a failover costs nothing,
    /// but where replies differ the client's stream is spliced from
    /// several replicas (detected and reported, not prevented).
    Fastest,
    /// A byte range goes to the client only once a majority of the live
    /// replicas sent identical bytes there; a replica that contradicts the
    /// majority is evicted and marked down for the service. With two live
    /// replicas (or any split without a majority) `tie` decides.
    Majority { tie: Tie },
}

impl Voting {
    /// Without voting (first copy or primary): later copies are compared
    /// after the fact.
    pub fn unvoted(&self) -> bool {
        !matches!(self, Voting::Majority { .. })
    }
}

/// What happens when the live replicas disagree and no majority exists
/// (two replicas, or three that all differ).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tie {
    /// The replica listed first in the service (among those that disagree)
    /// wins; the others are evicted. Availability over certainty.
    #[default]
    First,
    /// The client's connection is reset and no replica is blamed: the
    /// client never receives bytes that a majority did not vouch for.
    Reset,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Timeouts {
    /// A live replica that makes no progress (acknowledges nothing new, sends
    /// nothing new) while another replica of the same connection is ahead
    /// of it is declared failed after this long (COSCANet-FT §III-D passive
    /// failure detection).
    pub failure_detection: Duration,
    /// Client SYN retransmissions a replica may leave unanswered before it
    /// is evicted (COSCANet-FT §III-E).
    pub syn_retries: u32,
    /// A connection with no packet in either direction for this long is
    /// forgotten.
    pub idle: Duration,
    /// How long a half-open connection (SYN seen, handshake not complete)
    /// may last.
    pub handshake: Duration,
    /// How long a closed connection is remembered, so that a replica whose
    /// last ACK was lost still gets its retransmitted FIN through to the
    /// client (which is in TIME-WAIT, 60 s on Linux). Closed connections
    /// give way first when the table is full.
    pub time_wait: Duration,
    /// Output commit of connection records: once every replica answered a
    /// SYN, the SYN-ACK to the client waits until the control plane says
    /// the connection's record is stored at its replicas' agents
    /// ([`crate::Router::record_stored`]), at most this long. A router that
    /// dies after the client got the SYN-ACK then always leaves the record
    /// behind for the one that takes over. `None`: no agents, no wait.
    pub record_commit: Option<Duration>,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            failure_detection: Duration::from_millis(100),
            syn_retries: 1,
            idle: Duration::from_secs(600),
            handshake: Duration::from_secs(20),
            time_wait: Duration::from_secs(60),
            record_commit: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Limits {
    /// Connections of all states together.
    pub max_connections: usize,
    /// Half-open connections; past this the oldest half-open one is
    /// dropped to make room (SYN flood defence, see ARCHITECTURE.md).
    pub max_half_open: usize,
    /// Client bytes one connection's input log may hold (`Ack::Log`).
    pub log_per_connection: usize,
    /// Client bytes every input log together may hold; beyond it new
    /// bytes are not logged and wait for every replica (`Ack::All`).
    pub log_total: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 65536,
            max_half_open: 8192,
            log_per_connection: 4 << 20,
            log_total: 256 << 20,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Config {
    pub services: Vec<Service>,
    pub timeouts: Timeouts,
    pub limits: Limits,
    /// Emit `AgentMsg::Input` (the sequencer's total order of client input
    /// per service) for the replicas' shims.
    pub sequencer: bool,
    /// With the sequencer: how often each service's order gets a clock
    /// tick ([`crate::InputKind::Tick`]); `None`, no ticks (the servers'
    /// shims then leave time to the kernel).
    pub tick: Option<core::time::Duration>,
    /// Joins keep the service running while the state travels
    /// (`router/join.rs`): the service's input pauses only until the
    /// donor's checkpoint point is fixed (`Router::checkpoint_point`), the
    /// joiner's legs are added at that point and its server held by its
    /// agent until its state is proven. Needs agents that report the point
    /// (`ftnet agent` does); without, the input pauses for the whole join.
    pub join_live: bool,
}
