//! Group bookkeeping: evictions, what the client hears after the group
//! changed (`settle`), and the end of the connection.

use super::{Conn, Ctx, LegState, Phase, STALL_ACTIVE};
use crate::config::Timeouts;
use crate::event::{Event, EvictReason};
use crate::ids::{LegId, ReplicaId};
use crate::packet::Packet;
use crate::time::Instant;
use ftnet_wire::tcp::{flags, Repr};
use ftnet_wire::SeqNum;

/// Resets the router sends at most to a replica's side of a connection it
/// was taken out of (`Conn::evicted_challenged`): enough for one lost to a
/// link still cut; bounded, so that no replica's packets can make the
/// router send without end.
const STALE_RESETS: u8 = 3;

impl Conn {
    /// Take replica leg `i` out of the connection: RST its side so that a
    /// partitioned replica frees the connection, and log why.
    pub(crate) fn evict(
        &mut self,
        ctx: &mut Ctx,
        leg: LegId,
        reason: EvictReason,
        service_wide: bool,
    ) {
        self.evict_leg(ctx, leg, reason, service_wide);
        if self.safe {
            // The stable watermark may have moved: a replica that held it
            // back left.
            self.number_acked(ctx, SeqNum(0));
        }
    }

    fn evict_leg(
        &mut self,
        ctx: &mut Ctx,
        LegId(i): LegId,
        reason: EvictReason,
        service_wide: bool,
    ) {
        if self.legs[i].state != LegState::Evicted && self.stall_from.is_none() {
            self.stall_from = self
                .last_payload_out
                .filter(|t| ctx.now.saturating_sub(*t) <= STALL_ACTIVE);
        }
        if self.legs[i].held && self.legs[i].state != LegState::Evicted {
            self.held_lost = Some((self.legs[i].replica, reason));
        }
        if self.announced && self.legs[i].state != LegState::Evicted {
            // Its agent forgets the connection: a router taking over must
            // not bring the replica back into it.
            self.forget(ctx.out, vec![self.legs[i].addr]);
        }
        // An aborted leg already reset its side; only the verdict was
        // pending. It leaves like any other, but stays in the service: a
        // server that resets a connection is, as far as the router can
        // tell, the service closing it (Redis after a malformed request:
        // every replica's kernel resets it, each at its own time, while
        // the others still acknowledge input their servers will not read;
        // simulation `servers_closing_connections_leave_no_hole_in_the_order`).
        // A crashed server is taken out by its agent.
        let aborted = self.legs[i].state == LegState::Aborted;
        if !aborted && !self.legs[i].live() {
            return;
        }
        let detail = match reason {
            _ if aborted => String::new(),
            EvictReason::Stalled | EvictReason::NoSynAck => self.silence_detail(i, ctx.now),
            EvictReason::InputLost => match self.reset_wait {
                Some(w) => format!(
                    "the client reset the connection; {} byte(s) another replica acknowledged never reached this one in {} ms",
                    w.reached.diff(self.legs[i].ack),
                    ctx.now.saturating_sub(w.since).as_millis()
                ),
                None => String::new(),
            },
            _ => String::new(),
        };
        if !aborted && !ctx.quiet {
            self.reset_leg(ctx, i);
        }
        self.legs[i].state = LegState::Evicted;
        self.restart_behind_clocks(ctx.now);
        ctx.counters.evictions += 1;
        let remaining = self.live_legs();
        ctx.out.event(Event::Evicted {
            conn: self.key.to_string(),
            replica: self.legs[i].addr,
            reason,
            remaining,
            detail,
        });
        if service_wide {
            ctx.down.push((self.svc, self.legs[i].replica, reason));
        } else if ctx.sequencer
            && !aborted
            && !matches!(reason, EvictReason::ReplicaDown | EvictReason::Diverged)
            && remaining > 0
            && self.input_to_come(i)
        {
            // A server that follows the service's input order (the router
            // checks that it does, and that the service keeps state) misses
            // this connection's input from now on, which the others apply:
            // its state is no longer the group's, and it would serve on with
            // it (its shim skips the events of a connection its server no
            // longer has). It leaves the service, loudly, and comes back by
            // a join (`Router::apply_down`). (A slow replica evicted from
            // the connections of a takeover kept serving Redis with seven
            // writers' commands missing: its digest differed at the end.)
            // Not where the connection ends for every replica (none left,
            // or `Diverged`: under `primary` the followers whose replies
            // differed leave with the followed one, and the client is
            // reset; under voting a diverged replica is taken out anyway).
            ctx.missed.push((self.svc, self.legs[i].replica));
        }
    }

