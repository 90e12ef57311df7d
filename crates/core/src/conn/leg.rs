//! One replica's side of a connection.

use super::{Conn, Seg};
use crate::ids::ReplicaId;
use crate::time::Instant;
use ftnet_wire::{SeqDelta, SeqNum};
use std::net::Ipv4Addr;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LegState {
    /// The client's SYN went to the replica; no SYN-ACK yet.
    SynSent,
    /// The replica answered; its sequence space is known.
    Open,
    /// The replica refused the SYN with a RST. Whether that is a crash
    /// (others accept) or the service's answer (all refuse) is decided once
    /// every replica answered.
    Refused,
    /// The replica reset an open connection. It is out of the group at once
    /// so nobody waits for it; whether that was a crash (others carry on)
    /// or the service's own abort (all reset) is decided later.
    Aborted,
    /// Out of the group for the rest of the connection.
    Evicted,
}

/// One replica's side of a connection.
#[derive(Debug, Clone)]
pub(super) struct Leg {
    pub(super) replica: ReplicaId,
    pub(super) addr: Ipv4Addr,
    pub(super) state: LegState,
    /// Replica space + off = client space.
    pub(super) off: SeqDelta,
    /// End of everything this replica has sent (data, and FIN as one).
    pub(super) hi: SeqNum,
    /// Highest client-stream byte this replica acknowledged.
    pub(super) ack: SeqNum,
    /// Right edge of the replica's receive window: ack + window.
    pub(super) edge: SeqNum,
    pub(super) wscale: u8,
    /// Where this replica's FIN sits, if it sent one.
    pub(super) fin: Option<SeqNum>,
    /// When its FIN first came (`None` if it sent none, or its FIN was
    /// learnt another way): a detached leg that closed, and the start of a
    /// followed replica's FIN held for them (`Conn::fin_hold_until`).
    pub(super) fin_at: Option<Instant>,
    pub(super) has_ts: bool,
    pub(super) has_ws: bool,
    /// Router TSval minus this replica's TSval when last translated.
    pub(super) ts_off: u32,
    /// Latest TSval from this replica.
    pub(super) ts_last: u32,
    /// Last packet of any kind from this replica.
    pub(super) seen_at: Instant,
    /// Last time `ack` or `hi` moved.
    pub(super) progress_at: Instant,
    /// Last time `hi` moved (its output), or when it opened: a server that
    /// stopped while its kernel still acknowledges input makes `ack` move
    /// and this stand still ([`Conn::fail_deadline`]).
    pub(super) out_at: Instant,
    /// Since when another replica has been ahead of this one.
    pub(super) behind_since: Option<Instant>,
    /// Client SYN copies sent without an answer.
    pub(super) syn_tries: u32,
    /// An adopted leg: the replica's SND.UNA (its own sequence space) as
    /// its agent read it when handing the record over, until the rebuild
    /// prompts it ([`Conn::prompt_replicas_at_una`]).
    pub(super) una_hint: Option<SeqNum>,
    /// An adopted leg: its agent read from the replica's kernel that it
    /// took the client's FIN (`ConnRecord::fin_received`): its RCV.NXT
    /// counts the FIN ([`Conn::finish_recovery`]).
    pub(super) fin_in_hint: bool,
    /// Resets sent to an earlier connection of this four-tuple that the
    /// replica still holds (its bare ACK answered the client's SYN,
    /// [`Conn::syn_challenged`]; or, evicted, its challenge ACK answered
    /// the router's reset, [`Conn::evicted_challenged`]).
    pub(super) stale_resets: u8,
    /// Last liveness probe sent to this replica.
    pub(super) probe_at: Option<Instant>,
    /// The first probe sent since it was last heard (the question its
    /// silence leaves unanswered, [`Conn::fail_deadline`]); earlier when
    /// it was heard since.
    pub(super) asked_at: Option<Instant>,
    /// When it reset the connection (state `Aborted`).
    pub(super) aborted_at: Option<Instant>,
    pub(super) mss: u16,
    pub(super) syn_window: u16,
    /// Its position (`ack`, `hi`, `edge`, timestamps) is known. False only
    /// for a connection adopted from the agents until the replica's first
    /// packet.
    pub(super) learned: bool,
    /// The last ACK number the router sent this replica (client-visible
    /// space): a replica whose connection is gone answers a segment with
    /// a RST carrying that segment's ACK number (RFC 9293 §3.10.7.1).
    pub(super) ack_out: Option<SeqNum>,
    /// Under voting: the right edge (client space) of the last window it
    /// was sent, where that window was cut short because it ran too far
    /// ahead of the slowest live replica (`Conn::window_to`); `None`
    /// when the client's window went as it was.
    pub(super) paced: Option<SeqNum>,
    /// The right edge (client space) of the last window it was sent in the
    /// client's name (`Conn::window_to`), for an eviction's log line: a
    /// replica whose output stands still may be one with no room to send.
    pub(super) edge_out: Option<SeqNum>,
    /// When it was first sent a window with room for a whole segment (the
    /// client's MSS) past its output since that output last moved
    /// (`out_at`; `Conn::note_window`): Linux sends nothing into less room
    /// than its next segment needs, and a standstill counts from here
    /// (`Conn::fail_deadline`). Older than `out_at`: none since.
    pub(super) roomy_from: Option<Instant>,
    /// When the last challenge ACK went to this replica (RFC 5961 §7).
    pub(super) challenge_at: Option<Instant>,
    /// A replica that joined the open connection
    /// ([`Conn::join_leg`]): the client-stream position its own TCP
    /// connection starts at (its SYN's sequence number + 1).
    pub(super) joined_at: Option<SeqNum>,
    /// A joiner's leg: where the group's output stood when it was added
    /// (its first output byte maps there).
    pub(super) joined_out: Option<SeqNum>,
    /// A live join's joiner whose state is not proven yet: its agent holds
    /// its server's input, so its output and (once its socket buffer is
    /// full) its acknowledgments stand still while the others move. Only
    /// its silence convicts it until the join ends (`Conn::fail_deadline`).
    pub(super) held: bool,
    /// The replica the client follows (`primary`) has not repeated bytes
    /// the client lacks while a follower did (and they could not be sent
    /// from it): it owes them, and its silence convicts it
    /// (`Conn::behind`). Cleared when it sends data or the client gets
    /// further.
    pub(super) owes_repeat: bool,
    /// The client's FIN was held back from it (`Conn::fin_held`): it gets
    /// it once it has sent what the client had when it closed
    /// (`Conn::release_fins`).
    pub(super) client_fin_held: bool,
    /// `primary`, a stateful service: its reply differed from what the
    /// client got, with no majority against it (a reply of per-process
    /// output, Redis `INFO`). It stays in the connection for its input, so
    /// its server keeps the group's state; its output is acknowledged by
    /// the router and dropped, no longer compared or weighed by failure
    /// detection, and it cannot take the connection over (a failover with
    /// only such legs left resets the client).
    pub(super) detached: bool,
    /// A joiner's first output byte in the client's view (the group's
    /// output position when it joined).
    pub(super) out_start: Option<SeqNum>,
    /// The sequence number (client view) of this replica's latest pure
    /// ACK, and when it came: a stack's pure ACK carries its SND.NXT, so
    /// one beyond `hi` tells of output the router never received (a
    /// segment lost on the way). A join waits until every replica answered
    /// a probe at `hi` exactly ([`Conn::join_quiet`]).
    pub(super) nxt_seen: Option<(SeqNum, Instant)>,
    /// With an input log: the end (client stream, a FIN counted) of what
    /// the router sent this replica that its window could take, by the
    /// client's segments or from the log (the router's SND.NXT towards it).
    pub(super) log_nxt: SeqNum,
    /// With an input log: the ACK number at which this replica's
    /// duplicate ACK last drew a retransmission from the log.
    pub(super) log_dup_at: Option<SeqNum>,
}

