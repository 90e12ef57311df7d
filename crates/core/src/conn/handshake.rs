//! Establishment (COSCANet-FT §III-E): the client's SYN to every replica,
//! one SYN-ACK built from their answers.

use super::{csum_mode, Conn, Ctx, Leg, LegState, Phase, Seg};
use crate::event::EvictReason;
use crate::ids::LegId;
use crate::metrics::DropReason;
use crate::packet::{Headers, Packet};
use ftnet_wire::tcp::{flags, Repr};
use ftnet_wire::{SeqDelta, SeqNum};
use std::net::Ipv4Addr;

impl Conn {
    /// A retransmitted client SYN (same ISN): count the try against every
    /// replica that has not answered, evict those past `syn_retries`
    /// (§III-E), and repeat the SYN to the rest.
    pub(crate) fn client_syn_again(&mut self, ctx: &mut Ctx, pkt: &Packet, seg: &Seg) {
        self.last_activity = ctx.now;
        if self.phase == Phase::SynAckSent || self.phase == Phase::Established {
            // Our SYN-ACK was lost: the client asks again.
            self.emit_synack(ctx);
            return;
        }
        if self.is_committing() {
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
                    let service_wide = self.another_answered_syn(i);
                    self.evict(ctx, LegId(i), EvictReason::NoSynAck, service_wide);
                }
            }
        }
        self.forward_syn(ctx, pkt, seg);
        self.settle(ctx);
    }

    /// Another live replica answered the client's SYN that replica `i`
    /// leaves unanswered: only then is its silence evidence against it
    /// for the whole service. A SYN nobody answers (a flood the servers'
    /// SYN queues shed, a replayed or forged SYN) says nothing about any
    /// one replica: the connection fails, nobody is declared down. Nor
    /// does the silence of one that answered with a stale connection's
    /// ACK (`syn_challenged`): it lives.
    pub(super) fn another_answered_syn(&self, i: usize) -> bool {
        self.legs[i].stale_resets == 0
            && self
                .legs
                .iter()
                .enumerate()
                .any(|(j, l)| j != i && l.live() && l.state != LegState::SynSent)
    }

    /// Replica leg `i` answered the client's SYN with a bare ACK: it still
    /// holds an earlier connection of this four-tuple, one the router took
    /// it out of while its reset was lost (a cut link) or fell short of
    /// its RCV.NXT, and the client has now reused its port. That ACK is
    /// its challenge ACK (RFC 5961 §4) or TIME-WAIT's, and it carries the
    /// old connection's RCV.NXT. As the client's own stack does with an
    /// unacceptable ACK in SYN-SENT (RFC 9293 §3.10.7.3: `<SEQ=SEG.ACK>
    /// <CTL=RST>`; Linux `tcp_rcv_synsent_state_process`), the router
    /// resets it at exactly that number, then sends the SYN again at once
    /// (twice at most: a reset the replica ignores, `tcp_rfc1337` in
    /// TIME-WAIT, must not start a loop; the client's own retries go on).
    /// The replica answered, so it is alive: its delay says nothing about
    /// it beyond this connection (`another_answered_syn`). The reset
    /// goes only where the data plane lets this replica's packets come
    /// from (its address is bound to its link), as a client's would.
    pub(super) fn syn_challenged(&mut self, ctx: &mut Ctx, i: usize, ack: SeqNum) {
        if ack == self.client_isn.add(1) {
            // An acceptable ACK without the SYN: nothing to reset.
            ctx.counters.drop(DropReason::BadState);
            return;
        }
        self.reset_stale(ctx, i, ack);
        let l = &mut self.legs[i];
        l.stale_resets = l.stale_resets.saturating_add(1);
        if l.stale_resets <= 2 {
            if let Some((base, at)) = self.syn_copy.take() {
                self.send_syn(ctx, &base, at, self.key.vip, i);
                self.syn_copy = Some((base, at));
            }
        }
    }

    /// Copy the client's SYN to every replica that has not answered.
    pub(crate) fn forward_syn(&mut self, ctx: &mut Ctx, pkt: &Packet, seg: &Seg) {
        let mut base = pkt.clone();
        let at = seg.at.rewrite(&mut base, |_, t| {
            // SACK is not offered to the group: a SACK block is only
            // truthful per replica, and the client-side blocks would have
            // to be the intersection over replicas. Without SACK TCP falls
            // back to NewReno recovery (RFC 6582).
            t.strip_sack_permitted(seg.mode);
        });
        for i in 0..self.legs.len() {
            if self.legs[i].state == LegState::SynSent {
                self.send_syn(ctx, &base, at, seg.dst, i);
            }
        }
        self.syn_copy = Some((base, at));
    }

    /// The client's SYN (as kept in `syn_copy` form) to leg `i`.
    pub(super) fn send_syn(
        &self,
        ctx: &mut Ctx,
        base: &Packet,
        at: Headers,
        vip: Ipv4Addr,
        i: usize,
    ) {
        let addr = self.legs[i].addr;
        let mode = csum_mode(&base.vnet);
        let mut p = base.clone();
        at.rewrite(&mut p, |ip, t| {
            ip.set_dst(addr);
            t.update_pseudo_addr(vip, addr, mode);
        });
        ctx.tx.push_back(p);
        ctx.counters.packets_out += 1;
    }

    pub(super) fn replica_synack(&mut self, ctx: &mut Ctx, i: usize, seg: &Seg) {
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
        if self.options_differ(seg) {
            self.evict(ctx, LegId(i), EvictReason::OptionMismatch, false);
            self.settle(ctx);
            return;
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
        l.out_at = now;
        ctx.counters.drop(DropReason::SynAckHeld);
        self.settle(ctx);
    }

    /// The first replica to answer set the group's option profile
    /// (timestamps, window scale); a SYN-ACK whose options differ cannot
    /// share the client's connection.
    pub(super) fn options_differ(&self, seg: &Seg) -> bool {
        self.legs
            .iter()
            .find(|l| l.open())
            .is_some_and(|l| (l.has_ts, l.has_ws) != (seg.ts.is_some(), seg.wscale.is_some()))
    }

    /// The group's options for the client (what the connection's record
    /// holds): MSS, timestamps and window scale; returns the SYN-ACK's
    /// window and scale option. `None` with no replica open.
    pub(super) fn synack_options(&mut self) -> Option<(u16, Option<u8>)> {
        let open: Vec<&Leg> = self.legs.iter().filter(|l| l.open()).collect();
        let first = open.first()?;
        let mss = open.iter().map(|l| l.mss).min().unwrap_or(536);
        let win = open.iter().map(|l| l.syn_window).min().unwrap_or(0);
        if self.is_adopted() {
            // The router that died chose them, for every replica the
            // record names: the client (and the replicas) use those. From
            // the legs left now, the scale could come out different.
            return Some((win, self.client_ws.then_some(self.ws_out)));
        }
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

    /// Whether a SYN-ACK whose record is not confirmed by every agent may
    /// go once the wait (`Timeouts::record_commit`) ran out: if one agent
    /// stored the record (a router taking over finds it there), or if every
    /// agent it went to is gone without storing it and this router is not
    /// in doubt whether it still serves (`Ctx::quiet`: on probation after a
    /// pause, or cut off from every agent). Not while no agent has it and
    /// its agents may only be slow, nor while in doubt: the client would
    /// hold a connection no router can find should this one be superseded
    /// (a client connecting through a router that had just lost its
    /// addresses, its agents gone to the other, got a SYN-ACK 100 ms later
    /// and timed out 30 s after). Held, the client's next SYN reaches the
    /// router that serves then.
    pub(super) fn may_send_uncommitted(&self, ctx: &Ctx) -> bool {
        self.commit_heard || (self.commit_orphan && !ctx.quiet)
    }

    /// An agent stored the record, not every one yet: a SYN-ACK held past
    /// its wait goes now.
    pub(crate) fn commit_heard(&mut self, ctx: &mut Ctx) {
        self.commit_heard = true;
        self.commit_if_overdue(ctx);
    }

    /// No agent the record went to is left to store it (every one is gone,
    /// or none was registered): nothing is to be waited for, and the
    /// SYN-ACK goes now, unless the router is in doubt (then it is held
    /// until it is not, or the client's next SYN reaches another router).
    pub(crate) fn commit_orphaned(&mut self, ctx: &mut Ctx) {
        self.commit_orphan = true;
        if matches!(self.phase, Phase::Committing { .. }) && self.may_send_uncommitted(ctx) {
            self.commit_synack(ctx, false);
        }
    }

    fn commit_if_overdue(&mut self, ctx: &mut Ctx) {
        if let Phase::Committing { since, .. } = self.phase {
            if since + commit_wait(ctx.timeouts) <= ctx.now && self.may_send_uncommitted(ctx) {
                self.commit_synack(ctx, false);
            }
        }
    }

    /// `Committing`: the record is stored (`confirmed`) or the wait ran
    /// out; the client gets its SYN-ACK.
    pub(crate) fn commit_synack(&mut self, ctx: &mut Ctx, confirmed: bool) {
        let Phase::Committing { since, .. } = self.phase else {
            return;
        };
        ctx.counters
            .commit_wait
            .observe(ctx.now.saturating_sub(since));
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
    pub(super) fn emit_synack(&mut self, ctx: &mut Ctx) {
        let Some(win) = self.send_synack(ctx) else {
            return;
        };
        self.sent_hi = self.sent_hi.max(self.router_isn.add(1));
        self.adv_ack = self.client_isn.add(1);
        self.adv_edge = self.adv_ack.add(win as u32);
        if self.phase == Phase::Handshake {
            self.phase = Phase::SynAckSent;
        }
    }

    /// The SYN-ACK itself (see [`Conn::emit_synack`]; an adopted
    /// connection's carries the recorded options). Returns its window, or
    /// `None` with no replica open.
    pub(super) fn send_synack(&mut self, ctx: &mut Ctx) -> Option<u16> {
        let (win, ws) = self.synack_options()?;
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
            // An adopted connection's client TSval is not its SYN's: an
            // echo a client in SYN-SENT cannot place draws a reset
            // (`Conn::resend_synack`).
            let ecr = if self.is_adopted() {
                0
            } else {
                self.client_tsval
            };
            r.timestamps = Some((self.router_ts(ctx.now), ecr));
        }
        let data = r.emit_ipv4(self.key.vip, self.key.client, &[]);
        ctx.tx.push_back(Packet::plain(data));
        ctx.counters.packets_out += 1;
        Some(win)
    }
}

/// How long a SYN-ACK waits for its record, and is held again each time
/// (`Timeouts::record_commit`; unset, the configuration's default, 100 ms).
pub(super) fn commit_wait(t: &crate::config::Timeouts) -> core::time::Duration {
    t.record_commit
        .unwrap_or(core::time::Duration::from_millis(100))
}
