//! Divergence detection without voting (`vote = "off"`, issue: divergence
//! is always detected). The client gets the first copy of each reply byte
//! at once; the later copies are compared after the fact, cheaply: each
//! live replica's stream is hashed in fixed blocks of [`BLOCK`] bytes of
//! the server stream (and at the end of each of its segments, so that a
//! short reply is compared too, not only once 4 KiB accumulated), and the
//! hashes the replicas give for the same point of the stream are compared.
//! A point is kept until every live replica gave its hash there or went
//! past it (a replica that cut its segments elsewhere gives the block
//! boundaries only).
//!
//! On a difference: counted (`divergences`) and logged with the connection
//! and the stream offset (`Event::OutputDiffers`). Where a majority of the
//! live replicas agree, the others are taken out — of the whole service
//! for a stateful one (a server whose replies differ holds another state;
//! every connection of it is suspect), of the connection for a stateless
//! one (its replies may differ where servers legitimately differ, an HTTP
//! `Date:` a second apart). With no majority (two replicas, or three that
//! all differ) nobody can be blamed: logged, counted, nobody evicted.
//!
//! Bounded: at most [`MAX_POINTS`] points per connection; past that the
//! oldest is dropped unchecked (counted: `unchecked_points`). A replica's
//! hash restarts at the next block boundary after a hole in what it sent
//! (a segment lost on its way to the router is not retransmitted once the
//! client acknowledged it from another replica), and a replica that joins
//! the connection, or one adopted after a takeover, starts there too.

use super::{Conn, Ctx};
use crate::event::{Event, EvictReason};
use crate::ids::LegId;
use ftnet_wire::SeqNum;
use std::collections::VecDeque;

/// Bytes of the server stream per block (the unit a replica's hash
/// restarts at).
pub(super) const BLOCK: u32 = 4096;
/// Comparison points kept per connection.
pub(super) const MAX_POINTS: usize = 256;

/// What a difference does (see the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CheckMode {
    /// A stateful service: a majority takes the others out of the service
    /// (else only out of the connection).
    pub(crate) service_wide: bool,
    /// The client follows one replica per connection (`Voting::Primary`):
    /// the others are compared with what the client got.
    pub(crate) primary: bool,
}

/// The standby's segments kept per connection while they are ahead of
/// the followed replica (sent on at once if it fails), and their bytes;
/// and the bytes all connections together keep.
const MAX_AHEAD: usize = 256;
const MAX_AHEAD_BYTES: usize = 1024 * 1024;
pub(crate) const AHEAD_TOTAL: u64 = 64 * 1024 * 1024;
/// Segments (and bytes) per leg that wait, copied, for a gap before them
/// to fill before they are hashed.
const OOO_SEGS: usize = 16;
const OOO_BYTES: usize = 64 * 1024;

/// A streaming 64-bit hash: eight independent lanes of 8 bytes per step
/// (64 bytes per round, so that the multiplications overlap: each lane's
/// chain is a rotate, a xor and a multiply, and eight keep the multiplier
/// busy); its value can be taken at any byte without ending it. Not
/// cryptographic: it catches replicas that differ by accident (a server
/// run nondeterministically), not an attacker (the replicas are the
/// operator's own).
#[derive(Debug, Clone, Copy)]
pub(super) struct StreamHash {
    lanes: [u64; LANES],
    /// Bytes not yet a whole round.
    buf: [u8; ROUND],
    nbuf: u32,
}

const LANES: usize = 8;
const ROUND: usize = 8 * LANES;
const K: u64 = 0x517c_c1b7_2722_0a95;

impl Default for StreamHash {
    fn default() -> Self {
        StreamHash {
            // Distinct starts: a word moved to another lane changes the value.
            lanes: [
                0x243f_6a88_85a3_08d3,
                0x1319_8a2e_0370_7344,
                0xa409_3822_299f_31d0,
                0x082e_fa98_ec4e_6c89,
                0x4528_21e6_38d0_1377,
                0xbe54_66cf_34e9_0c6c,
                0xc0ac_29b7_c97c_50dd,
                0x3f84_d5b5_b547_0917,
            ],
            buf: [0; ROUND],
            nbuf: 0,
        }
    }
}

impl StreamHash {
    fn step(h: u64, w: u64) -> u64 {
        // Each step is a bijection of `h` for a given word and of the word
        // for a given `h`: two streams that differ in one word always end
        // in different values.
        (h.rotate_left(5) ^ w).wrapping_mul(K)
    }

