//! A connection's timers: one [`Timer`] per reason the connection may need
//! `on_timer`, and one table ([`Conn::deadline`]) that says when each is
//! due. `next_deadline` is the earliest entry of the table and `on_timer`
//! acts on exactly the entries that are due, so the two cannot disagree (a
//! deadline `on_timer` would not act on would spin the router's timer
//! loop; the property test at the bottom checks that none does).

use super::recovery::{Adoption, ADOPT_WAIT};
use super::{Conn, Ctx, LegState, Phase};
use crate::config::Timeouts;
use crate::event::EvictReason;
use crate::ids::LegId;
use crate::time::Instant;

/// Why a connection may need `on_timer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Timer {
    /// Closed: forgotten after `time_wait`.
    TimeWait,
    /// In set-up for longer than `handshake`: aborted.
    Handshake,
    /// Nothing heard either way for `idle`: forgotten.
    Idle,
    /// `Committing`: the SYN-ACK goes out even unconfirmed.
    Commit,
    /// Adopted: the records of replicas whose agents have not registered
    /// are no longer waited for (acted on by `settle`).
    AdoptWait,
    /// The client's reset waits for replicas behind another
    /// (`Conn::wait_reset`): those still behind leave.
    ResetWait,
    /// The followed replica's FIN waited for detached legs to close
    /// (`Conn::fin_hold_until`): it goes (acted on by `settle`).
    FinHold,
    /// Leg `i` reset while the others carried on: it crashed.
    Abort(usize),
    /// Leg `i` owes an answer for too long: evicted.
    Fail(usize),
    /// Leg `i` owes an answer: probed.
    Probe(usize),
}

impl Conn {
    /// Every timer this connection has, in the order `on_timer` acts on
    /// them.
    fn timers(&self) -> impl Iterator<Item = Timer> {
        let n = self.legs.len();
        [
            Timer::TimeWait,
            Timer::Handshake,
            Timer::Idle,
            Timer::Commit,
            Timer::AdoptWait,
            Timer::ResetWait,
            Timer::FinHold,
        ]
        .into_iter()
        .chain((0..n).map(Timer::Abort))
        .chain((0..n).flat_map(|i| [Timer::Fail(i), Timer::Probe(i)]))
    }

    /// The timer table: when `timer` is due, `None` while it is not armed.
    pub(super) fn deadline(&self, timer: Timer, t: &Timeouts) -> Option<Instant> {
        let closed = self.is_closed();
        match timer {
            Timer::TimeWait => match self.phase {
                Phase::Closed { at } => Some(at + t.time_wait),
                _ => None,
            },
            Timer::Handshake => self.half_open().then(|| self.created + t.handshake),
            // A closed connection is kept for `time_wait`, idle or not.
            Timer::Idle => (!closed).then(|| self.last_activity + t.idle),
            Timer::Commit => match self.phase {
                Phase::Committing { by, .. } => Some(by),
                _ => None,
            },
            Timer::AdoptWait => match &self.adoption {
                Some(Adoption::Rebuilding { expected }) if !closed && !expected.is_empty() => {
                    Some(self.created + ADOPT_WAIT)
                }
                _ => None,
            },
            Timer::ResetWait => match self.reset_wait {
                Some(w) if self.resetting && !closed => Some(w.since + t.failure_detection),
                _ => None,
            },
            Timer::FinHold => {
                // Only where `settle` would send the FIN once the wait is
                // over (else the due entry would never be acted on).
                if closed
                    || self.fin_sent
                    || self.vote.is_some()
                    || self.resetting
                    || self.recovering()
                    || matches!(
                        self.phase,
                        Phase::Dead | Phase::Handshake | Phase::Committing { .. }
                    )
                {
                    return None;
                }
                let f = self.group_fin()?;
                if self.sent_hi.is_before(f) {
                    return None;
                }
                self.fin_hold_until(t)
            }
            Timer::Abort(i) => {
                let l = &self.legs[i];
                match (closed, l.state, l.aborted_at) {
                    (false, LegState::Aborted, Some(a)) => Some(a + t.failure_detection),
                    _ => None,
                }
            }
            Timer::Fail(i) => {
                if closed {
                    return None;
                }
                self.fail_deadline(i, t).map(|(fail, _)| fail)
            }
            Timer::Probe(i) => {
                if closed {
                    return None;
                }
                match self.fail_deadline(i, t) {
                    Some(_) => Some(self.probe_deadline(i, t)),
                    None => self.window_shut_by(i).then(|| {
                        let l = &self.legs[i];
                        l.seen_at.max(l.probe_at.unwrap_or(Instant::ZERO)) + t.failure_detection / 4
                    }),
                }
            }
        }
    }

