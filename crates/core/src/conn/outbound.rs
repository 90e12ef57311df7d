//! Replica → client (COSCANet-FT §III-D): a replica's segments, what the
//! client is sent of them, and what the replicas are sent in its name.

use super::{may_challenge, Conn, Ctx, LegState, Phase, Seg, MAX_WIN, STALL_COUNTED_MAX};
use crate::event::EvictReason;
use crate::ids::LegId;
use crate::metrics::DropReason;
use crate::packet::Packet;
use crate::wrap::len32;
use ftnet_wire::tcp::{flags, Repr};
use ftnet_wire::vnet::VnetHdr;
use ftnet_wire::{ipv4, SeqNum};

/// Largest payload of one packet the router builds (IPv4 total length).
const MAX_BUILT_PAYLOAD: usize = 65535 - 20 - 60;

/// At most one replica probe (zero-window or keep-alive) per this long goes
/// on to the client: the client's one answer reaches every replica.
const PROBE_PASS_GAP: core::time::Duration = core::time::Duration::from_millis(50);
/// At most this many client segments beyond the group's ACK wait for
/// their duplicate ACK (`Conn::earn_dup`): a window's worth of segments.
const DUP_CREDIT_MAX: u16 = 1024;
/// The client sent nothing for this long while a replica lacks its bytes:
/// it may be waiting for its timeout (`Conn::spend_dup`).
const DUP_IDLE_AFTER: core::time::Duration = core::time::Duration::from_millis(200);
/// Duplicate ACKs that may then go to it before it sends again: a fast
/// retransmit's worth.
const DUP_IDLE_MAX: u8 = 3;

impl Conn {
    /// A segment from replica leg `i`, as the router received it.
    pub(crate) fn replica_input(
        &mut self,
        ctx: &mut Ctx,
        LegId(i): LegId,
        pkt: Packet,
        seg: &Seg,
    ) -> Result<(), DropReason> {
        if seg.has(flags::RST) && self.legs[i].state == LegState::SynSent {
            // RFC 9293 §3.10.7.3 (SYN-SENT): a RST is acceptable only if
            // its ACK acknowledges the SYN, SEG.ACK = ISS + 1 exactly (the
            // client's ISN here; for a joining leg, where its SYN began);
            // any other is dropped.
            let iss1 = self.legs[i].joined_at.unwrap_or(self.client_isn.add(1));
            if !seg.has(flags::ACK) || seg.ack != iss1 {
                return Err(DropReason::RstBadAck);
            }
            if self.legs[i].joined_at.is_some() {
                // The joiner refuses the connection: the join fails.
                self.evict(
                    ctx,
                    crate::ids::LegId(i),
                    crate::event::EvictReason::Reset,
                    false,
                );
                return Ok(());
            }
            // An acceptable RST to the SYN: nothing listens there. The leg
            // leaves this connection at once; the replica is marked down
            // for the service only if another replica accepted the same
            // SYN (`Conn::settle`), since then the service listens and this
            // replica's server is gone. That is as far as the core can
            // check: the client knows its own ISN and could forge this RST
            // with the replica's source address, so the real defence is
            // the data plane's reverse-path binding of each replica's
            // address to the interface it is reached by (`ftnet-io`
            // routing), which keeps such a packet from the router at all.
            self.replica_refused(ctx, i);
        } else {
            self.replica_segment(ctx, i, pkt, seg);
        }
        Ok(())
    }