    fn word(b: &[u8]) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[..8]);
        u64::from_le_bytes(a)
    }

    /// One round over `lanes`, a copy of the state kept in registers by
    /// the caller (written back through `self` every round, each lane's
    /// chain went through memory: a store and its forwarded load).
    fn round(lanes: &mut [u64; LANES], r: &[u8]) {
        for (i, lane) in lanes.iter_mut().enumerate() {
            *lane = Self::step(*lane, Self::word(&r[8 * i..]));
        }
    }

    pub(super) fn update(&mut self, mut b: &[u8]) {
        let mut lanes = self.lanes;
        if self.nbuf > 0 {
            let at = self.nbuf as usize;
            let take = b.len().min(ROUND - at);
            self.buf[at..at + take].copy_from_slice(&b[..take]);
            self.nbuf += u32::try_from(take).unwrap_or(0);
            b = &b[take..];
            if (self.nbuf as usize) < ROUND {
                // All of it went into the buffer, which is still short.
                return;
            }
            let r = self.buf;
            Self::round(&mut lanes, &r);
            self.nbuf = 0;
        }
        let mut rounds = b.chunks_exact(ROUND);
        for r in &mut rounds {
            Self::round(&mut lanes, r);
        }
        self.lanes = lanes;
        let rest = rounds.remainder();
        self.buf[..rest.len()].copy_from_slice(rest);
        self.nbuf = u32::try_from(rest.len()).unwrap_or(0);
    }

    /// The value of what was hashed so far (the hash goes on).
    pub(super) fn value(&self) -> u64 {
        let mut x = self.lanes[0];
        for &l in &self.lanes[1..] {
            x = Self::step(x, l);
        }
        // The buffered bytes, zero-padded, and their count: "a" and "a\0"
        // differ.
        let mut pad = [0u8; ROUND];
        let n = self.nbuf as usize;
        pad[..n].copy_from_slice(&self.buf[..n]);
        for w in pad[..n.div_ceil(8) * 8].chunks_exact(8) {
            x = Self::step(x, Self::word(w));
        }
        x = Self::step(x, u64::from(self.nbuf));
        // fmix64 (MurmurHash3): every input bit reaches every output bit.
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^ (x >> 33)
    }
}

/// One replica's hashing.
#[derive(Debug, Clone, Copy, Default)]
struct LegHash {
    /// Next byte to hash (client space); `None` before its first segment.
    at: Option<SeqNum>,
    /// `h` covers the bytes from the start of `at`'s block to `at` (else it
    /// waits for a segment that covers the block boundary `at`).
    ok: bool,
    h: StreamHash,
}

/// A point of the server stream where hashes are compared.
#[derive(Debug)]
struct Point {
    pos: SeqNum,
    /// Per leg: its hash of the bytes from the block's start to `pos`.
    hashes: Vec<Option<u64>>,
    /// Its difference was decided (logged, acted on).
    decided: bool,
    /// With `primary`: the hash of what the client got there (the
    /// followed replica's, given when its bytes up to `pos` went out).
    client: Option<u64>,
}

/// The comparison state of one connection.
#[derive(Debug)]
pub(crate) struct Check {
    mode: CheckMode,
    /// The server stream's first byte (client space): blocks start at it.
    base: SeqNum,
    legs: Vec<LegHash>,
    /// Sorted by position.
    points: VecDeque<Point>,
    /// A difference with no majority was reported on this connection (the
    /// next ones are counted, not logged again).
    reported: bool,
    /// With `primary`: followers' segments beyond what the client got,
    /// kept (bounded) so that a failover sends them on at once instead of
    /// waiting for the new followed replica's retransmission timeout:
    /// (leg, packet, segment, where its bytes start in client space).
    pub(super) ahead: Vec<(usize, crate::packet::Packet, super::Seg, SeqNum)>,
    ahead_bytes: usize,
    /// `primary`: the leg the client follows and where its bytes began to
    /// go to the client (its hashes beyond are the client's, also those
    /// of segments hashed late, after a gap filled).
    lead_from: Option<(usize, SeqNum)>,
    /// Per leg: segments that came after a gap, waiting for it to fill.
    ooo: Vec<Vec<(SeqNum, Vec<u8>)>>,
    /// `primary`, per leg: the furthest point where its hash equalled
    /// what the client got there (its bytes up to it are the client's).
    verified: Vec<Option<SeqNum>>,
    /// `follow_on` runs (it judges, which settles, which would call it
    /// again).
    following_on: bool,
}

