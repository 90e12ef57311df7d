//! Simulated hosts: a smoltcp interface on an in-memory device, plus the
//! application (echo client or echo server) that drives its sockets.

use crate::params::{Close, HostParams};
use rand::rngs::SmallRng;
use rand::Rng;
use smoltcp::iface::{Config as IfConfig, Interface, SocketHandle, SocketSet};
use smoltcp::phy::{self, Device, DeviceCapabilities, Medium};
use smoltcp::socket::tcp::{self, State};
use smoltcp::time::{Duration as SDuration, Instant as SInstant};
use smoltcp::wire::{HardwareAddress, IpAddress, IpCidr, IpEndpoint};
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::Ipv4Addr;

thread_local! {
    /// Virtual time of the run on this thread, for the TSval generators
    /// (smoltcp takes a plain `fn() -> u32`, not a closure).
    static NOW_US: Cell<u64> = const { Cell::new(0) };
}

pub(crate) fn set_now(us: u64) {
    NOW_US.with(|c| c.set(us));
}

fn now_ms() -> u32 {
    NOW_US.with(|c| ftnet_wire::mod32(c.get() / 1000))
}

fn ts0() -> u32 {
    now_ms()
}
fn ts1() -> u32 {
    now_ms().wrapping_add(0x7fff_0000)
}
/// Wraps about 1 s into the run (RFC 7323 §5.2 wrap-around).
fn ts2() -> u32 {
    now_ms().wrapping_add(0xffff_fc00)
}
/// A 10 kHz clock.
fn ts3() -> u32 {
    NOW_US
        .with(|c| ftnet_wire::mod32(c.get() / 100))
        .wrapping_add(123_456_789)
}
fn ts4() -> u32 {
    now_ms().wrapping_add(3_000_000_000)
}

/// TSval generators with different offsets and rates, so that replicas'
/// timestamp clocks differ from each other and from the client's.
pub(crate) const TS_GENS: [fn() -> u32; crate::params::TS_GEN_COUNT] = [ts0, ts1, ts2, ts3, ts4];

/// An in-memory device: the sim pushes received packets into `rx` and
/// drains `tx`.
pub(crate) struct SimDevice {
    pub rx: VecDeque<Vec<u8>>,
    pub tx: Vec<Vec<u8>>,
}

pub(crate) struct RxTok(Vec<u8>);
pub(crate) struct TxTok<'a>(&'a mut Vec<Vec<u8>>);

impl phy::RxToken for RxTok {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(&self.0)
    }
}

impl phy::TxToken for TxTok<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut b = vec![0u8; len];
        let r = f(&mut b);
        self.0.push(b);
        r
    }
}

impl Device for SimDevice {
    type RxToken<'a> = RxTok;
    type TxToken<'a> = TxTok<'a>;

    fn receive(&mut self, _t: SInstant) -> Option<(RxTok, TxTok<'_>)> {
        let p = self.rx.pop_front()?;
        Some((RxTok(p), TxTok(&mut self.tx)))
    }

    fn transmit(&mut self, _t: SInstant) -> Option<TxTok<'_>> {
        Some(TxTok(&mut self.tx))
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut c = DeviceCapabilities::default();
        c.medium = Medium::Ip;
        // smoltcp 0.12 sizes a data segment as `ip_mtu - 40` without
        // counting TCP options and, lacking the fragmentation feature,
        // silently drops the packet when timestamps (12 bytes) push it over
        // the MTU. So the stack gets a large MTU and the host's real MTU is
        // enforced on the wire by clamping the MSS option of its SYNs to
        // `mtu - 52` (see `clamp_mss`): peers then size segments to fit.
        c.max_transmission_unit = 65535;
        c
    }
}

/// One client connection: a seeded byte stream written in random-sized
/// chunks and the echo read back.
pub(crate) struct ClientConn {
    pub handle: SocketHandle,
    pub port: u16,
    pub data: Vec<u8>,
    pub sent: usize,
    pub recvd: Vec<u8>,
    pub close_called: bool,
    /// Went through an orderly closing state (FIN exchange).
    pub orderly: bool,
    pub established: bool,
    /// The socket fell to CLOSED without an orderly close: reset or abort.
    pub reset: bool,
    /// A late connection (`Params::membership`): not connected before the
    /// sim sets a time (`None` until then, and once connected).
    pub start_at: Option<u64>,
    /// Connected (always, but for a late connection that has not started).
    pub started: bool,
}

