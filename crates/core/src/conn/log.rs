//! The input log (`Ack::Log`; FT-TCP §4.4's acknowledgment strategies): the
//! client is acknowledged once the router holds its bytes and
//! `replicas` live replicas acknowledged them, not once the slowest did.
//! The router keeps each connection's client bytes from where the slowest
//! live replica stands to what the client sent, and sends a replica that
//! lacks some of them what it lacks itself: the client will not, it saw
//! them acknowledged.
//!
//! What it holds: only bytes contiguous from the slowest replica's
//! position (`base`). A segment beyond a hole is not logged; the client
//! is never acknowledged beyond the log's end unless every replica has
//! the bytes, so the client sends them again. The log is bounded per
//! connection (`Limits::log_per_connection`: the client's window never
//! reaches further beyond the slowest replica) and router-wide
//! (`Limits::log_total`: beyond it new bytes are not logged and wait for
//! every replica, as with `Ack::All`).
//!
//! Sending to a replica: the router keeps, per leg, the end of what it sent
//! that the replica's window could take (`Leg::log_nxt`). A replica's ACK
//! that opens its window gets the logged bytes beyond that; its duplicate
//! ACK (a segment lost on the way) gets the missing segment once per hole;
//! a replica silent while it lacks bytes gets them again from its ACK on
//! when its liveness probe is due (`Conn::probe`), which the data then is.

use super::{Conn, Ctx, MAX_WIN};
use crate::config::Ack;
use crate::packet::Packet;
use crate::wrap::len32;
use ftnet_wire::tcp::{flags, Repr};
use ftnet_wire::SeqNum;
use std::collections::VecDeque;

/// The client's reset waits for replicas that have not acknowledged all
/// it sent (`Conn::wait_reset`).
#[derive(Debug, Clone, Copy)]
pub(super) struct ResetWait {
    /// What each replica must acknowledge before its reset: what the
    /// client sent; once the wait is over, what the furthest one did.
    pub(super) top: SeqNum,
    /// When the client reset.
    pub(super) since: crate::time::Instant,
    /// The furthest any replica acknowledged (those reset already too).
    pub(super) reached: SeqNum,
}

/// Segments one call may send one replica from the log; its ACKs clock
/// the rest.
const BURST: usize = 32;

/// A replica that lacks logged bytes and made no progress for this long is
/// sent them again from what it acknowledged (at most a quarter of the
/// failure-detection time).
pub(super) const LOG_RTO: core::time::Duration = core::time::Duration::from_millis(20);

/// A connection's input log.
#[derive(Debug)]
pub(super) struct InLog {
    /// Client-stream position of `bytes[0]`.
    base: SeqNum,
    bytes: VecDeque<u8>,
    /// Live replicas that must acknowledge a byte, besides the log,
    /// before the client is acknowledged.
    replicas: usize,
    /// Bytes it may hold.
    cap: usize,
}

impl InLog {
    /// End of the logged bytes (client stream).
    pub(super) fn end(&self) -> SeqNum {
        self.base.add(len32(self.bytes.len()))
    }

    pub(super) fn held(&self) -> usize {
        self.bytes.len()
    }
}

impl Conn {
    /// The service's acknowledgment strategy, for a new connection (an
    /// adopted one keeps none: the router that took over has no bytes of
    /// it, and acknowledges what every replica has).
    ///
    /// `stateful`: the service's servers keep state between connections, so
    /// a replica that lost input of one connection (`evict_log_lost`) is
    /// taken out of the whole service.
    pub(crate) fn set_ack(&mut self, ack: Ack, cap: usize, stateful: bool) {
        self.log_lost = (self.is_adopted() && matches!(ack, Ack::Log { .. })).then_some(stateful);
        self.log = match ack {
            Ack::Log { replicas } if cap > 0 && !self.is_adopted() => Some(Box::new(InLog {
                base: self.client_isn.add(1),
                bytes: VecDeque::new(),
                replicas: usize::from(replicas.max(1)),
                cap,
            })),
            _ => None,
        };
    }

