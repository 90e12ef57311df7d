//! A replica joins a connection that is already open (COSCANet-FT §V:
//! "adding replicas to an existing connection"; FT-TCP §3.2's zero-window
//! pause). The router pauses the service's input (`paused`: the client is
//! told a zero window), waits until the connection is quiet, and once the
//! joiner's server holds the group's state it opens a TCP connection of
//! its own to the joiner in the client's name, starting where the client's
//! stream stands (`Conn::join_leg`). From then on the joiner is one more
//! leg: the client's next bytes reach it as they reach the others, and
//! its output, at the same server-stream position as theirs, is translated
//! like theirs.

use super::{Conn, Ctx, LegState, Phase, Seg};
use crate::event::{EvictReason, InputKind};
use crate::ids::{LegId, ReplicaId};
use crate::metrics::DropReason;
use crate::packet::Packet;
use crate::time::Instant;
use ftnet_wire::tcp::{flags, Repr};
use ftnet_wire::{SeqDelta, SeqNum};
use std::net::Ipv4Addr;

/// Whether a connection can be joined now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Quiet {
    /// Open and at rest: the joiner joins it.
    Join,
    /// Closed (or going away): no more input, nothing to join.
    Skip,
    /// At rest as far as the router has seen, but some replica has not yet
    /// confirmed that its output ends where the router's copy of it does
    /// ([`Conn::join_rest_probe`] asks).
    Probe,
    /// Not at rest yet (why), or never joinable (`forever`).
    Wait { why: &'static str, forever: bool },
}

/// How long a closing connection whose bytes were all delivered both ways
/// may stand still before a join ends it ([`Conn::stuck_closing`]).
pub(crate) const STUCK_CLOSING: core::time::Duration = core::time::Duration::from_secs(5);

/// How often a connection that waits for its replicas' confirmation that
/// nothing of their output is missing asks them again.
pub(crate) const REST_PROBE_EVERY: core::time::Duration = core::time::Duration::from_millis(50);

impl Conn {
    /// The service's input is paused (or resumes): the client is told a
    /// zero window (FT-TCP §3.2) on everything the router sends it; on
    /// resuming it gets a window update at once.
    pub(crate) fn set_paused(&mut self, ctx: &mut Ctx, on: bool) {
        if self.paused == on {
            return;
        }
        self.paused = on;
        // Each pause asks its own questions.
        self.rest_probe_at = None;
        if !on && self.phase == Phase::Established {
            self.emit_ack(ctx, false);
        }
    }

    /// A client segment that only repeats bytes (or the FIN) the router
    /// already sent the replicas (a retransmission for one that lost
    /// them): it brings no new input, so it passes during a pause — the
    /// service could not come to rest without it.
    pub(crate) fn repeats_sent_bytes(&self, seg: &Seg) -> bool {
        if seg.flags & (flags::SYN | flags::RST) != 0 || seg.seq.is_before(self.client_isn) {
            return false;
        }
        let data_end = seg.seq.add(seg.payload_len);
        if seg.has(flags::FIN) {
            return self.client_fin == Some(data_end);
        }
        seg.payload_len > 0 && !data_end.is_after(self.client_hi)
    }

    /// The part of a client segment held during a pause that is not new
    /// input, to pass now: the bytes of it the replicas were already sent
    /// (a client's retransmission may join old bytes to new ones, and a
    /// replica that lost the old ones could not come to rest otherwise),
    /// and its ACK, window and timestamp (the client acknowledges the
    /// replicas' output with it; held, the service could not come to rest
    /// before a replica's retransmission timeout). `None` when that part
    /// tells nothing new.
    pub(crate) fn pause_pass_part(&self, pkt: &Packet, seg: &Seg) -> Option<Packet> {
        if self.phase != Phase::Established
            || !seg.has(flags::ACK)
            || seg.flags & (flags::SYN | flags::RST) != 0
            || seg.seq.is_before(self.client_isn)
        {
            return None;
        }
        let old = if seg.seq.is_before(self.client_hi) {
            let n = u32::try_from(self.client_hi.diff(seg.seq)).unwrap_or(0);
            usize::try_from(n.min(seg.payload_len)).unwrap_or(0)
        } else {
            0
        };
        if old == 0 && !seg.ack.is_after(self.client_ack) && seg.window == self.client_win {
            return None;
        }
        let payload = seg.at.payload(pkt);
        let seq = if old > 0 { seg.seq } else { self.client_hi };
        let fl = if old > 0 {
            flags::ACK | flags::PSH
        } else {
            flags::ACK
        };
        let mut r = Repr::new(seg.sport, seg.dport, seq, seg.ack, fl, seg.window);
        r.timestamps = seg.ts;
        Some(Packet::plain(r.emit_ipv4(
            seg.src,
            seg.dst,
            &payload[..old.min(payload.len())],
        )))
    }

