//! The fuzz harnesses: one module per target (`fuzz_targets/*.rs` call
//! `run`). Each takes any bytes and must never panic; where the product
//! keeps a bound, the harness checks it after every step (a failed check is
//! a panic, which libFuzzer reports as a crash with the input that made
//! it). Built with overflow checks on (scripts/fuzz.sh), so an arithmetic
//! overflow is a crash too.

/// Reads the fuzzer's bytes as a stream of small choices; past the end,
/// every read is zero (the harness then stops at its next step).
pub struct Bytes<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Bytes<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Bytes { data, at: 0 }
    }

    pub fn done(&self) -> bool {
        self.at >= self.data.len()
    }

    pub fn u8(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    pub fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }

    pub fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }

    /// A payload of 0–47 bytes.
    pub fn payload(&mut self) -> Vec<u8> {
        let n = usize::from(self.u8() % 48);
        self.take(n).to_vec()
    }

    /// At most `max` of the next bytes (fewer at the end).
    pub fn take(&mut self, max: usize) -> &'a [u8] {
        let start = self.at.min(self.data.len());
        let end = (start + max).min(self.data.len());
        self.at = end.max(self.at);
        &self.data[start..end]
    }
}

/// IPv4, TCP (options, SACK blocks, checksums), ICMP and the virtio-net
/// header, on arbitrary bytes.
pub mod wire {
    use ftnet_wire::{icmp, ipv4, tcp, vnet};

    pub fn run(data: &[u8]) {
        if let Ok(h) = vnet::VnetHdr::parse(data) {
            let mut b = [0u8; vnet::LEN];
            h.emit(&mut b);
            assert_eq!(
                vnet::VnetHdr::parse(&b).ok(),
                Some(h),
                "a parsed header emits back to itself"
            );
        }
        let _ = icmp::parse_unreachable(data);
        if let Ok(ip) = ipv4::Packet::new_checked(data) {
            let _ = (
                ip.src(),
                ip.dst(),
                ip.ttl(),
                ip.protocol(),
                ip.verify_checksum(),
            );
            assert!(ip.header_len() <= ip.total_len() && ip.total_len() <= data.len());
            let payload = ip.payload();
            let _ = icmp::parse_unreachable(payload);
            segment(payload, Some((ip.src(), ip.dst())));
        }
        segment(data, None);
    }

    fn segment(b: &[u8], ends: Option<(std::net::Ipv4Addr, std::net::Ipv4Addr)>) {
        let Ok(s) = tcp::Segment::new_checked(b) else {
            return;
        };
        assert!(s.header_len() <= b.len());
        let r = tcp::Repr::parse(&s);
        let _ = (s.mss(), s.wscale(), s.sack_permitted(), s.timestamps());
        let _ = (s.seq_len(), s.payload_len(), s.payload().len());
        for _ in s.options_iter().take(64) {}
        for _ in s.sack_blocks().take(8) {}
        if let Some((src, dst)) = ends {
            let _ = s.verify_checksum(src, dst);
            // What the router emits from a parsed header parses back the
            // same (options it knows).
            let out = r.emit_ipv4(src, dst, s.payload());
            let ip = ipv4::Packet::new_checked(&out[..]).expect("emitted IPv4 parses");
            assert!(ip.verify_checksum());
            let t = tcp::Segment::new_checked(ip.payload()).expect("emitted TCP parses");
            assert!(t.verify_checksum(src, dst), "emitted TCP checksum");
            assert_eq!(tcp::Repr::parse(&t), r, "emit then parse is the identity");
            assert_eq!(t.payload(), s.payload());
        }
    }
}

/// The router core (`ftnet_core::Router`) driven by a sequence of client
/// segments, replica segments (some of them answers to what the router sent
/// that replica), raw packets with any virtio-net header, time steps and
/// control-plane events. Checks after every step: no panic, the table and
/// the half-open queue within their configured bounds, the input logs
/// within theirs, every packet the router emits a well-formed IPv4/TCP
/// packet with correct checksums.
pub mod router {
    use super::Bytes;
    use ftnet_core::{
        Ack, AgentMsg, Config, ConnKey, ConnRecord, Delivery, Instant, Limits, Packet,
        ReplicaSetup, Router, Service, Tie, Voting,
    };
    use ftnet_wire::tcp::{flags, Repr, Segment};
    use ftnet_wire::vnet::{self, VnetHdr};
    use ftnet_wire::{ipv4, SeqNum};
    use std::collections::HashMap;
    use std::net::Ipv4Addr;

