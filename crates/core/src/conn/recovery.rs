//! Adoption: a connection another router set up, rebuilt from what the
//! replicas' agents kept (COSCANet-FT §III-C), until every live replica told
//! its position.

use super::{Conn, Ctx, LegState, Phase, Seg, MAX_WIN};
use crate::config::Voting;
use crate::event::InputKind;
use crate::ids::{ReplicaId, ServiceId};
use crate::key::ConnKey;
use crate::packet::Headers;
use crate::record::{ConnRecord, ReplicaSetup};
use crate::time::Instant;
use crate::wrap::mod32;
use ftnet_wire::tcp::{flags, CsumMode};
use ftnet_wire::{SeqDelta, SeqNum};
use std::net::Ipv4Addr;

/// How many of a rebuilt connection's last chunk ends are quoted to its
/// client besides what the replicas acknowledged (`Conn::prompt_client`):
/// a request/response client is acknowledged when the last replica took
/// its request, so its SND.UNA trails by a request or two when a router dies.
pub(crate) const PROMPT_AT: usize = 4;

/// How long replicas of a rebuilt connection are not judged stalled.
pub(super) const REBUILD_GRACE: core::time::Duration = core::time::Duration::from_millis(1500);

/// How long an adopted connection waits for the records of the replicas
/// whose agents have not registered yet.
pub(super) const ADOPT_WAIT: core::time::Duration = core::time::Duration::from_millis(1000);

/// What an adopted connection keeps of the client's segments while it is
/// rebuilt, for the replicas whose position is not known yet
/// (`Conn::early`): segments, and bytes. A client that timed out resends
/// one segment, then waits: a few suffice.
pub(crate) const EARLY_MAX: (usize, usize) = (8, 64 * 1024);

/// An MSS from a record, where 0 (a record of an older agent, or a broken
/// one) means "unknown": RFC 9293 §3.7.1's default for IPv4, 536.
fn mss_or_default(mss: u16) -> u16 {
    if mss == 0 {
        536
    } else {
        mss
    }
}

/// The rebuild of a connection adopted from the agents' records (see
/// [`Conn::adopted`]).
#[derive(Debug)]
pub(super) enum Adoption {
    /// The stream positions are not known yet: nothing goes to the client
    /// until every live replica told its own. `expected`: the replicas
    /// whose records are awaited (since the connection's creation).
    Rebuilding { expected: Vec<Ipv4Addr> },
    /// Whole again since `at`.
    Rebuilt { at: Instant },
}

impl Conn {
    /// Adopted and not whole yet: the stream positions are not known.
    pub(crate) fn recovering(&self) -> bool {
        matches!(self.adoption, Some(Adoption::Rebuilding { .. }))
    }

    /// Adopted from the agents' records (rebuilding or rebuilt).
    pub(super) fn is_adopted(&self) -> bool {
        self.adoption.is_some()
    }

    /// What the replicas' agents keep of this connection (see `ConnRecord`).
    pub(crate) fn record(&self) -> ConnRecord {
        ConnRecord {
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
            client_wscale: if self.client_ws {
                self.client_wscale
            } else {
                None
            },
            accepted: false,
            input_end: None,
            snd_una: None,
            fin_received: false,
        }
    }

