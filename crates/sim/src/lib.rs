//! Deterministic simulation of the ftnet router (COSCANet-FT §III) between
//! real TCP endpoints.
//!
//! One client and N replicas are smoltcp stacks on in-memory devices; the
//! router under test (`ftnet_core::Router`, sans-IO) sits in the middle.
//! Every link has seeded loss, duplication, reordering and delay; replicas
//! can be crashed silently or by abort. Time is virtual (µs) and the loop
//! jumps to the next event, so a run is a pure function of its seed and
//! [`Params`]. At the end of each run the invariants of the mission are
//! checked: exact echo, identical input at every surviving replica, no hang,
//! no reset, no malformed output, eviction of a crashed replica.
//!
//! Topology (every arrow is a faulty link, both directions):
//!
//! ```text
//!   client 198.18.1.2 ──► middle ──► replica 0 198.18.10.2
//!                  (router: VIP 198.19.0.1) ──► replica 1 198.18.11.2 …
//! ```
//!
//! Routing is by role, not by table: whatever a host sends goes to the
//! middle box; whatever the middle box emits goes to the host whose address
//! equals the destination, and anything else is a bug of the middle box.

pub mod params;
pub mod pcap;

mod host;

pub use params::{Close, Crash, CrashKind, CrashWhen, HostParams, Inject, Mode, NetParams, Params};

use ftnet_core::{Config, Counters, Event, Instant, Packet, Router, Service, Timeouts};
use ftnet_wire::{ipv4, tcp};
use host::Host;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use smoltcp::socket::tcp::State;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::net::Ipv4Addr;
use std::time::Duration;

/// Prefix of a failure that is a known defect of the simulated endpoints
/// (smoltcp), not of the middle box.
pub const INCONCLUSIVE: &str = "inconclusive (smoltcp)";

pub const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 2);
pub const VIP: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 1);
pub const PORT: u16 = 7000;

/// Address of replica `i` (0-based).
pub fn replica_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 10 + i as u8, 2)
}

/// What a successful run measured.
#[derive(Debug, Clone)]
pub struct Report {
    /// Virtual time at which every invariant held, µs.
    pub virtual_us: u64,
    pub packets_sent: u64,
    pub packets_lost: u64,
    /// Loop iterations.
    pub steps: u64,
    /// Router counters (router mode).
    pub counters: Option<Counters>,
    pub events: Vec<Event>,
    /// Replica crashed during the run, and whether it was still needed then.
    pub crashed: Option<(usize, bool)>,
    /// Middle-box output with a destination that is no host (fuzz mode).
    pub unroutable: u64,
}

