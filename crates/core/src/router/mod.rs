//! The router: classifies packets, owns the connection table, runs timers.
//! Split by concern: `members` (who serves: membership, failures, health
//! probes) and `agents` (what the control plane brings: adoption after a
//! takeover, the sequencer's order).

mod agents;
mod join;
pub use join::JOIN_ATTEMPTS;
mod members;

use crate::config::Config;
use crate::conn::{csum_mode, ChallengeBudget, Conn, Ctx, Seg, SynOnKey};
use crate::event::{
    Adopted, AgentMsg, Event, EvictReason, OutOfService, Outbox, ToAgents, Unnumbered,
};
use crate::ids::{ReplicaId, ServiceId};
use crate::key::ConnKey;
use crate::membership::{Member, MembershipError};
use crate::metrics::{Counters, DropReason};
use crate::order::{OrderReport, SvcOrder, Waiting, ORDER_HOLD_MAX, ORDER_WAIT};
use crate::packet::{Headers, Packet};
use crate::record::ConnRecord;
use crate::status::{ReplicaDown, ReplicaStatus, ServiceStatus, Status};
use crate::time::Instant;
use crate::wrap::{len32, mod32};
use ftnet_wire::tcp::{self, flags, Repr};
use ftnet_wire::{icmp, ipv4, SeqNum};
use siphasher::sip::{SipHasher13, SipHasher24};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::net::Ipv4Addr;

/// The connection table's hasher: SipHash-1-3 keyed from the router's
/// secret (a key of its own, not the ISN function's).
#[derive(Debug, Clone, Copy)]
struct TableHasher(u64, u64);

impl TableHasher {
    fn new(secret: &[u8; 16]) -> TableHasher {
        let half = |d: u8| {
            let mut h = SipHasher24::new_with_key(secret);
            h.write(b"ftnet connection table");
            h.write_u8(d);
            h.finish()
        };
        TableHasher(half(0), half(1))
    }
}

impl BuildHasher for TableHasher {
    type Hasher = SipHasher13;
    fn build_hasher(&self) -> SipHasher13 {
        SipHasher13::new_with_keys(self.0, self.1)
    }
}

/// Connections shown in detail in the status.
const SAMPLE_CONNS: usize = 8;

/// How long a client segment of a connection this router does not have is
/// kept while it may be taking over ([`Router::keep_orphan`]).
pub const ORPHAN_KEEP: core::time::Duration = core::time::Duration::from_secs(1);
/// How long after the first agent registered such segments are kept at
/// all: the agents hand their records over as they register.
pub const ORPHAN_WINDOW: core::time::Duration = core::time::Duration::from_secs(2);
/// At most this many such segments, and payload bytes, in all.
pub const ORPHANS_MAX: (usize, usize) = (4_096, 4 << 20);
/// At most this many of one connection (a client that timed out resends
/// one segment, then waits).
pub const ORPHANS_PER_CONN: usize = 8;

/// How long after an agent registered its records are surely in (they
/// follow the registration at once).
const AGENT_RECORDS_WAIT: core::time::Duration = core::time::Duration::from_secs(2);

/// How often a down replica of a stateless service is probed (and how long
/// after it went down the first probe goes).
pub const PROBE_EVERY: core::time::Duration = core::time::Duration::from_millis(500);

/// The source port range of the router's probes (from the VIP).
const PROBE_PORT_BASE: u16 = 61_000;

/// Client SYNs held at most while an order waits for the agents (see
/// `Router::open`); beyond, a SYN is dropped and the client repeats it.
const SYN_BACKLOG_MAX: usize = 1024;

/// After the router did not run for a while, how long it takes no replica
/// out of a service ([`Router::note_time`]): long enough for an agent that
/// moved to another router meanwhile to register here again and show it
/// (`Router::superseded`).
pub const PAUSE_PROBATION: core::time::Duration = core::time::Duration::from_secs(2);

/// The shortest pause after which the router may have been superseded
/// (probation, [`Router::note_time`]): a VRRP standby takes over after
/// three adverts and a skew, 150 ms and more with adverts every 50 ms (the
/// HA lab's).
const PAUSE_SUPERSEDED_MIN: core::time::Duration = core::time::Duration::from_millis(150);

/// How often, while a replica drains, the table is scanned for whether its
/// last connection left.
const DRAIN_CHECK: core::time::Duration = core::time::Duration::from_millis(100);