    const VIP: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 1);
    const PORTS: [u16; 2] = [7000, 7001];
    const LIMITS: Limits = Limits {
        max_connections: 24,
        max_half_open: 6,
        log_per_connection: 4096,
        log_total: 12288,
    };

    fn replica(i: u8) -> Ipv4Addr {
        Ipv4Addr::new(198, 18, 10 + i % 3, 2)
    }

    fn client(i: u8) -> Ipv4Addr {
        Ipv4Addr::new(198, 18, 1, 2 + i % 3)
    }

    /// What the harness last saw the router send to an address (so that a
    /// replica or client can answer it plausibly).
    #[derive(Clone, Copy)]
    struct Seen {
        src: Ipv4Addr,
        r_src_port: u16,
        r_dst_port: u16,
        seq: u32,
        ack: u32,
        len: u32,
        flags: u8,
        tsval: Option<u32>,
    }

    fn config(b: &mut Bytes) -> Config {
        let mode = b.u8();
        let ack = match mode % 3 {
            0 => Ack::All,
            k => Ack::Log { replicas: k },
        };
        let voting = if mode & 0x10 != 0 {
            Voting::Majority {
                tie: if mode & 0x20 != 0 {
                    Tie::First
                } else {
                    Tie::Reset
                },
            }
        } else if mode & 0x20 != 0 {
            // Without voting the bit picks the output policy.
            Voting::Primary
        } else {
            Voting::Fastest
        };
        let n = 1 + (mode >> 6) % 3;
        let mut c = Config::default();
        c.limits = LIMITS;
        c.sequencer = mode & 0x08 != 0;
        // Clock ticks into the order, as `ftnet router` sends them.
        c.tick = c.sequencer.then(|| std::time::Duration::from_millis(10));
        c.services.push(Service {
            name: "f".into(),
            vip: VIP,
            ports: PORTS.to_vec(),
            replicas: (0..n).map(replica).collect(),
            voting,
            stateless: mode & 0x04 != 0,
            ack,
            delivery: if mode & 0x02 != 0 {
                Delivery::Safe
            } else {
                Delivery::BestEffort
            },
        });
        c
    }

    pub fn run(data: &[u8]) {
        let mut b = Bytes::new(data);
        let cfg = config(&mut b);
        let mut r = Router::new(cfg, [7; 16]);
        let mut now = Instant::from_micros(1_000_000);
        let mut seen: HashMap<Ipv4Addr, Seen> = HashMap::new();
        let mut keys = Vec::new();
        let mut last: Vec<u8> = Vec::new();
        let mut steps = 0;
        while !b.done() && steps < 400 {
            steps += 1;
            match b.u8() % 9 {
                0 | 1 => {
                    let p = from_client(&mut b, &seen);
                    if std::env::var_os("FTNET_FUZZ_TRACE").is_some() {
                        eprintln!("client in: {:02x?}", &p[..p.len().min(40)]);
                    }
                    last.clone_from(&p);
                    r.handle_packet(now, Packet::plain(p));
                }
                2 | 3 => {
                    let p = from_replica(&mut b, &seen);
                    last.clone_from(&p);
                    r.handle_packet(now, Packet::plain(p));
                }
                4 => {
                    let ms = match b.u8() {
                        x @ 0..=199 => u64::from(x),
                        x => u64::from(x - 199) * 1000,
                    };
                    now = now + std::time::Duration::from_millis(ms);
                    if r.poll_timeout().is_some_and(|t| t <= now) {
                        r.handle_timeout(now);
                    }
                }
                5 => {
                    // A packet as it came in from the TUN, mutated from the
                    // last one sent, with a virtio-net header the kernel
                    // could have written (the kernel writes it: it is not
                    // the network's to choose).
                    let mut p = last.clone();
                    let mutated = b.u8() % 4;
                    for _ in 0..mutated {
                        let at = usize::from(b.u16());
                        let v = b.u8();
                        if !p.is_empty() {
                            let n = p.len();
                            p[at % n] = v;
                        }
                    }
                    if b.bool() {
                        let cut = usize::from(b.u16());
                        p.truncate(cut);
                    }
                    // Linux checked the IPv4 header (checksum included)
                    // before it routed the packet to the TUN.
                    if let Ok(mut ip) = ipv4::Packet::new_checked(&mut p[..]) {
                        ip.fill_checksum();
                    }
                    let vnet = kernel_vnet(&mut b, &p, mutated == 0);
                    r.handle_packet(now, Packet { vnet, data: p });
                }
                6 => {
                    let k = usize::from(b.u8());
                    if !keys.is_empty() {
                        let key = keys[k % keys.len()];
                        r.record_stored(now, key);
                    }
                }
                7 => {
                    let who = replica(b.u8());
                    match b.u8() % 4 {
                        0 => {
                            r.agent_registered(who);
                        }
                        1 => {
                            r.replica_failed(now, who);
                        }
                        2 => {
                            r.host_lost(now, who);
                        }
                        _ if b.bool() => {
                            r.enable_replica(who, None);
                        }
                        _ => {
                            // A router that took over: an agent's record of
                            // a connection set up before.
                            let rec = record(&mut b);
                            r.adopt(now, who, &rec);
                        }
                    }
                }
                _ => {
                    let raw = b.take(80).to_vec();
                    r.handle_packet(now, Packet::plain(raw));
                }
            }
            drain(&mut r, &mut seen, &mut keys);
            check(&r);
        }
        if std::env::var_os("FTNET_FUZZ_TRACE").is_some() {
            let c = r.counters();
            eprintln!(
                "stats: opened {} client_bytes_in {} client_bytes_out {} log_bytes {} adopted {}",
                c.connections_opened,
                c.client_bytes_in,
                c.client_bytes_out,
                c.log_bytes,
                c.connections_adopted
            );
        }
    }

    /// A connection record as an agent hands it to a router that took over.
    fn record(b: &mut Bytes) -> ConnRecord {
        let n = 1 + b.u8() % 3;
        ConnRecord {
            key: ConnKey {
                client: client(b.u8()),
                cport: 40000 + u16::from(b.u8() % 3),
                vip: VIP,
                vport: PORTS[usize::from(b.u8() % 2)],
            },
            client_isn: b.u32(),
            router_isn: b.u32(),
            wscale_out: b.u8() % 16,
            ts_base: b.bool().then(|| b.u32()),
            client_mss: b.u16(),
            mss_out: b.u16(),
            replicas: (0..n)
                .map(|i| ReplicaSetup {
                    addr: replica(i),
                    isn: b.u32(),
                    wscale: b.u8() % 16,
                })
                .collect(),
            client_wscale: b.bool().then(|| b.u8() % 16),
            accepted: b.bool(),
            input_end: b.bool().then(|| b.u32()),
            snd_una: b.bool().then(|| b.u32()),
            fin_received: b.bool(),
        }
    }

    /// A virtio-net header as Linux writes it for a packet read from a TUN
    /// (`virtio_net_hdr_from_skb`): none; checksum validated (only for an
    /// intact packet); or checksum left partial, at the TCP header, maybe
    /// with TCP GSO (a segment size of at least 1).
    fn kernel_vnet(b: &mut Bytes, p: &[u8], intact: bool) -> VnetHdr {
        let ihl = p.first().map_or(20, |v| u16::from(v & 0x0f) * 4);
        match b.u8() % 4 {
            0 => VnetHdr::NONE,
            1 if intact => VnetHdr {
                flags: vnet::F_DATA_VALID,
                ..VnetHdr::NONE
            },
            k => {
                let gso = k == 3;
                VnetHdr {
                    flags: vnet::F_NEEDS_CSUM,
                    gso_type: if gso { vnet::GSO_TCPV4 } else { vnet::GSO_NONE },
                    hdr_len: if gso { ihl + 20 } else { 0 },
                    gso_size: if gso { 1 + b.u16() % 1500 } else { 0 },
                    csum_start: ihl,
                    csum_offset: 16,
                }
            }
        }
    }

    fn from_client(b: &mut Bytes, seen: &HashMap<Ipv4Addr, Seen>) -> Vec<u8> {
        let src = client(b.u8());
        let cport = 40000 + u16::from(b.u8() % 3);
        let dport = PORTS[usize::from(b.u8() % 2)];
        let fl = b.u8();
        let answer = seen.get(&src).filter(|_| fl & 0x80 == 0).copied();
        let (seq, ack) = match answer {
            // Go on from what the router last said to this client.
            Some(s) => (
                s.ack.wrapping_add(u32::from(b.u8() % 4)),
                s.seq
                    .wrapping_add(s.len)
                    .wrapping_add(u32::from(s.flags & (flags::SYN | flags::FIN) != 0)),
            ),
            None => (b.u32(), b.u32()),
        };
        let mut r = Repr::new(
            answer.map_or(cport, |s| s.r_dst_port),
            answer.map_or(dport, |s| s.r_src_port),
            SeqNum(seq),
            SeqNum(ack),
            fl & 0x3f,
            b.u16(),
        );
        options(b, &mut r, answer.and_then(|s| s.tsval));
        let payload = b.payload();
        r.emit_ipv4(src, VIP, &payload)
    }

    fn from_replica(b: &mut Bytes, seen: &HashMap<Ipv4Addr, Seen>) -> Vec<u8> {
        let src = replica(b.u8());
        let fl = b.u8();
        let answer = seen.get(&src).filter(|_| fl & 0x80 == 0).copied();
        let Some(s) = answer else {
            let mut r = Repr::new(
                b.u16(),
                b.u16(),
                SeqNum(b.u32()),
                SeqNum(b.u32()),
                fl,
                b.u16(),
            );
            options(b, &mut r, None);
            let payload = b.payload();
            return r.emit_ipv4(src, client(b.u8()), &payload);
        };
        // Answer what the router last sent this replica: a SYN with a
        // SYN-ACK, anything else with an ACK of it (and maybe data).
        let syn = s.flags & flags::SYN != 0;
        let seq = if syn { b.u32() } else { s.ack };
        let ack = s
            .seq
            .wrapping_add(s.len)
            .wrapping_add(u32::from(s.flags & (flags::SYN | flags::FIN) != 0));
        let mut f = flags::ACK
            | if syn {
                flags::SYN
            } else {
                fl & (flags::FIN | flags::PSH | flags::RST)
            };
        if fl & 0x40 != 0 {
            f = fl & 0x3f;
        }
        let mut r = Repr::new(
            s.r_dst_port,
            s.r_src_port,
            SeqNum(seq),
            SeqNum(ack),
            f,
            b.u16(),
        );
        options(b, &mut r, s.tsval);
        let payload = if syn { Vec::new() } else { b.payload() };
        r.emit_ipv4(src, s.src, &payload)
    }

    fn options(b: &mut Bytes, r: &mut Repr, echo: Option<u32>) {
        let o = b.u8();
        if o & 1 != 0 {
            r.mss = Some(b.u16());
        }
        if o & 2 != 0 {
            r.wscale = Some(b.u8() % 16);
        }
        if o & 4 != 0 {
            r.sack_permitted = true;
        }
        if o & 8 != 0 {
            r.timestamps = Some((b.u32(), echo.unwrap_or_else(|| b.u32())));
        }
    }

    fn drain(r: &mut Router, seen: &mut HashMap<Ipv4Addr, Seen>, keys: &mut Vec<ConnKey>) {
        while let Some(p) = r.poll_transmit() {
            let ip = ipv4::Packet::new_checked(&p.data[..]).expect("the router emits IPv4");
            assert!(
                ip.verify_checksum(),
                "IPv4 checksum of an emitted packet: {:02x?}",
                &p.data[..p.data.len().min(40)]
            );
            if ip.protocol() == ipv4::PROTO_ICMP {
                // A rebuilt connection's prompt (RFC 6069): a whole,
                // checksummed destination-unreachable message about a TCP
                // segment, from a VIP or a client to the other side.
                assert_eq!(
                    ftnet_wire::checksum::complete(ip.payload(), 0),
                    0,
                    "ICMP checksum of an emitted message"
                );
                let u = ftnet_wire::icmp::parse_unreachable(ip.payload())
                    .expect("the router emits well-formed ICMP")
                    .expect("the router emits only destination unreachable about TCP");
                assert_eq!(
                    u.dst,
                    ip.src(),
                    "a prompt comes from the quoted segment's destination"
                );
                assert_eq!(u.src, ip.dst(), "and goes to its source");
                continue;
            }
            let t = Segment::new_checked(ip.payload()).expect("the router emits TCP");
            // A header the kernel takes (else the write fails, and the
            // packet is lost).
            let h = p.vnet;
            assert!(
                h.flags & !(vnet::F_NEEDS_CSUM | vnet::F_DATA_VALID) == 0
                    && matches!(
                        h.gso_type & !vnet::GSO_ECN,
                        vnet::GSO_NONE | vnet::GSO_TCPV4
                    )
                    && (h.gso_type == vnet::GSO_NONE
                        || (h.gso_size > 0 && h.flags & vnet::F_NEEDS_CSUM != 0)),
                "the router emits a virtio-net header the kernel refuses: {h:?}"
            );
            // A packet passed on with its checksum left to the kernel
            // (virtio-net NEEDS_CSUM) carries only the pseudo-header sum.
            assert!(
                p.vnet.flags & vnet::F_NEEDS_CSUM != 0 || t.verify_checksum(ip.src(), ip.dst()),
                "TCP checksum of an emitted packet: {:?} {:?}",
                p.vnet,
                Repr::parse(&t)
            );
            seen.insert(
                ip.dst(),
                Seen {
                    src: ip.src(),
                    r_src_port: t.src_port(),
                    r_dst_port: t.dst_port(),
                    seq: t.seq().0,
                    ack: t.ack().0,
                    len: u32::try_from(t.payload_len()).unwrap_or(0),
                    flags: t.flags(),
                    tsval: t.timestamps().map(|(v, _)| v),
                },
            );
        }
        while r.poll_event().is_some() {}
        while let Some(m) = r.poll_agent_msg() {
            if let AgentMsg::Established { record } = m {
                keys.push(record.key);
                if keys.len() > 64 {
                    keys.remove(0);
                }
            }
        }
    }

    fn check(r: &Router) {
        let (conns, _timers, _) = r.table_sizes();
        assert!(
            conns <= LIMITS.max_connections,
            "table over its bound: {conns}"
        );
        let st = r.status();
        assert!(
            st.half_open <= LIMITS.max_half_open,
            "half-open over its bound: {}",
            st.half_open
        );
        let logged = r.counters().log_bytes;
        assert!(
            logged <= (LIMITS.log_total + LIMITS.log_per_connection) as u64,
            "input logs over their bound: {logged}"
        );
    }
}