    /// Reset replica leg `i`'s side of the connection, so that a
    /// partitioned replica frees it.
    fn reset_leg(&self, ctx: &mut Ctx, i: usize) {
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
    }

    /// Whether leg `i` could still get client input on this connection:
    /// it was past the handshake (the connection's events are numbered)
    /// and has not acknowledged the client's FIN.
    fn input_to_come(&self, i: usize) -> bool {
        matches!(self.phase, Phase::Established | Phase::Closed { .. })
            && !self
                .client_fin
                .is_some_and(|f| self.legs[i].ack.is_after(f))
    }

    /// Whether the client's FIN is held back from leg `i`: the client
    /// closed having got output this replica has not sent yet. A server
    /// never sees its client close before the bytes the client had then;
    /// a replica behind the others would, and a server may give its reply
    /// up when the client closes (nginx does, status 499): it would close
    /// in the middle of bytes the client already holds, which the vote
    /// takes for divergence (a `vote-slow` run lost its slowest replica so,
    /// e2e `fin-behind`). Its kernel gets the FIN once it has sent that far
    /// (`release_fins`), so its server sees the client close where a lone
    /// server would have.
    ///
    /// Only under voting, where every replica's output is the client's
    /// byte for byte and a FIN short of it is divergence. Without voting a
    /// replica's output may differ in length (`primary`: a follower whose
    /// reply to Redis `INFO` is shorter than the followed one's), so where
    /// it stands says nothing about what of it the client had: held, its
    /// FIN would never come, its output would stand still while the others'
    /// moved, and it would be taken out. There a FIN that comes early only
    /// ends that replica's leg (`EvictReason::Fin`, after it took the
    /// client's FIN: no input missed).
    pub(super) fn fin_held(&self, i: usize) -> bool {
        self.vote.is_some() && self.fin_hold.is_some_and(|t| self.legs[i].hi.is_before(t))
    }

    /// The client's FIN to each open leg it was held back from that has
    /// now sent what the client had when it closed (`fin_held`): called
    /// where a leg's output moves, and from `settle`. Should
    /// this copy be lost, the client's own repeat of its FIN (it is not
    /// acknowledged before every replica took it) or the log's goes on.
    pub(super) fn release_fins(&mut self, ctx: &mut Ctx) {
        let Some(f) = self.client_fin else { return };
        if !self.legs.iter().any(|l| l.client_fin_held) {
            return;
        }
        for i in 0..self.legs.len() {
            if !self.legs[i].client_fin_held || !self.legs[i].open() || self.fin_held(i) {
                continue;
            }
            self.legs[i].client_fin_held = false;
            let (ack_c, ack) = self.legs[i].ack_for(self.client_ack);
            self.legs[i].ack_out = Some(ack_c);
            self.empty_to_leg(ctx, i, f, flags::ACK | flags::FIN, ack_c, ack);
            self.log_forwarded(i, f, 0, true);
        }
    }

    /// A leg just left the connection: what the others lagged behind may
    /// have been its doing, so the no-progress clocks of those still behind
    /// start again now. A dead replica that the client followed, or whose
    /// acknowledgment held the group's, stops the client's ACKs and with
    /// them every other replica's output (its send buffer full, its input
    /// read no further); judged on clocks that ran through that, a healthy
    /// replica was evicted the moment the dead one was, before the client
    /// could acknowledge anything again (simulation seed 22052 with a
    /// second takeover). A silent one's silence is counted from then too.
    fn restart_behind_clocks(&mut self, now: crate::time::Instant) {
        for l in self.legs.iter_mut().filter(|l| l.live()) {
            if l.behind_since.is_some() {
                l.behind_since = Some(now);
            }
        }
    }