    /// An adopted connection of a service that acknowledges from the log,
    /// rebuilt: a replica behind another may lack bytes the client was
    /// acknowledged from the old router's log, which nobody can send it
    /// any more. It leaves this connection (`EvictReason::LogLost`), and
    /// of a stateful service the whole service: its server would go on
    /// without input the others applied (it comes back through a join);
    /// the furthest stay.
    pub(super) fn evict_log_lost(&mut self, ctx: &mut Ctx) {
        let Some(service_wide) = self.log_lost.take() else {
            return;
        };
        let Some(top) = self.kth_open(1, |l| l.ack) else {
            return;
        };
        for i in 0..self.legs.len() {
            if self.legs[i].open() && self.legs[i].ack.is_before(top) {
                self.evict(
                    ctx,
                    crate::ids::LegId(i),
                    crate::event::EvictReason::LogLost,
                    service_wide,
                );
            }
        }
    }

    /// Client bytes this connection's log holds (to give back to the
    /// router-wide count when it goes).
    pub(crate) fn log_held(&self) -> usize {
        self.log.as_ref().map_or(0, |l| l.held())
    }

    /// The `k`-th largest of `f` over the open legs (the smallest, if
    /// fewer are open).
    pub(super) fn kth_open(&self, k: usize, f: impl Fn(&super::Leg) -> SeqNum) -> Option<SeqNum> {
        // Called for every segment the client is sent: no allocation for
        // the usual group sizes.
        const SMALL: usize = 16;
        let mut small = [SeqNum(0); SMALL];
        let mut n = 0;
        let mut big = Vec::new();
        for l in self.legs.iter().filter(|l| l.open()) {
            if n < SMALL {
                small[n] = f(l);
            } else {
                if big.is_empty() {
                    big.extend_from_slice(&small);
                }
                big.push(f(l));
            }
            n += 1;
        }
        let v: &mut [SeqNum] = if n > SMALL { &mut big } else { &mut small[..n] };
        let r = *v.first()?;
        // Ordered by distance from one of them (they lie within 2^30).
        v.sort_unstable_by_key(|x| core::cmp::Reverse(x.diff(r)));
        Some(v[k.clamp(1, v.len()) - 1])
    }

    /// What every open leg acknowledged (`Ack::All`'s group ACK).
    pub(super) fn all_ack(&self) -> Option<SeqNum> {
        self.legs
            .iter()
            .filter(|l| l.open())
            .map(|l| l.ack)
            .reduce(|a, b| a.min(b))
    }

    /// With a log: how far the client may be acknowledged beyond what
    /// every replica has — what `replicas` of them acknowledged, within
    /// what the log holds (the client's FIN counted once the log holds
    /// every byte before it).
    pub(super) fn log_ack(&self, all: SeqNum) -> SeqNum {
        let Some(log) = &self.log else { return all };
        let Some(kth) = self.kth_open(log.replicas, |l| l.ack) else {
            return all;
        };
        let mut lim = log.end();
        if self.client_fin == Some(lim) {
            lim = lim.add(1);
        }
        all.max(kth.min(lim))
    }

    /// With a log: the right window edge the client may be offered — what
    /// `replicas` replicas' windows take, no further than the log can hold
    /// beyond the slowest replica.
    pub(super) fn log_edge(&self, all: SeqNum) -> SeqNum {
        let Some(log) = &self.log else { return all };
        let (Some(kth), Some(slow)) = (self.kth_open(log.replicas, |l| l.edge), self.all_ack())
        else {
            return all;
        };
        all.max(kth.min(slow.add(len32(log.cap))))
    }

    /// How far the sequencer may number a connection's bytes given the
    /// smallest window `edge` of its replicas: with a log, also what the
    /// log holds (each replica gets it from the router when its window
    /// opens).
    pub(super) fn log_reach(&self, edge: SeqNum) -> SeqNum {
        self.log.as_ref().map_or(edge, |l| edge.max(l.end()))
    }

