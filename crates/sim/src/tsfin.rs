//! Invariants 8 (the client's TSvals are the router's clock) and 9 (FIN
//! agreement), checked on the packets as the client receives them.
//!
//! What the sim knows for this: each connection's set-up record as the
//! router announced it (`AgentMsg::Established`: router ISN, each replica's
//! ISN, `ts_base`), the evictions it announced (`Event::Evicted`), every
//! FIN a replica sent that reached a live router, mapped into the client's
//! sequence space with the record's ISNs, and every replica RST that did.
//! The router's emission time of a segment is its `Flight::sent_at`: the
//! router (and the one that takes over) runs on the sim's virtual clock.

use ftnet_core::{ConnKey, ConnRecord, Event};
use ftnet_wire::seq::{mod32, SeqNum};
use ftnet_wire::{ipv4, tcp};
use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;

/// One announced connection.
struct Facts {
    rec: ConnRecord,
    /// `key.to_string()`, as `Event::Evicted` names the connection.
    name: String,
    /// Replica → when the router announced its eviction from this
    /// connection, µs.
    left: HashMap<Ipv4Addr, u64>,
    /// Replica → when a RST of its on this connection first reached a live
    /// router, µs. A replica that resets leaves the connection at once
    /// (COSCANet-FT §III-D; the router's leg goes `Aborted`, not live, and
    /// nobody waits for it) while its `Evicted` event waits until another
    /// replica's progress or the detection time confirms the crash. A RST
    /// the router does not accept (RFC 5961: not at the exact sequence
    /// number) leaves it in; the sim does not tell the two apart, which
    /// only makes invariant 9 lenient for a replica that sent one.
    reset: HashMap<Ipv4Addr, u64>,
    /// Replica → each distinct FIN position (client space: the FIN's own
    /// sequence number) that reached a live router, with the first time.
    fins: BTreeMap<Ipv4Addr, Vec<(SeqNum, u64)>>,
    /// Replica → when it joined the open connection (a join, issue 15: the
    /// router announced the record again with its new part); before that
    /// it was not in the connection.
    since: HashMap<Ipv4Addr, u64>,
    /// End of the highest data the client received (client space).
    client_end: Option<SeqNum>,
    /// Every FIN position the client received.
    client_fins: Vec<SeqNum>,
}

impl Facts {
    /// Stream offset of a position (0 = first byte after the SYN).
    fn off(&self, s: SeqNum) -> i64 {
        i64::from(s.diff(SeqNum(self.rec.router_isn).add(1)))
    }

    /// Client-space position of `replica`'s sequence number `s`.
    fn to_client(&self, replica: Ipv4Addr, s: SeqNum) -> Option<SeqNum> {
        let r = self.rec.replicas.iter().find(|r| r.addr == replica)?;
        Some(SeqNum(self.rec.router_isn).add(s.0.wrapping_sub(r.isn)))
    }
}

#[derive(Default)]
pub(crate) struct TsFin {
    conns: HashMap<ConnKey, Facts>,
    /// `Event::Evicted` names connections by string.
    by_name: HashMap<String, ConnKey>,
}

fn parse(data: &[u8]) -> Option<(Ipv4Addr, Ipv4Addr, tcp::Segment<&[u8]>)> {
    let ip = ipv4::Packet::new_checked(data).ok()?;
    if ip.protocol() != ipv4::PROTO_TCP {
        return None;
    }
    let (src, dst) = (ip.src(), ip.dst());
    let hl = ip.header_len();
    let tl = ip.total_len().min(data.len());
    let s = tcp::Segment::new_checked(data.get(hl..tl)?).ok()?;
    Some((src, dst, s))
}

