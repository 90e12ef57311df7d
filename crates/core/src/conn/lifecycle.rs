//! A connection's life as the router's tables see it: after each input the
//! connection reports what changed (announced, left set-up, closed, gone,
//! its next timer) and on removal what it leaves behind. The router acts
//! on these reports and never reads the connection's state itself.

use super::{Conn, Phase};
use crate::config::Timeouts;
use crate::event::{AgentMsg, Outbox};
use crate::ids::{LegId, ReplicaId, ServiceId};
use crate::record::ConnRecord;
use crate::time::Instant;
use ftnet_wire::SeqNum;
use std::net::Ipv4Addr;

/// What changed in a connection with one input, for the router's tables.
/// (The messages it owes the agents, `Established` and `Forgotten`, it
/// queued itself.)
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Transition {
    /// Gone: the router removes it ([`Conn::removed`]).
    pub gone: bool,
    /// It left set-up: no longer one of the half-open connections.
    pub left_half_open: bool,
    /// It closed at this time and waits for `time_wait` in the closed list.
    pub closed_at: Option<Instant>,
    /// Its earliest deadline moved before the timer it had: schedule one.
    pub schedule: Option<Instant>,
}

/// What a connection the router removes leaves in the router's counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Removed {
    /// It was counted among the half-open connections.
    pub half_open: bool,
    /// It was adopted and not rebuilt yet.
    pub rebuilding: bool,
}

/// What a client SYN (not a SYN-ACK, no RST) means on the 4-tuple of a
/// connection in the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SynOnKey {
    /// A new connection on the 4-tuple of a closed one: the old one goes.
    Reuse,
    /// The same SYN again ([`Conn::client_syn_again`]).
    Again,
    /// Another ISN while still in set-up: dropped.
    BadState,
    /// RFC 5961 §4: a SYN on a live connection (also one adopted from the
    /// agents, which may have ended while no router watched) is
    /// challenged, not taken as a new connection ([`Conn::syn_on_live`]).
    Challenge,
}

impl Conn {
    /// Bookkeeping after the connection handled an input: note which legs
    /// fell behind, announce it or forget it at the agents, and report
    /// what the router's tables must change.
    pub(crate) fn after_input(
        &mut self,
        now: Instant,
        t: &Timeouts,
        out: &mut Outbox,
    ) -> Transition {
        self.update_behind(now);
        if self.phase == Phase::Dead {
            return Transition {
                gone: true,
                ..Transition::default()
            };
        }
        let mut tr = Transition::default();
        if self.counted_half_open && !self.half_open() {
            self.counted_half_open = false;
            tr.left_half_open = true;
        }
        // Announced once every replica answered, before the client is sent
        // the SYN-ACK (with `record_commit`, only once `record_stored` says
        // the agents have it): from then on the client may send data, and
        // a router taking over must find the connection in their records.
        if !self.announced
            && matches!(
                self.phase,
                Phase::Committing { .. } | Phase::SynAckSent | Phase::Established
            )
        {
            self.announced = true;
            out.agent(AgentMsg::Established {
                record: self.record(),
            });
        }
        if self.is_closed() && self.announced {
            // Closed: the agents need its record no more (a router taking
            // over must not adopt a finished connection; a retransmitted
            // FIN then meets silence, as any unknown segment does).
            self.announced = false;
            let all = self.legs.iter().map(|l| l.addr).collect();
            self.forget(out, all);
        }
        if let (Phase::Closed { at }, false) = (self.phase, self.counted_closed) {
            self.counted_closed = true;
            tr.closed_at = Some(at);
        }
        let d = self.next_deadline(t);
        if self.timer_at.is_none_or(|at| d < at) {
            self.timer_at = Some(d);
            tr.schedule = Some(d);
        }
        tr
    }

    /// The router takes the connection out of its table.
    pub(crate) fn removed(&mut self, out: &mut Outbox) -> Removed {
        if self.announced {
            self.announced = false;
            let all = self.legs.iter().map(|l| l.addr).collect();
            self.forget(out, all);
        }
        Removed {
            half_open: self.counted_half_open,
            rebuilding: self.recovering(),
        }
    }

    /// The agents of `replicas` forget this connection's record (the one
    /// place `AgentMsg::Forgotten` is made).
    pub(super) fn forget(&self, out: &mut Outbox, replicas: Vec<Ipv4Addr>) {
        out.agent(AgentMsg::Forgotten {
            key: self.key,
            replicas,
        });
    }

    /// What a client SYN with sequence number `isn` means here.
    pub(crate) fn syn_on_key(&self, isn: SeqNum) -> SynOnKey {
        if self.client_isn == isn {
            SynOnKey::Again
        } else if self.is_closed() {
            SynOnKey::Reuse
        } else if self.half_open() && !self.is_adopted() {
            SynOnKey::BadState
        } else {
            SynOnKey::Challenge
        }
    }

    /// Counted among the half-open connections: since when (its creation).
    pub(crate) fn half_open_since(&self) -> Option<Instant> {
        self.counted_half_open.then_some(self.created)
    }

    /// Closed (in its quiet period): since when.
    pub(crate) fn closed_since(&self) -> Option<Instant> {
        match self.phase {
            Phase::Closed { at } => Some(at),
            _ => None,
        }
    }

    /// The timer the router holds for this connection.
    pub(crate) fn timer(&self) -> Option<Instant> {
        self.timer_at
    }

    /// The router's timer entry for `at` came due: whether it is the
    /// connection's current one (then it is used up).
    pub(crate) fn take_timer(&mut self, at: Instant) -> bool {
        if self.timer_at != Some(at) {
            return false;
        }
        self.timer_at = None;
        true
    }

