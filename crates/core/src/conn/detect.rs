//! Failure detection and timers (COSCANet-FT §III-D): which legs owe an
//! answer, when they are probed, when they are evicted.

use super::{Conn, Ctx, LegState};
use crate::config::Timeouts;
use crate::event::EvictReason;
use crate::ids::LegId;
use crate::packet::Packet;
use crate::time::Instant;
use ftnet_wire::tcp::{flags, Repr};

/// How often a replica is asked its position while a rebuild waits for it.
const REBUILD_PROBE_EVERY: core::time::Duration = core::time::Duration::from_millis(333);

impl Conn {
    /// Why leg `i` looks dead, for the eviction's log line: how long ago
    /// it was heard from and made progress, and how far it is behind the
    /// furthest live replica and the client.
    pub(super) fn silence_detail(&self, i: usize, now: Instant) -> String {
        let l = &self.legs[i];
        let ago = |t: Instant| now.saturating_sub(t).as_millis();
        let others = self
            .legs
            .iter()
            .enumerate()
            .filter(|&(j, o)| j != i && o.live() && o.open() && !o.detached);
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
        if let Some((nxt, at)) = l.nxt_seen {
            // A pure ACK carries its sender's SND.NXT: output beyond `hi`
            // left the replica and never reached the router.
            let lost = nxt.diff(l.hi);
            if lost > 0 {
                d += &format!(
                    "; its ACK {} ms ago says it sent {lost} byte(s) more than reached the router",
                    ago(at)
                );
            }
        }
        if let (Some(e), true) = (l.edge_out, l.open()) {
            // Output that stands still for want of room is no standstill
            // of its server: say how much room it was last given.
            d += &format!(
                "; the last window it was sent ends {} byte(s) past its output",
                e.diff(l.data_hi())
            );
        }
        if let Some(p) = l.probe_at {
            d += &format!("; last probed {} ms ago", ago(p));
        }
        d += &format!("; connection {}", self.phase.name());
        d
    }

    /// A leg is suspect when it owes an answer: another live leg has
    /// acknowledged or sent more, or answered the SYN while it did not, or
    /// it holds client bytes it has not acknowledged. (Position alone is not
    /// enough: a dead replica that was ahead would never look behind.) Or
    /// it owes a FIN (`fin_owed_since`), which this leaves out: what is
    /// here starts `behind_since`.
    fn behind(&self, i: usize) -> bool {
        let l = &self.legs[i];
        if l.state == LegState::Open && !l.learned {
            // It owes the answer to the probe that asks its position.
            return true;
        }
        if self.recovering() {
            // It told its position; until every replica has, nothing it
            // is sent could be judged (what the client has is not known).
            return false;
        }
        if l.state == LegState::Open && self.client_hi.is_after(l.ack) {
            return true;
        }
        if l.owes_repeat {
            return true;
        }
        self.behind_another(i)
    }