    /// A segment from replica leg `i` after the router took it out of the
    /// connection: its side is still open. The reset sent when it was
    /// evicted was lost (a cut link), or fell short of its RCV.NXT (it had
    /// more of the client's bytes than it acknowledged) and drew a
    /// challenge ACK (RFC 5961 §3.2). Left open, that side lingers on the
    /// replica (a server's connection, retransmitting to nobody for
    /// minutes) and answers the client's next SYN from the same port with
    /// an ACK instead of a SYN-ACK. As a stack does for a segment to a
    /// connection it no longer has (RFC 9293 §3.10.7.1: `<SEQ=SEG.ACK>
    /// <CTL=RST>`), the router resets it at the ACK number it carries,
    /// which is its RCV.NXT. At most `STALE_RESETS` times per leg.
    pub(super) fn evicted_challenged(&mut self, ctx: &mut Ctx, i: usize, ack: SeqNum) {
        let l = &mut self.legs[i];
        if l.stale_resets >= STALE_RESETS {
            return;
        }
        l.stale_resets += 1;
        self.reset_stale(ctx, i, ack);
    }

    /// A RST to replica leg `i`'s side of this connection at exactly `seq`
    /// (the RCV.NXT its own ACK showed), as the client would send it.
    pub(super) fn reset_stale(&self, ctx: &mut Ctx, i: usize, seq: SeqNum) {
        let r = Repr::new(
            self.key.cport,
            self.key.vport,
            seq,
            SeqNum(0),
            flags::RST,
            0,
        );
        ctx.tx.push_back(Packet::plain(r.emit_ipv4(
            self.key.client,
            self.legs[i].addr,
            &[],
        )));
        ctx.counters.packets_out += 1;
    }

    /// The leg of replica `replica` if `seq` (an ICMP error's quote) is
    /// the sequence number of a segment the router sent it and it has not
    /// acknowledged (RFC 5927 §4.1; Linux `tcp_v4_err` checks the same,
    /// SND.UNA ≤ seq ≤ SND.NXT). In SYN-SENT the only segment sent is the
    /// client's SYN, so the quote must be the client's ISN. An open leg was
    /// sent client bytes from what it acknowledged up to `client_hi` (and
    /// a liveness probe one octet below what it acknowledged).
    pub(crate) fn icmp_quote(&self, replica: ReplicaId, seq: SeqNum) -> Option<LegId> {
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
        ok.then_some(LegId(i))
    }

    /// A verified ICMP destination unreachable for leg `i`: it leaves this
    /// connection (never the last replica: the connection's own failure
    /// detection judges that one), and only this one.
    pub(crate) fn unreachable(&mut self, ctx: &mut Ctx, i: LegId) {
        if self.live_legs() <= 1 {
            return;
        }
        self.evict(ctx, i, EvictReason::Unreachable, false);
        self.settle(ctx);
    }