impl Leg {
    /// A probe was sent since it was last heard ([`Leg::asked_at`]).
    pub(super) fn asked(&self) -> bool {
        self.asked_at.is_some_and(|a| a > self.seen_at)
    }

    /// End of the data this replica sent, its FIN not counted.
    pub(super) fn data_hi(&self) -> SeqNum {
        self.fin.unwrap_or(self.hi)
    }

    /// Whether this leg sent data beyond `other`'s. Not for one octet past
    /// `other`'s FIN when this one's own FIN is not known: a position
    /// learnt after a takeover (its SND.NXT) counts a FIN sent to the
    /// router before as an octet, and the two streams may well end at the
    /// same place (its FIN, repeated, tells).
    pub(super) fn data_ahead_of(&self, other: &Leg) -> bool {
        let d = self.data_hi();
        d.is_after(other.data_hi())
            && !(self.fin.is_none() && other.fin.is_some_and(|f| d == f.add(1)))
    }

    /// Still part of the group.
    pub(super) fn live(&self) -> bool {
        matches!(self.state, LegState::SynSent | LegState::Open)
    }

    /// Live, and its output counts (not `detached`).
    pub(super) fn counts(&self) -> bool {
        self.live() && !self.detached
    }
    /// The segment's sequence number in the client's view (router space).
    pub(super) fn off_seq(&self, seg: &Seg) -> SeqNum {
        seg.seq.shift(self.off)
    }
    pub(super) fn open(&self) -> bool {
        self.state == LegState::Open
    }
    /// The ACK number this replica gets for the client's `ack` (client
    /// space): never beyond what it sent, §III-D (Linux discards an ACK
    /// beyond its SND.NXT and stalls). Returns it in client space and in
    /// the replica's own space.
    pub(super) fn ack_for(&self, ack: SeqNum) -> (SeqNum, SeqNum) {
        // A detached leg's output goes nowhere: all of it is acknowledged.
        let c = if self.detached {
            self.hi
        } else {
            ack.min(self.hi)
        };
        // A joiner's output began where the group's stood when it joined:
        // an older ACK (a reordered or repeated client segment) would
        // acknowledge bytes before its SYN, and its stack would drop the
        // segment with its data.
        let c = self.out_start.map_or(c, |s| c.max(s));
        (c, c.unshift(self.off))
    }
}