    /// Drop what every open leg has; keep the log starting where the
    /// slowest one stands.
    pub(super) fn log_trim(&mut self, ctx: &mut Ctx) {
        let Some(all) = self.all_ack() else { return };
        let Some(log) = self.log.as_deref_mut() else {
            return;
        };
        if !all.is_after(log.base) {
            return;
        }
        let n = usize::try_from(all.diff(log.base)).unwrap_or(0);
        let n = n.min(log.bytes.len());
        log.bytes.drain(..n);
        ctx.counters.log_bytes = ctx.counters.log_bytes.saturating_sub(n as u64);
        if log.bytes.is_empty() {
            log.base = all;
        } else {
            log.base = log.base.add(len32(n));
        }
    }

    /// Log a client segment's payload `data` at `seq`: the part contiguous
    /// with the log's end, as far as the bounds allow.
    pub(super) fn log_client(&mut self, ctx: &mut Ctx, seq: SeqNum, data: &[u8]) {
        if self.log.is_none() || data.is_empty() {
            return;
        }
        self.log_trim(ctx);
        let Some(log) = self.log.as_deref_mut() else {
            return;
        };
        let end = log.end();
        let s_end = seq.add(len32(data.len()));
        if seq.is_after(end) || !s_end.is_after(end) {
            // Beyond a hole, or nothing new.
            return;
        }
        let skip = usize::try_from(end.diff(seq)).unwrap_or(0);
        let held = usize::try_from(ctx.counters.log_bytes).unwrap_or(usize::MAX);
        let budget = ctx.log_total.saturating_sub(held);
        let room = log.cap.saturating_sub(log.bytes.len()).min(budget);
        let take = (data.len() - skip).min(room);
        if take < data.len() - skip {
            ctx.counters.log_full += 1;
        }
        log.bytes.extend(&data[skip..skip + take]);
        ctx.counters.log_bytes += take as u64;
    }

    /// A client segment (payload `len`, FIN `fin`) at `seq` went to leg
    /// `i`: note what of it the replica's window could take.
    pub(super) fn log_forwarded(&mut self, i: usize, seq: SeqNum, len: u32, fin: bool) {
        if self.log.is_none() {
            return;
        }
        let l = &mut self.legs[i];
        let end = seq.add(len + u32::from(fin));
        if !seq.is_after(l.log_nxt) && (seq.is_before(l.edge) || len == 0) {
            l.log_nxt = l.log_nxt.max(end);
        }
    }

    /// Leg `i` acknowledged: `dup` when it repeats its ACK (a hole in what
    /// it received). Sends it what of the log it lacks and its window
    /// takes.
    pub(super) fn log_serve(&mut self, ctx: &mut Ctx, i: usize, dup: bool) {
        let Some(end) = self.log_want(i) else {
            self.legs[i].log_dup_at = None;
            return;
        };
        let l = &mut self.legs[i];
        if l.log_nxt.is_before(l.ack) {
            l.log_nxt = l.ack;
        }
        let ack = l.ack;
        if dup && l.log_dup_at != Some(ack) && l.log_nxt.is_after(ack) {
            // One segment at the hole, once per hole.
            l.log_dup_at = Some(ack);
            self.log_send(ctx, i, ack, end, 1);
        }
        let from = self.legs[i].log_nxt;
        self.log_send(ctx, i, from, end, BURST);
    }

    /// Leg `i` is silent while it lacks logged bytes: send them again from
    /// what it acknowledged (`true`), which asks whether it lives as a
    /// keep-alive would. `false`: the log has nothing it lacks.
    pub(super) fn log_resend(&mut self, ctx: &mut Ctx, i: usize) -> bool {
        let Some(end) = self.log_want(i) else {
            return false;
        };
        let ack = self.legs[i].ack;
        self.legs[i].log_nxt = ack;
        self.log_send(ctx, i, ack, end, BURST);
        true
    }