/// The router state machine.
pub struct Router {
    config: Config,
    secret: [u8; 16],
    counters: Counters,
    transmit: VecDeque<Packet>,
    /// Events for the operator and messages for the agents.
    out: Outbox,
    /// Per service, per replica: serving, draining, down and why, or
    /// removed. A replica marked down stays down until an operator enables
    /// it again: it missed input while out, so its state is not the group's.
    health: Vec<Vec<Member>>,
    /// Per service, per replica (like `health`): when a segment of one of
    /// its connections last came from it (`Event::ReplicaDown::silent_ms`).
    heard: Vec<Vec<Option<Instant>>>,
    /// Per service, per replica: payload bytes that came from it on its
    /// connections (the copies the router withheld counted too).
    replica_bytes: Vec<Vec<u64>>,
    /// Per service: payload bytes from its clients and to them.
    service_bytes: Vec<(u64, u64)>,
    /// With [`Router::require_agents`]: the replicas whose own agent has
    /// registered with this router. Only those get new connections.
    agents: Option<BTreeSet<Ipv4Addr>>,
    /// When each agent last registered, or (without registration: the
    /// simulation) first handed over records (the router's clock then):
    /// its records follow at once.
    agent_since: BTreeMap<Ipv4Addr, Instant>,
    /// The agents that handed over every record they had since they last
    /// registered ([`Router::records_done`]): a connection adopted later
    /// does not wait for their record of it, which never comes.
    records_in: BTreeSet<Ipv4Addr>,
    /// (VIP, port) → service.
    by_vip: HashMap<(Ipv4Addr, u16), ServiceId>,
    /// (replica address, port) → (service, replica).
    by_replica: HashMap<(Ipv4Addr, u16), (ServiceId, ReplicaId)>,
    /// Keyed by the router's secret: the keys are the clients' to choose
    /// (no collision flood), and a run's iteration order follows from its
    /// secret and its input alone (the simulation replays a seed exactly).
    conns: HashMap<ConnKey, Conn, TableHasher>,
    /// Timers, earliest first; an entry is live only while it equals its
    /// connection's `timer_at`.
    timers: BinaryHeap<Reverse<(Instant, ConnKey)>>,
    /// Half-open connections in arrival order (with their creation time, to
    /// tell a reused key from the original), for oldest-first eviction.
    half_open: VecDeque<(ConnKey, Instant)>,
    half_open_count: usize,
    /// Closed connections in closing order, the first to give way when the
    /// table is full.
    closed: VecDeque<(ConnKey, Instant)>,
    down: Vec<(ServiceId, ReplicaId, EvictReason)>,
    /// Replicas taken out of a connection that could still get input
    /// (`Ctx::missed`).
    missed: Vec<(ServiceId, ReplicaId)>,
    /// Replicas this router brought (back) into service itself (a join, an
    /// operator's enable or add, a stateless rejoin): an agent's report that
    /// one is out of service is older than that verdict
    /// ([`Router::reported_down`]).
    readmitted: BTreeSet<(ServiceId, ReplicaId)>,
    /// The sequencer's numbering, per service.
    order: Vec<SvcOrder>,
    /// The latest `now` the router was given (for hold deadlines set
    /// while events leave).
    last_now: Instant,
    /// After the router found it had not run for a while
    /// ([`Router::note_time`]): until when no replica is taken out of a
    /// service, and how many packets it had taken in by then.
    probation: Option<(Instant, u64)>,
    /// Every agent fell silent together and none registered since
    /// ([`Router::agents_all_silent`]): held like a probation.
    cut_off: bool,
    /// A rebuild in progress: when the first record came, connections
    /// adopted since, and adopted ones that left the table unrebuilt.
    rebuild: Option<(Instant, u64)>,
    rebuild_dropped: u64,
    /// Client segments of connections this router does not have, kept
    /// while it may be taking over (arrival, connection, segment), and
    /// their payload bytes ([`Router::keep_orphan`]).
    orphans: VecDeque<(Instant, ConnKey, Packet)>,
    orphan_bytes: usize,
    /// How many of `orphans` each connection has.
    orphans_of: BTreeMap<ConnKey, usize>,
    /// Challenge ACKs sent this second (RFC 5961 §7).
    challenges: ChallengeBudget,
    /// Draining replicas already announced drained.
    drained: Vec<(ServiceId, ReplicaId)>,
    /// When the table was last scanned for drained replicas.
    drain_checked: Option<Instant>,
    /// Down replicas of stateless services: when each is probed next.
    probe_next: BTreeMap<(ServiceId, ReplicaId), Instant>,
    /// Joins in progress (at most one per service).
    joins: Vec<join::Join>,
    /// The last join's id.
    join_ids: u64,
    /// Failed joins the router tries again: when, and attempts so far.
    join_retry: BTreeMap<(ServiceId, ReplicaId), (Instant, u32)>,
    /// Services removed at run time ([`Router::remove_service`]): no new
    /// connections; their open ones finish. The slot stays, so that
    /// `ServiceId`s never move.
    retired: BTreeSet<ServiceId>,
    /// Draining before a stop ([`Router::set_draining`]).
    draining: bool,
    /// Client SYNs of new connections held while a service's order waits
    /// for the agents' reports and a replica in its group has not
    /// registered yet (see `open`); opened when the order resumes.
    syn_backlog: VecDeque<Packet>,
    /// Wall-clock microseconds since the Unix epoch at `Instant::ZERO`
    /// ([`Router::set_wall_clock`]): what the clock ticks say.
    wall_offset_us: u64,
    /// When the services' next clock tick is due (`Config::tick`).
    tick_next: Instant,
    /// Replicas whose servers follow the input order, as their agents said
    /// ([`Router::set_follows_order`]): a number of the order left out for
    /// one is a hole its shim would find (see `left_out`).
    follows_order: BTreeSet<Ipv4Addr>,
}

impl Router {
    /// `secret` keys the RFC 6528 ISN function; give it 16 random bytes.
    pub fn new(config: Config, secret: [u8; 16]) -> Router {
        let mut by_vip = HashMap::new();
        let mut by_replica = HashMap::new();
        let mut health = Vec::new();
        for (si, s) in config.services.iter().enumerate() {
            for &p in &s.ports {
                by_vip.insert((s.vip, p), ServiceId(si));
                for (ri, &r) in s.replicas.iter().enumerate() {
                    by_replica.insert((r, p), (ServiceId(si), ReplicaId(ri)));
                }
            }
            health.push(vec![Member::Serving; s.replicas.len()]);
        }
        Router {
            secret,
            counters: Counters::default(),
            transmit: VecDeque::new(),
            out: Outbox::default(),
            heard: health.iter().map(|h| vec![None; h.len()]).collect(),
            replica_bytes: health.iter().map(|h| vec![0; h.len()]).collect(),
            service_bytes: vec![(0, 0); health.len()],
            health,
            by_vip,
            by_replica,
            conns: HashMap::with_hasher(TableHasher::new(&secret)),
            timers: BinaryHeap::new(),
            half_open: VecDeque::new(),
            half_open_count: 0,
            closed: VecDeque::new(),
            down: Vec::new(),
            missed: Vec::new(),
            readmitted: BTreeSet::new(),
            order: config
                .services
                .iter()
                .map(|_| SvcOrder::default())
                .collect(),
            last_now: Instant::ZERO,
            probation: None,
            cut_off: false,
            rebuild: None,
            rebuild_dropped: 0,
            orphans: VecDeque::new(),
            orphan_bytes: 0,
            orphans_of: BTreeMap::new(),
            agents: None,
            agent_since: BTreeMap::new(),
            records_in: BTreeSet::new(),
            challenges: ChallengeBudget::default(),
            drained: Vec::new(),
            drain_checked: None,
            probe_next: BTreeMap::new(),
            joins: Vec::new(),
            join_ids: 0,
            join_retry: BTreeMap::new(),
            retired: BTreeSet::new(),
            draining: false,
            syn_backlog: VecDeque::new(),
            wall_offset_us: 0,
            tick_next: Instant::ZERO,
            follows_order: BTreeSet::new(),
            config,
        }
    }

    /// Whether servers of replica `addr` follow the input order (`ftnet
    /// run`), as its agent says: then an input event of its service that
    /// leaves it out is a hole in its order, and it leaves the group at
    /// once (`OrderLost`) rather than serve on until its shim finds the
    /// hole. A replica without such servers (a service whose servers read
    /// their sockets directly) misses nothing by being left out.
    pub fn set_follows_order(&mut self, addr: Ipv4Addr, yes: bool) {
        if yes {
            self.follows_order.insert(addr);
        } else {
            self.follows_order.remove(&addr);
        }
    }

    /// The wall clock: `offset_us` microseconds since the Unix epoch at
    /// `Instant::ZERO` of the driver's clock. The clock ticks of the order
    /// carry `now` + this (the core still reads no clock).
    pub fn set_wall_clock(&mut self, offset_us: u64) {
        self.wall_offset_us = offset_us;
    }

    /// Feed one packet read from the network.
    pub fn handle_packet(&mut self, now: Instant, pkt: Packet) {
        // Counted first: a probation this packet starts (`note_time`) ends
        // only on a later one (this one may have waited out the pause in
        // the router's queue).
        self.counters.packets_in += 1;
        self.note_time(now);
        if let Err(r) = self.classify(now, pkt) {
            self.counters.drop(r);
        }
        self.apply_down(now);
    }

