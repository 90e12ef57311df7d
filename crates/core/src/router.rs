//! The router: classifies packets, owns the connection table, runs timers.

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
use siphasher::sip::SipHasher24;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::hash::Hasher;
use std::net::Ipv4Addr;

/// Connections shown in detail in the status.
const SAMPLE_CONNS: usize = 8;

/// How often a down replica of a stateless service is probed (and how long
/// after it went down the first probe goes).
pub const PROBE_EVERY: core::time::Duration = core::time::Duration::from_millis(500);

/// The source port range of the router's probes (from the VIP).
const PROBE_PORT_BASE: u16 = 61_000;

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
    /// With [`Router::require_agents`]: the replicas whose own agent has
    /// registered with this router. Only those get new connections.
    agents: Option<std::collections::HashSet<Ipv4Addr>>,
    /// (VIP, port) → service.
    by_vip: HashMap<(Ipv4Addr, u16), ServiceId>,
    /// (replica address, port) → (service, replica).
    by_replica: HashMap<(Ipv4Addr, u16), (ServiceId, ReplicaId)>,
    conns: HashMap<ConnKey, Conn>,
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
    /// The sequencer's numbering, per service.
    order: Vec<SvcOrder>,
    /// The latest `now` the router was given (for hold deadlines set
    /// while events leave).
    last_now: Instant,
    /// A rebuild in progress: when the first record came, connections
    /// adopted since, and adopted ones that left the table unrebuilt.
    rebuild: Option<(Instant, u64)>,
    rebuild_dropped: u64,
    /// Challenge ACKs sent this second (RFC 5961 §7).
    challenges: ChallengeBudget,
    /// Draining replicas already announced drained.
    drained: Vec<(ServiceId, ReplicaId)>,
    /// When the table was last scanned for drained replicas.
    drain_checked: Option<Instant>,
    /// Down replicas of stateless services: when each is probed next.
    probe_next: HashMap<(ServiceId, ReplicaId), Instant>,
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
            health,
            by_vip,
            by_replica,
            conns: HashMap::new(),
            timers: BinaryHeap::new(),
            half_open: VecDeque::new(),
            half_open_count: 0,
            closed: VecDeque::new(),
            down: Vec::new(),
            order: config
                .services
                .iter()
                .map(|_| SvcOrder::default())
                .collect(),
            last_now: Instant::ZERO,
            rebuild: None,
            rebuild_dropped: 0,
            agents: None,
            challenges: ChallengeBudget::default(),
            drained: Vec::new(),
            drain_checked: None,
            probe_next: HashMap::new(),
            config,
        }
    }

    /// Feed one packet read from the network.
    pub fn handle_packet(&mut self, now: Instant, pkt: Packet) {
        self.last_now = self.last_now.max(now);
        self.counters.packets_in += 1;
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
        if let Some(&(svc, replica)) = self.by_replica.get(&(src, seg.sport)) {
            if dst == self.config.services[svc.0].vip
                && self.probe_next.contains_key(&(svc, replica))
            {
                return self.probe_answer(now, svc, replica, &seg);
            }
        }
        if let Some(&svc) = self.by_vip.get(&(dst, seg.dport)) {
            return self.on_client(now, svc, pkt, &seg);
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
        let c = self.conns.get_mut(&key)?;
        let mut ctx = Ctx {
            now,
            tx: &mut self.transmit,
            counters: &mut self.counters,
            out: &mut self.out,
            timeouts: &self.config.timeouts,
            down: &mut self.down,
            sequencer: self.config.sequencer,
            challenges: &mut self.challenges,
        };
        Some(f(c, &mut ctx))
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
        self.on_conn(now, key, |c, ctx| c.client_segment(ctx, pkt, seg))
            .ok_or(DropReason::UnknownConnection)?;
        self.after(now, key);
        Ok(())
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
        let live: Vec<ReplicaId> = (0..self.health[svc.0].len())
            .map(ReplicaId)
            .filter(|&r| self.in_service(svc, r))
            .collect();
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
        let addrs = &self.config.services[svc.0].replicas;
        for r in live {
            c.add_leg(r, addrs[r.0], now);
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
            return Err(DropReason::UnknownConnection);
        };
        let Some(i) = c.leg_of(replica) else {
            return Err(DropReason::EvictedReplica);
        };
        self.on_conn(now, key, |c, ctx| c.replica_input(ctx, i, pkt, seg))
            .ok_or(DropReason::UnknownConnection)??;
        self.after(now, key);
        Ok(())
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

    /// Mark replicas down that an input proved dead, and take them out of
    /// every connection.
    fn apply_down(&mut self, now: Instant) {
        self.check_rebuilt(now);
        while let Some((svc, replica, reason)) = self.down.pop() {
            let Some(v) = self.health.get_mut(svc.0) else {
                continue;
            };
            // The last replica of a service in the group is never marked
            // down: there is nothing to fail over to, and a replica that was
            // only slow (or a path that was only cut for a while) must still
            // get new connections when it answers again.
            if !v.get(replica.0).is_some_and(Member::in_group)
                || v.iter().filter(|h| h.in_group()).count() <= 1
            {
                continue;
            }
            v[replica.0] = Member::Down { reason, since: now };
            if self.config.services[svc.0].stateless {
                self.probe_next.insert((svc, replica), now + PROBE_EVERY);
            }
            let s = &self.config.services[svc.0];
            self.out.event(Event::ReplicaDown {
                service: s.name.clone(),
                replica: s.replicas[replica.0],
                reason,
            });
            let keys: Vec<ConnKey> = self
                .conns
                .iter()
                .filter(|(_, c)| c.service() == svc)
                .map(|(k, _)| *k)
                .collect();
            for k in keys {
                self.on_conn(now, k, |c, ctx| {
                    c.evict_replica(ctx, replica, EvictReason::ReplicaDown)
                });
                self.after(now, k);
            }
            self.announce_out_of_service();
        }
    }

    /// Gets new connections (the agent's registration aside).
    fn up(&self, svc: ServiceId, replica: ReplicaId) -> bool {
        self.member(svc, replica).is_some_and(|m| m.serves_new())
    }

    /// Still in its connections and the input order (serving or draining).
    fn in_group(&self, svc: ServiceId, replica: ReplicaId) -> bool {
        self.member(svc, replica).is_some_and(|m| m.in_group())
    }

    fn member(&self, svc: ServiceId, replica: ReplicaId) -> Option<Member> {
        self.health
            .get(svc.0)
            .and_then(|v| v.get(replica.0))
            .copied()
    }

    /// Serves new connections: up, and (with `require_agents`) its
    /// agent registered with this router.
    fn in_service(&self, svc: ServiceId, replica: ReplicaId) -> bool {
        self.up(svc, replica)
            && self
                .agents
                .as_ref()
                .is_none_or(|a| a.contains(&self.config.services[svc.0].replicas[replica.0]))
    }

    /// Every replica out of service, every service.
    pub fn out_of_service(&self) -> Vec<OutOfService> {
        let mut v = Vec::new();
        for (svc, s) in self.config.services.iter().enumerate() {
            for (i, &replica) in s.replicas.iter().enumerate() {
                if !self.up(ServiceId(svc), ReplicaId(i)) {
                    v.push(OutOfService {
                        vip: s.vip,
                        port: s.ports.first().copied().unwrap_or(0),
                        replica,
                    });
                }
            }
        }
        v
    }

    fn announce_out_of_service(&mut self) {
        let down = self.out_of_service();
        self.out.agent(AgentMsg::OutOfService { down });
    }

    /// Bookkeeping after a connection handled an input: forget it if dead,
    /// leave the half-open count, schedule its next timer.
    fn after(&mut self, now: Instant, key: ConnKey) {
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
            let gone = c.removed(&mut self.out);
            if gone.rebuilding {
                self.rebuild_dropped += 1;
            }
            if gone.half_open {
                self.half_open_count = self.half_open_count.saturating_sub(1);
            }
        }
    }

    /// A replica's host is gone (its agent stopped heartbeating): mark it
    /// down in every service that lists it and take it out of every
    /// connection, even idle ones that passive detection cannot judge.
    /// Returns how many services it was marked down in.
    ///
    /// A router that has not served a connection yet (a standby whose
    /// agents moved to the router that holds the addresses, or one just
    /// started) judges nobody: the replica only stops being registered
    /// here, and gets no connection until its agent registers again. What
    /// happened to it meanwhile is the serving router's to judge, and that
    /// router's verdicts reach this one through the agents
    /// ([`Router::reported_down`]).
    pub fn host_lost(&mut self, now: Instant, addr: Ipv4Addr) -> usize {
        if let Some(a) = &mut self.agents {
            if self.counters.connections_opened + self.counters.connections_adopted == 0 {
                a.remove(&addr);
                return 0;
            }
        }
        let mut n = 0;
        for (svc, s) in self.config.services.iter().enumerate() {
            for (i, r) in s.replicas.iter().enumerate() {
                let (svc, i) = (ServiceId(svc), ReplicaId(i));
                if *r == addr && self.in_group(svc, i) {
                    self.down.push((svc, i, EvictReason::HostLost));
                    n += 1;
                }
            }
        }
        self.apply_down(now);
        n
    }

    /// A replica's server can no longer follow the sequencer's input order
    /// (its agent reported it, or the router could not deliver the order to
    /// its agent): mark it down in every service that lists it and take it
    /// out of every connection at once, like [`Router::host_lost`] (never a
    /// connection's or a service's last live replica). It does not come
    /// back when its agent registers again. Returns how many services it
    /// was marked down in.
    pub fn replica_failed(&mut self, now: Instant, addr: Ipv4Addr) -> usize {
        let mut n = 0;
        for (svc, s) in self.config.services.iter().enumerate() {
            for (i, r) in s.replicas.iter().enumerate() {
                let health = self.health.get(svc).map_or(&[][..], |v| &v[..]);
                // Counted only where it is really taken out (not the last).
                if *r == addr
                    && health.get(i).is_some_and(Member::in_group)
                    && health.iter().filter(|h| h.in_group()).count() > 1
                {
                    self.down
                        .push((ServiceId(svc), ReplicaId(i), EvictReason::OrderLost));
                    n += 1;
                }
            }
        }
        self.apply_down(now);
        n
    }

    /// With agents (`[control]`): a replica gets new connections only once
    /// its own agent registered with this router ([`Router::agent_registered`]).
    /// A router that starts or takes over cannot tell a current replica from
    /// one that left the group under its predecessor until the agents told
    /// it ([`Router::reported_down`]); an agent registers within
    /// milliseconds, and a client's SYN that finds no replica in service
    /// meanwhile is dropped (it retransmits) rather than refused.
    pub fn require_agents(&mut self) {
        self.agents.get_or_insert_with(Default::default);
    }

    /// A replica's agent registered (again). A replica that left the group
    /// — its host was lost, it crashed, reset, stalled or diverged — stays
    /// out of service: its server missed input while it was out, so its
    /// state is not the group's (a cut link that comes back brings back a
    /// stale server). Only [`Router::enable_replica`] brings it back.
    /// Returns the names of the services in which it stays out.
    pub fn agent_registered(&mut self, addr: Ipv4Addr) -> Vec<String> {
        if let Some(a) = &mut self.agents {
            a.insert(addr);
        }
        let mut out = Vec::new();
        for (svc, s) in self.config.services.iter().enumerate() {
            for (i, r) in s.replicas.iter().enumerate() {
                if *r == addr && !self.in_group(ServiceId(svc), ReplicaId(i)) {
                    out.push(s.name.clone());
                }
            }
        }
        out
    }

    /// An agent (`reporter`) reports replicas out of service, as the
    /// router before this one told it: they stay out here too (a router
    /// that starts or takes over must not readmit them). Returns how many
    /// were taken out.
    pub fn reported_down(
        &mut self,
        now: Instant,
        reporter: Ipv4Addr,
        down: &[OutOfService],
    ) -> usize {
        let _ = reporter;
        let mut n = 0;
        for d in down {
            let Some(&svc) = self.by_vip.get(&(d.vip, d.port)) else {
                continue;
            };
            let s = &self.config.services[svc.0];
            let Some(i) = s.replicas.iter().position(|r| *r == d.replica) else {
                continue;
            };
            let i = ReplicaId(i);
            if self.in_group(svc, i) && !self.down.contains(&(svc, i, EvictReason::ReportedDown)) {
                self.down.push((svc, i, EvictReason::ReportedDown));
                n += 1;
            }
        }
        self.apply_down(now);
        n
    }

    /// Operator action: bring replica `addr` back into service (every
    /// service that lists it, or only `service`): one that is down, or
    /// draining. Its server must hold the group's state again (restored by
    /// the operator): nothing here can check that. Connections it left stay
    /// without it; new ones use it. A removed replica comes back with
    /// [`Router::add_replica`] instead. Returns the services it came back in.
    pub fn enable_replica(&mut self, addr: Ipv4Addr, service: Option<&str>) -> Vec<String> {
        let mut back = Vec::new();
        for (svc, s) in self.config.services.iter().enumerate() {
            if service.is_some_and(|n| n != s.name) {
                continue;
            }
            for (i, r) in s.replicas.iter().enumerate() {
                let m = self.health[svc][i];
                if *r == addr && matches!(m, Member::Down { .. } | Member::Draining { .. }) {
                    self.health[svc][i] = Member::Serving;
                    self.probe_next.remove(&(ServiceId(svc), ReplicaId(i)));
                    back.push(s.name.clone());
                    self.out.event(Event::ReplicaUp {
                        service: s.name.clone(),
                        replica: addr,
                    });
                }
            }
        }
        if !back.is_empty() {
            self.announce_out_of_service();
        }
        back
    }

    /// The service named `name`, and replica `addr`'s slot in it.
    fn find_member(
        &self,
        name: &str,
        addr: Ipv4Addr,
    ) -> Result<(ServiceId, Option<ReplicaId>), MembershipError> {
        let svc = self
            .config
            .services
            .iter()
            .position(|s| s.name == name)
            .ok_or_else(|| MembershipError::NoService(name.to_string()))?;
        let slot = self.config.services[svc]
            .replicas
            .iter()
            .position(|r| *r == addr)
            .map(ReplicaId);
        Ok((ServiceId(svc), slot))
    }

    /// Operator action (COSCANet-FT §V: replicas "added and removed at any
    /// time"): replica `addr` becomes a member of service `name` and gets
    /// new connections (with agents, once its agent registered); the
    /// connections open now go on without it. Its server must hold the
    /// group's state (a stateless server, or state restored by the
    /// operator): nothing here can check that. A removed replica's slot is
    /// used again. Not written to the configuration file.
    pub fn add_replica(
        &mut self,
        now: Instant,
        name: &str,
        addr: Ipv4Addr,
    ) -> Result<(), MembershipError> {
        self.last_now = self.last_now.max(now);
        let (svc, slot) = self.add_slot(name, addr)?;
        let r = match slot {
            Some(r) => r,
            None => {
                let s = &mut self.config.services[svc.0];
                s.replicas.push(addr);
                self.health[svc.0].push(Member::Serving);
                ReplicaId(s.replicas.len() - 1)
            }
        };
        self.health[svc.0][r.0] = Member::Serving;
        for p in self.config.services[svc.0].ports.clone() {
            self.by_replica.insert((addr, p), (svc, r));
        }
        self.out.event(Event::ReplicaAdded {
            service: name.to_string(),
            replica: addr,
        });
        self.announce_out_of_service();
        Ok(())
    }

    /// Whether [`Router::add_replica`] would take `addr` into service
    /// `name`, changing nothing (a driver checks before it routes the
    /// replica's replies to the router).
    pub fn check_add(&self, name: &str, addr: Ipv4Addr) -> Result<(), MembershipError> {
        self.add_slot(name, addr).map(|_| ())
    }

    /// The service and the replica's slot, if it has one (a removed
    /// replica), for [`Router::add_replica`].
    fn add_slot(
        &self,
        name: &str,
        addr: Ipv4Addr,
    ) -> Result<(ServiceId, Option<ReplicaId>), MembershipError> {
        let (svc, slot) = self.find_member(name, addr)?;
        let s = &self.config.services[svc.0];
        if let Some(r) = slot {
            let m = self.health[svc.0][r.0];
            if !matches!(m, Member::Removed { .. }) {
                return Err(MembershipError::AlreadyMember {
                    service: s.name.clone(),
                    replica: addr.to_string(),
                    state: m.state(),
                });
            }
        }
        for &p in &s.ports {
            if let Some(&(other, r)) = self.by_replica.get(&(addr, p)) {
                let o = &self.config.services[other.0];
                if other != svc && !matches!(self.health[other.0][r.0], Member::Removed { .. }) {
                    return Err(MembershipError::PortTaken {
                        replica: addr.to_string(),
                        port: p,
                        other: o.name.clone(),
                    });
                }
            }
        }
        Ok((svc, slot))
    }

    /// Operator action: replica `addr` of service `name` gets no new
    /// connections; the connections it is in finish with it
    /// ([`Event::ReplicaDrained`] once the last one left the table).
    /// Returns how many connections it is still in.
    pub fn drain_replica(
        &mut self,
        now: Instant,
        name: &str,
        addr: Ipv4Addr,
    ) -> Result<usize, MembershipError> {
        self.last_now = self.last_now.max(now);
        let (svc, r) = self.serving_member(name, addr)?;
        self.health[svc.0][r.0] = Member::Draining { since: now };
        self.drained.retain(|x| *x != (svc, r));
        let connections = self.connections_of(svc, r);
        self.out.event(Event::ReplicaDraining {
            service: name.to_string(),
            replica: addr,
            connections,
        });
        self.announce_out_of_service();
        self.check_drained(now);
        Ok(connections)
    }

    /// Operator action: replica `addr` leaves service `name` now: it is
    /// taken out of every connection like an eviction (never a
    /// connection's last replica: there it stays until the connection
    /// ends) and gets no new ones. Returns (connections left, connections
    /// where it stays as the last replica).
    pub fn remove_replica(
        &mut self,
        now: Instant,
        name: &str,
        addr: Ipv4Addr,
    ) -> Result<(usize, usize), MembershipError> {
        self.last_now = self.last_now.max(now);
        let (svc, slot) = self.find_member(name, addr)?;
        let not_member = || MembershipError::NotAMember {
            service: name.to_string(),
            replica: addr.to_string(),
        };
        let r = slot.ok_or_else(not_member)?;
        let m = self.health[svc.0][r.0];
        if matches!(m, Member::Removed { .. }) {
            return Err(not_member());
        }
        let others = self.health[svc.0]
            .iter()
            .enumerate()
            .filter(|(i, h)| *i != r.0 && h.serves_new())
            .count();
        if m.in_group() && others == 0 {
            return Err(MembershipError::LastServing {
                service: name.to_string(),
                replica: addr.to_string(),
            });
        }
        self.health[svc.0][r.0] = Member::Removed { since: now };
        self.probe_next.remove(&(svc, r));
        let before = self.connections_of(svc, r);
        let keys: Vec<ConnKey> = self
            .conns
            .iter()
            .filter(|(_, c)| c.service() == svc)
            .map(|(k, _)| *k)
            .collect();
        for k in keys {
            self.on_conn(now, k, |c, ctx| {
                c.evict_replica(ctx, r, EvictReason::Removed);
            });
            self.after(now, k);
        }
        let kept = self.connections_of(svc, r);
        self.out.event(Event::ReplicaRemoved {
            service: name.to_string(),
            replica: addr,
            left: before - kept,
            kept,
        });
        self.announce_out_of_service();
        Ok((before - kept, kept))
    }

    /// A serving replica of service `name` (drain applies to no other).
    fn serving_member(
        &self,
        name: &str,
        addr: Ipv4Addr,
    ) -> Result<(ServiceId, ReplicaId), MembershipError> {
        let (svc, slot) = self.find_member(name, addr)?;
        let r = slot.ok_or_else(|| MembershipError::NotAMember {
            service: name.to_string(),
            replica: addr.to_string(),
        })?;
        match self.health[svc.0][r.0] {
            Member::Serving => {}
            Member::Removed { .. } => {
                return Err(MembershipError::Removed {
                    service: name.to_string(),
                    replica: addr.to_string(),
                })
            }
            m => {
                return Err(MembershipError::AlreadyMember {
                    service: name.to_string(),
                    replica: addr.to_string(),
                    state: m.state(),
                })
            }
        }
        let others = self.health[svc.0]
            .iter()
            .enumerate()
            .filter(|(i, h)| *i != r.0 && h.serves_new())
            .count();
        if others == 0 {
            return Err(MembershipError::LastServing {
                service: name.to_string(),
                replica: addr.to_string(),
            });
        }
        Ok((svc, r))
    }

    /// Open connections replica `r` of `svc` is still a live part of (a
    /// closed one in its quiet period has finished).
    fn connections_of(&self, svc: ServiceId, r: ReplicaId) -> usize {
        self.conns
            .values()
            .filter(|c| c.service() == svc && !c.is_closed() && c.has_live(r))
            .count()
    }

    /// When the table is next scanned for drained replicas: while one
    /// drains that was not announced drained.
    fn drain_due(&self) -> Option<Instant> {
        let waiting = self.health.iter().enumerate().any(|(svc, v)| {
            v.iter().enumerate().any(|(i, m)| {
                matches!(m, Member::Draining { .. })
                    && !self.drained.contains(&(ServiceId(svc), ReplicaId(i)))
            })
        });
        waiting.then(|| {
            self.drain_checked
                .map_or(self.last_now, |t| t + DRAIN_CHECK)
        })
    }

    /// Draining replicas whose last connection left: say so once (they
    /// stay draining until an operator removes or enables them).
    fn check_drained(&mut self, now: Instant) {
        if !self
            .health
            .iter()
            .flatten()
            .any(|m| matches!(m, Member::Draining { .. }))
        {
            return;
        }
        // A scan of the table: at most every DRAIN_CHECK while draining.
        if self.drain_checked.is_some_and(|t| now < t + DRAIN_CHECK) {
            return;
        }
        self.drain_checked = Some(now);
        for svc in 0..self.health.len() {
            for i in 0..self.health[svc].len() {
                let (sid, r) = (ServiceId(svc), ReplicaId(i));
                if matches!(self.health[svc][i], Member::Draining { .. })
                    && !self.drained.contains(&(sid, r))
                    && self.connections_of(sid, r) == 0
                {
                    self.drained.push((sid, r));
                    let s = &self.config.services[svc];
                    self.out.event(Event::ReplicaDrained {
                        service: s.name.clone(),
                        replica: s.replicas[i],
                    });
                }
            }
        }
        let health = &self.health;
        self.drained
            .retain(|(s, r)| matches!(health[s.0][r.0], Member::Draining { .. }));
    }

    /// Rebuild a connection another router set up (COSCANet-FT §III-C:
    /// "a new router instance can collect information about the current
    /// state during initialisation"): one replica's agent's record of it.
    /// A connection this router does not know enters the table; each
    /// replica's record adds its leg, which is probed at once for its
    /// position. Records of connections this router already serves change
    /// nothing (an agent that reconnected). `from`: the replica whose agent
    /// sent the record (its part of the record is the one used).
    pub fn adopt(&mut self, now: Instant, from: Ipv4Addr, rec: &ConnRecord) -> Adopted {
        let Some(&svc) = self.by_vip.get(&(rec.key.vip, rec.key.vport)) else {
            return Adopted::Refused;
        };
        // An agent speaks for its own replica alone, and only of a
        // connection that replica was part of.
        let Some(&mine) = rec.replica(from) else {
            return Adopted::Refused;
        };
        let Some(&(rsvc, replica)) = self.by_replica.get(&(from, rec.key.vport)) else {
            return Adopted::Refused;
        };
        if rsvc != svc || !self.in_group(svc, replica) {
            return Adopted::Refused;
        }
        let key = rec.key;
        let fresh = match self.conns.get(&key) {
            Some(c) if c.takes_record(rec) => false,
            Some(_) => return Adopted::Known,
            None => {
                if self.conns.len() >= self.config.limits.max_connections {
                    return Adopted::Refused;
                }
                self.conns
                    .insert(key, Conn::adopted(key, svc, now, from, rec));
                true
            }
        };
        let Some(added) = self.on_conn(now, key, |c, ctx| {
            c.adopt_order(rec.accepted, rec.input_end);
            c.adopt_leg(ctx, replica, &mine)
        }) else {
            return Adopted::Refused;
        };
        self.after(now, key);
        match (fresh, added) {
            (true, _) => {
                self.counters.connections_adopted += 1;
                let start = self.rebuild.map_or(now, |(t, _)| t);
                let n = self.rebuild.map_or(0, |(_, n)| n);
                self.rebuild = Some((start, n + 1));
                Adopted::New
            }
            (false, true) => Adopted::Leg,
            (false, false) => Adopted::Known,
        }
    }

    /// The control plane stored the record of `key` (announced with
    /// `AgentMsg::Established`) at every live replica's agent: its SYN-ACK,
    /// held for that (`Timeouts::record_commit`), goes to the client.
    /// Anything else (unknown, already sent) is ignored.
    pub fn record_stored(&mut self, now: Instant, key: ConnKey) {
        if !self.conns.get(&key).is_some_and(|c| c.is_committing()) {
            return;
        }
        self.on_conn(now, key, |c, ctx| c.commit_synack(ctx, true));
        self.after(now, key);
    }

    /// Run timers due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.last_now = self.last_now.max(now);
        self.send_probes(now);
        if self.drain_due().is_some_and(|t| t <= now) {
            self.check_drained(now);
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

    /// Every connection adopted since the rebuild began is whole again (or
    /// gone): say so once, with how long it took.
    fn check_rebuilt(&mut self, now: Instant) {
        let Some((start, n)) = self.rebuild else {
            return;
        };
        if self.counters.connections_rebuilt + self.rebuild_dropped
            >= self.counters.connections_adopted
        {
            self.rebuild = None;
            self.out.event(Event::TableRebuilt {
                connections: n,
                after_ms: u64::try_from(now.saturating_sub(start).as_millis()).unwrap_or(u64::MAX),
            });
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

    /// The probe of replica `r` of `svc`: from the VIP, a port of the
    /// probe range, to the service's first port, with an ISN only the
    /// router can know (RFC 6528's keyed hash), so that an answer cannot be
    /// forged blind.
    fn probe_key(&self, svc: ServiceId, r: ReplicaId) -> (ConnKey, SeqNum) {
        let s = &self.config.services[svc.0];
        let port = PROBE_PORT_BASE
            .wrapping_add(u16::try_from(r.0 % 1000).unwrap_or(0))
            .wrapping_add(u16::try_from((svc.0 % 4) * 1000).unwrap_or(0));
        let key = ConnKey {
            client: s.vip,
            cport: port,
            vip: s.replicas[r.0],
            vport: s.ports.first().copied().unwrap_or(0),
        };
        let isn = SeqNum(mod32(self.keyed(&key, 7)));
        (key, isn)
    }

    /// Probe the down replicas of stateless services that are due: a SYN
    /// each (answered by a SYN-ACK once its server listens again).
    fn send_probes(&mut self, now: Instant) {
        let due: Vec<(ServiceId, ReplicaId)> = self
            .probe_next
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(k, _)| *k)
            .collect();
        for (svc, r) in due {
            self.probe_next.insert((svc, r), now + PROBE_EVERY);
            let (key, isn) = self.probe_key(svc, r);
            let mut syn = Repr::new(key.cport, key.vport, isn, SeqNum(0), flags::SYN, 1024);
            syn.mss = Some(536);
            self.transmit
                .push_back(Packet::plain(syn.emit_ipv4(key.client, key.vip, &[])));
            self.counters.packets_out += 1;
            self.counters.probes_sent += 1;
        }
    }

    /// A replica answers the router's probe. A SYN-ACK for the probe's ISN:
    /// its server listens again, and a stateless service takes it back
    /// (the half-open probe is reset). A RST: still nobody listening.
    /// Anything else is dropped as not ours.
    fn probe_answer(
        &mut self,
        now: Instant,
        svc: ServiceId,
        r: ReplicaId,
        seg: &Seg,
    ) -> Result<(), DropReason> {
        let (key, isn) = self.probe_key(svc, r);
        if seg.dport != key.cport {
            return Err(DropReason::NotOurs);
        }
        if seg.has(flags::RST) {
            return Ok(());
        }
        // RFC 9293 §3.10.7.3: an acceptable SYN-ACK acknowledges our SYN
        // exactly; any other is not an answer to this probe.
        if !(seg.has(flags::SYN) && seg.has(flags::ACK)) || seg.ack != isn.add(1) {
            return Err(DropReason::BadState);
        }
        let rst = Repr::new(key.cport, key.vport, isn.add(1), SeqNum(0), flags::RST, 0);
        self.transmit
            .push_back(Packet::plain(rst.emit_ipv4(key.client, key.vip, &[])));
        self.counters.packets_out += 1;
        self.probe_next.remove(&(svc, r));
        let Member::Down { reason, since } = self.health[svc.0][r.0] else {
            return Ok(());
        };
        self.health[svc.0][r.0] = Member::Serving;
        let s = &self.config.services[svc.0];
        self.out.event(Event::ReplicaRejoined {
            service: s.name.clone(),
            replica: s.replicas[r.0],
            was: reason,
            down_ms: now
                .saturating_sub(since)
                .as_millis()
                .try_into()
                .unwrap_or(u64::MAX),
        });
        self.announce_out_of_service();
        Ok(())
    }

    /// Next packet to write to the network.
    pub fn poll_transmit(&mut self) -> Option<Packet> {
        self.transmit.pop_front()
    }

    /// When [`Router::handle_timeout`] next needs to run.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let order = self
            .order
            .iter()
            .filter_map(|o| o.waiting.as_ref().and_then(|w| w.deadline))
            .min();
        let conns = self.timers.peek().map(|Reverse((t, _))| *t);
        let probe = self.probe_next.values().min().copied();
        [order, conns, self.drain_due(), probe]
            .into_iter()
            .flatten()
            .min()
    }

    /// Next event for the operator's log.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.out.events.pop_front()
    }

    /// Next message for the agents (records, the sequencer's order, who is
    /// out of service), in the order produced.
    pub fn poll_agent_msg(&mut self) -> Option<AgentMsg> {
        loop {
            // Inputs are numbered as they leave, per service, so the numbers
            // follow the order the core produced them in and have no gaps.
            // (Replays come numbered.)
            let input = match self.out.agents.pop_front()? {
                ToAgents::Msg(m) => return Some(m),
                ToAgents::Input(input) => input,
            };
            let svc = self.by_vip.get(&(input.key.vip, input.key.vport)).copied();
            let Some(svc) = svc else {
                // Never: a connection belongs to a service. Left unnumbered.
                return Some(input.numbered(0));
            };
            let o = &mut self.order[svc.0];
            if let Some(w) = &mut o.waiting {
                // Not numbered before the agents said where the order stands.
                w.deadline.get_or_insert(self.last_now + ORDER_WAIT);
                o.held.push_back(input);
                if o.held.len() >= ORDER_HOLD_MAX {
                    self.resume_order(svc);
                }
                continue;
            }
            return Some(o.number(input));
        }
    }

    /// After a start or a takeover: hold every service's input numbering
    /// until its replicas' agents reported where the order stands
    /// ([`Router::order_report`]), or [`ORDER_WAIT`] after the first report
    /// or the first event held. Only with `Config::sequencer`.
    pub fn await_order(&mut self) {
        if !self.config.sequencer {
            return;
        }
        for o in &mut self.order {
            if o.waiting.is_none() {
                o.waiting = Some(Waiting::default());
            }
        }
    }

    /// Replica `replica`'s agent reports where the order stands (one
    /// report per service port it saw events of; services it reports
    /// nothing of count as "never got an event"). The order resumes once
    /// every live replica of a service reported. A report after that
    /// brings that agent up to date from the router's log.
    pub fn order_report(&mut self, now: Instant, replica: Ipv4Addr, reports: &[OrderReport]) {
        self.last_now = self.last_now.max(now);
        for svc in 0..self.order.len() {
            let s = &self.config.services[svc];
            let Some(ri) = s.replicas.iter().position(|r| *r == replica) else {
                continue;
            };
            let mut mine = OrderReport {
                vip: s.vip,
                vport: 0,
                last_seq: 0,
                tail: Vec::new(),
            };
            for r in reports
                .iter()
                .filter(|r| r.vip == s.vip && s.ports.contains(&r.vport))
            {
                mine.last_seq = mine.last_seq.max(r.last_seq);
                mine.tail.extend_from_slice(&r.tail);
            }
            let o = &mut self.order[svc];
            if o.waiting.is_some() {
                o.report(replica, &mine);
                if let Some(w) = &mut o.waiting {
                    w.deadline.get_or_insert(now + ORDER_WAIT);
                }
                let health = &self.health[svc];
                let all = o.waiting.as_ref().is_some_and(|w| {
                    s.replicas
                        .iter()
                        .enumerate()
                        .all(|(i, r)| !health[i].in_group() || w.reported.contains_key(r))
                });
                if all {
                    self.resume_order(ServiceId(svc));
                }
                continue;
            }
            // Late: bring it up to date from the log.
            o.report(replica, &mine);
            let (last, top) = (mine.last_seq, o.seq);
            if last == 0 || last >= top || !self.health[svc][ri].in_group() {
                continue;
            }
            let (replays, lost) = match o.replay(replica, last.saturating_add(1), top) {
                Ok(v) => (v, Vec::new()),
                Err(n) => (Vec::new(), vec![(replica, n)]),
            };
            let replayed = replays.len();
            let service = s.name.clone();
            self.order_lost(ServiceId(svc), &lost);
            // Ahead of the events queued unnumbered (they come after `top`).
            for ev in replays.into_iter().rev() {
                self.out.agents.push_front(ToAgents::Msg(ev));
            }
            self.out.event(Event::OrderResumed {
                service,
                last: top,
                reported: vec![replica],
                missing: Vec::new(),
                replayed,
                lost,
            });
        }
        self.apply_down(now);
    }

    /// Number on: replays for the agents that are behind first, then the
    /// held events, ahead of everything else queued.
    fn resume_order(&mut self, svc: ServiceId) {
        let s = &self.config.services[svc.0];
        let o = &mut self.order[svc.0];
        let reported = o.reported();
        let r = o.resume();
        let mut front: Vec<AgentMsg> = r.replays;
        let held: Vec<Unnumbered> = o.held.drain(..).collect();
        for input in held {
            front.push(o.number(input));
        }
        for ev in front.into_iter().rev() {
            self.out.agents.push_front(ToAgents::Msg(ev));
        }
        let missing = s
            .replicas
            .iter()
            .enumerate()
            .filter(|(i, a)| self.health[svc.0][*i].in_group() && !reported.contains(a))
            .map(|(_, a)| *a)
            .collect();
        let last = o.seq;
        let name = s.name.clone();
        self.order_lost(svc, &r.lost);
        self.out.event(Event::OrderResumed {
            service: name,
            last,
            reported,
            missing,
            replayed: r.replayed,
            lost: r.lost,
        });
    }

    /// Replicas that missed input events nobody can replay to them: their
    /// shims cannot keep the order, so they leave the group (fail safe:
    /// never serve on in the kernel's order). Applied with the next input
    /// or timer, like every other way out.
    fn order_lost(&mut self, svc: ServiceId, lost: &[(Ipv4Addr, u64)]) {
        for (addr, _) in lost {
            if let Some(i) = self.config.services[svc.0]
                .replicas
                .iter()
                .position(|r| r == addr)
            {
                self.down.push((svc, ReplicaId(i), EvictReason::OrderLost));
            }
        }
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

    /// A snapshot of services, replicas, connections and counters.
    pub fn status(&self) -> Status {
        let mut services = Vec::new();
        for (si, s) in self.config.services.iter().enumerate() {
            let mut replicas: Vec<ReplicaStatus> = s
                .replicas
                .iter()
                .enumerate()
                .map(|(ri, &addr)| (ReplicaId(ri), addr))
                .map(|(r, addr)| ReplicaStatus {
                    addr,
                    alive: self.in_service(ServiceId(si), r),
                    awaiting_agent: self.up(ServiceId(si), r) && !self.in_service(ServiceId(si), r),
                    state: self.health[si][r.0].state(),
                    since_ms: self.health[si][r.0].since().map(Instant::as_millis),
                    down: match self.health[si][r.0] {
                        Member::Down { reason, since } => Some(ReplicaDown {
                            reason,
                            since_ms: since.as_millis(),
                        }),
                        _ => None,
                    },
                    connections: 0,
                    lag_out_bytes: 0,
                    lag_in_bytes: 0,
                })
                .collect();
            let mut n = 0;
            for c in self.conns.values().filter(|c| c.service() == ServiceId(si)) {
                n += 1;
                for (replica, o, inn) in c.lags() {
                    let r = &mut replicas[replica.0];
                    r.connections += 1;
                    r.lag_out_bytes = r.lag_out_bytes.max(o);
                    r.lag_in_bytes = r.lag_in_bytes.max(inn);
                }
            }
            services.push(ServiceStatus {
                name: s.name.clone(),
                vip: s.vip,
                ports: s.ports.clone(),
                replicas,
                connections: n,
            });
        }
        let mut keys: Vec<&ConnKey> = self.conns.keys().collect();
        keys.sort_unstable_by_key(|k| (k.client, k.cport, k.vip, k.vport));
        let sample = keys
            .into_iter()
            .take(SAMPLE_CONNS)
            .filter_map(|k| self.conns.get(k))
            .map(|c| c.sample())
            .collect();
        Status {
            sample,
            services,
            connections: self.conns.len(),
            half_open: self.half_open_count,
            rebuilding: self.conns.values().filter(|c| c.is_rebuilding()).count(),
            counters: self.counters.clone(),
            drops: self.counters.drop_table(),
        }
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