impl Check {
    pub(super) fn new(mode: CheckMode, base: SeqNum) -> Check {
        Check {
            mode,
            base,
            legs: Vec::new(),
            points: VecDeque::new(),
            reported: false,
            ahead: Vec::new(),
            ahead_bytes: 0,
            verified: Vec::new(),
            lead_from: None,
            ooo: Vec::new(),
            following_on: false,
        }
    }

    pub(super) fn primary(&self) -> bool {
        self.mode.primary
    }

    /// Whether a standby's segment of `n` bytes could be kept now
    /// (`total`: what every connection keeps).
    pub(super) fn has_room(&self, n: u32, total: u64) -> bool {
        self.ahead.len() < MAX_AHEAD
            && self.ahead_bytes + n as usize <= MAX_AHEAD_BYTES
            && total + u64::from(n) <= AHEAD_TOTAL
    }

    /// Keep a standby's segment that is ahead of what the client got
    /// (not when the bound is reached: a failover then waits for the
    /// retransmission).
    pub(super) fn keep_ahead(
        &mut self,
        i: usize,
        pkt: crate::packet::Packet,
        seg: &super::Seg,
        s: SeqNum,
        total: &mut u64,
    ) -> bool {
        if !self.has_room(seg.payload_len, *total) {
            return false;
        }
        self.ahead_bytes += seg.payload_len as usize;
        *total += u64::from(seg.payload_len);
        self.ahead.push((i, pkt, *seg, s));
        true
    }

    /// `primary`: how far leg `i`'s stream is known to be the client's.
    pub(super) fn verified(&self, i: usize) -> Option<SeqNum> {
        self.verified.get(i).copied().flatten()
    }

    /// The bytes kept (to give back to the router-wide total).
    pub(crate) fn ahead_held(&self) -> usize {
        self.ahead_bytes
    }

    /// Take the kept segments: those of leg `leader` that reach beyond
    /// `sent` (in stream order) are returned; those of other live legs
    /// that do are kept; the rest are dropped.
    pub(super) fn take_ahead(
        &mut self,
        leader: usize,
        sent: SeqNum,
        live: impl Fn(usize) -> bool,
        total: &mut u64,
    ) -> Vec<(crate::packet::Packet, super::Seg, SeqNum)> {
        if self.ahead.is_empty() {
            return Vec::new();
        }
        let mut out = Vec::new();
        let mut keep = Vec::new();
        *total = total.saturating_sub(self.ahead_bytes as u64);
        self.ahead_bytes = 0;
        for (i, p, seg, s) in self.ahead.drain(..) {
            if !s.add(seg.payload_len).is_after(sent) || !live(i) {
                continue;
            }
            if i == leader {
                out.push((p, seg, s));
            } else {
                self.ahead_bytes += seg.payload_len as usize;
                keep.push((i, p, seg, s));
            }
        }
        self.ahead = keep;
        *total += self.ahead_bytes as u64;
        out.sort_by(|a, b| a.2.diff(b.2).cmp(&0));
        out
    }

    fn offset(&self, s: SeqNum) -> u32 {
        s.0.wrapping_sub(self.base.0)
    }

    fn boundary(&self, s: SeqNum) -> bool {
        self.offset(s) % BLOCK == 0
    }

    /// The start of the block `s` lies in (`s` itself at a boundary).
    fn block_start(&self, s: SeqNum) -> SeqNum {
        s.sub(self.offset(s) % BLOCK)
    }

    /// The first block boundary at or after `s`.
    fn next_boundary(&self, s: SeqNum) -> SeqNum {
        let r = self.offset(s) % BLOCK;
        if r == 0 {
            s
        } else {
            s.add(BLOCK - r)
        }
    }