    fn classify(&mut self, now: Instant, pkt: Packet) -> Result<(), DropReason> {
        let ip = ipv4::Packet::new_checked(&pkt.data[..]).map_err(wire_reason)?;
        if ip.protocol() == ipv4::PROTO_ICMP {
            return self.handle_icmp(now, ip.src(), ip.dst(), ip.payload());
        }
        if ip.protocol() != ipv4::PROTO_TCP {
            return Err(DropReason::NotOurs);
        }
        let (src, dst) = (ip.src(), ip.dst());
        let t = tcp::Segment::new_checked(ip.payload()).map_err(wire_reason)?;
        let mode = csum_mode(&pkt.vnet);
        // The kernel vouches for partial (locally produced) and validated
        // checksums; anything else is verified here.
        if !pkt.vnet.needs_csum()
            && pkt.vnet.flags & ftnet_wire::vnet::F_DATA_VALID == 0
            && !t.verify_checksum(src, dst)
        {
            return Err(DropReason::BadChecksum);
        }
        let seg = Seg {
            src,
            dst,
            sport: t.src_port(),
            dport: t.dst_port(),
            seq: t.seq(),
            ack: t.ack(),
            flags: t.flags(),
            window: t.window(),
            payload_len: len32(t.payload_len()),
            mss: t.mss(),
            // RFC 7323 §2.3: a shift count above 14 is used as 14.
            wscale: t.wscale().map(|w| w.min(14)),
            ts: t.timestamps(),
            mode,
            at: Headers::of(&ip, &t),
        };
        // An answer to a health probe (only while a replica is probed: the
        // data path pays nothing otherwise).
        if !self.probe_next.is_empty() {
            if let Some(&(svc, replica)) = self.by_replica.get(&(src, seg.sport)) {
                if dst == self.config.services[svc.0].vip
                    && self.probe_next.contains_key(&(svc, replica))
                {
                    return self.probe_answer(now, svc, replica, &seg);
                }
            }
        }
        if let Some(&svc) = self.by_vip.get(&(dst, seg.dport)) {
            return self.on_client(now, svc, pkt, &seg);
        }
        if !self.retired.is_empty() {
            // A removed service's open connections finish; a new SYN is
            // answered as by a closed port (below).
            let key = ConnKey {
                client: src,
                cport: seg.sport,
                vip: dst,
                vport: seg.dport,
            };
            let new_syn = seg.has(flags::SYN) && !seg.has(flags::ACK);
            if let Some(c) = self.conns.get(&key) {
                if !(new_syn && c.is_closed()) {
                    let svc = c.service();
                    return self.on_client(now, svc, pkt, &seg);
                }
            }
        }
        if let Some(&(svc, replica)) = self.by_replica.get(&(src, seg.sport)) {
            return self.on_replica(now, svc, replica, pkt, &seg);
        }
        if self.config.services.iter().any(|s| s.vip == dst) {
            // A VIP, but no service on that port: answer a SYN like a closed
            // port would (RST), so the client fails fast.
            if seg.has(flags::SYN) && !seg.has(flags::ACK) && !seg.has(flags::RST) {
                let r = Repr::new(
                    seg.dport,
                    seg.sport,
                    SeqNum(0),
                    seg.seq.add(1 + seg.payload_len),
                    flags::RST | flags::ACK,
                    0,
                );
                self.transmit
                    .push_back(Packet::plain(r.emit_ipv4(dst, src, &[])));
                self.counters.packets_out += 1;
            }
            return Err(DropReason::UnknownPort);
        }
        Err(DropReason::NotOurs)
    }

    /// Run `f` on connection `key` of the table with a [`Ctx`] for `now`;
    /// `None` if there is no such connection. (The caller runs
    /// [`Router::after`].)
    fn on_conn<R>(
        &mut self,
        now: Instant,
        key: ConnKey,
        f: impl FnOnce(&mut Conn, &mut Ctx) -> R,
    ) -> Option<R> {
        let quiet = self.on_probation();
        let c = self.conns.get_mut(&key)?;
        let before = (
            self.counters.client_bytes_in,
            self.counters.client_bytes_out,
        );
        let mut ctx = Ctx {
            now,
            tx: &mut self.transmit,
            counters: &mut self.counters,
            out: &mut self.out,
            timeouts: &self.config.timeouts,
            down: &mut self.down,
            missed: &mut self.missed,
            sequencer: self.config.sequencer,
            challenges: &mut self.challenges,
            log_total: self.config.limits.log_total,
            quiet,
        };
        let r = f(c, &mut ctx);
        if let Some(b) = self.service_bytes.get_mut(c.service().0) {
            b.0 += self.counters.client_bytes_in - before.0;
            b.1 += self.counters.client_bytes_out - before.1;
        }
        Some(r)
    }

    fn on_client(
        &mut self,
        now: Instant,
        svc: ServiceId,
        pkt: Packet,
        seg: &Seg,
    ) -> Result<(), DropReason> {
        let key = ConnKey {
            client: seg.src,
            cport: seg.sport,
            vip: seg.dst,
            vport: seg.dport,
        };
        if !self.joins.is_empty()
            && self.paused(svc)
            && (seg.payload_len > 0 || seg.flags & (flags::SYN | flags::FIN | flags::RST) != 0)
            && !self
                .conns
                .get(&key)
                .is_some_and(|c| c.repeats_sent_bytes(seg))
        {
            // A replica joins: the service's input waits (see `join`), but
            // for what of it is not new.
            let pass = self
                .conns
                .get(&key)
                .and_then(|c| c.pause_pass_part(&pkt, seg));
            let syn = seg.flags & (flags::SYN | flags::ACK) == flags::SYN;
            self.hold(now, svc, key, pkt, syn);
            if let Some(p) = pass {
                self.handle_packet(now, p);
            }
            return Ok(());
        }
        let is_syn = seg.has(flags::SYN) && !seg.has(flags::ACK) && !seg.has(flags::RST);
        if is_syn {
            match self.conns.get(&key).map(|c| c.syn_on_key(seg.seq)) {
                None => {}
                Some(SynOnKey::Reuse) => self.remove(key),
                Some(SynOnKey::BadState) => return Err(DropReason::BadState),
                Some(SynOnKey::Challenge) => {
                    self.on_conn(now, key, |c, ctx| c.syn_on_live(ctx))
                        .ok_or(DropReason::UnknownConnection)?;
                    self.after(now, key);
                    return Ok(());
                }
                Some(SynOnKey::Again) => {
                    self.on_conn(now, key, |c, ctx| c.client_syn_again(ctx, &pkt, seg))
                        .ok_or(DropReason::UnknownConnection)?;
                    self.after(now, key);
                    return Ok(());
                }
            }
            return self.open(now, svc, key, pkt, seg);
        }
        // (The cheap test first: past the takeover no lookup is added.)
        if self.keeps_orphans(now) && !self.conns.contains_key(&key) {
            self.keep_orphan(now, key, pkt, seg);
            return Ok(());
        }
        self.on_conn(now, key, |c, ctx| c.client_segment(ctx, pkt, seg))
            .ok_or(DropReason::UnknownConnection)?;
        self.after(now, key);
        Ok(())
    }

