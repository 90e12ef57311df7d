//! The sequencer's numbering of one service's input events, and how it
//! carries over a router takeover (AR-TCP §4.1's sequencer with a
//! replaceable sequencer).
//!
//! A router that starts or takes over does not know where the order
//! stands: its predecessor may have numbered thousands of events, and the
//! agents may each have received a different prefix of them (one writer
//! per agent; a crash leaves some behind). So, when told to
//! ([`crate::Router::await_order`]), it holds the events it would number
//! until every live replica's agent reported its last number and the last
//! events it got ([`OrderReport`]), or [`ORDER_WAIT`] passed. It then
//! replays to each agent that is behind the events it missed (from the
//! others' reports), and numbers on from the highest number reported: every
//! replica's shim sees one gap-free order, the old router's events first.

use crate::event::{AgentMsg, InputKind, Unnumbered};
use crate::key::ConnKey;
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::Ipv4Addr;
use std::time::Duration;

/// Numbered events kept per service, for agents that report late.
pub const ORDER_LOG: usize = 1024;
/// Events held while waiting for the reports before the order resumes
/// anyway (memory stays bounded under a flood of new connections).
pub const ORDER_HOLD_MAX: usize = 65536;
/// How long a new router waits for the agents' reports (from the first
/// report, or from the first event it holds) before it numbers on without
/// the missing ones.
pub const ORDER_WAIT: Duration = Duration::from_secs(1);

/// One numbered input event, as an agent keeps and reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NumberedInput {
    pub seq: u64,
    pub key: ConnKey,
    pub kind: InputKind,
}

/// What one replica's agent says of a service's order when it registers:
/// the last number it got and the last events (ascending, ending at
/// `last_seq`). `last_seq` 0: it never got an event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderReport {
    pub vip: Ipv4Addr,
    pub vport: u16,
    pub last_seq: u64,
    pub tail: Vec<NumberedInput>,
}

/// One service's order.
#[derive(Debug, Default)]
pub(crate) struct SvcOrder {
    /// The last number handed out.
    pub seq: u64,
    /// Waiting for the agents' reports (after a start or a takeover).
    pub waiting: Option<Waiting>,
    /// The last numbered events (for replays).
    log: BTreeMap<u64, NumberedInput>,
    /// Inputs produced while waiting, not numbered yet.
    pub held: VecDeque<Unnumbered>,
    /// Each connection's data chunk ends in `log`, newest first: built by
    /// the first `recent_ends` after the log changed, so that a rebuild
    /// adopting thousands of connections reads the log once, not once per
    /// connection.
    ends: Option<HashMap<ConnKey, Vec<u32>>>,
}

#[derive(Debug, Default)]
pub(crate) struct Waiting {
    /// Replica → the last number its agent got.
    pub reported: BTreeMap<Ipv4Addr, u64>,
    pub deadline: Option<Instant>,
}

/// What resuming did, for the log.
#[derive(Debug, Default)]
pub(crate) struct Resumed {
    /// Replays, in order, each to one replica.
    pub replays: Vec<AgentMsg>,
    /// Replicas that could not be brought up to date (the events they
    /// missed were in nobody's report), with the first missing number.
    pub lost: Vec<(Ipv4Addr, u64)>,
    pub replayed: usize,
}

impl SvcOrder {
    /// Whether an agent's report contradicts this order: it got a number
    /// this router never handed out, or an event this router's log holds
    /// another under its number. Another router numbered the service's
    /// input since this one did (see `Router::superseded`).
    pub(crate) fn contradicted_by(&self, r: &OrderReport) -> Option<u64> {
        if self.waiting.is_some() || self.seq == 0 {
            return None;
        }
        if r.last_seq > self.seq {
            return Some(r.last_seq);
        }
        r.tail
            .iter()
            .find(|e| self.log.get(&e.seq).is_some_and(|x| x != *e))
            .map(|e| e.seq)
    }
}