    /// The segments held during a join's pause are released (`on`), or
    /// that is over.
    pub(crate) fn set_releasing(&mut self, on: bool) {
        self.releasing = on;
    }

    /// A client segment held while the service is paused: the client is
    /// told (again) that the window is closed, so that it waits in
    /// persist mode instead of retransmitting into the pause.
    pub(crate) fn pause_ack(&mut self, ctx: &mut Ctx) {
        if self.paused && self.phase == Phase::Established {
            self.emit_ack(ctx, false);
        }
    }

    /// Whether the connection is at rest for a join: every byte the
    /// client sent is numbered and acknowledged by every replica, every
    /// replica sent the same output and the client acknowledged all of it,
    /// nobody closed. Then every replica's server holds the same state of
    /// this connection, and a joiner's fresh connection at this point of
    /// both streams is equivalent to theirs.
    pub(crate) fn join_quiet(&self) -> Quiet {
        let wait = |why| Quiet::Wait {
            why,
            forever: false,
        };
        if self.resetting {
            return Quiet::Skip;
        }
        match self.phase {
            Phase::Closed { .. } | Phase::Dead => return Quiet::Skip,
            Phase::Established => {}
            _ => return wait("being set up"),
        }
        if self.vote.is_some() {
            return Quiet::Wait {
                why: "its output is voted on",
                forever: true,
            };
        }
        // Adopted and whole again (`Rebuilt`) is a connection like any
        // other here: only one whose positions are not known yet waits.
        if self.recovering() || !self.client_seen {
            return wait("being rebuilt after a takeover");
        }
        if self.client_ws && self.client_wscale.is_none() {
            return Quiet::Wait {
                why: "adopted after a takeover: the client's window scale is not known",
                forever: true,
            };
        }
        if let Some(f) = self.client_fin {
            // The client sent its last byte: nothing more reaches the
            // servers on this connection, and the joiner takes no part in
            // it, once every replica took every byte and it was numbered
            // (a retransmission passes the pause). The FIN itself need not
            // have arrived: an end of input is no event of the order, and
            // a FIN that never comes (a client that gave up repeating it
            // while no router was up) would hold every join off for good.
            let all = self
                .legs
                .iter()
                .filter(|l| l.open())
                .all(|l| !l.ack.is_before(f));
            return if self.input_hi == f && all {
                Quiet::Skip
            } else {
                wait("closing: the client closed, and not every replica took its last bytes")
            };
        }
        if self.legs.iter().any(|l| l.live() && l.fin.is_some()) {
            return wait("closing: the servers closed it, and the client has not");
        }
        if self.legs.iter().any(|l| l.live() && !l.open()) {
            return wait("a replica has not answered its SYN");
        }
        if self.input_hi != self.client_hi {
            return wait("client bytes not numbered yet");
        }
        for l in self.legs.iter().filter(|l| l.open()) {
            if !l.learned {
                return wait("a replica's position is not known");
            }
            if l.ack != self.client_hi {
                return wait("client bytes not acknowledged by every replica");
            }
            if l.hi != self.sent_hi {
                return wait("a replica's output differs in length from the others'");
            }
        }
        if self.client_ack != self.sent_hi {
            return wait("output not acknowledged by the client");
        }
        if self.client_win == 0 {
            // A replica may hold output back that the router never saw.
            return wait("the client's receive window is closed");
        }
        // The router's copy of a replica's output may end short of what
        // the replica sent: a segment lost on the way, which the replica
        // retransmits only after its timeout. Its server's state is then
        // past the output the group sent, and a joiner's output would be
        // placed where that segment belongs. Each replica's pure ACK tells
        // where its output ends (SND.NXT); every one must have answered a
        // probe sent after the service came to rest with exactly `hi`.
        let mut unconfirmed = false;
        for l in self.legs.iter().filter(|l| l.open()) {
            match l.nxt_seen {
                Some((s, _)) if s.is_after(l.hi) => {
                    return wait("a replica sent output the router has not received");
                }
                Some((s, t)) if s == l.hi && self.rest_probe_at.is_some_and(|p| t >= p) => {}
                _ => unconfirmed = true,
            }
        }
        if unconfirmed {
            return Quiet::Probe;
        }
        Quiet::Join
    }