    /// Leg `i` sent `data` at `s` (client space): hash what is new, and
    /// return the points it gave a hash at.
    fn hash(&mut self, i: usize, s: SeqNum, data: &[u8]) -> Vec<(SeqNum, u64)> {
        if self.legs.len() <= i {
            self.legs.resize(i + 1, LegHash::default());
        }
        if self.ooo.len() <= i {
            self.ooo.resize_with(i + 1, Vec::new);
        }
        if self.legs[i].at.is_some_and(|a| s.is_after(a)) {
            // A gap before these bytes (a segment reordered or lost on
            // its way): they wait, copied, for it to fill (the replica
            // repeats what the client has not acknowledged).
            let held: usize = self.ooo[i].iter().map(|k| k.1.len()).sum();
            if self.ooo[i].len() < OOO_SEGS && held + data.len() <= OOO_BYTES {
                self.ooo[i].push((s, data.to_vec()));
                return Vec::new();
            }
            // Too much waits: the gap is a hole (what is missing will not
            // come again: the client acknowledged another replica's copy):
            // hashing restarts after it.
            let mut kept = std::mem::take(&mut self.ooo[i]);
            kept.push((s, data.to_vec()));
            kept.sort_by(|a, b| a.0.diff(b.0).cmp(&0));
            let mut out = Vec::new();
            for (ks, kd) in kept {
                out.extend(self.hash_in_order(i, ks, &kd));
            }
            return out;
        }
        let mut out = self.hash_in_order(i, s, data);
        // What waited for these bytes.
        while let Some(k) = self.ooo[i]
            .iter()
            .position(|k| self.legs[i].at.is_none_or(|a| !k.0.is_after(a)))
        {
            let (ks, kd) = self.ooo[i].swap_remove(k);
            out.extend(self.hash_in_order(i, ks, &kd));
        }
        out
    }

    /// `hash` for bytes that follow what leg `i` hashed (or start a hole).
    fn hash_in_order(&mut self, i: usize, s: SeqNum, data: &[u8]) -> Vec<(SeqNum, u64)> {
        let e = s.add(u32::try_from(data.len()).unwrap_or(u32::MAX));
        let mut lh = self.legs[i];
        let at = match lh.at {
            None => {
                // Its first bytes: from the stream's start, or from the
                // next block boundary (a leg that joined mid-stream).
                let b = self.next_boundary(s);
                lh.ok = b == s;
                b
            }
            Some(a) if s.is_after(a) => {
                // A hole: what it sent before `s` never reached the router.
                let b = self.next_boundary(s);
                lh.ok = b == s;
                lh.h = StreamHash::default();
                b
            }
            Some(a) => a,
        };
        let mut out = Vec::new();
        if !lh.ok {
            if !(at.is_before(e) && !at.is_before(s)) {
                lh.at = Some(at);
                self.legs[i] = lh;
                return out;
            }
            lh.ok = true;
            lh.h = StreamHash::default();
        }
        if !at.is_before(e) {
            // Nothing new (a repeat).
            lh.at = Some(at);
            self.legs[i] = lh;
            return out;
        }
        // Where other legs already gave a hash inside these bytes: this
        // leg gives its own there too, so that two legs compare wherever
        // either ended a segment, not only where both did.
        let stops: Vec<SeqNum> = self
            .points
            .iter()
            .map(|p| p.pos)
            .filter(|&q| q.is_after(at) && q.is_before(e) && !self.boundary(q))
            .collect();
        let mut stops = stops.into_iter().peekable();
        let mut pos = at;
        let mut rest = &data[usize::try_from(at.diff(s)).unwrap_or(0)..];
        while !rest.is_empty() {
            let to_boundary = BLOCK - self.offset(pos) % BLOCK;
            let to_stop = stops.peek().map_or(u32::MAX, |q| q.diff(pos).max(0) as u32);
            let n = rest.len().min(to_boundary.min(to_stop) as usize);
            lh.h.update(&rest[..n]);
            pos = pos.add(u32::try_from(n).unwrap_or(0));
            rest = &rest[n..];
            if self.boundary(pos) {
                out.push((pos, lh.h.value()));
                lh.h = StreamHash::default();
            } else if stops.peek() == Some(&pos) && !rest.is_empty() {
                out.push((pos, lh.h.value()));
            }
            while stops.peek().is_some_and(|&q| !q.is_after(pos)) {
                stops.next();
            }
        }
        if !self.boundary(pos) {
            out.push((pos, lh.h.value()));
        }
        lh.at = Some(pos);
        self.legs[i] = lh;
        out
    }

    /// Record leg `i`'s hash `h` at `pos`; `Some(point index)` if the point
    /// now has hashes to compare.
    fn record(&mut self, i: usize, pos: SeqNum, h: u64, unchecked: &mut u64) -> Option<usize> {
        let at = self.points.iter().rposition(|p| !pos.is_before(p.pos));
        let idx = match at {
            Some(k) if self.points[k].pos == pos => k,
            _ => {
                let k = at.map_or(0, |k| k + 1);
                self.points.insert(
                    k,
                    Point {
                        pos,
                        hashes: Vec::new(),
                        decided: false,
                        client: None,
                    },
                );
                k
            }
        };
        let p = &mut self.points[idx];
        if p.hashes.len() <= i {
            p.hashes.resize(i + 1, None);
        }
        p.hashes[i] = Some(h);
        let n = p.hashes.iter().flatten().count();
        let idx = if self.points.len() > MAX_POINTS {
            self.points.pop_front();
            *unchecked += 1;
            idx.checked_sub(1)?
        } else {
            idx
        };
        (n >= 2).then_some(idx)
    }
}

