//! The input order as the shim sees it: the router's numbered events,
//! which of them the server may see next, and the wire format the agent
//! uses to pass them on. Pure logic, tested without a server.

use std::collections::{HashMap, HashSet, VecDeque};

/// A connection as the replica sees it: the client's address and port and
/// the local (service) port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key {
    pub client: u32,
    pub cport: u16,
    pub vport: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Accept,
    /// The next chunk ends at this stream offset (bytes after the SYN, mod 2^32).
    Data {
        end: u32,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ev {
    pub seq: u64,
    pub key: Key,
    pub kind: Kind,
}

/// Size of one record on the agent → shim socket.
pub const RECORD: usize = 24;

/// `seq` u64 LE, client IPv4 (network order), cport u16 LE, vport u16 LE,
/// kind u8 (1 accept, 2 data), 3 bytes zero, end u32 LE.
pub fn encode(ev: &Ev) -> [u8; RECORD] {
    let mut b = [0u8; RECORD];
    b[0..8].copy_from_slice(&ev.seq.to_le_bytes());
    b[8..12].copy_from_slice(&ev.key.client.to_be_bytes());
    b[12..14].copy_from_slice(&ev.key.cport.to_le_bytes());
    b[14..16].copy_from_slice(&ev.key.vport.to_le_bytes());
    let (k, end) = match ev.kind {
        Kind::Accept => (1, 0),
        Kind::Data { end } => (2, end),
    };
    b[16] = k;
    b[20..24].copy_from_slice(&end.to_le_bytes());
    b
}

pub fn decode(b: &[u8; RECORD]) -> Option<Ev> {
    let u16le = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
    let kind = match b[16] {
        1 => Kind::Accept,
        2 => Kind::Data {
            end: u32::from_le_bytes([b[20], b[21], b[22], b[23]]),
        },
        _ => return None,
    };
    let mut seq = [0u8; 8];
    seq.copy_from_slice(&b[0..8]);
    Some(Ev {
        seq: u64::from_le_bytes(seq),
        key: Key {
            client: u32::from_be_bytes([b[8], b[9], b[10], b[11]]),
            cport: u16le(12),
            vport: u16le(14),
        },
        kind,
    })
}

/// The received part of the router's order that the server has not consumed.
#[derive(Debug, Default)]
pub struct Order {
    queue: VecDeque<Ev>,
    /// Connections the server closed: later events for them are dropped
    /// (they may still be on their way when the close happens).
    closed: HashSet<Key>,
    closed_fifo: VecDeque<Key>,
    last_seq: Option<u64>,
    /// Connections accepted in the order and not closed: the end of their
    /// last chunk (none before the first).
    open: HashMap<Key, Option<u32>>,
}

/// The stream from the router has a hole: the order cannot be trusted.
#[derive(Debug, PartialEq, Eq)]
pub struct Gap {
    pub expected: u64,
    pub got: u64,
}

const CLOSED_MAX: usize = 65536;

impl Order {
    /// Append an event; the numbers must be contiguous (the first one
    /// received may be any number: the shim may start late).
    pub fn push(&mut self, ev: Ev) -> Result<(), Gap> {
        if let Some(last) = self.last_seq {
            // No number follows u64::MAX: a record claiming one is a hole
            // (checked, never a wrap or a panic on what the socket says).
            let next = last.checked_add(1);
            if next != Some(ev.seq) {
                return Err(Gap {
                    expected: next.unwrap_or(u64::MAX),
                    got: ev.seq,
                });
            }
        }
        self.last_seq = Some(ev.seq);
        // A router that took over may say again what its predecessor said
        // (an Accept, a chunk no longer than one before): the same events
        // on every replica, so dropping them keeps the replicas together.
        match ev.kind {
            Kind::Accept => {
                // A new connection with a key seen before (port reuse).
                if self.closed.remove(&ev.key) {
                    self.closed_fifo.retain(|k| *k != ev.key);
                } else if self.open.contains_key(&ev.key) {
                    return Ok(());
                }
                self.open.insert(ev.key, None);
            }
            Kind::Data { end } => {
                if self.closed.contains(&ev.key) {
                    return Ok(());
                }
                let prev = self.open.insert(ev.key, Some(end)).flatten();
                if let Some(p) = prev.filter(|&p| (end.wrapping_sub(p) as i32) <= 0) {
                    self.open.insert(ev.key, Some(p));
                    return Ok(());
                }
            }
        }
        self.queue.push_back(ev);
        Ok(())
    }

    /// The first event the server may see now: the earliest one that
    /// `eligible` accepts. Events of connections the server is not reading
    /// (not registered for input) are passed over, not dropped: they come
    /// back in their place when the server reads that connection again.
    pub fn head(&self, eligible: impl Fn(&Ev) -> bool) -> Option<Ev> {
        self.queue.iter().find(|e| eligible(e)).copied()
    }

    /// The event `seq` was consumed.
    pub fn consumed(&mut self, seq: u64) {
        if let Some(i) = self.queue.iter().position(|e| e.seq == seq) {
            self.queue.remove(i);
        }
    }

    /// The received events, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Ev> {
        self.queue.iter()
    }

    /// Does the server still have events pending for `key`?
    pub fn pending_for(&self, key: &Key) -> bool {
        self.queue.iter().any(|e| e.key == *key)
    }

    /// The server closed `key`: forget its pending events and drop late ones.
    pub fn close(&mut self, key: Key) {
        self.queue.retain(|e| e.key != key);
        self.open.remove(&key);
        if self.closed.insert(key) {
            self.closed_fifo.push_back(key);
            if self.closed_fifo.len() > CLOSED_MAX {
                if let Some(old) = self.closed_fifo.pop_front() {
                    self.closed.remove(&old);
                }
            }
        }
    }

    pub fn len(&self) -> usize {
        self.queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Key = Key {
        client: 0xc612_0102,
        cport: 40000,
        vport: 6379,
    };
    const B: Key = Key {
        client: 0xc612_0102,
        cport: 40001,
        vport: 6379,
    };

    fn ev(seq: u64, key: Key, kind: Kind) -> Ev {
        Ev { seq, key, kind }
    }

    /// The agent and the shim must agree on these bytes (the agent's
    /// encoder is tested against the same vector).
    #[test]
    fn record_format_is_fixed() {
        let e = ev(0x0102_0304_0506_0708, A, Kind::Data { end: 0xaabb_ccdd });
        let b = encode(&e);
        assert_eq!(
            b,
            [
                8, 7, 6, 5, 4, 3, 2, 1, 0xc6, 0x12, 0x01, 0x02, 0x40, 0x9c, 0xeb, 0x18, 2, 0, 0, 0,
                0xdd, 0xcc, 0xbb, 0xaa
            ]
        );
        assert_eq!(decode(&b), Some(e));
        let mut bad = b;
        bad[16] = 9;
        assert_eq!(decode(&bad), None);
    }

    #[test]
    fn gaps_are_refused() {
        let mut o = Order::default();
        assert!(
            o.push(ev(7, A, Kind::Accept)).is_ok(),
            "the first number may be any"
        );
        assert!(o.push(ev(8, A, Kind::Data { end: 5 })).is_ok());
        assert_eq!(
            o.push(ev(10, B, Kind::Accept)),
            Err(Gap {
                expected: 9,
                got: 10
            })
        );
    }

    /// Hostile numbers (the largest sequence number, offsets at the ends of
    /// the 2^32 space) are refused or ordered, never overflowed.
    #[test]
    fn extreme_records_do_not_overflow() {
        let mut o = Order::default();
        o.push(ev(u64::MAX, A, Kind::Accept)).unwrap();
        assert_eq!(
            o.push(ev(0, A, Kind::Data { end: u32::MAX })),
            Err(Gap {
                expected: u64::MAX,
                got: 0
            })
        );
        assert!(o.push(ev(u64::MAX, A, Kind::Data { end: 1 })).is_err());
        let mut o = Order::default();
        o.push(ev(u64::MAX - 1, A, Kind::Data { end: u32::MAX }))
            .unwrap();
        o.push(ev(u64::MAX, A, Kind::Data { end: 0 })).unwrap();
        assert_eq!(o.len(), 2, "an end past 2^32 wraps as a stream offset");
        let b = encode(&ev(u64::MAX, B, Kind::Data { end: u32::MAX }));
        assert_eq!(decode(&b).map(|e| e.seq), Some(u64::MAX));
    }

    /// Passing over a connection the server does not read, and its events
    /// coming back in their place when it reads again.
    #[test]
    fn head_skips_ineligible_and_keeps_them() {
        let mut o = Order::default();
        o.push(ev(1, A, Kind::Data { end: 10 })).unwrap();
        o.push(ev(2, B, Kind::Data { end: 3 })).unwrap();
        o.push(ev(3, A, Kind::Data { end: 20 })).unwrap();
        assert_eq!(o.head(|_| true).map(|e| e.seq), Some(1));
        assert_eq!(o.head(|e| e.key != A).map(|e| e.seq), Some(2));
        o.consumed(2);
        assert_eq!(o.head(|e| e.key != A), None);
        assert_eq!(o.head(|_| true).map(|e| e.seq), Some(1));
        assert!(o.pending_for(&A) && !o.pending_for(&B));
    }

    /// What a router that took over repeats is dropped, the same way on
    /// every replica: a second Accept of an open connection, a chunk that
    /// ends at or before an earlier one (offsets wrap at 2^32).
    #[test]
    fn repeated_accepts_and_chunks_are_dropped() {
        let mut o = Order::default();
        o.push(ev(1, A, Kind::Accept)).unwrap();
        o.push(ev(2, A, Kind::Data { end: 0xffff_fff0 })).unwrap();
        o.push(ev(3, A, Kind::Accept)).unwrap();
        o.push(ev(4, A, Kind::Data { end: 0xffff_ff00 })).unwrap();
        o.push(ev(5, A, Kind::Data { end: 0xffff_fff0 })).unwrap();
        o.push(ev(6, A, Kind::Data { end: 16 })).unwrap();
        let seqs: Vec<u64> = o.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, vec![1, 2, 6]);
        o.close(A);
        o.push(ev(7, A, Kind::Accept)).unwrap();
        o.push(ev(8, A, Kind::Data { end: 3 })).unwrap();
        assert_eq!(o.len(), 2, "a reused key starts afresh");
    }

    #[test]
    fn closed_connections_drop_late_events_until_reused() {
        let mut o = Order::default();
        o.push(ev(1, A, Kind::Accept)).unwrap();
        o.push(ev(2, A, Kind::Data { end: 1 })).unwrap();
        o.close(A);
        assert!(o.is_empty());
        o.push(ev(3, A, Kind::Data { end: 2 })).unwrap();
        assert!(o.is_empty(), "late event of a closed connection dropped");
        o.push(ev(4, A, Kind::Accept)).unwrap();
        o.push(ev(5, A, Kind::Data { end: 1 })).unwrap();
        assert_eq!(o.len(), 2, "the port was reused by a new connection");
    }
}