    /// Whether client segments of connections this router does not have
    /// are kept for a moment ([`Router::keep_orphan`]): it waits for the
    /// agents (a router that takes over or restarts), and none registered
    /// yet or the first did less than [`ORPHAN_WINDOW`] ago.
    fn keeps_orphans(&self, now: Instant) -> bool {
        self.agents.is_some()
            && self
                .agent_since
                .values()
                .min()
                .is_none_or(|&t| now < t + ORPHAN_WINDOW)
    }

    /// A client segment of a connection this router does not have, while
    /// it may be taking over: the connection may be one the agents'
    /// records bring in a moment. A router that takes over holds the
    /// virtual address before the agents have registered with it (VRRP
    /// moved it ~100 ms after a cut; the agents give a silent router up
    /// after 150 ms, then register), and a client's first retransmission
    /// (~200 ms after its segment) landing in between was lost: the client
    /// then waited for its next one, backed off (~400 ms; the ICMP prompt
    /// of a rebuild takes back one back-off step, not the wait since its
    /// last retransmission). Kept instead, bounded ([`ORPHAN_KEEP`],
    /// [`ORPHANS_MAX`], [`ORPHANS_PER_CONN`]), it goes to the connection as
    /// it is adopted ([`Router::replay_orphans`]), validated like any
    /// client segment then; dropped if none is.
    fn keep_orphan(&mut self, now: Instant, key: ConnKey, pkt: Packet, seg: &Seg) {
        while let Some((t, _, _)) = self.orphans.front() {
            if now.saturating_sub(*t) < ORPHAN_KEEP {
                break;
            }
            if let Some((_, k, p)) = self.orphans.pop_front() {
                self.forget_orphan(&k, &p);
                self.counters.drop(DropReason::UnknownConnection);
            }
        }
        let of_key = self.orphans_of.get(&key).copied().unwrap_or(0);
        if seg.has(flags::SYN)
            || of_key >= ORPHANS_PER_CONN
            || self.orphans.len() >= ORPHANS_MAX.0
            || self.orphan_bytes + pkt.data.len() > ORPHANS_MAX.1
        {
            self.counters.drop(DropReason::UnknownConnection);
            return;
        }
        self.orphan_bytes += pkt.data.len();
        *self.orphans_of.entry(key).or_insert(0) += 1;
        self.orphans.push_back((now, key, pkt));
        self.counters.orphans_kept += 1;
    }