impl Conn {
    /// Whether the client follows one replica's stream (`primary`).
    pub(super) fn follows_one(&self) -> bool {
        self.check.as_ref().is_some_and(|c| c.primary())
    }

    /// `primary`: the leg the client follows: the one a rebuild chose
    /// (`Conn::lead`) while it serves, else the first open one (in the
    /// service's order) that is not a held joiner.
    pub(super) fn leader(&self) -> Option<usize> {
        let can = |l: &super::Leg| l.state == super::LegState::Open && !l.held && !l.detached;
        match self.lead {
            Some(i) if self.legs.get(i).is_some_and(can) => Some(i),
            _ => self.legs.iter().position(can),
        }
    }

    /// `primary`: the leg that would be followed if the followed one
    /// failed (the first other open one that is not a held joiner): its
    /// bytes ahead of the client are kept.
    pub(super) fn standby(&self) -> Option<usize> {
        let lead = self.leader()?;
        self.legs
            .iter()
            .enumerate()
            .find(|(i, l)| *i != lead && l.state == super::LegState::Open && !l.held && !l.detached)
            .map(|(i, _)| i)
    }

    /// The bytes this connection keeps (`Check::ahead`).
    pub(crate) fn ahead_held(&self) -> usize {
        self.check.as_ref().map_or(0, |c| c.ahead_held())
    }

    /// `primary`: the followed leg changed (the last one left): send on
    /// what its new replica sent ahead of the client, kept meanwhile —
    /// compared first with what the client got, so a replica whose stream
    /// is another leaves instead (the next one is tried; with none left the
    /// client is reset by `settle`).
    pub(super) fn follow_on(&mut self, ctx: &mut Ctx) {
        match self.check.as_mut() {
            Some(c) if !c.following_on && !c.ahead.is_empty() => c.following_on = true,
            _ => return,
        }
        while let Some(lead) = self.leader() {
            let sent = self.sent_hi;
            let live: Vec<bool> = self.legs.iter().map(|l| l.live()).collect();
            let Some(c) = self.check.as_mut() else { break };
            let go = c.take_ahead(
                lead,
                sent,
                |i| live.get(i).copied().unwrap_or(false),
                &mut ctx.counters.ahead_bytes,
            );
            if go.is_empty() {
                break;
            }
            for (p, seg, s) in go {
                let e = s.add(seg.payload_len);
                if !e.is_after(self.sent_hi) {
                    continue;
                }
                let from = self.sent_hi;
                self.check_output(ctx, lead, s, seg.at.payload(&p), Some(from));
                if !self.legs[lead].live() {
                    break;
                }
                self.check_ahead(ctx, e);
                // Its FIN, if any, goes once every live replica closed
                // there (`settle`).
                self.forward_to_client(
                    ctx,
                    lead,
                    p,
                    &seg,
                    None,
                    seg.has(ftnet_wire::tcp::flags::FIN),
                );
                self.sent_hi = e;
                ctx.counters.failover_sent_on += 1;
            }
            if self.leader() == Some(lead) {
                break;
            }
        }
        if let Some(c) = self.check.as_mut() {
            c.following_on = false;
        }
    }

    /// Compare later copies without voting (see the module). `s`: where
    /// `data` starts in client space; called for every data segment of
    /// open leg `i` of a connection that does not vote. `client_from`:
    /// leg `i` is the replica the client follows (`primary`), and its
    /// bytes beyond that point go to the client.
    pub(super) fn check_output(
        &mut self,
        ctx: &mut Ctx,
        i: usize,
        s: SeqNum,
        data: &[u8],
        client_from: Option<SeqNum>,
    ) {
        let Some(c) = self.check.as_mut() else {
            return;
        };
        if data.is_empty() || self.legs.len() < 2 {
            return;
        }
        let client_from = client_from.map(|from| match c.lead_from {
            Some((l, f)) if l == i => f,
            _ => {
                c.lead_from = Some((i, from));
                from
            }
        });
        let got = c.hash(i, s, data);
        self.record_hashes(ctx, i, got, client_from);
    }