    /// The service this connection belongs to.
    pub(crate) fn service(&self) -> ServiceId {
        self.svc
    }

    /// Replica `replica` is still a live part of it (a closed connection
    /// in its quiet period counts: it is in the table until then).
    pub(crate) fn has_live(&self, replica: ReplicaId) -> bool {
        self.legs.iter().any(|l| l.replica == replica && l.live())
    }

    /// Adopted and not rebuilt yet.
    pub(crate) fn is_rebuilding(&self) -> bool {
        self.recovering()
    }

    /// Its SYN-ACK waits for the record to be stored.
    pub(crate) fn is_committing(&self) -> bool {
        matches!(self.phase, Phase::Committing { .. })
    }

    /// Closed (in its quiet period).
    pub(crate) fn is_closed(&self) -> bool {
        matches!(self.phase, Phase::Closed { .. })
    }

    /// Another replica's record of the same adopted connection (a
    /// connection being rebuilt, set up by the same router).
    pub(crate) fn takes_record(&self, rec: &ConnRecord) -> bool {
        self.recovering() && self.router_isn.0 == rec.router_isn
    }

    /// The leg of replica `replica` (service index), live or not.
    pub(crate) fn leg_of(&self, replica: ReplicaId) -> Option<LegId> {
        self.legs
            .iter()
            .position(|l| l.replica == replica)
            .map(LegId)
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{conn, CLIENT_ISN};
    use super::super::recovery::Adoption;
    use super::*;
    use crate::config::Voting;
    use crate::event::ToAgents;
    use core::time::Duration;

    #[test]
    fn a_client_syn_on_the_key_of_a_connection() {
        let mut c = conn(2, Voting::Fastest);
        assert_eq!(c.syn_on_key(CLIENT_ISN), SynOnKey::Again);
        assert_eq!(c.syn_on_key(CLIENT_ISN.add(9)), SynOnKey::BadState);
        c.adoption = Some(Adoption::Rebuilt { at: Instant::ZERO });
        assert_eq!(c.syn_on_key(CLIENT_ISN.add(9)), SynOnKey::Challenge);
        c.adoption = None;
        c.phase = Phase::Established;
        assert_eq!(c.syn_on_key(CLIENT_ISN.add(9)), SynOnKey::Challenge);
        c.phase = Phase::Closed { at: Instant::ZERO };
        assert_eq!(c.syn_on_key(CLIENT_ISN.add(9)), SynOnKey::Reuse);
        assert_eq!(c.syn_on_key(CLIENT_ISN), SynOnKey::Again);
    }

    #[test]
    fn announced_once_forgotten_once() {
        let t = Timeouts::default();
        let now = Instant::ZERO + Duration::from_millis(10);
        let mut events = Outbox::default();
        let mut c = conn(2, Voting::Fastest);
        let tr = c.after_input(now, &t, &mut events);
        assert!(!tr.gone && !tr.left_half_open && tr.closed_at.is_none());
        assert!(tr.schedule.is_some(), "a new connection gets a timer");
        assert!(
            events.agents.is_empty(),
            "not announced before every replica answered"
        );
        c.phase = Phase::SynAckSent;
        let tr = c.after_input(now, &t, &mut events);
        assert!(!tr.left_half_open, "still half-open until the client's ACK");
        assert!(matches!(
            events.agents.pop_front(),
            Some(ToAgents::Msg(AgentMsg::Established { .. }))
        ));
        c.phase = Phase::Established;
        let tr = c.after_input(now, &t, &mut events);
        assert!(tr.left_half_open && events.agents.is_empty());
        let tr = c.after_input(now, &t, &mut events);
        assert!(!tr.left_half_open, "left once");
        c.phase = Phase::Closed { at: now };
        let tr = c.after_input(now, &t, &mut events);
        assert_eq!(tr.closed_at, Some(now));
        assert!(matches!(
            events.agents.pop_front(),
            Some(ToAgents::Msg(AgentMsg::Forgotten { replicas, .. })) if replicas.len() == 2
        ));
        // Closed once; removed later, it owes the agents nothing more.
        let tr = c.after_input(now, &t, &mut events);
        assert_eq!(tr.closed_at, None);
        let gone = c.removed(&mut events);
        assert!(events.agents.is_empty());
        assert_eq!(
            gone,
            Removed {
                half_open: false,
                rebuilding: false
            }
        );
        c.phase = Phase::Dead;
        assert!(c.after_input(now, &t, &mut events).gone);
    }

    #[test]
    fn removing_an_announced_connection_forgets_it() {
        let mut events = Outbox::default();
        let mut c = conn(3, Voting::Fastest);
        c.phase = Phase::Established;
        c.after_input(Instant::ZERO, &Timeouts::default(), &mut events);
        events.agents.clear();
        c.removed(&mut events);
        assert!(matches!(
            events.agents.pop_front(),
            Some(ToAgents::Msg(AgentMsg::Forgotten { replicas, .. })) if replicas.len() == 3
        ));
    }

    #[test]
    fn a_timer_entry_counts_only_while_current() {
        let mut events = Outbox::default();
        let mut c = conn(1, Voting::Fastest);
        let d = c
            .after_input(Instant::ZERO, &Timeouts::default(), &mut events)
            .schedule
            .expect("scheduled");
        assert_eq!(c.timer(), Some(d));
        assert!(!c.take_timer(Instant::ZERO));
        assert!(c.take_timer(d));
        assert!(!c.take_timer(d), "used up");
    }
}
