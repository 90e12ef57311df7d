//! One replicated connection: the per-connection state machine of
//! COSCANet-FT §III-C (inbound multicast), §III-D (outbound aggregation,
//! timestamps, windows, failure evidence) and §III-E (establishment).
//!
//! Sequence spaces. The client's stream has one sequence space, shared by
//! the client and every replica (the client's SYN reaches every replica
//! unchanged). The server's stream has one space per replica (each picks its
//! own ISN) and a client-visible space that starts at the router's ISN; a
//! leg's `off` maps replica space onto client space. Unless a name says
//! otherwise, every `SeqNum` kept here is in client-visible space.

use crate::config::{Tie, Timeouts, Voting};
use crate::event::{Event, EvictReason, InputKind};
use crate::key::ConnKey;
use crate::metrics::{Counters, DropReason};
use crate::packet::Packet;
use crate::record::{AdoptRecord, ReplicaSetup, SetupRecord};
use crate::status::{ConnSample, LegSample};
use crate::time::Instant;
use crate::vote::{self, Offer, Outcome};
use ftnet_wire::tcp::{self, flags, CsumMode, Repr};
use ftnet_wire::vnet::VnetHdr;
use ftnet_wire::{ipv4, SeqDelta, SeqNum};
use std::collections::VecDeque;
use std::net::Ipv4Addr;

/// What the router learnt of a TCP segment when it classified it. Only
/// built from a packet that passed `new_checked` on both headers.
#[derive(Debug, Clone, Copy)]
pub struct Seg {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub sport: u16,
    pub dport: u16,
    pub seq: SeqNum,
    pub ack: SeqNum,
    pub flags: u8,
    pub window: u16,
    pub payload_len: u32,
    pub mss: Option<u16>,
    pub wscale: Option<u8>,
    pub ts: Option<(u32, u32)>,
    pub mode: CsumMode,
}

impl Seg {
    pub fn has(&self, f: u8) -> bool {
        self.flags & f != 0
    }
}

/// Everything a connection may touch outside itself while it handles one
/// input.
pub struct Ctx<'a> {
    pub now: Instant,
    pub tx: &'a mut VecDeque<Packet>,
    pub counters: &'a mut Counters,
    pub events: &'a mut VecDeque<Event>,
    pub timeouts: &'a Timeouts,
    /// (service, replica) pairs that this input proved dead for the whole
    /// service; the router marks them down after the call.
    pub down: &'a mut Vec<(usize, usize, EvictReason)>,
    /// Emit `Event::Input` for the sequencer.
    pub sequencer: bool,
    /// The router-wide challenge-ACK budget (RFC 5961 §7).
    pub challenges: &'a mut ChallengeBudget,
}

/// At most one challenge ACK per this long per connection and direction
/// (RFC 5961 §7: "an implementation SHOULD include an ACK throttling
/// mechanism").
pub const CHALLENGE_GAP: core::time::Duration = core::time::Duration::from_millis(50);
/// At most this many challenge ACKs per second for the whole router (RFC
/// 5961 §7 suggests a system-wide limit; Linux's default is 1000/s).
pub const CHALLENGE_PER_SEC: u32 = 1000;

/// The router-wide challenge-ACK budget: a count per one-second window.
#[derive(Debug, Default)]
pub struct ChallengeBudget {
    window: Instant,
    sent: u32,
}

impl ChallengeBudget {
    /// Take one challenge ACK from the budget of the second `now` is in.
    fn take(&mut self, now: Instant) -> bool {
        if now.saturating_sub(self.window) >= core::time::Duration::from_secs(1) {
            self.window = now;
            self.sent = 0;
        }
        if self.sent >= CHALLENGE_PER_SEC {
            return false;
        }
        self.sent += 1;
        true
    }
}