    /// Record leg `i`'s hashes, the client's where `client_from` says so,
    /// and judge the points that can be.
    fn record_hashes(
        &mut self,
        ctx: &mut Ctx,
        i: usize,
        got: Vec<(SeqNum, u64)>,
        client_from: Option<SeqNum>,
    ) {
        let Some(c) = self.check.as_mut() else {
            return;
        };
        let mut to_judge = Vec::new();
        for (pos, h) in got {
            if let Some(k) = c.record(i, pos, h, &mut ctx.counters.unchecked_points) {
                to_judge.push(c.points[k].pos);
            }
            if let Some(from) = client_from.filter(|f| pos.is_after(*f)) {
                let _ = from;
                if let Some(p) = c.points.iter_mut().find(|p| p.pos == pos) {
                    p.client.get_or_insert(h);
                    if p.hashes.iter().flatten().count() >= 2 && !to_judge.contains(&pos) {
                        to_judge.push(pos);
                    }
                }
            }
        }
        for pos in to_judge {
            self.judge(ctx, pos, false);
        }
        self.prune_points(ctx);
    }

    /// `primary`: how far the standby's bytes are hashed when they come:
    /// up to the followed replica's output (`None`: all of them; the other
    /// followers' always). The rest waits in `Check::ahead` and is hashed
    /// as the followed replica gets there (`check_ahead`), so that the
    /// standby gives its hash at each point where the followed replica
    /// ended a segment: the stream a failover would continue is compared
    /// with the client's exactly, not only at block boundaries.
    pub(super) fn follower_hash_limit(&self, i: usize) -> Option<SeqNum> {
        if !self.follows_one() || self.standby() != Some(i) {
            return None;
        }
        let lead = self.leader()?;
        Some(self.legs[lead].data_hi())
    }

    /// `primary`: the followed replica's output reached `upto`: hash the
    /// followers' kept bytes up to there, in stream order.
    pub(super) fn check_ahead(&mut self, ctx: &mut Ctx, upto: SeqNum) {
        let Some(c) = self.check.as_mut() else { return };
        if c.ahead.is_empty() || self.legs.len() < 2 {
            return;
        }
        let mut work: Vec<(usize, SeqNum, Vec<u8>)> = Vec::new();
        for (j, p, seg, s) in &c.ahead {
            let at = c.legs.get(*j).and_then(|l| l.at).unwrap_or(*s);
            let e = s.add(seg.payload_len);
            let to = if e.is_after(upto) { upto } else { e };
            if !to.is_after(at) || at.is_before(*s) && !to.is_after(*s) {
                continue;
            }
            let data = seg.at.payload(p);
            let from = if at.is_after(*s) { at } else { *s };
            let a = usize::try_from(from.diff(*s)).unwrap_or(0);
            let b = usize::try_from(to.diff(*s)).unwrap_or(0);
            if a < b && b <= data.len() {
                work.push((*j, from, data[a..b].to_vec()));
            }
        }
        work.sort_by(|x, y| x.1.diff(y.1).cmp(&0));
        for (j, from, bytes) in work {
            if !self.legs.get(j).is_some_and(|l| l.live()) {
                continue;
            }
            let Some(c) = self.check.as_mut() else { return };
            let got = c.hash(j, from, &bytes);
            self.record_hashes(ctx, j, got, None);
        }
        self.prune_points(ctx);
    }

