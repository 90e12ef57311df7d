//! The input order as the shim sees it: the router's numbered events
//! (accepts, chunks, joins), which of them the server may see next, and
//! the wire format the agent uses to pass them on (and to ask where the
//! shim stands). Pure logic, tested without a server.

use std::collections::{HashMap, VecDeque};

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
    /// A new connection, with the client's initial sequence number where
    /// the agent knows it: what tells a connection that reuses the key of
    /// one still open here (a client that reset it and reconnected from
    /// the same port) from the same accept said again by a router that
    /// took over.
    Accept { isn: Option<u32> },
    /// The next chunk ends at this stream offset (bytes after the SYN, mod 2^32).
    Data { end: u32 },
    /// This replica joins a connection already open on the others: the
    /// router made it a fresh connection whose stream starts at the
    /// client's stream offset `base` (bytes after the client's SYN, mod
    /// 2^32). An accept for a replica that does not have the connection,
    /// dropped by one that does.
    Join { base: u32 },
    /// The service's clock (µs since the Unix epoch) from this point of
    /// the order on: the time the server sees until the next tick, and the
    /// only instants a wait's timeout expires at. The key names the
    /// service (client 0, port 0, the service's port).
    Tick { at_us: u64 },
    /// The client reset the connection (a service with safe delivery): no
    /// chunk of it follows; the server's next read of it fails with
    /// `ECONNRESET` here, whatever bytes beyond the last chunk its kernel
    /// holds (not every replica got them: no server reads them).
    Reset,
}