impl Conn {
    pub(crate) fn add_leg(&mut self, replica: ReplicaId, addr: Ipv4Addr, now: Instant) {
        self.legs.push(Leg {
            replica,
            addr,
            state: LegState::SynSent,
            off: SeqDelta(0),
            hi: self.router_isn,
            ack: self.client_isn,
            edge: self.client_isn,
            wscale: 0,
            fin: None,
            fin_at: None,
            has_ts: false,
            has_ws: false,
            ts_off: 0,
            ts_last: 0,
            seen_at: now,
            progress_at: now,
            out_at: now,
            behind_since: None,
            syn_tries: 0,
            stale_resets: 0,
            una_hint: None,
            fin_in_hint: false,
            probe_at: None,
            asked_at: None,
            aborted_at: None,
            mss: 0,
            syn_window: 0,
            learned: true,
            ack_out: None,
            paced: None,
            edge_out: None,
            roomy_from: None,
            nxt_seen: None,
            challenge_at: None,
            joined_at: None,
            joined_out: None,
            held: false,
            owes_repeat: false,
            client_fin_held: false,
            detached: false,
            out_start: None,
            log_nxt: self.client_isn.add(1),
            log_dup_at: None,
        });
        let start = self.router_isn.add(1);
        if let Some(v) = &mut self.vote {
            v.pending.push(super::voting::Pending::default());
            v.seen.push(start);
            v.stash.push(Vec::new());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{conn, CLIENT_ISN, ROUTER_ISN};
    use super::*;
    use crate::config::Voting;
    use crate::packet::Headers;
    use ftnet_wire::tcp::{flags, CsumMode};
    use std::net::Ipv4Addr;

    /// A leg whose replica picked ISN 1000: its space is 1000 → router ISN.
    fn leg() -> Leg {
        let mut c = conn(1, Voting::Fastest);
        let mut l = c.legs.remove(0);
        l.off = SeqDelta::between(SeqNum(1000), ROUTER_ISN);
        l.hi = ROUTER_ISN.add(1).add(500);
        l
    }

    #[test]
    fn replica_space_maps_onto_client_space() {
        let l = leg();
        let seg = Seg {
            src: Ipv4Addr::new(10, 0, 1, 1),
            dst: Ipv4Addr::new(10, 0, 0, 1),
            sport: 80,
            dport: 40000,
            seq: SeqNum(1001),
            ack: CLIENT_ISN.add(1),
            flags: flags::ACK,
            window: 0,
            payload_len: 0,
            mss: None,
            wscale: None,
            ts: None,
            mode: CsumMode::Complete,
            at: Headers::BARE,
        };
        // The replica's first byte is the client-visible first byte,
        // across the wrap of sequence space.
        assert_eq!(l.off_seq(&seg), ROUTER_ISN.add(1));
        assert_eq!(l.off_seq(&seg), SeqNum(0xffff_ff01));
        let later = Seg {
            seq: SeqNum(1001 + 300),
            ..seg
        };
        assert_eq!(l.off_seq(&later), SeqNum(0xffff_ff01).add(300));
        assert_eq!(l.off_seq(&later), SeqNum(0x2d));
    }

    #[test]
    fn ack_to_a_replica_never_passes_what_it_sent() {
        let l = leg();
        // Within what it sent: translated into its space.
        let a = ROUTER_ISN.add(1).add(200);
        assert_eq!(l.ack_for(a), (a, SeqNum(1001 + 200)));
        // Beyond (another replica sent more): held at its own end.
        let far = ROUTER_ISN.add(1).add(900);
        assert_eq!(l.ack_for(far), (l.hi, SeqNum(1001 + 500)));
    }

    #[test]
    fn data_hi_leaves_the_fin_out() {
        let mut l = leg();
        assert_eq!(l.data_hi(), l.hi);
        let f = l.hi;
        l.fin = Some(f);
        l.hi = f.add(1);
        assert_eq!(l.data_hi(), f);
    }
}