    /// The hashes at `pos` differ? Decide once a majority or every live
    /// leg spoke, or (`last`) the point is about to be forgotten.
    fn judge(&mut self, ctx: &mut Ctx, pos: SeqNum, last: bool) {
        let live: Vec<usize> = (0..self.legs.len())
            .filter(|&j| self.legs[j].counts())
            .collect();
        let Some(c) = self.check.as_ref() else { return };
        let Some(p) = c.points.iter().find(|p| p.pos == pos) else {
            return;
        };
        if p.decided {
            return;
        }
        let given: Vec<(usize, u64)> = live
            .iter()
            .filter_map(|&j| p.hashes.get(j).copied().flatten().map(|h| (j, h)))
            .collect();
        if c.mode.primary {
            if let Some(cl) = p.client {
                self.judge_followers(ctx, pos, cl, &live, &given);
                return;
            }
            if !last {
                // What the client got there is not known yet: its
                // replica has not passed the point.
                return;
            }
        }
        let first = given.first().map(|g| g.1);
        if given.iter().all(|g| Some(g.1) == first) {
            return;
        }
        // They differ. The value most legs gave, and how many.
        let (best, agreeing) = given
            .iter()
            .map(|&(_, h)| (h, given.iter().filter(|g| g.1 == h).count()))
            .max_by_key(|x| x.1)
            .unwrap_or((0, 0));
        let majority = agreeing * 2 > live.len();
        if !majority && given.len() < live.len() && !last {
            // The legs yet to speak may make a majority.
            return;
        }
        let (mode, reported) = (c.mode, c.reported);
        let offset = self.check.as_ref().map_or(0, |c| c.offset(pos));
        self.decided(pos);
        ctx.counters.divergences += 1;
        let differing: Vec<usize> = given
            .iter()
            .filter(|g| !majority || g.1 != best)
            .map(|g| g.0)
            .collect();
        let quiet = !majority && reported;
        if let Some(c) = self.check.as_mut() {
            c.reported |= !majority;
        }
        for &j in differing.iter().filter(|_| !quiet) {
            ctx.out.event(Event::OutputDiffers {
                conn: self.key.to_string(),
                replica: self.legs[j].addr,
                offset,
                agreeing,
                live: live.len(),
                evicted: majority,
                service_wide: majority && mode.service_wide,
                follows: None,
            });
        }
        if majority {
            for j in differing {
                self.evict(ctx, LegId(j), EvictReason::Diverged, mode.service_wide);
            }
            self.settle(ctx);
        }
    }

    fn decided(&mut self, pos: SeqNum) {
        if let Some(p) = self
            .check
            .as_mut()
            .and_then(|c| c.points.iter_mut().find(|p| p.pos == pos))
        {
            p.decided = true;
        }
    }

    /// `primary`: the live legs whose hash at `pos` differs from what the
    /// client got there (`cl`) leave the connection: the client follows
    /// one stream, and a replica whose stream is another can no longer
    /// stand in for it. Where a majority of the live legs agree on a
    /// value, the legs that gave another leave the service too when it is
    /// stateful (their state differs, as without `primary`): with the
    /// majority on the client's side those are the followers that differ;
    /// against it, the followed replica itself, and then nobody is left
    /// who could continue the client's stream: the client is reset
    /// (`settle`, with no replica left). With no majority, only the
    /// connection is left. Each leg is judged once (the point stays open
    /// for the legs yet to get there).
    fn judge_followers(
        &mut self,
        ctx: &mut Ctx,
        pos: SeqNum,
        cl: u64,
        live: &[usize],
        given: &[(usize, u64)],
    ) {
        if let Some(c) = self.check.as_mut() {
            for &(j, h) in given.iter().filter(|g| g.1 == cl) {
                if c.verified.len() <= j {
                    c.verified.resize(j + 1, None);
                }
                // The hash at `pos` covers its block's bytes before it:
                // verified further only where that joins what was verified
                // (a block not compared leaves a gap nothing later fills).
                let from = if c.boundary(pos) {
                    pos.sub(BLOCK)
                } else {
                    c.block_start(pos)
                };
                let joins = match c.verified[j] {
                    None => from == c.base,
                    Some(v) => !v.is_before(from),
                };
                if joins && c.verified[j].is_none_or(|v| pos.is_after(v)) {
                    c.verified[j] = Some(pos);
                }
                let _ = h;
            }
        }
        if given.iter().all(|g| g.1 == cl) {
            return;
        }
        let Some(c) = self.check.as_ref() else { return };
        let mode = c.mode;
        let offset = c.offset(pos);
        let (best, agreeing) = given
            .iter()
            .map(|&(_, h)| (h, given.iter().filter(|g| g.1 == h).count()))
            .max_by_key(|x| (x.1, x.0 == cl))
            .unwrap_or((cl, 0));
        let majority = agreeing * 2 > live.len() && live.len() > 1;
        ctx.counters.divergences += 1;
        // (leg, out of the service too)
        let out: Vec<(usize, bool)> = given
            .iter()
            .filter(|g| g.1 != cl || (majority && g.1 != best))
            .map(|g| (g.0, majority && g.1 != best && mode.service_wide))
            .collect();
        let follows = self
            .leader()
            .filter(|l| !out.iter().any(|o| o.0 == *l))
            .map(|l| self.legs[l].addr);
        for &(j, wide) in &out {
            ctx.out.event(Event::OutputDiffers {
                conn: self.key.to_string(),
                replica: self.legs[j].addr,
                offset,
                agreeing,
                live: live.len(),
                evicted: wide || !mode.service_wide || !self.legs[j].open(),
                service_wide: wide,
                follows,
            });
        }
        for (j, wide) in out {
            if !wide && mode.service_wide && self.legs[j].open() {
                // A stateful service, no verdict on its state: it keeps
                // taking the input (its server's state stays the group's);
                // its output is dropped from now on.
                self.legs[j].detached = true;
                ctx.counters.detached += 1;
            } else {
                self.evict(ctx, LegId(j), EvictReason::Diverged, wide);
            }
        }
        self.settle(ctx);
    }