impl ClientConn {
    /// A connection of `data` from client port `port`, connected at once
    /// (`started`) or when the sim sets its time (a late one).
    fn new(handle: SocketHandle, port: u16, data: Vec<u8>, started: bool) -> ClientConn {
        ClientConn {
            handle,
            port,
            data,
            sent: 0,
            recvd: Vec::new(),
            close_called: false,
            orderly: false,
            established: false,
            reset: false,
            start_at: None,
            started,
        }
    }

    /// Every byte echoed, every byte acknowledged (so the router's min-ACK
    /// moved past any dead replica), and the close finished if any.
    pub fn done(&self, close: Close, state: State, unacked: usize) -> bool {
        self.recvd.len() == self.data.len()
            && self.sent == self.data.len()
            && unacked == 0
            && match close {
                Close::Never => true,
                _ => {
                    self.close_called
                        && matches!(state, State::TimeWait | State::Closed)
                        && !self.reset
                }
            }
    }
}

/// One server socket of a replica.
pub(crate) struct ServerSock {
    pub handle: SocketHandle,
    /// Client port of the connection it accepted.
    pub peer_port: Option<u16>,
    pub rx: Vec<u8>,
    pub pending: VecDeque<u8>,
    pub saw_fin: bool,
    pub close_called: bool,
    /// A connection the server joined with the group's state (issue 15):
    /// `rx` began with the restored bytes of the connection, this many,
    /// and the socket's first byte is the client's byte at this offset.
    pub joined_at: Option<usize>,
}

pub(crate) enum App {
    Client {
        conns: Vec<ClientConn>,
        close: Close,
        max_write: usize,
        /// Connections to a port nobody listens on: (socket, local port).
        refused: Vec<(SocketHandle, u16)>,
        /// Connections the servers close on their own (`Params::desync`):
        /// written like the others, never closed by the client.
        desync: Vec<ClientConn>,
    },
    Server {
        socks: Vec<ServerSock>,
        port: u16,
        /// Client ports of the connections this server closes after
        /// reading `desync_at` bytes (`Params::desync`).
        desync: Vec<u16>,
        desync_at: usize,
        /// State restored from a donor (a join) that no connection has
        /// taken up yet: per client port, the bytes read.
        restored: BTreeMap<u16, Vec<u8>>,
    },
}

pub(crate) struct Host {
    pub name: String,
    pub ip: Ipv4Addr,
    pub iface: Interface,
    pub dev: SimDevice,
    pub sockets: SocketSet<'static>,
    pub alive: bool,
    /// Its server process died and its kernel lives (`CrashKind::Close`):
    /// the sockets it left are closed, later input draws a RST.
    pub exited: bool,
    /// A live join's joiner whose state is not proven yet: its agent holds
    /// its server's input, so the server accepts and reads nothing (its
    /// sockets take what their buffers hold) until it is restored.
    pub held: bool,
    pub params: HostParams,
    pub app: App,
    /// Where the client connects (a late connection connects there too).
    pub server: (Ipv4Addr, u16),
}

fn new_socket(p: &HostParams) -> tcp::Socket<'static> {
    let mut s = tcp::Socket::new(
        tcp::SocketBuffer::new(vec![0u8; p.rx_buf]),
        tcp::SocketBuffer::new(vec![0u8; p.tx_buf]),
    );
    s.set_tsval_generator(p.ts_gen.map(|i| TS_GENS[i]));
    s.set_nagle_enabled(p.nagle);
    s.set_ack_delay(p.ack_delay_ms.map(SDuration::from_millis));
    s
}

impl Host {
    fn new(name: String, ip: Ipv4Addr, params: HostParams, seed: u64, app: App) -> Host {
        let mut dev = SimDevice {
            rx: VecDeque::new(),
            tx: Vec::new(),
        };
        let mut cfg = IfConfig::new(HardwareAddress::Ip);
        cfg.random_seed = seed;
        let mut iface = Interface::new(cfg, &mut dev, SInstant::from_micros(0));
        // 198.18.0.0/15 holds the client, the VIP and every replica, so no
        // route is needed.
        iface.update_ip_addrs(|a| {
            let _ = a.push(IpCidr::new(IpAddress::Ipv4(ip), 15));
        });
        Host {
            name,
            ip,
            iface,
            dev,
            sockets: SocketSet::new(Vec::new()),
            alive: true,
            exited: false,
            held: false,
            params,
            app,
            server: (Ipv4Addr::UNSPECIFIED, 0),
        }
    }

