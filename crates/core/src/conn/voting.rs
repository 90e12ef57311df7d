//! Output voting of a connection (MISSION.md #12): bytes go to the client
//! once a majority of the live replicas agreed on them.

use super::{Conn, Ctx, Seg};
use crate::config::Tie;
use crate::event::{Event, EvictReason};
use crate::ids::LegId;
use crate::metrics::DropReason;
use crate::packet::Packet;
use crate::time::Instant;
use crate::vote::{self, Offer, Outcome};
use crate::wrap::len32;
use ftnet_wire::tcp::flags;
use ftnet_wire::SeqNum;
use std::collections::VecDeque;

/// Output voting of one connection (MISSION.md #12, `crate::vote`). The
/// server stream is cut at `decided()`: before it, bytes a majority of the
/// live replicas agreed on (the client was sent them); after it, what each
/// replica offered that has no majority yet.
#[derive(Debug)]
pub(super) struct VoteState {
    pub(super) tie: Tie,
    /// Client-space position of `agreed[0]`.
    pub(super) base: SeqNum,
    /// Decided bytes, kept until every live replica has sent past them so
    /// that a lagging replica is still compared.
    pub(super) agreed: VecDeque<u8>,
    /// Per leg: its bytes from `decided()` on (empty while it is behind).
    pub(super) pending: Vec<Pending>,
    /// Per leg: end of the bytes it offered, contiguous from the start.
    pub(super) seen: Vec<SeqNum>,
    /// Per leg: segments beyond a hole in what it sent, for when the hole
    /// is filled.
    pub(super) stash: Vec<Vec<(SeqNum, Vec<u8>)>>,
    /// The FIN was decided, at `decided()`.
    pub(super) fin: bool,
}

impl VoteState {
    pub(super) fn decided(&self) -> SeqNum {
        self.base.add(len32(self.agreed.len()))
    }
}

/// What one replica offered beyond the decided point. Decided bytes leave
/// from the front without moving the rest each time (a replica ahead of
/// the others by megabytes had them all moved for every segment decided);
/// the buffer is compacted once half of it is consumed.
#[derive(Debug, Default)]
pub(super) struct Pending {
    buf: Vec<u8>,
    start: usize,
}

impl Pending {
    pub(super) fn extend_from_slice(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Let go of the first `n` bytes (all of them, if it holds fewer).
    pub(super) fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.buf.len());
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        } else if self.start >= COMPACT_AT && self.start >= self.buf.len() / 2 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
    }
}

impl core::ops::Deref for Pending {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[self.start..]
    }
}

/// Consumed bytes a [`Pending`] keeps before it compacts.
const COMPACT_AT: usize = 64 << 10;

/// What one replica may offer the vote beyond the decided point; more
/// waits for a retransmission (the replica is that far ahead of the
/// majority).
const VOTE_MAX_PENDING: usize = 8 << 20;
/// Segments kept per replica beyond a hole in what it sent.
const VOTE_MAX_STASHED: usize = 256;
/// Decided bytes kept for a lagging replica; one further behind is evicted.
const VOTE_MAX_AGREED: usize = 16 << 20;
/// How far a replica may send beyond the slowest live replica's output:
/// the window it is sent ends there (`Conn::window_to`). Below
/// [`VOTE_MAX_AGREED`], so that a replica slower than the others but
/// alive slows the group instead of leaving it.
const VOTE_MAX_LEAD: u32 = 8 << 20;
/// A replica held back by the pace is sent a window update when the
/// slowest moved this far since (`Conn::vote_pace`).
const VOTE_PACE_STEP: i32 = 256 << 10;