    /// Evict the leg of replica `replica` (service index) if it has one.
    pub(crate) fn evict_replica(&mut self, ctx: &mut Ctx, replica: ReplicaId, reason: EvictReason) {
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
            self.evict(ctx, LegId(i), reason, false);
            self.settle(ctx);
        }
    }

    /// Re-derive what the client should hear after the group changed: the
    /// handshake completes, the ACK or window moves, a FIN all agreed on
    /// goes out, or, with no replica left, a RST.
    pub(crate) fn settle(&mut self, ctx: &mut Ctx) {
        if self.phase == Phase::Dead || self.is_closed() {
            return;
        }
        if self.follows_one() {
            if self.legs.iter().any(|l| l.live() && l.detached)
                && !self.legs.iter().any(|l| l.counts())
            {
                // The followed replica left and every one left is detached:
                // none can continue what the client got. The client is
                // reset (below, with no replica left).
                for j in 0..self.legs.len() {
                    if self.legs[j].live() {
                        self.evict(ctx, crate::ids::LegId(j), EvictReason::Diverged, false);
                    }
                }
            } else {
                self.follow_on(ctx);
            }
        }
        if self.resetting {
            // The client is gone: nothing for it; a replica evicted or
            // caught up meanwhile may end the connection.
            self.reset_caught_up(ctx);
            return;
        }
        self.release_fins(ctx);
        if self.phase == Phase::Handshake && !self.legs.iter().any(|l| l.state == LegState::SynSent)
        {
            let open = self.legs.iter().any(|l| l.open());
            for i in 0..self.legs.len() {
                if self.legs[i].state == LegState::Refused {
                    if open {
                        // Others accept: nothing listens on this replica any
                        // more, for this or any new connection.
                        self.legs[i].state = LegState::SynSent;
                        self.evict(ctx, LegId(i), EvictReason::Reset, true);
                    } else {
                        // Every replica refused: that is the service's answer.
                        self.legs[i].state = LegState::Evicted;
                    }
                }
            }
        }
        if !matches!(self.phase, Phase::Handshake | Phase::Committing { .. }) && self.vote.is_some()
        {
            self.vote_progress(ctx);
        }
        if self.live_legs() == 0 {
            if matches!(self.phase, Phase::Handshake | Phase::Committing { .. }) {
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
                    ctx.out.event(Event::ConnectionLost {
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
                        self.phase = Phase::Committing {
                            by: ctx.now + wait,
                            since: ctx.now,
                        };
                    }
                    _ => self.emit_synack(ctx),
                }
            }
            return;
        }
        if self.is_committing() {
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
            if let Some(f) = self.group_fin() {
                if !self.sent_hi.is_before(f)
                    && self
                        .fin_hold_until(ctx.timeouts)
                        .is_none_or(|d| d <= ctx.now)
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
        // A connection just rebuilt: the client's prompts go before the ACK
        // (which may move its SND.UNA), the probe after it.
        let prompt = std::mem::take(&mut self.prompt_due);
        if prompt {
            self.prompt_replicas_at_una(ctx);
            self.prompt_client(ctx);
        }
        if fin_now
            || ack.is_after(self.adv_ack)
            || edge.is_after(self.adv_edge)
            || self.reopens(ack, edge)
        {
            self.emit_ack(ctx, fin_now);
        }
        if prompt {
            self.client_resent_early = None;
            self.prompt_client_probe(ctx);
        }
        self.check_closed(ctx);
    }

    /// Where every replica whose output counts sent its FIN, if they all
    /// sent it at the same place.
    pub(super) fn group_fin(&self) -> Option<SeqNum> {
        let f = self.legs.iter().find(|l| l.counts())?.fin?;
        self.legs
            .iter()
            .filter(|l| l.counts())
            .all(|l| l.fin == Some(f))
            .then_some(f)
    }

    /// `primary`, followers detached (their replies differed, Redis
    /// `INFO`): the followed replica's FIN is the client's stream's end only
    /// if its server closed, and a server killed with nothing unread closes
    /// its connections with a FIN too. Attached followers tell the two
    /// apart (a close is theirs too; a crash is not, and the FIN waits for
    /// them, `fail_deadline`), detached ones cannot take the connection
    /// over: a crash resets the client, and a FIN passed first would tell
    /// it the server closed (an end it takes as whole). So while a live
    /// detached leg has not closed, the followed replica's FIN waits until
    /// the returned time, the failure detection time after it came: by
    /// then an agent's verdict on that replica (its server gone, its order
    /// lost) has reset the client, or, none come, the FIN goes. Every
    /// detached leg's own FIN (its server closed as well) lets it go at
    /// once. `None`: no FIN waits for them.
    pub(super) fn fin_hold_until(&self, t: &Timeouts) -> Option<Instant> {
        if !self
            .legs
            .iter()
            .any(|l| l.live() && l.detached && l.fin_at.is_none())
        {
            return None;
        }
        let mut at = None;
        for l in self.legs.iter().filter(|l| l.counts()) {
            l.fin?;
            // A FIN learnt without its arrival (a takeover's records) is
            // not held.
            let a = l.fin_at.unwrap_or(Instant::ZERO);
            at = Some(at.map_or(a, |b: Instant| b.max(a)));
        }
        at.map(|a| a + t.failure_detection)
    }

    /// Both directions closed and acknowledged by everyone: enter the
    /// quiet period after which the router forgets the connection.
    pub(super) fn check_closed(&mut self, ctx: &mut Ctx) {
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
            self.phase = Phase::Closed { at: ctx.now };
        }
    }

    pub(super) fn abort_legs(&mut self, ctx: &mut Ctx) {
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
    pub(crate) fn discard_half_open(&mut self, ctx: &mut Ctx) {
        self.abort_legs(ctx);
        self.phase = Phase::Dead;
    }
}