    /// A client with `conns` connections to `server`, each carrying its own
    /// seeded stream of `bytes` bytes.
    #[allow(clippy::too_many_arguments)]
    pub fn client(
        ip: Ipv4Addr,
        params: HostParams,
        seed: u64,
        server: (Ipv4Addr, u16),
        conns: usize,
        bytes: usize,
        close: Close,
        max_write: usize,
        refused_conns: usize,
        desync_conns: usize,
        late: (usize, usize),
        rng: &mut SmallRng,
    ) -> Host {
        let mut h = Host::new(
            "client".into(),
            ip,
            params,
            seed,
            App::Client {
                conns: Vec::new(),
                close,
                max_write,
                refused: Vec::new(),
                desync: Vec::new(),
            },
        );
        h.server = server;
        let base: u16 = rng.gen_range(20000..60000);
        let mut list = Vec::new();
        let mut desync_list = Vec::new();
        for i in 0..conns + desync_conns {
            let port = if i < conns {
                base + u16::try_from(i).expect("a few connections") * 7
            } else {
                base + 5 + u16::try_from(i - conns).expect("a few connections") * 7
            };
            let mut s = new_socket(&h.params);
            s.connect(
                h.iface.context(),
                IpEndpoint::new(IpAddress::Ipv4(server.0), server.1),
                port,
            )
            .expect("connect");
            let handle = h.sockets.add(s);
            let mut data = vec![0u8; bytes];
            rng.fill(&mut data[..]);
            let to = if i < conns {
                &mut list
            } else {
                &mut desync_list
            };
            to.push(ClientConn::new(handle, port, data, true));
        }
        // Late connections (membership changes), drawn after everything
        // else so that the other connections keep their streams. Ports go
        // on where the first connections' left off.
        let (late_n, late_bytes) = late;
        for j in 0..late_n {
            let port = base + u16::try_from(conns + j).expect("a few connections") * 7;
            let handle = h.sockets.add(new_socket(&h.params));
            let mut data = vec![0u8; late_bytes];
            rng.fill(&mut data[..]);
            list.push(ClientConn::new(handle, port, data, false));
        }
        let mut refused_list = Vec::new();
        for i in 0..refused_conns {
            let port = base + 3 + u16::try_from(i).expect("a few connections") * 7;
            let mut s = new_socket(&h.params);
            s.connect(
                h.iface.context(),
                IpEndpoint::new(IpAddress::Ipv4(server.0), server.1 + 1),
                port,
            )
            .expect("connect");
            refused_list.push((h.sockets.add(s), port));
        }
        if let App::Client {
            conns,
            refused,
            desync,
            ..
        } = &mut h.app
        {
            *conns = list;
            *refused = refused_list;
            *desync = desync_list;
        }
        h
    }

    pub fn server(
        name: String,
        ip: Ipv4Addr,
        params: HostParams,
        seed: u64,
        port: u16,
        listeners: usize,
    ) -> Host {
        let mut h = Host::new(
            name,
            ip,
            params,
            seed,
            App::Server {
                socks: Vec::new(),
                port,
                desync: Vec::new(),
                desync_at: 0,
                restored: BTreeMap::new(),
            },
        );
        for _ in 0..listeners {
            h.add_listener();
        }
        h
    }

    fn add_listener(&mut self) {
        let App::Server { socks, port, .. } = &mut self.app else {
            return;
        };
        let mut s = new_socket(&self.params);
        s.listen(*port).expect("listen");
        let handle = self.sockets.add(s);
        socks.push(ServerSock {
            handle,
            peer_port: None,
            rx: Vec::new(),
            pending: VecDeque::new(),
            saw_fin: false,
            close_called: false,
            joined_at: None,
        });
    }

    /// Let the stack process input and timers, then the application, until
    /// nothing changes. Returns an application-level invariant violation.
    pub fn step(&mut self, now_us: u64, rng: &mut SmallRng) -> Result<(), String> {
        let t = SInstant::from_micros(now_us as i64);
        if let App::Client { conns, .. } = &mut self.app {
            for c in conns
                .iter_mut()
                .filter(|c| !c.started && c.start_at.is_some_and(|s| s <= now_us))
            {
                let server = self.server;
                self.sockets
                    .get_mut::<tcp::Socket>(c.handle)
                    .connect(
                        self.iface.context(),
                        IpEndpoint::new(IpAddress::Ipv4(server.0), server.1),
                        c.port,
                    )
                    .map_err(|e| format!("late connection from port {}: {e}", c.port))?;
                c.started = true;
                c.start_at = None;
            }
        }
        for _ in 0..64 {
            self.iface.poll(t, &mut self.dev, &mut self.sockets);
            let progressed = self.run_app(rng)?;
            if !progressed {
                break;
            }
        }
        Ok(())
    }