impl TsFin {
    /// A connection's record, as the router announced it to the agents at
    /// `now`. The same connection announced again with a replica whose part
    /// is new (a joiner's leg): from then on that replica is in it afresh,
    /// what its address did before (evicted, reset, a FIN) belongs to the
    /// old leg.
    pub(crate) fn note_record(&mut self, now: u64, record: &ConnRecord) {
        if let Some(f) = self
            .conns
            .get_mut(&record.key)
            .filter(|f| f.rec.router_isn == record.router_isn)
        {
            for r in &record.replicas {
                if !f.rec.replicas.iter().any(|o| o == r) {
                    f.left.remove(&r.addr);
                    f.reset.remove(&r.addr);
                    f.fins.remove(&r.addr);
                    f.since.insert(r.addr, now);
                }
            }
            f.rec = record.clone();
            return;
        }
        let fresh = self
            .conns
            .get(&record.key)
            .is_none_or(|f| f.rec.router_isn != record.router_isn);
        if fresh {
            let name = record.key.to_string();
            self.by_name.insert(name.clone(), record.key);
            self.conns.insert(
                record.key,
                Facts {
                    rec: record.clone(),
                    name,
                    left: HashMap::new(),
                    reset: HashMap::new(),
                    fins: BTreeMap::new(),
                    since: HashMap::new(),
                    client_end: None,
                    client_fins: Vec::new(),
                },
            );
        }
    }

    /// An event the router told the operator at `now`.
    pub(crate) fn note_event(&mut self, now: u64, ev: &Event) {
        match ev {
            // A detached leg (output policy `primary`: its reply differed,
            // it stays for its input) no longer counts for the output, FIN
            // included: as good as gone for invariant 9.
            Event::Evicted { conn, replica, .. }
            | Event::OutputDiffers {
                conn,
                replica,
                follows: Some(_),
                ..
            } => {
                if let Some(f) = self.by_name.get(conn).and_then(|k| self.conns.get_mut(k)) {
                    f.left.entry(*replica).or_insert(now);
                }
            }
            _ => {}
        }
    }

    /// A packet from a replica reached a live router at `now`.
    pub(crate) fn replica_sent(&mut self, now: u64, data: &[u8]) {
        let Some((src, dst, s)) = parse(data) else {
            return;
        };
        if !(s.fin() || s.rst()) || s.syn() {
            return;
        }
        let key = ConnKey {
            client: dst,
            cport: s.dst_port(),
            vip: crate::VIP,
            vport: s.src_port(),
        };
        let Some(f) = self.conns.get_mut(&key) else {
            return;
        };
        if s.rst() {
            f.reset.entry(src).or_insert(now);
            return;
        }
        let end = s.seq().add(ftnet_wire::len32(s.payload_len()));
        let Some(pos) = f.to_client(src, end) else {
            return;
        };
        let v = f.fins.entry(src).or_default();
        if !v.iter().any(|&(p, _)| p == pos) {
            v.push((pos, now));
        }
    }