impl SvcOrder {
    pub fn remember(&mut self, ev: NumberedInput) {
        self.ends = None;
        self.log.insert(ev.seq, ev);
        while self.log.len() > ORDER_LOG {
            self.log.pop_first();
        }
    }

    /// The ends (stream offsets) of the last `n` chunks of connection
    /// `key` in the log, newest first.
    pub fn recent_ends(&mut self, key: &ConnKey, n: usize) -> Vec<u32> {
        let log = &self.log;
        let ends = self.ends.get_or_insert_with(|| {
            let mut m: HashMap<ConnKey, Vec<u32>> = HashMap::new();
            for ev in log.values().rev() {
                if let InputKind::Data { end } = ev.kind {
                    m.entry(ev.key).or_default().push(end);
                }
            }
            m
        });
        ends.get(key)
            .map(|v| v.iter().copied().take(n).collect())
            .unwrap_or_default()
    }

    /// Number `input`, remember it, and return its event.
    pub fn number(&mut self, input: Unnumbered) -> AgentMsg {
        // A hostile report may have set the number to u64::MAX
        // (saturating: never an overflow).
        self.seq = self.seq.saturating_add(1);
        self.remember(NumberedInput {
            seq: self.seq,
            key: input.key,
            kind: input.kind,
        });
        input.numbered(self.seq)
    }

    /// One agent's report: its tail joins the log; while waiting it counts
    /// as reported.
    pub fn report(&mut self, replica: Ipv4Addr, r: &OrderReport) {
        for ev in &r.tail {
            if ev.seq <= r.last_seq {
                self.remember(*ev);
            }
        }
        if let Some(w) = &mut self.waiting {
            let e = w.reported.entry(replica).or_insert(0);
            *e = (*e).max(r.last_seq);
        }
    }

    /// The events `from..=to`, addressed to `replica` alone; `Err(n)` with
    /// the first number nobody reported.
    pub fn replay(&self, replica: Ipv4Addr, from: u64, to: u64) -> Result<Vec<AgentMsg>, u64> {
        (from..=to)
            .map(|n| {
                self.log
                    .get(&n)
                    .map(|e| AgentMsg::Input {
                        seq: e.seq,
                        key: e.key,
                        kind: e.kind,
                        replicas: vec![replica],
                    })
                    .ok_or(n)
            })
            .collect()
    }

    /// Stop waiting: bring every reported agent that is behind up to the
    /// highest number reported, then number the held events after it.
    /// Agents that never got an event (number 0) start with what comes next.
    pub fn resume(&mut self) -> Resumed {
        let mut out = Resumed::default();
        let Some(w) = self.waiting.take() else {
            return out;
        };
        let top = w
            .reported
            .values()
            .copied()
            .max()
            .unwrap_or(0)
            .max(self.seq);
        let mut behind: Vec<(Ipv4Addr, u64)> = w
            .reported
            .iter()
            .filter(|(_, &l)| l > 0 && l < top)
            .map(|(a, l)| (*a, *l))
            .collect();
        behind.sort();
        for (a, l) in behind {
            match self.replay(a, l.saturating_add(1), top) {
                Ok(evs) => {
                    out.replayed += evs.len();
                    out.replays.extend(evs);
                }
                Err(n) => out.lost.push((a, n)),
            }
        }
        self.seq = top;
        out
    }

    /// How many were reported while waiting (for the log).
    pub fn reported(&self) -> Vec<Ipv4Addr> {
        let mut v: Vec<Ipv4Addr> = self
            .waiting
            .as_ref()
            .map(|w| w.reported.keys().copied().collect())
            .unwrap_or_default();
        v.sort();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
    const B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
    const C: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 3);

    fn key(p: u16) -> ConnKey {
        ConnKey {
            client: Ipv4Addr::new(192, 0, 2, 1),
            cport: p,
            vip: Ipv4Addr::new(198, 51, 100, 1),
            vport: 80,
        }
    }