    /// Returns whether the application moved data or changed a socket.
    fn run_app(&mut self, rng: &mut SmallRng) -> Result<bool, String> {
        let mut progressed = false;
        match &mut self.app {
            App::Client {
                conns,
                close,
                max_write,
                desync,
                ..
            } => {
                let n = conns.len();
                for (ci, c) in conns.iter_mut().chain(desync.iter_mut()).enumerate() {
                    // A late connection not started yet draws nothing, so
                    // that planning one leaves the others' writes as they
                    // were.
                    if !c.started {
                        continue;
                    }
                    // The servers close a desync connection; its client never does.
                    let close = if ci < n { *close } else { Close::Never };
                    let s = self.sockets.get_mut::<tcp::Socket>(c.handle);
                    let st = s.state();
                    match st {
                        State::SynSent | State::Closed | State::Listen => {}
                        State::FinWait1
                        | State::FinWait2
                        | State::Closing
                        | State::TimeWait
                        | State::LastAck => {
                            c.established = true;
                            if c.close_called {
                                c.orderly = true;
                            }
                        }
                        _ => c.established = true,
                    }
                    if st == State::Closed && c.established && !c.orderly && !c.reset {
                        c.reset = true;
                    }
                    // Write a random number of random-sized chunks.
                    let writes = rng.gen_range(1..=4);
                    for _ in 0..writes {
                        if c.sent >= c.data.len() || !s.can_send() {
                            break;
                        }
                        let n = rng.gen_range(1..=*max_write).min(c.data.len() - c.sent);
                        let w = s.send_slice(&c.data[c.sent..c.sent + n]).unwrap_or(0);
                        c.sent += w;
                        progressed |= w > 0;
                        if w < n {
                            break;
                        }
                    }
                    if close == Close::AfterSend && c.sent == c.data.len() && !c.close_called {
                        s.close();
                        c.close_called = true;
                        progressed = true;
                    }
                    while s.can_recv() {
                        let before = c.recvd.len();
                        let _ = s.recv(|b| {
                            c.recvd.extend_from_slice(b);
                            (b.len(), ())
                        });
                        let after = c.recvd.len();
                        if after == before {
                            break;
                        }
                        progressed = true;
                        if after > c.data.len() {
                            return Err(format!("client conn {ci} (port {}): received {after} bytes, more than the {} sent", c.port, c.data.len()));
                        }
                        if c.recvd[before..] != c.data[before..after] {
                            let off = before
                                + c.recvd[before..]
                                    .iter()
                                    .zip(&c.data[before..after])
                                    .position(|(a, b)| a != b)
                                    .unwrap_or(0);
                            return Err(format!(
                                "client conn {ci} (port {}): echo differs from the sent stream at byte {off}: got {:#04x}, sent {:#04x}",
                                c.port, c.recvd[off], c.data[off]
                            ));
                        }
                    }
                    if close == Close::AfterEcho && c.recvd.len() == c.data.len() && !c.close_called
                    {
                        s.close();
                        c.close_called = true;
                        progressed = true;
                    }
                }
            }
            App::Server { .. } if self.held => {}
            App::Server { socks, .. } if self.exited => {
                // Input for a socket its process closed: Linux answers
                // with a RST and forgets the connection.
                for k in socks.iter() {
                    let s = self.sockets.get_mut::<tcp::Socket>(k.handle);
                    if s.is_open() && s.recv_queue() > 0 {
                        s.abort();
                        progressed = true;
                    }
                }
            }
            App::Server {
                socks,
                desync,
                desync_at,
                restored,
                ..
            } => {
                for k in socks.iter_mut() {
                    let s = self.sockets.get_mut::<tcp::Socket>(k.handle);
                    if k.peer_port.is_none() {
                        if let Some(ep) = s.remote_endpoint() {
                            if !matches!(s.state(), State::Listen | State::SynReceived) {
                                k.peer_port = Some(ep.port);
                                // A connection joined with the group's
                                // state: the server's state of it is what
                                // was restored, the socket brings the rest.
                                if let Some(prefix) = restored.remove(&ep.port) {
                                    k.joined_at = Some(prefix.len());
                                    k.rx = prefix;
                                }
                                progressed = true;
                            }
                        }
                    }
                    let corrupt = self.params.corrupt_echo_at;
                    let cut = k
                        .peer_port
                        .is_some_and(|p| desync.contains(&p))
                        .then_some(*desync_at);
                    while s.can_recv() {
                        let room = cut.map_or(usize::MAX, |c| c.saturating_sub(k.rx.len()));
                        if room == 0 {
                            break;
                        }
                        let mut got = 0;
                        let _ = s.recv(|b| {
                            let b = &b[..b.len().min(room)];
                            let start = k.rx.len();
                            k.rx.extend_from_slice(b);
                            k.pending.extend(b.iter().enumerate().map(|(j, &x)| {
                                if corrupt == Some(start + j) {
                                    x ^ 0x20
                                } else {
                                    x
                                }
                            }));
                            got = b.len();
                            (b.len(), ())
                        });
                        if got == 0 {
                            break;
                        }
                        progressed = true;
                    }
                    while !k.pending.is_empty() && s.can_send() {
                        let (a, b) = k.pending.as_slices();
                        let chunk = if a.is_empty() { b } else { a };
                        let w = s.send_slice(chunk).unwrap_or(0);
                        if w == 0 {
                            break;
                        }
                        k.pending.drain(..w);
                        progressed = true;
                    }
                    if let Some(c) = cut {
                        // A server closing a client on its own, as Linux
                        // carries it out: unread input makes the close a
                        // RST, and so does input that comes after it.
                        if !k.close_called && k.rx.len() >= c && k.pending.is_empty() {
                            if s.recv_queue() > 0 {
                                s.abort();
                            } else {
                                s.close();
                            }
                            k.close_called = true;
                            progressed = true;
                        } else if k.close_called && s.is_open() && s.recv_queue() > 0 {
                            s.abort();
                            progressed = true;
                        }
                        continue;
                    }
                    if k.peer_port.is_some()
                        && !s.may_recv()
                        && !k.saw_fin
                        && matches!(
                            s.state(),
                            State::CloseWait | State::LastAck | State::Closing | State::TimeWait
                        )
                    {
                        k.saw_fin = true;
                        progressed = true;
                    }
                    if k.saw_fin && k.pending.is_empty() && !k.close_called {
                        s.close();
                        k.close_called = true;
                        progressed = true;
                    }
                }
                // Keep eight sockets listening so that later (and bogus)
                // connections still find one, as a Linux listener's backlog
                // does: a join's pause releases the SYNs it held at once;
                // bounded so a SYN flood in the fuzz test cannot grow it
                // without limit.
                let listening = socks
                    .iter()
                    .filter(|k| self.sockets.get::<tcp::Socket>(k.handle).state() == State::Listen)
                    .count();
                if listening < 8 && socks.len() < 64 {
                    self.add_listener();
                    progressed = true;
                }
            }
        }
        Ok(progressed)
    }

