//! What the router tells its driver: events for the operator
//! ([`Event`]), messages for the agents and the sequencer ([`AgentMsg`]),
//! and why a replica left.

use crate::key::ConnKey;
use crate::record::ConnRecord;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::net::Ipv4Addr;

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
    /// Its host's agent stopped heartbeating (active failure detection).
    HostLost,
    /// Output voting: its bytes contradict the majority's (or lost a tie).
    Diverged,
    /// Output voting: it fell further behind the others than the vote
    /// keeps bytes to compare it with.
    Lagging,
    /// Its server can no longer get the sequencer's exact input order
    /// (its agent lost records, its shim lost its agent or fell back to
    /// the kernel's order): serving on would diverge silently.
    OrderLost,
    /// The agents report it out of service: it left the group under an
    /// earlier router (before a restart or a takeover) and has not been
    /// brought back since.
    ReportedDown,
    /// An operator removed it from the service (`replica remove`).
    Removed,
    /// It tried to join the service with the group's state and failed
    /// (`Event::JoinFailed` says why).
    JoinFailed,
    /// An operator added it to a service whose servers keep their state
    /// (`replica add` under the sequencer): it serves once it joined with
    /// the group's state.
    NotJoined,
    /// After a router takeover, on a connection of a service that
    /// acknowledges clients from the input log (`Ack::Log`): it is behind
    /// another replica, and the bytes it lacks may have been acknowledged
    /// to the client from the log that died with the old router. Nobody
    /// can send them again, so it leaves this connection, and a service
    /// whose servers keep state (its server missed input the others
    /// applied; it comes back through a join).
    LogLost,
    /// The client reset a connection while this replica lacked bytes of
    /// it that another replica had acknowledged, and it did not take them
    /// within the failure-detection time (they were lost on the way to
    /// it; nothing holds a copy, and the client will not send them
    /// again): its server would go on without input the others applied.
    /// It leaves the service (it comes back through a join).
    InputLost,
    /// Taken out of one connection that could still get input (stalled,
    /// reset or unreachable there while the rest of the service went on):
    /// its server, which keeps the service's state in the input order,
    /// misses that connection's input from then on. It leaves the service
    /// (it comes back through a join).
    MissedInput,
}

/// One replica out of service for one service (named by its VIP and first
/// port): what the agents keep for a router that starts or takes over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OutOfService {
    pub vip: Ipv4Addr,
    pub port: u16,
    pub replica: Ipv4Addr,
}

/// What [`Router::adopt`] did with a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Adopted {
    /// A connection this router did not know: now in its table, being
    /// rebuilt from the next packets.
    New,
    /// Another replica of a connection being rebuilt.
    Leg,
    /// The router already serves this connection (an agent reconnected).
    Known,
    /// No service or replica matches, or the table is full.
    Refused,
}

