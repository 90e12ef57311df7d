//! Counters: every packet the router drops has a named reason.

use serde::Serialize;

macro_rules! drop_reasons {
    ($( $(#[doc = $doc:literal])* $name:ident => $s:literal, )*) => {
        /// Why a packet was dropped. Each has a counter in [`Counters`].
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum DropReason { $( $(#[doc = $doc])* $name, )* }
        impl DropReason {
            pub const ALL: &'static [DropReason] = &[$(DropReason::$name),*];
            /// How many reasons there are.
            pub const COUNT: usize = [$(DropReason::$name),*].len();
            pub fn name(self) -> &'static str { match self { $(DropReason::$name => $s,)* } }
        }
    };
}

drop_reasons! {
    /// Shorter than its IPv4 or TCP header, or than its length fields say.
    Truncated => "truncated",
    /// A header field with an impossible value (lengths, options).
    Malformed => "malformed",
    /// Not IPv4.
    NotIpv4 => "not_ipv4",
    /// An IP fragment.
    Fragment => "fragment",
    /// A checksum the kernel did not validate and that does not verify.
    BadChecksum => "bad_checksum",
    /// Neither to a virtual IP nor from a replica of a configured port.
    NotOurs => "not_ours",
    /// To a virtual IP but a port no service declares.
    UnknownPort => "unknown_port",
    /// A non-SYN segment for which no connection exists.
    UnknownConnection => "unknown_connection",
    /// Sequence or acknowledgment number outside the window (RFC 9293
    /// §3.10.7.4, RFC 5961).
    OutOfWindow => "out_of_window",
    /// The connection table is full.
    TableFull => "table_full",
    /// A SYN whose handshake state was dropped to make room for newer ones.
    HalfOpenEvicted => "half_open_evicted",
    /// A segment from a replica that is no longer part of the connection.
    EvictedReplica => "evicted_replica",
    /// A segment from a replica that repeats bytes the client already has.
    DuplicateSuppressed => "duplicate_suppressed",
    /// A pure ACK from a replica that changes nothing the client sees.
    AckAbsorbed => "ack_absorbed",
    /// A replica's SYN-ACK held until every live replica answered.
    SynAckHeld => "synack_held",
    /// A segment that is not valid in the connection's state.
    BadState => "bad_state",
    /// ICMP that names no connection of ours.
    IcmpIgnored => "icmp_ignored",
    /// No live replica to send to.
    NoReplica => "no_replica",
    /// A SYN while no replica is in service yet because their agents have
    /// not registered with this (just started) router: dropped, the client
    /// retransmits it.
    AwaitingAgents => "awaiting_agents",
    /// A SYN while the router drains before it stops (`ftnet drain`): no
    /// new connection; the client retransmits its SYN, which a standby
    /// router that took the addresses over answers.
    Draining => "draining",
    /// Output voting: a replica segment beyond a hole in what that replica
    /// sent (it will be sent again).
    VoteOutOfOrder => "vote_out_of_order",
    /// Output voting: a replica is too far ahead of the majority; its
    /// segment waits for a retransmission.
    VoteBufferFull => "vote_buffer_full",
    /// A replica segment on a connection being rebuilt after a takeover,
    /// before every replica told its position (it will be sent again).
    Rebuilding => "rebuilding",
    /// ICMP destination unreachable about a replica that does not check
    /// out (RFC 5927 §4.1): not addressed to the quoted segment's source,
    /// sent by the connection's own client or from a VIP, or quoting a
    /// segment the router never sent that replica (no live leg, or a
    /// sequence number outside what the replica has not acknowledged).
    IcmpUnverified => "icmp_unverified",
    /// A RST whose sequence number is in the window but not exactly the
    /// next expected one (RFC 5961 §3.2): changes nothing; a challenge ACK
    /// went back (at most one per 50 ms per connection).
    RstNotExact => "rst_not_exact",
    /// A RST whose sequence number is outside the window (RFC 5961 §3.2,
    /// RFC 9293 §3.10.7.4).
    RstOutOfWindow => "rst_out_of_window",
    /// A replica's RST to the client's SYN whose ACK does not acknowledge
    /// that SYN exactly (RFC 9293 §3.10.7.3): not taken as a refusal.
    RstBadAck => "rst_bad_ack",
    /// A SYN with another ISN on a live connection (RFC 5961 §4): answered
    /// with a challenge ACK when the connection's positions are known (a
    /// client whose connection ended answers it with a RST that frees the
    /// four-tuple), else only dropped; the connection is left as it was.
    SynOnLiveConnection => "syn_on_live_connection",
    /// Client bytes that start beyond every live replica's receive window:
    /// no replica would take them (RFC 9293 §3.10.7.4), so they are
    /// neither forwarded nor numbered by the sequencer.
    BeyondWindow => "beyond_window",
    /// A client segment of a service paused for a join, beyond what the
    /// router holds (the client retransmits it after the pause).
    JoinHeldFull => "join_held_full",
}

/// Counters of the whole router. Monotonic since start.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Counters {
    /// Packets handed to the router.
    pub packets_in: u64,
    /// Packets the router emitted.
    pub packets_out: u64,
    /// Payload bytes from clients, counted once (before fan-out).
    pub client_bytes_in: u64,
    /// Payload bytes forwarded to clients.
    pub client_bytes_out: u64,
    /// Payload bytes from replicas withheld because another replica's copy
    /// went first, or (output policy `primary`) because the client follows
    /// another replica.
    pub suppressed_bytes: u64,
    /// Segments a follower had sent ahead of the client that went to the
    /// client when it became the followed replica (a failover that did not
    /// wait for its retransmission).
    pub failover_sent_on: u64,
    /// Repeats of bytes the client lacked that went to it from a follower
    /// whose stream was verified equal there (output policy `primary`).
    pub follower_repeats: u64,
    /// Legs of a stateful service's connections whose replies differed from
    /// what the client got with no majority against them (output policy
    /// `primary`): kept for their input, their output dropped.
    pub detached: u64,
    /// Connections opened (client SYN accepted into the table).
    pub connections_opened: u64,
    /// Replica evictions from a single connection.
    pub evictions: u64,
    /// Connections reset towards the client because no replica was left.
    pub connections_lost: u64,
    /// ACKs the router sent to a lagging replica on the client's behalf.
    pub acks_on_behalf: u64,
    /// Connections adopted from the agents' records (router takeover).
    pub connections_adopted: u64,
    /// Connections adopted from the agents' records and rebuilt (every live
    /// replica told its position).
    pub connections_rebuilt: u64,
    /// ICMP host-unreachable messages sent to clients of rebuilt
    /// connections so that a client in retransmission back-off resends at
    /// once (RFC 6069: Linux takes back one back-off step per message).
    pub rto_prompts: u64,
    /// Duplicate ACKs sent to clients whose first word after a rebuild
    /// showed bytes in flight that died with the router before, so that
    /// they resend at once (`Conn::dup_acks_for_lost_tail`).
    pub rebuild_dup_acks: u64,
    /// Times the router found it had not run for at least the detection
    /// time past its own timers (`Event::RouterPaused`).
    pub router_pauses: u64,
    /// SYN-ACKs sent again to clients of rebuilt connections that may
    /// still be connecting (`Conn::resend_synack`).
    pub rebuild_synacks: u64,
    /// Client segments that reached the new router while their connection
    /// was rebuilt, passed on to a replica once it told its position (the
    /// others had them at once).
    pub rebuild_resends: u64,
    /// Client segments of connections the router did not have, kept while
    /// it waited for the agents after a takeover (`Router::keep_orphan`),
    /// and those that reached their connection as it was adopted.
    pub orphans_kept: u64,
    pub orphans_replayed: u64,
    /// Replicas' probes (zero-window, keep-alive) passed on to the client
    /// so that it answers with its window.
    pub probes_passed: u64,
    /// Health-check SYNs the router sent to down replicas of stateless
    /// services.
    pub probes_sent: u64,
    /// SYN-ACKs that waited for their connection's record to be stored at
    /// the agents (output commit) and got it.
    pub synacks_committed: u64,
    /// SYN-ACKs sent when the wait for the record ran out (an agent that
    /// did not confirm in time); such a connection may not survive a
    /// takeover that comes before its record arrives.
    pub synacks_uncommitted: u64,
    /// Replies that differ between replicas: found by output voting, or
    /// after the fact where a service does not vote (one per differing
    /// replica and point of the stream).
    pub divergences: u64,
    /// Points of a server stream where replicas' hashes were to be compared
    /// but were dropped unchecked (a replica more than 256 points behind).
    pub unchecked_points: u64,
    /// Output voting: payload bytes a majority agreed on before they went
    /// to a client.
    pub voted_bytes: u64,
    /// Output voting: window updates sent to replicas that were held back
    /// because they ran too far ahead of the slowest live replica, once
    /// it caught up.
    pub pace_updates: u64,
    /// Client FINs held back from a replica that had not yet sent what the
    /// client had got when it closed (`Conn::fin_held`); each goes to it
    /// once it has.
    pub fins_held: u64,
    /// `primary`: FINs of a followed replica held while the followers,
    /// detached, had not closed (`Conn::fin_hold_until`): a crash's FIN
    /// must not reach the client before the verdict that resets it.
    pub lone_fins_held: u64,
    /// Safe delivery: one-byte duplicates sent behind client data so that
    /// each replica acknowledges it at once (no delayed ACK).
    pub ack_prompts: u64,
    /// Challenge ACKs sent (RFC 5961 §3.2, §4), to clients and replicas.
    pub challenge_acks: u64,
    /// Challenge ACKs not sent because of the per-connection or the global
    /// rate limit (RFC 5961 §7).
    pub challenge_acks_limited: u64,
    /// Client segments held while their service was paused for a join
    /// (released in order when the join ended).
    pub held_for_join: u64,
    /// Client bytes the input logs hold now (`Ack::Log`): a gauge.
    pub log_bytes: u64,
    /// Reply bytes the router keeps now from standby replicas that are
    /// ahead of the replica their client follows (output policy
    /// `primary`, for a failover without waiting): a gauge, at most
    /// `AHEAD_TOTAL`.
    pub ahead_bytes: u64,
    /// Client bytes the router sent a lagging replica from an input log
    /// (the client will not send them again: they were acknowledged).
    pub log_resent_bytes: u64,
    /// Client segments not (wholly) logged because a log was at its bound
    /// (per connection or router-wide): their bytes wait for every replica.
    pub log_full: u64,
    /// Output commit: how long SYN-ACKs waited for their connection's
    /// record to be stored at the agents (confirmed or not).
    pub commit_wait: Histogram,
    /// The gap in the reply bytes a client got around a replica leaving
    /// its connection: from the last payload segment before the eviction
    /// to the first after it. Counted for connections that had sent the
    /// client payload in the second before the eviction and sent more
    /// within a minute after it (an idle connection has no stall to show).
    pub stall_after_eviction: Histogram,
    /// Drops by reason, indexed like [`DropReason::ALL`].
    #[serde(skip)]
    pub drops: [u64; DropReason::COUNT],
}

/// Buckets of a [`Histogram`]: ≤ 1 ms, ≤ 2 ms, … ≤ 65,536 ms, more.
pub const HISTOGRAM_BUCKETS: usize = 18;

/// Durations in power-of-two millisecond buckets (a Prometheus histogram
/// once exported; `ftnet` does). Fixed size: observing allocates nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Histogram {
    /// Per bucket (not cumulative): see [`HISTOGRAM_BUCKETS`].
    pub counts: [u64; HISTOGRAM_BUCKETS],
    /// Sum of the observed durations, µs.
    pub sum_us: u64,
}

impl Histogram {
    pub fn observe(&mut self, d: core::time::Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let ms = us.div_ceil(1000);
        let i = if ms <= 1 {
            0
        } else {
            (64 - (ms - 1).leading_zeros()) as usize
        };
        self.counts[i.min(HISTOGRAM_BUCKETS - 1)] += 1;
        self.sum_us = self.sum_us.saturating_add(us);
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The upper bound of bucket `i` in ms (`None`: the last, unbounded).
    pub fn upper_ms(i: usize) -> Option<u64> {
        (i + 1 < HISTOGRAM_BUCKETS).then(|| 1u64 << i)
    }
}

#[cfg(test)]
mod histogram_tests {
    use super::*;
    use core::time::Duration;

    #[test]
    fn durations_fall_in_power_of_two_millisecond_buckets() {
        let mut h = Histogram::default();
        for (us, bucket) in [
            (0, 0),
            (1000, 0),
            (1001, 1),
            (2000, 1),
            (3000, 2),
            (4000, 2),
            (4001, 3),
            (65_536_000, 16),
            (65_536_001, 17),
            (u64::MAX, 17),
        ] {
            let before = h.counts[bucket];
            h.observe(Duration::from_micros(us));
            assert_eq!(h.counts[bucket], before + 1, "{us} µs -> bucket {bucket}");
        }
        assert_eq!(h.count(), 10);
        assert_eq!(Histogram::upper_ms(0), Some(1));
        assert_eq!(Histogram::upper_ms(16), Some(65_536));
        assert_eq!(Histogram::upper_ms(17), None);
        assert_eq!(h.sum_us, u64::MAX, "the sum saturates");
    }
}

impl Counters {
    pub fn drop(&mut self, r: DropReason) {
        self.drops[r as usize] += 1;
    }
    pub fn dropped(&self, r: DropReason) -> u64 {
        self.drops[r as usize]
    }
    /// (name, count) for every reason, in declaration order.
    pub fn drop_table(&self) -> Vec<(&'static str, u64)> {
        DropReason::ALL
            .iter()
            .map(|r| (r.name(), self.dropped(*r)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn every_reason_has_a_slot() {
        assert_eq!(DropReason::ALL.len(), Counters::default().drops.len());
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i);
        }
    }
}