    /// The server process exits (`CrashKind::Close`): each socket is
    /// closed as Linux closes a dead process's sockets — with a RST where
    /// unread input waits, else with a FIN after what was written — and
    /// the listeners go (a SYN then draws a RST). What the server had read
    /// but not written yet dies with it.
    pub fn exit_app(&mut self) {
        self.exited = true;
        let App::Server { socks, .. } = &mut self.app else {
            return;
        };
        for k in socks.iter_mut() {
            k.pending.clear();
            let s = self.sockets.get_mut::<tcp::Socket>(k.handle);
            if s.recv_queue() > 0 {
                s.abort();
            } else {
                s.close();
            }
            k.close_called = true;
        }
    }

    /// Abort every socket (RSTs go out on the next poll).
    pub fn abort_all(&mut self) {
        for (_, s) in self.sockets.iter_mut() {
            let smoltcp::socket::Socket::Tcp(t) = s;
            t.abort();
        }
    }

    /// Clamp the MSS option of an outgoing SYN to what this host's link
    /// MTU carries with 12 bytes of timestamp option (see `capabilities`).
    pub fn clamp_mss(&self, pkt: &mut [u8]) {
        let Ok(ip) = ftnet_wire::ipv4::Packet::new_checked(&mut pkt[..]) else {
            return;
        };
        let hl = ip.header_len();
        let tl = ip.total_len();
        let Ok(mut seg) = ftnet_wire::tcp::Segment::new_checked(&mut pkt[hl..tl]) else {
            return;
        };
        let want = u16::try_from(self.params.mtu - 52).unwrap_or(u16::MAX);
        if seg.syn() && seg.mss().is_some_and(|m| m > want) {
            seg.set_mss(want, ftnet_wire::tcp::CsumMode::Complete);
        }
    }

