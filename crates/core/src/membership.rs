//! A replica's membership of one service: whether it gets new connections,
//! whether it is still in the connections it had, and why not.
//! COSCANet-FT §III-E and §V: replicas are added and removed at any time.

use crate::event::EvictReason;
use crate::time::Instant;
use serde::Serialize;

/// One replica's standing in one service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Member {
    /// In the group: gets new connections (with agents, once its agent
    /// registered with this router).
    Serving,
    /// In the group but getting no new connections: the connections it is
    /// in finish with it (operator: `replica drain`).
    Draining { since: Instant },
    /// Out of the group since `since`, for `reason`: taken out of every
    /// connection, gets none. Its server missed input since, so its state
    /// is not the group's: only an operator brings it back.
    Down { reason: EvictReason, since: Instant },
    /// Removed by the operator: taken out of every connection (but a
    /// connection's last replica) and gets none. The slot stays, so that
    /// replica indices never move; `replica add` makes the address a
    /// member again.
    Removed { since: Instant },
    /// Being brought to the group's state ([`crate::Router::join_replica`]):
    /// the service's input is paused while a serving replica's state is
    /// checkpointed and restored here, proven by its digest, and this
    /// replica is added to every open connection. Not in the group (no
    /// new connections, no verdicts) until it is admitted.
    Joining { since: Instant },
}

/// [`Member`] as the status and the log name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MemberState {
    Serving,
    Draining,
    Down,
    Removed,
    Joining,
}

impl Member {
    /// Gets new connections (the agent's registration aside).
    pub(crate) fn serves_new(&self) -> bool {
        *self == Member::Serving
    }

    /// Still in the connections it is part of, and in the service's input
    /// order: serving or draining.
    pub(crate) fn in_group(&self) -> bool {
        matches!(self, Member::Serving | Member::Draining { .. })
    }

    pub(crate) fn state(&self) -> MemberState {
        match self {
            Member::Serving => MemberState::Serving,
            Member::Draining { .. } => MemberState::Draining,
            Member::Down { .. } => MemberState::Down,
            Member::Removed { .. } => MemberState::Removed,
            Member::Joining { .. } => MemberState::Joining,
        }
    }

    /// Since when it is in its state (`None` for serving).
    pub(crate) fn since(&self) -> Option<Instant> {
        match *self {
            Member::Serving => None,
            Member::Draining { since }
            | Member::Down { since, .. }
            | Member::Removed { since }
            | Member::Joining { since } => Some(since),
        }
    }
}

/// Why an operator's membership change was refused; each says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MembershipError {
    #[error("no service named {0:?}")]
    NoService(String),
    #[error("service {service} has no replica {replica}")]
    NotAMember { service: String, replica: String },
    #[error("replica {replica} is already a member of service {service} ({state:?}); `replica enable` brings back one that is out of service")]
    AlreadyMember {
        service: String,
        replica: String,
        state: MemberState,
    },
    #[error("replica {replica} already serves port {port} of service {other}: one address cannot be a replica of two services on one port")]
    PortTaken {
        replica: String,
        port: u16,
        other: String,
    },
    #[error("replica {replica} is the last serving replica of service {service}: add or enable another one first")]
    LastServing { service: String, replica: String },
    #[error(
        "replica {replica} of service {service} was removed: `replica add` makes it a member again"
    )]
    Removed { service: String, replica: String },
    #[error("replica {replica} port {port} still carries {connections} connection(s) of removed service {other} (open, or closed and in their quiet period): try again once they are gone")]
    PortBusy {
        replica: String,
        port: u16,
        other: String,
        connections: usize,
    },
    #[error("a service named {0:?} runs already")]
    ServiceExists(String),
    #[error("{vip}:{port} is already service {other}'s")]
    VipTaken {
        vip: String,
        port: u16,
        other: String,
    },
    #[error("replica {replica} cannot join service {service}: {why}")]
    CannotJoin {
        service: String,
        replica: String,
        why: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn who_gets_new_connections_and_who_stays_in_the_old_ones() {
        let t = Instant::ZERO;
        let cases = [
            (Member::Serving, true, true),
            (Member::Draining { since: t }, false, true),
            (
                Member::Down {
                    reason: EvictReason::Stalled,
                    since: t,
                },
                false,
                false,
            ),
            (Member::Removed { since: t }, false, false),
        ];
        for (m, new, group) in cases {
            assert_eq!(m.serves_new(), new, "{m:?}");
            assert_eq!(m.in_group(), group, "{m:?}");
            assert_eq!(m.since().is_none(), m == Member::Serving, "{m:?}");
        }
    }
}