    /// The client's exact RST, with a log: a replica that lacks bytes the
    /// log holds would take the abort with less input than the others had
    /// (its shim counts a reset connection's chunks complete), and its
    /// server's state would part from theirs. So each replica is reset
    /// only once it has every logged byte (AR-TCP's safe delivery for the
    /// client's last words); the connection stays until then, the client
    /// no longer part of it. `false`: no replica lacks anything, the abort
    /// goes to every one at once as without a log.
    pub(super) fn log_reset(&mut self, ctx: &mut Ctx) -> bool {
        if self.log.is_none() || !(0..self.legs.len()).any(|i| self.log_lacks(i)) {
            return false;
        }
        self.resetting = true;
        for i in 0..self.legs.len() {
            if self.log_lacks(i) {
                let from = self.legs[i].ack;
                let end = self.log_want(i).unwrap_or(from);
                self.legs[i].log_nxt = from;
                self.log_send(ctx, i, from, end, BURST);
            }
        }
        self.reset_caught_up(ctx);
        true
    }

    /// The client's exact RST where no log holds what a replica lacks:
    /// an open replica that acknowledged less than the client sent may
    /// lack bytes the others' servers take (lost on the way to it: nobody
    /// holds a copy, and the client will not send them again), or it may
    /// hold them and its ACK be on its way, or delayed. Reset now, it would take the
    /// abort with less input than the others (its shim counts a reset
    /// connection's chunks complete) or not take it at all (a RST beyond
    /// its RCV.NXT is only challenged, RFC 5961 §3.2, and the chunk it
    /// lacks then holds its server's input for ever, without a word).
    /// So the replicas that acknowledged it all are reset now; each other
    /// one is asked where it stands (a probe: it answers at once) and
    /// reset as soon as it acknowledged it all. One that has not by
    /// the failure-detection time lacks the bytes and leaves the service
    /// (`EvictReason::InputLost`, loudly, `Timer::ResetWait`). A client
    /// cannot evict a healthy replica this way: one that has the bytes
    /// says so within the wait. `false`: nobody is behind, the abort goes
    /// to every replica at once.
    pub(super) fn wait_reset(&mut self, ctx: &mut Ctx) -> bool {
        if self.recovering() {
            return false;
        }
        // Everything the client sent: a replica that got it acknowledges
        // it (its ACK may not have reached the router yet: the request and
        // the RST come back to back); the sequencer numbered it as it went
        // through, within every replica's window, and a replica's server
        // that lacks a numbered chunk would wait for it for ever.
        let Some(reached) = self.furthest_ack() else {
            return false;
        };
        let top = if self.client_hi.is_after(reached) {
            self.client_hi
        } else {
            reached
        };
        self.reset_wait = Some(ResetWait {
            top,
            since: ctx.now,
            reached,
        });
        let behind: Vec<usize> = (0..self.legs.len())
            .filter(|&i| self.reset_lacks(i))
            .collect();
        if behind.is_empty() {
            self.reset_wait = None;
            return false;
        }
        self.resetting = true;
        for i in behind {
            self.probe(ctx, i);
        }
        self.reset_caught_up(ctx);
        true
    }

    /// The furthest acknowledgment of an open replica whose position is
    /// known.
    fn furthest_ack(&self) -> Option<SeqNum> {
        self.legs
            .iter()
            .filter(|l| l.open() && l.learned)
            .map(|l| l.ack)
            .reduce(|a, b| if b.is_after(a) { b } else { a })
    }

    /// While the client's reset waits: a replica acknowledged this far.
    fn reset_reached_to(&mut self, a: SeqNum) {
        if let Some(w) = self.reset_wait.as_mut() {
            if a.is_after(w.reached) {
                w.reached = a;
            }
        }
    }