/// Something an operator wants in the log ([`crate::Router::poll_event`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Event {
    /// A replica left one connection; the rest carry on.
    Evicted {
        conn: String,
        replica: Ipv4Addr,
        reason: EvictReason,
        remaining: usize,
        /// For a verdict from silence (`Stalled`, `NoSynAck`): what the
        /// replica's side looked like against the others', so that the log
        /// explains the failover. Empty otherwise.
        detail: String,
    },
    /// A replica was declared down for its service: new connections skip it.
    ReplicaDown {
        service: String,
        replica: Ipv4Addr,
        reason: EvictReason,
        /// The open connections it was taken out of (each also an
        /// `Evicted` with reason `ReplicaDown`).
        connections: usize,
        /// How long before this verdict a segment of one of its
        /// connections last came from it (`None`: none ever did): the
        /// failure's detection delay, as the router can see it.
        silent_ms: Option<u64>,
    },
    /// An operator brought a replica that was out of service back
    /// ([`crate::Router::enable_replica`]): new connections use it again.
    ReplicaUp { service: String, replica: Ipv4Addr },
    /// A replica of a stateless service that was down (`was`) answered the
    /// router's probe: its server listens again, and it serves new
    /// connections again after `down_ms`.
    ReplicaRejoined {
        service: String,
        replica: Ipv4Addr,
        was: EvictReason,
        down_ms: u64,
    },
    /// A service new in the configuration (SIGHUP) runs from now on
    /// ([`crate::Router::add_service`]).
    ServiceAdded {
        service: String,
        vip: Ipv4Addr,
        ports: Vec<u16>,
        replicas: Vec<Ipv4Addr>,
    },
    /// A service gone from the configuration (SIGHUP) takes no new
    /// connections; its `connections` open ones finish
    /// ([`crate::Router::remove_service`]).
    ServiceRemoved { service: String, connections: usize },
    /// An operator made a replica a member of the service
    /// ([`crate::Router::add_replica`]): new connections use it (with
    /// `joins`, [`crate::Router::add_replica_to_join`], once it joined).
    ReplicaAdded {
        service: String,
        replica: Ipv4Addr,
        /// It serves only after a join (`Router::add_replica_to_join`).
        joins: bool,
    },
    /// An operator drains a replica ([`crate::Router::drain_replica`]):
    /// no new connections; it is still in `connections`.
    ReplicaDraining {
        service: String,
        replica: Ipv4Addr,
        connections: usize,
    },
    /// A draining replica's last connection left the table.
    ReplicaDrained { service: String, replica: Ipv4Addr },
    /// An operator removed a replica ([`crate::Router::remove_replica`]):
    /// it left `left` connections at once and stays in `kept` as their
    /// last replica until they end.
    ReplicaRemoved {
        service: String,
        replica: Ipv4Addr,
        left: usize,
        kept: usize,
    },
    /// The last replica of a connection left; the client was sent a RST.
    ConnectionLost { conn: String },
    /// The router ended a connection that could not end on its own: every
    /// byte both ways was delivered and acknowledged, but its closing
    /// handshake stood still (`why`), and it held a replica's join off.
    /// The client and the replicas were sent a RST.
    ConnectionEnded { conn: String, why: String },
    /// Output voting: replica `replica` sent bytes that differ from the
    /// majority's at server-stream `offset` (bytes after the SYN, modulo
    /// 2^32). `agreeing` replicas agreed on what the client got; with no
    /// majority (`agreeing` < half the live ones) the service's tie policy
    /// decided.
    Diverged {
        conn: String,
        replica: Ipv4Addr,
        offset: u32,
        agreeing: usize,
        live: usize,
        /// What it sent there and what was agreed (a few bytes of each,
        /// escaped), for the log.
        detail: String,
    },
    /// A service that does not vote: replica `replica`'s reply bytes up to
    /// server-stream `offset` (bytes after the SYN, modulo 2^32) hash
    /// otherwise than other live replicas' (`conn/check.rs`). `agreeing`
    /// of `live` replicas gave the most common value.
    ///
    /// First copy wins (`follows` is `None`): the client got the first
    /// copy of each byte, which may be either; with a majority (`evicted`)
    /// this replica was taken out (`service_wide`: of the service, the
    /// service being stateful; else of the connection); without one
    /// nobody was.
    ///
    /// Primary (`follows`: the replica the client follows on this
    /// connection, if one is left): this replica's bytes differ from what
    /// the client got, and it left the connection (`evicted`), and the
    /// service too when a majority agreed with the client's bytes and the
    /// service is stateful (`service_wide`). The client's stream was never
    /// spliced.
    OutputDiffers {
        conn: String,
        replica: Ipv4Addr,
        offset: u32,
        agreeing: usize,
        live: usize,
        evicted: bool,
        service_wide: bool,
        follows: Option<Ipv4Addr>,
    },
    /// Every connection adopted from the agents' records since the first
    /// record came is rebuilt (or left the table), `after_ms` after it.
    TableRebuilt { connections: u64, after_ms: u64 },
    /// The router itself did not run for `ms` (its process stopped or not
    /// scheduled, past its own timers by at least the detection time): no replica's silence across that gap counts against it
    /// (`Conn::router_resumed`).
    RouterPaused {
        ms: u64,
        connections: usize,
        /// Long enough that another router may have taken over: verdicts
        /// taking replicas out wait (`PAUSE_PROBATION`).
        probation: bool,
    },
    /// A router that started or took over numbers a service's input on
    /// from `last` (the highest number its agents reported): `reported`
    /// replicas' agents told where they stood, `missing` ones did not in
    /// time; `replayed` events went to agents that were behind; `lost`
    /// replicas missed events nobody reported (they leave the group, see
    /// `EvictReason::OrderLost`). Also for an agent that reports after the
    /// order resumed (`reported` is that one).
    OrderResumed {
        service: String,
        last: u64,
        reported: Vec<Ipv4Addr>,
        missing: Vec<Ipv4Addr>,
        replayed: usize,
        lost: Vec<(Ipv4Addr, u64)>,
    },
    /// A replica starts joining a stateful service
    /// ([`crate::Router::join_replica`]): the service's client input is
    /// paused (clients see a zero window) until it is admitted or the join
    /// fails.
    JoinStarted {
        service: String,
        replica: Ipv4Addr,
        join: u64,
    },
    /// The paused service is quiet: every replica applied input up to
    /// event `seq` and nothing is in flight; `donor` checkpoints its state
    /// for the joiner.
    JoinCheckpoint {
        service: String,
        replica: Ipv4Addr,
        donor: Ipv4Addr,
        seq: u64,
        quiet_ms: u64,
    },
    /// A live join (`Config::join_live`): the donor's checkpoint point is
    /// fixed and the joiner is part of every open connection
    /// (`connections`), so the service's input resumes after `pause_ms`;
    /// the joiner's server is held by its agent until its state is proven.
    JoinResumed {
        service: String,
        replica: Ipv4Addr,
        join: u64,
        connections: usize,
        pause_ms: u64,
    },
    /// The joiner holds the group's state (its digest equals the donor's
    /// at input event `seq`), is part of every open connection
    /// (`connections`) and serves; the service's input was paused for
    /// `pause_ms`, the join took `join_ms` from its start.
    Joined {
        service: String,
        replica: Ipv4Addr,
        seq: u64,
        digest: String,
        connections: usize,
        pause_ms: u64,
        join_ms: u64,
    },
    /// A join failed: the replica stays out of service, the input resumes
    /// (after `pause_ms`).
    JoinFailed {
        service: String,
        replica: Ipv4Addr,
        reason: String,
        pause_ms: u64,
        /// When the router tries again by itself (`None`: it gave up after
        /// [`crate::JOIN_ATTEMPTS`] attempts; `ftnet replica join`, or the
        /// replica's server reconnecting, starts a new round).
        retry_in_ms: Option<u64>,
    },
}