    fn due(&self, timer: Timer, t: &Timeouts, now: Instant) -> bool {
        self.deadline(timer, t).is_some_and(|d| d <= now)
    }

    /// The earliest time this connection needs `on_timer`.
    pub(crate) fn next_deadline(&self, t: &Timeouts) -> Instant {
        self.timers()
            .filter_map(|timer| self.deadline(timer, t))
            .min()
            // Never: `Idle` or `TimeWait` is always armed.
            .unwrap_or(self.last_activity + t.idle)
    }

    /// Run what is due at `ctx.now`, in the order of [`Conn::timers`]; each
    /// deadline is read when its turn comes (an eviction changes the
    /// others').
    pub(crate) fn on_timer(&mut self, ctx: &mut Ctx) {
        let t = ctx.timeouts;
        let now = ctx.now;
        if self.due(Timer::TimeWait, t, now) {
            self.phase = Phase::Dead;
            return;
        }
        if self.due(Timer::Handshake, t, now) {
            self.abort_legs(ctx);
            self.phase = Phase::Dead;
            return;
        }
        if self.due(Timer::Idle, t, now) {
            // Like a NAT mapping, an idle connection is forgotten
            // silently; the endpoints' keep-alives would have kept it.
            self.phase = Phase::Dead;
            return;
        }
        if self.is_closed() {
            return;
        }
        if self.due(Timer::Commit, t, now) {
            if self.may_send_uncommitted(ctx) {
                self.commit_synack(ctx, false);
            } else if let Phase::Committing { since, .. } = self.phase {
                // No agent has the record: held on (`may_send_uncommitted`).
                self.phase = Phase::Committing {
                    by: now + super::handshake::commit_wait(t),
                    since,
                };
            }
        }
        if self.due(Timer::ResetWait, t, now) {
            self.reset_wait_over(ctx);
        }
        // A reset that the others did not follow: that replica crashed.
        for i in 0..self.legs.len() {
            if self.due(Timer::Abort(i), t, now) {
                self.evict(ctx, LegId(i), EvictReason::Reset, false);
            }
        }
        for i in 0..self.legs.len() {
            if self.due(Timer::Probe(i), t, now) && !self.legs[i].asked() {
                // Asked nothing since it was last heard (timers that ran
                // late): the question comes before any verdict of silence
                // (`fail_deadline`), which this moves to a quarter of the
                // detection time from now. A verdict of standstill is
                // taken at the next run, right after.
                self.probe(ctx, i);
            } else if self.due(Timer::Fail(i), t, now) {
                let mut service_wide = self.fail_deadline(i, t).is_some_and(|(_, w)| w);
                let reason = if self.legs[i].state == LegState::SynSent {
                    // See `another_answered_syn`.
                    service_wide &= self.another_answered_syn(i);
                    EvictReason::NoSynAck
                } else {
                    EvictReason::Stalled
                };
                // A connection rebuilt from the agents' records may be one
                // that ended while no router watched: what it shows is no
                // evidence against the replica for other connections.
                self.evict(ctx, LegId(i), reason, service_wide && !self.is_adopted());
            } else if self.due(Timer::Probe(i), t, now) {
                self.probe(ctx, i);
            }
        }
        // `Timer::AdoptWait`, `Timer::FinHold` and anything the above
        // changed.
        self.settle(ctx);
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{conn, Outside, CLIENT_ISN};
    use super::*;
    use crate::config::Voting;
    use core::time::Duration;
    use proptest::prelude::*;
    use std::net::Ipv4Addr;

    fn ms(x: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(x)
    }

    /// One leg's state: (state, learned, ack, hi, heard, progress,
    /// behind since, probed, aborted at, fin).
    type LegGen = (
        usize,
        bool,
        u32,
        u32,
        u64,
        u64,
        Option<u64>,
        Option<u64>,
        Option<u64>,
        Option<u32>,
    );

    fn leg_gen() -> impl Strategy<Value = LegGen> {
        (
            0usize..5,
            any::<bool>(),
            0u32..20,
            0u32..20,
            0u64..20_000,
            0u64..20_000,
            proptest::option::of(0u64..20_000),
            proptest::option::of(0u64..20_000),
            proptest::option::of(0u64..20_000),
            proptest::option::of(0u32..20),
        )
    }

    const STATES: [LegState; 5] = [
        LegState::SynSent,
        LegState::Open,
        LegState::Refused,
        LegState::Aborted,
        LegState::Evicted,
    ];
    fn phase(i: usize, closed: Instant, commit: Instant) -> Phase {
        match i {
            0 => Phase::Handshake,
            1 => Phase::Committing {
                by: commit,
                since: Instant::ZERO,
            },
            2 => Phase::SynAckSent,
            3 => Phase::Established,
            _ => Phase::Closed { at: closed },
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Every deadline `next_deadline` returns is acted on: run
        /// `on_timer` at it, as the router's timer loop does while the
        /// connection's next deadline is not later (what one round changes
        /// may arm a timer that is already due, e.g. a probe once a rebuild
        /// completed), and within a few rounds the connection is gone or
        /// its next deadline lies later. Else the loop would spin.
        #[test]
        fn every_deadline_is_acted_on(
            legs in proptest::collection::vec(
                (leg_gen(), any::<bool>(), proptest::option::of(0u64..20_000)),
                1..5,
            ),
            sent in 0u32..20,
            phase_i in 0usize..5,
            (created, last, closed, commit) in (0u64..5_000, 0u64..20_000, 0u64..20_000, 0u64..20_000),
            adopted in any::<bool>(),
            rebuilding in any::<bool>(),
            expected in any::<bool>(),
            rebuilt in 0u64..20_000,
            client_hi in 0u32..20,
            fd in 10u64..2_000,
        ) {
            let t = Timeouts {
                failure_detection: Duration::from_millis(fd),
                idle: Duration::from_secs(60),
                handshake: Duration::from_secs(5),
                time_wait: Duration::from_secs(2),
                ..Timeouts::default()
            };
            let mut c = conn(legs.len(), Voting::Fastest);
            c.phase = phase(phase_i, ms(closed), ms(commit));
            c.created = ms(created);
            c.last_activity = ms(last);
            c.client_hi = CLIENT_ISN.add(1 + client_hi);
            c.sent_hi = c.router_isn.add(1 + sent);
            if adopted && c.phase == Phase::Established {
                // Only an established connection is adopted.
                c.adoption = Some(if rebuilding {
                    let expected = if expected {
                        vec![Ipv4Addr::new(10, 0, 9, 9)]
                    } else {
                        Vec::new()
                    };
                    Adoption::Rebuilding { expected }
                } else {
                    Adoption::Rebuilt { at: ms(rebuilt) }
                });
            }
            for (l, (g, detached, fin_at)) in c.legs.iter_mut().zip(&legs) {
                let (state, learned, ack, hi, heard, progress, behind, probe, aborted, fin) = *g;
                l.detached = *detached;
                l.fin_at = fin_at.map(ms);
                l.state = STATES[state];
                l.learned = learned || c.adoption.is_none();
                l.ack = CLIENT_ISN.add(1 + ack);
                l.edge = l.ack.add(65535);
                l.hi = c.router_isn.add(1 + hi);
                l.seen_at = ms(heard);
                l.progress_at = ms(progress);
                l.out_at = ms(progress);
                l.behind_since = behind.map(ms);
                l.probe_at = probe.map(ms);
                l.asked_at = probe.map(ms);
                l.aborted_at = aborted.map(ms);
                l.fin = fin.map(|f| c.router_isn.add(1 + f.min(hi)));
            }
            let d = c.next_deadline(&t);
            let mut out = Outside::default();
            let mut rounds = 0;
            while c.phase != Phase::Dead && c.next_deadline(&t) <= d {
                prop_assert!(
                    rounds < 4,
                    "deadline {:?} not acted on: next {:?}, phase {:?}",
                    d,
                    c.next_deadline(&t),
                    c.phase
                );
                c.on_timer(&mut out.ctx(d, &t));
                rounds += 1;
            }
        }
    }

    #[test]
    fn the_table_is_the_deadline() {
        let t = Timeouts::default();
        let mut c = conn(2, Voting::Fastest);
        c.phase = Phase::Closed { at: ms(100) };
        assert_eq!(c.next_deadline(&t), ms(100) + t.time_wait);
        assert_eq!(c.deadline(Timer::Idle, &t), None);
        c.phase = Phase::Committing {
            by: ms(50),
            since: ms(0),
        };
        assert_eq!(c.next_deadline(&t), ms(50));
        assert_eq!(c.deadline(Timer::TimeWait, &t), None);
    }
}