/// Run one simulation. `Err` carries a diagnosis: the violated invariant,
/// the params, per-connection progress, router counters and events, and the
/// last packets seen. Set `FTNET_SIM_PCAP=path` to capture every packet.
pub fn run(seed: u64, params: &Params) -> Result<Report, String> {
    let mut sim = Sim::new(seed, params.clone());
    match sim.run_loop() {
        Ok(()) => match sim.final_checks() {
            Ok(()) => Ok(sim.report()),
            Err(e) => Err(sim.diagnose(&e)),
        },
        Err(e) => Err(sim.diagnose(&e)),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Node {
    Middle,
    /// 0 is the client, 1 + i is replica i.
    Host(usize),
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Flight {
    at: u64,
    seq: u64,
    to: Node,
    data: Vec<u8>,
}

enum Middle {
    Router(Box<Router>),
    /// Direct mode: forward by destination address, change nothing.
    Forward,
}

struct Sim {
    seed: u64,
    p: Params,
    now: u64,
    steps: u64,
    /// Network faults and delays.
    net_rng: SmallRng,
    /// Application decisions (write sizes).
    app_rng: SmallRng,
    /// Fuzz packet generation.
    fuzz_rng: SmallRng,
    hosts: Vec<Host>,
    middle: Middle,
    queue: BinaryHeap<Reverse<Flight>>,
    flight_seq: u64,
    link_delay: HashMap<(Node, Node), u64>,
    trace: VecDeque<String>,
    pcap: Option<pcap::PcapWriter>,
    events: Vec<Event>,
    /// (replica, time, effective): effective when the replica was still
    /// needed at the moment of the crash, so the router must evict it.
    crashed: Option<(usize, u64, bool)>,
    packets_sent: u64,
    packets_lost: u64,
    data_segments_to_client: u64,
    fuzz_times: VecDeque<u64>,
    recent: VecDeque<Vec<u8>>,
    unroutable: u64,
    /// `FTNET_SIM_TRACE=1`: print every trace line as it happens.
    verbose: bool,
    /// When the workload completed (router mode), µs.
    done_at: u64,
    /// End of the settling time after the workload (router mode), µs.
    settle_until: Option<u64>,
}

const TRACE_LINES: usize = 60;

impl Sim {
    fn new(seed: u64, p: Params) -> Sim {
        let mut setup = SmallRng::seed_from_u64(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ 0x51);
        let mut app_rng = SmallRng::seed_from_u64(seed ^ 0xa99);
        let server = match p.mode {
            Mode::Router => (VIP, PORT),
            Mode::Direct => (replica_ip(0), PORT),
        };
        let mut hosts = vec![Host::client(
            CLIENT_IP,
            p.client.clone(),
            setup.gen(),
            server,
            p.conns,
            p.bytes_per_conn,
            p.close,
            p.max_write,
            p.refused_conns,
            &mut app_rng,
        )];
        for i in 0..p.replicas {
            let hp = p.replica.get(i).cloned().unwrap_or_else(HostParams::default_host);
            hosts.push(Host::server(format!("replica{i}"), replica_ip(i), hp, setup.gen(), PORT, p.conns + 2));
        }
        let middle = match p.mode {
            Mode::Router => {
                let cfg = Config {
                    services: vec![Service { name: "echo".into(), vip: VIP, ports: vec![PORT, PORT + 1], replicas: (0..p.replicas).map(replica_ip).collect() }],
                    timeouts: Timeouts { failure_detection: Duration::from_millis(p.failure_detection_ms), ..Timeouts::default() },
                    limits: Default::default(),
                };
                let mut secret = [0u8; 16];
                setup.fill(&mut secret);
                Middle::Router(Box::new(Router::new(cfg, secret)))
            }
            Mode::Direct => Middle::Forward,
        };
        let mut link_delay = HashMap::new();
        for h in 0..hosts.len() {
            for (a, b) in [(Node::Host(h), Node::Middle), (Node::Middle, Node::Host(h))] {
                let (lo, hi) = p.net.delay_us;
                link_delay.insert((a, b), setup.gen_range(lo.max(1)..=hi.max(lo).max(1)));
            }
        }
        let mut fuzz_rng = SmallRng::seed_from_u64(seed ^ 0xf022);
        let mut fuzz_times: Vec<u64> = (0..p.fuzz_packets).map(|_| fuzz_rng.gen_range(0..50_000)).collect();
        fuzz_times.sort_unstable();
        let pcap = std::env::var("FTNET_SIM_PCAP").ok().and_then(|path| pcap::PcapWriter::create(&path).ok());
        Sim {
            seed,
            now: 0,
            steps: 0,
            net_rng: SmallRng::seed_from_u64(seed ^ 0x4e37),
            app_rng,
            fuzz_rng,
            hosts,
            middle,
            queue: BinaryHeap::new(),
            flight_seq: 0,
            link_delay,
            trace: VecDeque::new(),
            pcap,
            events: Vec::new(),
            crashed: None,
            packets_sent: 0,
            packets_lost: 0,
            data_segments_to_client: 0,
            fuzz_times: fuzz_times.into(),
            recent: VecDeque::new(),
            unroutable: 0,
            verbose: std::env::var("FTNET_SIM_TRACE").is_ok_and(|v| v == "1"),
            done_at: 0,
            settle_until: None,
            p,
        }
    }

    fn run_loop(&mut self) -> Result<(), String> {
        loop {
            self.steps += 1;
            host::set_now(self.now);
            // 1. Packets due now.
            while self.queue.peek().is_some_and(|f| f.0.at <= self.now) {
                let Reverse(f) = self.queue.pop().expect("peeked");
                self.deliver(f)?;
            }
            // 2. Garbage for the fuzz test.
            while self.fuzz_times.front().is_some_and(|&t| t <= self.now) {
                self.fuzz_times.pop_front();
                let pkt = self.gen_fuzz();
                self.send(Node::Host(0), Node::Middle, pkt, "fuzz");
            }
            // 3. Router timers.
            if let Middle::Router(r) = &mut self.middle {
                if r.poll_timeout().is_some_and(|t| t.0 <= self.now) {
                    r.handle_timeout(Instant(self.now));
                    self.drain_middle()?;
                }
            }
            // 4. Hosts: stack and application.
            for h in 0..self.hosts.len() {
                self.step_host(h)?;
            }
            // 5. Crash plan.
            self.maybe_crash()?;
            // 6. Done? Then let the router's failure detection run its
            // course on an idle network before the final checks.
            if self.settle_until.is_none() && self.done() {
                match self.p.mode {
                    Mode::Direct => return Ok(()),
                    Mode::Router => {
                        self.done_at = self.now;
                        self.settle_until = Some(self.now + self.settle_us());
                        self.log(format!("{:>10} WORKLOAD DONE; settling until {}", self.now, self.now + self.settle_us()));
                    }
                }
            }
            // 7. Advance virtual time to the next thing that can happen.
            let mut next = u64::MAX;
            if let Some(f) = self.queue.peek() {
                next = next.min(f.0.at);
            }
            if let Some(&t) = self.fuzz_times.front() {
                next = next.min(t);
            }
            if let Middle::Router(r) = &self.middle {
                if let Some(t) = r.poll_timeout() {
                    next = next.min(t.0);
                }
            }
            let now = self.now;
            for h in self.hosts.iter_mut().filter(|h| h.alive) {
                if let Some(t) = h.poll_at(now) {
                    next = next.min(t);
                }
            }
            if let Some(Crash { when: CrashWhen::AtTime(t), .. }) = self.p.crash {
                if self.crashed.is_none() {
                    next = next.min(t);
                }
            }
            if let Some(end) = self.settle_until {
                // Every router timer due by the end of the settling time
                // has fired (`poll_timeout` is beyond it).
                if next > end {
                    return Ok(());
                }
                self.now = next.max(self.now + 1);
                continue;
            }
            if next == u64::MAX {
                if let Some(e) = self.smoltcp_stall() {
                    return Err(e);
                }
                return Err("hang: nothing left to happen (no packet in flight, no timer) and the workload is not complete".into());
            }
            self.now = next.max(self.now + 1);
            if self.now > self.p.deadline_us {
                if let Some(e) = self.smoltcp_stall() {
                    return Err(e);
                }
                return Err(format!("hang: workload not complete at the virtual-time deadline of {} s", self.p.deadline_us / 1_000_000));
            }
            if self.steps > 50_000_000 {
                return Err("harness: too many steps".into());
            }
        }
    }

    /// smoltcp 0.12 cancels its retransmit timer on any ACK in CLOSE-WAIT
    /// and LAST-ACK and when a FIN arrives (`tcp.rs`, `set_for_idle` in
    /// `process`), so a half-closed socket whose data hit a hole never
    /// retransmits. A hang with such a socket is the endpoint's fault, not
    /// the middle box's: say so, and let the tests count it apart.
    fn smoltcp_stall(&mut self) -> Option<String> {
        let now = self.now;
        // If the client still has data or a FIN outstanding, its own
        // retransmissions are going unanswered: that is the middle box's
        // doing, whatever state the replicas are in.
        let c = &self.hosts[0];
        if let host::App::Client { conns, .. } = &c.app {
            if conns.iter().any(|k| c.send_queue(k.handle) > 0 || matches!(c.state(k.handle), State::FinWait1 | State::Closing | State::LastAck)) {
                return None;
            }
        }
        for h in 0..self.hosts.len() {
            if !self.hosts[h].alive || self.hosts[h].poll_at(now).is_some() {
                continue;
            }
            let host = &self.hosts[h];
            let stuck = host.sockets.iter().any(|(_, s)| {
                let smoltcp::socket::Socket::Tcp(t) = s;
                // A FIN outstanding, or data outstanding after the peer's
                // FIN: either way a retransmit timer must be running.
                matches!(t.state(), State::LastAck | State::Closing | State::FinWait1) || (t.state() == State::CloseWait && t.send_queue() > 0)
            });
            if stuck {
                return Some(format!(
                    "{INCONCLUSIVE}: {} holds an unacknowledged FIN or data in a closing state with no retransmit timer (smoltcp 0.12 cancels it on ACKs in CLOSE-WAIT/LAST-ACK; it also ignores a FIN riding on a segment whose data it already has)",
                    host.name
                ));
            }
        }
        None
    }

    fn step_host(&mut self, h: usize) -> Result<(), String> {
        if !self.hosts[h].alive {
            return Ok(());
        }
        let now = self.now;
        let host = &mut self.hosts[h];
        host.step(now, &mut self.app_rng).map_err(|e| format!("{}: {e}", host.name))?;
        let out: Vec<Vec<u8>> = std::mem::take(&mut host.dev.tx);
        for mut pkt in out {
            self.hosts[h].clamp_mss(&mut pkt);
            if self.p.fuzz_packets > 0 {
                if self.recent.len() >= 32 {
                    self.recent.pop_front();
                }
                self.recent.push_back(pkt.clone());
            }
            self.send(Node::Host(h), Node::Middle, pkt, "");
        }
        Ok(())
    }

    /// Put a packet on the link `from -> to` with that link's faults.
    fn send(&mut self, from: Node, to: Node, data: Vec<u8>, note: &str) {
        self.packets_sent += 1;
        if let Some(w) = &mut self.pcap {
            w.packet(self.now, &data);
        }
        let net = self.p.net.clone();
        let lost = net.loss > 0.0 && self.net_rng.gen_bool(net.loss);
        let dup = net.dup > 0.0 && self.net_rng.gen_bool(net.dup);
        let mark = if lost {
            "LOST "
        } else if dup {
            "DUP "
        } else {
            ""
        };
        self.log(format!("{:>10} {}->{} {mark}{note}{}", self.now, self.node_name(from), self.node_name(to), describe(&data)));
        if lost {
            self.packets_lost += 1;
            return;
        }
        let base = self.link_delay.get(&(from, to)).copied().unwrap_or(1);
        for _ in 0..if dup { 2 } else { 1 } {
            let extra = if net.reorder > 0.0 && self.net_rng.gen_bool(net.reorder) { self.net_rng.gen_range(0..=net.reorder_max_us) } else { 0 };
            self.flight_seq += 1;
            self.queue.push(Reverse(Flight { at: self.now + base + extra, seq: self.flight_seq, to, data: data.clone() }));
        }
    }

    fn deliver(&mut self, f: Flight) -> Result<(), String> {
        match f.to {
            Node::Middle => match &mut self.middle {
                Middle::Router(r) => {
                    r.handle_packet(Instant(self.now), Packet::plain(f.data));
                    self.drain_middle()
                }
                Middle::Forward => {
                    if let Inject::DropMiddleOutput = self.p.inject {
                        return Ok(());
                    }
                    // Like any router, the forwarder drops what it cannot
                    // parse (only the fuzz test sends such packets).
                    let Ok(dst) = ipv4::Packet::new_checked(&f.data[..]).map(|p| p.dst()) else {
                        self.unroutable += 1;
                        return Ok(());
                    };
                    match self.host_by_ip(dst) {
                        Some(h) => {
                            self.send(Node::Middle, Node::Host(h), f.data, "");
                            Ok(())
                        }
                        None => {
                            self.unroutable += 1;
                            Ok(())
                        }
                    }
                }
            },
            Node::Host(h) => {
                if !self.hosts[h].alive {
                    return Ok(());
                }
                let mut data = f.data;
                if h == 0 {
                    self.inspect_to_client(&mut data)?;
                }
                self.hosts[h].dev.rx.push_back(data);
                Ok(())
            }
        }
    }

    /// Checks on (and the corruption self-test for) packets reaching the
    /// client.
    fn inspect_to_client(&mut self, data: &mut [u8]) -> Result<(), String> {
        let Ok(ip) = ipv4::Packet::new_checked(&data[..]) else { return Ok(()) };
        let (src, dst, hl) = (ip.src(), ip.dst(), ip.header_len());
        let Ok(seg) = tcp::Segment::new_checked(ip.payload()) else { return Ok(()) };
        let ours = self.client_ports().contains(&seg.dst_port());
        if ours && seg.rst() && !self.client_closing(seg.dst_port()) {
            return Err(format!("invariant 4 (no reset): the client's connection (port {}) received a RST", seg.dst_port()));
        }
        if ours && seg.payload_len() > 0 {
            self.data_segments_to_client += 1;
            if let Inject::CorruptToClient { nth } = self.p.inject {
                if self.data_segments_to_client == nth {
                    let off = hl + seg.header_len();
                    data[off] ^= 0x5a;
                    let tl = ipv4::Packet::new_checked(&data[..]).map(|p| p.total_len()).unwrap_or(data.len());
                    let mut s = tcp::Segment::new_checked(&mut data[hl..tl]).map_err(|e| format!("{e}"))?;
                    s.fill_checksum(src, dst);
                    self.log(format!("{:>10} INJECTED corruption of one payload byte", self.now));
                }
            }
        }
        Ok(())
    }

    /// The client's connection on `port` finished its orderly close, so a
    /// stray RST (from a peer that already forgot it) changes nothing.
    fn client_closing(&self, port: u16) -> bool {
        let c = &self.hosts[0];
        match &c.app {
            host::App::Client { conns, .. } => {
                conns.iter().any(|k| k.port == port && k.close_called && matches!(c.state(k.handle), State::TimeWait | State::Closed))
            }
            _ => false,
        }
    }

    fn client_ports(&self) -> Vec<u16> {
        match &self.hosts[0].app {
            host::App::Client { conns, .. } => conns.iter().map(|c| c.port).collect(),
            _ => Vec::new(),
        }
    }

    fn host_by_ip(&self, a: Ipv4Addr) -> Option<usize> {
        self.hosts.iter().position(|h| h.ip == a)
    }

    /// Route everything the router wants to send, checking that each packet
    /// is well formed and addressed as COSCANet-FT §III requires.
    fn drain_middle(&mut self) -> Result<(), String> {
        loop {
            let Middle::Router(r) = &mut self.middle else { return Ok(()) };
            let mut evs = Vec::new();
            while let Some(ev) = r.poll_event() {
                evs.push(ev);
            }
            for ev in evs {
                self.events.push(ev.clone());
                self.log(format!("{:>10} EVENT {:?}", self.now, ev));
                self.check_event(&ev)?;
            }
            let Middle::Router(r) = &mut self.middle else { return Ok(()) };
            let Some(pkt) = r.poll_transmit() else { return Ok(()) };
            if let Inject::DropMiddleOutput = self.p.inject {
                continue;
            }
            let mut data = pkt.data;
            let fuzzing = self.p.fuzz_packets > 0;
            let (src, dst, sport, dport) = {
                let ip = ipv4::Packet::new_checked(&data[..])
                    .map_err(|e| format!("router emitted an unparsable IPv4 packet ({e}): {:02x?}", &data[..data.len().min(40)]))?;
                if !ip.verify_checksum() {
                    return Err(format!("router emitted a bad IPv4 header checksum: {}", describe(&data)));
                }
                let (src, dst) = (ip.src(), ip.dst());
                if ip.protocol() != ipv4::PROTO_TCP {
                    // ICMP and the like: route it, nothing more to check.
                    (src, dst, 0, 0)
                } else {
                    let tl = ip.total_len();
                    let hl = ip.header_len();
                    let seg =
                        tcp::Segment::new_checked(ip.payload()).map_err(|e| format!("router emitted an unparsable TCP segment ({e}): {}", describe(&data)))?;
                    let (sp, dp) = (seg.src_port(), seg.dst_port());
                    if !seg.verify_checksum(src, dst) {
                        if pkt.vnet.needs_csum() {
                            // A partial checksum: finish it like a NIC would.
                            let mut s = tcp::Segment::new_checked(&mut data[hl..tl]).map_err(|e| format!("{e}"))?;
                            s.fill_checksum(src, dst);
                        } else {
                            return Err(format!("router emitted a bad TCP checksum: {}", describe(&data)));
                        }
                    }
                    (src, dst, sp, dp)
                }
            };
            let Some(h) = self.host_by_ip(dst) else {
                if fuzzing {
                    self.unroutable += 1;
                    continue;
                }
                return Err(format!("router emitted a packet to {dst}, which is no host: {}", describe(&data)));
            };
            if self.p.mode == Mode::Router && !fuzzing {
                // Transparency: the client only ever hears from VIP:PORT,
                // a replica only from the client's own address.
                let svc_port = |p: u16| p == PORT || p == PORT + 1 || p == 0;
                if h == 0 && (src != VIP || !svc_port(sport)) {
                    return Err(format!("router sent the client a packet not from {VIP}:{PORT}: {}", describe(&data)));
                }
                if h > 0 && (src != CLIENT_IP || !svc_port(dport)) {
                    return Err(format!("router sent replica {} a packet not from the client to port {PORT}: {}", h - 1, describe(&data)));
                }
            }
            if data.len() > self.hosts[h].params.mtu {
                return Err(format!(
                    "router sent {} a {}-byte packet, above its MTU {} (MSS not clamped to the group minimum?): {}",
                    self.hosts[h].name,
                    data.len(),
                    self.hosts[h].params.mtu,
                    describe(&data)
                ));
            }
            self.send(Node::Middle, Node::Host(h), data, "");
        }
    }

    fn check_event(&self, ev: &Event) -> Result<(), String> {
        if self.p.fuzz_packets > 0 {
            return Ok(());
        }
        let crashed_ip = self.crashed.map(|(i, _, _)| replica_ip(i));
        match ev {
            Event::Evicted { replica, reason, .. } | Event::ReplicaDown { replica, reason, .. } if Some(*replica) != crashed_ip => {
                Err(format!("healthy replica {replica} evicted ({reason:?}): invariant 2 (every surviving replica gets the whole stream) cannot hold"))
            }
            Event::ConnectionLost { conn } => Err(format!("router lost connection {conn} (no replica left) although a replica is alive")),
            _ => Ok(()),
        }
    }

    fn acked_total(&self) -> (usize, usize) {
        let c = &self.hosts[0];
        match &c.app {
            host::App::Client { conns, .. } => {
                let acked = conns.iter().map(|k| k.sent - c.send_queue(k.handle).min(k.sent)).sum();
                let total = conns.iter().map(|k| k.data.len()).sum();
                (acked, total)
            }
            _ => (0, 0),
        }
    }

    fn maybe_crash(&mut self) -> Result<(), String> {
        let Some(c) = self.p.crash.clone() else { return Ok(()) };
        if self.crashed.is_some() || self.p.mode != Mode::Router || c.replica >= self.p.replicas {
            return Ok(());
        }
        let (acked, total) = self.acked_total();
        let fire = match c.when {
            CrashWhen::AtTime(t) => self.now >= t,
            CrashWhen::AtProgress(f) => acked as f64 >= f * total as f64,
        };
        if !fire {
            return Ok(());
        }
        let h = 1 + c.replica;
        // Still needed: client bytes remain that it has not acknowledged,
        // or (with a close) its connection has not finished closing.
        // Still needed: some client byte (or the client's FIN) has not
        // reached it, so the group's min-ACK cannot move on without
        // evicting it. (A replica that already has everything may rightly
        // linger until the connection ends.)
        let per_conn = self.p.bytes_per_conn;
        let by = self.hosts[h].by_peer();
        let ports = self.client_ports();
        let missing_bytes = ports.iter().any(|p| match by.get(p) {
            Some(k) => k.rx.len() < per_conn,
            None => true,
        });
        let missing_fin = self.p.close != Close::Never
            && ports.iter().any(|p| match by.get(p) {
                Some(k) => !k.saw_fin,
                None => true,
            });
        let effective = missing_bytes || missing_fin;
        self.crashed = Some((c.replica, self.now, effective));
        self.log(format!("{:>10} CRASH replica{} {:?} (client acked {acked}/{total})", self.now, c.replica, c.kind));
        if c.kind == CrashKind::Abort {
            self.hosts[h].abort_all();
            self.step_host(h)?;
        }
        self.hosts[h].alive = false;
        self.hosts[h].dev.rx.clear();
        Ok(())
    }

    /// Virtual time the run goes on after the workload is complete, µs.
    /// The router decides some evictions only after `failure_detection`
    /// (a silent crash; a RST from one replica, when no other replica makes
    /// progress to confirm it): three detection times plus 3 s covers those
    /// with margin. (When every live replica is silent the router waits 30
    /// detection times on purpose; `final_checks` accounts for that.)
    fn settle_us(&self) -> u64 {
        3 * self.p.failure_detection_ms * 1000 + 3_000_000
    }

    fn live_replicas(&self) -> Vec<usize> {
        match self.p.mode {
            Mode::Direct => vec![1],
            Mode::Router => (1..self.hosts.len()).filter(|&h| self.hosts[h].alive).collect(),
        }
    }

    fn done(&self) -> bool {
        if !self.fuzz_times.is_empty() {
            return false;
        }
        let c = &self.hosts[0];
        let host::App::Client { conns, close, .. } = &c.app else { return false };
        if !conns.iter().all(|k| k.done(*close, c.state(k.handle), c.send_queue(k.handle))) {
            return false;
        }
        self.live_replicas().into_iter().all(|h| {
            let r = &self.hosts[h];
            let by = r.by_peer();
            conns.iter().all(|k| {
                by.get(&k.port).is_some_and(|s| {
                    s.rx.len() == k.data.len()
                        && s.pending.is_empty()
                        && r.send_queue(s.handle) == 0
                        && (*close == Close::Never || (s.saw_fin && matches!(r.state(s.handle), State::Closed | State::TimeWait)))
                })
            })
        })
    }

    fn final_checks(&mut self) -> Result<(), String> {
        let c = &self.hosts[0];
        let host::App::Client { conns, .. } = &c.app else { return Err("harness: host 0 is not the client".into()) };
        for (i, k) in conns.iter().enumerate() {
            if k.recvd != k.data {
                return Err(format!("invariant 1 (exact echo): conn {i} received {} of {} bytes or different bytes", k.recvd.len(), k.data.len()));
            }
            if k.reset {
                return Err(format!("invariant 4 (no reset): conn {i} (port {}) was reset", k.port));
            }
        }
        for h in self.live_replicas() {
            let by = self.hosts[h].by_peer();
            for (i, k) in conns.iter().enumerate() {
                let ok = by.get(&k.port).is_some_and(|s| s.rx == k.data);
                if !ok {
                    return Err(format!("invariant 2: {} did not receive exactly conn {i}'s stream", self.hosts[h].name));
                }
            }
        }
        if let host::App::Client { refused, .. } = &c.app {
            for &(h, port) in refused {
                if c.state(h) != State::Closed {
                    return Err(format!(
                        "transparency: client connection from port {port} to port {} (no replica listens) was not refused; it is {:?}",
                        PORT + 1,
                        c.state(h)
                    ));
                }
            }
        }
        if let Middle::Router(r) = &self.middle {
            let st = r.status();
            if self.p.fuzz_packets == 0 {
                for reason in ["bad_checksum", "malformed"] {
                    let n = st.drops.iter().find(|(name, _)| *name == reason).map_or(0, |x| x.1);
                    if n != 0 {
                        return Err(format!("invariant 5: router counted {n} `{reason}` drops on a clean network"));
                    }
                }
            }
            if let Some((i, _, true)) = self.crashed {
                let down = st.services.iter().flat_map(|s| s.replicas.iter()).any(|rs| rs.addr == replica_ip(i) && !rs.alive);
                if st.counters.evictions == 0 && !down {
                    return Err(format!("invariant 5: replica{i} crashed while still needed, but the router shows no eviction"));
                }
            }
        }
        Ok(())
    }

    fn report(&self) -> Report {
        Report {
            virtual_us: self.now,
            packets_sent: self.packets_sent,
            packets_lost: self.packets_lost,
            steps: self.steps,
            counters: match &self.middle {
                Middle::Router(r) => Some(r.counters().clone()),
                Middle::Forward => None,
            },
            events: self.events.clone(),
            crashed: self.crashed.map(|(i, _, e)| (i, e)),
            unroutable: self.unroutable,
        }
    }

    /// The failure message: what broke, with enough context to start
    /// debugging without rerunning.
    fn diagnose(&self, what: &str) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(s, "seed {}: {what}", self.seed);
        let _ = writeln!(s, "  at virtual time {} us, step {}", self.now, self.steps);
        let _ = writeln!(s, "  params: {}", self.p.summary());
        if let Some((i, t, e)) = self.crashed {
            let _ = writeln!(s, "  crashed replica{i} at {t} us (still needed: {e})");
        }
        let c = &self.hosts[0];
        if let host::App::Client { conns, .. } = &c.app {
            for (i, k) in conns.iter().enumerate() {
                let _ = writeln!(
                    s,
                    "  client conn {i} port {}: {:?} written {}/{} unacked {} echoed {} close_called {} reset {}",
                    k.port,
                    c.state(k.handle),
                    k.sent,
                    k.data.len(),
                    c.send_queue(k.handle),
                    k.recvd.len(),
                    k.close_called,
                    k.reset
                );
            }
            for h in 1..self.hosts.len() {
                let r = &self.hosts[h];
                let by = r.by_peer();
                for k in conns {
                    match by.get(&k.port) {
                        Some(x) => {
                            let _ = writeln!(
                                s,
                                "  {}{} port {}: {:?} received {} pending {} unacked {} saw_fin {}",
                                r.name,
                                if r.alive { "" } else { " (crashed)" },
                                k.port,
                                r.state(x.handle),
                                x.rx.len(),
                                x.pending.len(),
                                r.send_queue(x.handle),
                                x.saw_fin
                            );
                        }
                        None => {
                            let _ = writeln!(s, "  {}{} port {}: no connection", r.name, if r.alive { "" } else { " (crashed)" }, k.port);
                        }
                    }
                }
            }
        }
        if let Middle::Router(r) = &self.middle {
            let st = r.status();
            let k = &st.counters;
            let drops: Vec<String> = st.drops.iter().filter(|d| d.1 > 0).map(|(n, v)| format!("{n}={v}")).collect();
            let _ = writeln!(
                s,
                "  router: in {} out {} conns {} evictions {} lost {} acks_on_behalf {} suppressed_bytes {}; drops: {}",
                k.packets_in,
                k.packets_out,
                st.connections,
                k.evictions,
                k.connections_lost,
                k.acks_on_behalf,
                k.suppressed_bytes,
                drops.join(" ")
            );
            for ev in self.events.iter().take(10) {
                let _ = writeln!(s, "  event: {ev:?}");
            }
        }
        let _ = writeln!(s, "  last packets (time us, link, packet):");
        for l in &self.trace {
            let _ = writeln!(s, "    {l}");
        }
        s
    }

    fn log(&mut self, line: String) {
        if self.verbose {
            eprintln!("{line}");
        }
        if self.trace.len() >= TRACE_LINES {
            self.trace.pop_front();
        }
        self.trace.push_back(line);
    }

    fn node_name(&self, n: Node) -> String {
        match n {
            Node::Middle => "mid".into(),
            Node::Host(0) => "cli".into(),
            Node::Host(h) => format!("r{}", h - 1),
        }
    }

    /// A garbage or mutated packet from the client's side (fuzz test).
    /// Mutations that keep a valid checksum never use the tuple of a real
    /// connection: those would be legitimate (if odd) input that could
    /// rightly change its bytes.
    fn gen_fuzz(&mut self) -> Vec<u8> {
        let real = self.client_ports();
        let r = &mut self.fuzz_rng;
        let fresh_port = |r: &mut SmallRng| loop {
            let p = r.gen_range(1..=65535u16);
            if !real.contains(&p) {
                break p;
            }
        };
        let base = if self.recent.is_empty() { None } else { Some(self.recent[r.gen_range(0..self.recent.len())].clone()) };
        let kind = if base.is_some() { r.gen_range(0..7) } else { 0 };
        let mut b = base.unwrap_or_default();
        match kind {
            // Random bytes, sometimes with a plausible first byte.
            0 => {
                let n = r.gen_range(0..100);
                let mut v = vec![0u8; n];
                r.fill(&mut v[..]);
                if n > 0 && r.gen_bool(0.5) {
                    v[0] = 0x45;
                }
                v
            }
            // Truncated, with or without a consistent length field.
            1 => {
                let cut = r.gen_range(0..b.len().max(1));
                b.truncate(cut);
                if cut >= 20 && r.gen_bool(0.5) {
                    b[2..4].copy_from_slice(&(cut as u16).to_be_bytes());
                    ip_csum(&mut b);
                }
                b
            }
            // One flipped bit in the TCP part, checksums left alone: the
            // TCP checksum always detects it. (The IPv4 header is left
            // alone: on a TUN device the kernel has validated it already.)
            2 => {
                let ihl = b.first().map_or(20, |x| ((x & 0x0f) as usize) * 4);
                if b.len() > ihl {
                    let i = r.gen_range(ihl..b.len());
                    b[i] ^= 1 << r.gen_range(0..8);
                }
                b
            }
            // Another connection: random flags, numbers and window, valid
            // checksums.
            3..=4 => {
                if b.len() >= 40 {
                    let to_mid_from_client = b[12..16] == CLIENT_IP.octets();
                    let port = fresh_port(r);
                    if to_mid_from_client {
                        b[20..22].copy_from_slice(&port.to_be_bytes());
                    } else {
                        b[22..24].copy_from_slice(&port.to_be_bytes());
                    }
                    b[33] = r.gen();
                    if r.gen_bool(0.5) {
                        let seq: u32 = r.gen();
                        b[24..28].copy_from_slice(&seq.to_be_bytes());
                    }
                    if r.gen_bool(0.5) {
                        let ack: u32 = r.gen();
                        b[28..32].copy_from_slice(&ack.to_be_bytes());
                    }
                    if kind == 4 {
                        // Garbage in the options and the data offset.
                        b[32] = r.gen_range(0..16) << 4;
                        for x in b.iter_mut().skip(40).take(12) {
                            if r.gen_bool(0.3) {
                                *x = r.gen();
                            }
                        }
                    }
                    refill(&mut b);
                }
                b
            }
            // IPv4 header oddities: IHL, fragments, protocol, TTL.
            5 => {
                if b.len() >= 20 {
                    match r.gen_range(0..4) {
                        0 => b[0] = 0x40 | r.gen_range(0..16),
                        1 => b[6] = r.gen_range(0..4) << 5 | r.gen_range(0..2),
                        2 => b[9] = r.gen(),
                        _ => b[8] = 0,
                    }
                    ip_csum(&mut b);
                }
                b
            }
            // A SYN flood burst from fresh ports.
            _ => {
                let port = fresh_port(r);
                let mut rep = tcp::Repr::new(port, PORT, ftnet_wire::SeqNum(r.gen()), ftnet_wire::SeqNum(0), tcp::flags::SYN, r.gen());
                if r.gen_bool(0.5) {
                    rep.mss = Some(r.gen());
                    rep.wscale = Some(r.gen_range(0..20));
                    rep.timestamps = Some((r.gen(), r.gen()));
                    rep.sack_permitted = r.gen();
                }
                rep.emit_ipv4(CLIENT_IP, VIP, &[])
            }
        }
    }
}

/// Recompute both checksums of an IPv4/TCP packet whose header is sane
/// enough to locate them; leave it alone otherwise.
fn refill(b: &mut [u8]) {
    if b.len() < 40 {
        return;
    }
    ip_csum(b);
    let (src, dst) = (Ipv4Addr::new(b[12], b[13], b[14], b[15]), Ipv4Addr::new(b[16], b[17], b[18], b[19]));
    let tl = (u16::from_be_bytes([b[2], b[3]]) as usize).min(b.len());
    if tl < 40 {
        return;
    }
    // The segment view refuses a bad data offset; compute by hand then.
    b[36] = 0;
    b[37] = 0;
    let ph = ftnet_wire::checksum::pseudo_header(src, dst, ipv4::PROTO_TCP, (tl - 20) as u32);
    let c = ftnet_wire::checksum::complete(&b[20..tl], ph);
    b[36..38].copy_from_slice(&c.to_be_bytes());
}

/// Fill the IPv4 header checksum over whatever header length the first
/// byte claims, bounded by the buffer (the header may be garbage on
/// purpose).
fn ip_csum(b: &mut [u8]) {
    if b.len() < 20 {
        return;
    }
    let hl = (((b[0] & 0x0f) as usize) * 4).clamp(20, b.len());
    b[10] = 0;
    b[11] = 0;
    let c = ftnet_wire::checksum::complete(&b[..hl], 0);
    b[10..12].copy_from_slice(&c.to_be_bytes());
}

/// One line about a packet for the trace.
pub fn describe(data: &[u8]) -> String {
    let Ok(ip) = ipv4::Packet::new_checked(data) else { return format!("<{} bytes, not IPv4>", data.len()) };
    let (src, dst) = (ip.src(), ip.dst());
    let Ok(s) = tcp::Segment::new_checked(ip.payload()) else { return format!("{src} > {dst} proto {} len {}", ip.protocol(), data.len()) };
    let f = s.flags();
    let mut fl = String::new();
    for (bit, c) in [(tcp::flags::SYN, 'S'), (tcp::flags::FIN, 'F'), (tcp::flags::RST, 'R'), (tcp::flags::PSH, 'P'), (tcp::flags::ACK, '.')] {
        if f & bit != 0 {
            fl.push(c);
        }
    }
    let mut o = String::new();
    if let Some(m) = s.mss() {
        o += &format!(" mss {m}");
    }
    if let Some(w) = s.wscale() {
        o += &format!(" ws {w}");
    }
    if let Some((v, e)) = s.timestamps() {
        o += &format!(" ts {v}/{e}");
    }
    format!("{src}:{} > {dst}:{} [{fl}] seq {} ack {} win {} len {}{o}", s.src_port(), s.dst_port(), s.seq().0, s.ack().0, s.window(), s.payload_len())
}