/// The control protocol: the frame decoder on arbitrary bytes, and the
/// agent's and the router's sessions fed whatever it decodes, both before
/// and after a registration that proved the secret.
pub mod control {
    use super::Bytes;
    use ftnet_control::{encode, AgentSession, Decoder, Heartbeats, Msg, RouterSession};
    use std::net::Ipv4Addr;

    const R: Ipv4Addr = Ipv4Addr::new(198, 18, 11, 2);

    pub fn run(data: &[u8]) {
        let mut b = Bytes::new(data);
        let registered = b.bool();
        let (mut a, hello) = AgentSession::new(b"k", R, "h", [1; 16], 0);
        let mut r = RouterSession::new(b"k", [2; 16], Heartbeats::default(), 0);
        let mut now = 0u64;
        if registered {
            // A real registration first, so that what follows reaches the
            // live sessions.
            let mut to_router = vec![hello];
            for _ in 0..8 {
                let mut to_agent = Vec::new();
                for m in to_router.drain(..) {
                    r.handle(m, now, |x| x == R, &mut to_agent);
                }
                for m in to_agent {
                    a.handle(m, now, &mut to_router);
                }
            }
        }
        let mut d = Decoder::default();
        if registered && b.bool() {
            // After the handshake: the frames must carry the session's tag.
            if let Some(k) = r.frame_keys() {
                d.expect_sealed(k.recv);
            }
        }
        let mut out = Vec::new();
        while !b.done() {
            let n = usize::from(b.u8());
            now += u64::from(b.u8());
            d.push(b.take(n));
            loop {
                match d.next_msg() {
                    Ok(Some(m)) => {
                        // Every decoded message encodes and decodes back to itself.
                        let mut d2 = Decoder::default();
                        d2.push(&encode(&m));
                        assert_eq!(d2.next_msg().ok().flatten().as_ref(), Some(&m));
                        feed(&mut a, &mut r, m, now, &mut out);
                    }
                    Ok(None) => break,
                    // The product closes the connection here.
                    Err(_) => return,
                }
            }
            a.on_timeout(now, &mut out);
            r.on_timeout(now, &mut out);
            out.clear();
        }
    }