    /// Open leg `i` must acknowledge more before the client's reset
    /// reaches it: bytes the log holds, or (`reset_wait`) bytes another
    /// replica acknowledged.
    pub(super) fn reset_lacks(&self, i: usize) -> bool {
        let l = &self.legs[i];
        self.log_lacks(i)
            || self
                .reset_wait
                .is_some_and(|w| l.open() && l.learned && l.ack.is_before(w.top))
    }

    /// `Timer::ResetWait` is due: a replica still behind the furthest
    /// acknowledgment lacks bytes another replica's server takes, and
    /// leaves the service; the others are reset where they stand (bytes
    /// none of them acknowledged are input none of them has: the same for
    /// every one).
    pub(super) fn reset_wait_over(&mut self, ctx: &mut Ctx) {
        if let Some(f) = self.furthest_ack() {
            self.reset_reached_to(f);
        }
        if let Some(w) = self.reset_wait.as_mut() {
            if w.reached.is_before(w.top) {
                w.top = w.reached;
            }
        }
        for i in 0..self.legs.len() {
            if self.reset_lacks(i) && !self.log_lacks(i) {
                self.evict(
                    ctx,
                    crate::ids::LegId(i),
                    crate::event::EvictReason::InputLost,
                    true,
                );
            }
        }
        self.reset_wait = None;
        self.reset_caught_up(ctx);
    }

    /// While the client's reset waits (`log_reset`, `wait_reset`): every
    /// open replica that has every byte it must have is reset now; once
    /// none is left the connection is gone.
    pub(super) fn reset_caught_up(&mut self, ctx: &mut Ctx) {
        for i in 0..self.legs.len() {
            if !self.legs[i].live() || self.reset_lacks(i) {
                continue;
            }
            if self.legs[i].open() && self.legs[i].learned {
                self.reset_reached_to(self.legs[i].ack);
            }
            let l = &self.legs[i];
            let (seq, ack, fl) = if l.open() {
                // RFC 5961 §3.2 at the replica: exactly its RCV.NXT.
                (l.ack, l.hi.unshift(l.off), flags::RST | flags::ACK)
            } else {
                (self.client_isn.add(1), SeqNum(0), flags::RST)
            };
            let r = Repr::new(self.key.cport, self.key.vport, seq, ack, fl, 0);
            ctx.tx
                .push_back(Packet::plain(r.emit_ipv4(self.key.client, l.addr, &[])));
            ctx.counters.packets_out += 1;
            if l.open() && self.client_hi.is_after(l.ack) && self.client_hi.diff(l.ack) <= MAX_WIN {
                // Client bytes forwarded to it are still on the way: once
                // they arrive its RCV.NXT is past what it acknowledged, and
                // the RST above is out of its window (dropped). A second
                // one at the end of what it was sent is exact then (the
                // connection is forgotten here: a challenge ACK would go
                // unanswered, and the replica's server would hold the
                // connection until its own timeouts). The one that is not
                // exact changes nothing (RFC 5961 §3.2).
                let r = Repr::new(
                    self.key.cport,
                    self.key.vport,
                    self.client_hi,
                    ack,
                    flags::RST | flags::ACK,
                    0,
                );
                ctx.tx
                    .push_back(Packet::plain(r.emit_ipv4(self.key.client, l.addr, &[])));
                ctx.counters.packets_out += 1;
            }
            self.legs[i].state = super::LegState::Evicted;
        }
        if self.live_legs() == 0 {
            self.phase = super::Phase::Dead;
        }
    }