    /// A kept segment of `key` leaves the store.
    fn forget_orphan(&mut self, key: &ConnKey, p: &Packet) {
        self.orphan_bytes -= p.data.len();
        if let Some(n) = self.orphans_of.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                self.orphans_of.remove(key);
            }
        }
    }

    /// Connection `key` was just adopted: the client's segments kept for it
    /// ([`Router::keep_orphan`]) reach it now, in their order, as if they
    /// arrived now.
    pub(super) fn replay_orphans(&mut self, now: Instant, key: ConnKey) {
        if !self.orphans_of.contains_key(&key) {
            return;
        }
        let mut mine = Vec::new();
        let mut rest = VecDeque::with_capacity(self.orphans.len());
        for (t, k, p) in core::mem::take(&mut self.orphans) {
            if k == key {
                mine.push((t, p));
            } else {
                rest.push_back((t, k, p));
            }
        }
        self.orphans = rest;
        for (t, p) in mine {
            self.forget_orphan(&key, &p);
            if now.saturating_sub(t) >= ORPHAN_KEEP {
                self.counters.drop(DropReason::UnknownConnection);
                continue;
            }
            self.counters.orphans_replayed += 1;
            if let Err(r) = self.classify(now, p) {
                self.counters.drop(r);
            }
        }
    }

    /// A new connection: SYN to every live replica (§III-E).
    fn open(
        &mut self,
        now: Instant,
        svc: ServiceId,
        key: ConnKey,
        pkt: Packet,
        seg: &Seg,
    ) -> Result<(), DropReason> {
        if self.draining {
            return Err(DropReason::Draining);
        }
        let live: Vec<ReplicaId> = (0..self.health[svc.0].len())
            .map(ReplicaId)
            .filter(|&r| self.in_service(svc, r))
            .collect();
        if self.config.sequencer
            && !live.is_empty()
            && live.len() < self.health[svc.0].iter().filter(|m| m.in_group()).count()
        {
            if let Some(w) = &mut self.order[svc.0].waiting {
                // After a start or a takeover the order waits for the
                // agents' reports, and a replica of the group has not
                // registered yet: opened now, this connection would not
                // include it, and its server would miss the connection's
                // input events (a hole in its order, which takes it out of
                // the group). The SYN waits for the order to resume (at
                // most ORDER_WAIT), then opens with every replica
                // registered by then.
                w.deadline.get_or_insert(now + crate::order::ORDER_WAIT);
                if self.syn_backlog.len() >= SYN_BACKLOG_MAX {
                    return Err(DropReason::AwaitingAgents);
                }
                self.syn_backlog.push_back(pkt);
                return Ok(());
            }
        }
        if live.is_empty() && self.health[svc.0].iter().any(Member::serves_new) {
            // Replicas not out of service, but their agents have not
            // registered with this router yet: they will within moments,
            // and the client's retransmitted SYN finds them.
            return Err(DropReason::AwaitingAgents);
        }
        if live.is_empty() {
            // Nothing can serve it: refuse at once rather than let the
            // client time out.
            let r = Repr::new(
                seg.dport,
                seg.sport,
                SeqNum(0),
                seg.seq.add(1),
                flags::RST | flags::ACK,
                0,
            );
            self.transmit
                .push_back(Packet::plain(r.emit_ipv4(seg.dst, seg.src, &[])));
            self.counters.packets_out += 1;
            return Err(DropReason::NoReplica);
        }
        while self.conns.len() >= self.config.limits.max_connections {
            // Full: a connection in its post-close quiet period gives way.
            let Some((k, t)) = self.closed.pop_front() else {
                return Err(DropReason::TableFull);
            };
            if self
                .conns
                .get(&k)
                .is_some_and(|c| c.closed_since() == Some(t))
            {
                self.remove(k);
            }
        }
        while self.half_open_count >= self.config.limits.max_half_open {
            // SYN flood: make room by dropping the oldest half-open
            // connection. Spoofed SYNs never complete, so the oldest are the
            // likeliest to be junk; a real client retries its SYN.
            let Some((k, t)) = self.half_open.pop_front() else {
                break;
            };
            let stale = self
                .conns
                .get(&k)
                .is_none_or(|c| c.half_open_since() != Some(t));
            if stale {
                continue;
            }
            self.on_conn(now, k, |c, ctx| c.discard_half_open(ctx));
            self.counters.drop(DropReason::HalfOpenEvicted);
            self.remove(k);
        }
        let isn = self.isn(now, &key);
        let ts_base = mod32(self.keyed(&key, 1));
        let voting = self.config.services[svc.0].voting;
        let mut c = Conn::new(key, svc, now, seg, isn, ts_base, voting);
        c.set_check(self.check_mode(svc));
        c.set_delivery(self.config.services[svc.0].delivery);
        c.set_ack(
            self.config.services[svc.0].ack,
            self.config.limits.log_per_connection,
            !self.config.services[svc.0].stateless,
        );
        let addrs = &self.config.services[svc.0].replicas;
        for r in live {
            c.add_leg(r, addrs[r.0], now);
        }
        if let Some(r) = self.held_joiner(svc) {
            // A live join's joiner takes every input from its checkpoint
            // on: new connections too, held like its joined ones.
            c.add_held_leg(r, addrs[r.0], now);
        }
        self.conns.insert(key, c);
        self.on_conn(now, key, |c, ctx| c.forward_syn(ctx, &pkt, seg));
        self.counters.connections_opened += 1;
        self.half_open.push_back((key, now));
        self.half_open_count += 1;
        if self.half_open.len() > 2 * self.half_open_count + 1024 {
            // Entries of connections that completed or went away.
            let conns = &self.conns;
            self.half_open.retain(|(k, t)| {
                conns
                    .get(k)
                    .is_some_and(|c| c.half_open_since() == Some(*t))
            });
        }
        self.after(now, key);
        Ok(())
    }

    fn on_replica(
        &mut self,
        now: Instant,
        svc: ServiceId,
        replica: ReplicaId,
        pkt: Packet,
        seg: &Seg,
    ) -> Result<(), DropReason> {
        let vip = self.config.services[svc.0].vip;
        let key = ConnKey {
            client: seg.dst,
            cport: seg.dport,
            vip,
            vport: seg.sport,
        };
        let Some(c) = self.conns.get(&key) else {
            self.reset_unknown_fin(now, svc, replica, seg);
            return Err(DropReason::UnknownConnection);
        };
        let Some(i) = c.leg_of(replica) else {
            return Err(DropReason::EvictedReplica);
        };
        if let Some(h) = self.heard.get_mut(svc.0).and_then(|v| v.get_mut(replica.0)) {
            *h = Some(now);
        }
        if let Some(b) = self
            .replica_bytes
            .get_mut(svc.0)
            .and_then(|v| v.get_mut(replica.0))
        {
            *b += u64::from(seg.payload_len);
        }
        self.on_conn(now, key, |c, ctx| c.replica_input(ctx, i, pkt, seg))
            .ok_or(DropReason::UnknownConnection)??;
        self.after(now, key);
        if !self.joins.is_empty() {
            // A joiner's SYN-ACK may complete a join.
            self.join_tick(now);
        }
        Ok(())
    }

    /// A replica's FIN on a connection this router does not have: one
    /// that closed (and was forgotten) while the replica's last ACK of the
    /// client's FIN was lost, or whose router died before the replica got
    /// it. The replica retransmits its FIN from LAST-ACK; the client's
    /// TIME-WAIT is long gone or was on the dead router's side. As a stack
    /// answers a segment for no connection (RFC 9293 §3.10.7.1:
    /// `<SEQ=SEG.ACK><CTL=RST>`), the router resets it in the client's
    /// name, so the replica does not hold the socket for minutes. Only a
    /// FIN, and only once the replica's agent registered with this router
    /// `AGENT_RECORDS_WAIT` ago (its records, which follow the
    /// registration, are in: a connection it still serves would have been
    /// adopted). A router that never heard from the replica's agent knows
    /// nothing of which connections a router before it had: no reset.
    fn reset_unknown_fin(&mut self, now: Instant, svc: ServiceId, replica: ReplicaId, seg: &Seg) {
        if !seg.has(flags::FIN)
            || !seg.has(flags::ACK)
            || seg.has(flags::RST)
            || seg.has(flags::SYN)
        {
            return;
        }
        let addr = self.config.services[svc.0].replicas[replica.0];
        let records_in = self.agents.as_ref().is_none_or(|a| a.contains(&addr))
            && self
                .agent_since
                .get(&addr)
                .is_some_and(|&t| now >= t + AGENT_RECORDS_WAIT);
        if !records_in {
            return;
        }
        let r = Repr::new(seg.dport, seg.sport, seg.ack, SeqNum(0), flags::RST, 0);
        self.transmit
            .push_back(Packet::plain(r.emit_ipv4(seg.dst, seg.src, &[])));
        self.counters.packets_out += 1;
    }

    /// ICMP destination unreachable about a segment we sent to a replica
    /// (COSCANet-FT §III-D, passive detection), validated as a TCP stack
    /// validates ICMP about its connections (RFC 5927 §4.1, the spirit of
    /// RFC 5961): the error must be addressed to the quoted segment's
    /// source, must not come from that connection's client or from a VIP
    /// (a client can quote its own connection), and must quote a segment
    /// the router actually sent that replica ([`Conn::icmp_quote`]).
    ///
    /// Even then one ICMP message is no proof that the replica is gone for
    /// every client: it takes the replica out of that one connection at
    /// most (never its last replica). Service-wide health is the agents'
    /// heartbeats' and passive failure detection's to decide.
    fn handle_icmp(
        &mut self,
        now: Instant,
        outer_src: Ipv4Addr,
        outer_dst: Ipv4Addr,
        payload: &[u8],
    ) -> Result<(), DropReason> {
        let u = icmp::parse_unreachable(payload)
            .map_err(wire_reason)?
            .ok_or(DropReason::IcmpIgnored)?;
        // Codes 0, 1 (net, host unreachable) and 9, 10, 13 (prohibited) say
        // the host is gone; 4 (fragmentation needed) is path MTU news.
        if !matches!(u.code, 0 | 1 | 9 | 10 | 13) {
            return Err(DropReason::IcmpIgnored);
        }
        let &(svc, replica) = self
            .by_replica
            .get(&(u.dst, u.dst_port))
            .ok_or(DropReason::IcmpIgnored)?;
        let key = ConnKey {
            client: u.src,
            cport: u.src_port,
            vip: self.config.services[svc.0].vip,
            vport: u.dst_port,
        };
        if !self.conns.contains_key(&key) {
            return Err(DropReason::IcmpIgnored);
        }
        // RFC 792: an ICMP error goes to the source of the datagram it
        // quotes. One from the client itself (or sent to or from a VIP) is
        // the client speaking about its own connection.
        let from_vip = self.config.services.iter().any(|s| s.vip == outer_src);
        if outer_dst != key.client || outer_src == key.client || from_vip {
            return Err(DropReason::IcmpUnverified);
        }
        let Some(c) = self.conns.get(&key) else {
            return Err(DropReason::IcmpIgnored);
        };
        let i = c
            .icmp_quote(replica, u.seq)
            .ok_or(DropReason::IcmpUnverified)?;
        self.on_conn(now, key, |c, ctx| c.unreachable(ctx, i));
        self.after(now, key);
        Ok(())
    }

    /// Bookkeeping after a connection handled an input: forget it if dead,
    /// leave the half-open count, schedule its next timer.
    fn after(&mut self, now: Instant, key: ConnKey) {
        let Some(c) = self.conns.get_mut(&key) else {
            return;
        };
        let svc = c.service();
        let no_leg = c.take_missed_no_leg();
        if !no_leg.is_empty() {
            let remaining = c.live_legs();
            self.missed_no_leg(svc, key, &no_leg, remaining);
        }
        let Some(c) = self.conns.get_mut(&key) else {
            return;
        };
        let tr = c.after_input(now, &self.config.timeouts, &mut self.out);
        if tr.gone {
            self.remove(key);
            return;
        }
        if tr.left_half_open {
            self.half_open_count = self.half_open_count.saturating_sub(1);
        }
        if let Some(t) = tr.closed_at {
            self.closed.push_back((key, t));
            if self.closed.len() > 2 * self.conns.len() + 1024 {
                let conns = &self.conns;
                self.closed
                    .retain(|(k, t)| conns.get(k).is_some_and(|c| c.closed_since() == Some(*t)));
            }
        }
        if let Some(d) = tr.schedule {
            self.timers.push(Reverse((d, key)));
            self.compact_timers();
        }
    }

    /// Replicas `addrs` of stateful service `svc` have no part in adopted
    /// connection `key` as rebuilt, whose first chunk since was just
    /// numbered (`Conn::note_missed_no_leg`): those in the group whose
    /// servers follow the order miss its input from here, and leave the
    /// service as `MissedInput` (`apply_down`), each with the reason in
    /// the log. (`remaining`: the connection's live legs.)
    fn missed_no_leg(
        &mut self,
        svc: ServiceId,
        key: ConnKey,
        addrs: &[Ipv4Addr],
        remaining: usize,
    ) {
        let s = &self.config.services[svc.0];
        if s.stateless {
            return;
        }
        for &addr in addrs {
            let Some(i) = s.replicas.iter().position(|r| *r == addr) else {
                continue;
            };
            if !self.follows_order.contains(&addr)
                || !self.health[svc.0].get(i).is_some_and(Member::in_group)
            {
                continue;
            }
            self.out.event(Event::Evicted {
                conn: key.to_string(),
                replica: addr,
                reason: EvictReason::MissedInput,
                remaining,
                detail: "no part in the connection as rebuilt after the takeover (its agent had no record of it: its server lost the socket while no router could tell); its server misses the input numbered from here".into(),
            });
            self.missed.push((svc, ReplicaId(i)));
        }
    }

    /// Entries of removed connections stay in the heap until they come
    /// due; under a SYN flood that is one per spoofed SYN for the handshake
    /// timeout. Rebuild from the live connections when stale entries
    /// dominate, so memory stays proportional to the table.
    fn compact_timers(&mut self) {
        if self.timers.len() <= 2 * self.conns.len() + 1024 {
            return;
        }
        self.timers = self
            .conns
            .iter()
            .filter_map(|(k, c)| c.timer().map(|t| Reverse((t, *k))))
            .collect();
    }

    /// (connections, timer entries, half-open queue entries): what the
    /// router's memory grows with, for tests and `status`.
    pub fn table_sizes(&self) -> (usize, usize, usize) {
        (self.conns.len(), self.timers.len(), self.half_open.len())
    }

    fn remove(&mut self, key: ConnKey) {
        if let Some(mut c) = self.conns.remove(&key) {
            self.counters.log_bytes = self.counters.log_bytes.saturating_sub(c.log_held() as u64);
            self.counters.ahead_bytes = self
                .counters
                .ahead_bytes
                .saturating_sub(c.ahead_held() as u64);
            let gone = c.removed(&mut self.out);
            if gone.rebuilding {
                self.rebuild_dropped += 1;
            }
            if gone.half_open {
                self.half_open_count = self.half_open_count.saturating_sub(1);
            }
        }
    }

    /// Run timers due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.note_time(now);
        self.send_probes(now);
        if self.drain_due().is_some_and(|t| t <= now) {
            self.check_drained(now);
        }
        if self.join_due().is_some_and(|t| t <= now) {
            self.join_tick(now);
        }
        if self.tick_due().is_some_and(|t| t <= now) {
            self.clock_tick(now);
        }
        for svc in 0..self.order.len() {
            let due = self.order[svc]
                .waiting
                .as_ref()
                .and_then(|w| w.deadline)
                .is_some_and(|d| d <= now);
            if due {
                self.resume_order(ServiceId(svc));
            }
        }
        self.open_held_syns(now);
        while let Some(Reverse((t, key))) = self.timers.peek().copied() {
            if t > now {
                break;
            }
            self.timers.pop();
            if !self.conns.get_mut(&key).is_some_and(|c| c.take_timer(t)) {
                continue;
            }
            self.on_conn(now, key, |c, ctx| c.on_timer(ctx));
            self.after(now, key);
        }
        self.apply_down(now);
    }

    /// The SYNs held while an order waited (see `open`), once it no longer
    /// does: each is taken as if it arrived now (held again if its
    /// service's order still waits).
    pub(super) fn open_held_syns(&mut self, now: Instant) {
        if self.syn_backlog.is_empty() || self.order.iter().all(|o| o.waiting.is_some()) {
            return;
        }
        let held = std::mem::take(&mut self.syn_backlog);
        for pkt in held {
            if let Err(r) = self.classify(now, pkt) {
                self.counters.drop(r);
            }
        }
    }

    /// RFC 6528 §3: ISN = M + F(localip, localport, remoteip, remoteport,
    /// secretkey), M a 4 µs clock, F a keyed hash (SipHash-2-4).
    fn isn(&self, now: Instant, key: &ConnKey) -> SeqNum {
        SeqNum(mod32(now.as_micros() / 4)).add(mod32(self.keyed(key, 0)))
    }

    fn keyed(&self, key: &ConnKey, domain: u8) -> u64 {
        let mut h = SipHasher24::new_with_key(&self.secret);
        h.write(&key.client.octets());
        h.write_u16(key.cport);
        h.write(&key.vip.octets());
        h.write_u16(key.vport);
        h.write_u8(domain);
        h.finish()
    }

    /// Next packet to write to the network.
    pub fn poll_transmit(&mut self) -> Option<Packet> {
        self.transmit.pop_front()
    }

    /// When [`Router::handle_timeout`] next needs to run.
    /// Time moves on to `now`. If the router ran late by at least the
    /// detection time — its earliest timer was due that long before, and
    /// nothing ran since — it was not running (its process stopped, a
    /// host that did not schedule it): what it reads now may have waited
    /// in its queues, one replica's before another's, and no replica's
    /// silence across that gap is evidence. Every connection's silence
    /// verdicts count from now (`Conn::router_resumed`), and the log says
    /// so.
    pub(crate) fn note_time(&mut self, now: Instant) {
        let limit = self.config.timeouts.failure_detection;
        if self.last_now != Instant::ZERO && now.saturating_sub(self.last_now) >= limit {
            let late = self
                .poll_timeout()
                .map(|d| now.saturating_sub(d.max(self.last_now)));
            if late.is_some_and(|l| l >= limit) {
                for c in self.conns.values_mut() {
                    c.router_resumed(now);
                }
                // Another router may have served meanwhile (a standby
                // takes over from one that stops answering: VRRP after
                // three adverts, 150 ms and more with adverts every 50 ms,
                // the HA lab's): until this one knows it did not, its verdicts
                // wait. A shorter hiccup of a loaded host is not that.
                let probation = now.saturating_sub(self.last_now) >= PAUSE_SUPERSEDED_MIN;
                if probation {
                    self.probation = Some((now + PAUSE_PROBATION, self.counters.packets_in));
                }
                self.counters.router_pauses += 1;
                self.out.event(Event::RouterPaused {
                    ms: u64::try_from(now.saturating_sub(self.last_now).as_millis())
                        .unwrap_or(u64::MAX),
                    connections: self.conns.len(),
                    probation,
                });
            }
        }
        self.last_now = self.last_now.max(now);
        self.end_probation(now);
    }

    fn end_probation(&mut self, now: Instant) {
        if let Some((until, packets)) = self.probation {
            // Over once its time is up and a packet showed that this
            // router still serves. Not one packet: another router holds
            // the addresses (a standby that took over), and verdicts on
            // a stale table would reset connections that one serves: they
            // wait on, until this router serves again or finds itself
            // superseded (and starts over).
            if now >= until && self.counters.packets_in > packets {
                self.probation = None;
            }
        }
    }

    /// While on probation after a pause ([`Router::note_time`]), or cut off
    /// from every agent ([`Router::agents_all_silent`]): verdicts that take
    /// a replica out of a service wait, and evicted legs are not reset.
    pub(crate) fn on_probation(&self) -> bool {
        self.probation.is_some() || self.cut_off
    }

    /// Every agent fell silent together (the control plane's verdict,
    /// `ftnet::control`): this router is the one cut off from the
    /// replicas, or another router holds the addresses and serves them (a
    /// standby that took over, or a master that took its addresses back).
    /// Until an agent registers again ([`Router::agent_registered`]) it
    /// acts like a router on probation: what it still reads (queued, or
    /// stray) may take replicas out of its own table, but it resets no
    /// replica's side (its resets would reach connections the other
    /// router serves: a healthy replica's server lost its clients'
    /// sockets) and marks nobody down.
    pub fn agents_all_silent(&mut self, now: Instant) {
        self.note_time(now);
        self.cut_off = true;
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        let order = self
            .order
            .iter()
            .filter_map(|o| o.waiting.as_ref().and_then(|w| w.deadline))
            .min();
        let conns = self.timers.peek().map(|Reverse((t, _))| *t);
        let probe = self.probe_next.values().min().copied();
        [
            order,
            conns,
            self.drain_due(),
            probe,
            self.join_due(),
            self.tick_due(),
            self.probation
                .map(|(until, _)| until)
                .filter(|u| *u > self.last_now),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Next event for the operator's log.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.out.events.pop_front()
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Connections in the table.
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// Connections not yet closed (those in their post-close quiet period
    /// left out): what a draining router waits for.
    pub fn open_connections(&self) -> usize {
        self.conns
            .values()
            .filter(|c| c.closed_since().is_none())
            .count()
    }

    /// Drain before a stop (`true`): new connections are refused — their
    /// SYNs dropped, so that a client retries and finds a standby router
    /// that took the addresses over — while the open ones go on. `false`
    /// takes new connections again.
    pub fn set_draining(&mut self, on: bool) {
        self.draining = on;
    }

    /// See [`Router::set_draining`].
    pub fn draining(&self) -> bool {
        self.draining
    }

    /// A snapshot of services, replicas, connections and counters, from one
    /// pass over the whole table at once. A router serving traffic builds
    /// it in slices instead ([`Router::status_slice`]), so that the walk
    /// never holds the data plane for long.
    pub fn status(&self) -> Status {
        let mut pass = StatusPass::default();
        while !self.status_slice(&mut pass, usize::MAX) {}
        self.status_of(pass, self.last_now)
    }

    /// Walk the next `budget` connections of the table for the status
    /// pass `pass`; `true` once the pass has seen the whole table.
    ///
    /// The walk resumes at a position in the table's iteration order, so
    /// while connections open and close between slices a pass may count
    /// one of them twice or not at all; the figures it gives (connections
    /// and lags per replica, the sample) are those of a table that churned
    /// during the pass. The totals (`connections`, `half_open`) are exact.
    pub fn status_slice(&self, pass: &mut StatusPass, budget: usize) -> bool {
        if pass.services.is_empty() {
            pass.services = self
                .config
                .services
                .iter()
                .map(|s| (0, vec![(0, 0, 0); s.replicas.len()]))
                .collect();
        }
        let sort_key = |k: &ConnKey| (k.client, k.cport, k.vip, k.vport);
        let mut walked = 0;
        // Skipping to the position looks at the table's control bytes
        // only, not at the connections.
        for (k, c) in self.conns.iter().skip(pass.at).take(budget) {
            walked += 1;
            if let Some((n, replicas)) = pass.services.get_mut(c.service().0) {
                *n += 1;
                for (replica, o, inn) in c.lags() {
                    if let Some(r) = replicas.get_mut(replica.0) {
                        r.0 += 1;
                        r.1 = r.1.max(o);
                        r.2 = r.2.max(inn);
                    }
                }
            }
            if c.is_rebuilding() {
                pass.rebuilding += 1;
            }
            if c.closed_since().is_none() {
                pass.open += 1;
            }
            let sk = sort_key(k);
            if pass.smallest.len() < SAMPLE_CONNS
                || pass.smallest.peek().is_some_and(|top| sk < *top)
            {
                pass.smallest.push(sk);
                if pass.smallest.len() > SAMPLE_CONNS {
                    pass.smallest.pop();
                }
            }
        }
        pass.at += walked;
        walked < budget
    }

    /// The status from a finished pass (see [`Router::status_slice`]) and
    /// the router's state at `now`: membership, counters and totals are
    /// read here, in O(services × replicas).
    pub fn status_of(&self, pass: StatusPass, now: Instant) -> Status {
        let now = now.max(self.last_now);
        let mut services: Vec<(Vec<ReplicaStatus>, usize)> = Vec::new();
        for (si, s) in self.config.services.iter().enumerate() {
            let counted = pass.services.get(si);
            let replicas: Vec<ReplicaStatus> = s
                .replicas
                .iter()
                .enumerate()
                .map(|(ri, &addr)| (ReplicaId(ri), addr))
                .map(|(r, addr)| {
                    let (connections, lag_out_bytes, lag_in_bytes) = counted
                        .and_then(|(_, rs)| rs.get(r.0).copied())
                        .unwrap_or((0, 0, 0));
                    ReplicaStatus {
                        addr,
                        alive: self.in_service(ServiceId(si), r),
                        awaiting_agent: self.up(ServiceId(si), r)
                            && !self.in_service(ServiceId(si), r),
                        state: self.health[si][r.0].state(),
                        since_ms: self.health[si][r.0].since().map(Instant::as_millis),
                        down: match self.health[si][r.0] {
                            Member::Down { reason, since } => Some(ReplicaDown {
                                reason,
                                since_ms: since.as_millis(),
                            }),
                            _ => None,
                        },
                        connections,
                        lag_out_bytes,
                        lag_in_bytes,
                        bytes_from: self
                            .replica_bytes
                            .get(si)
                            .and_then(|v| v.get(r.0))
                            .copied()
                            .unwrap_or(0),
                        heard_ms_ago: self
                            .heard
                            .get(si)
                            .and_then(|v| v.get(r.0))
                            .copied()
                            .flatten()
                            .map(|t| {
                                u64::try_from(now.saturating_sub(t).as_millis()).unwrap_or(u64::MAX)
                            }),
                    }
                })
                .collect();
            services.push((replicas, counted.map_or(0, |c| c.0)));
        }
        let services = services
            .into_iter()
            .enumerate()
            .filter_map(|(si, (replicas, n))| {
                let s = &self.config.services[si];
                let removed = self.retired.contains(&ServiceId(si));
                // A removed service with nothing left of it is not shown.
                let (client_bytes_in, client_bytes_out) =
                    self.service_bytes.get(si).copied().unwrap_or((0, 0));
                (!removed || n > 0).then(|| ServiceStatus {
                    name: s.name.clone(),
                    vip: s.vip,
                    ports: s.ports.clone(),
                    replicas,
                    connections: n,
                    client_bytes_in,
                    client_bytes_out,
                    removed,
                })
            })
            .collect();
        // The sample is looked up now: a connection of the pass that has
        // closed since is left out.
        let sample = pass
            .smallest
            .into_sorted_vec()
            .into_iter()
            .filter_map(|(client, cport, vip, vport)| {
                self.conns.get(&ConnKey {
                    client,
                    cport,
                    vip,
                    vport,
                })
            })
            .map(|c| c.sample())
            .collect();
        Status {
            sample,
            services,
            connections: self.conns.len(),
            half_open: self.half_open_count,
            rebuilding: pass.rebuilding,
            counters: self.counters.clone(),
            drops: self.counters.drop_table(),
        }
    }
}

/// A status pass over the connection table in progress: what the slices
/// walked so far add up to (see [`Router::status_slice`]).
#[derive(Debug, Default)]
pub struct StatusPass {
    /// Connections walked (the position in the table's iteration order).
    at: usize,
    /// Per service: connections, and per replica (connections, largest
    /// output lag, largest input lag).
    services: Vec<(usize, Vec<(usize, u64, u64)>)>,
    rebuilding: usize,
    open: usize,
    /// The sample's keys: the [`SAMPLE_CONNS`] smallest, in a bounded heap.
    smallest: BinaryHeap<(Ipv4Addr, u16, Ipv4Addr, u16)>,
}

impl StatusPass {
    /// Connections the pass walked that had not closed (those in their
    /// post-close quiet period left out); see [`Router::open_connections`]
    /// for an exact count.
    pub fn open(&self) -> usize {
        self.open
    }
}

fn wire_reason(e: ftnet_wire::Error) -> DropReason {
    match e {
        ftnet_wire::Error::Truncated => DropReason::Truncated,
        ftnet_wire::Error::Malformed => DropReason::Malformed,
        ftnet_wire::Error::NotIpv4 => DropReason::NotIpv4,
        ftnet_wire::Error::Fragment => DropReason::Fragment,
        ftnet_wire::Error::Checksum => DropReason::BadChecksum,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Service;
    use core::time::Duration;

    fn router(n: u8) -> Router {
        let mut c = Config::default();
        c.services.push(Service {
            name: "t".into(),
            vip: Ipv4Addr::new(10, 0, 0, 100),
            ports: vec![80],
            replicas: (1..=n).map(|i| Ipv4Addr::new(10, 0, 1, i)).collect(),
            voting: Default::default(),
            stateless: false,
            ack: crate::config::Ack::All,
            delivery: Default::default(),
        });
        Router::new(c, [7; 16])
    }

    fn down(r: &Router) -> Vec<Option<(EvictReason, u64)>> {
        r.status().services[0]
            .replicas
            .iter()
            .map(|x| x.down.as_ref().map(|d| (d.reason, d.since_ms)))
            .collect()
    }

    #[test]
    fn health_says_why_and_since_when() {
        let mut r = router(3);
        assert_eq!(down(&r), vec![None, None, None]);
        let t = Instant::ZERO + Duration::from_millis(1234);
        assert_eq!(r.replica_failed(t, Ipv4Addr::new(10, 0, 1, 2)), 1);
        assert_eq!(
            down(&r),
            vec![None, Some((EvictReason::OrderLost, 1234)), None]
        );
        assert!(!r.status().services[0].replicas[1].alive);
        // A second verdict does not move the first.
        let later = t + Duration::from_secs(1);
        r.down
            .push((ServiceId(0), ReplicaId(1), EvictReason::HostLost));
        r.apply_down(later);
        assert_eq!(down(&r)[1], Some((EvictReason::OrderLost, 1234)));
        // The last replica in service is never taken out.
        assert_eq!(r.host_lost(later, Ipv4Addr::new(10, 0, 1, 1)), 1);
        assert_eq!(r.replica_failed(later, Ipv4Addr::new(10, 0, 1, 3)), 0);
        r.host_lost(later, Ipv4Addr::new(10, 0, 1, 3));
        assert_eq!(down(&r)[2], None);
        assert_eq!(r.out_of_service().len(), 2);
        // The operator brings one back.
        assert_eq!(r.enable_replica(Ipv4Addr::new(10, 0, 1, 2), None), ["t"]);
        assert_eq!(down(&r)[1], None);
        assert!(r.status().services[0].replicas[1].alive);
    }
}