    /// Whether another live leg is ahead of leg `i`: acknowledged or sent
    /// more, or answered the SYN while it did not. Without that, a leg
    /// that merely has not acknowledged the client's newest bytes may lack
    /// them for the client's own reason (a segment the client lost before
    /// the router: every replica holds what follows out of order, and
    /// none can acknowledge it until the client sends it again), and its
    /// silence proves no more than the others' answers: a replica
    /// rate-limiting its answers to out-of-window probes (smoltcp, the
    /// BSDs: one per second) is not dead.
    pub(super) fn behind_another(&self, i: usize) -> bool {
        let l = &self.legs[i];
        if l.state == LegState::Open && !l.learned || l.owes_repeat {
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
                    // A detached leg's output is another stream: only
                    // its input counts.
                    (LegState::Open, LegState::Open) => {
                        o.ack.is_after(l.ack) || (!o.detached && !l.detached && o.data_ahead_of(l))
                    }
                    _ => false,
                }
        })
    }

    /// Since when open leg `i` owes a FIN (`None`: it owes none), that is
    /// when the FIN's sender was last heard; its silence is measured from
    /// there, not from its last answer (an idle connection: seconds ago).
    ///
    /// It owes one while it has not answered a probe sent since: another live replica's FIN stands right where this
    /// one's data ends, and the client's FIN waits for it (a FIN goes out
    /// only where every live replica's stream ends). A replica that
    /// crashed after its own FIN was lost on the way (its RST then not
    /// exact, so not taken) would hold the client's FIN for good; it is
    /// probed and, silent, evicted. One that answers is alive: it is not
    /// probed again until the FIN's sender is heard again (its FIN
    /// retransmitted: on an idle connection whose killed replica sent a
    /// FIN, its healthy peers are asked once per retransmission, not every
    /// quarter of the detection time for as long as the client stays
    /// quiet; one that crashed since it last answered is found), and the FIN never
    /// starts the clock of the no-progress rule (`behind_since`): that
    /// clock starts when it lacks bytes another has.
    fn fin_owed_since(&self, i: usize) -> Option<Instant> {
        let l = &self.legs[i];
        if l.state != LegState::Open || l.fin.is_some() || self.recovering() || l.detached {
            return None;
        }
        self.legs
            .iter()
            .enumerate()
            .filter(|&(j, o)| {
                j != i
                    && o.counts()
                    && o.state == LegState::Open
                    && o.fin == Some(l.data_hi())
                    // Not yet answered a probe sent since that replica was
                    // last heard (its FIN again, unacknowledged: something
                    // still waits).
                    && !l
                        .probe_at
                        .is_some_and(|p| p >= o.seen_at && l.seen_at >= p)
            })
            .map(|(_, o)| o.seen_at)
            .max()
    }

    /// Whether open leg `i` keeps the client's window shut: the window the
    /// router gives the client is zero and this replica's edge is the
    /// group's. Its window update may have been lost; a replica does not
    /// send one again (the sender probes, RFC 9293 §3.8.6.1), and a client
    /// without a persist timer would never ask: the router asks, every
    /// quarter of the detection time, with a keep-alive the replica answers
    /// with its window. Its silence convicts nothing (it owes no bytes).
    pub(super) fn window_shut_by(&self, i: usize) -> bool {
        let l = &self.legs[i];
        if !l.live() || l.state != LegState::Open || !l.learned || self.recovering() {
            return false;
        }
        let (Some(ack), Some(edge)) = (self.group_ack(), self.group_edge()) else {
            return false;
        };
        super::translate::window_field(ack, edge, self.ws_out) == 0 && !l.edge.is_after(edge)
    }

    /// Another replica made progress while some reset: those resets were
    /// crashes, not the service's abort (§III-D).
    pub(super) fn confirm_aborts(&mut self, ctx: &mut Ctx) {
        for j in 0..self.legs.len() {
            if self.legs[j].state == LegState::Aborted {
                self.evict(ctx, LegId(j), EvictReason::Reset, false);
            }
        }
    }

    /// When leg `i` is to be evicted, if it is suspect, and whether the
    /// others' behaviour makes that a service-wide verdict.
    ///
    /// A suspect leg fails when it stays silent for the detection time
    /// while another replica was heard from, or makes no progress for ten
    /// times that (at least 1 s) while another progressed: an application
    /// that stopped while its kernel still answers. Its output counts apart
    /// from its acknowledgments: a stopped server's kernel goes on taking
    /// the client's bytes (`ack` moves) until its buffer is full, while the
    /// output of another replica, ahead of its own, moves and its own does
    /// not; then that window closes, and the input of everyone (numbered
    /// only as far as every window takes it) stops with it, so nobody
    /// progresses any more. When nobody else spoke
    /// either, the client's path or the client is the likelier culprit, and
    /// evicting everyone would turn a stall into a reset: then only a much
    /// longer silence (30 times, at least 3 s) counts, and only for this
    /// connection.
    pub(super) fn fail_deadline(&self, i: usize, t: &Timeouts) -> Option<(Instant, bool)> {
        let l = &self.legs[i];
        if !l.live() {
            return None;
        }
        // Suspect: `behind`, or owing a FIN (`fin_owed_since`).
        let in_data = self.behind(i);
        let fin_owed = if in_data {
            None
        } else {
            Some(self.fin_owed_since(i)?)
        };
        // Nothing from before the router's own pause counts against it.
        let since = l.behind_since.unwrap_or(l.seen_at).max(self.resumed_at);
        let others = || {
            self.legs
                .iter()
                .enumerate()
                .filter(move |&(j, o)| j != i && o.live())
                .map(|(_, o)| o)
        };
        // Owing only a FIN: silent since its sender was last heard (it
        // spoke then: it waits for the client's ACK of it).
        let silent_from = l.seen_at.max(since).max(fin_owed.unwrap_or(Instant::ZERO));
        // Another replica's answer convicts this one's silence only when
        // that replica is ahead of it (see `behind_another`), its FIN
        // included (`fin_owed_since`).
        let others_spoke = fin_owed.is_some()
            || (self.behind_another(i) && others().any(|o| o.seen_at > silent_from));
        let silent = if others_spoke {
            silent_from + t.failure_detection
        } else {
            silent_from + (t.failure_detection * 30).max(core::time::Duration::from_secs(3))
        };
        // Silence convicts only a replica that was asked and did not
        // answer: a probe sent since it was last heard (`on_timer` sends
        // one first if none was), a quarter of the detection time before. On time, the probes (every quarter) make
        // that so anyway. A router whose timers ran late (its loop starved
        // of CPU, or holding them for another thread's lagging queue) asked
        // nobody meanwhile: it asks first. (Without this a replica whose
        // server was merely slow to answer one request, its kernel alive,
        // was declared down for every connection when the router's
        // timers ran 130 ms late under a storm of connections.)
        let silent = match l.asked_at {
            Some(a) if l.asked() => silent.max(a + t.failure_detection / 4),
            // Not asked yet: `on_timer` asks before it convicts.
            _ => silent,
        };
        let stuck_from = l.progress_at.max(since);
        let others_progressed = others().any(|o| o.progress_at > stuck_from);
        // Its output stands still while another's, ahead of it, moved —
        // unless it may be waiting for room: bytes it sent are not
        // acknowledged yet and the client acknowledged nothing since (a
        // client that stopped reading, or is gone: a replica whose send
        // buffer is smaller than another's stops earlier, alive).
        let out_from = l.out_at.max(since);
        let awaits_room = l.data_hi().is_after(self.client_ack) && self.client_ack_at <= out_from;
        // Nagle's algorithm (RFC 896, on by default): a replica with bytes
        // of its own not yet acknowledged by the client holds a tail
        // shorter than one segment until they are. Ahead of it by less
        // than that, another replica that sent its tail proves nothing (a
        // client that died, or acknowledges slowly); only silence can
        // convict it then.
        let mut ahead = others().filter(|o| o.open() && !o.detached).peekable();
        let nagle_tail = l.data_hi().is_after(self.client_ack)
            && ahead.peek().is_some()
            && ahead.all(|o| o.data_hi().diff(l.data_hi()) < i32::from(self.client_mss));
        // Linux sends a segment only if it fits the window whole
        // (`tcp_snd_wnd_test`). Into less room than its next segment needs
        // it sends nothing until its window probe timer fires, and every
        // ACK it gets restarts that timer (`tcp_ack_probe`), the router's
        // own probes among them: a replica behind the others whose window
        // (to the client's edge, the client's window closed) ends less
        // than a segment past its output stands still, alive, until the
        // client reads (e2e `closed-window`: evicted as stalled 1,096
        // bytes short of the client's edge). Only a window with room for a
        // whole segment, sent since its output last moved, makes its
        // standstill evidence, counted from that window (counted from its
        // last output, it was evicted the moment the client read).
        let room_from = l.roomy_from.filter(|&r| r >= l.out_at);
        let short_room = l.edge_out.is_some() && room_from.is_none();
        let others_out = l.open()
            && !l.detached
            && !awaits_room
            && !nagle_tail
            && others()
                .any(|o| o.out_at > out_from && o.open() && !o.detached && o.data_ahead_of(l));
        // Behind in output only, and that output may wait for room (or for
        // the client's ACK, Nagle): it has all the input, so only its
        // silence can convict it.
        let all_input = !self.client_hi.is_after(l.ack) && !others().any(|o| o.ack.is_after(l.ack));
        let output_waits = (awaits_room || nagle_tail || short_room) && all_input;
        // An owed FIN alone is judged by silence only (`fin_owed_since`);
        // a held joiner's server takes nothing yet (`Leg::held`).
        if in_data && !l.held && !output_waits && (others_progressed || others_out) {
            let from = match (others_progressed, others_out) {
                (true, true) => stuck_from.min(out_from),
                (true, false) => stuck_from,
                _ => out_from,
            };
            // Behind in output only: from the window that gave it room.
            let from = match room_from {
                Some(r) if all_input => from.max(r),
                _ => from,
            };
            let stuck = from + (t.failure_detection * 10).max(core::time::Duration::from_secs(1));
            if stuck < silent {
                return Some((stuck.max(self.grace_until()), true));
            }
        }
        Some((silent.max(self.grace_until()), others_spoke))
    }

    /// The router itself did not run for a while (its process stopped, or
    /// not scheduled: [`crate::Router`]'s pause check) and runs again at
    /// `now`. What it reads now may have waited in its queues all that
    /// time, one replica's before another's: no replica's silence or
    /// standstill across the pause is evidence against it (read after the
    /// pause, one replica's queued answer made the others look silent for
    /// the whole of it, and a router stalled for 2 s evicted healthy
    /// replicas, its resets killing their connections). Every verdict of
    /// silence (`fail_deadline`) counts from now.
    pub(crate) fn router_resumed(&mut self, now: Instant) {
        self.resumed_at = self.resumed_at.max(now);
    }

    /// While a suspect leg is silent it is probed every quarter of the
    /// detection time, so that a replica that is merely waiting for a lost
    /// segment answers and is not mistaken for a dead one.
    ///
    /// A replica that lacks bytes of the input log is sent them again
    /// (`log_resend`) once it has made no progress for `LOG_RTO` (at most
    /// that quarter), heard from or not: its duplicate ACKs are no answer.
    pub(super) fn probe_deadline(&self, i: usize, t: &Timeouts) -> Instant {
        let l = &self.legs[i];
        let since = l.behind_since.unwrap_or(l.seen_at);
        if self.log_lacks(i) {
            let last = l
                .progress_at
                .max(since)
                .max(l.probe_at.unwrap_or(Instant::ZERO));
            return last + super::log::LOG_RTO.min(t.failure_detection / 4);
        }
        let last = l
            .seen_at
            .max(since)
            .max(l.probe_at.unwrap_or(Instant::ZERO));
        if l.state == LegState::Open && !l.learned {
            // A replica whose position a rebuild waits for (the client is
            // held until every live one told it) may rate-limit its
            // answers to out-of-window segments (smoltcp and the BSDs: one
            // per second; an answer to the dead router's last segments may
            // have used it up): ask often enough that one round falls
            // after the limit, and a lost answer costs little.
            return last + (t.failure_detection / 4).min(REBUILD_PROBE_EVERY);
        }
        last + t.failure_detection / 4
    }

    /// Note which legs fell behind (or caught up) with this input.
    pub(crate) fn update_behind(&mut self, now: Instant) {
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

    /// Ask a silent replica whether it is alive. An open one gets a TCP
    /// keep-alive with one garbage octet (RFC 9293 §3.8.4): old data, which
    /// a live stack acknowledges at once (Linux does not rate-limit ACKs to
    /// segments that carry data). One that has not answered the SYN gets the
    /// client's SYN again.
    pub(super) fn probe(&mut self, ctx: &mut Ctx, i: usize) {
        let l = &mut self.legs[i];
        if !l.asked() {
            l.asked_at = Some(ctx.now);
        }
        l.probe_at = Some(ctx.now);
        if self.legs[i].state == LegState::SynSent {
            if let Some((base, at)) = self.syn_copy.take() {
                self.send_syn(ctx, &base, at, self.key.vip, i);
                self.syn_copy = Some((base, at));
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
        if self.log_resend(ctx, i) {
            // It lacks logged bytes: they go again, and it answers them.
            return;
        }
        self.keepalive(ctx, i);
    }

    /// A keep-alive to open leg `i`, whose position is known: one garbage
    /// octet one below what it acknowledged. It answers with a pure ACK
    /// carrying its SND.NXT.
    ///
    /// Until the client of an adopted connection has spoken, what it holds
    /// is not known (`client_ack` is the slowest replica's position, a
    /// guess: the leader's segments that were in the router that died never
    /// reached the client). A keep-alive ending at RCV.NXT is acceptable to
    /// Linux, which then takes its ACK: one beyond what the client holds
    /// makes every replica drop bytes the client still lacks, and the
    /// connection hangs with a hole nobody fills. Then the octet lies 2^30
    /// back, wholly before anything the replica could take (RFC 9293
    /// §3.10.7.4): it is answered at once (a segment with data is not
    /// rate-limited) and its ACK is never looked at.
    pub(super) fn keepalive(&mut self, ctx: &mut Ctx, i: usize) {
        let l = &self.legs[i];
        let seq = if self.client_seen {
            l.ack.sub(1)
        } else {
            l.ack.sub(1 << 30)
        };
        let (ack_c, ack) = l.ack_for(self.client_ack);
        let (win, _) = self.window_to(i, self.client_ack, ack_c, self.client_win);
        self.note_window(ctx.now, i, ack_c, win);
        let l = &self.legs[i];
        let mut r = Repr::new(self.key.cport, self.key.vport, seq, ack, flags::ACK, win);
        if self.ts_on {
            r.timestamps = Some((self.client_tsval, self.tsecr_to(i, l.ts_last)));
        }
        ctx.tx
            .push_back(Packet::plain(r.emit_ipv4(self.key.client, l.addr, &[0])));
        ctx.counters.packets_out += 1;
        if self.client_seen {
            self.legs[i].ack_out = Some(ack_c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{conn, CLIENT_ISN};
    use super::super::recovery::{Adoption, REBUILD_GRACE};
    use super::*;
    use crate::config::Voting;
    use core::time::Duration;

    fn at(ms: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(ms)
    }

    fn timeouts(fd_ms: u64) -> Timeouts {
        Timeouts {
            failure_detection: Duration::from_millis(fd_ms),
            ..Timeouts::default()
        }
    }

    /// Two open replicas; leg 1 acknowledged 10 client bytes, leg 0 none
    /// (it owes them). Leg 0 was last heard at `heard0`, made progress at
    /// `prog0`; leg 1 at `heard1` / `prog1`.
    fn pair(heard0: u64, prog0: u64, heard1: u64, prog1: u64) -> Conn {
        let mut c = conn(2, Voting::Fastest);
        c.client_hi = CLIENT_ISN.add(11);
        for (i, (h, p)) in [(heard0, prog0), (heard1, prog1)].into_iter().enumerate() {
            let l = &mut c.legs[i];
            l.state = LegState::Open;
            l.seen_at = at(h);
            l.progress_at = at(p);
        }
        c.legs[0].ack = CLIENT_ISN.add(1);
        c.legs[1].ack = CLIENT_ISN.add(11);
        c
    }

    #[test]
    fn silent_while_another_spoke_fails_after_the_detection_time() {
        let c = pair(1000, 1000, 1500, 1500);
        assert_eq!(c.fail_deadline(0, &timeouts(100)), Some((at(1100), true)));
        // The one ahead owes nothing.
        assert_eq!(c.fail_deadline(1, &timeouts(100)), None);
    }

    #[test]
    fn silent_with_everyone_fails_much_later_and_for_this_connection() {
        // Nobody spoke since: 30 times the detection time, at least 3 s.
        let c = pair(1000, 1000, 900, 900);
        assert_eq!(c.fail_deadline(0, &timeouts(100)), Some((at(4000), false)));
        assert_eq!(c.fail_deadline(0, &timeouts(200)), Some((at(7000), false)));
    }

    #[test]
    fn talking_without_progress_fails_after_ten_times() {
        // Leg 0 keeps answering (heard at 5 s) but moved nothing since 1 s
        // while leg 1 progressed: ten times the detection time, at least
        // 1 s, from its last progress (behind since then).
        let mut c = pair(5000, 1000, 1500, 1500);
        c.legs[0].behind_since = Some(at(1000));
        assert_eq!(c.fail_deadline(0, &timeouts(100)), Some((at(2000), true)));
        assert_eq!(c.fail_deadline(0, &timeouts(300)), Some((at(4000), true)));
    }

    /// A stopped server whose kernel still takes every client byte: leg 0
    /// acknowledges all the client sent (its `ack` moved at 5 s, like leg
    /// 1's), but its output stands where it stood at 1 s while leg 1's,
    /// ahead of it, moved at 4.5 s. Judged by its output: ten times the
    /// detection time from 1 s, not by its acknowledgments (never).
    #[test]
    fn output_that_stands_still_while_another_moves_fails_after_ten_times() {
        let mut c = pair(5000, 5000, 5000, 5000);
        c.legs[0].ack = CLIENT_ISN.add(11);
        c.legs[0].hi = c.legs[1].hi;
        c.legs[0].out_at = at(1000);
        c.legs[1].hi = c.legs[1].hi.add(40);
        c.legs[1].out_at = at(4500);
        c.legs[0].behind_since = Some(at(1000));
        assert_eq!(c.fail_deadline(0, &timeouts(100)), Some((at(2000), true)));
        assert_eq!(c.fail_deadline(0, &timeouts(300)), Some((at(4000), true)));
        assert_eq!(
            c.fail_deadline(1, &timeouts(100)),
            None,
            "leg 1 owes nothing"
        );
        // Output that moved since it fell behind restarts the count.
        c.legs[0].out_at = at(4000);
        assert_eq!(c.fail_deadline(0, &timeouts(100)), Some((at(5000), true)));
        // The other's output standing still too convicts nobody this way
        // (both wait for the client, say): silence rules, and leg 0 talks.
        c.legs[1].out_at = at(3000);
        assert_eq!(c.fail_deadline(0, &timeouts(100)), Some((at(8000), false)));
    }

    /// Three replicas: leg 0 (dead) holds the group back; leg 1's output
    /// stood since 1 s while leg 2's, ahead, moved at 4.5 s. When leg 0 is
    /// evicted at 5 s, leg 1 gets the no-progress time again from then: it
    /// may have stood still only for want of the client's ACKs (before,
    /// it was evicted at once).
    #[test]
    fn an_eviction_restarts_the_others_no_progress_clocks() {
        use super::super::fixture::Outside;
        let mut c = conn(3, Voting::Fastest);
        c.client_hi = CLIENT_ISN.add(11);
        for l in c.legs.iter_mut() {
            l.state = LegState::Open;
            l.seen_at = at(4900);
            l.progress_at = at(1000);
            l.out_at = at(1000);
        }
        c.legs[0].ack = CLIENT_ISN.add(1);
        c.legs[1].ack = CLIENT_ISN.add(11);
        c.legs[2].ack = CLIENT_ISN.add(11);
        c.legs[2].hi = c.legs[1].hi.add(40);
        c.legs[2].out_at = at(4500);
        c.legs[2].progress_at = at(4500);
        c.legs[1].behind_since = Some(at(1000));
        let t = timeouts(100);
        assert_eq!(c.fail_deadline(1, &t), Some((at(2000), true)), "before");
        let mut o = Outside::default();
        c.evict(
            &mut o.ctx(at(5000), &t),
            LegId(0),
            EvictReason::Stalled,
            false,
        );
        assert_eq!(c.legs[0].state, LegState::Evicted);
        // Nobody moved since: only a long silence would count.
        assert_eq!(c.fail_deadline(1, &t), Some((at(8000), false)), "after");
        // Leg 2's output moves again at 5.2 s: leg 1 has until 6 s.
        c.legs[2].out_at = at(5200);
        assert_eq!(c.fail_deadline(1, &t), Some((at(6000), true)), "then");
    }

    /// Leg 0 acknowledges all the client sent but its output stood since
    /// 1 s, 100 bytes past what the client acknowledged; leg 1's output,
    /// 2,000 bytes ahead, moved at 4.5 s. The client acknowledged last at
    /// 0.9 s.
    fn output_behind_unacknowledged() -> Conn {
        let mut c = pair(5000, 5000, 5000, 5000);
        c.legs[0].ack = CLIENT_ISN.add(11);
        c.legs[0].hi = c.client_ack.add(100);
        c.legs[0].out_at = at(1000);
        c.legs[1].hi = c.legs[0].hi.add(2000);
        c.legs[1].out_at = at(4500);
        c.legs[1].progress_at = at(4500);
        c.legs[0].behind_since = Some(at(1000));
        c.client_ack_at = at(900);
        c
    }

    /// Leg 0's output is unacknowledged and the client has acknowledged
    /// nothing since it last sent: its send buffer may be full (a client
    /// that stopped reading, or crashed, and a replica whose buffer is
    /// smaller than the other's stops first). Only silence convicts it
    /// then; once the client acknowledges again and leg 0 still sends
    /// nothing, its standing output counts.
    #[test]
    fn output_that_waits_for_the_clients_ack_is_not_convicted_by_anothers() {
        let mut c = output_behind_unacknowledged();
        assert_eq!(c.fail_deadline(0, &timeouts(100)), Some((at(8000), false)));
        // The client acknowledged at 2 s (leg 0's buffer had room since):
        // ten times the detection time from its last output.
        c.client_ack_at = at(2000);
        c.client_ack = c.client_ack.add(10);
        assert_eq!(c.fail_deadline(0, &timeouts(100)), Some((at(2000), true)));
        // Lacking client bytes (its acknowledgments stood still since 1 s
        // while leg 1's moved), it is behind in input too: no excuse.
        c.client_ack_at = at(900);
        c.legs[0].ack = CLIENT_ISN.add(5);
        c.legs[0].progress_at = at(1000);
        assert_eq!(c.fail_deadline(0, &timeouts(100)), Some((at(2000), true)));
    }

    /// Behind the others by less than one segment, with bytes of its own
    /// the client has not acknowledged, a replica may hold that tail back
    /// under Nagle (the client acknowledges slowly, or died): only its
    /// silence convicts it, even after the client acknowledged something.
    /// Once the client acknowledged all it sent, the tail is owed.
    #[test]
    fn a_tail_held_back_by_nagle_is_not_convicted_by_anothers() {
        let mut c = output_behind_unacknowledged();
        c.client_ack_at = at(2000);
        c.client_ack = c.client_ack.add(10);
        c.legs[1].hi = c.legs[0].hi.add(40);
        assert_eq!(c.fail_deadline(0, &timeouts(100)), Some((at(8000), false)));
        c.client_ack = c.legs[0].hi;
        assert_eq!(c.fail_deadline(0, &timeouts(100)), Some((at(2000), true)));
        // A segment or more behind is no tail.
        c.client_ack = CLIENT_ISN.add(11).add(10);
        c.legs[1].hi = c.legs[0].hi.add(u32::from(c.client_mss));
        assert_eq!(c.fail_deadline(0, &timeouts(100)), Some((at(2000), true)));
    }

    #[test]
    fn a_rebuilt_connection_is_not_judged_during_its_grace() {
        let mut c = pair(1000, 1000, 1500, 1500);
        c.adoption = Some(Adoption::Rebuilt { at: at(1200) });
        assert_eq!(
            c.fail_deadline(0, &timeouts(100)),
            Some((at(1200) + REBUILD_GRACE, true))
        );
        // Also a replica that talks without progress.
        let mut c = pair(5000, 1000, 1500, 1500);
        c.legs[0].behind_since = Some(at(1000));
        c.adoption = Some(Adoption::Rebuilt { at: at(1000) });
        assert_eq!(
            c.fail_deadline(0, &timeouts(100)),
            Some((at(1000) + REBUILD_GRACE, true))
        );
    }

    #[test]
    fn the_probe_comes_every_quarter_of_the_detection_time() {
        let mut c = pair(1000, 1000, 1500, 1500);
        assert_eq!(c.probe_deadline(0, &timeouts(100)), at(1025));
        c.legs[0].probe_at = Some(at(1050));
        assert_eq!(c.probe_deadline(0, &timeouts(100)), at(1075));
    }
}