impl Kind {
    /// For an accept or a join: the client's stream offset the new
    /// connection's first byte has (0 for an accept, `base` for a join).
    pub fn stream_base(&self) -> Option<u32> {
        match *self {
            Kind::Accept { .. } => Some(0),
            Kind::Join { base } => Some(base),
            Kind::Data { .. } | Kind::Tick { .. } | Kind::Reset => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ev {
    pub seq: u64,
    pub key: Key,
    pub kind: Kind,
}

/// Size of one record on the agent → shim socket.
pub const RECORD: usize = 24;

/// One record on the agent → shim socket: a numbered event of the order,
/// or a question about the shim's position in it (not part of the order:
/// no number of its own, never a hole).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    Event(Ev),
    /// How far has the server got? Answered `P <id> <last> <queued>\n`
    /// from the shim's next wait (`epoll_wait`, `poll`, `select`).
    Query {
        id: u64,
    },
    /// The agent holds this server's input (`on`: a join, until the
    /// server's state is proven) or no longer does: meanwhile a connection
    /// whose accept event has not come is not handed out unordered (its
    /// event is on its way, held).
    Hold {
        on: bool,
    },
}

impl From<Ev> for Record {
    fn from(ev: Ev) -> Record {
        Record::Event(ev)
    }
}

const KIND_ACCEPT: u8 = 1;
const KIND_DATA: u8 = 2;
const KIND_JOIN: u8 = 3;
const KIND_QUERY: u8 = 4;
const KIND_HOLD: u8 = 5;
const KIND_TICK: u8 = 6;
const KIND_RESET: u8 = 8;

/// `seq` u64 LE, client IPv4 (network order), cport u16 LE, vport u16 LE,
/// kind u8, flags u8, 2 bytes zero, end u32 LE. Kinds: 1 accept (`end`:
/// the client's ISN when flags is 1; 0 and flags 0 where it is not
/// known), 2 data (`end`: the chunk's end), 3 join (`end`: the base
/// offset), 4 position query (`seq`: the query's id; every other field 0),
/// 5 hold (flags 1: the agent holds the input, 0: it no longer does), 6
/// clock tick (bytes 17..24: the time, 56 bits of µs LE; the key: client
/// 0, port 0, the service's port), 8 the client's reset (safe delivery;
/// `end` 0). (Kind 7, the hello, never travels on
/// the socket: `ftnet run` passes it in the environment, see
/// [`crate::Hello::from_hex`].)
pub fn encode(rec: &Record) -> [u8; RECORD] {
    let mut b = [0u8; RECORD];
    let ev = match *rec {
        Record::Query { id } => {
            b[0..8].copy_from_slice(&id.to_le_bytes());
            b[16] = KIND_QUERY;
            return b;
        }
        Record::Hold { on } => {
            b[16] = KIND_HOLD;
            b[17] = u8::from(on);
            return b;
        }
        Record::Event(ev) => ev,
    };
    b[0..8].copy_from_slice(&ev.seq.to_le_bytes());
    b[8..12].copy_from_slice(&ev.key.client.to_be_bytes());
    b[12..14].copy_from_slice(&ev.key.cport.to_le_bytes());
    b[14..16].copy_from_slice(&ev.key.vport.to_le_bytes());
    let (k, end) = match ev.kind {
        Kind::Accept { isn } => {
            b[17] = u8::from(isn.is_some());
            (KIND_ACCEPT, isn.unwrap_or(0))
        }
        Kind::Data { end } => (KIND_DATA, end),
        Kind::Join { base } => (KIND_JOIN, base),
        Kind::Reset => (KIND_RESET, 0),
        Kind::Tick { at_us } => {
            b[16] = KIND_TICK;
            b[17..24].copy_from_slice(&at_us.to_le_bytes()[..7]);
            return b;
        }
    };
    b[16] = k;
    b[20..24].copy_from_slice(&end.to_le_bytes());
    b
}

/// The record in `b`; `None` for an unknown kind. Like the padding, the
/// fields a kind does not use are not checked (`end` of an accept, all
/// but `seq` of a query).
pub fn decode(b: &[u8; RECORD]) -> Option<Record> {
    let u16le = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
    let end = u32::from_le_bytes([b[20], b[21], b[22], b[23]]);
    let mut seq = [0u8; 8];
    seq.copy_from_slice(&b[0..8]);
    let seq = u64::from_le_bytes(seq);
    let kind = match b[16] {
        KIND_ACCEPT => Kind::Accept {
            isn: (b[17] == 1).then_some(end),
        },
        KIND_DATA => Kind::Data { end },
        KIND_JOIN => Kind::Join { base: end },
        KIND_RESET => Kind::Reset,
        KIND_TICK => {
            let mut t = [0u8; 8];
            t[..7].copy_from_slice(&b[17..24]);
            Kind::Tick {
                at_us: u64::from_le_bytes(t),
            }
        }
        KIND_QUERY => return Some(Record::Query { id: seq }),
        KIND_HOLD => return Some(Record::Hold { on: b[17] == 1 }),
        _ => return None,
    };
    Some(Record::Event(Ev {
        seq,
        key: Key {
            client: u32::from_be_bytes([b[8], b[9], b[10], b[11]]),
            cport: u16le(12),
            vport: u16le(14),
        },
        kind,
    }))
}

/// The received part of the router's order that the server has not consumed.
///
/// A connection is named by its key and its *generation*: the number of
/// the accept (or join) event that opened it. A key has more than one
/// connection at a time when a client resets a connection and reconnects
/// from the same port before this server closed the first one (a replica
/// that lags, or one whose server simply has not read the reset yet): the
/// new accept takes its place in the order, and each event belongs to the
/// latest connection of its key opened before it.
#[derive(Debug, Default)]
pub struct Order {
    queue: VecDeque<Ev>,
    /// How many events of each key `queue` holds (a key's entry is gone at
    /// 0): asked per pending connection at every wait, which a scan of a
    /// long queue (a joiner catching up) made quadratic.
    queued: HashMap<Key, usize>,
    /// Connections the server closed (with their client's ISN where
    /// known): later events for them are dropped (they may still be on
    /// their way when the close happens), and the same accept said again
    /// is no new connection.
    closed: HashMap<Key, Option<u32>>,
    closed_fifo: VecDeque<Key>,
    last_seq: Option<u64>,
    /// The newest connection of each key accepted in the order and not
    /// closed.
    open: HashMap<Key, Open>,
    /// Older connections of a key whose newest is in `open` (or was
    /// closed first), not closed yet by the server: their generations,
    /// ascending.
    older: HashMap<Key, Vec<u64>>,
    /// An event other than a clock tick was consumed: the input began.
    input_began: bool,
}

#[derive(Debug, Clone, Copy)]
struct Open {
    /// The number of its accept (or join) event.
    gen: u64,
    /// The client's ISN, where the agent knew it.
    isn: Option<u32>,
    /// The end of its last chunk (none before the first).
    end: Option<u32>,
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
            Kind::Accept { .. } | Kind::Join { .. } => {
                let isn = match ev.kind {
                    Kind::Accept { isn } => isn,
                    _ => None,
                };
                // The same connection said again: the same client ISN, or
                // one side of the comparison unknown (a join names no ISN:
                // a join of a connection this replica already has).
                let same = |known: Option<u32>| match (known, isn) {
                    (Some(a), Some(b)) => a == b,
                    _ => true,
                };
                if let Some(o) = self.open.get(&ev.key) {
                    if same(o.isn) {
                        return Ok(());
                    }
                    // A new connection of a key whose older one this
                    // server still has: both live, each with its events.
                    self.older.entry(ev.key).or_default().push(o.gen);
                } else if let Some(&c) = self.closed.get(&ev.key) {
                    if isn.is_some() && c == isn {
                        // The accept of a connection already closed here.
                        return Ok(());
                    }
                    // Port reuse: a new connection.
                    self.closed.remove(&ev.key);
                    self.closed_fifo.retain(|k| *k != ev.key);
                }
                // A joined connection has no chunk ending at or before its
                // base: the router's stream to it starts there.
                let end = match ev.kind {
                    Kind::Join { base } => Some(base),
                    _ => None,
                };
                self.open.insert(
                    ev.key,
                    Open {
                        gen: ev.seq,
                        isn,
                        end,
                    },
                );
            }
            Kind::Data { end } => {
                // Only chunks of connections accepted (or joined) in the
                // order and not closed: a late chunk of a closed one, or one
                // whose accept this shim never got (it started late; its
                // server has no such connection in the order), could never
                // be consumed, and would count as unconsumed input forever.
                let Some(o) = self.open.get_mut(&ev.key) else {
                    return Ok(());
                };
                if o.end.is_some_and(|p| (end.wrapping_sub(p) as i32) <= 0) {
                    return Ok(());
                }
                o.end = Some(end);
            }
            // The clock: no connection's.
            Kind::Tick { .. } => {}
            // The end of a connection's input: like a chunk, only of one
            // accepted in the order and not closed.
            Kind::Reset => {
                if !self.open.contains_key(&ev.key) {
                    return Ok(());
                }
            }
        }
        self.queue.push_back(ev);
        *self.queued.entry(ev.key).or_default() += 1;
        Ok(())
    }