/// What the router tells the replicas' agents
/// ([`crate::Router::poll_agent_msg`]; quinn separates `EndpointEvent` from
/// `Event` the same way): the connection records they keep for a router
/// that takes over, the sequencer's order, and who is out of service. In
/// the order produced: an agent gets a connection's record before its
/// input events. Frequent (several per connection): not for the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum AgentMsg {
    /// Every replica answered a connection's SYN: the record its replicas'
    /// agents store. With `Timeouts::record_commit` its SYN-ACK waits for
    /// [`crate::Router::record_stored`].
    Established { record: ConnRecord },
    /// A connection announced with `Established` left the table (or these
    /// replicas left it): their agents forget its record.
    Forgotten {
        key: ConnKey,
        replicas: Vec<Ipv4Addr>,
    },
    /// The sequencer's total order of input for one service (only with
    /// `Config::sequencer`): the `seq`-th input event of the service is
    /// `kind` on connection `key`. Every replica's shim hands the server
    /// its input in exactly this order.
    Input {
        seq: u64,
        key: ConnKey,
        kind: InputKind,
        replicas: Vec<Ipv4Addr>,
    },
    /// The set of replicas out of service changed (it is complete, every
    /// service): for every agent to keep, so that a router that starts or
    /// takes over never readmits a replica that left the group
    /// (`Event::ReplicaDown`/`Event::ReplicaUp` say what changed, for the
    /// log).
    OutOfService { down: Vec<OutOfService> },
    /// A join ([`crate::Router::join_replica`]): the service's input is
    /// held after event `seq`, which every replica applied. The `donor`'s
    /// agent checkpoints its server's state and sends it (through the
    /// router's driver) to the `joiner`'s agent, which restores it; both
    /// report a digest of the state ([`crate::Router::checkpoint_taken`],
    /// [`crate::Router::state_restored`]).
    Checkpoint {
        join: u64,
        vip: Ipv4Addr,
        ports: Vec<u16>,
        seq: u64,
        donor: Ipv4Addr,
        joiner: Ipv4Addr,
    },
    /// The join ended (admitted or failed): the donor's and joiner's agents
    /// drop what they kept for it.
    JoinEnded {
        join: u64,
        ok: bool,
        replicas: Vec<Ipv4Addr>,
    },
    /// The servers following the order on `replica` are stale
    /// ([`crate::Router::stale_in`]): it was taken out of a stateful
    /// service while another replica serves, so they miss input from now
    /// on (or a join left one with a state that is not the group's). Only
    /// a fresh server can come back (it joins); its agent ends them where
    /// it is allowed to (`--end-stale-servers`), and their supervisor
    /// starts them again.
    Restart { replica: Ipv4Addr, reason: String },
}