    /// Forget the points every live leg gave a hash at or went past (one
    /// whose hashes differ is decided first).
    fn prune_points(&mut self, ctx: &mut Ctx) {
        loop {
            let live: Vec<usize> = (0..self.legs.len())
                .filter(|&j| self.legs[j].counts())
                .collect();
            let Some(c) = self.check.as_ref() else { return };
            let Some(p) = c.points.front() else { return };
            let done = live.iter().all(|&j| {
                p.hashes.get(j).copied().flatten().is_some()
                    || c.legs
                        .get(j)
                        .and_then(|l| l.at)
                        .is_some_and(|a| a.is_after(p.pos))
            });
            if !done {
                return;
            }
            let mut vals = p.hashes.iter().flatten();
            let differ = vals.next().is_some_and(|a| vals.any(|b| b != a));
            let pos = p.pos;
            if differ && !p.decided {
                self.judge(ctx, pos, true);
            }
            if let Some(c) = self.check.as_mut() {
                c.points.pop_front();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_does_not_depend_on_how_the_bytes_are_cut() {
        let data: Vec<u8> = (0..1000u32).map(|x| (x * 7 % 251) as u8).collect();
        let mut a = StreamHash::default();
        a.update(&data);
        for cut in [1, 3, 7, 8, 9, 31, 32, 33, 64, 500, 999] {
            let mut b = StreamHash::default();
            b.update(&data[..cut]);
            let _ = b.value();
            b.update(&data[cut..]);
            assert_eq!(a.value(), b.value(), "cut at {cut}");
        }
        // Byte by byte, and in odd pieces.
        let mut b = StreamHash::default();
        for x in &data {
            b.update(std::slice::from_ref(x));
        }
        assert_eq!(a.value(), b.value(), "byte by byte");
        let mut b = StreamHash::default();
        let mut at = 0;
        for n in (1..).map(|k| k % 11 + 1) {
            let e = (at + n).min(data.len());
            b.update(&data[at..e]);
            at = e;
            if at == data.len() {
                break;
            }
        }
        assert_eq!(a.value(), b.value(), "odd pieces");
        let mut c = StreamHash::default();
        let mut d = data.clone();
        d[500] ^= 1;
        c.update(&d);
        assert_ne!(a.value(), c.value());
        let (mut x, mut y) = (StreamHash::default(), StreamHash::default());
        x.update(b"a");
        y.update(b"a\0");
        assert_ne!(x.value(), y.value());
        // Two words of a round swapped.
        let mut e = data.clone();
        let (w0, w1) = (e[..8].to_vec(), e[8..16].to_vec());
        e[..8].copy_from_slice(&w1);
        e[8..16].copy_from_slice(&w0);
        let mut z = StreamHash::default();
        z.update(&e);
        assert_ne!(a.value(), z.value());
    }

    #[test]
    fn points_fall_at_block_boundaries_and_segment_ends() {
        let mut c = Check::new(
            CheckMode {
                service_wide: true,
                primary: false,
            },
            SeqNum(1000),
        );
        let got = c.hash(0, SeqNum(1000), &[1u8; 5000]);
        let pos: Vec<u32> = got.iter().map(|g| g.0 .0 - 1000).collect();
        assert_eq!(pos, vec![4096, 5000]);
        // Leg 1 cut the same bytes otherwise: the boundary's hash agrees.
        let a = c.hash(1, SeqNum(1000), &[1u8; 4000]);
        let b = c.hash(1, SeqNum(5000), &[1u8; 1000]);
        assert_eq!(a[0].0 .0 - 1000, 4000);
        assert_eq!(b[0], got[0]);
        assert_eq!(b[1], got[1]);
        // A leg whose first bytes are mid-block starts at the next boundary.
        let j = c.hash(2, SeqNum(3000), &[1u8; 3000]);
        assert_eq!(j, vec![got[1]]);
    }
}