    /// A packet the router emitted at `sent_at` reaches the client.
    pub(crate) fn client_got(&mut self, sent_at: u64, data: &[u8]) -> Result<(), String> {
        let Some((src, dst, s)) = parse(data) else {
            return Ok(());
        };
        let key = ConnKey {
            client: dst,
            cport: s.dst_port(),
            vip: src,
            vport: s.src_port(),
        };
        let Some(f) = self.conns.get_mut(&key) else {
            // Never announced: a refused connection's RST, the answer to a
            // stray segment. Only the router's RSTs carry no record.
            if let (Some((v, _)), false) = (s.timestamps(), s.rst()) {
                return Err(format!(
                    "invariant 8 (TSval): the client got TSval {v} on {key}, a connection the router never announced: {}",
                    crate::describe(data)
                ));
            }
            return Ok(());
        };
        // Invariant 8 (RFC 7323 §5.5, §4.1; COSCANet-FT §III-D): every
        // TSval towards the client is the router's clock, never a
        // replica's: the connection's TS base plus the router's time in
        // ms when it emitted the segment. A router that takes over adopts
        // the base from the record and runs on the same (virtual) clock,
        // so the values go on where they were; the clock only grows, so
        // the TSvals never decrease, whatever evictions and takeovers
        // happen, on a RST too (RFC 7323 §5.2 exempts a RST from PAWS, but
        // a replica's clock is not the client's to see). RFC 7323 §3.2:
        // once negotiated, every segment but a RST carries the option;
        // without it, none does.
        match (f.rec.ts_base, s.timestamps()) {
            (Some(base), Some((v, _))) => {
                let want = base.wrapping_add(mod32(sent_at / 1000));
                if v != want {
                    return Err(format!(
                        "invariant 8 (TSval): the client got TSval {v} on {}, sent at {sent_at} us; the router's clock then was ts_base {base} + {} ms = {want} (off by {}): {}",
                        f.name,
                        sent_at / 1000,
                        SeqNum(v).diff(SeqNum(want)),
                        crate::describe(data)
                    ));
                }
            }
            (Some(_), None) if !s.rst() => {
                return Err(format!(
                    "invariant 8 (TSval): a segment without the timestamps option reached the client on {}, which negotiated them: {}",
                    f.name,
                    crate::describe(data)
                ));
            }
            (None, Some((v, _))) => {
                return Err(format!(
                    "invariant 8 (TSval): the client got TSval {v} on {}, which did not negotiate timestamps: {}",
                    f.name,
                    crate::describe(data)
                ));
            }
            _ => {}
        }
        if s.rst() || s.syn() {
            return Ok(());
        }
        let end = s.seq().add(ftnet_wire::len32(s.payload_len()));
        if s.payload_len() > 0 && f.client_end.is_none_or(|e| end.is_after(e)) {
            f.client_end = Some(end);
        }
        if !s.fin() {
            return Ok(());
        }
        if !f.client_fins.contains(&end) {
            f.client_fins.push(end);
        }
        // Invariant 9 (COSCANet-FT §III-D): a FIN reaches the client only
        // where every replica still in the connection when the router sent
        // it (not evicted, no RST of its received by then) had sent its own
        // FIN, and that FIN had reached the router. With output voting the router also waits
        // for every live replica (a majority decides where; one that
        // closes elsewhere is evicted), so the same holds.
        for r in &f.rec.replicas {
            let gone = |m: &HashMap<Ipv4Addr, u64>| m.get(&r.addr).is_some_and(|&t| t <= sent_at);
            let not_yet = f.since.get(&r.addr).is_some_and(|&t| t > sent_at);
            if gone(&f.left) || gone(&f.reset) || not_yet {
                continue;
            }
            let mine: Vec<i64> = f
                .fins
                .get(&r.addr)
                .map(|v| {
                    v.iter()
                        .filter(|&&(_, t)| t <= sent_at)
                        .map(|&(p, _)| f.off(p))
                        .collect()
                })
                .unwrap_or_default();
            if !mine.contains(&f.off(end)) {
                return Err(format!(
                    "invariant 9 (FIN agreement): a FIN at stream offset {} reached the client on {} (sent at {sent_at} us), but replica {}, still in the connection, had sent {}",
                    f.off(end),
                    f.name,
                    r.addr,
                    if mine.is_empty() {
                        "no FIN".to_string()
                    } else {
                        format!("its FIN at offset(s) {mine:?}")
                    }
                ));
            }
        }
        Ok(())
    }

    /// Invariant 9, at the end: a replica whose FIN came before the end of
    /// what the client got (data beyond it, or the client's FIN elsewhere)
    /// closed early, and must have been evicted.
    pub(crate) fn final_check(&self) -> Result<(), String> {
        let mut keys: Vec<&ConnKey> = self.conns.keys().collect();
        keys.sort();
        for k in keys {
            let f = &self.conns[k];
            for (addr, v) in &f.fins {
                for &(p, _) in v {
                    let beyond = f.client_end.is_some_and(|e| e.is_after(p));
                    let elsewhere = f.client_fins.iter().any(|&c| c != p);
                    let left = f.left.contains_key(addr) || f.reset.contains_key(addr);
                    if (beyond || elsewhere) && !left {
                        return Err(format!(
                            "invariant 9 (FIN agreement): replica {addr} sent its FIN at stream offset {} on {}, but the client got {} and the replica was never evicted",
                            f.off(p),
                            f.name,
                            match (f.client_end, f.client_fins.first()) {
                                (_, Some(&c)) if c != p => format!("a FIN at offset {}", f.off(c)),
                                (Some(e), _) => format!("data up to offset {}", f.off(e)),
                                _ => "more".to_string(),
                            }
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}