/// One input event of the sequencer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputKind {
    /// The connection is accepted (ESTABLISHED at the router).
    Accept,
    /// Client bytes up to stream offset `end` (bytes after the SYN,
    /// modulo 2^32) are the next chunk: one read returns at most one chunk.
    Data { end: u32 },
    /// A replica joins the open connection (it had no part in it): its
    /// own TCP connection begins at client-stream offset `base` (bytes
    /// after the SYN, modulo 2^32). For the joiner this is the
    /// connection's accept; a replica that has the connection drops it.
    Join { base: u32 },
    /// The service's clock: the router's wall-clock time, in microseconds
    /// since the Unix epoch, at this point of the input (the key names the
    /// service: client 0.0.0.0, port 0, the service's first port). The
    /// shims give their servers this time from here to the next tick, and
    /// let a wait's timeout expire only at a tick, so that time and timers
    /// fall at the same point of the input on every replica (FT-TCP §5's
    /// replayed time with the router as the primary).
    Tick { at_us: u64 },
    /// The client reset the connection (safe delivery): no chunk of it
    /// follows, and its server sees the reset here, whatever bytes beyond
    /// the last chunk its kernel holds (no server reads those).
    Reset,
}

/// A client input event the sequencer has not numbered yet: the router
/// numbers it per service as it leaves ([`crate::Router::poll_agent_msg`]),
/// so that the numbers follow the order the core produced them in and have
/// no gaps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unnumbered {
    pub key: ConnKey,
    pub kind: InputKind,
    pub replicas: Vec<Ipv4Addr>,
}

impl Unnumbered {
    /// The message, numbered `seq`.
    pub(crate) fn numbered(self, seq: u64) -> AgentMsg {
        AgentMsg::Input {
            seq,
            key: self.key,
            kind: self.kind,
            replicas: self.replicas,
        }
    }
}

/// A message for the agents waiting to leave the router, or an input the
/// sequencer has yet to number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ToAgents {
    Msg(AgentMsg),
    Input(Unnumbered),
}

/// What a connection or the router queued to leave: events for the
/// operator and messages for the agents, each queue in the order produced.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    pub events: VecDeque<Event>,
    pub agents: VecDeque<ToAgents>,
}

impl Outbox {
    /// An event for the operator's log.
    pub(crate) fn event(&mut self, ev: Event) {
        self.events.push_back(ev);
    }

    /// A message for the agents.
    pub(crate) fn agent(&mut self, msg: AgentMsg) {
        self.agents.push_back(ToAgents::Msg(msg));
    }

    /// A client input for the sequencer to number.
    pub(crate) fn input(&mut self, input: Unnumbered) {
        self.agents.push_back(ToAgents::Input(input));
    }
}