    fn feed(a: &mut AgentSession, r: &mut RouterSession, m: Msg, now: u64, out: &mut Vec<Msg>) {
        a.handle(m.clone(), now, out);
        r.handle(m, now, |x| x == R, out);
        assert!(out.len() < 1 << 16, "a message made unbounded output");
    }
}

/// The shim's records from its agent (the 24-byte wire format) and what
/// it builds from them. Half the inputs drive the input order alone
/// (decode, push, take events, close connections, in any sequence); the
/// other half drive the whole shim (`ftnet_shim_core::Shim`) on a fake OS:
/// a hostile or confused agent (records in sequence or not, garbage,
/// holes), clients that connect, send, reset and reuse ports, and a server
/// that accepts, reads, waits and closes in any order. The shim's logic
/// must never panic (a panic it catches itself counts too).
pub mod shim {
    use super::Bytes;
    use ftnet_shim_core::{decode, encode, Ev, Fd, Key, Kind, Order, Os, Record, Shim, RECORD};
    use std::cell::{Cell, RefCell};
    use std::collections::{HashMap, VecDeque};
    use std::io;
    use std::time::{Duration, Instant};

    pub fn run(data: &[u8]) {
        let mut b = Bytes::new(data);
        if b.bool() {
            whole(&mut b);
        } else {
            order(&mut b);
        }
    }