impl Conn {
    /// Data or a FIN from leg `i` of a voting connection: check what it
    /// repeats of the decided bytes, offer what is new, let the vote decide
    /// (`vote_progress`, from `settle`). Nothing goes to the client here
    /// except a repeat of decided bytes the client may have lost.
    pub(super) fn vote_data(
        &mut self,
        ctx: &mut Ctx,
        i: usize,
        pkt: &Packet,
        seg: &Seg,
        s: SeqNum,
    ) {
        let payload = seg.at.payload(pkt);
        let e = s.add(len32(payload.len()));
        if seg.has(flags::FIN) {
            if self.legs[i].fin.is_some_and(|f| f != e) {
                // The same replica moved its FIN: it cannot be trusted.
                self.evict(ctx, LegId(i), EvictReason::Fin, false);
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
            self.evict(ctx, LegId(i), EvictReason::Lagging, false);
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
            v.stash[i].retain(|(a, b)| a.add(len32(b.len())).is_after(seen));
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
            diverged_at = Some((seen, "it closed (FIN) where the agreed bytes go on".into()));
        }
        if let Some((at, detail)) = diverged_at {
            let others = self.live_legs() - 1;
            self.diverge(ctx, i, at, others, true, detail);
            self.settle(ctx);
            return;
        }
        // What the vote accepted of this replica is what it has sent.
        let end = seen.add((self.legs[i].fin == Some(seen)) as u32);
        if end.is_after(self.legs[i].hi) {
            self.legs[i].hi = end;
            self.legs[i].progress_at = ctx.now;
            self.legs[i].out_at = ctx.now;
            self.confirm_aborts(ctx);
            self.release_fins(ctx);
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
    /// leg than before, `Err((at, detail))` when the leg contradicts the
    /// decided bytes at `at` (`detail`: both, as [`excerpts`] shows them).
    pub(super) fn vote_accept(
        &mut self,
        ctx: &mut Ctx,
        i: usize,
        s: SeqNum,
        bytes: &[u8],
    ) -> Result<bool, (SeqNum, String)> {
        let Some(v) = self.vote.as_mut() else {
            return Ok(false);
        };
        let (decided, seen) = (v.decided(), v.seen[i]);
        let e = s.add(len32(bytes.len()));
        if !e.is_after(seen) {
            return Ok(false);
        }
        let fresh = &bytes[seen.diff(s) as usize..];
        let upto = e.min(decided);
        if upto.is_after(seen) {
            let n = upto.diff(seen) as usize;
            let from = seen.diff(v.base) as usize;
            if let Some(k) = mismatch(&v.agreed, from, &fresh[..n]) {
                let agreed: Vec<u8> = v.agreed.range(from + k..).take(EXCERPT).copied().collect();
                return Err((seen.add(len32(k)), excerpts(&fresh[k..n], &agreed)));
            }
        }
        if e.is_after(decided) {
            if v.fin {
                // The majority closed here.
                return Err((
                    decided,
                    "it sent more where the agreed bytes end (FIN)".into(),
                ));
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

    /// Where the slowest live replica's output stands (client space):
    /// the end of what the vote has of it. `None` without voting.
    fn vote_slowest(&self) -> Option<SeqNum> {
        let v = self.vote.as_ref()?;
        (0..self.legs.len())
            .filter(|&k| self.legs[k].open())
            .map(|k| v.seen[k])
            .min_by_key(|s| s.diff(v.base))
    }

    /// The window field replica `i` is sent with an ACK of `ack_c` (client
    /// space) in place of the client's field `field`, which goes with the
    /// client's ACK `ack`; and the edge a pace cut it to (`None`: not cut).
    ///
    /// The edge is the client's (`ack` + its window), not `ack_c` + the
    /// field: a replica behind the others is acknowledged only what it sent
    /// (`Leg::ack_for`), and the bytes between that and `ack` the client
    /// already holds. With the client's field alone its window would end
    /// short by that much: a client whose window closed (its buffer full
    /// of the others' bytes) left it unable to send them, alive and
    /// correct, until the client read, and after 1 s of that it was
    /// convicted of standing still while the others moved. Rounded up to
    /// the scale: its edge may pass the client's by less than one unit,
    /// where the rounding down would keep up to a unit of its tail back.
    ///
    /// Under voting the decided bytes are kept for the slowest live replica
    /// until it sends them too; a replica that sends faster (the slowest
    /// loses input, or its CPU is busy) would run that buffer past
    /// [`VOTE_MAX_AGREED`] and be evicted as lagging, alive and correct. So
    /// the others' windows end [`VOTE_MAX_LEAD`] past the slowest's output:
    /// the group goes at the slowest's pace once it is that far behind. A
    /// replica that stops altogether is still judged by failure detection
    /// (its output stands still while the others' moved).
    pub(super) fn window_to(
        &self,
        i: usize,
        ack: SeqNum,
        ack_c: SeqNum,
        field: u16,
    ) -> (u16, Option<SeqNum>) {
        let shift = self.ws_to(i);
        let field = match u32::try_from(ack.diff(ack_c)) {
            Ok(held) if held > 0 => {
                let units = held.div_ceil(1 << shift);
                u16::try_from(u32::from(field) + units).unwrap_or(u16::MAX)
            }
            _ => field,
        };
        let Some(slowest) = self.vote_slowest() else {
            return (field, None);
        };
        let cap = slowest.add(VOTE_MAX_LEAD);
        let room = u32::try_from(cap.diff(ack_c)).unwrap_or(0);
        let capped = u16::try_from(room >> shift).unwrap_or(u16::MAX);
        if capped >= field {
            return (field, None);
        }
        (capped, Some(ack_c.add(u32::from(capped) << shift)))
    }

    /// [`Conn::window_to`], noting on the leg the edge sent and a pace's
    /// cut.
    pub(super) fn windowed(
        &mut self,
        now: Instant,
        i: usize,
        ack: SeqNum,
        ack_c: SeqNum,
        field: u16,
    ) -> u16 {
        let (w, paced) = self.window_to(i, ack, ack_c, field);
        self.note_window(now, i, ack_c, w);
        self.legs[i].paced = paced;
        w
    }

    /// Leg `i` was sent window field `w` with an ACK of `ack_c` (client
    /// space) at `now`: where that window ends (`Leg::edge_out`), and
    /// whether it leaves room for a whole segment past the leg's output
    /// (`Leg::roomy_from`).
    pub(super) fn note_window(&mut self, now: Instant, i: usize, ack_c: SeqNum, w: u16) {
        let shift = self.ws_to(i);
        let edge = ack_c.add(u32::from(w) << shift);
        let mss = i32::from(self.client_mss);
        let l = &mut self.legs[i];
        l.edge_out = Some(edge);
        if edge.diff(l.data_hi()) >= mss && l.roomy_from.is_none_or(|t| t < l.out_at) {
            l.roomy_from = Some(now);
        }
    }

    /// The scale leg `i` reads the window fields it is sent with: the
    /// client's, where both it and the client took window scaling.
    fn ws_to(&self, i: usize) -> u8 {
        if self.client_ws && self.legs[i].has_ws {
            self.client_wscale.unwrap_or(0).min(14)
        } else {
            0
        }
    }

    /// Replicas whose window the pace cut short get a window update once
    /// the slowest moved on by [`VOTE_PACE_STEP`]: a sender at the edge of
    /// its window otherwise waits for its next zero-window probe (backed
    /// off up to minutes) or the client's next segment, which does not
    /// come while the client waits for the bytes the group holds.
    fn vote_pace(&mut self, ctx: &mut Ctx) {
        let Some(slowest) = self.vote_slowest() else {
            return;
        };
        let cap = slowest.add(VOTE_MAX_LEAD);
        for i in 0..self.legs.len() {
            let l = &self.legs[i];
            if l.open() && l.paced.is_some_and(|e| cap.diff(e) >= VOTE_PACE_STEP) {
                self.send_ack_to(ctx, i);
                ctx.counters.pace_updates += 1;
            }
        }
    }

    /// Leg `i` sent bytes that differ from what the others agreed on (or
    /// lost a tie): count it, say where, and take it out.
    pub(super) fn diverge(
        &mut self,
        ctx: &mut Ctx,
        i: usize,
        at: SeqNum,
        agreeing: usize,
        blame: bool,
        detail: String,
    ) {
        ctx.counters.divergences += 1;
        ctx.out.event(Event::Diverged {
            conn: self.key.to_string(),
            replica: self.legs[i].addr,
            offset: at.0.wrapping_sub(self.router_isn.0.wrapping_add(1)),
            agreeing,
            live: self.live_legs(),
            detail,
        });
        if let Some(v) = &mut self.vote {
            v.pending[i] = Pending::default();
            v.stash[i] = Vec::new();
        }
        self.evict(ctx, LegId(i), EvictReason::Diverged, blame);
    }

    /// Let the vote decide what it can: send the bytes a majority of the
    /// live replicas agree on, evict those that contradict them, apply the
    /// tie policy when no majority can form, and let go of decided bytes
    /// every live replica has passed.
    pub(super) fn vote_progress(&mut self, ctx: &mut Ctx) {
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
            // Replicas whose offer here is their FIN alone.
            let fin_here: Vec<bool> = offers.iter().map(|o| o.fin && o.bytes.is_empty()).collect();
            match vote::decide(&offers, quorum) {
                Outcome::Wait => break,
                Outcome::Decide {
                    from,
                    len,
                    fin,
                    diverged,
                } => {
                    let src = live[from];
                    // What each diverging replica sent there, for the log.
                    let details: Vec<String> = diverged
                        .iter()
                        .map(|&(o, at)| {
                            let theirs = v.pending[live[o]].get(at..).unwrap_or_default();
                            let agreed = v.pending[src][..len].get(at..).unwrap_or_default();
                            excerpts(theirs, agreed)
                        })
                        .collect();
                    // The decided bytes go to the client from where they
                    // lie (no copy); the buffer is put back below.
                    let bytes = std::mem::take(&mut v.pending[src]);
                    for &k in live.iter().filter(|&&k| k != src) {
                        v.pending[k].consume(len);
                    }
                    // Decided bytes are kept only for a live replica that
                    // has not sent them yet (it is checked against them
                    // when it does); what every one passed is let go.
                    let end = decided.add(len32(len));
                    let slowest = live
                        .iter()
                        .map(|&k| {
                            if v.seen[k].is_before(end) {
                                v.seen[k]
                            } else {
                                end
                            }
                        })
                        .min_by_key(|x| x.diff(v.base))
                        .unwrap_or(end);
                    if slowest.is_after(decided) {
                        v.agreed.clear();
                        v.base = slowest;
                        v.agreed.extend(&bytes[slowest.diff(decided) as usize..len]);
                    } else {
                        v.agreed.extend(&bytes[..len]);
                    }
                    v.fin = fin;
                    ctx.counters.voted_bytes += len as u64;
                    self.send_built(ctx, decided, &bytes[..len]);
                    self.sent_hi = self.sent_hi.max(end);
                    if let Some(v) = self.vote.as_mut() {
                        v.pending[src] = bytes;
                        v.pending[src].consume(len);
                    }
                    let agreeing = live.len() - diverged.len();
                    for ((o, at), detail) in diverged.into_iter().zip(details) {
                        self.diverge(ctx, live[o], decided.add(len32(at)), agreeing, true, detail);
                    }
                }
                Outcome::Split { groups }
                    if fin_here.iter().any(|&f| f) && !fin_here.iter().all(|&f| f) =>
                {
                    // No majority between a FIN and more bytes: a replica
                    // whose side closed where another sends on stopped
                    // early — its server died and its kernel closed the
                    // socket (§III-D, as without voting). It leaves this
                    // connection (not blamed, not divergent: a crash is
                    // seen service-wide by failure detection), and the
                    // rest vote on.
                    let _ = groups;
                    for (o, _) in fin_here.iter().enumerate().filter(|(_, &f)| f) {
                        self.evict(ctx, LegId(live[o]), EvictReason::Fin, false);
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
                        let out: Vec<(usize, String)> = groups
                            .iter()
                            .filter(|g| **g != win)
                            .flatten()
                            .map(|&o| {
                                let kept = &v.pending[live[win[0]]];
                                (o, excerpts(&v.pending[live[o]], kept))
                            })
                            .collect();
                        for (o, detail) in out {
                            self.diverge(ctx, live[o], decided, win.len(), true, detail);
                        }
                    }
                    Tie::Reset => {
                        // Nobody is blamed; the client is reset (by
                        // `settle`, with no replica left) rather than sent
                        // bytes no majority vouched for.
                        let out: Vec<(usize, String)> = groups
                            .iter()
                            .flatten()
                            .map(|&o| (o, excerpts(&v.pending[live[o]], &[])))
                            .collect();
                        for (o, detail) in out {
                            self.diverge(ctx, live[o], decided, 0, false, detail);
                        }
                        for &k in &live {
                            self.evict(ctx, LegId(k), EvictReason::Diverged, false);
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
                    v.pending[k] = Pending::default();
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
                self.vote_pace(ctx);
                return;
            }
            self.evict(ctx, LegId(k), EvictReason::Lagging, false);
        }
    }
}

/// Where `bytes` first differ from `agreed` at `from` on, compared a block
/// at a time (`None`: they match). `agreed` holds all of them.
fn mismatch(agreed: &VecDeque<u8>, from: usize, bytes: &[u8]) -> Option<usize> {
    let (a, b) = agreed.as_slices();
    // The agreed bytes from `from` on, in at most two slices.
    let (x, y): (&[u8], &[u8]) = if from < a.len() {
        (&a[from..], b)
    } else {
        (&b[from - a.len()..], &[])
    };
    let mut off = 0;
    for part in [x, y] {
        let want = &bytes[off..];
        let n = part.len().min(want.len());
        let c = crate::vote::prefix(&part[..n], &want[..n]);
        if c < n {
            return Some(off + c);
        }
        off += n;
    }
    None
}

/// Bytes of each side a divergence's log shows.
const EXCERPT: usize = 24;

/// What a diverging replica sent and what was agreed, from where they
/// differ: at most [`EXCERPT`] bytes each, printable ASCII as it is and
/// the rest escaped (`\r`, `\x00`), so an operator sees which reply
/// differed and how.
pub(crate) fn excerpts(theirs: &[u8], agreed: &[u8]) -> String {
    let show = |b: &[u8]| -> String {
        let mut s: String = b
            .iter()
            .take(EXCERPT)
            .flat_map(|&c| std::ascii::escape_default(c))
            .map(char::from)
            .collect();
        if b.len() > EXCERPT {
            s.push('…');
        }
        s
    };
    format!(
        "it sent \"{}\" where the agreed bytes are \"{}\"",
        show(theirs),
        show(agreed)
    )
}

#[cfg(test)]
mod tests {
    use super::Pending;

    /// Bytes leave from the front; what is left reads the same before and
    /// after a compaction.
    /// The block-wise comparison with decided bytes finds the first
    /// difference wherever it falls, across the ring buffer's wrap too.
    #[test]
    fn a_difference_from_the_decided_bytes_is_found_across_the_wrap() {
        let mut d: std::collections::VecDeque<u8> = std::collections::VecDeque::with_capacity(256);
        d.extend(std::iter::repeat_n(0u8, 200));
        d.drain(..180);
        d.extend((0..220u32).map(|x| x.to_le_bytes()[0]));
        let (a, b) = d.as_slices();
        assert!(!a.is_empty() && !b.is_empty(), "wrapped");
        let all: Vec<u8> = d.iter().copied().collect();
        for from in [0, 5, a.len() - 1, a.len(), a.len() + 3] {
            let mut bytes = all[from..].to_vec();
            assert_eq!(super::mismatch(&d, from, &bytes), None, "from {from}");
            for at in [0, 1, bytes.len() / 2, bytes.len() - 1] {
                bytes[at] ^= 1;
                assert_eq!(
                    super::mismatch(&d, from, &bytes),
                    Some(at),
                    "from {from} at {at}"
                );
                bytes[at] ^= 1;
            }
        }
    }

    #[test]
    fn pending_bytes_leave_from_the_front() {
        let mut p = Pending::default();
        let all: Vec<u8> = (0..200_000u32)
            .map(|x| (x % 251).to_le_bytes()[0])
            .collect();
        p.extend_from_slice(&all[..150_000]);
        let mut gone = 0;
        for n in [1, 1460, 30_000, 40_000, 25_000] {
            p.consume(n);
            gone += n;
            assert_eq!(&p[..], &all[gone..150_000], "after {gone}");
        }
        p.extend_from_slice(&all[150_000..]);
        assert_eq!(&p[..], &all[gone..]);
        p.consume(usize::MAX / 2);
        assert!(p.is_empty());
        p.extend_from_slice(b"x");
        assert_eq!(&p[..], b"x");
    }
}
