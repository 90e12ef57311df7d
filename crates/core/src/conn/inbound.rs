//! Client → replicas (COSCANet-FT §III-C): checks on the client's
//! segments, the sequencer's input numbering, the fan-out.

use super::{may_challenge, translate_tsecr, Conn, Ctx, Phase, Seg, MAX_WIN};
use crate::event::{InputKind, Unnumbered};
use crate::metrics::DropReason;
use crate::packet::Packet;
use crate::time::Instant;
use ftnet_wire::tcp::{flags, Repr};
use ftnet_wire::SeqNum;
use std::net::Ipv4Addr;

impl Conn {
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
    pub(super) fn input(&mut self, ctx: &mut Ctx, kind: InputKind) {
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
        if matches!(kind, InputKind::Data { .. })
            && self.is_adopted()
            && self.missed_no_leg.is_none()
        {
            self.note_missed_no_leg();
        }
        let replicas = self.order_to.clone();
        ctx.out.input(Unnumbered {
            key: self.key,
            kind,
            replicas,
        });
    }

    /// The first chunk of an adopted connection is numbered: a replica of
    /// its record with no leg in it (its agent had no record of it, so its
    /// server has no socket of it: the router before reset it, or the
    /// server lost it, while no router could tell) gets this event without
    /// the bytes, and its shim drops it. Its server misses this input,
    /// which the others apply, and it would serve on with a state that is
    /// no longer the group's (a Redis replica kept serving with ten
    /// writers' commands missing after such a takeover). The router takes
    /// it out of the service, loudly (`Router::after`, for a service that
    /// keeps state in its order).
    fn note_missed_no_leg(&mut self) {
        let legs = &self.legs;
        let missing: Vec<Ipv4Addr> = self
            .order_to
            .iter()
            .copied()
            .filter(|a| !legs.iter().any(|l| l.addr == *a))
            .collect();
        self.missed_no_leg = Some(missing);
    }

    /// The replicas [`Conn::note_missed_no_leg`] found, once (the router
    /// logs and judges them: `Router::after`).
    pub(crate) fn take_missed_no_leg(&mut self) -> Vec<Ipv4Addr> {
        match &mut self.missed_no_leg {
            Some(v) => std::mem::take(v),
            None => Vec::new(),
        }
    }

    /// A segment from the client on an existing connection.
    pub(crate) fn client_segment(&mut self, ctx: &mut Ctx, pkt: Packet, seg: &Seg) {
        if self.resetting {
            // The client reset the connection; the replicas still taking
            // the log's bytes are finished without it.
            ctx.counters.drop(DropReason::BadState);
            return;
        }
        if seg.has(flags::RST) {
            self.client_rst(ctx, pkt, seg);
            return;
        }
        if matches!(self.phase, Phase::Handshake | Phase::Committing { .. }) {
            // The client cannot have seen our SYN-ACK; only a RST makes sense.
            ctx.counters.drop(DropReason::BadState);
            return;
        }
        if !self.client_seen {
            let rebuilt = self.is_adopted() && !self.recovering();
            self.learn_client(seg);
            if rebuilt {
                self.dup_acks_for_lost_tail(ctx, seg);
            }
        } else if self.first_word_due && !self.recovering() {
            // It spoke only while the connection was rebuilt: this is its
            // first word since (the answer to the rebuild's probe, say).
            self.first_word_due = false;
            self.dup_acks_for_lost_tail(ctx, seg);
        }
        if let (true, Some((_, e))) = (self.ts_on, seg.ts) {
            self.follow_client_echo(ctx.now, e);
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
            && self.is_adopted()
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
            if seg.ack.is_after(self.client_ack) {
                for l in &mut self.legs {
                    l.owes_repeat = false;
                }
                self.client_ack_at = ctx.now;
            }
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
        if seg.payload_len > 0 && self.log.is_some() {
            self.log_client(ctx, seg.seq, seg.at.payload(&pkt));
        }
        if ctx.sequencer
            && !self.safe
            && seg.payload_len > 0
            && !seg.seq.is_after(self.input_hi)
            && matches!(self.phase, Phase::Established | Phase::Closed { .. })
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
            // (With an input log, also what the log holds: the router
            // sends it to a replica whose window takes it later.)
            let end = match self.min_edge() {
                Some(e) => data_end.min(self.log_reach(e)),
                None => data_end,
            };
            self.number_to(ctx, end);
        }
        if self
            .client_rtx_hi
            .is_some_and(|h| !h.is_after(self.adv_ack))
        {
            self.client_rtx_hi = None;
        }
        let carries = seg.payload_len > 0 || seg.has(flags::FIN);
        if carries
            && (seg.seq.is_before(self.client_hi) || self.echo_unknown)
            && end.is_after(self.adv_ack)
        {
            // Sent again, and not yet acknowledged to the client.
            self.client_rtx_hi = Some(self.client_rtx_hi.map_or(end, |h| h.max(end)));
        }
        if self.echo_unknown && (carries || self.group_ack().is_some_and(|a| !a.is_before(seg.seq)))
        {
            self.echo_unknown = false;
        }
        if carries {
            // What the replicas are sent (a pure ACK's sequence number may
            // count bytes that reached no router, after a takeover).
            self.client_hi = self.client_hi.max(end);
        }
        if seg.has(flags::FIN) {
            self.client_fin = Some(seg.seq.add(seg.payload_len));
            if self.fin_hold.is_none() && seg.has(flags::ACK) {
                self.fin_hold = Some(seg.ack);
            }
        }
        if carries {
            self.dup_idle = (ctx.now, 0);
            if let Some(a) = self.group_ack().filter(|a| seg.seq.is_after(*a)) {
                // Every replica that lacks the bytes before it answers
                // with a duplicate ACK; one of those goes to the client.
                self.earn_dup(a);
            }
        }
        ctx.counters.client_bytes_in += seg.payload_len as u64;
        self.fan_out(ctx, pkt, seg);
        if self.prompt_replicas_due && !self.recovering() && seg.has(flags::ACK) {
            self.prompt_replicas_due = false;
            self.prompt_replicas(ctx, seg.ack);
        }
        if self.answers_itself(seg, carries, end) {
            self.emit_ack(ctx, false);
        }
        self.check_closed(ctx);
    }