    fn order(b: &mut Bytes) {
        let mut o = Order::default();
        let mut pushed = 0usize;
        let mut keys: std::collections::HashSet<Key> = std::collections::HashSet::new();
        // Connections the server took (key, generation), as the shim's
        // state keeps them.
        let mut held = Vec::new();
        while !b.done() {
            match b.u8() % 4 {
                0 | 1 => {
                    let mut rec = [0u8; RECORD];
                    let raw = b.take(RECORD);
                    rec[..raw.len()].copy_from_slice(raw);
                    let Some(r) = decode(&rec) else { continue };
                    assert_eq!(
                        decode(&encode(&r)),
                        Some(r),
                        "a decoded record encodes back to itself"
                    );
                    if let Record::Event(ev) = r {
                        keys.insert(ev.key);
                        if o.push(ev).is_err() {
                            // The shim gives the order up here.
                            return;
                        }
                        pushed += 1;
                    }
                }
                2 => {
                    // The server takes the next event of some connection.
                    let pick = b.u8();
                    let head = o.head(|e| e.key.cport & 0xff == u16::from(pick));
                    if let Some(e) = head.or_else(|| o.head(|_| true)) {
                        if let Kind::Tick { .. } = e.kind {
                            // A wait consumes a clock tick: no connection's.
                            o.consumed(e.seq);
                            continue;
                        }
                        let g = o.gen_of(&e).expect("a queued event has a connection");
                        if e.kind.stream_base().is_some() {
                            held.push((e.key, g));
                        }
                        o.consumed(e.seq);
                    }
                }
                _ => {
                    // The server closes a connection it took.
                    if !held.is_empty() {
                        let i = usize::from(b.u8()) % held.len();
                        let (k, g) = held.swap_remove(i);
                        o.close(k, g);
                    }
                }
            }
            assert!(o.len() <= pushed, "more events queued than received");
            for e in o.iter() {
                // Every queued event but the clock's belongs to a connection.
                assert!(
                    matches!(e.kind, Kind::Tick { .. }) || o.gen_of(e).is_some(),
                    "a queued event has a connection"
                );
            }
            // The per-key count says what a scan of the queue says.
            for &k in &keys {
                assert_eq!(
                    o.pending_for_key(&k),
                    o.iter().any(|e| e.key == k),
                    "pending_for_key({k:?})"
                );
            }
        }
    }