    /// A connection that keeps a join waiting although nothing of it is
    /// left to deliver: it is closing (the client's FIN came, or every
    /// replica's server closed it), every client byte was numbered and
    /// taken by every replica, the client acknowledged all of the output
    /// but the FIN, and nothing moved on it for [`STUCK_CLOSING`]. Its FIN
    /// handshake stands still (a FIN lost while no router was up, with
    /// its sender gone or given up): it would hold every join off until
    /// the idle timeout. Returns why, for the log, or `None`.
    pub(crate) fn stuck_closing(&self, now: Instant) -> Option<String> {
        if self.phase != Phase::Established
            || self.resetting
            || self.vote.is_some()
            || self.recovering()
            || !self.client_seen
        {
            return None;
        }
        let open: Vec<_> = self.legs.iter().filter(|l| l.open()).collect();
        if open.is_empty() {
            return None;
        }
        let servers_closed = open.iter().all(|l| l.fin.is_some());
        if self.client_fin.is_none() && !servers_closed {
            return None;
        }
        let data_end = self.client_fin.unwrap_or(self.client_hi);
        let still = |t: Instant| now.saturating_sub(t) >= STUCK_CLOSING;
        let delivered = self.input_hi == data_end
            && open.iter().all(|l| {
                l.learned
                    && !l.ack.is_before(data_end)
                    && !self.client_ack.is_before(l.data_hi())
                    && still(l.progress_at)
                    && still(l.out_at)
            });
        if !delivered || !still(self.last_activity) {
            return None;
        }
        Some(format!(
            "closing ({}) with every byte delivered both ways, and still for {} ms",
            match (self.client_fin.is_some(), servers_closed) {
                (true, true) => "the client and the servers closed",
                (true, false) => "the client closed; its FIN has not reached every replica",
                _ =>
                    "the servers closed; the client has not acknowledged their FIN or sent its own",
            },
            now.saturating_sub(self.last_activity).as_millis()
        ))
    }

    /// Ends a connection [`Conn::stuck_closing`] found: a RST to the
    /// client at what it acknowledged (its RCV.NXT) and to each replica
    /// at what it acknowledged (RFC 5961: exactly RCV.NXT).
    pub(crate) fn end_stuck(&mut self, ctx: &mut Ctx, why: String) {
        let r = Repr::new(
            self.key.vport,
            self.key.cport,
            self.client_ack,
            SeqNum(0),
            flags::RST,
            0,
        );
        ctx.tx.push_back(Packet::plain(r.emit_ipv4(
            self.key.vip,
            self.key.client,
            &[],
        )));
        ctx.counters.packets_out += 1;
        for l in self.legs.iter_mut().filter(|l| l.live()) {
            let r = Repr::new(
                self.key.cport,
                self.key.vport,
                l.ack,
                SeqNum(0),
                flags::RST,
                0,
            );
            ctx.tx
                .push_back(Packet::plain(r.emit_ipv4(self.key.client, l.addr, &[])));
            ctx.counters.packets_out += 1;
            l.state = LegState::Evicted;
        }
        ctx.out.event(crate::event::Event::ConnectionEnded {
            conn: self.key.to_string(),
            why,
        });
        self.phase = Phase::Dead;
    }

    /// Where a connection that is not at rest stands, for the log of a
    /// join that failed on it: the client's bytes and output as the router
    /// has them, and each open replica's (`addr` names it).
    pub(crate) fn rest_detail(&self, now: Instant, addr: impl Fn(ReplicaId) -> Ipv4Addr) -> String {
        let cin = |x: SeqNum| x.diff(self.client_isn.add(1));
        let out = |x: SeqNum| x.diff(self.router_isn.add(1));
        let ago = |t: Instant| now.saturating_sub(t).as_millis();
        let mut d = format!(
            "the client sent {} byte(s), {} numbered; the group sent {}, the client acknowledged {}",
            cin(self.client_hi),
            cin(self.input_hi),
            out(self.sent_hi),
            out(self.client_ack)
        );
        for l in self.legs.iter().filter(|l| l.open()) {
            d += &format!(
                "; replica {} acknowledged {} and sent {} (last output {} ms ago{})",
                addr(l.replica),
                cin(l.ack),
                out(l.hi),
                ago(l.out_at),
                match l.nxt_seen {
                    Some((s, t)) =>
                        format!(", its last pure ACK {} ms ago says {}", ago(t), out(s)),
                    None => String::new(),
                }
            );
        }
        d
    }