    /// A connection another router set up, rebuilt from what the agents
    /// kept (`ConnRecord`): the sequence spaces, window scale and
    /// timestamp base are known, the stream positions are not. Legs are
    /// added with [`Conn::adopt_leg`]; each is probed at once so that it
    /// tells its position, and the connection waits (forwarding the
    /// client's segments, sending the client nothing) until every live leg
    /// did. Output voting is not resumed on an adopted connection.
    /// `from`: the replica whose agent's record this is.
    pub(crate) fn adopted(
        key: ConnKey,
        svc: ServiceId,
        now: Instant,
        from: Ipv4Addr,
        rec: &ConnRecord,
    ) -> Conn {
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
            mss: Some(mss_or_default(rec.client_mss)),
            wscale: Some(0),
            ts: rec.ts_base.map(|_| (0, 0)),
            mode: CsumMode::Complete,
            at: Headers::BARE,
        };
        let router_isn = SeqNum(rec.router_isn);
        let mut c = Conn::new(
            key,
            svc,
            now,
            &syn,
            router_isn,
            rec.ts_base.unwrap_or(0),
            Voting::Fastest,
        );
        c.phase = Phase::Established;
        c.ts_on = rec.ts_base.is_some();
        // RFC 7323 §2.3: a shift count above 14 is used as 14 (a record
        // is input too).
        c.ws_out = rec.wscale_out.min(14);
        c.mss_out = mss_or_default(rec.mss_out);
        c.client_ws = rec.wscale_out > 0;
        // The client's own scale, for a replica that joins this connection
        // (RFC 7323 §2.3: above 14 is 14); unknown from an older router's
        // record, and then no replica can join it.
        c.client_wscale = if c.client_ws {
            rec.client_wscale.map(|s| s.min(14))
        } else {
            None
        };
        c.counted_half_open = false;
        c.announced = true;
        c.adoption = Some(Adoption::Rebuilding {
            expected: rec.addrs(),
        });
        // Its input events go to every replica of the record, also to one
        // that left it before the takeover (see `input`).
        c.order_to = rec.addrs();
        if !c.order_to.contains(&from) {
            c.order_to.push(from);
        }
        c.client_seen = false;
        c.echo_unknown = true;
        c.ts_own_from = c.ts_on.then(|| c.router_ts(now));
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
    /// Returns whether it was new.
    pub(crate) fn adopt_leg(
        &mut self,
        ctx: &mut Ctx,
        replica: ReplicaId,
        r: &ReplicaSetup,
        snd_una: Option<u32>,
        fin_received: bool,
    ) -> bool {
        if self.legs.iter().any(|l| l.replica == replica) {
            return false;
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
        l.una_hint = snd_una.map(SeqNum);
        l.fin_in_hint = fin_received;
        self.probe(ctx, i);
        true
    }

    /// The agent of `addr` handed over every record it had (one batch, as
    /// it registered): if this connection's was not among them it never
    /// comes, and the connection stops waiting for it. (Records name every
    /// replica the connection was set up with; one taken out of it before
    /// the takeover had its agent forget the record, and waiting for it
    /// held the client for `ADOPT_WAIT`.) Returns whether it is whole now.
    pub(crate) fn agent_records_done(&mut self, ctx: &mut Ctx, addr: Ipv4Addr) -> bool {
        let Some(Adoption::Rebuilding { expected }) = &mut self.adoption else {
            return false;
        };
        if !expected.contains(&addr) {
            return false;
        }
        expected.retain(|a| *a != addr);
        self.finish_recovery(ctx)
    }

    /// A connection just adopted does not wait for the records of the
    /// agents in `done`: they handed over all they had before it existed.
    pub(crate) fn records_already_in(&mut self, done: &std::collections::BTreeSet<Ipv4Addr>) {
        if let Some(Adoption::Rebuilding { expected }) = &mut self.adoption {
            expected.retain(|a| !done.contains(a));
        }
    }

    /// After a rebuild every endpoint recovers what the outage dropped on
    /// its own timers (RTOs of 200 ms and more): a learnt replica is not
    /// judged for that long (an unlearnt one is: it owes the probe's answer).
    pub(super) fn grace_until(&self) -> Instant {
        match self.adoption {
            Some(Adoption::Rebuilt { at }) => at + REBUILD_GRACE,
            // Still rebuilding: a replica that has not answered the
            // position probe yet may be rate-limiting its answers (Linux
            // answers an out-of-window segment at most every 500 ms per
            // connection): several probe rounds before it is judged.
            Some(Adoption::Rebuilding { .. }) => self.created + REBUILD_GRACE,
            None => Instant::ZERO,
        }
    }

    /// The far-ahead ACK number of the position probe (client-visible
    /// space): 1.5 GiB beyond the router's ISN.
    pub(super) fn probe_far_ack(&self) -> SeqNum {
        self.router_isn.add(1).add(0x6000_0000)
    }

    /// What replica leg `i`'s segment tells of its position, while the
    /// connection is rebuilt. Returns whether the segment is used further.
    pub(super) fn learn_leg(&mut self, ctx: &mut Ctx, i: usize, seg: &Seg) -> bool {
        let l = &mut self.legs[i];
        let s = seg.seq.shift(l.off);
        let end = s.add(seg.payload_len + seg.has(flags::FIN) as u32);
        let newly = !l.learned;
        if newly {
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
                .wrapping_add(mod32(ctx.now.as_millis()))
                .wrapping_sub(v);
            l.ts_last = v;
            // Its TSecr is the newest client TSval it took: what the
            // router's own segments to it must carry at least (PAWS).
            if !self.client_seen && SeqNum(e).is_after(SeqNum(self.client_tsval)) {
                self.client_tsval = e;
            }
        }
        l.progress_at = ctx.now;
        l.out_at = ctx.now;
        let a = l.ack;
        if a.is_after(self.client_hi) {
            self.client_hi = a;
        }
        if newly {
            self.replay_early(ctx, i);
        }
        self.finish_recovery(ctx)
    }

    /// As the connection becomes whole: the client closed if a replica's
    /// agent read from its kernel that the replica took its FIN. That
    /// replica's RCV.NXT (its ACK) counts the FIN: the input ends one
    /// before it. Unknown, the FIN would be taken for one more byte of
    /// input (numbered as such by the sequencer), and a client that
    /// closed before the takeover never sends it again once a replica
    /// acknowledged it: the connection would seem open for input, and hold
    /// every join off, until it timed out.
    fn learn_client_fin(&mut self) {
        if self.client_fin.is_some() {
            return;
        }
        let Some(a) = self
            .legs
            .iter()
            .filter(|l| l.open() && l.learned && l.fin_in_hint)
            .map(|l| l.ack)
            .reduce(SeqNum::max)
        else {
            return;
        };
        if !a.is_after(self.client_isn.add(1)) {
            return;
        }
        self.client_fin = Some(a.sub(1));
        if a.is_after(self.client_hi) {
            self.client_hi = a;
        }
    }

    /// `primary`, as the connection becomes whole: the client follows the
    /// replica that owes it least. The router that died forwarded one
    /// replica's bytes, and what it had in flight died with it; which
    /// replica it followed is not recorded. A replica whose output ends at
    /// or before what the client holds (`sent_hi`: at least what the
    /// slowest sent) goes on with bytes it sends fresh, as its window
    /// opens; one whose output reaches beyond must first resend those
    /// bytes, on its own retransmission timer (200 ms or more, backed off
    /// in the outage; an echo stream waited 690 ms for one that owed
    /// 162 KB while the replica it had followed before stood exactly where
    /// the client did and sent its next 38 KB at once, held back as a
    /// standby's). So: the one nearest below or at the client, else the
    /// one that owes least.
    fn choose_lead(&mut self) {
        if !self.follows_one() {
            return;
        }
        let at = self.sent_hi;
        self.lead = self
            .legs
            .iter()
            .enumerate()
            .filter(|(_, l)| l.open() && l.learned && !l.held && !l.detached)
            .min_by_key(|(i, l)| {
                let owed = l.hi.is_after(at);
                (owed, l.hi.diff(at).unsigned_abs(), *i)
            })
            .map(|(i, _)| i);
    }

    /// The TSecr for a segment to leg `i` whose echo would be `mapped` (in
    /// its replica's clock). An adopted connection whose replica neither
    /// acknowledged a client byte nor sent one may still be half-open
    /// there: the client's ACK of the handshake died with the router that
    /// forwarded the SYN-ACK. Linux (6.14 on, `tcp_check_req`) then takes
    /// only an ACK that echoes one of its SYN-ACKs' TSvals, or none: the
    /// replica's newer TSvals the router learnt from its position answer
    /// make it drop every segment, the client's data too, as out of
    /// window (a short Redis connection's command waited 1.27 s for the
    /// client's next timeout, and the service's input order with it). Such
    /// a leg gets TSecr 0, which that check skips and an established
    /// socket ignores (RFC 7323 §3.2: no RTT sample), until its replica
    /// has acknowledged or sent a byte.
    pub(super) fn tsecr_to(&self, i: usize, mapped: u32) -> u32 {
        let l = &self.legs[i];
        if self.is_adopted()
            && l.learned
            && l.ack == self.client_isn.add(1)
            && l.hi == self.router_isn.add(1)
        {
            0
        } else {
            mapped
        }
    }

    /// Keep a client segment that reached only the legs `got` while the
    /// connection is rebuilt (`Conn::early`), if some open leg's position
    /// is not known yet and the bound allows.
    pub(super) fn keep_early(&mut self, pkt: &crate::packet::Packet, seg: &Seg, got: &[usize]) {
        if !self.recovering()
            || !self.legs.iter().any(|l| l.open() && !l.learned)
            || self.early.len() >= EARLY_MAX.0
            || self.early_bytes + seg.payload_len as usize > EARLY_MAX.1
        {
            return;
        }
        self.early_bytes += seg.payload_len as usize;
        self.early.push((pkt.clone(), *seg, got.to_vec()));
    }

    /// Leg `i` just told its position: it gets the client's segments that
    /// came during the rebuild and went only to the legs known then, in
    /// their order, with the client's newest ACK and clock (as segments
    /// held during a join's pause are released).
    fn replay_early(&mut self, ctx: &mut Ctx, i: usize) {
        if self.early.is_empty() || !self.legs[i].open() {
            return;
        }
        let mut early = std::mem::take(&mut self.early);
        let releasing = std::mem::replace(&mut self.releasing, true);
        for (p, s, got) in &mut early {
            if !got.contains(&i) {
                got.push(i);
                self.fan_out_to(ctx, p.clone(), s, &[i]);
                ctx.counters.rebuild_resends += 1;
            }
        }
        self.releasing = releasing;
        self.early = early;
    }

    /// Every live leg told its position: the connection is whole again.
    /// Returns whether it is.
    pub(super) fn finish_recovery(&mut self, ctx: &mut Ctx) -> bool {
        let Some(Adoption::Rebuilding { expected }) = &mut self.adoption else {
            return true;
        };
        // Every replica of the connection sends its record when its agent
        // registers; one that joined after the group moved on could never
        // catch up. So wait for the others' records, for a while (an agent
        // whose host died with the router never comes).
        if ctx.now >= self.created + ADOPT_WAIT {
            *expected = Vec::new();
        }
        let legs = &self.legs;
        expected.retain(|a| !legs.iter().any(|l| l.addr == *a));
        let awaited = !expected.is_empty();
        if awaited || self.legs.iter().any(|l| l.open() && !l.learned) || self.live_legs() == 0 {
            return false;
        }
        self.adoption = Some(Adoption::Rebuilt { at: ctx.now });
        self.early = Vec::new();
        self.early_bytes = 0;
        self.prompt_due = true;
        self.prompt_replicas_due = true;
        self.first_word_due = self.client_seen;
        self.evict_log_lost(ctx);
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
        self.learn_client_fin();
        self.choose_lead();
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

    /// The client of a connection just rebuilt may sit in retransmission
    /// back-off: what it sent into the outage was lost, and its next
    /// retransmission can come 400 ms or more after the rebuild (its RTO
    /// doubled at each timeout while nobody answered). The router prompts it
    /// ([`Conn::rto_prompt`]) quoting its SND.UNA, before the rebuild's ACK
    /// (`Conn::prompt_client_probe` follows it). Before: an ACK that moves
    /// SND.UNA clears Linux's retransmission count (`tcp_ack`), and a
    /// prompt after it is ignored; the client's timer, which a partial ACK
    /// of its retransmitted segment does not even restart, then runs out
    /// its back-off (the 600 ms stalls a request/response client saw across
    /// a router cut, when the router that died had not yet passed on the
    /// replicas' ACK of its last request).
    ///
    /// Its SND.UNA is not known to this router: what the replicas
    /// acknowledged, or, when the router before had not told the client
    /// that yet, the end of one of its last segments. With the sequencer
    /// those are the last chunk ends the agents reported (`input_ends`);
    /// each is quoted. A quote that is not its SND.UNA changes nothing (a
    /// soft error, reported only if the connection later times out).
    /// A client that spoke to this router already resent on its own, and is
    /// not prompted; unless it spoke before the connection was whole
    /// (`client_resent_early`): that resend reached no replica, and its
    /// timer is backed off once more (an echo stream across a router kill
    /// whose rebuild took 320 ms: the client resent at 237 ms, then waited
    /// until 677 ms). It is also quoted where its resend began.
    pub(super) fn prompt_client(&mut self, ctx: &mut Ctx) {
        if self.client_seen && self.client_resent_early.is_none() {
            return;
        }
        let Some(ack) = self.client_ack_field() else {
            return;
        };
        // Nothing of the client's arrived: it may never have had the
        // SYN-ACK (the router that died recorded the connection, then sent
        // it too late). In SYN-SENT an ICMP unreachable quoting its ISN + 1
        // (SND.NXT) is a hard error: Linux ends the connect with
        // EHOSTUNREACH (RFC 1122 §4.2.3.9 lets it). No prompt then; the
        // probe is discarded there, answered once established.
        if ack == self.client_isn.add(1) {
            if self
                .legs
                .iter()
                .filter(|l| l.open())
                .all(|l| l.hi == self.router_isn.add(1))
            {
                self.resend_synack(ctx);
            }
            return;
        }
        let mut at = vec![ack];
        if let Some(s) = self.client_resent_early {
            if s != ack && s.is_before(ack) && ack.diff(s) <= MAX_WIN {
                at.push(s);
            }
        }
        for &e in &self.input_ends {
            if e.is_before(ack) && ack.diff(e) <= MAX_WIN && !at.contains(&e) {
                at.push(e);
            }
        }
        for seq in at {
            let quoted = ftnet_wire::icmp::Unreachable {
                code: ftnet_wire::icmp::CODE_HOST_UNREACHABLE,
                src: self.key.client,
                dst: self.key.vip,
                src_port: self.key.cport,
                dst_port: self.key.vport,
                seq,
            };
            rto_prompt(ctx, self.key.vip, &quoted);
        }
    }

    /// Nothing of the client's reached a replica and no replica sent a
    /// byte: the client may still sit in SYN-SENT, its SYN-ACK lost with
    /// the router that died (which had the connection recorded, then sent
    /// the SYN-ACK, or not). It would send its SYN again only after its
    /// initial timeout, a second, and with the sequencer every replica's
    /// server waits for that connection's Accept meanwhile: the whole
    /// service stalls. The SYN-ACK goes again, as the record has it (ISN,
    /// MSS, window scale, timestamps with TSecr 0: Linux in SYN-SENT takes
    /// it, `tcp_rcv_synsent_state_process`, where an echo it cannot place
    /// would draw a reset). A client that had it answers, established, with
    /// a challenge ACK (RFC 5961 §4), which tells where it stands.
    fn resend_synack(&mut self, ctx: &mut Ctx) {
        if self.send_synack(ctx).is_some() {
            ctx.counters.rebuild_synacks += 1;
        }
    }

    /// After the rebuild's ACK: one garbage octet 2^30 before what the
    /// client was sent, wholly unacceptable (RFC 9293 §3.10.7.4). The
    /// client answers at once with an ACK of what it holds (a segment with
    /// data is not rate-limited), and that tells the router which replicas
    /// must resend ([`Conn::prompt_replicas`]) — also for a client with
    /// nothing to resend, waiting for bytes that died with the router
    /// before.
    pub(super) fn prompt_client_probe(&mut self, ctx: &mut Ctx) {
        if self.client_seen && !self.first_word_due {
            return;
        }
        let Some(ack) = self.client_ack_field() else {
            return;
        };
        self.segment_to_client(
            ctx,
            self.sent_hi.sub(1 << 30),
            flags::ACK,
            ack,
            self.adv_edge,
            &[0],
        );
    }

    /// The client's first segment after a rebuild tells what it holds (its
    /// ACK, forwarded to the replicas just before). A replica that sent
    /// more waits for its own retransmission timeout, backed off while no
    /// router was up, to resend what died with the router before: the
    /// stall a router's loss costs a download or an echo. Its SND.UNA is
    /// now that ACK (no replica was acknowledged more than the client
    /// holds): it is prompted ([`Conn::rto_prompt`]).
    pub(super) fn prompt_replicas(&mut self, ctx: &mut Ctx, ack: SeqNum) {
        for l in &self.legs {
            if !l.open() || !l.learned || l.detached || !l.hi.is_after(ack) {
                continue;
            }
            let (_, seq) = l.ack_for(ack);
            prompt_replica(ctx, &self.key, l.addr, seq);
        }
    }

    /// A connection just rebuilt: every replica
    /// whose agent reported its SND.UNA (`Leg::una_hint`, read from its
    /// kernel as the record was handed over) and that has output beyond
    /// it is prompted to resend now, quoting exactly that (RFC 6069;
    /// Linux `tcp_ld_RTO_revert`). Later would be too late: the client's
    /// ACK, forwarded to the replica, moves its SND.UNA when the router
    /// before died with its last ACKs, and Linux then clears the count of
    /// timeouts a prompt needs and rearms a fresh RTO (200 ms or more)
    /// instead, the stall a router's loss cost a download or an echo
    /// stream after the rebuild. A hint that went stale (an ACK reached
    /// the replica since: the client spoke before the connection was
    /// whole) is below its SND.UNA and ignored (Linux `tcp_v4_err` takes
    /// only quotes within SND.UNA..SND.NXT).
    pub(super) fn prompt_replicas_at_una(&mut self, ctx: &mut Ctx) {
        for l in &mut self.legs {
            let Some(una) = l.una_hint.take() else {
                continue;
            };
            if !l.open() || !l.learned || l.detached || !l.hi.unshift(l.off).is_after(una) {
                continue;
            }
            prompt_replica(ctx, &self.key, l.addr, una);
        }
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
    pub(super) fn cover_acked(&mut self, ctx: &mut Ctx) {
        if !ctx.sequencer {
            return;
        }
        // Safe delivery numbers only what every replica acknowledged (the
        // router that died did the same): an acknowledgment past the last
        // chunk is the rule there, and announces nothing.
        let top = if self.safe {
            self.stable()
        } else {
            self.legs
                .iter()
                .filter(|l| l.open() && l.learned)
                .map(|l| l.ack)
                .reduce(|a, b| a.max(b))
        };
        let top = match (top, self.client_fin) {
            (Some(t), Some(f)) => Some(t.min(f)),
            (t, _) => t,
        };
        if let Some(top) = top {
            self.number_to(ctx, top);
        }
    }

    /// What a replica's agent knew of this connection's input order: its
    /// Accept went out, and the chunks up to stream offset `input_end`;
    /// `ends`: where the last chunks of the order the agents reported end
    /// (stream offsets, newest first).
    pub(crate) fn adopt_order(&mut self, accepted: bool, input_end: Option<u32>, ends: &[u32]) {
        self.order_accepted |= accepted;
        if let Some(e) = input_end {
            let at = self.client_isn.add(1).add(e);
            if at.is_after(self.input_hi) {
                self.input_hi = at;
            }
        }
        // (Each record finds the router's log with every report so far.)
        if !ends.is_empty() {
            let base = self.client_isn.add(1);
            self.input_ends = ends.iter().take(PROMPT_AT).map(|&e| base.add(e)).collect();
        }
    }

    /// The client's first segment on an adopted connection: its ACK is what
    /// it received, its sequence number where its stream stands.
    pub(super) fn learn_client(&mut self, seg: &Seg) {
        self.client_seen = true;
        if self.recovering() {
            self.client_resent_early = Some(seg.seq);
        }
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
}

/// The replica at `addr` is prompted to resend its output of connection
/// `key` from `seq` (its SND.UNA, its own sequence space), by messages that
/// seem to come from the client's side.
fn prompt_replica(ctx: &mut Ctx, key: &crate::key::ConnKey, addr: Ipv4Addr, seq: SeqNum) {
    let quoted = ftnet_wire::icmp::Unreachable {
        code: ftnet_wire::icmp::CODE_HOST_UNREACHABLE,
        src: addr,
        dst: key.client,
        src_port: key.vport,
        dst_port: key.cport,
        seq,
    };
    rto_prompt(ctx, key.client, &quoted);
}

/// ICMP host-unreachable messages to the sender of the segment `quoted`
/// describes, from `from`. Linux (RFC 6069, `tcp_ld_RTO_revert`) takes back
/// one step of its retransmission back-off per message that quotes its
/// SND.UNA while it is in back-off, and retransmits at once where the
/// reverted timeout has passed; a host not in back-off, or quoted at
/// another number, ignores them (a soft error, reported only if the
/// connection later times out). `PROMPTS` messages cover that many
/// back-off steps (an outage of up to ~1.4 s at the 200 ms minimum RTO).
fn rto_prompt(ctx: &mut Ctx, from: Ipv4Addr, quoted: &ftnet_wire::icmp::Unreachable) {
    const PROMPTS: usize = 3;
    for _ in 0..PROMPTS {
        ctx.tx.push_back(crate::packet::Packet::plain(
            ftnet_wire::icmp::emit_unreachable(from, quoted.src, quoted.code, quoted),
        ));
        ctx.counters.packets_out += 1;
        ctx.counters.rto_prompts += 1;
    }
}