    /// The client echoes the newest TSval it got (`e`). A router that took
    /// over must never send one below it (PAWS would drop its segments,
    /// RFC 7323 §5): its clock moves forward to it, and every TSval up to
    /// it was the router's before (`ts_own_from`). Once the client echoes
    /// this router's own clock, echoes reach the replicas mapped again.
    fn follow_client_echo(&mut self, now: Instant, e: u32) {
        if e == 0 {
            return;
        }
        let now_ts = self.router_ts(now);
        let ahead = SeqNum(e).is_after(SeqNum(now_ts));
        if ahead {
            self.ts_base = self.ts_base.wrapping_add(e.wrapping_sub(now_ts));
        }
        self.ts_own_from = match self.ts_own_from {
            Some(_) if ahead => Some(e.wrapping_add(1)),
            Some(f) if SeqNum(e).is_before(SeqNum(f)) => Some(f),
            _ => None,
        };
    }

    /// A client segment the router answers itself, with the group's ACK
    /// and window, as the client's peer would (RFC 9293 §3.10.7.4: a
    /// duplicate segment is acknowledged). The replicas answer such a
    /// segment too, but their answers change nothing and are absorbed. Two
    /// kinds:
    /// - Bytes (or a FIN) already acknowledged: the client did not get our
    ///   ACK. A replica whose connection ended answers with a RST, dropped
    ///   as stray. What the group acknowledged counts, not only what the
    ///   client was told: the replicas' ACK of the client's FIN may come on
    ///   FINs that repeat the one the client already has, which pass
    ///   nothing on; unanswered, the client repeats its FIN in CLOSING until
    ///   it gives up. (Only what the client was told while a rebuilt
    ///   connection learns where its replicas stand: what they acknowledged
    ///   is not known yet.)
    /// - A probe: nothing in it, one below what the client was acknowledged
    ///   (Linux's keep-alive and zero-window probe, `tcp_xmit_probe_skb`).
    ///   Unanswered, a client's keep-alive ends its connection after its
    ///   probe count, and its zero-window probe never learns that the window
    ///   opened when the update itself was lost.
    fn answers_itself(&self, seg: &Seg, carries: bool, end: SeqNum) -> bool {
        if !carries {
            return seg.seq.add(1) == self.adv_ack
                && self.phase == Phase::Established
                && !self.recovering();
        }
        if !matches!(self.phase, Phase::Established | Phase::Closed { .. }) {
            return false;
        }
        // (Computed only here: most client segments are pure ACKs, and the
        // group's ACK is a minimum over the legs.)
        let acked = match self.client_ack_field() {
            Some(a) if !self.recovering() => a.max(self.adv_ack),
            _ => self.adv_ack,
        };
        !end.is_after(acked)
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
    pub(super) fn client_rst(&mut self, ctx: &mut Ctx, pkt: Packet, seg: &Seg) {
        let half_open = self.half_open();
        let exact = if half_open {
            seg.seq == self.client_isn.add(1)
        } else {
            seg.seq == self.client_hi || seg.seq == self.adv_ack
        };
        if exact {
            self.last_activity = ctx.now;
            if matches!(self.phase, Phase::Handshake | Phase::Committing { .. }) {
                // No replica's SYN-ACK was passed on: reset each at the
                // client's ISN + 1.
                self.abort_legs(ctx);
                self.phase = Phase::Dead;
                return;
            }
            // The sequencer ends the connection's input here, in every
            // delivery mode: no chunk is numbered after a client's reset
            // (the paths below send what replicas lack, unnumbered), so
            // every server sees the same input, then the reset. A shim
            // whose kernel never gave the connection (the reset reached a
            // replica still in SYN-RECEIVED, which drops it) learns from
            // this event that it never will, and gives its server the
            // accept and the reset the others' servers see, instead of
            // waiting for a connection that cannot come.
            if ctx.sequencer && self.order_accepted {
                self.input(ctx, InputKind::Reset);
            }
            if self.log_reset(ctx) {
                // With an input log, a replica that lacks bytes the
                // others have gets them first, then the abort (`log.rs`).
                return;
            } else if self.safe_reset(ctx) {
                // Safe delivery: no server read a byte some live replica
                // lacks; each is reset where it stands.
                return;
            } else if self.wait_reset(ctx) {
                // Without: a replica behind another is reset once it
                // acknowledged as much, or leaves (`log.rs`).
                return;
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
        if matches!(self.phase, Phase::Handshake | Phase::Committing { .. }) || self.recovering() {
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
    pub(crate) fn syn_on_live(&mut self, ctx: &mut Ctx) {
        ctx.counters.drop(DropReason::SynOnLiveConnection);
        if self.recovering() || self.phase != Phase::Established {
            return;
        }
        let mut last = self.challenge_at;
        if may_challenge(ctx, &mut last) {
            self.challenge_at = last;
            self.emit_ack(ctx, false);
        }
    }

    /// The sequencer's next chunk of this connection ends at `end` (client
    /// stream), if that is past what was numbered.
    pub(super) fn number_to(&mut self, ctx: &mut Ctx, end: SeqNum) {
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
    /// With safe delivery `ack` is not used: bytes are numbered only up
    /// to what every live replica acknowledged (the stable watermark).
    pub(super) fn number_acked(&mut self, ctx: &mut Ctx, ack: SeqNum) {
        if !ctx.sequencer
            || self.recovering()
            || !matches!(self.phase, Phase::Established | Phase::Closed { .. })
        {
            return;
        }
        let ack = if self.safe {
            match self.stable() {
                Some(a) => a,
                None => return,
            }
        } else {
            ack
        };
        let top = match self.client_fin {
            Some(f) => ack.min(f),
            None => ack,
        };
        self.number_to(ctx, top);
    }

    /// Safe delivery: what every open replica whose position is known
    /// acknowledged (none while one's is not known).
    pub(super) fn stable(&self) -> Option<SeqNum> {
        let open = self.legs.iter().filter(|l| l.open());
        if open.clone().any(|l| !l.learned) {
            return None;
        }
        open.map(|l| l.ack).reduce(|a, b| a.min(b))
    }

    /// The client's exact reset under safe delivery (not with an input log,
    /// whose bytes reach every replica first, nor on a rebuilt connection):
    /// the sequencer said the connection ended (its servers see the reset
    /// at that point of the order, and read none of the bytes beyond the
    /// last chunk, which not every replica holds), and every open replica
    /// is reset at its own RCV.NXT: none lacks a byte a server read, so
    /// none is taken out.
    fn safe_reset(&mut self, ctx: &mut Ctx) -> bool {
        if !self.safe || !ctx.sequencer || self.recovering() || self.log.is_some() {
            return false;
        }
        self.reset_wait = None;
        self.resetting = true;
        self.reset_caught_up(ctx);
        self.phase = Phase::Dead;
        true
    }

    /// Send one client segment to every open replica, translated for each.
    pub(super) fn fan_out(&mut self, ctx: &mut Ctx, pkt: Packet, seg: &Seg) {
        // A leg whose position is not known yet (an adopted connection,
        // until it answers the position probe) gets no client segment but
        // a RST: any ACK number could be beyond what it sent, which makes a
        // stack drop the segment, data and all. The client sends the data
        // again, since the group did not acknowledge it.
        let rst = seg.has(flags::RST);
        let targets: Vec<usize> = (0..self.legs.len())
            .filter(|&i| self.legs[i].open() && (self.legs[i].learned || rst))
            .collect();
        if !rst && (seg.payload_len > 0 || seg.has(flags::FIN)) {
            self.keep_early(&pkt, seg, &targets);
        }
        self.fan_out_to(ctx, pkt, seg, &targets);
    }

    /// [`Conn::fan_out`] to the open legs `targets`.
    pub(super) fn fan_out_to(&mut self, ctx: &mut Ctx, pkt: Packet, seg: &Seg, targets: &[usize]) {
        let rst = seg.has(flags::RST);
        // Per segment, the same for every replica. A segment held during a
        // join's pause, released now, carries what the client acknowledged
        // and its clock then; the replica has seen newer since (their ACK
        // and timestamp passed at once: an ACK below its SND.UNA makes some
        // stacks drop the segment, data and all; a TSval below TS.Recent
        // fails PAWS, RFC 7323 §5). It gets the client's newest of both.
        let late = self.releasing;
        let ack_in = if late {
            seg.ack.max(self.client_ack)
        } else {
            seg.ack
        };
        let tsval = seg.ts.map(|(v, _)| {
            if late && SeqNum(self.client_tsval).is_after(SeqNum(v)) {
                self.client_tsval
            } else {
                v
            }
        });
        // An echo of the router before's clock reaches no replica (`ts_own_from`).
        let old_echo = seg.ts.is_some_and(|(_, e)| {
            self.ts_own_from
                .is_some_and(|f| SeqNum(e).is_before(SeqNum(f)))
        });
        // Safe delivery numbers client bytes once every replica
        // acknowledged them, and a server answers only what it was given:
        // a replica's kernel in delayed-ACK mode (an interactive
        // connection: Linux's pingpong mode) would hold each request's ACK
        // back up to 40 ms. A copy of the segment's last byte, right
        // behind it, is a duplicate when it arrives, which Linux
        // acknowledges at once (RFC 9293 §3.10.7.4) and which puts it in
        // quick-ACK mode. The byte is the client's own: should the segment
        // itself be lost, the copy waits out of order and is either
        // covered by the retransmission or, if a retransmission ends right
        // before it, the right byte.
        let prompt = (self.safe && ctx.sequencer && !rst && seg.payload_len > 0)
            .then(|| seg.at.payload(&pkt).last().copied())
            .flatten();
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
            let (ack_c, ack) = l.ack_for(ack_in);
            // The client's edge for a replica behind the others; under
            // voting, one far ahead of the slowest is held back
            // (`window_to`).
            let win = if seg.has(flags::ACK) {
                let w = self.windowed(ctx.now, i, ack_in, ack_c, seg.window);
                (w != seg.window).then_some(w)
            } else {
                None
            };
            // The client's FIN, to a replica that has not sent what the
            // client had when it closed, goes once it has (`fin_held`).
            let hold = seg.has(flags::FIN) && !rst && self.fin_held(i);
            let l = &self.legs[i];
            let addr = l.addr;
            // RFC 5961 §3.2 at the replica: a RST counts only at exactly
            // its RCV.NXT, which is at least what it acknowledged (the
            // client's RST may be at what the group acknowledged).
            let rst_seq = (rst && l.learned && seg.seq.is_before(l.ack)).then_some(l.ack);
            let tsecr = seg.ts.map(|(_, e)| {
                if l.learned && !old_echo {
                    self.tsecr_to(i, translate_tsecr(e, l.ts_off, l.ts_last))
                } else {
                    0
                }
            });
            seg.at.rewrite(&mut p, |ip, t| {
                ip.set_dst(l.addr);
                t.update_pseudo_addr(seg.dst, l.addr, seg.mode);
                if seg.has(flags::ACK) {
                    t.set_ack(ack, seg.mode);
                }
                if let Some(w) = win {
                    t.set_window(w, seg.mode);
                }
                if let (Some(e), Some(v)) = (tsecr, tsval) {
                    t.set_timestamps(v, e, seg.mode);
                }
                if let Some(s) = rst_seq {
                    t.set_seq(s, seg.mode);
                }
                if hold {
                    t.set_flags(seg.flags & !flags::FIN, seg.mode);
                }
                // The group never agreed to SACK; drop any blocks.
                t.strip_sack(seg.mode);
            });
            if seg.has(flags::ACK) {
                self.legs[i].ack_out = Some(ack_c);
            }
            ctx.tx.push_back(p);
            ctx.counters.packets_out += 1;
            if let (Some(b), true) = (prompt, seg.has(flags::ACK)) {
                let mut r = Repr::new(
                    self.key.cport,
                    self.key.vport,
                    seg.seq.add(seg.payload_len - 1),
                    ack,
                    flags::ACK,
                    win.unwrap_or(seg.window),
                );
                if let (Some(e), Some(v)) = (tsecr, tsval) {
                    r.timestamps = Some((v, e));
                }
                ctx.tx
                    .push_back(Packet::plain(r.emit_ipv4(self.key.client, addr, &[b])));
                ctx.counters.packets_out += 1;
                ctx.counters.ack_prompts += 1;
            }
            if hold && !self.legs[i].client_fin_held {
                self.legs[i].client_fin_held = true;
                ctx.counters.fins_held += 1;
            }
            if !rst {
                self.log_forwarded(i, seg.seq, seg.payload_len, seg.has(flags::FIN) && !hold);
            }
        }
    }
}