    const AGENT: Fd = 100;
    const LISTENER: Fd = 3;
    const EPFD: Fd = 50;
    const PORT: u16 = 6379;
    const VIP: u32 = 0x0a00_0001;

    struct Sock {
        peer: (u32, u16),
        data: VecDeque<u8>,
        reset: bool,
    }

    #[derive(Default)]
    struct Fake {
        now: Cell<Option<Instant>>,
        agent_rx: RefCell<VecDeque<u8>>,
        agent_gone: Cell<bool>,
        queue: RefCell<VecDeque<Fd>>,
        socks: RefCell<HashMap<Fd, Sock>>,
    }

    impl Fake {
        fn t(&self) -> Instant {
            match self.now.get() {
                Some(t) => t,
                None => {
                    let t = Instant::now();
                    self.now.set(Some(t));
                    t
                }
            }
        }
        fn advance(&self, d: Duration) {
            self.now.set(Some(self.t() + d));
        }
    }

    impl Os for Fake {
        fn now(&self) -> Instant {
            self.t()
        }
        fn sleep(&self, d: Duration) {
            self.advance(d);
        }
        fn in_child(&self) -> bool {
            false
        }
        fn set_errno(&self, _errno: i32) {}
        fn thread(&self) -> i32 {
            1
        }
        fn initial_thread(&self) -> bool {
            true
        }
        fn connect_agent(&self, _path: &[u8]) -> Result<Fd, ftnet_shim_core::ConnectError> {
            Ok(AGENT)
        }
        fn read(&self, _fd: Fd, buf: &mut [u8]) -> io::Result<usize> {
            let mut rx = self.agent_rx.borrow_mut();
            if rx.is_empty() {
                if self.agent_gone.get() {
                    return Ok(0);
                }
                return Err(io::Error::from_raw_os_error(libc::EAGAIN));
            }
            let n = buf.len().min(rx.len());
            for (d, s) in buf.iter_mut().zip(rx.drain(..n)) {
                *d = s;
            }
            Ok(n)
        }
        fn send(&self, _fd: Fd, _buf: &[u8]) {}
        fn close(&self, _fd: Fd) {}
        fn stand_in(&self) -> Option<Fd> {
            // A fresh descriptor connected to nothing: no bytes, hung up.
            let mut socks = self.socks.borrow_mut();
            let fd = 1_000_000 + Fd::try_from(socks.len()).ok()?;
            socks.insert(
                fd,
                Sock {
                    peer: (0, 0),
                    data: VecDeque::new(),
                    reset: true,
                },
            );
            Some(fd)
        }
        fn accept_queued(&self, _listener: Fd) -> Option<(Fd, Option<(u32, u16)>)> {
            let fd = self.queue.borrow_mut().pop_front()?;
            Some((fd, self.socks.borrow().get(&fd).map(|s| s.peer)))
        }
        fn local_addr(&self, fd: Fd) -> Option<(u32, u16)> {
            (fd == LISTENER || self.socks.borrow().contains_key(&fd)).then_some((VIP, PORT))
        }
        fn unread(&self, fd: Fd) -> u32 {
            self.socks
                .borrow()
                .get(&fd)
                .map_or(0, |s| u32::try_from(s.data.len()).unwrap_or(u32::MAX))
        }
        fn peer_closed(&self, fd: Fd) -> bool {
            self.socks.borrow().get(&fd).is_some_and(|s| s.reset)
        }
        fn is_blocking(&self, _fd: Fd) -> bool {
            false
        }
        fn is_tcp(&self, fd: Fd) -> bool {
            fd == LISTENER || self.socks.borrow().contains_key(&fd)
        }
        fn epoll_wait(&self, _e: Fd, _ev: &mut [libc::epoll_event], timeout_ms: i32) -> i32 {
            self.advance(Duration::from_millis(
                u64::try_from(timeout_ms.max(0)).unwrap_or(0),
            ));
            0
        }
        fn poll(&self, fds: &mut [libc::pollfd], timeout_ms: i32) -> i32 {
            for p in fds.iter_mut() {
                p.revents = 0;
            }
            self.advance(Duration::from_millis(
                u64::try_from(timeout_ms.max(0)).unwrap_or(0),
            ));
            0
        }
    }