    /// A segment from leg `i` while the client's reset waits: only what
    /// it acknowledged counts (nothing goes to the client).
    pub(super) fn resetting_segment(&mut self, ctx: &mut Ctx, i: usize, seg: &super::Seg) {
        if seg.has(flags::RST) {
            // It let go of the connection itself.
            self.legs[i].state = super::LegState::Evicted;
        } else if seg.has(flags::ACK) {
            let a = seg.ack.min(self.client_hi);
            let l = &mut self.legs[i];
            let dup = a == l.ack;
            if a.is_after(l.ack) {
                l.ack = a;
                l.progress_at = ctx.now;
            }
            l.edge = a.add(u32::from(seg.window) << l.wscale);
            l.seen_at = ctx.now;
            self.log_trim(ctx);
            self.log_serve(ctx, i, dup);
        }
        self.reset_caught_up(ctx);
    }

    /// Open leg `i` lacks bytes the log holds.
    pub(super) fn log_lacks(&self, i: usize) -> bool {
        self.log_want(i).is_some()
    }

    /// The end (a FIN counted) of what the log can give open leg `i`
    /// beyond what it acknowledged, if anything.
    fn log_want(&self, i: usize) -> Option<SeqNum> {
        let log = self.log.as_deref()?;
        let l = &self.legs[i];
        if !l.open() || !l.learned || self.recovering() {
            return None;
        }
        let mut end = log.end();
        if self.client_fin == Some(end) && !self.fin_held(i) {
            end = end.add(1);
        }
        end.is_after(l.ack).then_some(end)
    }

    /// Send leg `i` the logged bytes from `from` to `end` (a FIN counted),
    /// within its window, at most `max` segments.
    fn log_send(&mut self, ctx: &mut Ctx, i: usize, from: SeqNum, end: SeqNum, max: usize) {
        let Some(log) = self.log.as_deref() else {
            return;
        };
        let l = &self.legs[i];
        let from = from.max(log.base);
        let data_end = log.end();
        let fin_at = self.client_fin.filter(|f| *f == data_end);
        // What its window takes; a FIN right at its edge too.
        let stop = end.min(l.edge.max(l.ack));
        let opt = if self.ts_on { 12 } else { 0 };
        let size = u32::from(self.mss_out).saturating_sub(opt).max(1);
        let (ack_c, ack) = l.ack_for(self.client_ack);
        let tsecr = self.tsecr_to(i, l.ts_last);
        let addr = l.addr;
        let (win, paced) = self.window_to(i, self.client_ack, ack_c, self.client_win);
        let mut at = from;
        let mut sent = 0usize;
        let mut out = Vec::new();
        while sent < max {
            let data_stop = stop.min(data_end);
            let len = if data_stop.is_after(at) {
                (data_stop.diff(at) as u32).min(size)
            } else {
                0
            };
            let seg_end = at.add(len);
            // The FIN with the last byte, when it is wanted (`end` counts
            // it) and the window reaches it.
            let fin = fin_at == Some(seg_end) && end.is_after(seg_end) && !stop.is_before(seg_end);
            if len == 0 && !fin {
                break;
            }
            let off = usize::try_from(at.diff(log.base)).unwrap_or(0);
            let payload: Vec<u8> = log.bytes.range(off..off + len as usize).copied().collect();
            let fl = flags::ACK
                | if len > 0 { flags::PSH } else { 0 }
                | if fin { flags::FIN } else { 0 };
            let mut r = Repr::new(self.key.cport, self.key.vport, at, ack, fl, win);
            if self.ts_on {
                r.timestamps = Some((self.client_tsval, tsecr));
            }
            out.push(Packet::plain(r.emit_ipv4(self.key.client, addr, &payload)));
            ctx.counters.log_resent_bytes += u64::from(len);
            at = seg_end.add(u32::from(fin));
            sent += 1;
            if fin {
                self.legs[i].client_fin_held = false;
                break;
            }
        }
        if sent == 0 {
            return;
        }
        ctx.counters.packets_out += sent as u64;
        ctx.tx.extend(out);
        self.note_window(ctx.now, i, ack_c, win);
        let l = &mut self.legs[i];
        l.ack_out = Some(ack_c);
        l.paced = paced;
        l.log_nxt = l.log_nxt.max(at);
    }
}