    pub fn poll_at(&mut self, now_us: u64) -> Option<u64> {
        let t = SInstant::from_micros(now_us as i64);
        let stack = self
            .iface
            .poll_at(t, &self.sockets)
            .map(|i| i.total_micros().max(0) as u64);
        let late = match &self.app {
            App::Client { conns, .. } => conns.iter().filter_map(|c| c.start_at).min(),
            App::Server { .. } => None,
        };
        match (stack, late) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub fn state(&self, h: SocketHandle) -> State {
        self.sockets.get::<tcp::Socket>(h).state()
    }

    pub fn send_queue(&self, h: SocketHandle) -> usize {
        self.sockets.get::<tcp::Socket>(h).send_queue()
    }

    /// The echo server's application state (what a join checkpoints and
    /// restores): per client port, every byte the server read of that
    /// connection, in order, for each connection that brought any input,
    /// open or closed, plus restored state no connection took up yet. The
    /// simulated servers have no shim: they read each connection as its
    /// bytes arrive, not in the sequencer's order across connections, so
    /// the state is keyed by connection, not one interleaved log.
    pub fn app_state(&self) -> BTreeMap<u16, Vec<u8>> {
        let App::Server {
            socks, restored, ..
        } = &self.app
        else {
            return BTreeMap::new();
        };
        let mut m: BTreeMap<u16, Vec<u8>> = restored
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(p, v)| (*p, v.clone()))
            .collect();
        for k in socks {
            if let (Some(p), false) = (k.peer_port, k.rx.is_empty()) {
                m.insert(p, k.rx.clone());
            }
        }
        m
    }

    /// Output the server produced that has not left as acknowledged
    /// bytes: waiting in the application (like a reply in Redis's output
    /// buffer, which the real adapter's `CLIENT LIST` check refuses) or in
    /// a socket's send queue (unsent or unacknowledged).
    pub fn output_pending(&self) -> usize {
        let App::Server { socks, .. } = &self.app else {
            return 0;
        };
        socks
            .iter()
            .filter(|k| k.peer_port.is_some())
            .map(|k| {
                let s = self.sockets.get::<tcp::Socket>(k.handle);
                k.pending.len() + s.send_queue()
            })
            .sum()
    }

    /// Whether the server took input: a connection accepted, or state
    /// restored (a fresh server has done neither).
    pub fn took_input(&self) -> bool {
        match &self.app {
            App::Server {
                socks, restored, ..
            } => !restored.is_empty() || socks.iter().any(|k| k.peer_port.is_some()),
            _ => true,
        }
    }

    /// Load `state` into the server (a join's restore).
    pub fn restore(&mut self, state: BTreeMap<u16, Vec<u8>>) {
        if let App::Server { restored, .. } = &mut self.app {
            *restored = state;
        }
    }

    /// How far into the client's stream of the connection from `cport` this
    /// server's kernel has received (what its server read, restored bytes
    /// of a joined connection included, plus what waits in the socket, plus
    /// the client's FIN once it came).
    pub fn received(&self, cport: u16) -> Option<usize> {
        let App::Server { socks, .. } = &self.app else {
            return None;
        };
        let k = socks.iter().find(|k| k.peer_port == Some(cport))?;
        let s = self.sockets.get::<tcp::Socket>(k.handle);
        // The client's FIN counts (sequence space): a router that took
        // over knows no FIN and may number up to a replica's ACK of it (a
        // shim takes a closed connection's last chunk as complete).
        let fin = usize::from(k.saw_fin || (!s.may_recv() && s.state() != tcp::State::Listen));
        Some(k.rx.len() + s.recv_queue() + fin)
    }

    /// Server sockets by client port (only those that accepted a
    /// connection).
    pub fn by_peer(&self) -> HashMap<u16, &ServerSock> {
        match &self.app {
            App::Server { socks, .. } => socks
                .iter()
                .filter_map(|k| k.peer_port.map(|p| (p, k)))
                .collect(),
            _ => HashMap::new(),
        }
    }
}