    fn key(i: u8) -> Key {
        Key {
            client: 0xc612_0102,
            cport: 40000 + u16::from(i % 4),
            vport: if i & 0x40 != 0 { PORT + 1 } else { PORT },
        }
    }

    fn whole(b: &mut Bytes) {
        // No hello: with the ticks' clock a wait ends only at a tick, and
        // the harness's agent sends them only when drawn (a wait could
        // then wait forever, as the server would for a router).
        let s = Shim::new(
            Fake::default(),
            Some(b"/run/ftnet/fuzz.sock".to_vec()),
            None,
        );
        let os = s.os();
        s.listen(LISTENER, || 0);
        let mut next_seq = u64::from(b.u8());
        let mut ends: HashMap<Key, u32> = HashMap::new();
        let mut next_fd: Fd = 10;
        let mut held: Vec<Fd> = Vec::new();
        let mut steps = 0;
        while !b.done() && steps < 300 {
            steps += 1;
            match b.u8() % 10 {
                0 | 1 => {
                    // The agent passes on an event in sequence.
                    let k = key(b.u8());
                    let kind = match b.u8() % 5 {
                        0 => Kind::Accept {
                            isn: b.bool().then(|| u32::from(b.u8() % 3)),
                        },
                        4 => Kind::Tick {
                            at_us: u64::from(b.u8()) << 10,
                        },
                        1 => Kind::Join {
                            base: u32::from(b.u8()),
                        },
                        _ => {
                            let e = ends.entry(k).or_insert(0);
                            *e = e.wrapping_add(1 + u32::from(b.u8() % 16));
                            Kind::Data { end: *e }
                        }
                    };
                    if let Kind::Accept { .. } | Kind::Join { .. } = kind {
                        ends.insert(k, kind.stream_base().unwrap_or(0));
                    }
                    let ev = Ev {
                        seq: next_seq,
                        key: k,
                        kind,
                    };
                    next_seq = next_seq.wrapping_add(1);
                    os.agent_rx.borrow_mut().extend(encode(&Record::Event(ev)));
                }
                2 => {
                    // Anything at all from the agent (holes, garbage, queries).
                    let n = usize::from(b.u8() % 49);
                    let raw = b.take(n).to_vec();
                    os.agent_rx.borrow_mut().extend(raw);
                    if b.u8() == 0 {
                        os.agent_gone.set(true);
                    }
                }
                3 => {
                    // A client connects (and maybe sends at once).
                    let fd = next_fd;
                    next_fd += 1;
                    let k = key(b.u8());
                    let data = b.payload();
                    os.socks.borrow_mut().insert(
                        fd,
                        Sock {
                            peer: (k.client, k.cport),
                            data: data.into(),
                            reset: false,
                        },
                    );
                    os.queue.borrow_mut().push_back(fd);
                }
                4 => {
                    // Bytes arrive on a connection, or its client resets it.
                    let fd = 10 + Fd::from(b.u8() % 16);
                    let data = b.payload();
                    let reset = b.u8() < 32;
                    if let Some(sk) = os.socks.borrow_mut().get_mut(&fd) {
                        sk.data.extend(data);
                        sk.reset |= reset;
                    }
                }
                5 => {
                    let fd = s.accept("accept4", LISTENER, || -1, |fd, _| fd);
                    if fd >= 0 {
                        held.push(fd);
                        let ev = libc::epoll_event {
                            events: libc::EPOLLIN as u32,
                            u64: u64::try_from(fd).unwrap_or(0),
                        };
                        s.epoll_ctl(EPFD, libc::EPOLL_CTL_ADD, fd, Some(ev), || 0);
                    }
                }
                6 => {
                    if !held.is_empty() {
                        let fd = held[usize::from(b.u8()) % held.len()];
                        let count = 1 + usize::from(b.u8());
                        s.read("read", fd, false, |limit| {
                            let mut socks = os.socks.borrow_mut();
                            let Some(sk) = socks.get_mut(&fd) else {
                                return -1;
                            };
                            let n = limit.map_or(count, |l| l.min(count)).min(sk.data.len());
                            if n == 0 {
                                return if sk.reset { 0 } else { -1 };
                            }
                            sk.data.drain(..n);
                            isize::try_from(n).unwrap_or(0)
                        });
                    }
                }
                7 => {
                    if !held.is_empty() {
                        let i = usize::from(b.u8()) % held.len();
                        let fd = held.swap_remove(i);
                        s.close(fd, || 0);
                        os.socks.borrow_mut().remove(&fd);
                    }
                }
                8 => {
                    let ev = libc::epoll_event {
                        events: libc::EPOLLIN as u32,
                        u64: u64::try_from(LISTENER).unwrap_or(0),
                    };
                    if b.bool() {
                        s.epoll_ctl(EPFD, libc::EPOLL_CTL_ADD, LISTENER, Some(ev), || 0);
                    }
                    let timeout = i32::from(b.u8() % 4) * 100;
                    s.epoll_wait(
                        EPFD,
                        16,
                        timeout,
                        |evs| i32::try_from(evs.len()).unwrap_or(0),
                        || 0,
                    );
                }
                _ => {
                    let mut fds: Vec<libc::pollfd> = held
                        .iter()
                        .chain(std::iter::once(&LISTENER))
                        .map(|&fd| libc::pollfd {
                            fd,
                            events: libc::POLLIN,
                            revents: 0,
                        })
                        .collect();
                    s.poll("poll", &mut fds, i32::from(b.u8() % 3) * 50);
                    os.advance(Duration::from_millis(u64::from(b.u8()) * 40));
                }
            }
            assert!(
                !s.panicked(),
                "the shim's logic panicked (caught by its guard)"
            );
        }
    }
}