    /// A connection's last chunk ends, newest first, only its own and
    /// only data; what is remembered later shows in the next answer.
    #[test]
    fn recent_ends_are_a_connections_newest_chunk_ends() {
        let mut o = SvcOrder::default();
        let kinds = [
            (1, InputKind::Accept),
            (1, InputKind::Data { end: 10 }),
            (2, InputKind::Data { end: 5 }),
            (1, InputKind::Data { end: 20 }),
            (1, InputKind::Tick { at_us: 7 }),
            (1, InputKind::Data { end: 30 }),
        ];
        for (seq, (p, kind)) in (1..).zip(kinds) {
            o.remember(NumberedInput {
                seq,
                key: key(p),
                kind,
            });
        }
        assert_eq!(o.recent_ends(&key(1), 2), vec![30, 20]);
        assert_eq!(o.recent_ends(&key(1), 9), vec![30, 20, 10]);
        assert_eq!(o.recent_ends(&key(2), 9), vec![5]);
        assert!(o.recent_ends(&key(3), 9).is_empty());
        o.remember(NumberedInput {
            seq: 7,
            key: key(1),
            kind: InputKind::Data { end: 40 },
        });
        assert_eq!(o.recent_ends(&key(1), 2), vec![40, 30]);
    }

    fn rep(last: u64, from: u64) -> OrderReport {
        OrderReport {
            vip: Ipv4Addr::new(198, 51, 100, 1),
            vport: 80,
            last_seq: last,
            tail: (from..=last)
                .map(|s| NumberedInput {
                    seq: s,
                    key: key(u16::try_from(s).expect("a small test sequence")),
                    kind: InputKind::Data {
                        end: u32::try_from(s).expect("a small test sequence"),
                    },
                })
                .collect(),
        }
    }

    fn seqs(evs: &[AgentMsg]) -> Vec<(u64, Ipv4Addr)> {
        evs.iter()
            .filter_map(|e| match e {
                AgentMsg::Input { seq, replicas, .. } => Some((*seq, replicas[0])),
                _ => None,
            })
            .collect()
    }

    /// Agents at 100, 97 and 0 (fresh): the one at 97 gets 98..100 from
    /// the leader's tail, the fresh one nothing, and numbering goes on at 101.
    #[test]
    fn behind_agents_get_the_missing_events_and_numbering_continues() {
        let mut o = SvcOrder {
            waiting: Some(Waiting::default()),
            ..Default::default()
        };
        o.report(A, &rep(100, 50));
        o.report(B, &rep(97, 60));
        o.report(C, &rep(0, 1));
        let r = o.resume();
        assert_eq!(seqs(&r.replays), vec![(98, B), (99, B), (100, B)]);
        assert!(r.lost.is_empty());
        let ev = o.number(Unnumbered {
            key: key(1),
            kind: InputKind::Accept,
            replicas: vec![A, B, C],
        });
        assert!(matches!(ev, AgentMsg::Input { seq: 101, .. }));
        assert!(o.waiting.is_none());
    }

    /// Events nobody reported cannot be replayed: named, not invented.
    #[test]
    fn a_gap_nobody_reported_is_named() {
        let mut o = SvcOrder {
            waiting: Some(Waiting::default()),
            ..Default::default()
        };
        o.report(A, &rep(100, 95));
        o.report(B, &rep(90, 80));
        let r = o.resume();
        assert!(r.replays.is_empty());
        assert_eq!(r.lost, vec![(B, 91)]);
        assert_eq!(o.seq, 100);
    }

    #[test]
    fn the_log_is_bounded() {
        let mut o = SvcOrder::default();
        for _ in 0..3 * ORDER_LOG {
            o.number(Unnumbered {
                key: key(1),
                kind: InputKind::Data { end: 1 },
                replicas: vec![A],
            });
        }
        assert_eq!(o.log.len(), ORDER_LOG);
        assert!(o.replay(A, 1, 5).is_err());
        assert_eq!(o.replay(A, o.seq - 2, o.seq).map(|v| v.len()), Ok(3));
    }
}