    /// The rest this connection showed may be out of date: output the
    /// servers wrote after their replicas answered the rest probe (from
    /// input they had read, held back by a full send buffer, say) is on
    /// its way. The next [`Conn::join_quiet`] asks them again.
    pub(crate) fn ask_rest_again(&mut self) {
        self.rest_probe_at = None;
    }

    /// A live join's connection once the donor fixed its checkpoint: the
    /// joiner's leg was placed where the group's output stood when the
    /// service came to rest. Output the servers wrote after their answer
    /// to the rest probe may have been on its way then; had it left the
    /// donor's server before the checkpoint, the joiner's server (restored
    /// from it) will never send it, and its output would be placed short
    /// of the group's. `Ok(true)`: every serving replica answered a probe
    /// sent after [`Conn::ask_rest_again`] with its output ending where the
    /// joiner's leg begins; `Ok(false)`: not all answered yet (probe
    /// again); `Err`: the output moved.
    pub(crate) fn join_point_holds(&self, joiner: ReplicaId) -> Result<bool, &'static str> {
        let Some(at) = self
            .legs
            .iter()
            .find(|l| l.replica == joiner && l.live())
            .and_then(|l| l.joined_out)
        else {
            return Ok(true);
        };
        if self.sent_hi != at {
            return Err("the group's output moved past where the joiner's leg begins");
        }
        let mut all = true;
        for l in self.legs.iter().filter(|l| l.open() && l.replica != joiner) {
            if l.hi != at {
                return Err("a replica's output moved past where the joiner's leg begins");
            }
            match l.nxt_seen {
                Some((s, _)) if s.is_after(at) => {
                    return Err("a replica sent output past where the joiner's leg begins");
                }
                Some((s, t)) if s == at && self.rest_probe_at.is_some_and(|p| t >= p) => {}
                _ => all = false,
            }
        }
        Ok(all)
    }

    /// Ask every open replica where its output ends (a keep-alive, which a
    /// live stack answers at once with its SND.NXT), at most once per
    /// [`REST_PROBE_EVERY`].
    pub(crate) fn join_rest_probe(&mut self, ctx: &mut Ctx) {
        if self
            .rest_probe_at
            .is_some_and(|t| ctx.now.saturating_sub(t) < REST_PROBE_EVERY)
        {
            return;
        }
        self.rest_probe_at = Some(ctx.now);
        for i in 0..self.legs.len() {
            if self.legs[i].open() && self.legs[i].learned {
                self.keepalive(ctx, i);
            }
        }
    }

    /// Add `replica` (at `addr`) to this quiet connection: a SYN in the
    /// client's name starting at the client's next byte (its options as
    /// the client's SYN had them), and the sequencer's `Join` event, which
    /// the joiner's shim takes as the connection's accept (the others
    /// already have it and drop it).
    ///
    /// `held`: a live join's leg, added before the joiner's state is
    /// proven (`Leg::held`).
    pub(crate) fn join_leg(
        &mut self,
        ctx: &mut Ctx,
        replica: ReplicaId,
        addr: Ipv4Addr,
        held: bool,
    ) {
        if self.legs.iter().any(|l| l.replica == replica && l.live()) {
            return;
        }
        self.add_leg(replica, addr, ctx.now);
        let mut i = self.legs.len() - 1;
        if let Some(old) = self.legs.iter().position(|l| l.replica == replica) {
            if old != i {
                // It left this connection before: the fresh leg takes the
                // old one's place (one leg per replica: `leg_of`). Joined
                // connections are never voted on, so no vote state moves.
                self.legs.swap_remove(old);
                i = old;
            }
        }
        self.legs[i].joined_at = Some(self.client_hi);
        self.legs[i].held = held;
        if self.held_lost.is_some_and(|h| h.0 == replica) {
            self.held_lost = None;
        }
        self.legs[i].hi = self.sent_hi;
        self.legs[i].joined_out = Some(self.sent_hi);
        self.legs[i].ack = self.client_hi;
        self.legs[i].edge = self.client_hi;
        self.legs[i].log_nxt = self.client_hi;
        self.send_join_syn(ctx, i);
        if !self.order_to.contains(&addr) {
            self.order_to.push(addr);
        }
        if ctx.sequencer {
            let base = self
                .client_hi
                .0
                .wrapping_sub(self.client_isn.0.wrapping_add(1));
            self.input(ctx, InputKind::Join { base });
        }
    }

    fn send_join_syn(&self, ctx: &mut Ctx, i: usize) {
        let l = &self.legs[i];
        let Some(at) = l.joined_at else {
            return;
        };
        let mut r = Repr::new(
            self.key.cport,
            self.key.vport,
            at.sub(1),
            SeqNum(0),
            flags::SYN,
            self.client_win,
        );
        r.mss = Some(self.client_mss);
        r.wscale = if self.client_ws {
            self.client_wscale
        } else {
            None
        };
        if self.ts_on {
            r.timestamps = Some((self.client_tsval, 0));
        }
        ctx.tx
            .push_back(Packet::plain(r.emit_ipv4(self.key.client, l.addr, &[])));
        ctx.counters.packets_out += 1;
    }

    /// The joiner answered our SYN with a bare ACK: a connection of the
    /// same four-tuple lingers in its kernel (its server was killed with
    /// the connection open, and the FIN it sent was never acknowledged),
    /// and this is its challenge ACK (RFC 5961 §4). As a client whose
    /// SYN meets a stale connection does (RFC 9293 §3.10.7.4, RFC 5961
    /// §4), the router resets it at exactly the sequence number it asked
    /// for, then sends the SYN again.
    pub(super) fn join_challenged(&mut self, ctx: &mut Ctx, i: usize, ack: SeqNum) {
        self.reset_stale(ctx, i, ack);
        self.send_join_syn(ctx, i);
    }

    /// Repeat the SYN to every joining leg that has not answered.
    pub(crate) fn join_syn_again(&mut self, ctx: &mut Ctx) {
        for i in 0..self.legs.len() {
            if self.legs[i].joined_at.is_some() && self.legs[i].state == LegState::SynSent {
                self.legs[i].syn_tries += 1;
                self.send_join_syn(ctx, i);
            }
        }
    }

    /// A live join's joiner, added to this new connection with the
    /// others (its SYN among theirs): held like its joined legs.
    pub(crate) fn add_held_leg(&mut self, replica: ReplicaId, addr: Ipv4Addr, now: Instant) {
        self.add_leg(replica, addr, now);
        if let Some(l) = self.legs.last_mut() {
            l.held = true;
        }
    }

    /// The join of `replica` ended: its legs are held no more. Its server
    /// now catches up on what its sockets hold; the no-progress rule
    /// judges it from now on.
    pub(crate) fn release_held(&mut self, replica: ReplicaId, now: Instant) {
        for l in self
            .legs
            .iter_mut()
            .filter(|l| l.replica == replica && l.held)
        {
            l.held = false;
            l.progress_at = l.progress_at.max(now);
            l.out_at = l.out_at.max(now);
        }
    }

    /// Why `replica`'s held leg was taken out of this connection, if it
    /// was (its join must fail: its server missed this input).
    pub(crate) fn held_lost(&self, replica: ReplicaId) -> Option<EvictReason> {
        self.held_lost.filter(|h| h.0 == replica).map(|h| h.1)
    }

    /// Whether the replica at `addr` is still part of this connection.
    pub(crate) fn live_leg_at(&self, addr: Ipv4Addr) -> bool {
        self.legs.iter().any(|l| l.addr == addr && l.live())
    }

    /// Why the last joining leg was refused, if it was.
    pub(crate) fn join_refusal(&self) -> Option<&str> {
        self.join_refusal.as_deref()
    }

    /// Whether `replica` joined and is open here (`Some(false)`: joining,
    /// `None`: not a joining leg, or it left).
    pub(crate) fn join_state(&self, replica: ReplicaId) -> Option<bool> {
        self.legs
            .iter()
            .find(|l| l.replica == replica && l.joined_at.is_some() && l.live())
            .map(|l| l.open())
    }

    /// Take a joining leg out again (the join failed): RST its side.
    pub(crate) fn unjoin(&mut self, ctx: &mut Ctx, replica: ReplicaId) {
        if let Some(i) = self
            .legs
            .iter()
            .position(|l| l.replica == replica && (l.joined_at.is_some() || l.held) && l.live())
        {
            self.evict(ctx, LegId(i), EvictReason::ReplicaDown, false);
        }
        // The join that held it is over: nothing for the next one (a leg
        // of it that goes later, an abort confirmed, is no news).
        for l in self.legs.iter_mut().filter(|l| l.replica == replica) {
            l.held = false;
        }
        self.held_lost = None;
    }

    /// The joiner's SYN-ACK on a joining leg: its sequence space is
    /// mapped onto the client's at the point the other replicas' output
    /// stands, and the handshake is completed in the client's name.
    pub(super) fn join_synack(&mut self, ctx: &mut Ctx, i: usize, seg: &Seg) {
        let Some(at) = self.legs[i].joined_at else {
            return;
        };
        if !seg.has(flags::ACK) {
            ctx.counters.drop(DropReason::BadState);
            return;
        }
        if seg.ack != at {
            if self.legs[i].state == LegState::SynSent {
                // A SYN-ACK to another SYN: a half-open connection of the
                // same four-tuple lingers in the joiner's kernel (an
                // earlier join's SYN, answered after that join gave up).
                // RFC 9293 §3.10.7.3 (SYN-SENT): an ACK for something not
                // sent gets <SEQ=SEG.ACK><CTL=RST>, which ends it; then
                // the SYN again.
                self.join_challenged(ctx, i, seg.ack);
            } else {
                ctx.counters.drop(DropReason::BadState);
            }
            return;
        }
        match self.legs[i].state {
            LegState::SynSent => {}
            LegState::Open => {
                // Our ACK was lost: the joiner repeats its SYN-ACK.
                self.send_join_ack(ctx, i, seg.seq.add(1));
                return;
            }
            _ => {
                ctx.counters.drop(DropReason::EvictedReplica);
                return;
            }
        }
        // The client was told the group's smallest MSS when it connected;
        // a joiner that takes less would get segments it cannot receive
        // (the router does not split them).
        let mss = seg.mss.unwrap_or(536);
        if self.options_differ(seg) || mss < self.mss_out {
            self.join_refusal = Some(if mss < self.mss_out {
                format!(
                    "its MSS {mss} is below the {} the client was told (the router does not split segments)",
                    self.mss_out
                )
            } else {
                "its TCP options (timestamps, window scaling) differ from the group's".into()
            });
            self.evict(ctx, LegId(i), EvictReason::OptionMismatch, false);
            return;
        }
        let ts_now = self.router_ts(ctx.now);
        let (client_ws, sent_hi) = (self.client_ws, self.sent_hi);
        let l = &mut self.legs[i];
        l.state = LegState::Open;
        // Its first byte is the next byte of the group's output.
        l.off = SeqDelta::between(seg.seq, sent_hi.sub(1));
        l.hi = sent_hi;
        l.out_start = Some(sent_hi);
        l.ack = at;
        l.has_ts = seg.ts.is_some();
        l.has_ws = seg.wscale.is_some();
        l.wscale = if client_ws {
            seg.wscale.unwrap_or(0).min(14)
        } else {
            0
        };
        l.edge = at.add(seg.window as u32);
        l.mss = seg.mss.unwrap_or(536);
        l.syn_window = seg.window;
        if let Some((v, _)) = seg.ts {
            l.ts_last = v;
            l.ts_off = ts_now.wrapping_sub(v);
        }
        l.progress_at = ctx.now;
        l.out_at = ctx.now;
        l.learned = true;
        self.send_join_ack(ctx, i, seg.seq.add(1));
        if self.announced {
            // Every replica's agent keeps the record with the joiner's
            // part (its ISN as if its output had begun with the others').
            ctx.out.agent(crate::event::AgentMsg::Established {
                record: self.record(),
            });
        }
    }

    /// The handshake's last ACK to a joining leg, in the client's name.
    fn send_join_ack(&mut self, ctx: &mut Ctx, i: usize, ack: SeqNum) {
        self.pure_ack_to(ctx, i, self.sent_hi, ack);
        self.legs[i].ack_out = Some(self.sent_hi);
    }
}