    /// A segment from replica leg `i`.
    fn replica_segment(&mut self, ctx: &mut Ctx, i: usize, pkt: Packet, seg: &Seg) {
        if !self.legs[i].live() {
            ctx.counters.drop(DropReason::EvictedReplica);
            if self.legs[i].state == LegState::Evicted
                && seg.has(flags::ACK)
                && !seg.has(flags::RST)
            {
                self.evicted_challenged(ctx, i, seg.ack);
            }
            return;
        }
        if seg.has(flags::RST) && self.legs[i].open() {
            if self.is_adopted() && seg.seq.shift(self.legs[i].off) == self.probe_far_ack() {
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
        if self.resetting {
            self.resetting_segment(ctx, i, seg);
            return;
        }
        if self.legs[i].state == LegState::SynSent && seg.has(flags::ACK) && !seg.has(flags::SYN) {
            if self.legs[i].joined_at.is_some() {
                self.join_challenged(ctx, i, seg.ack);
            } else {
                self.syn_challenged(ctx, i, seg.ack);
            }
            return;
        }
        if seg.has(flags::SYN) {
            if self.legs[i].joined_at.is_some() {
                self.join_synack(ctx, i, seg);
            } else {
                self.replica_synack(ctx, i, seg);
            }
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
        if self.recovering() || !self.legs[i].learned {
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
        if self.is_adopted() && seg.payload_len == 0 && !seg.has(flags::FIN) {
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
        if seg.payload_len == 0 && !seg.has(flags::FIN) {
            // Its SND.NXT, for a join's check that no output is missing.
            self.legs[i].nxt_seen = Some((s, ctx.now));
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
            if self.log.is_some() {
                if progressed {
                    self.log_trim(ctx);
                }
                // It lacks logged bytes its window now takes, or one was
                // lost on the way (`log.rs`).
                self.log_serve(ctx, i, dup);
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
    pub(super) fn replica_rst_acceptable(&mut self, ctx: &mut Ctx, i: usize, seg: &Seg) -> bool {
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
            if self.client_seen {
                self.send_ack_to(ctx, i);
            } else {
                // What the client holds is not known: no ACK the replica
                // would take (see `keepalive`).
                self.keepalive(ctx, i);
            }
        }
        false
    }

    pub(super) fn replica_rst(&mut self, ctx: &mut Ctx, i: usize, pkt: Packet, seg: &Seg) {
        if self.is_closed() {
            // Both sides closed: a RST now answers a stray segment.
            ctx.counters.drop(DropReason::BadState);
            return;
        }
        let owed = self.client_hi.is_after(self.legs[i].ack);
        if self.legs[i]
            .fin
            .is_some_and(|f| self.client_ack.is_after(f))
            && (!owed || self.recovering())
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
            if self.safe {
                // It no longer holds the stable watermark back (as at an
                // eviction): bytes every other replica acknowledged are
                // numbered now. Otherwise, when the others had already
                // taken everything, the last chunk waited for a verdict on
                // the reset that nobody's progress would ever bring, and a
                // router dying then left it unnumbered (simulation seed
                // 6882 with a second takeover).
                self.number_acked(ctx, SeqNum(0));
            }
            self.settle(ctx);
            return;
        }
        // The last replica resets: the client gets it.
        let off = self.legs[i].off;
        let mut p = pkt;
        let vip = self.key.vip;
        let ts_now = self.ts_on.then(|| self.router_ts(ctx.now));
        seg.at.rewrite(&mut p, |ip, t| {
            ip.set_src(vip);
            t.update_pseudo_addr(seg.src, vip, seg.mode);
            t.set_seq(seg.seq.shift(off), seg.mode);
            if let (Some(v), Some((_, e))) = (ts_now, seg.ts) {
                // §III-D: the router's clock towards the client, on a RST
                // too (RFC 7323 §5.2 exempts it from PAWS; the replica's
                // clock is still not the client's to see).
                t.set_timestamps(v, e, seg.mode);
            }
        });
        ctx.tx.push_back(p);
        ctx.counters.packets_out += 1;
        self.legs[i].state = LegState::Evicted;
        self.phase = Phase::Dead;
    }

    /// A RST in answer to the client's SYN.
    fn replica_refused(&mut self, ctx: &mut Ctx, i: usize) {
        self.legs[i].state = LegState::Refused;
        self.settle(ctx);
    }

    pub(super) fn replica_pure_ack(
        &mut self,
        ctx: &mut Ctx,
        i: usize,
        pkt: Packet,
        seg: &Seg,
        dup: bool,
    ) {
        // The last ACK of a close comes as a pure ACK.
        self.check_closed(ctx);
        if self.legs[i].detached {
            // Its sequence numbers are another stream's: nothing of it goes
            // to the client (its acknowledgments count, through `settle`).
            ctx.counters.drop(DropReason::AckAbsorbed);
            self.settle(ctx);
            return;
        }
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
        // what makes it speak. What it acknowledged is not known then, so
        // a probe is any pure ACK below what the replica sent: a replica
        // further ahead than the slowest probes above `client_ack`.)
        let s = self.legs[i].off_seq(seg);
        let probe = if self.client_seen {
            s.add(1) == self.client_ack.min(self.legs[i].hi)
        } else {
            s.is_before(self.legs[i].hi)
        };
        if probe
            && !self.recovering()
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
        let advances =
            ack.is_after(self.adv_ack) || edge.is_after(self.adv_edge) || self.reopens(ack, edge);
        // A duplicate ACK from the replica that holds the group back means
        // it is missing client data; passing it on lets the client's fast
        // retransmit repair the router–replica link (§III-C). Only one
        // replica's go on (`dup_speaker`).
        let bottleneck_dup = dup
            && self.legs[i].ack == ack
            && self.client_hi.is_after(ack)
            && self.dup_speaker(ack) == Some(i)
            && self.spend_dup(ack, ctx.now);
        if !advances && !bottleneck_dup {
            ctx.counters.drop(DropReason::AckAbsorbed);
            return;
        }
        self.forward_to_client(ctx, i, pkt, seg, Some(self.sent_hi), false);
    }

    /// The one replica whose duplicate ACKs at the group's ACK `ack` go on
    /// to the client: the first open one that acknowledged exactly `ack`.
    /// Every replica that lacks the same client bytes repeats its ACK for
    /// each segment beyond them. Passed on from all N, the client would
    /// count N duplicate ACKs for each segment it sent, more than it has in
    /// flight; a Linux sender without SACK takes that excess for
    /// reordering and raises its duplicate-ACK threshold for the rest of
    /// the connection (`tp->reordering`, up to 300), after which every
    /// lost segment waits for its retransmission timeout instead of being
    /// sent again at the third duplicate ACK — among them the segments
    /// that died with a router, after a takeover.
    fn dup_speaker(&self, ack: SeqNum) -> Option<usize> {
        self.legs
            .iter()
            .position(|l| l.open() && !l.detached && l.ack == ack)
    }

    /// A client segment arrived beyond the group's ACK `ack`: one
    /// duplicate ACK at `ack` may go to the client for it. (Counted per
    /// ACK: once the group's ACK moves, what was earned below it lapses.)
    pub(super) fn earn_dup(&mut self, ack: SeqNum) {
        if self.dup_credit.0 != ack {
            self.dup_credit = (ack, 0);
        }
        self.dup_credit.1 = self.dup_credit.1.saturating_add(1).min(DUP_CREDIT_MAX);
    }

    /// Whether a duplicate ACK at `ack` may go to the client now (and
    /// counts it): for a client segment that arrived beyond it and has had
    /// none; or, once the client has sent nothing for `DUP_IDLE_AFTER`,
    /// up to `DUP_IDLE_MAX` until it sends again — a segment of its tail
    /// lost on the way to one replica only (the others have it: nothing
    /// arrives beyond it) is then sent again at once by a client that
    /// counts duplicate ACKs, not after a timeout backed off by a takeover
    /// (simulation seed 5296: a FIN lost to one replica, 10 s). The
    /// replicas also answer the router's own probes and keep-alives with
    /// their ACK; passed on all, those reached a client that sent nothing
    /// as duplicate ACKs, ten a second for as long as a replica lagged, and
    /// a Linux sender without SACK counts each as a segment delivered: its
    /// reordering estimate climbs, and BBR's bandwidth estimate, filled
    /// with those samples, fell to a few kbit/s (an echo stream that then
    /// took minutes).
    fn spend_dup(&mut self, ack: SeqNum, now: crate::time::Instant) -> bool {
        if self.dup_credit.0 == ack && self.dup_credit.1 > 0 {
            self.dup_credit.1 -= 1;
            return true;
        }
        if now.saturating_sub(self.dup_idle.0) >= DUP_IDLE_AFTER && self.dup_idle.1 < DUP_IDLE_MAX {
            self.dup_idle.1 += 1;
            return true;
        }
        false
    }

    /// The client's first segment after a rebuild, `seg`, is a pure ACK
    /// whose sequence number (its SND.NXT) lies beyond the group's ACK:
    /// what it sent in between died with the router before (no replica
    /// acknowledged it by the rebuild). Its retransmission timer was
    /// rearmed by the last ACK that moved its SND.UNA, so it is in no
    /// back-off a prompt could revert: it would wait that timeout out
    /// (an echo stream: 760 ms after a rebuild that took 200 ms, on a
    /// loaded host where its RTO had grown). A receiver that had those
    /// segments beyond a hole would have answered each with a duplicate
    /// ACK: up to `DUP_IDLE_MAX` go to it now, one fewer than the
    /// segments it has in flight (more would be taken for reordering,
    /// `tcp_check_reno_reordering`), and a client that counts them sends
    /// the first again at once (NewReno then repairs the rest on its
    /// partial ACKs). They count against the allowance for an idle client.
    pub(super) fn dup_acks_for_lost_tail(&mut self, ctx: &mut Ctx, seg: &Seg) {
        if seg.payload_len > 0 || seg.has(flags::FIN | flags::SYN | flags::RST) {
            return;
        }
        let (Some(ack), Some(edge)) = (self.group_ack(), self.group_edge()) else {
            return;
        };
        if !seg.seq.is_after(ack) {
            return;
        }
        let mss = u32::from(self.mss_out.max(1));
        let in_flight = u32::try_from(seg.seq.diff(ack)).unwrap_or(0).div_ceil(mss);
        let n = in_flight
            .saturating_sub(1)
            .min(u32::from(DUP_IDLE_MAX.saturating_sub(self.dup_idle.1)));
        for _ in 0..n {
            self.empty_to_client(ctx, self.sent_hi, flags::ACK, ack, edge);
            ctx.counters.rebuild_dup_acks += 1;
        }
        // (n <= DUP_IDLE_MAX, a u8.)
        self.dup_idle.1 = self
            .dup_idle
            .1
            .saturating_add(u8::try_from(n).unwrap_or(u8::MAX));
    }

    pub(super) fn replica_data(
        &mut self,
        ctx: &mut Ctx,
        i: usize,
        pkt: Packet,
        seg: &Seg,
        s: SeqNum,
    ) {
        if self.vote.is_some() {
            // Where the replicas disagree, the vote decides, FIN included.
            self.vote_data(ctx, i, &pkt, seg, s);
            return;
        }
        if self.legs[i].detached {
            // Its output goes nowhere (`Leg::detached`): acknowledged at
            // once, whatever it is.
            let end = s.add(seg.payload_len).add(seg.has(flags::FIN) as u32);
            if seg.has(flags::FIN) && self.legs[i].fin_at.is_none() {
                // It closed too: a FIN of the followed replica held for it
                // may go (`Conn::fin_hold_until`).
                self.legs[i].fin_at = Some(ctx.now);
            }
            if end.is_after(self.legs[i].hi) {
                self.legs[i].hi = end;
                self.legs[i].out_at = ctx.now;
                self.legs[i].progress_at = ctx.now;
                self.release_fins(ctx);
            }
            ctx.counters.drop(DropReason::DuplicateSuppressed);
            ctx.counters.suppressed_bytes += seg.payload_len as u64;
            self.send_ack_to(ctx, i);
            self.settle(ctx);
            return;
        }
        if self.check.is_some() && seg.payload_len > 0 {
            // `primary`: the followed replica's bytes beyond what the
            // client got are what the client gets; a follower's beyond the
            // followed replica's output are hashed once it gets there
            // (kept meanwhile, if there is room).
            let lead = self.follows_one() && self.leader() == Some(i);
            let client_from = lead.then_some(self.sent_hi);
            let data = seg.at.payload(&pkt);
            let n = match self.follower_hash_limit(i) {
                Some(l)
                    if s.add(seg.payload_len).is_after(l)
                        && self.check.as_ref().is_some_and(|c| {
                            c.has_room(seg.payload_len, ctx.counters.ahead_bytes)
                        }) =>
                {
                    usize::try_from(l.diff(s).max(0))
                        .unwrap_or(0)
                        .min(data.len())
                }
                _ => data.len(),
            };
            self.check_output(ctx, i, s, &data[..n], client_from);
            if !self.legs[i].live() {
                // Its bytes differ from the majority's (or from what the
                // client got): evicted, and nothing of it goes to the
                // client.
                return;
            }
            if lead {
                self.check_ahead(ctx, s.add(seg.payload_len));
            }
        }
        let e = s.add(seg.payload_len);
        let prev_hi = self.legs[i].hi;
        self.legs[i].owes_repeat = false;
        let end = e.add(seg.has(flags::FIN) as u32);
        if end.is_after(prev_hi) {
            self.legs[i].hi = end;
            self.legs[i].progress_at = ctx.now;
            self.legs[i].out_at = ctx.now;
            self.confirm_aborts(ctx);
            self.release_fins(ctx);
        }
        let mut fin_agreed = false;
        let first_fin = seg.has(flags::FIN) && self.legs[i].fin.is_none();
        if seg.has(flags::FIN) {
            if let Some(f) = self.legs[i].fin {
                if f != e {
                    // The same replica moved its FIN: it cannot be trusted.
                    self.evict(ctx, LegId(i), EvictReason::Fin, false);
                    self.settle(ctx);
                    return;
                }
            }
            self.legs[i].fin = Some(e);
            self.legs[i].fin_at.get_or_insert(ctx.now);
        }
        // A FIN from another replica at a point this one went past means
        // that replica stopped early: it crashed (§III-D).
        let hi = self.legs[i].hi;
        for j in 0..self.legs.len() {
            if j == i || !self.legs[j].counts() {
                continue;
            }
            if let Some(f) = self.legs[j].fin {
                if hi.is_after(f.add(1)) {
                    self.evict(ctx, LegId(j), EvictReason::Fin, false);
                }
            }
        }
        if let Some(f) = self.legs[i].fin {
            // This replica's FIN is itself contradicted by another that has
            // sent beyond it.
            if self
                .legs
                .iter()
                .any(|l| l.counts() && l.hi.is_after(f.add(1)))
            {
                self.evict(ctx, LegId(i), EvictReason::Fin, false);
                self.settle(ctx);
                return;
            }
            fin_agreed = self
                .legs
                .iter()
                .filter(|l| l.counts())
                .all(|l| l.fin == Some(f));
            if fin_agreed
                && self
                    .fin_hold_until(ctx.timeouts)
                    .is_some_and(|d| d > ctx.now)
            {
                // Detached followers have not closed: it waits for a
                // verdict (`Conn::fin_hold_until`).
                fin_agreed = false;
                if first_fin {
                    ctx.counters.lone_fins_held += 1;
                }
            }
        }
        if self.follows_one() && self.leader() != Some(i) {
            // A follower (`primary`): compared, not sent on. Bytes ahead
            // of the client are kept for a failover.
            if self.client_seen && s.is_before(prev_hi) {
                // It repeats bytes the client was sent and still lacks
                // (lost on the way to it): the followed replica should
                // repeat them too, but it may have died silently after
                // sending them, and nothing else would show that. What of
                // them is known to equal the client's bytes goes to it.
                let verified = self.check.as_ref().and_then(|c| c.verified(i));
                let upto = [e, self.sent_hi, verified.unwrap_or(s)]
                    .into_iter()
                    .min_by(|a, b| a.diff(*b).cmp(&0))
                    .unwrap_or(s);
                let from = if self.client_ack.is_after(s) {
                    self.client_ack
                } else {
                    s
                };
                if upto.is_after(from) {
                    let a = usize::try_from(from.diff(s)).unwrap_or(0);
                    let b = usize::try_from(upto.diff(s)).unwrap_or(0);
                    let bytes = seg.at.payload(&pkt)[a..b].to_vec();
                    self.send_built(ctx, from, &bytes);
                    ctx.counters.follower_repeats += 1;
                } else if let (Some(l), true) = (self.leader(), e.is_after(self.client_ack)) {
                    // The client lacks bytes the followed replica should
                    // repeat (its copy lost on the way to the router or to
                    // the client) and this follower's copy is not known to
                    // equal it: the followed replica owes them, and if it
                    // stays silent it is dead (it may have died silently
                    // after sending them).
                    self.legs[l].owes_repeat = true;
                } else if seg.has(flags::FIN)
                    && fin_agreed
                    && self.fin_sent
                    && !e.is_after(self.client_ack)
                    && self.client_ack.is_before(self.sent_hi)
                {
                    // A follower repeats its FIN and the client has every
                    // byte but lacks the group's FIN (lost on the way, or
                    // dropped by its stack): the followed replica should
                    // repeat its FIN too, but it may have died silently
                    // after sending it, and only FINs carry nothing that
                    // would show that. Every replica's stream ends there:
                    // the router repeats the group's FIN itself.
                    self.emit_ack(ctx, true);
                    ctx.counters.follower_repeats += 1;
                }
            }
            let ahead =
                seg.payload_len > 0 && e.is_after(self.sent_hi) && self.standby() == Some(i);
            let total = &mut ctx.counters.ahead_bytes;
            if ahead
                && self
                    .check
                    .as_mut()
                    .is_some_and(|c| c.keep_ahead(i, pkt, seg, s, total))
            {
                self.settle(ctx);
                return;
            }
            ctx.counters.drop(DropReason::DuplicateSuppressed);
            ctx.counters.suppressed_bytes += seg.payload_len as u64;
            if self.client_seen && self.client_ack.is_after(s) {
                self.ack_on_behalf(ctx, i);
            } else if !self.client_seen && s.is_before(prev_hi) {
                // After a takeover, before the client spoke: a follower
                // repeats bytes the client was sent and acknowledged (its
                // acknowledgments came from the client). Its bytes are not
                // the client's to get; an empty segment just below them is
                // unacceptable to the client, which answers with its ACK:
                // then the router knows what the client has.
                self.probe_client(ctx, s.sub(1));
            }
            self.settle(ctx);
            return;
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

    /// Build data segments to the client carrying `data` at `seq`, with the
    /// group's ACK, window and the router's timestamp. More than one
    /// segment's worth goes as a GSO super-packet that the kernel cuts.
    pub(super) fn send_built(&mut self, ctx: &mut Ctx, seq: SeqNum, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let ack = self.client_ack_field().unwrap_or(self.client_hi);
        let edge = self.group_edge().unwrap_or(ack);
        let win = self.window_field(ack, edge);
        self.told_zero = win == 0;
        let ts = self
            .ts_on
            .then(|| (self.router_ts(ctx.now), self.echo(self.client_tsval, ack)));
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
                seq.add(len32(off)),
                ack,
                fl,
                win,
            );
            r.timestamps = ts;
            let gso = chunk.len() > seg_size;
            // The kernel completes the checksum of every segment it cuts
            // from a GSO packet: its field holds the pseudo-header sum, and
            // the payload is not summed here for nothing.
            let bytes = if gso {
                r.emit_ipv4_partial(vip, client, chunk)
            } else {
                r.emit_ipv4(vip, client, chunk)
            };
            let vnet = if gso {
                let ihl = ipv4::MIN_HEADER_LEN;
                VnetHdr {
                    flags: ftnet_wire::vnet::F_NEEDS_CSUM,
                    gso_type: ftnet_wire::vnet::GSO_TCPV4,
                    // Each fits: headers of at most 120 bytes, a segment
                    // size below the client's MSS (a u16).
                    hdr_len: u16::try_from(ihl + r.header_len()).unwrap_or(u16::MAX),
                    gso_size: u16::try_from(seg_size).unwrap_or(u16::MAX),
                    csum_start: u16::try_from(ihl).unwrap_or(u16::MAX),
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
        if !data.is_empty() {
            self.payload_out(ctx);
        }
        self.adv_ack = self.adv_ack.max(ack);
        self.adv_edge = self.adv_edge.max(edge);
    }

    /// Rewrite a replica's segment for the client and queue it.
    pub(super) fn forward_to_client(
        &mut self,
        ctx: &mut Ctx,
        i: usize,
        mut p: Packet,
        seg: &Seg,
        seq_override: Option<SeqNum>,
        strip_fin: bool,
    ) {
        let ack = self.client_ack_field().unwrap_or(self.client_hi);
        let edge = self.group_edge().unwrap_or(ack);
        let win = self.window_field(ack, edge);
        self.told_zero = win == 0;
        let ts_now = self.router_ts(ctx.now);
        let seq = seq_override.unwrap_or(seg.seq.shift(self.legs[i].off));
        let vip = self.key.vip;
        let ts_on = self.ts_on;
        let echo = |e| self.echo(e, ack);
        seg.at.rewrite(&mut p, |ip, t| {
            ip.set_src(vip);
            t.update_pseudo_addr(seg.src, vip, seg.mode);
            t.set_seq(seq, seg.mode);
            if seg.has(flags::ACK) {
                t.set_ack(ack, seg.mode);
                t.set_window(win, seg.mode);
            }
            if let (true, Some((_, e))) = (ts_on, seg.ts) {
                // §III-D: the router's clock towards the client.
                t.set_timestamps(ts_now, echo(e), seg.mode);
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
        if seg.payload_len > 0 {
            self.payload_out(ctx);
        }
        self.adv_ack = self.adv_ack.max(ack);
        self.adv_edge = self.adv_edge.max(edge);
    }

    /// Payload went to the client: a stall an eviction opened ends here.
    fn payload_out(&mut self, ctx: &mut Ctx) {
        if let Some(from) = self.stall_from.take() {
            let gap = ctx.now.saturating_sub(from);
            if gap <= STALL_COUNTED_MAX {
                ctx.counters.stall_after_eviction.observe(gap);
            }
        }
        self.last_payload_out = Some(ctx.now);
    }

    /// An ACK to replica `i` in the client's name, for what the client
    /// acknowledged of the bytes this replica has sent.
    pub(super) fn ack_on_behalf(&mut self, ctx: &mut Ctx, i: usize) {
        if !self.client_seen {
            // What the client acknowledged is not known yet.
            return;
        }
        self.send_ack_to(ctx, i);
        ctx.counters.acks_on_behalf += 1;
    }

    /// A pure ACK to replica `i` in the client's name: what the client
    /// acknowledged of the bytes this replica has sent.
    pub(super) fn send_ack_to(&mut self, ctx: &mut Ctx, i: usize) {
        let (a, ack) = self.legs[i].ack_for(self.client_ack);
        self.legs[i].ack_out = Some(a);
        self.pure_ack_to(ctx, i, a, ack);
    }

    /// A pure ACK to replica `i` in the client's name, acknowledging `ack`
    /// (the replica's own space; `ack_c` in the client's), at the end of
    /// the client's stream.
    pub(super) fn pure_ack_to(&mut self, ctx: &mut Ctx, i: usize, ack_c: SeqNum, ack: SeqNum) {
        // Before the client's FIN when that is held back from it: past it,
        // the ACK would lie outside a closed receive window and be dropped
        // (RFC 9293 §3.10.7.4).
        let seq = match self.client_fin {
            Some(f) if self.legs[i].client_fin_held => f,
            _ => self.client_hi,
        };
        self.empty_to_leg(ctx, i, seq, flags::ACK, ack_c, ack);
    }

    /// An empty segment to replica `i` in the client's name at `seq` with
    /// `fl`, acknowledging `ack` (the replica's own space; `ack_c` in the
    /// client's) with the window it is due.
    pub(super) fn empty_to_leg(
        &mut self,
        ctx: &mut Ctx,
        i: usize,
        seq: SeqNum,
        fl: u8,
        ack_c: SeqNum,
        ack: SeqNum,
    ) {
        let win = self.windowed(ctx.now, i, self.client_ack, ack_c, self.client_win);
        let l = &self.legs[i];
        let mut r = Repr::new(self.key.cport, self.key.vport, seq, ack, fl, win);
        if self.ts_on {
            r.timestamps = Some((self.client_tsval, self.tsecr_to(i, l.ts_last)));
        }
        ctx.tx
            .push_back(Packet::plain(r.emit_ipv4(self.key.client, l.addr, &[])));
        ctx.counters.packets_out += 1;
    }

    /// An empty segment to the client at `seq`, below what it has: it
    /// answers with an ACK (RFC 9293 §3.10.7.4). At most one per
    /// `PROBE_PASS_GAP`.
    pub(super) fn probe_client(&mut self, ctx: &mut Ctx, seq: SeqNum) {
        if self
            .probe_passed_at
            .is_some_and(|t| ctx.now.saturating_sub(t) < PROBE_PASS_GAP)
        {
            return;
        }
        self.probe_passed_at = Some(ctx.now);
        let ack = self.client_ack_field().unwrap_or(self.client_hi);
        let edge = self.group_edge().unwrap_or(ack);
        self.empty_to_client(ctx, seq, flags::ACK, ack, edge);
        ctx.counters.probes_passed += 1;
    }

    /// An empty segment to the client at `seq` with `fl`, acknowledging
    /// `ack` with the window up to `edge` and the router's timestamp;
    /// returns the window field sent.
    fn empty_to_client(
        &self,
        ctx: &mut Ctx,
        seq: SeqNum,
        fl: u8,
        ack: SeqNum,
        edge: SeqNum,
    ) -> u16 {
        self.segment_to_client(ctx, seq, fl, ack, edge, &[])
    }

    /// A segment of the router's own to the client (`payload`: none, or
    /// the garbage octet of a rebuild's probe), with the group's window
    /// for `ack`/`edge` and, where timestamps are on, the router's clock.
    /// Returns the window field sent.
    pub(super) fn segment_to_client(
        &self,
        ctx: &mut Ctx,
        seq: SeqNum,
        fl: u8,
        ack: SeqNum,
        edge: SeqNum,
        payload: &[u8],
    ) -> u16 {
        let mut r = Repr::new(
            self.key.vport,
            self.key.cport,
            seq,
            ack,
            fl,
            self.window_field(ack, edge),
        );
        if self.ts_on {
            r.timestamps = Some((self.router_ts(ctx.now), self.echo(self.client_tsval, ack)));
        }
        let window = r.window;
        ctx.tx.push_back(Packet::plain(r.emit_ipv4(
            self.key.vip,
            self.key.client,
            payload,
        )));
        ctx.counters.packets_out += 1;
        window
    }

    /// A pure ACK (or FIN-ACK) to the client with the group's ACK and
    /// window.
    pub(super) fn emit_ack(&mut self, ctx: &mut Ctx, fin: bool) {
        let (Some(ack), Some(edge)) = (self.client_ack_field(), self.group_edge()) else {
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
        self.told_zero = self.empty_to_client(ctx, seq, fl, ack, edge) == 0;
        self.adv_ack = self.adv_ack.max(ack);
        self.adv_edge = self.adv_edge.max(edge);
    }
}