/// Whether a challenge ACK may go now, given when the last one of this
/// connection and direction went (`last`, updated): RFC 5961 §7, per
/// connection and router-wide.
fn may_challenge(ctx: &mut Ctx, last: &mut Option<Instant>) -> bool {
    if last.is_some_and(|t| ctx.now.saturating_sub(t) < CHALLENGE_GAP)
        || !ctx.challenges.take(ctx.now)
    {
        ctx.counters.challenge_acks_limited += 1;
        return false;
    }
    *last = Some(ctx.now);
    ctx.counters.challenge_acks += 1;
    true
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LegState {
    /// The client's SYN went to the replica; no SYN-ACK yet.
    SynSent,
    /// The replica answered; its sequence space is known.
    Open,
    /// The replica refused the SYN with a RST. Whether that is a crash
    /// (others accept) or the service's answer (all refuse) is decided once
    /// every replica answered.
    Refused,
    /// The replica reset an open connection. It is out of the group at once
    /// so nobody waits for it; whether that was a crash (others carry on)
    /// or the service's own abort (all reset) is decided later.
    Aborted,
    /// Out of the group for the rest of the connection.
    Evicted,
}

/// One replica's side of a connection.
#[derive(Debug, Clone)]
pub struct Leg {
    pub replica: usize,
    pub addr: Ipv4Addr,
    pub state: LegState,
    /// Replica space + off = client space.
    pub off: SeqDelta,
    /// End of everything this replica has sent (data, and FIN as one).
    pub hi: SeqNum,
    /// Highest client-stream byte this replica acknowledged.
    pub ack: SeqNum,
    /// Right edge of the replica's receive window: ack + window.
    pub edge: SeqNum,
    pub wscale: u8,
    /// Where this replica's FIN sits, if it sent one.
    pub fin: Option<SeqNum>,
    pub has_ts: bool,
    pub has_ws: bool,
    /// Router TSval minus this replica's TSval when last translated.
    pub ts_off: u32,
    /// Latest TSval from this replica.
    pub ts_last: u32,
    /// Last packet of any kind from this replica.
    pub seen_at: Instant,
    /// Last time `ack` or `hi` moved.
    pub progress_at: Instant,
    /// Since when another replica has been ahead of this one.
    pub behind_since: Option<Instant>,
    /// Client SYN copies sent without an answer.
    pub syn_tries: u32,
    /// Last liveness probe sent to this replica.
    pub probe_at: Option<Instant>,
    /// When it reset the connection (state `Aborted`).
    pub aborted_at: Option<Instant>,
    pub mss: u16,
    pub syn_window: u16,
    /// Its position (`ack`, `hi`, `edge`, timestamps) is known. False only
    /// for a connection adopted from the agents until the replica's first
    /// packet.
    pub learned: bool,
    /// The last ACK number the router sent this replica (client-visible
    /// space): a replica whose connection is gone answers a segment with
    /// a RST carrying that segment's ACK number (RFC 9293 §3.10.7.1).
    pub ack_out: Option<SeqNum>,
    /// When the last challenge ACK went to this replica (RFC 5961 §7).
    pub challenge_at: Option<Instant>,
}

impl Leg {
    /// End of the data this replica sent, its FIN not counted.
    fn data_hi(&self) -> SeqNum {
        self.fin.unwrap_or(self.hi)
    }

    /// Still part of the group.
    fn live(&self) -> bool {
        matches!(self.state, LegState::SynSent | LegState::Open)
    }
    /// The segment's sequence number in the client's view (router space).
    fn off_seq(&self, seg: &Seg) -> SeqNum {
        seg.seq.shift(self.off)
    }
    fn open(&self) -> bool {
        self.state == LegState::Open
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for every live replica's SYN-ACK.
    Handshake,
    /// Every replica answered; the SYN-ACK waits until the connection's
    /// record is stored at the agents (`Timeouts::record_commit`), so that
    /// no client holds a SYN-ACK of a connection a new router cannot find.
    Committing,
    /// The client got our SYN-ACK; waiting for its ACK.
    SynAckSent,
    Established,
    /// Both directions closed and acknowledged; kept for `time_wait`.
    Closed,
    /// Gone: the router removes it after this input.
    Dead,
}

/// A replicated connection.
#[derive(Debug)]
pub struct Conn {
    pub key: ConnKey,
    pub svc: usize,
    pub phase: Phase,
    pub created: Instant,
    pub last_activity: Instant,
    pub closed_at: Option<Instant>,
    pub client_isn: SeqNum,
    pub router_isn: SeqNum,
    pub legs: Vec<Leg>,
    /// Client stream: end of what the client sent (its FIN counted).
    pub client_hi: SeqNum,
    /// Client stream: end of the data announced to the sequencer.
    pub input_hi: SeqNum,
    /// The sequencer's Accept of this connection went out (by this router,
    /// or by the one before a takeover, as the agents' records say).
    pub order_accepted: bool,
    /// The replicas this connection's input events go to: those its Accept
    /// went to (see `input`). Not only the live legs: a replica stays here
    /// after it left the connection.
    pub order_to: Vec<Ipv4Addr>,
    pub client_fin: Option<SeqNum>,
    pub client_win: u16,
    pub client_tsval: u32,
    pub client_ts: bool,
    pub client_ws: bool,
    /// Server stream: end of what the client was sent.
    pub sent_hi: SeqNum,
    /// Server stream: highest ACK from the client.
    pub client_ack: SeqNum,
    pub fin_sent: bool,
    /// What the client was last told.
    pub adv_ack: SeqNum,
    pub adv_edge: SeqNum,
    /// Negotiated for the group.
    pub ts_on: bool,
    pub ws_out: u8,
    pub ts_base: u32,
    /// Earliest timer this connection has in the router's heap.
    pub timer_at: Option<Instant>,
    /// Counted in the router's half-open total.
    pub counted_half_open: bool,
    /// Queued in the router's closed list.
    pub counted_closed: bool,
    /// `Event::Established` was emitted (so `Forgotten` follows).
    pub announced: bool,
    /// The client's SYN as the replicas get it, kept during the handshake
    /// to probe a replica whose copy may have been lost.
    pub syn_copy: Option<Packet>,
    /// When a client SYN last counted as a retry.
    pub syn_at: Instant,
    /// `Committing`: the SYN-ACK goes out by then even unconfirmed.
    pub commit_by: Instant,
    /// The MSS the client announced (what one segment to it may carry).
    pub client_mss: u16,
    /// The MSS announced to the client in our SYN-ACK.
    pub mss_out: u16,
    /// Output voting state, for services that vote.
    pub vote: Option<Box<VoteState>>,
    /// Adopted from the agents' records by a router that took over: the
    /// stream positions are not known yet, nothing goes to the client
    /// until every live replica told its own (see `adopted`).
    pub recovering: bool,
    /// Adopted from the agents' records (position probes were sent).
    pub from_agents: bool,
    /// Adopted: the replicas whose records are awaited, and since when.
    pub expected: Vec<Ipv4Addr>,
    /// When an adopted connection was whole again.
    pub rebuilt_at: Option<Instant>,
    /// A segment from the client was seen (always, but for an adopted
    /// connection until the client speaks): `client_ack`, `sent_hi` and
    /// `client_tsval` are the client's.
    pub client_seen: bool,
    /// When a replica's probe was last passed on to the client.
    pub probe_passed_at: Option<Instant>,
    /// When the last challenge ACK went to the client (RFC 5961 §7).
    pub challenge_at: Option<Instant>,
}

/// Output voting of one connection (MISSION.md #12, `crate::vote`). The
/// server stream is cut at `decided()`: before it, bytes a majority of the
/// live replicas agreed on (the client was sent them); after it, what each
/// replica offered that has no majority yet.
#[derive(Debug)]
pub struct VoteState {
    pub tie: Tie,
    /// Client-space position of `agreed[0]`.
    pub base: SeqNum,
    /// Decided bytes, kept until every live replica has sent past them so
    /// that a lagging replica is still compared.
    pub agreed: VecDeque<u8>,
    /// Per leg: its bytes from `decided()` on (empty while it is behind).
    pub pending: Vec<Vec<u8>>,
    /// Per leg: end of the bytes it offered, contiguous from the start.
    pub seen: Vec<SeqNum>,
    /// Per leg: segments beyond a hole in what it sent, for when the hole
    /// is filled.
    pub stash: Vec<Vec<(SeqNum, Vec<u8>)>>,
    /// The FIN was decided, at `decided()`.
    pub fin: bool,
}

impl VoteState {
    pub fn decided(&self) -> SeqNum {
        self.base.add(self.agreed.len() as u32)
    }
}

/// How long replicas of a rebuilt connection are not judged stalled.
const REBUILD_GRACE: core::time::Duration = core::time::Duration::from_millis(1500);

/// How long an adopted connection waits for the records of the replicas
/// whose agents have not registered yet.
const ADOPT_WAIT: core::time::Duration = core::time::Duration::from_millis(1000);

/// What one replica may offer the vote beyond the decided point; more
/// waits for a retransmission (the replica is that far ahead of the
/// majority).
const VOTE_MAX_PENDING: usize = 8 << 20;
/// Segments kept per replica beyond a hole in what it sent.
const VOTE_MAX_STASHED: usize = 256;
/// Decided bytes kept for a lagging replica; one further behind is evicted.
const VOTE_MAX_AGREED: usize = 16 << 20;
/// Largest payload of one packet the router builds (IPv4 total length).
const MAX_BUILT_PAYLOAD: usize = 65535 - 20 - 60;

/// Largest distance two related sequence numbers may have; beyond it a
/// segment is out of window (RFC 9293 windows are at most 2^30).
const MAX_WIN: i32 = 1 << 30;
/// At most one replica probe (zero-window or keep-alive) per this long goes
/// on to the client: the client's one answer reaches every replica.
const PROBE_PASS_GAP: core::time::Duration = core::time::Duration::from_millis(50);

impl Conn {
    pub fn new(
        key: ConnKey,
        svc: usize,
        now: Instant,
        syn: &Seg,
        router_isn: SeqNum,
        ts_base: u32,
        voting: Voting,
    ) -> Conn {
        Conn {
            key,
            svc,
            phase: Phase::Handshake,
            created: now,
            last_activity: now,
            closed_at: None,
            client_isn: syn.seq,
            router_isn,
            legs: Vec::new(),
            client_hi: syn.seq.add(1),
            input_hi: syn.seq.add(1),
            order_accepted: false,
            order_to: Vec::new(),
            client_fin: None,
            client_win: syn.window,
            client_tsval: syn.ts.map(|t| t.0).unwrap_or(0),
            client_ts: syn.ts.is_some(),
            client_ws: syn.wscale.is_some(),
            sent_hi: router_isn,
            client_ack: router_isn,
            fin_sent: false,
            adv_ack: router_isn,
            adv_edge: router_isn,
            ts_on: false,
            ws_out: 0,
            ts_base,
            timer_at: None,
            counted_half_open: true,
            counted_closed: false,
            announced: false,
            syn_copy: None,
            syn_at: now,
            commit_by: now,
            client_mss: syn.mss.unwrap_or(536).max(64),
            mss_out: 536,
            recovering: false,
            from_agents: false,
            expected: Vec::new(),
            rebuilt_at: None,
            client_seen: true,
            probe_passed_at: None,
            challenge_at: None,
            vote: match voting {
                Voting::Off => None,
                Voting::Majority { tie } => Some(Box::new(VoteState {
                    tie,
                    base: router_isn.add(1),
                    agreed: VecDeque::new(),
                    pending: Vec::new(),
                    seen: Vec::new(),
                    stash: Vec::new(),
                    fin: false,
                })),
            },
        }
    }

    /// One input event for the sequencer (numbered by the router). A
    /// connection's first event is always its Accept (an adopted one whose
    /// Accept no agent saw gets it before its first chunk).
    ///
    /// Every event goes to every replica its Accept went to (the live legs
    /// then; after a takeover, every replica of the connection's record),
    /// also to one that has left the connection since: the order is
    /// numbered per service, and a replica that left one connection (its
    /// server closed or reset it, as Redis does with a client that sent a
    /// malformed request; or it was evicted from that one alone) still
    /// serves the others, so its shim must see every number or it finds a
    /// hole and gives up ordering. Its shim drops the events of a
    /// connection its server closed; one the router evicted it from is
    /// reset (see `evict`), and a reset connection's chunks are complete
    /// for its shim.
    fn input(&mut self, ctx: &mut Ctx, kind: InputKind) {
        match kind {
            InputKind::Accept if self.order_accepted => return,
            InputKind::Data { .. } if !self.order_accepted => self.input(ctx, InputKind::Accept),
            _ => {}
        }
        self.order_accepted = true;
        if self.order_to.is_empty() {
            self.order_to = self
                .legs
                .iter()
                .filter(|l| l.live())
                .map(|l| l.addr)
                .collect();
        }
        let replicas = self.order_to.clone();
        ctx.events.push_back(Event::Input {
            seq: 0,
            key: self.key,
            kind,
            replicas,
        });
    }

    /// What the replicas' agents keep of this connection (see `SetupRecord`).
    pub fn setup_record(&self) -> SetupRecord {
        SetupRecord {
            key: self.key,
            client_isn: self.client_isn.0,
            router_isn: self.router_isn.0,
            wscale_out: self.ws_out,
            ts_base: self.ts_on.then_some(self.ts_base),
            client_mss: self.client_mss,
            mss_out: self.mss_out,
            replicas: self
                .legs
                .iter()
                .filter(|l| l.live())
                .map(|l| ReplicaSetup {
                    addr: l.addr,
                    isn: self.router_isn.unshift(l.off).0,
                    wscale: l.wscale,
                })
                .collect(),
        }
    }

    /// A connection another router set up, rebuilt from what the agents
    /// kept (`SetupRecord`): the sequence spaces, window scale and
    /// timestamp base are known, the stream positions are not. Legs are
    /// added with [`Conn::adopt_leg`]; each is probed at once so that it
    /// tells its position, and the connection waits (forwarding the
    /// client's segments, sending the client nothing) until every live leg
    /// did. Output voting is not resumed on an adopted connection.
    pub fn adopted(key: ConnKey, svc: usize, now: Instant, rec: &AdoptRecord) -> Conn {
        let client_isn = SeqNum(rec.client_isn);
        let syn = Seg {
            src: key.client,
            dst: key.vip,
            sport: key.cport,
            dport: key.vport,
            seq: client_isn,
            ack: SeqNum(0),
            flags: flags::SYN,
            window: 0,
            payload_len: 0,
            mss: Some(rec.client_mss),
            wscale: Some(0),
            ts: rec.ts_base.map(|_| (0, 0)),
            mode: CsumMode::Complete,
        };
        let router_isn = SeqNum(rec.router_isn);
        let mut c = Conn::new(
            key,
            svc,
            now,
            &syn,
            router_isn,
            rec.ts_base.unwrap_or(0),
            Voting::Off,
        );
        c.phase = Phase::Established;
        c.ts_on = rec.ts_base.is_some();
        // RFC 7323 §2.3: a shift count above 14 is used as 14 (a record
        // is input too).
        c.ws_out = rec.wscale_out.min(14);
        c.mss_out = rec.mss_out;
        c.client_ws = rec.wscale_out > 0;
        c.counted_half_open = false;
        c.announced = true;
        c.recovering = true;
        c.from_agents = true;
        c.expected = rec.expected.clone();
        // Its input events go to every replica of the record, also to one
        // that left it before the takeover (see `input`).
        c.order_to = rec.expected.clone();
        if !c.order_to.contains(&rec.replica.addr) {
            c.order_to.push(rec.replica.addr);
        }
        c.client_seen = false;
        // Until the client speaks, the window the router's own segments
        // to the replicas announce (probes, ACKs on its behalf): never 0,
        // which would stop a replica until someone reopens it.
        c.client_win = u16::MAX;
        c.sent_hi = router_isn.add(1);
        c.client_ack = router_isn.add(1);
        c.adv_ack = client_isn.add(1);
        c.adv_edge = client_isn.add(1);
        c
    }

    /// Add replica `replica`'s leg to an adopted connection and probe it.
    pub fn adopt_leg(&mut self, ctx: &mut Ctx, replica: usize, r: &ReplicaSetup) {
        if self.legs.iter().any(|l| l.replica == replica) {
            return;
        }
        self.add_leg(replica, r.addr, ctx.now);
        let router_isn = self.router_isn;
        let i = self.legs.len() - 1;
        let l = &mut self.legs[i];
        l.state = LegState::Open;
        l.off = SeqDelta::between(SeqNum(r.isn), router_isn);
        // RFC 7323 §2.3: at most 14.
        l.wscale = r.wscale.min(14);
        l.has_ts = self.ts_on;
        l.has_ws = self.client_ws;
        // A repeated SYN-ACK (the client lost the first) says the same.
        l.mss = self.mss_out;
        l.syn_window = 8192;
        l.learned = false;
        l.hi = router_isn.add(1);
        l.ack = self.client_hi;
        l.edge = self.client_hi;
        self.probe(ctx, i);
    }

    /// After a rebuild every endpoint recovers what the outage dropped on
    /// its own timers (RTOs of 200 ms and more): a learnt replica is not
    /// judged for that long (an unlearnt one is: it owes the probe's answer).
    fn grace_until(&self) -> Instant {
        match self.rebuilt_at {
            Some(t) => t + REBUILD_GRACE,
            // Still rebuilding: a replica that has not answered the
            // position probe yet may be rate-limiting its answers (Linux
            // answers an out-of-window segment at most every 500 ms per
            // connection): several probe rounds before it is judged.
            None if self.from_agents => self.created + REBUILD_GRACE,
            None => Instant::ZERO,
        }
    }

    /// The far-ahead ACK number of the position probe (client-visible
    /// space): 1.5 GiB beyond the router's ISN.
    fn probe_far_ack(&self) -> SeqNum {
        self.router_isn.add(1).add(0x6000_0000)
    }

    /// What replica leg `i`'s segment tells of its position, while the
    /// connection is rebuilt. Returns whether the segment is used further.
    fn learn_leg(&mut self, ctx: &mut Ctx, i: usize, seg: &Seg) -> bool {
        let l = &mut self.legs[i];
        let s = seg.seq.shift(l.off);
        let end = s.add(seg.payload_len + seg.has(flags::FIN) as u32);
        if !l.learned {
            l.learned = true;
            l.hi = end;
            if seg.has(flags::ACK) {
                l.ack = seg.ack;
                l.edge = seg.ack.add((seg.window as u32) << l.wscale);
            }
        } else {
            l.hi = l.hi.max(end);
            if seg.has(flags::ACK) {
                l.ack = l.ack.max(seg.ack);
                l.edge = seg.ack.add((seg.window as u32) << l.wscale);
            }
        }
        if let (true, Some((v, e))) = (self.ts_on, seg.ts) {
            l.ts_off = self
                .ts_base
                .wrapping_add(ctx.now.as_millis() as u32)
                .wrapping_sub(v);
            l.ts_last = v;
            // Its TSecr is the newest client TSval it took: what the
            // router's own segments to it must carry at least (PAWS).
            if !self.client_seen && SeqNum(e).is_after(SeqNum(self.client_tsval)) {
                self.client_tsval = e;
            }
        }
        l.progress_at = ctx.now;
        let a = l.ack;
        if a.is_after(self.client_hi) {
            self.client_hi = a;
        }
        self.finish_recovery(ctx)
    }

    /// Every live leg told its position: the connection is whole again.
    /// Returns whether it is.
    fn finish_recovery(&mut self, ctx: &mut Ctx) -> bool {
        if !self.recovering {
            return true;
        }
        // Every replica of the connection sends its record when its agent
        // registers; one that joined after the group moved on could never
        // catch up. So wait for the others' records, for a while (an agent
        // whose host died with the router never comes).
        if ctx.now >= self.created + ADOPT_WAIT {
            self.expected = Vec::new();
        }
        let legs = &self.legs;
        self.expected.retain(|a| !legs.iter().any(|l| l.addr == *a));
        if !self.expected.is_empty()
            || self.legs.iter().any(|l| l.open() && !l.learned)
            || self.live_legs() == 0
        {
            return false;
        }
        self.recovering = false;
        self.rebuilt_at = Some(ctx.now);
        if !self.client_seen {
            // The client got at least what the slowest replica sent.
            let lo = self
                .legs
                .iter()
                .filter(|l| l.open())
                .map(|l| l.hi)
                .reduce(|a, b| a.min(b))
                .unwrap_or(self.sent_hi);
            self.sent_hi = lo;
            self.client_ack = lo;
        }
        // One ACK to the client with the group's position and window.
        if let (Some(a), Some(e)) = (self.group_ack(), self.group_edge()) {
            self.adv_ack = a.sub(1);
            self.adv_edge = e.sub(1);
        }
        if ctx.sequencer {
            // The order goes on where the old router left it: an Accept if
            // no agent saw one, and one chunk for bytes some replica holds
            // that no agent saw numbered (the old router died between
            // forwarding them and telling the agents).
            if !self.order_accepted {
                self.input(ctx, InputKind::Accept);
            }
            self.cover_acked(ctx);
        }
        ctx.counters.connections_rebuilt += 1;
        true
    }

    /// The rule: every client byte a replica acknowledged lies inside a
    /// numbered chunk. The router numbers each client segment before it
    /// forwards it, so an acknowledgment passes the last chunk only after a
    /// takeover: the router that died forwarded those bytes and their chunk
    /// died with it (in its agents' writers). Not only at the rebuild: a
    /// replica that kept them out of order acknowledges them later, once
    /// the client's retransmissions fill the hole before them, and the
    /// client never repeats them (they are acknowledged), so this router may
    /// never see them. The acknowledgment itself announces them: one chunk
    /// up to the furthest acknowledgment of a live replica, the client's
    /// FIN excluded when known (a replica's RCV.NXT counts it). The replicas
    /// that lack the bytes get them from the client, whose data the group's
    /// (minimum) acknowledgment does not cover yet.
    fn cover_acked(&mut self, ctx: &mut Ctx) {
        if !ctx.sequencer {
            return;
        }
        let top = self
            .legs
            .iter()
            .filter(|l| l.open() && l.learned)
            .map(|l| l.ack)
            .reduce(|a, b| a.max(b));
        let top = match (top, self.client_fin) {
            (Some(t), Some(f)) => Some(t.min(f)),
            (t, _) => t,
        };
        if let Some(top) = top {
            self.number_to(ctx, top);
        }
    }

    /// What a replica's agent knew of this connection's input order: its
    /// Accept went out, and the chunks up to stream offset `input_end`.
    pub fn adopt_order(&mut self, accepted: bool, input_end: Option<u32>) {
        self.order_accepted |= accepted;
        if let Some(e) = input_end {
            let at = self.client_isn.add(1).add(e);
            if at.is_after(self.input_hi) {
                self.input_hi = at;
            }
        }
    }

    /// The client's first segment on an adopted connection: its ACK is what
    /// it received, its sequence number where its stream stands.
    fn learn_client(&mut self, seg: &Seg) {
        self.client_seen = true;
        let end = seg.seq.add(seg.payload_len + seg.has(flags::FIN) as u32);
        if seg.has(flags::ACK) {
            self.client_ack = seg.ack;
            self.sent_hi = seg.ack;
        }
        // Its sequence number says where its stream stands, not what
        // reached a router: bytes it sent while none was up are not owed by
        // any replica. Only bytes this segment carries count.
        if (seg.payload_len > 0 || seg.has(flags::FIN)) && end.is_after(self.client_hi) {
            self.client_hi = seg.seq;
            // Bytes before it are covered by this segment's chunk (a chunk
            // is every byte up to its end). A bare FIN makes no chunk: the
            // bytes before it get theirs when the rebuild completes.
            if seg.payload_len > 0 {
                self.input_hi = self.input_hi.max(seg.seq);
            }
        }
        for l in self.legs.iter_mut().filter(|l| !l.learned) {
            l.ack = seg.seq;
            l.edge = seg.seq;
        }
        if let Some((v, _)) = seg.ts {
            self.client_tsval = v;
        }
    }

    pub fn add_leg(&mut self, replica: usize, addr: Ipv4Addr, now: Instant) {
        self.legs.push(Leg {
            replica,
            addr,
            state: LegState::SynSent,
            off: SeqDelta(0),
            hi: self.router_isn,
            ack: self.client_isn,
            edge: self.client_isn,
            wscale: 0,
            fin: None,
            has_ts: false,
            has_ws: false,
            ts_off: 0,
            ts_last: 0,
            seen_at: now,
            progress_at: now,
            behind_since: None,
            syn_tries: 0,
            probe_at: None,
            aborted_at: None,
            mss: 0,
            syn_window: 0,
            learned: true,
            ack_out: None,
            challenge_at: None,
        });
        let start = self.router_isn.add(1);
        if let Some(v) = &mut self.vote {
            v.pending.push(Vec::new());
            v.seen.push(start);
            v.stash.push(Vec::new());
        }
    }

    pub fn live_legs(&self) -> usize {
        self.legs.iter().filter(|l| l.live()).count()
    }

    pub fn half_open(&self) -> bool {
        matches!(
            self.phase,
            Phase::Handshake | Phase::Committing | Phase::SynAckSent
        )
    }

    /// Router timestamp clock (RFC 7323 §5.4: 1 ms ticks), offset per
    /// connection so that it reveals nothing about the router's uptime.
    fn router_ts(&self, now: Instant) -> u32 {
        self.ts_base.wrapping_add(now.as_millis() as u32)
    }

    /// Group ACK towards the client: the minimum over live replicas that
    /// answered (COSCANet-FT §III-C: the client is acknowledged only for
    /// what every replica acknowledged).
    fn group_ack(&self) -> Option<SeqNum> {
        self.legs
            .iter()
            .filter(|l| l.open())
            .map(|l| l.ack)
            .reduce(|a, b| a.min(b))
    }

    /// Group window right edge: the minimum (§III-D).
    fn group_edge(&self) -> Option<SeqNum> {
        self.legs
            .iter()
            .filter(|l| l.open())
            .map(|l| l.edge)
            .reduce(|a, b| a.min(b))
    }

    /// The window field for the client given the group edge and ack.
    fn window_field(&self, ack: SeqNum, edge: SeqNum) -> u16 {
        let bytes = edge.diff(ack).max(0) as u32;
        (bytes >> self.ws_out).min(0xffff) as u16
    }

    // ------------------------------------------------------------------
    // Client → replicas
    // ------------------------------------------------------------------

    /// A retransmitted client SYN (same ISN): count the try against every
    /// replica that has not answered, evict those past `syn_retries`
    /// (§III-E), and repeat the SYN to the rest.
    pub fn client_syn_again(&mut self, ctx: &mut Ctx, pkt: &Packet, seg: &Seg) {
        self.last_activity = ctx.now;
        if self.phase == Phase::SynAckSent || self.phase == Phase::Established {
            // Our SYN-ACK was lost: the client asks again.
            self.emit_synack(ctx);
            return;
        }
        if self.phase == Phase::Committing {
            // Every replica answered; the SYN-ACK follows its record.
            ctx.counters.drop(DropReason::SynAckHeld);
            return;
        }
        // A copy duplicated by the network is not a retry: only a SYN at
        // least one failure-detection time after the last counts.
        if ctx.now.saturating_sub(self.syn_at) >= ctx.timeouts.failure_detection {
            self.syn_at = ctx.now;
            for i in 0..self.legs.len() {
                if self.legs[i].state != LegState::SynSent {
                    continue;
                }
                self.legs[i].syn_tries += 1;
                if self.legs[i].syn_tries > ctx.timeouts.syn_retries {
                    self.evict(ctx, i, EvictReason::NoSynAck, true);
                }
            }
        }
        self.forward_syn(ctx, pkt, seg);
        self.settle(ctx);
    }

    /// Copy the client's SYN to every replica that has not answered.
    pub fn forward_syn(&mut self, ctx: &mut Ctx, pkt: &Packet, seg: &Seg) {
        let mut base = pkt.clone();
        rewrite(&mut base, |_, t| {
            // SACK is not offered to the group: a SACK block is only
            // truthful per replica, and the client-side blocks would have
            // to be the intersection over replicas. Without SACK TCP falls
            // back to NewReno recovery (RFC 6582).
            t.strip_sack_permitted(seg.mode);
        });
        for i in 0..self.legs.len() {
            if self.legs[i].state == LegState::SynSent {
                self.send_syn(ctx, &base, seg.dst, i);
            }
        }
        self.syn_copy = Some(base);
    }

    /// The client's SYN (as kept in `syn_copy` form) to leg `i`.
    fn send_syn(&self, ctx: &mut Ctx, base: &Packet, vip: Ipv4Addr, i: usize) {
        let addr = self.legs[i].addr;
        let mode = csum_mode(&base.vnet);
        let mut p = base.clone();
        rewrite(&mut p, |ip, t| {
            ip.set_dst(addr);
            t.update_pseudo_addr(vip, addr, mode);
        });
        ctx.tx.push_back(p);
        ctx.counters.packets_out += 1;
    }

    /// A segment from the client on an existing connection.
    pub fn client_segment(&mut self, ctx: &mut Ctx, pkt: Packet, seg: &Seg) {
        if seg.has(flags::RST) {
            self.client_rst(ctx, pkt, seg);
            return;
        }
        if matches!(self.phase, Phase::Handshake | Phase::Committing) {
            // The client cannot have seen our SYN-ACK; only a RST makes sense.
            ctx.counters.drop(DropReason::BadState);
            return;
        }
        if !self.client_seen {
            self.learn_client(seg);
        }
        if let (true, Some((_, e))) = (self.ts_on, seg.ts) {
            // The client echoes the newest TSval it got. A router that took
            // over must never send one below it (PAWS would drop its
            // segments, RFC 7323 §5): its clock moves forward to it.
            let now_ts = self.router_ts(ctx.now);
            if e != 0 && SeqNum(e).is_after(SeqNum(now_ts)) {
                self.ts_base = self.ts_base.wrapping_add(e.wrapping_sub(now_ts));
            }
        }
        // RFC 9293 §3.10.7.4 / RFC 5961: sequence and ACK plausibility.
        let lo = self
            .legs
            .iter()
            .filter(|l| l.open())
            .map(|l| l.ack)
            .reduce(|a, b| a.min(b))
            .unwrap_or(self.client_hi);
        if seg.seq.diff(lo) < -MAX_WIN || seg.seq.diff(self.client_hi) > MAX_WIN {
            ctx.counters.drop(DropReason::OutOfWindow);
            return;
        }
        if seg.has(flags::ACK)
            && self.from_agents
            && seg.ack.is_after(self.sent_hi)
            && seg.ack.diff(self.sent_hi) < MAX_WIN
        {
            // After a takeover the router before may have sent more than
            // this one knows of (a replica learnt from a repeat of old
            // data looks behind where it is): the client's word counts.
            self.sent_hi = seg.ack;
        }
        if seg.has(flags::ACK)
            && (seg.ack.is_after(self.sent_hi) || seg.ack.diff(self.client_ack) < -MAX_WIN)
        {
            ctx.counters.drop(DropReason::OutOfWindow);
            return;
        }
        if seg.payload_len > 0 {
            // Beyond the window the client was told too: a replica's edge
            // seen last may be an old ACK's (reordered), and a client never
            // sends past what it was offered.
            if let Some(edge) = self.max_edge().map(|e| e.max(self.adv_edge)) {
                if seg.seq.is_after(edge) {
                    // RFC 9293 §3.10.7.4: bytes that start beyond every
                    // replica's receive window are not acceptable to any;
                    // forwarded, each would drop them, and numbered they
                    // would make every shim wait for a chunk that can
                    // never complete.
                    ctx.counters.drop(DropReason::BeyondWindow);
                    return;
                }
            }
        }
        self.last_activity = ctx.now;
        if seg.has(flags::ACK) {
            self.client_ack = self.client_ack.max(seg.ack);
            if self.phase == Phase::SynAckSent && !seg.ack.is_before(self.router_isn.add(1)) {
                self.phase = Phase::Established;
                self.syn_copy = None;
                if ctx.sequencer {
                    self.input(ctx, InputKind::Accept);
                }
            }
        }
        if let Some((tsval, _)) = seg.ts {
            if SeqNum(tsval).is_after(SeqNum(self.client_tsval)) || tsval == self.client_tsval {
                self.client_tsval = tsval;
            }
        }
        self.client_win = seg.window;
        let end = seg.seq.add(seg.payload_len + seg.has(flags::FIN) as u32);
        let data_end = seg.seq.add(seg.payload_len);
        if ctx.sequencer
            && seg.payload_len > 0
            && !seg.seq.is_after(self.input_hi)
            && matches!(self.phase, Phase::Established | Phase::Closed)
        {
            // New client bytes contiguous with what was numbered: the next
            // chunk of this connection ends here (offsets count from the
            // byte after the client's SYN). Not `client_hi`: a FIN that
            // overtook the last data would hide it. Only bytes every live
            // replica's window takes: a chunk that reaches beyond one
            // could never complete there, and that replica's shim would
            // hold every later event of the service behind it. (A segment
            // beyond a hole gets no number; its bytes do once the hole is
            // filled, from the segment that fills it or from a replica's
            // acknowledgment, `number_acked`.)
            let end = match self.min_edge() {
                Some(e) => data_end.min(e),
                None => data_end,
            };
            self.number_to(ctx, end);
        }
        if seg.payload_len > 0 || seg.has(flags::FIN) {
            // What the replicas are sent (a pure ACK's sequence number may
            // count bytes that reached no router, after a takeover).
            self.client_hi = self.client_hi.max(end);
        }
        if seg.has(flags::FIN) {
            self.client_fin = Some(seg.seq.add(seg.payload_len));
        }
        ctx.counters.client_bytes_in += seg.payload_len as u64;
        self.fan_out(ctx, pkt, seg);
        // Bytes (or a FIN) the group already acknowledged: the client did
        // not get our ACK. The replicas will only repeat theirs, which change
        // nothing and are absorbed, so the router answers (RFC 9293 §3.10.7.4:
        // a duplicate segment is acknowledged).
        if (seg.payload_len > 0 || seg.has(flags::FIN))
            && !end.is_after(self.adv_ack)
            && self.phase == Phase::Established
        {
            self.emit_ack(ctx, false);
        }
        self.check_closed(ctx);
    }

    /// RFC 5961 §3.2 (and §3 for a connection in set-up) for a RST from
    /// the client. Acted on only if its sequence number is exactly the next
    /// one expected: on a half-open connection the client's ISN + 1
    /// (RFC 9293 §3.10.7.4 SYN-RECEIVED); on an open one the end of what
    /// the client sent (`client_hi`, its SND.NXT) or what the client was
    /// last acknowledged (`adv_ack`: a client whose connection is gone
    /// answers a challenge ACK with <SEQ=SEG.ACK><CTL=RST>, RFC 9293
    /// §3.10.7.1 and §3.10.7.3). The router stands between the client and
    /// the replicas, so its RCV.NXT is either of those. Then the abort
    /// reaches every replica (§III-C). Elsewhere in the window the client
    /// gets a challenge ACK and nothing changes (the replicas, which check
    /// RFC 5961 themselves, would ignore the RST: a router that forgot the
    /// connection would leave it hanging); outside the window the RST is
    /// dropped.
    fn client_rst(&mut self, ctx: &mut Ctx, pkt: Packet, seg: &Seg) {
        let half_open = self.half_open();
        let exact = if half_open {
            seg.seq == self.client_isn.add(1)
        } else {
            seg.seq == self.client_hi || seg.seq == self.adv_ack
        };
        if exact {
            self.last_activity = ctx.now;
            if matches!(self.phase, Phase::Handshake | Phase::Committing) {
                // No replica's SYN-ACK was passed on: reset each at the
                // client's ISN + 1.
                self.abort_legs(ctx);
            } else {
                // A client abort reaches every replica (§III-C).
                self.fan_out(ctx, pkt, seg);
            }
            self.phase = Phase::Dead;
            return;
        }
        // The window the client was told: from what it was acknowledged
        // to the right edge (at least what it sent).
        let lo = self.adv_ack;
        let hi = self.adv_edge.max(self.client_hi.add(1));
        if seg.seq.is_before(lo) || !seg.seq.is_before(hi) {
            ctx.counters.drop(DropReason::RstOutOfWindow);
            return;
        }
        ctx.counters.drop(DropReason::RstNotExact);
        // No challenge ACK before the client has our SYN-ACK, nor while
        // an adopted connection is rebuilt (its positions are not known).
        if matches!(self.phase, Phase::Handshake | Phase::Committing) || self.recovering {
            return;
        }
        let mut last = self.challenge_at;
        if may_challenge(ctx, &mut last) {
            self.challenge_at = last;
            self.emit_ack(ctx, false);
        }
    }

    /// RFC 5961 §4: a SYN with another ISN on a live connection. It
    /// changes nothing; the client gets a challenge ACK <SEQ=SND.NXT>
    /// <ACK=RCV.NXT>. A client whose connection is gone (its new one is in
    /// SYN-SENT) answers it with a RST at exactly the ACK's number, which
    /// ends this one ([`Conn::client_rst`]); its next SYN opens a fresh
    /// connection. While an adopted connection is rebuilt its positions are
    /// not known and no challenge ACK can be built: the SYN is only
    /// dropped (the client repeats it).
    pub fn syn_on_live(&mut self, ctx: &mut Ctx) {
        ctx.counters.drop(DropReason::SynOnLiveConnection);
        if self.recovering || self.phase != Phase::Established {
            return;
        }
        let mut last = self.challenge_at;
        if may_challenge(ctx, &mut last) {
            self.challenge_at = last;
            self.emit_ack(ctx, false);
        }
    }

    /// The smallest right window edge over the live replicas whose
    /// position is known (client stream).
    fn min_edge(&self) -> Option<SeqNum> {
        self.legs
            .iter()
            .filter(|l| l.open() && l.learned)
            .map(|l| l.edge)
            .reduce(|a, b| a.min(b))
    }

    /// The largest right window edge over the live replicas whose
    /// position is known (client stream).
    fn max_edge(&self) -> Option<SeqNum> {
        self.legs
            .iter()
            .filter(|l| l.open() && l.learned)
            .map(|l| l.edge)
            .reduce(|a, b| a.max(b))
    }

    /// The sequencer's next chunk of this connection ends at `end` (client
    /// stream), if that is past what was numbered.
    fn number_to(&mut self, ctx: &mut Ctx, end: SeqNum) {
        if !end.is_after(self.input_hi) {
            return;
        }
        let off = end.diff(self.client_isn.add(1)) as u32;
        self.input_hi = end;
        self.input(ctx, InputKind::Data { end: off });
    }

    /// A replica acknowledged client bytes up to `ack`: they are
    /// contiguous in the client's stream (a cumulative ACK), so they may
    /// be numbered, also those that came beyond a hole the client filled
    /// later. An acknowledgment may count the client's FIN.
    fn number_acked(&mut self, ctx: &mut Ctx, ack: SeqNum) {
        if !ctx.sequencer
            || self.recovering
            || !matches!(self.phase, Phase::Established | Phase::Closed)
        {
            return;
        }
        let top = match self.client_fin {
            Some(f) => ack.min(f),
            None => ack,
        };
        self.number_to(ctx, top);
    }

    /// Send one client segment to every open replica, translated for each.
    fn fan_out(&mut self, ctx: &mut Ctx, pkt: Packet, seg: &Seg) {
        // A leg whose position is not known yet (an adopted connection,
        // until it answers the position probe) gets no client segment but
        // a RST: any ACK number could be beyond what it sent, which makes a
        // stack drop the segment, data and all. The client sends the data
        // again, since the group did not acknowledge it.
        let rst = seg.has(flags::RST);
        let targets: Vec<usize> = (0..self.legs.len())
            .filter(|&i| self.legs[i].open() && (self.legs[i].learned || rst))
            .collect();
        let mut pkt = Some(pkt);
        for (n, &i) in targets.iter().enumerate() {
            let l = &self.legs[i];
            // The last copy reuses the buffer: one fewer copy per fan-out.
            let copy = if n + 1 == targets.len() {
                pkt.take()
            } else {
                pkt.clone()
            };
            let Some(mut p) = copy else { break };
            // §III-D: never acknowledge to a replica bytes it has not sent
            // (Linux discards an ACK beyond its snd_nxt and stalls).
            let ack_c = seg.ack.min(l.hi);
            let ack = ack_c.unshift(l.off);
            // RFC 5961 §3.2 at the replica: a RST counts only at exactly
            // its RCV.NXT, which is at least what it acknowledged (the
            // client's RST may be at what the group acknowledged).
            let rst_seq = (rst && l.learned && seg.seq.is_before(l.ack)).then_some(l.ack);
            let tsecr = seg
                .ts
                .map(|(_, e)| if l.learned { translate_tsecr(e, l) } else { 0 });
            rewrite(&mut p, |ip, t| {
                ip.set_dst(l.addr);
                t.update_pseudo_addr(seg.dst, l.addr, seg.mode);
                if seg.has(flags::ACK) {
                    t.set_ack(ack, seg.mode);
                }
                if let (Some(e), Some((v, _))) = (tsecr, seg.ts) {
                    t.set_timestamps(v, e, seg.mode);
                }
                if let Some(s) = rst_seq {
                    t.set_seq(s, seg.mode);
                }
                // The group never agreed to SACK; drop any blocks.
                t.strip_sack(seg.mode);
            });
            if seg.has(flags::ACK) {
                self.legs[i].ack_out = Some(ack_c);
            }
            ctx.tx.push_back(p);
            ctx.counters.packets_out += 1;
        }
    }

    // ------------------------------------------------------------------
    // Replica → client
    // ------------------------------------------------------------------

    /// A segment from replica leg `i`.
    pub fn replica_segment(&mut self, ctx: &mut Ctx, i: usize, pkt: Packet, seg: &Seg) {
        if !self.legs[i].live() {
            ctx.counters.drop(DropReason::EvictedReplica);
            return;
        }
        if seg.has(flags::RST) && self.legs[i].open() {
            if self.from_agents && seg.seq.shift(self.legs[i].off) == self.probe_far_ack() {
                // A connection in SYN-RECEIVED refusing the position
                // probe's far ACK number: it lives on.
                ctx.counters.drop(DropReason::Rebuilding);
                return;
            }
            if !self.replica_rst_acceptable(ctx, i, seg) {
                // Not heard from either: an unacceptable RST is no sign
                // of life.
                return;
            }
        }
        self.legs[i].seen_at = ctx.now;
        self.last_activity = ctx.now;
        if seg.has(flags::SYN) {
            self.replica_synack(ctx, i, seg);
            return;
        }
        if self.legs[i].state != LegState::Open {
            ctx.counters.drop(DropReason::BadState);
            return;
        }
        if seg.has(flags::RST) {
            self.replica_rst(ctx, i, pkt, seg);
            return;
        }
        if self.recovering || !self.legs[i].learned {
            // Rebuilding: this segment tells where the replica stands.
            let whole = self.learn_leg(ctx, i, seg);
            if !whole || seg.payload_len == 0 {
                // Nothing for the client yet (a replica repeats data).
                if whole {
                    self.settle(ctx);
                } else {
                    ctx.counters.drop(DropReason::Rebuilding);
                }
                return;
            }
        }
        if let (true, Some((v, _))) = (self.ts_on, seg.ts) {
            let ts_now = self.router_ts(ctx.now);
            let l = &mut self.legs[i];
            l.ts_off = ts_now.wrapping_sub(v);
            l.ts_last = v;
        }
        if self.from_agents && seg.payload_len == 0 && !seg.has(flags::FIN) {
            // On a rebuilt connection the position learnt may be one short:
            // a replica in zero-window persist sends probes at SND.UNA − 1
            // (Linux), and one of those may have been taken for its answer.
            // Its later pure ACKs carry SND.NXT; acknowledging it below its
            // SND.UNA would be ignored, window update included, and leave
            // it stopped for good.
            let l = &mut self.legs[i];
            let s = seg.seq.shift(l.off);
            if s.is_after(l.hi) && s.diff(l.hi) <= MAX_WIN {
                l.hi = s;
            }
        }
        let l = &self.legs[i];
        let s = seg.seq.shift(l.off);
        if s.diff(l.hi) > MAX_WIN || s.diff(l.hi) < -MAX_WIN {
            ctx.counters.drop(DropReason::OutOfWindow);
            return;
        }
        // The ACK field: what this replica has of the client's stream.
        if seg.has(flags::ACK) {
            let a = seg.ack.min(self.client_hi);
            let l = &mut self.legs[i];
            let edge = a.add((seg.window as u32) << l.wscale);
            // The window may move with a duplicate ACK (a receiver buffering
            // out-of-order data); the ACK number is what signals the hole.
            let dup = a == l.ack && seg.payload_len == 0 && !seg.has(flags::FIN);
            let progressed = a.is_after(l.ack);
            if progressed {
                l.ack = a;
                l.progress_at = ctx.now;
            }
            l.edge = edge;
            if progressed {
                self.confirm_aborts(ctx);
                // Also after a takeover, where it may be past every chunk
                // (see `cover_acked`).
                self.number_acked(ctx, a);
            }
            if dup && seg.payload_len == 0 {
                self.replica_pure_ack(ctx, i, pkt, seg, true);
                return;
            }
        }
        if seg.payload_len == 0 && !seg.has(flags::FIN) {
            self.replica_pure_ack(ctx, i, pkt, seg, false);
            return;
        }
        self.replica_data(ctx, i, pkt, seg, s);
    }

    fn replica_synack(&mut self, ctx: &mut Ctx, i: usize, seg: &Seg) {
        if !seg.has(flags::ACK) || seg.ack != self.client_isn.add(1) {
            ctx.counters.drop(DropReason::BadState);
            return;
        }
        if self.legs[i].state == LegState::Open {
            // A retransmitted SYN-ACK: the replica did not get the client's
            // ACK yet. Once our own SYN-ACK is out, repeat it to the client
            // so that a lost third ACK gets repaired.
            if matches!(self.phase, Phase::SynAckSent | Phase::Established) {
                self.emit_synack(ctx);
            } else {
                ctx.counters.drop(DropReason::SynAckHeld);
            }
            return;
        }
        if self.phase != Phase::Handshake {
            // Too late: the group already answered the client without it.
            ctx.counters.drop(DropReason::BadState);
            return;
        }
        // The first replica to answer sets the group's option profile;
        // one that differs cannot share the client's connection.
        let reference = self
            .legs
            .iter()
            .find(|l| l.open())
            .map(|l| (l.has_ts, l.has_ws));
        let mine = (seg.ts.is_some(), seg.wscale.is_some());
        if let Some(r) = reference {
            if r != mine {
                self.evict(ctx, i, EvictReason::OptionMismatch, false);
                self.settle(ctx);
                return;
            }
        }
        let now = ctx.now;
        let ts_now = self.router_ts(now);
        let client_ws = self.client_ws;
        let router_isn = self.router_isn;
        let l = &mut self.legs[i];
        l.state = LegState::Open;
        l.off = SeqDelta::between(seg.seq, router_isn);
        l.hi = router_isn.add(1);
        l.ack = seg.ack;
        l.has_ts = seg.ts.is_some();
        l.has_ws = seg.wscale.is_some();
        // RFC 7323 §2.2: the scale applies only if both sides sent it.
        l.wscale = if client_ws {
            seg.wscale.unwrap_or(0).min(14)
        } else {
            0
        };
        l.edge = seg.ack.add(seg.window as u32);
        l.mss = seg.mss.unwrap_or(536);
        l.syn_window = seg.window;
        if let Some((v, _)) = seg.ts {
            l.ts_last = v;
            l.ts_off = ts_now.wrapping_sub(v);
        }
        l.progress_at = now;
        ctx.counters.drop(DropReason::SynAckHeld);
        self.settle(ctx);
    }

    /// The group's options for the client (what the connection's record
    /// holds): MSS, timestamps and window scale; returns the SYN-ACK's
    /// window and scale option. `None` with no replica open.
    fn synack_options(&mut self) -> Option<(u16, Option<u8>)> {
        let open: Vec<&Leg> = self.legs.iter().filter(|l| l.open()).collect();
        let first = open.first()?;
        let mss = open.iter().map(|l| l.mss).min().unwrap_or(536);
        let win = open.iter().map(|l| l.syn_window).min().unwrap_or(0);
        let ts_on = self.client_ts && first.has_ts;
        let ws = if self.client_ws && first.has_ws {
            Some(open.iter().map(|l| l.wscale).max().unwrap_or(0))
        } else {
            None
        };
        self.mss_out = mss;
        self.ts_on = ts_on;
        self.ws_out = ws.unwrap_or(0);
        Some((win, ws))
    }

    /// `Committing`: the record is stored (`confirmed`) or the wait ran
    /// out; the client gets its SYN-ACK.
    pub fn commit_synack(&mut self, ctx: &mut Ctx, confirmed: bool) {
        if self.phase != Phase::Committing {
            return;
        }
        if confirmed {
            ctx.counters.synacks_committed += 1;
        } else {
            ctx.counters.synacks_uncommitted += 1;
        }
        self.phase = Phase::Handshake;
        self.emit_synack(ctx);
    }

    /// The one SYN-ACK the client sees, built from what the replicas
    /// answered (§III-E): router ISN, MSS = min, window scale = the largest
    /// replica scale (every replica window fits), timestamps if all agreed.
    fn emit_synack(&mut self, ctx: &mut Ctx) {
        let Some((win, ws)) = self.synack_options() else {
            return;
        };
        let (mss, ts_on) = (self.mss_out, self.ts_on);
        let mut r = Repr::new(
            self.key.vport,
            self.key.cport,
            self.router_isn,
            self.client_isn.add(1),
            flags::SYN | flags::ACK,
            win,
        );
        r.mss = Some(mss);
        r.wscale = ws;
        if ts_on {
            r.timestamps = Some((self.router_ts(ctx.now), self.client_tsval));
        }
        let data = r.emit_ipv4(self.key.vip, self.key.client, &[]);
        ctx.tx.push_back(Packet::plain(data));
        ctx.counters.packets_out += 1;
        self.sent_hi = self.sent_hi.max(self.router_isn.add(1));
        self.adv_ack = self.client_isn.add(1);
        self.adv_edge = self.adv_ack.add(win as u32);
        if self.phase == Phase::Handshake {
            self.phase = Phase::SynAckSent;
        }
    }

    /// RFC 5961 §3.2 for a RST from open leg `i`: acted on only if its
    /// sequence number is exactly the one the router expects next from
    /// that replica: the end of what it sent (`hi`; an abort carries
    /// SND.NXT), or the ACK number the router last sent it (a replica
    /// whose connection is gone answers a segment with <SEQ=SEG.ACK>,
    /// RFC 9293 §3.10.7.1). Anywhere else within the window it changes
    /// nothing and the replica gets a challenge ACK (a replica that really
    /// reset answers it with a RST at the ACK's number, which is then
    /// exact); further away it is dropped. The router keeps no receive
    /// window of its own towards a replica: "the window" is the ±2^30 any
    /// related sequence number lies within.
    fn replica_rst_acceptable(&mut self, ctx: &mut Ctx, i: usize, seg: &Seg) -> bool {
        let l = &self.legs[i];
        let s = l.off_seq(seg);
        if s == l.hi || Some(s) == l.ack_out {
            return true;
        }
        if s.diff(l.hi) > MAX_WIN || s.diff(l.hi) < -MAX_WIN {
            ctx.counters.drop(DropReason::RstOutOfWindow);
            return false;
        }
        ctx.counters.drop(DropReason::RstNotExact);
        let mut last = self.legs[i].challenge_at;
        if may_challenge(ctx, &mut last) {
            self.legs[i].challenge_at = last;
            self.send_ack_to(ctx, i);
        }
        false
    }

    fn replica_rst(&mut self, ctx: &mut Ctx, i: usize, pkt: Packet, seg: &Seg) {
        if self.phase == Phase::Closed {
            // Both sides closed: a RST now answers a stray segment.
            ctx.counters.drop(DropReason::BadState);
            return;
        }
        let owed = self.client_hi.is_after(self.legs[i].ack);
        if self.legs[i]
            .fin
            .is_some_and(|f| self.client_ack.is_after(f))
            && (!owed || self.recovering)
        {
            // The client acknowledged this replica's FIN and sent nothing
            // it has not acknowledged: the RST answers a stray segment (a
            // probe of old data, a retransmitted FIN after its LAST-ACK
            // ended; after a takeover the router may not know the close was
            // complete, and while rebuilding it cannot tell). With new
            // client bytes in flight it is the server resetting a
            // half-closed connection the client writes to (RFC 9293
            // §3.10.7.4; Redis after a protocol error): that goes the abort
            // path below, so the client learns at once.
            ctx.counters.drop(DropReason::BadState);
            return;
        }
        if self.live_legs() > 1 {
            // §III-D: a RST from one replica while the others carry on is
            // evidence of its crash, not a close. It leaves the group now so
            // nobody waits for it; if every replica resets, it was the
            // service's own abort and no replica is blamed.
            self.legs[i].state = LegState::Aborted;
            self.legs[i].aborted_at = Some(ctx.now);
            self.settle(ctx);
            return;
        }
        // The last replica resets: the client gets it.
        let off = self.legs[i].off;
        let mut p = pkt;
        let vip = self.key.vip;
        rewrite(&mut p, |ip, t| {
            ip.set_src(vip);
            t.update_pseudo_addr(seg.src, vip, seg.mode);
            t.set_seq(seg.seq.shift(off), seg.mode);
        });
        ctx.tx.push_back(p);
        ctx.counters.packets_out += 1;
        self.legs[i].state = LegState::Evicted;
        self.phase = Phase::Dead;
    }

    /// A RST in answer to the client's SYN.
    pub fn replica_refused(&mut self, ctx: &mut Ctx, i: usize) {
        self.legs[i].state = LegState::Refused;
        self.settle(ctx);
    }

    fn replica_pure_ack(&mut self, ctx: &mut Ctx, i: usize, pkt: Packet, seg: &Seg, dup: bool) {
        // The last ACK of a close comes as a pure ACK.
        self.check_closed(ctx);
        // One below what it was acknowledged, with nothing in it: a probe
        // (Linux sends zero-window probes and keep-alives at SND.UNA − 1;
        // a stack that rewinds SND.NXT to SND.UNA after a timeout sends
        // its ACKs there, which are not probes). It asks the client for
        // its window, or whether it lives; absorbed, a client's window
        // update that was lost (or went to a router that died) would stop
        // the connection for good. One per PROBE_PASS_GAP goes on: the
        // client must answer an old sequence number with an ACK and its
        // window, which reaches every replica.
        // (On a rebuilt connection the client may not have spoken yet: its
        // window update went to the router that died, and this probe is
        // what makes it speak.)
        if self.legs[i].off_seq(seg).add(1) == self.client_ack.min(self.legs[i].hi)
            && !self.recovering
            && self.phase == Phase::Established
            && self
                .probe_passed_at
                .is_none_or(|t| ctx.now.saturating_sub(t) >= PROBE_PASS_GAP)
        {
            self.probe_passed_at = Some(ctx.now);
            ctx.counters.probes_passed += 1;
            self.forward_to_client(ctx, i, pkt, seg, None, false);
            return;
        }
        let (Some(ack), Some(edge)) = (self.group_ack(), self.group_edge()) else {
            ctx.counters.drop(DropReason::AckAbsorbed);
            return;
        };
        let advances = ack.is_after(self.adv_ack) || edge.is_after(self.adv_edge);
        // A duplicate ACK from the replica that holds the group back means
        // it is missing client data; passing it on lets the client's fast
        // retransmit repair the router–replica link (§III-C).
        let bottleneck_dup = dup && self.legs[i].ack == ack && self.client_hi.is_after(ack);
        if !advances && !bottleneck_dup {
            ctx.counters.drop(DropReason::AckAbsorbed);
            return;
        }
        self.forward_to_client(ctx, i, pkt, seg, Some(self.sent_hi), false);
    }

    fn replica_data(&mut self, ctx: &mut Ctx, i: usize, pkt: Packet, seg: &Seg, s: SeqNum) {
        if self.vote.is_some() {
            // Where the replicas disagree, the vote decides, FIN included.
            self.vote_data(ctx, i, &pkt, seg, s);
            return;
        }
        let e = s.add(seg.payload_len);
        let prev_hi = self.legs[i].hi;
        let end = e.add(seg.has(flags::FIN) as u32);
        if end.is_after(prev_hi) {
            self.legs[i].hi = end;
            self.legs[i].progress_at = ctx.now;
            self.confirm_aborts(ctx);
        }
        let mut fin_agreed = false;
        if seg.has(flags::FIN) {
            if let Some(f) = self.legs[i].fin {
                if f != e {
                    // The same replica moved its FIN: it cannot be trusted.
                    self.evict(ctx, i, EvictReason::Fin, false);
                    self.settle(ctx);
                    return;
                }
            }
            self.legs[i].fin = Some(e);
        }
        // A FIN from another replica at a point this one went past means
        // that replica stopped early: it crashed (§III-D).
        let hi = self.legs[i].hi;
        for j in 0..self.legs.len() {
            if j == i || !self.legs[j].live() {
                continue;
            }
            if let Some(f) = self.legs[j].fin {
                if hi.is_after(f.add(1)) {
                    self.evict(ctx, j, EvictReason::Fin, false);
                }
            }
        }
        if let Some(f) = self.legs[i].fin {
            // This replica's FIN is itself contradicted by another that has
            // sent beyond it.
            if self
                .legs
                .iter()
                .any(|l| l.live() && l.hi.is_after(f.add(1)))
            {
                self.evict(ctx, i, EvictReason::Fin, false);
                self.settle(ctx);
                return;
            }
            fin_agreed = self
                .legs
                .iter()
                .filter(|l| l.live())
                .all(|l| l.fin == Some(f));
        }
        let end_for_client = if fin_agreed { e.add(1) } else { e };
        let new_data = e.is_after(self.sent_hi);
        // The replica repeats what it sent before and the client still
        // lacks it: the copy that went first may have been lost.
        // (After a takeover, until the client speaks, what it has is not
        // known: a repeat goes to it, and its answer tells.)
        let retx_needed = s.is_before(prev_hi)
            && (end_for_client.is_after(self.client_ack) || !self.client_seen)
            && (seg.payload_len > 0 || self.fin_sent);
        if new_data || retx_needed {
            self.forward_to_client(ctx, i, pkt, seg, None, seg.has(flags::FIN) && !fin_agreed);
            self.sent_hi = self.sent_hi.max(end_for_client);
            if fin_agreed {
                self.fin_sent = true;
            }
            self.check_closed(ctx);
            return;
        }
        if fin_agreed && !self.fin_sent {
            // Only the FIN is new: send it bare rather than repeat bytes the
            // client was already sent (first copy wins).
            self.settle(ctx);
            return;
        }
        ctx.counters.drop(DropReason::DuplicateSuppressed);
        ctx.counters.suppressed_bytes += seg.payload_len as u64;
        // Mission #4: a lagging replica now sends bytes the client already
        // acknowledged; nothing from the client will ever acknowledge them
        // again, so the router does it on the client's behalf.
        if self.client_ack.is_after(s) {
            self.ack_on_behalf(ctx, i);
        }
        self.settle(ctx);
    }

    // ------------------------------------------------------------------
    // Output voting
    // ------------------------------------------------------------------

    /// Data or a FIN from leg `i` of a voting connection: check what it
    /// repeats of the decided bytes, offer what is new, let the vote decide
    /// (`vote_progress`, from `settle`). Nothing goes to the client here
    /// except a repeat of decided bytes the client may have lost.
    fn vote_data(&mut self, ctx: &mut Ctx, i: usize, pkt: &Packet, seg: &Seg, s: SeqNum) {
        let payload = payload_of(pkt);
        let e = s.add(payload.len() as u32);
        if seg.has(flags::FIN) {
            if self.legs[i].fin.is_some_and(|f| f != e) {
                // The same replica moved its FIN: it cannot be trusted.
                self.evict(ctx, i, EvictReason::Fin, false);
                self.settle(ctx);
                return;
            }
            self.legs[i].fin = Some(e);
        }
        let client_ack = self.client_ack;
        let Some(v) = self.vote.as_mut() else { return };
        let (decided, seen) = (v.decided(), v.seen[i]);
        if seen.is_before(v.base) {
            // Behind what the vote still keeps: it cannot be checked.
            self.evict(ctx, i, EvictReason::Lagging, false);
            self.settle(ctx);
            return;
        }
        if s.is_after(seen) {
            // A hole in what this replica sent. Keep the segment for when
            // the hole is filled, and answer with a duplicate ACK as the
            // client would: the replica's `hi` stays at the hole, so the ACK
            // repeats and its fast retransmit fills it.
            let st = &mut v.stash[i];
            let bytes: usize = st.iter().map(|(_, b)| b.len()).sum();
            if st.len() < VOTE_MAX_STASHED && bytes + payload.len() <= VOTE_MAX_PENDING {
                if !st.iter().any(|(a, b)| *a == s && b.len() >= payload.len()) {
                    st.push((s, payload.to_vec()));
                }
            } else {
                ctx.counters.drop(DropReason::VoteOutOfOrder);
            }
            self.ack_on_behalf(ctx, i);
            self.settle(ctx);
            return;
        }
        // Bytes it sent before and that matched: a repeat the client may
        // need (its copy was lost), as TCP repeats the same bytes.
        let lo = s.max(client_ack);
        let hi = e.min(seen).min(decided);
        if hi.is_after(lo) {
            let (a, b) = (lo.diff(s) as usize, hi.diff(s) as usize);
            self.send_built(ctx, lo, &payload[a..b]);
        } else if seg.payload_len > 0 && !e.is_after(seen) {
            ctx.counters.drop(DropReason::DuplicateSuppressed);
            ctx.counters.suppressed_bytes += seg.payload_len as u64;
        }
        let mut verdict = self.vote_accept(ctx, i, s, payload);
        // Stashed segments the new bytes reached.
        while verdict == Ok(true) {
            let Some(v) = self.vote.as_mut() else { return };
            let seen = v.seen[i];
            v.stash[i].retain(|(a, b)| a.add(b.len() as u32).is_after(seen));
            let Some(k) = v.stash[i].iter().position(|(a, _)| !a.is_after(seen)) else {
                break;
            };
            let (a, b) = v.stash[i].swap_remove(k);
            verdict = self.vote_accept(ctx, i, a, &b);
        }
        let Some(v) = self.vote.as_mut() else { return };
        let seen = v.seen[i];
        let decided = v.decided();
        let mut diverged_at = verdict.err();
        if diverged_at.is_none()
            && self.legs[i]
                .fin
                .is_some_and(|f| f == seen && f.is_before(decided))
        {
            // It closes where the majority's bytes go on.
            diverged_at = Some(seen);
        }
        if let Some(at) = diverged_at {
            let others = self.live_legs() - 1;
            self.diverge(ctx, i, at, others, true);
            self.settle(ctx);
            return;
        }
        // What the vote accepted of this replica is what it has sent.
        let end = seen.add((self.legs[i].fin == Some(seen)) as u32);
        if end.is_after(self.legs[i].hi) {
            self.legs[i].hi = end;
            self.legs[i].progress_at = ctx.now;
            self.confirm_aborts(ctx);
        }
        if seg.has(flags::FIN) && self.fin_sent && self.client_ack != self.sent_hi {
            // A repeated FIN the client has not acknowledged.
            self.emit_ack(ctx, true);
        }
        if self.client_ack.is_after(s) {
            self.ack_on_behalf(ctx, i);
        }
        self.settle(ctx);
    }

    /// Take `bytes` at `s` from leg `i`, where `s` is not after what the
    /// vote has of it: compare the part below the decided point with the
    /// decided bytes, offer the rest. `Ok(true)` when it has more of the
    /// leg than before, `Err(at)` when the leg contradicts the decided
    /// bytes at `at`.
    fn vote_accept(
        &mut self,
        ctx: &mut Ctx,
        i: usize,
        s: SeqNum,
        bytes: &[u8],
    ) -> Result<bool, SeqNum> {
        let Some(v) = self.vote.as_mut() else {
            return Ok(false);
        };
        let (decided, seen) = (v.decided(), v.seen[i]);
        let e = s.add(bytes.len() as u32);
        if !e.is_after(seen) {
            return Ok(false);
        }
        let fresh = &bytes[seen.diff(s) as usize..];
        let upto = e.min(decided);
        if upto.is_after(seen) {
            let n = upto.diff(seen) as usize;
            let from = seen.diff(v.base) as usize;
            if let Some(k) = v
                .agreed
                .range(from..from + n)
                .zip(&fresh[..n])
                .position(|(a, b)| a != b)
            {
                return Err(seen.add(k as u32));
            }
        }
        if e.is_after(decided) {
            if v.fin {
                // The majority closed here.
                return Err(decided);
            }
            let from = decided.max(seen);
            let rest = &bytes[from.diff(s) as usize..];
            if v.pending[i].len() + rest.len() > VOTE_MAX_PENDING {
                ctx.counters.drop(DropReason::VoteBufferFull);
                return Ok(false);
            }
            v.pending[i].extend_from_slice(rest);
        }
        v.seen[i] = e;
        Ok(true)
    }

    /// Leg `i` sent bytes that differ from what the others agreed on (or
    /// lost a tie): count it, say where, and take it out.
    fn diverge(&mut self, ctx: &mut Ctx, i: usize, at: SeqNum, agreeing: usize, blame: bool) {
        ctx.counters.divergences += 1;
        ctx.events.push_back(Event::Diverged {
            conn: self.key.to_string(),
            replica: self.legs[i].addr,
            offset: at.0.wrapping_sub(self.router_isn.0.wrapping_add(1)),
            agreeing,
            live: self.live_legs(),
        });
        if let Some(v) = &mut self.vote {
            v.pending[i] = Vec::new();
            v.stash[i] = Vec::new();
        }
        self.evict(ctx, i, EvictReason::Diverged, blame);
    }

    /// Let the vote decide what it can: send the bytes a majority of the
    /// live replicas agree on, evict those that contradict them, apply the
    /// tie policy when no majority can form, and let go of decided bytes
    /// every live replica has passed.
    fn vote_progress(&mut self, ctx: &mut Ctx) {
        loop {
            let Some(v) = self.vote.as_mut() else { return };
            if v.fin {
                break;
            }
            let decided = v.decided();
            let live: Vec<usize> = (0..self.legs.len())
                .filter(|&k| self.legs[k].open())
                .collect();
            if live.is_empty() {
                return;
            }
            let quorum = live.len() / 2 + 1;
            let offers: Vec<Offer> = live
                .iter()
                .map(|&k| Offer {
                    bytes: &v.pending[k],
                    fin: self.legs[k].fin == Some(v.seen[k]) && !v.seen[k].is_before(decided),
                })
                .collect();
            match vote::decide(&offers, quorum) {
                Outcome::Wait => break,
                Outcome::Decide {
                    from,
                    len,
                    fin,
                    diverged,
                } => {
                    let bytes: Vec<u8> = v.pending[live[from]][..len].to_vec();
                    for &k in &live {
                        let p = &mut v.pending[k];
                        let n = len.min(p.len());
                        p.drain(..n);
                    }
                    v.agreed.extend(&bytes);
                    v.fin = fin;
                    ctx.counters.voted_bytes += len as u64;
                    self.send_built(ctx, decided, &bytes);
                    self.sent_hi = self.sent_hi.max(decided.add(len as u32));
                    let agreeing = live.len() - diverged.len();
                    for (o, at) in diverged {
                        self.diverge(ctx, live[o], decided.add(at as u32), agreeing, true);
                    }
                }
                Outcome::Split { groups } => match v.tie {
                    Tie::First => {
                        // The group that holds the replica listed first.
                        let first =
                            |g: &Vec<usize>| g.iter().map(|&o| self.legs[live[o]].replica).min();
                        let Some(win) = groups.iter().min_by_key(|g| first(g)).cloned() else {
                            break;
                        };
                        for g in groups.iter().filter(|g| **g != win) {
                            for &o in g {
                                self.diverge(ctx, live[o], decided, win.len(), true);
                            }
                        }
                    }
                    Tie::Reset => {
                        // Nobody is blamed; the client is reset (by
                        // `settle`, with no replica left) rather than sent
                        // bytes no majority vouched for.
                        for g in &groups {
                            for &o in g {
                                self.diverge(ctx, live[o], decided, 0, false);
                            }
                        }
                        for &k in &live {
                            self.evict(ctx, k, EvictReason::Diverged, false);
                        }
                        return;
                    }
                },
            }
        }
        // Let go of decided bytes that every live replica has passed; a
        // replica too far behind for the buffer is evicted.
        loop {
            let Some(v) = self.vote.as_mut() else { return };
            for (k, l) in self.legs.iter().enumerate() {
                if !l.open() && (!v.pending[k].is_empty() || !v.stash[k].is_empty()) {
                    v.pending[k] = Vec::new();
                    v.stash[k] = Vec::new();
                }
            }
            let decided = v.decided();
            let slowest = (0..self.legs.len())
                .filter(|&k| self.legs[k].open())
                .min_by_key(|&k| v.seen[k].diff(decided));
            let Some(k) = slowest else { return };
            let upto = v.seen[k].min(decided);
            if upto.is_after(v.base) {
                let n = upto.diff(v.base) as usize;
                v.agreed.drain(..n);
                v.base = upto;
            }
            if v.agreed.len() <= VOTE_MAX_AGREED {
                return;
            }
            self.evict(ctx, k, EvictReason::Lagging, false);
        }
    }

    /// Build data segments to the client carrying `data` at `seq`, with the
    /// group's ACK, window and the router's timestamp. More than one
    /// segment's worth goes as a GSO super-packet that the kernel cuts.
    fn send_built(&mut self, ctx: &mut Ctx, seq: SeqNum, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let ack = self.group_ack().unwrap_or(self.client_hi);
        let edge = self.group_edge().unwrap_or(ack);
        let win = self.window_field(ack, edge);
        let ts = self
            .ts_on
            .then(|| (self.router_ts(ctx.now), self.client_tsval));
        let opt_len = if ts.is_some() { 12 } else { 0 };
        let seg_size = (self.client_mss as usize).saturating_sub(opt_len).max(1);
        let per_packet = (MAX_BUILT_PAYLOAD / seg_size).max(1) * seg_size;
        let (vip, client) = (self.key.vip, self.key.client);
        let mut off = 0usize;
        for chunk in data.chunks(per_packet) {
            let last = off + chunk.len() == data.len();
            let fl = if last {
                flags::ACK | flags::PSH
            } else {
                flags::ACK
            };
            let mut r = Repr::new(
                self.key.vport,
                self.key.cport,
                seq.add(off as u32),
                ack,
                fl,
                win,
            );
            r.timestamps = ts;
            let mut bytes = r.emit_ipv4(vip, client, chunk);
            let vnet = if chunk.len() > seg_size {
                // The checksum field holds the pseudo-header sum; the kernel
                // completes it for every segment it cuts.
                let ihl = ipv4::MIN_HEADER_LEN;
                let tcp_len = (bytes.len() - ihl) as u32;
                let partial = ftnet_wire::checksum::fold(ftnet_wire::checksum::pseudo_header(
                    vip,
                    client,
                    ipv4::PROTO_TCP,
                    tcp_len,
                ));
                bytes[ihl + 16..ihl + 18].copy_from_slice(&partial.to_be_bytes());
                VnetHdr {
                    flags: ftnet_wire::vnet::F_NEEDS_CSUM,
                    gso_type: ftnet_wire::vnet::GSO_TCPV4,
                    hdr_len: (ihl + r.header_len()) as u16,
                    gso_size: seg_size as u16,
                    csum_start: ihl as u16,
                    csum_offset: 16,
                }
            } else {
                VnetHdr::NONE
            };
            ctx.tx.push_back(Packet { vnet, data: bytes });
            ctx.counters.packets_out += 1;
            off += chunk.len();
        }
        ctx.counters.client_bytes_out += data.len() as u64;
        self.adv_ack = self.adv_ack.max(ack);
        self.adv_edge = self.adv_edge.max(edge);
    }

    /// Rewrite a replica's segment for the client and queue it.
    fn forward_to_client(
        &mut self,
        ctx: &mut Ctx,
        i: usize,
        mut p: Packet,
        seg: &Seg,
        seq_override: Option<SeqNum>,
        strip_fin: bool,
    ) {
        let ack = self.group_ack().unwrap_or(self.client_hi);
        let edge = self.group_edge().unwrap_or(ack);
        let win = self.window_field(ack, edge);
        let ts_now = self.router_ts(ctx.now);
        let seq = seq_override.unwrap_or(seg.seq.shift(self.legs[i].off));
        let vip = self.key.vip;
        let ts_on = self.ts_on;
        rewrite(&mut p, |ip, t| {
            ip.set_src(vip);
            t.update_pseudo_addr(seg.src, vip, seg.mode);
            t.set_seq(seq, seg.mode);
            if seg.has(flags::ACK) {
                t.set_ack(ack, seg.mode);
                t.set_window(win, seg.mode);
            }
            if let (true, Some((_, e))) = (ts_on, seg.ts) {
                // §III-D: the router's clock towards the client.
                t.set_timestamps(ts_now, e, seg.mode);
            }
            t.strip_sack(seg.mode);
            if strip_fin {
                // Not every live replica closed here yet: the FIN waits.
                t.set_flags(seg.flags & !flags::FIN, seg.mode);
            }
        });
        ctx.tx.push_back(p);
        ctx.counters.packets_out += 1;
        ctx.counters.client_bytes_out += seg.payload_len as u64;
        self.adv_ack = self.adv_ack.max(ack);
        self.adv_edge = self.adv_edge.max(edge);
    }

    /// An ACK to replica `i` in the client's name, for what the client
    /// acknowledged of the bytes this replica has sent.
    fn ack_on_behalf(&mut self, ctx: &mut Ctx, i: usize) {
        if !self.client_seen {
            // What the client acknowledged is not known yet.
            return;
        }
        self.send_ack_to(ctx, i);
        ctx.counters.acks_on_behalf += 1;
    }

    /// A pure ACK to replica `i` in the client's name: what the client
    /// acknowledged of the bytes this replica has sent.
    fn send_ack_to(&mut self, ctx: &mut Ctx, i: usize) {
        let a = self.client_ack.min(self.legs[i].hi);
        self.legs[i].ack_out = Some(a);
        let l = &self.legs[i];
        let ack = a.unshift(l.off);
        let mut r = Repr::new(
            self.key.cport,
            self.key.vport,
            self.client_hi,
            ack,
            flags::ACK,
            self.client_win,
        );
        if self.ts_on {
            r.timestamps = Some((self.client_tsval, l.ts_last));
        }
        ctx.tx
            .push_back(Packet::plain(r.emit_ipv4(self.key.client, l.addr, &[])));
        ctx.counters.packets_out += 1;
    }

    // ------------------------------------------------------------------
    // Group bookkeeping
    // ------------------------------------------------------------------

    /// Take replica leg `i` out of the connection: RST its side so that a
    /// partitioned replica frees the connection, and log why.
    pub fn evict(&mut self, ctx: &mut Ctx, i: usize, reason: EvictReason, service_wide: bool) {
        if self.announced && self.legs[i].state != LegState::Evicted {
            // Its agent forgets the connection: a router taking over must
            // not bring the replica back into it.
            ctx.events.push_back(Event::Forgotten {
                key: self.key,
                replicas: vec![self.legs[i].addr],
            });
        }
        if self.legs[i].state == LegState::Aborted {
            // It already reset its side; only the verdict was pending.
            self.legs[i].state = LegState::Evicted;
            ctx.counters.evictions += 1;
            let remaining = self.live_legs();
            ctx.events.push_back(Event::Evicted {
                conn: self.key.to_string(),
                replica: self.legs[i].addr,
                reason,
                remaining,
                detail: String::new(),
            });
            return;
        }
        let detail = match reason {
            EvictReason::Stalled | EvictReason::NoSynAck => self.silence_detail(i, ctx.now),
            _ => String::new(),
        };
        if !self.legs[i].live() {
            return;
        }
        let l = &self.legs[i];
        let (seq, ack, fl) = match l.state {
            LegState::Open => (self.client_hi, l.hi.unshift(l.off), flags::RST | flags::ACK),
            _ => (self.client_isn.add(1), SeqNum(0), flags::RST),
        };
        // RFC 5961 §3.2: a RST is accepted only at exactly RCV.NXT; the
        // replica's RCV.NXT is at most what it acknowledged of client_hi.
        let seq = if l.state == LegState::Open {
            l.ack.min(seq)
        } else {
            seq
        };
        let r = Repr::new(self.key.cport, self.key.vport, seq, ack, fl, 0);
        ctx.tx
            .push_back(Packet::plain(r.emit_ipv4(self.key.client, l.addr, &[])));
        ctx.counters.packets_out += 1;
        self.legs[i].state = LegState::Evicted;
        ctx.counters.evictions += 1;
        let remaining = self.live_legs();
        ctx.events.push_back(Event::Evicted {
            conn: self.key.to_string(),
            replica: self.legs[i].addr,
            reason,
            remaining,
            detail,
        });
        if service_wide {
            ctx.down.push((self.svc, self.legs[i].replica, reason));
        }
    }

    /// Why leg `i` looks dead, for the eviction's log line: how long ago
    /// it was heard from and made progress, and how far it is behind the
    /// furthest live replica and the client.
    fn silence_detail(&self, i: usize, now: Instant) -> String {
        let l = &self.legs[i];
        let ago = |t: Instant| now.saturating_sub(t).as_millis();
        let others = self
            .legs
            .iter()
            .enumerate()
            .filter(|&(j, o)| j != i && o.live() && o.open());
        let (mut ack_gap, mut out_gap) = (0i64, 0i64);
        for (_, o) in others {
            ack_gap = ack_gap.max(i64::from(o.ack.diff(l.ack)));
            out_gap = out_gap.max(i64::from(o.data_hi().diff(l.data_hi())));
        }
        let mut d = format!(
            "last heard {} ms ago, last progress {} ms ago",
            ago(l.seen_at),
            ago(l.progress_at)
        );
        if let Some(b) = l.behind_since {
            d += &format!(", behind for {} ms", ago(b));
        }
        if l.open() {
            d += &format!(
                "; it acknowledged {} client byte(s) less than the client sent and {ack_gap} less than the furthest replica, and sent {out_gap} byte(s) less",
                self.client_hi.diff(l.ack).max(0)
            );
        }
        if let Some(p) = l.probe_at {
            d += &format!("; last probed {} ms ago", ago(p));
        }
        d += &format!("; connection {:?}", self.phase);
        d
    }

    /// Where this connection stands, for the status.
    pub fn sample(&self) -> ConnSample {
        let cin = |x: SeqNum| x.diff(self.client_isn.add(1)) as u32;
        let out = |x: SeqNum| x.diff(self.router_isn.add(1)) as u32;
        ConnSample {
            conn: self.key.to_string(),
            phase: format!("{:?}", self.phase),
            recovering: self.recovering,
            adopted: self.from_agents,
            client_sent: cin(self.client_hi),
            client_was_sent: out(self.sent_hi),
            client_acked: out(self.client_ack),
            client_window: self.client_win,
            legs: self
                .legs
                .iter()
                .map(|l| LegSample {
                    addr: l.addr,
                    state: format!("{:?}", l.state),
                    sent: out(l.hi),
                    acked: cin(l.ack),
                    window_edge: cin(l.edge),
                    learned: l.learned,
                })
                .collect(),
        }
    }

    /// The leg of replica `replica` if `seq` (an ICMP error's quote) is
    /// the sequence number of a segment the router sent it and it has not
    /// acknowledged (RFC 5927 §4.1; Linux `tcp_v4_err` checks the same,
    /// SND.UNA ≤ seq ≤ SND.NXT). In SYN-SENT the only segment sent is the
    /// client's SYN, so the quote must be the client's ISN. An open leg was
    /// sent client bytes from what it acknowledged up to `client_hi` (and
    /// a liveness probe one octet below what it acknowledged).
    pub fn icmp_quote(&self, replica: usize, seq: SeqNum) -> Option<usize> {
        let i = self
            .legs
            .iter()
            .position(|l| l.replica == replica && l.live())?;
        let l = &self.legs[i];
        let ok = match l.state {
            LegState::SynSent => seq == self.client_isn,
            _ => {
                let lo = if l.probe_at.is_some() {
                    l.ack.sub(1)
                } else {
                    l.ack
                };
                !seq.is_before(lo) && !seq.is_after(self.client_hi)
            }
        };
        ok.then_some(i)
    }

    /// A verified ICMP destination unreachable for leg `i`: it leaves this
    /// connection (never the last replica: the connection's own failure
    /// detection judges that one), and only this one.
    pub fn unreachable(&mut self, ctx: &mut Ctx, i: usize) {
        if self.live_legs() <= 1 {
            return;
        }
        self.evict(ctx, i, EvictReason::Unreachable, false);
        self.settle(ctx);
    }

    /// Evict the leg of replica `replica` (service index) if it has one.
    pub fn evict_replica(&mut self, ctx: &mut Ctx, replica: usize, reason: EvictReason) {
        if let Some(i) = self
            .legs
            .iter()
            .position(|l| l.replica == replica && l.live())
        {
            if self.live_legs() == 1 {
                // Never the connection's last replica: with the others gone
                // (a router cut off from every replica host sees them all
                // "lost" one after the other) resetting the client helps
                // nobody. The connection's own failure detection judges it.
                return;
            }
            self.evict(ctx, i, reason, false);
            self.settle(ctx);
        }
    }

    /// A pure ACK (or FIN-ACK) to the client with the group's ACK and
    /// window.
    fn emit_ack(&mut self, ctx: &mut Ctx, fin: bool) {
        let (Some(ack), Some(edge)) = (self.group_ack(), self.group_edge()) else {
            return;
        };
        let seq = if fin {
            self.sent_hi.sub(1)
        } else {
            self.sent_hi
        };
        let fl = if fin {
            flags::ACK | flags::FIN
        } else {
            flags::ACK
        };
        let mut r = Repr::new(
            self.key.vport,
            self.key.cport,
            seq,
            ack,
            fl,
            self.window_field(ack, edge),
        );
        if self.ts_on {
            r.timestamps = Some((self.router_ts(ctx.now), self.client_tsval));
        }
        ctx.tx.push_back(Packet::plain(r.emit_ipv4(
            self.key.vip,
            self.key.client,
            &[],
        )));
        ctx.counters.packets_out += 1;
        self.adv_ack = self.adv_ack.max(ack);
        self.adv_edge = self.adv_edge.max(edge);
    }

    /// Re-derive what the client should hear after the group changed: the
    /// handshake completes, the ACK or window moves, a FIN all agreed on
    /// goes out, or, with no replica left, a RST.
    pub fn settle(&mut self, ctx: &mut Ctx) {
        if self.phase == Phase::Dead || self.phase == Phase::Closed {
            return;
        }
        if self.phase == Phase::Handshake && !self.legs.iter().any(|l| l.state == LegState::SynSent)
        {
            let open = self.legs.iter().any(|l| l.open());
            for i in 0..self.legs.len() {
                if self.legs[i].state == LegState::Refused {
                    if open {
                        // Others accept: nothing listens on this replica any
                        // more, for this or any new connection.
                        self.legs[i].state = LegState::SynSent;
                        self.evict(ctx, i, EvictReason::Reset, true);
                    } else {
                        // Every replica refused: that is the service's answer.
                        self.legs[i].state = LegState::Evicted;
                    }
                }
            }
        }
        if !matches!(self.phase, Phase::Handshake | Phase::Committing) && self.vote.is_some() {
            self.vote_progress(ctx);
        }
        if self.live_legs() == 0 {
            if matches!(self.phase, Phase::Handshake | Phase::Committing) {
                // Nobody takes the connection: refuse it.
                let r = Repr::new(
                    self.key.vport,
                    self.key.cport,
                    SeqNum(0),
                    self.client_isn.add(1),
                    flags::RST | flags::ACK,
                    0,
                );
                ctx.tx.push_back(Packet::plain(r.emit_ipv4(
                    self.key.vip,
                    self.key.client,
                    &[],
                )));
            } else {
                // RFC 5961: exactly the client's RCV.NXT, which is what it
                // last acknowledged.
                let r = Repr::new(
                    self.key.vport,
                    self.key.cport,
                    self.client_ack,
                    self.client_hi,
                    flags::RST | flags::ACK,
                    0,
                );
                ctx.tx.push_back(Packet::plain(r.emit_ipv4(
                    self.key.vip,
                    self.key.client,
                    &[],
                )));
                if !self.legs.iter().any(|l| l.state == LegState::Aborted) {
                    ctx.events.push_back(Event::ConnectionLost {
                        conn: self.key.to_string(),
                    });
                    ctx.counters.connections_lost += 1;
                }
            }
            ctx.counters.packets_out += 1;
            self.phase = Phase::Dead;
            return;
        }
        if self.phase == Phase::Handshake {
            if self.legs.iter().all(|l| l.state != LegState::SynSent) {
                match ctx.timeouts.record_commit {
                    Some(wait) if !wait.is_zero() => {
                        // Output commit: the record first (the router
                        // announces it after this input), then the SYN-ACK.
                        self.synack_options();
                        self.phase = Phase::Committing;
                        self.commit_by = ctx.now + wait;
                    }
                    _ => self.emit_synack(ctx),
                }
            }
            return;
        }
        if self.phase == Phase::Committing {
            return;
        }
        if !self.finish_recovery(ctx) {
            // Rebuilding: the client hears nothing until every live
            // replica told its position.
            return;
        }
        // A FIN every live replica sent at the same place.
        let mut fin_now = false;
        if let Some(v) = &self.vote {
            // Voting: a majority decided the FIN (one that closes elsewhere
            // is evicted); it goes out once every live replica closed there,
            // as without voting, so the client cannot finish the connection
            // while a replica still lags behind it.
            let f = v.decided();
            if !self.fin_sent
                && v.fin
                && self.sent_hi == f
                && self
                    .legs
                    .iter()
                    .filter(|l| l.live())
                    .all(|l| l.fin == Some(f))
            {
                self.sent_hi = v.decided().add(1);
                self.fin_sent = true;
                fin_now = true;
            }
        } else if !self.fin_sent {
            if let Some(f) = self.legs.iter().find(|l| l.live()).and_then(|l| l.fin) {
                if self
                    .legs
                    .iter()
                    .filter(|l| l.live())
                    .all(|l| l.fin == Some(f))
                    && !self.sent_hi.is_before(f)
                {
                    self.sent_hi = f.add(1);
                    self.fin_sent = true;
                    fin_now = true;
                }
            }
        }
        let (Some(ack), Some(edge)) = (self.group_ack(), self.group_edge()) else {
            return;
        };
        if fin_now || ack.is_after(self.adv_ack) || edge.is_after(self.adv_edge) {
            self.emit_ack(ctx, fin_now);
        }
        self.check_closed(ctx);
    }

    /// Both directions closed and acknowledged by everyone: enter the
    /// quiet period after which the router forgets the connection.
    fn check_closed(&mut self, ctx: &mut Ctx) {
        if self.phase != Phase::Established
            || !self.fin_sent
            || !self.client_seen
            || self.client_ack != self.sent_hi
        {
            return;
        }
        let Some(cf) = self.client_fin else { return };
        if self
            .legs
            .iter()
            .filter(|l| l.open())
            .all(|l| !l.ack.is_before(cf.add(1)))
        {
            // The others completed the connection: any reset still awaiting
            // its verdict was a crash.
            self.confirm_aborts(ctx);
            self.phase = Phase::Closed;
            self.closed_at = Some(ctx.now);
        }
    }

    fn abort_legs(&mut self, ctx: &mut Ctx) {
        for i in 0..self.legs.len() {
            if self.legs[i].live() || self.legs[i].state == LegState::Refused {
                let l = &self.legs[i];
                let r = Repr::new(
                    self.key.cport,
                    self.key.vport,
                    self.client_isn.add(1),
                    SeqNum(0),
                    flags::RST,
                    0,
                );
                ctx.tx
                    .push_back(Packet::plain(r.emit_ipv4(self.key.client, l.addr, &[])));
                ctx.counters.packets_out += 1;
                self.legs[i].state = LegState::Evicted;
            }
        }
    }

    /// Drop this connection to make room (SYN flood): free the replicas.
    pub fn discard_half_open(&mut self, ctx: &mut Ctx) {
        self.abort_legs(ctx);
        self.phase = Phase::Dead;
    }

    // ------------------------------------------------------------------
    // Timers
    // ------------------------------------------------------------------

    /// A leg is suspect when it owes an answer: another live leg has
    /// acknowledged or sent more, or answered the SYN while it did not, or
    /// it holds client bytes it has not acknowledged. (Position alone is not
    /// enough: a dead replica that was ahead would never look behind.)
    fn behind(&self, i: usize) -> bool {
        let l = &self.legs[i];
        if l.state == LegState::Open && !l.learned {
            // It owes the answer to the probe that asks its position.
            return true;
        }
        if self.recovering {
            // It told its position; until every replica has, nothing it
            // is sent could be judged (what the client has is not known).
            return false;
        }
        if l.state == LegState::Open && self.client_hi.is_after(l.ack) {
            return true;
        }
        self.legs.iter().enumerate().any(|(j, o)| {
            j != i
                && o.live()
                && match (l.state, o.state) {
                    (LegState::SynSent, LegState::Open) => true,
                    // Data only: a FIN the others did not send is no output
                    // they owe; alone it is the evidence of a crash that the
                    // next bytes from the others will confirm.
                    (LegState::Open, LegState::Open) => {
                        o.ack.is_after(l.ack) || o.data_hi().is_after(l.data_hi())
                    }
                    _ => false,
                }
        })
    }

    /// Another replica made progress while some reset: those resets were
    /// crashes, not the service's abort (§III-D).
    fn confirm_aborts(&mut self, ctx: &mut Ctx) {
        for j in 0..self.legs.len() {
            if self.legs[j].state == LegState::Aborted {
                self.evict(ctx, j, EvictReason::Reset, false);
            }
        }
    }

    /// When leg `i` is to be evicted, if it is suspect, and whether the
    /// others' behaviour makes that a service-wide verdict.
    ///
    /// A suspect leg fails when it stays silent for the detection time
    /// while another replica was heard from, or makes no progress for ten
    /// times that (at least 1 s) while another progressed: an application
    /// that stopped while its kernel still answers. When nobody else spoke
    /// either, the client's path or the client is the likelier culprit, and
    /// evicting everyone would turn a stall into a reset: then only a much
    /// longer silence (30 times, at least 3 s) counts, and only for this
    /// connection.
    fn fail_deadline(&self, i: usize, t: &Timeouts) -> Option<(Instant, bool)> {
        let l = &self.legs[i];
        if !l.live() || !self.behind(i) {
            return None;
        }
        let since = l.behind_since.unwrap_or(l.seen_at);
        let others = || {
            self.legs
                .iter()
                .enumerate()
                .filter(move |&(j, o)| j != i && o.live())
                .map(|(_, o)| o)
        };
        let silent_from = l.seen_at.max(since);
        let others_spoke = others().any(|o| o.seen_at > silent_from);
        let silent = if others_spoke {
            silent_from + t.failure_detection
        } else {
            silent_from + (t.failure_detection * 30).max(core::time::Duration::from_secs(3))
        };
        let stuck_from = l.progress_at.max(since);
        let others_progressed = others().any(|o| o.progress_at > stuck_from);
        if others_progressed {
            let stuck =
                stuck_from + (t.failure_detection * 10).max(core::time::Duration::from_secs(1));
            if stuck < silent {
                return Some((stuck.max(self.grace_until()), true));
            }
        }
        Some((silent.max(self.grace_until()), others_spoke))
    }

    /// While a suspect leg is silent it is probed every quarter of the
    /// detection time, so that a replica that is merely waiting for a lost
    /// segment answers and is not mistaken for a dead one.
    fn probe_deadline(&self, i: usize, t: &Timeouts) -> Instant {
        let l = &self.legs[i];
        let since = l.behind_since.unwrap_or(l.seen_at);
        let last = l
            .seen_at
            .max(since)
            .max(l.probe_at.unwrap_or(Instant::ZERO));
        last + t.failure_detection / 4
    }

    /// Note which legs fell behind (or caught up) with this input.
    pub fn update_behind(&mut self, now: Instant) {
        for i in 0..self.legs.len() {
            let b = self.legs[i].live() && self.behind(i);
            let l = &mut self.legs[i];
            match (b, l.behind_since) {
                (true, None) => l.behind_since = Some(now),
                (false, Some(_)) => l.behind_since = None,
                _ => {}
            }
        }
    }

    /// The earliest time this connection needs `on_timer`.
    pub fn next_deadline(&self, t: &Timeouts) -> Instant {
        let mut d = match self.phase {
            Phase::Closed => self.closed_at.unwrap_or(self.last_activity) + t.time_wait,
            Phase::Handshake | Phase::SynAckSent => {
                (self.created + t.handshake).min(self.last_activity + t.idle)
            }
            Phase::Committing => (self.created + t.handshake)
                .min(self.last_activity + t.idle)
                .min(self.commit_by),
            _ => self.last_activity + t.idle,
        };
        if self.phase != Phase::Closed {
            for i in 0..self.legs.len() {
                // Exactly the deadlines `on_timer` acts on: a deadline it
                // would not act on would spin the timer loop.
                if let Some((fail, _)) = self.fail_deadline(i, t) {
                    d = d.min(fail).min(self.probe_deadline(i, t));
                }
            }
            for l in &self.legs {
                if let (LegState::Aborted, Some(a)) = (l.state, l.aborted_at) {
                    d = d.min(a + t.failure_detection);
                }
            }
            if self.recovering && !self.expected.is_empty() {
                d = d.min(self.created + ADOPT_WAIT);
            }
        }
        d
    }

    /// Run what is due at `ctx.now`.
    pub fn on_timer(&mut self, ctx: &mut Ctx) {
        let t = ctx.timeouts;
        let now = ctx.now;
        match self.phase {
            Phase::Closed if self.closed_at.is_none_or(|c| c + t.time_wait <= now) => {
                self.phase = Phase::Dead;
                return;
            }
            Phase::Handshake | Phase::Committing | Phase::SynAckSent
                if self.created + t.handshake <= now =>
            {
                self.abort_legs(ctx);
                self.phase = Phase::Dead;
                return;
            }
            _ if self.last_activity + t.idle <= now => {
                // Like a NAT mapping, an idle connection is forgotten
                // silently; the endpoints' keep-alives would have kept it.
                self.phase = Phase::Dead;
                return;
            }
            _ => {}
        }
        if self.phase == Phase::Closed {
            return;
        }
        if self.phase == Phase::Committing && self.commit_by <= now {
            self.commit_synack(ctx, false);
        }
        // A reset that the others did not follow: that replica crashed.
        for i in 0..self.legs.len() {
            if self.legs[i].state == LegState::Aborted
                && self.legs[i]
                    .aborted_at
                    .is_some_and(|a| a + t.failure_detection <= now)
            {
                self.evict(ctx, i, EvictReason::Reset, false);
            }
        }
        for i in 0..self.legs.len() {
            let Some((due, service_wide)) = self.fail_deadline(i, t) else {
                continue;
            };
            if due <= now {
                let reason = if self.legs[i].state == LegState::SynSent {
                    EvictReason::NoSynAck
                } else {
                    EvictReason::Stalled
                };
                // A connection rebuilt from the agents' records may be one
                // that ended while no router watched: what it shows is no
                // evidence against the replica for other connections.
                self.evict(ctx, i, reason, service_wide && !self.from_agents);
            } else if self.probe_deadline(i, t) <= now {
                self.probe(ctx, i);
            }
        }
        self.settle(ctx);
    }

    /// Ask a silent replica whether it is alive. An open one gets a TCP
    /// keep-alive with one garbage octet (RFC 9293 §3.8.4): old data, which
    /// a live stack acknowledges at once (Linux does not rate-limit ACKs to
    /// segments that carry data). One that has not answered the SYN gets the
    /// client's SYN again.
    fn probe(&mut self, ctx: &mut Ctx, i: usize) {
        self.legs[i].probe_at = Some(ctx.now);
        if self.legs[i].state == LegState::SynSent {
            if let Some(base) = self.syn_copy.take() {
                self.send_syn(ctx, &base, self.key.vip, i);
                self.syn_copy = Some(base);
            }
            return;
        }
        let l = &self.legs[i];
        if !l.learned {
            // Its position is unknown. Two segments with one octet of old
            // data ending at the client's ISN, below anything it can still
            // accept, so that it answers with an ACK carrying its sequence
            // and acknowledgment numbers (RFC 9293 §3.10.7.4: "an
            // acknowledgment should be sent in reply"). Stacks differ in
            // which ACK number they let through to that check:
            // - its ISN + 1: Linux checks the sequence number first and
            //   answers in any state; a connection still in SYN-RECEIVED
            //   (killed between SYN-ACK and the client's ACK) takes it as
            //   the handshake's ACK number and answers too;
            // - far ahead (beyond its SND.NXT): smoltcp silently drops an
            //   ACK below its SND.UNA but answers one beyond SND.NXT. In
            //   SYN-RECEIVED this one draws a RST, which `replica_segment`
            //   recognises by its sequence number and ignores.
            //
            // With timestamps, PAWS comes first: Linux silently drops a pure
            // ACK below RCV.NXT whose TSval is older than the newest client
            // TSval it holds (TS.Recent), which this router may not know
            // (each replica saw the client's segments up to another point).
            // Two TSvals half the space apart: one of them is never older.
            // (The probes are out of window: TS.Recent is not updated.)
            let halves: &[u32] = if self.ts_on { &[0, 0x8000_0000] } else { &[0] };
            for &h in halves {
                let tsval = self.client_tsval.wrapping_add(h);
                for ack in [self.router_isn.add(1), self.probe_far_ack()] {
                    let mut r = Repr::new(
                        self.key.cport,
                        self.key.vport,
                        self.client_isn.sub(1),
                        ack.unshift(l.off),
                        flags::ACK,
                        self.client_win,
                    );
                    if self.ts_on {
                        r.timestamps = Some((tsval, 0));
                    }
                    // One garbage octet: Linux rate-limits its answers to
                    // out-of-window segments to one per 500 ms per
                    // connection, but not for segments that carry data (a
                    // pure ACK probe could go unanswered for half a second
                    // after the replica answered anything else). It sits
                    // just before the client's ISN: ending at the ISN, it
                    // is unacceptable even to a connection that has received
                    // nothing yet (RCV.NXT = ISN + 1), whose TS.Recent it
                    // would otherwise overwrite with the half-space TSval.
                    ctx.tx
                        .push_back(Packet::plain(r.emit_ipv4(self.key.client, l.addr, &[0])));
                    ctx.counters.packets_out += 1;
                }
            }
            return;
        }
        let seq = l.ack.sub(1);
        let ack_c = self.client_ack.min(l.hi);
        let ack = ack_c.unshift(l.off);
        let mut r = Repr::new(
            self.key.cport,
            self.key.vport,
            seq,
            ack,
            flags::ACK,
            self.client_win,
        );
        if self.ts_on {
            r.timestamps = Some((self.client_tsval, l.ts_last));
        }
        ctx.tx
            .push_back(Packet::plain(r.emit_ipv4(self.key.client, l.addr, &[0])));
        ctx.counters.packets_out += 1;
        self.legs[i].ack_out = Some(ack_c);
    }

    // ------------------------------------------------------------------
    // Status
    // ------------------------------------------------------------------

    /// (output lag, input lag) of leg `i` in bytes.
    pub fn lag(&self, i: usize) -> (u64, u64) {
        let l = &self.legs[i];
        let max_ack = self
            .legs
            .iter()
            .filter(|o| o.open())
            .map(|o| o.ack)
            .reduce(|a, b| a.max(b))
            .unwrap_or(l.ack);
        (
            self.sent_hi.diff(l.hi).max(0) as u64,
            max_ack.diff(l.ack).max(0) as u64,
        )
    }
}

/// TSecr for a replica: the client echoes router TSvals; map them back to
/// this replica's clock (§III-D), never beyond the latest TSval it sent.
fn translate_tsecr(e: u32, l: &Leg) -> u32 {
    if e == 0 {
        return 0;
    }
    let t = e.wrapping_sub(l.ts_off);
    if SeqNum(t).is_after(SeqNum(l.ts_last)) {
        l.ts_last
    } else {
        t
    }
}

/// Apply header edits to a packet that passed classification. The views
/// were validated then; should they fail now the packet is left alone.
pub fn rewrite(
    p: &mut Packet,
    f: impl FnOnce(&mut ipv4::Packet<&mut [u8]>, &mut tcp::Segment<&mut [u8]>),
) {
    let data = &mut p.data[..];
    let Ok(ip) = ipv4::Packet::new_checked(&mut data[..]) else {
        return;
    };
    let hl = ip.header_len();
    let total = ip.total_len();
    let (h, rest) = data.split_at_mut(hl);
    let mut ip = ipv4::Packet::new_unchecked(h);
    let Ok(mut t) = tcp::Segment::new_checked(&mut rest[..total - hl]) else {
        return;
    };
    f(&mut ip, &mut t);
}

/// The TCP payload of a packet that passed classification (empty should
/// the views fail now).
fn payload_of(p: &Packet) -> &[u8] {
    let Ok(ip) = ipv4::Packet::new_checked(&p.data[..]) else {
        return &[];
    };
    let (hl, total) = (ip.header_len(), ip.total_len());
    let Ok(t) = tcp::Segment::new_checked(&p.data[hl..total]) else {
        return &[];
    };
    &p.data[hl + t.header_len()..total]
}

/// Checksum mode from the offload header: a partial checksum when the
/// kernel asked for one to be completed, else a complete one.
pub fn csum_mode(v: &VnetHdr) -> CsumMode {
    if v.needs_csum() {
        CsumMode::Partial
    } else {
        CsumMode::Complete
    }
}