    /// One event of `key` left the queue.
    fn unqueued(&mut self, key: &Key) {
        if let Some(n) = self.queued.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                self.queued.remove(key);
            }
        }
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
            if let Some(e) = self.queue.remove(i) {
                self.unqueued(&e.key);
                self.input_began |= !matches!(e.kind, Kind::Tick { .. });
            }
        }
    }

    /// Has the server consumed an event other than a tick (an accept, a
    /// join, a chunk)? Before that, ticks do not move its clock.
    pub fn input_began(&self) -> bool {
        self.input_began
    }

    /// The received events, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Ev> {
        self.queue.iter()
    }

    /// The queued event after accept (or join) `e` of the same key is the
    /// client's reset: the connection ended before any input (a later
    /// accept of the key, port reuse, is not).
    pub fn reset_before_input(&self, e: &Ev) -> bool {
        e.kind.stream_base().is_some()
            && self
                .queue
                .iter()
                .find(|x| x.key == e.key && x.seq > e.seq)
                .is_some_and(|x| matches!(x.kind, Kind::Reset))
    }

    /// The connection (generation) event `e` belongs to: an accept or a
    /// join opens its own; a chunk belongs to the latest connection of its
    /// key opened before it.
    pub fn gen_of(&self, e: &Ev) -> Option<u64> {
        if e.kind.stream_base().is_some() {
            return Some(e.seq);
        }
        self.gens(&e.key).filter(|g| *g < e.seq).max()
    }

    /// The live connections (generations) of `key`, older first.
    fn gens(&self, key: &Key) -> impl Iterator<Item = u64> + '_ {
        let older = self.older.get(key).into_iter().flatten().copied();
        older.chain(self.open.get(key).map(|o| o.gen))
    }

    /// Does the server still have events pending for connection `gen` of
    /// `key`?
    pub fn pending_for(&self, key: &Key, gen: u64) -> bool {
        self.pending_for_key(key)
            && self
                .queue
                .iter()
                .any(|e| e.key == *key && self.gen_of(e) == Some(gen))
    }

    /// Does the server still have events pending for any connection of
    /// `key` (its accept among them)?
    pub fn pending_for_key(&self, key: &Key) -> bool {
        self.queued.contains_key(key)
    }

    /// The server closed connection `gen` of `key`: forget its pending
    /// events and drop late ones (those of a later connection of the key
    /// stay).
    pub fn close(&mut self, key: Key, gen: u64) {
        let next = self.gens(&key).filter(|g| *g > gen).min();
        let upto = next.unwrap_or(u64::MAX);
        let before = self.queue.len();
        self.queue
            .retain(|e| e.key != key || e.seq < gen || e.seq >= upto);
        for _ in self.queue.len()..before {
            self.unqueued(&key);
        }
        if let Some(v) = self.older.get_mut(&key) {
            v.retain(|g| *g != gen);
            if v.is_empty() {
                self.older.remove(&key);
            }
        }
        let Some(o) = self.open.get(&key).filter(|o| o.gen == gen).copied() else {
            return;
        };
        self.open.remove(&key);
        if self.closed.insert(key, o.isn).is_none() {
            self.closed_fifo.push_back(key);
            if self.closed_fifo.len() > CLOSED_MAX {
                if let Some(old) = self.closed_fifo.pop_front() {
                    self.closed.remove(&old);
                }
            }
        }
    }

    /// The received events the server has not consumed.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// The number of the last event received (none yet: `None`).
    pub fn last_seq(&self) -> Option<u64> {
        self.last_seq
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

    /// An accept whose client ISN the agent did not say.
    const ACC: Kind = Kind::Accept { isn: None };

    fn ev(seq: u64, key: Key, kind: Kind) -> Ev {
        Ev { seq, key, kind }
    }

    /// The agent and the shim must agree on these bytes (the agent's
    /// encoder is tested against the same vector).
    #[test]
    fn record_format_is_fixed() {
        let e = ev(0x0102_0304_0506_0708, A, Kind::Data { end: 0xaabb_ccdd });
        let b = encode(&e.into());
        assert_eq!(
            b,
            [
                8, 7, 6, 5, 4, 3, 2, 1, 0xc6, 0x12, 0x01, 0x02, 0x40, 0x9c, 0xeb, 0x18, 2, 0, 0, 0,
                0xdd, 0xcc, 0xbb, 0xaa
            ]
        );
        assert_eq!(decode(&b), Some(Record::Event(e)));
        let mut bad = b;
        bad[16] = 9;
        assert_eq!(decode(&bad), None);
        // A clock tick (the agent's encoder is tested against these bytes).
        let t = ev(
            5,
            Key {
                client: 0,
                cport: 0,
                vport: 6379,
            },
            Kind::Tick {
                at_us: 0x0012_3456_789a_bcde,
            },
        );
        let b = encode(&t.into());
        assert_eq!(
            b,
            [
                5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xeb, 0x18, 6, 0xde, 0xbc, 0x9a, 0x78,
                0x56, 0x34, 0x12
            ]
        );
        assert_eq!(decode(&b), Some(Record::Event(t)));
    }

    #[test]
    fn gaps_are_refused() {
        let mut o = Order::default();
        assert!(o.push(ev(7, A, ACC)).is_ok(), "the first number may be any");
        assert!(o.push(ev(8, A, Kind::Data { end: 5 })).is_ok());
        assert_eq!(
            o.push(ev(10, B, ACC)),
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
        o.push(ev(u64::MAX, A, ACC)).unwrap();
        assert_eq!(
            o.push(ev(0, A, Kind::Data { end: u32::MAX })),
            Err(Gap {
                expected: u64::MAX,
                got: 0
            })
        );
        assert!(o.push(ev(u64::MAX, A, Kind::Data { end: 1 })).is_err());
        let mut o = Order::default();
        o.push(ev(u64::MAX - 2, A, ACC)).unwrap();
        o.push(ev(u64::MAX - 1, A, Kind::Data { end: u32::MAX }))
            .unwrap();
        o.push(ev(u64::MAX, A, Kind::Data { end: 0 })).unwrap();
        assert_eq!(o.len(), 3, "an end past 2^32 wraps as a stream offset");
        let b = encode(&ev(u64::MAX, B, Kind::Data { end: u32::MAX }).into());
        assert!(matches!(decode(&b), Some(Record::Event(e)) if e.seq == u64::MAX));
        let b = encode(&Record::Query { id: u64::MAX });
        assert_eq!(decode(&b), Some(Record::Query { id: u64::MAX }));
    }

    /// The per-key count behind `pending_for_key` agrees with the queue
    /// through pushes, consumption (in and out of order), closes and late
    /// events dropped; and it answers at once with a long queue (a joiner
    /// catching up asks it per pending connection at every wait).
    #[test]
    fn pending_for_key_follows_the_queue() {
        let agree = |o: &Order| {
            for k in [A, B] {
                assert_eq!(
                    o.pending_for_key(&k),
                    o.iter().any(|e| e.key == k),
                    "{k:?} in {:?}",
                    o.iter().collect::<Vec<_>>()
                );
            }
        };
        let mut o = Order::default();
        o.push(ev(1, A, ACC)).unwrap();
        o.push(ev(2, B, ACC)).unwrap();
        o.push(ev(3, A, Kind::Data { end: 4 })).unwrap();
        agree(&o);
        o.consumed(2);
        agree(&o);
        o.consumed(1);
        o.consumed(1); // twice: no effect
        agree(&o);
        o.push(ev(4, B, Kind::Data { end: 9 })).unwrap();
        o.push(ev(5, B, Kind::Data { end: 12 })).unwrap();
        agree(&o);
        o.close(B, 2);
        agree(&o);
        assert!(!o.pending_for_key(&B) && o.pending_for_key(&A));
        o.push(ev(6, B, Kind::Data { end: 20 })).unwrap(); // late: dropped
        agree(&o);
        o.consumed(3);
        agree(&o);
        assert!(o.is_empty() && o.queued.is_empty());
        // 200,000 events queued: 100,000 asks take no scan of them.
        for i in 0..200_000u64 {
            let end = u32::try_from(i % 1_000_000).unwrap() + 100;
            o.push(ev(7 + i, A, if i == 0 { ACC } else { Kind::Data { end } }))
                .unwrap();
        }
        let t = std::time::Instant::now();
        for _ in 0..100_000 {
            assert!(!o.pending_for_key(&B));
        }
        assert!(
            t.elapsed() < std::time::Duration::from_millis(500),
            "{:?}",
            t.elapsed()
        );
    }

    /// Passing over a connection the server does not read, and its events
    /// coming back in their place when it reads again.
    #[test]
    fn head_skips_ineligible_and_keeps_them() {
        let mut o = Order::default();
        o.push(ev(1, A, ACC)).unwrap();
        o.push(ev(2, B, ACC)).unwrap();
        o.consumed(1);
        o.consumed(2);
        o.push(ev(3, A, Kind::Data { end: 10 })).unwrap();
        o.push(ev(4, B, Kind::Data { end: 3 })).unwrap();
        o.push(ev(5, A, Kind::Data { end: 20 })).unwrap();
        assert_eq!(o.head(|_| true).map(|e| e.seq), Some(3));
        assert_eq!(o.head(|e| e.key != A).map(|e| e.seq), Some(4));
        o.consumed(4);
        assert_eq!(o.head(|e| e.key != A), None);
        assert_eq!(o.head(|_| true).map(|e| e.seq), Some(3));
        assert!(o.pending_for_key(&A) && !o.pending_for_key(&B));
        assert!(o.pending_for(&A, 1) && !o.pending_for(&B, 2));
    }

    /// What a router that took over repeats is dropped, the same way on
    /// every replica: a second Accept of an open connection, a chunk that
    /// ends at or before an earlier one (offsets wrap at 2^32).
    #[test]
    fn repeated_accepts_and_chunks_are_dropped() {
        let mut o = Order::default();
        o.push(ev(1, A, ACC)).unwrap();
        o.push(ev(2, A, Kind::Data { end: 0xffff_fff0 })).unwrap();
        o.push(ev(3, A, ACC)).unwrap();
        o.push(ev(4, A, Kind::Data { end: 0xffff_ff00 })).unwrap();
        o.push(ev(5, A, Kind::Data { end: 0xffff_fff0 })).unwrap();
        o.push(ev(6, A, Kind::Data { end: 16 })).unwrap();
        let seqs: Vec<u64> = o.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, vec![1, 2, 6]);
        o.close(A, 1);
        o.push(ev(7, A, ACC)).unwrap();
        o.push(ev(8, A, Kind::Data { end: 3 })).unwrap();
        assert_eq!(o.len(), 2, "a reused key starts afresh");
    }

    #[test]
    fn closed_connections_drop_late_events_until_reused() {
        let mut o = Order::default();
        o.push(ev(1, A, ACC)).unwrap();
        o.push(ev(2, A, Kind::Data { end: 1 })).unwrap();
        o.close(A, 1);
        assert!(o.is_empty());
        o.push(ev(3, A, Kind::Data { end: 2 })).unwrap();
        assert!(o.is_empty(), "late event of a closed connection dropped");
        o.push(ev(4, A, ACC)).unwrap();
        o.push(ev(5, A, Kind::Data { end: 1 })).unwrap();
        assert_eq!(o.len(), 2, "the port was reused by a new connection");
    }

    /// Kinds 3 (join), 4 (position query) and 5 (hold) on the wire, both ways, and
    /// fixed bytes the agent's encoder must produce.
    #[test]
    fn join_and_query_records_are_fixed() {
        let j = ev(0x0102_0304_0506_0708, A, Kind::Join { base: 0xaabb_ccdd });
        let b = encode(&j.into());
        assert_eq!(
            b,
            [
                8, 7, 6, 5, 4, 3, 2, 1, 0xc6, 0x12, 0x01, 0x02, 0x40, 0x9c, 0xeb, 0x18, 3, 0, 0, 0,
                0xdd, 0xcc, 0xbb, 0xaa
            ]
        );
        assert_eq!(decode(&b), Some(Record::Event(j)));
        let q = Record::Query {
            id: 0x1122_3344_5566_7788,
        };
        let b = encode(&q);
        assert_eq!(
            b,
            [
                0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0,
                0, 0, 0, 0
            ]
        );
        assert_eq!(decode(&b), Some(q));
        // Kind 5, hold: the agent's `shim_hold` bytes.
        for on in [true, false] {
            let h = encode(&Record::Hold { on });
            let mut want = [0u8; RECORD];
            want[16] = 5;
            want[17] = u8::from(on);
            assert_eq!(h, want);
            assert_eq!(decode(&h), Some(Record::Hold { on }));
        }
        for k in [0u8, 7, 9, 0xff] {
            let mut bad = b;
            bad[16] = k;
            assert_eq!(decode(&bad), None);
        }
    }

    /// A join of a connection this replica already has is dropped, and
    /// numbering goes on from it (no hole); a join of one it does not have
    /// opens it at its base: chunks ending at or before the base are
    /// dropped, later ones kept.
    #[test]
    fn joins_open_new_connections_and_are_dropped_for_open_ones() {
        let mut o = Order::default();
        o.push(ev(1, A, ACC)).unwrap();
        o.push(ev(2, A, Kind::Data { end: 5 })).unwrap();
        o.push(ev(3, A, Kind::Join { base: 2 })).unwrap();
        o.push(ev(4, A, Kind::Data { end: 9 })).unwrap();
        o.push(ev(5, B, Kind::Join { base: 100 })).unwrap();
        o.push(ev(6, B, Kind::Data { end: 100 })).unwrap();
        o.push(ev(7, B, Kind::Data { end: 110 })).unwrap();
        assert_eq!(
            o.push(ev(9, B, Kind::Data { end: 120 })),
            Err(Gap {
                expected: 8,
                got: 9
            })
        );
        let seqs: Vec<u64> = o.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, vec![1, 2, 4, 5, 7]);
        assert_eq!(o.last_seq(), Some(7));
        o.close(B, 5);
        o.push(ev(8, B, Kind::Join { base: 7 })).unwrap();
        assert_eq!(o.len(), 4, "a closed key joined again is a new connection");
    }

    /// A chunk of a connection the order never accepted (this shim started
    /// after its accept) is dropped: it could never be consumed, and it must
    /// not make a later join of that key look like a repeat.
    #[test]
    fn chunks_without_an_accept_are_dropped() {
        let mut o = Order::default();
        o.push(ev(1, A, Kind::Data { end: 5 })).unwrap();
        assert!(o.is_empty());
        o.push(ev(2, A, Kind::Join { base: 5 })).unwrap();
        o.push(ev(3, A, Kind::Data { end: 8 })).unwrap();
        assert_eq!(o.len(), 2);
    }

    /// Two connections of one key at once (the client reset the first and
    /// reconnected from the same port; the server has not closed the
    /// first): each chunk belongs to the latest connection opened before
    /// it, and closing one leaves the other's events.
    #[test]
    fn a_key_reused_while_open_keeps_both_connections_apart() {
        let acc = |isn| Kind::Accept { isn: Some(isn) };
        let mut o = Order::default();
        o.push(ev(1, A, acc(100))).unwrap();
        o.push(ev(2, A, Kind::Data { end: 9 })).unwrap();
        o.push(ev(3, A, acc(100))).unwrap();
        assert_eq!(o.len(), 2, "the same ISN: a repeat");
        o.push(ev(4, A, acc(500))).unwrap();
        o.push(ev(5, A, Kind::Data { end: 4 })).unwrap();
        let seqs: Vec<u64> = o.iter().map(|e| e.seq).collect();
        assert_eq!(
            seqs,
            vec![1, 2, 4, 5],
            "a chunk ending before the old one's is kept"
        );
        let gens: Vec<Option<u64>> = o.iter().map(|e| o.gen_of(e)).collect();
        assert_eq!(gens, vec![Some(1), Some(1), Some(4), Some(4)]);
        o.consumed(1);
        o.close(A, 1);
        let seqs: Vec<u64> = o.iter().map(|e| e.seq).collect();
        assert_eq!(
            seqs,
            vec![4, 5],
            "the old connection's chunk goes, the new one stays"
        );
        assert!(o.pending_for(&A, 4) && !o.pending_for(&A, 1));
        o.consumed(4);
        o.consumed(5);
        o.close(A, 4);
        o.push(ev(6, A, acc(500))).unwrap();
        o.push(ev(7, A, Kind::Data { end: 8 })).unwrap();
        assert!(
            o.is_empty(),
            "a closed connection's accept said again opens nothing"
        );
        o.push(ev(8, A, acc(900))).unwrap();
        assert_eq!(o.len(), 1, "a new ISN opens a new connection");
    }

    /// The accept's ISN on the wire: flagged where known, absent where not.
    #[test]
    fn an_accept_carries_its_isn_when_known() {
        let e = ev(
            1,
            A,
            Kind::Accept {
                isn: Some(0xdead_beef),
            },
        );
        let b = encode(&e.into());
        assert_eq!((b[16], b[17]), (1, 1));
        assert_eq!(b[20..24], 0xdead_beefu32.to_le_bytes());
        assert_eq!(decode(&b), Some(Record::Event(e)));
        let e = ev(1, A, Kind::Accept { isn: Some(0) });
        assert_eq!(decode(&encode(&e.into())), Some(Record::Event(e)));
        let b = encode(&ev(1, A, ACC).into());
        assert_eq!(b[17..24], [0; 7]);
        assert_eq!(decode(&b), Some(Record::Event(ev(1, A, ACC))));
    }
}
