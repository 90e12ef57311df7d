//! The router–agent control protocol, sans-IO.
//!
//! One TCP connection per agent, opened by the agent. Frames are a 4-byte
//! big-endian length and a JSON message (easy to read in a capture; the rate
//! is tens of messages per second per agent plus one record per connection).
//!
//! ```text
//! agent                                   router
//!   Hello{replica, agent_nonce}  ───────▶  replica configured?
//!                                ◀───────  Challenge{router_nonce}
//!   Auth{mac_a}                  ───────▶  mac_a = HMAC(secret, "agent"|rn|an|replica)?
//!                                ◀───────  Welcome{mac_r, heartbeat_ms, dead_after_ms}
//!   (mac_r = HMAC(secret, "router"|an|rn|replica): the agent checks the router too)
//!   Heartbeat{seq} every heartbeat_ms ──▶  silent for dead_after_ms ⇒ the replica's host is lost
//!   (router silent for router_silence(…) ⇒ the agent looks for the router anew: a new master)
//!                                ◀───────  HeartbeatAck{seq}; ConnOpen{record}; ConnClose{key}
//!   Stored{ids}                  ───────▶  the records are kept: the SYN-ACKs held for them go out
//! ```
//!
//! Both sides keep a nonce of their own in the MAC, so a recorded exchange
//! cannot be replayed to either.
//!
//! Every frame after the `Welcome` (both ways) is **sealed**: its JSON is
//! followed by a 32-byte HMAC-SHA256 tag under the session's key (derived
//! from the secret and both nonces, so it is new in every session) over the
//! direction, the frame's number in that direction and the JSON
//! ([`Sealer`], [`Decoder::expect_sealed`]). A frame forged by anyone on the
//! path, replayed from this or another session, reordered or cut fails its
//! tag: the receiver closes the connection ([`FrameError::Forged`]) and the
//! router counts it. (The frames are authenticated, not encrypted: what
//! they say is the connections' addresses and sequence numbers.) A peer that fails any step gets
//! `Reject{reason}` and the connection is closed; the reason is what the
//! router logs. The sessions take the time and the nonces as arguments and
//! return messages to send: no I/O, no clock, no randomness here (the
//! same pattern as `ftnet-core`).
//!
//! Designed for the router's recovery (issue "Router high availability"):
//! the agent keeps every [`ConnRecord`] the router sent it, which is what a
//! new router needs to rebuild a connection that the next packets alone
//! cannot tell it (ISNs, the replica's sequence offset, timestamp bases).

#![forbid(unsafe_code)]

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::time::Duration;

/// The vocabulary shared with the router's core, one type each from end to
/// end: the connection's key, its record, the sequencer's numbered input
/// and an agent's report of where the order stands, who is out of service.
pub use ftnet_core::{
    AgentMsg, ConnKey, ConnRecord, InputKind, NumberedInput, OrderReport, OutOfService,
    ReplicaSetup,
};

/// A duration in whole milliseconds, saturating (the protocol's times are
/// milliseconds in a u64).
fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Protocol version; a different one is rejected with a clear reason.
/// 3: `OutOfService`; 4: `OrderLost` and `Shims` (a replica whose server
/// lost the order leaves); 5: the core's types on the wire (one record with
/// every replica's part, `key` for a connection, `InputKind::Data { end }`);
/// 6: joins (`Checkpoint`, `State`, `Restored`, `StateFailed`, `JoinEnded`);
/// 7: `Restart` (a stale server of a replica out of service is ended);
/// 8: `Snapshot` (a join's donor fixed its checkpoint: the input resumes
/// while the state travels); 9: every frame after the `Welcome` sealed
/// ([`Sealer`]).
pub const VERSION: u32 = 9;
/// Largest frame accepted (a connection record is ~300 bytes; an order
/// report is ~10 KB per service port).
pub const MAX_FRAME: usize = 256 * 1024;

/// Longest host name an agent may announce (a DNS name is at most 253).
pub const MAX_HOST: usize = 255;

/// Connection records per `Records` message: each is under 300 bytes of
/// JSON, so a message stays well inside [`MAX_FRAME`].
pub const RECORDS_PER_MSG: usize = 128;

/// Connection ids per `Stored` message (about 70 bytes of JSON each).
pub const STORED_PER_MSG: usize = 1024;

/// Events of the tail an agent reports per service port: more than the
/// agents can be apart when a router dies (each agent's writer is at most
/// a few events behind another's), and inside [`MAX_FRAME`] for several
/// service ports.
pub const ORDER_TAIL: usize = 96;

/// The agent's memory of the input order (kept across reconnections): per
/// service port the last events it passed on. (The router sends an agent
/// no event before it has its report, and replays what the agent missed
/// before anything newer: the events arrive in order.)
#[derive(Debug, Default)]
pub struct OrderLog {
    ports: HashMap<(Ipv4Addr, u16), (u64, std::collections::VecDeque<NumberedInput>)>,
}

impl OrderLog {
    /// An event passed on to the shim.
    pub fn note(&mut self, ev: NumberedInput) {
        let (last, tail) = self.ports.entry((ev.key.vip, ev.key.vport)).or_default();
        if ev.seq <= *last {
            // A router numbered afresh without this agent's report.
            tail.clear();
        }
        *last = ev.seq;
        tail.push_back(ev);
        while tail.len() > ORDER_TAIL {
            tail.pop_front();
        }
    }

    /// What the agent reports on registering.
    pub fn report(&self) -> Vec<OrderReport> {
        let mut v: Vec<OrderReport> = self
            .ports
            .iter()
            .map(|(&(vip, vport), (last, tail))| OrderReport {
                vip,
                vport,
                last_seq: *last,
                tail: tail.iter().copied().collect(),
            })
            .collect();
        v.sort_by_key(|o| (o.vip, o.vport));
        v
    }
}

/// Every message on the control connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Msg {
    Hello {
        version: u32,
        replica: Ipv4Addr,
        host: String,
        nonce: String,
    },
    Challenge {
        nonce: String,
    },
    Auth {
        mac: String,
    },
    Welcome {
        mac: String,
        heartbeat_ms: u64,
        dead_after_ms: u64,
        /// How often the services' orders get a clock tick (0: none: the
        /// servers keep the kernel's time).
        #[serde(default)]
        tick_ms: u64,
    },
    Reject {
        reason: String,
    },
    Heartbeat {
        seq: u64,
        records: u64,
    },
    HeartbeatAck {
        seq: u64,
    },
    ConnOpen {
        record: ConnRecord,
    },
    ConnClose {
        key: ConnKey,
    },
    /// Agent → router: the records of these connections (`ConnOpen`) are
    /// stored. The router holds each connection's SYN-ACK until every live
    /// replica's agent said so (output commit), so that a router that dies
    /// never leaves a client with a connection its successor cannot find.
    Stored {
        keys: Vec<ConnKey>,
    },
    /// Agent → router, right after `Welcome` (in as many messages as the
    /// frame size needs): every connection record the agent holds, so that
    /// a router that starts or takes over rebuilds its table.
    Records {
        records: Vec<ConnRecord>,
    },
    /// Agent → router, right after `Welcome`, before `Records`: where the
    /// input order stands at this agent, per service port (empty: it never
    /// got an event). A router that takes over numbers on from there.
    Order {
        services: Vec<OrderReport>,
    },
    /// Router → agent: every replica out of service (complete, every
    /// service), sent on registering and whenever it changes; the agent
    /// keeps it across routers. Agent → router, right after `Welcome`,
    /// before `Order` and `Records`: what it kept, so that a router that
    /// starts or takes over never readmits a replica that left the group
    /// under the router before.
    OutOfService {
        down: Vec<OutOfService>,
    },
    /// The sequencer's `seq`-th input event of a service (router → agent →
    /// the replica's shim): `kind` accept or data (with the chunk's end
    /// offset in the client's stream).
    Input {
        seq: u64,
        key: ConnKey,
        kind: InputKind,
    },
    /// Agent → router: the replica's server can no longer get the router's
    /// exact input order (the agent could not pass every event on, the shim
    /// lost its agent socket or fell back to the kernel's order). The router
    /// takes the replica out of the group at once; the agent says it again
    /// to every router it registers with later.
    OrderLost {
        reason: String,
    },
    /// Agent → router, its last message on a session it gives up (the
    /// router was silent for the agent's limit, perhaps only held): it
    /// registers again at once, and its servers keep their place in the
    /// order. The router waits up to `dead_after` for that registration
    /// before it counts the order lost to those servers (the new session's
    /// `Order` report brings them up to date from the router's log, or
    /// loses the order loudly there).
    Reconnecting {},
    /// Agent → router: how many servers on the replica host follow the input
    /// order through this agent (sent on registering and whenever it
    /// changes). While it is not zero, the agent's connection ending means
    /// those servers lost the order: the replica leaves the group.
    Shims {
        count: u32,
    },
    /// Router → the donor's and the joiner's agents: a replica joins a
    /// service (`ftnet_core::AgentMsg::Checkpoint`). The donor waits until
    /// its server applied input event `seq`, checkpoints the server's state
    /// and sends it in `State` pieces; the joiner restores it.
    Checkpoint {
        join: u64,
        vip: Ipv4Addr,
        ports: Vec<u16>,
        seq: u64,
        donor: Ipv4Addr,
        joiner: Ipv4Addr,
    },
    /// Donor's agent → router → joiner's agent: the next piece of the
    /// checkpointed state (hex, at most [`STATE_CHUNK`] bytes before
    /// encoding), in order, the last one marked; then, from the donor's
    /// agent to the router only, a piece with no data and the state's
    /// digest (computed while the joiner restores).
    State {
        join: u64,
        data: String,
        last: bool,
        digest: Option<String>,
    },
    /// Joiner's agent → router: the state is restored; its server's
    /// digest now (the router compares it with the donor's).
    Restored {
        join: u64,
        digest: String,
    },
    /// Donor's agent → router: the checkpoint is fixed at the join's
    /// input event (its server forked, or saved); the service's input
    /// may resume while the state is written and sent.
    Snapshot {
        join: u64,
    },
    /// Either agent → router: its part of the join failed.
    StateFailed {
        join: u64,
        reason: String,
    },
    /// Router → the donor's and joiner's agents: the join ended.
    JoinEnded {
        join: u64,
        ok: bool,
    },
    /// Router → an agent whose replica is out of service in a stateful
    /// service that another replica still serves, while its servers follow
    /// the order (they ran while it was out, and missed input: stale). The
    /// agent ends them, so that their supervisor (`ftnet run --supervise`,
    /// systemd) starts them afresh and they join with the group's state.
    Restart {
        reason: String,
    },
}

/// Raw bytes of state per `State` message (hex doubles them; the frame
/// stays inside [`MAX_FRAME`]).
pub const STATE_CHUNK: usize = 96 * 1024;

/// Size of one input record on the agent → shim Unix socket.
pub const SHIM_RECORD: usize = 24;

/// The agent → shim record (the shim's `order::decode` reads it): `seq` u64
/// LE, client IPv4 in network order, client port u16 LE, service port u16
/// LE, kind u8 (1 accept, 2 data, 3 join, 6 clock tick: bytes 17..24 the
/// time in µs, the key the service's; 8 the client's reset under safe
/// delivery), flags u8, 2 zero bytes, end u32 LE. An accept carries the client's ISN in `end` with flags 1 where the
/// agent knows it (`isn`, from the connection's record): it tells a
/// client's new connection from a reused port from the same accept said
/// again by a router that took over. Other kinds ignore `isn`.
pub fn shim_record(ev: &NumberedInput, isn: Option<u32>) -> [u8; SHIM_RECORD] {
    let mut b = [0u8; SHIM_RECORD];
    b[0..8].copy_from_slice(&ev.seq.to_le_bytes());
    b[8..12].copy_from_slice(&ev.key.client.octets());
    b[12..14].copy_from_slice(&ev.key.cport.to_le_bytes());
    b[14..16].copy_from_slice(&ev.key.vport.to_le_bytes());
    let (kind, end) = match ev.kind {
        InputKind::Accept => {
            b[17] = u8::from(isn.is_some());
            (1, isn.unwrap_or(0))
        }
        InputKind::Data { end } => (2, end),
        InputKind::Join { base } => (3, base),
        InputKind::Reset => (8, 0),
        InputKind::Tick { at_us } => {
            // The service's port names the service; 56 bits of µs.
            b[8..14].fill(0);
            b[16] = 6;
            b[17..24].copy_from_slice(&at_us.min(SHIM_TIME_MAX).to_le_bytes()[..7]);
            return b;
        }
    };
    b[16] = kind;
    b[20..24].copy_from_slice(&end.to_le_bytes());
    b
}

/// The time a server under the shim sees before its first clock tick
/// (2026-01-01T00:00:00Z, ms since the Unix epoch): the same on every
/// replica whenever each started, so that what a server does with the time
/// as it starts (Redis seeds its random generators with it and its pid) is
/// the same everywhere. The first tick, within `tick_ms` of its first wait,
/// moves it to the router's clock.
pub const SHIM_EPOCH_MS: u64 = 1_767_225_600_000;

/// The largest time a tick record carries (56 bits of µs: year 4253).
pub const SHIM_TIME_MAX: u64 = (1 << 56) - 1;

/// The seed of the servers' random bytes (`getrandom`, `/dev/urandom`
/// under the shim): the same on every replica of the group, and across
/// router takeovers, because every agent derives it from the group's
/// shared secret (HMAC-SHA256 with a label of its own, so it reveals
/// nothing of the secret).
pub fn shim_seed(secret: &[u8]) -> [u8; 16] {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(secret).expect("HMAC takes any key length");
    m.update(b"ftnet shim seed v1");
    let d = m.finalize().into_bytes();
    let mut s = [0u8; 16];
    s.copy_from_slice(&d[..16]);
    s
}

/// The agent → shim hello (kind 7, not part of the order), the first
/// record a shim gets: the seed of its server's random bytes (bytes
/// 0..16), flags (bit 0: the order carries clock ticks, so the shim gives
/// its server the ticks' time), and the time before the first tick in ms
/// since the Unix epoch (48 bits LE, bytes 18..24).
pub fn shim_hello(seed: &[u8; 16], tick_ms: u64, epoch_ms: u64) -> [u8; SHIM_RECORD] {
    let mut b = [0u8; SHIM_RECORD];
    b[0..16].copy_from_slice(seed);
    b[16] = 7;
    b[17] = u8::from(tick_ms > 0);
    b[18..24].copy_from_slice(&epoch_ms.min((1 << 48) - 1).to_le_bytes()[..6]);
    b
}

/// The agent → shim record that asks the shim where it stands (kind 4,
/// not part of the order): it answers `P <id> <last> <queued>`.
pub fn shim_query(id: u64) -> [u8; SHIM_RECORD] {
    let mut b = [0u8; SHIM_RECORD];
    b[0..8].copy_from_slice(&id.to_le_bytes());
    b[16] = 4;
    b
}

/// The agent → shim record that says the agent holds the server's input
/// (`on`, a join until the state is proven) or no longer does (kind 5, not
/// part of the order): meanwhile the shim hands out no connection whose
/// accept event has not come.
pub fn shim_hold(on: bool) -> [u8; SHIM_RECORD] {
    let mut b = [0u8; SHIM_RECORD];
    b[16] = 5;
    b[17] = u8::from(on);
    b
}

/// The bytes a hex string (from [`Msg::State`]) stands for.
pub fn state_unhex(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    if b.len() % 2 != 0 {
        return None;
    }
    let v = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    b.chunks(2)
        .map(|p| Some((v(p[0])? << 4) | v(p[1])?))
        .collect()
}

/// `bytes` as lower-case hex (the `State` message's encoding).
pub fn state_hex(bytes: &[u8]) -> String {
    const D: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(D[usize::from(b >> 4)]));
        out.push(char::from(D[usize::from(b & 15)]));
    }
    out
}

/// The replicas whose agents a core message is for (`None`: every agent;
/// `OutOfService` is kept by all of them, for the next router).
pub fn addressees(msg: &AgentMsg) -> Option<Vec<Ipv4Addr>> {
    match msg {
        AgentMsg::Established { record } => Some(record.addrs()),
        AgentMsg::Forgotten { replicas, .. } | AgentMsg::Input { replicas, .. } => {
            Some(replicas.clone())
        }
        AgentMsg::OutOfService { .. } => None,
        AgentMsg::Checkpoint { donor, joiner, .. } => Some(vec![*donor, *joiner]),
        AgentMsg::JoinEnded { replicas, .. } => Some(replicas.clone()),
        AgentMsg::Restart { replica, .. } => Some(vec![*replica]),
    }
}

/// The control message that carries a core message to an agent (the one
/// place the two meet: the router's binary and the simulation both use it).
pub fn to_agent(msg: &AgentMsg) -> Msg {
    match msg {
        AgentMsg::Established { record } => Msg::ConnOpen {
            record: record.clone(),
        },
        AgentMsg::Forgotten { key, .. } => Msg::ConnClose { key: *key },
        AgentMsg::Input { seq, key, kind, .. } => Msg::Input {
            seq: *seq,
            key: *key,
            kind: *kind,
        },
        AgentMsg::OutOfService { down } => Msg::OutOfService { down: down.clone() },
        AgentMsg::Checkpoint {
            join,
            vip,
            ports,
            seq,
            donor,
            joiner,
        } => Msg::Checkpoint {
            join: *join,
            vip: *vip,
            ports: ports.clone(),
            seq: *seq,
            donor: *donor,
            joiner: *joiner,
        },
        AgentMsg::JoinEnded { join, ok, .. } => Msg::JoinEnded {
            join: *join,
            ok: *ok,
        },
        AgentMsg::Restart { reason, .. } => Msg::Restart {
            reason: reason.clone(),
        },
    }
}

/// Framing errors: the peer is broken or hostile; close the connection.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("frame of {0} bytes is larger than {MAX_FRAME}")]
    TooLarge(usize),
    #[error("malformed message: {0}")]
    Malformed(String),
    #[error("frame {0} of the session failed its authentication tag (forged, replayed, reordered or cut on the way)")]
    Forged(u64),
}

/// Bytes of a sealed frame's tag (HMAC-SHA256).
pub const TAG: usize = 32;

/// The router → agent direction, in a frame's tag.
const TO_AGENT: &str = "router->agent";
/// The agent → router direction, in a frame's tag.
const TO_ROUTER: &str = "agent->router";

/// One direction of a session's sealed frames: the session's key, the
/// direction and how many frames went that way.
#[derive(Clone)]
pub struct FrameKey {
    key: [u8; 32],
    dir: &'static str,
    count: u64,
}

impl std::fmt::Debug for FrameKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        write!(f, "FrameKey({} #{})", self.dir, self.count)
    }
}

impl FrameKey {
    fn mac(&self, body: &[u8]) -> Hmac<Sha256> {
        let mut m =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.key).expect("HMAC takes any key length");
        m.update(b"ftnet-frame-v1");
        m.update(self.dir.as_bytes());
        m.update(&self.count.to_be_bytes());
        m.update(body);
        m
    }
}

/// The session key both ends derive once the agent proved the secret and
/// the router answered: an HMAC of the secret over both nonces and the
/// replica, so no two sessions share one.
fn session_key(
    secret: &[u8],
    agent_nonce: &str,
    router_nonce: &str,
    replica: Ipv4Addr,
) -> [u8; 32] {
    let mut k = [0u8; 32];
    k.copy_from_slice(
        &mac(secret, "session", agent_nonce, router_nonce, replica)
            .finalize()
            .into_bytes(),
    );
    k
}

/// A session's frame keys as one end sees them: what it sends with and
/// what it receives with.
#[derive(Debug, Clone)]
pub struct FrameKeys {
    pub send: FrameKey,
    pub recv: FrameKey,
}

fn frame_keys(key: [u8; 32], router: bool) -> FrameKeys {
    let (send, recv) = if router {
        (TO_AGENT, TO_ROUTER)
    } else {
        (TO_ROUTER, TO_AGENT)
    };
    FrameKeys {
        send: FrameKey {
            key,
            dir: send,
            count: 0,
        },
        recv: FrameKey {
            key,
            dir: recv,
            count: 0,
        },
    }
}

/// Encodes frames, sealed once the session has its key. The router arms
/// it with [`Sealer::seal_after_welcome`]: its `Welcome` goes out plain and
/// everything after it sealed; the agent, which has seen the `Welcome`,
/// seals from then on ([`Sealer::seal`]).
#[derive(Debug, Default)]
pub struct Sealer {
    key: Option<FrameKey>,
    armed: Option<FrameKey>,
}

impl Sealer {
    /// Seal every frame from now on.
    pub fn seal(&mut self, key: FrameKey) {
        self.key = Some(key);
        self.armed = None;
    }

    /// Seal every frame after the next `Welcome` encoded.
    pub fn seal_after_welcome(&mut self, key: FrameKey) {
        if self.key.is_none() {
            self.armed = Some(key);
        }
    }

    pub fn is_sealing(&self) -> bool {
        self.key.is_some()
    }

    /// One message as a frame.
    pub fn encode(&mut self, msg: &Msg) -> Vec<u8> {
        let body = serde_json::to_vec(msg).unwrap_or_default();
        let frame = match &mut self.key {
            None => frame(&body, None),
            Some(k) => {
                let tag = k.mac(&body).finalize().into_bytes();
                k.count += 1;
                frame(&body, Some(&tag))
            }
        };
        if matches!(msg, Msg::Welcome { .. }) {
            if let Some(k) = self.armed.take() {
                self.key = Some(k);
            }
        }
        frame
    }
}

fn frame(body: &[u8], tag: Option<&[u8]>) -> Vec<u8> {
    let n = body.len() + tag.map_or(0, <[u8]>::len);
    let mut out = Vec::with_capacity(4 + n);
    out.extend_from_slice(&u32::try_from(n).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(body);
    if let Some(t) = tag {
        out.extend_from_slice(t);
    }
    out
}

/// Encode one message as an unsealed frame (the handshake's).
pub fn encode(msg: &Msg) -> Vec<u8> {
    frame(&serde_json::to_vec(msg).unwrap_or_default(), None)
}

/// Accumulates bytes from the socket and yields whole messages.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
    key: Option<FrameKey>,
}

impl Decoder {
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Every frame from the next one on must carry a valid tag under `key`.
    pub fn expect_sealed(&mut self, key: FrameKey) {
        self.key = Some(key);
    }

    pub fn is_sealed(&self) -> bool {
        self.key.is_some()
    }

    /// The next complete message, `Ok(None)` if more bytes are needed.
    pub fn next_msg(&mut self) -> Result<Option<Msg>, FrameError> {
        if self.buf.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize;
        if len > MAX_FRAME {
            return Err(FrameError::TooLarge(len));
        }
        if self.buf.len() < 4 + len {
            return Ok(None);
        }
        let mut body = &self.buf[4..4 + len];
        if let Some(k) = &mut self.key {
            // Checked before a byte of it is parsed.
            let Some(cut) = len.checked_sub(TAG) else {
                return Err(FrameError::Forged(k.count));
            };
            let (b, tag) = body.split_at(cut);
            if k.mac(b).verify_slice(tag).is_err() {
                return Err(FrameError::Forged(k.count));
            }
            k.count += 1;
            body = b;
        }
        let msg = serde_json::from_slice(body).map_err(|e| FrameError::Malformed(e.to_string()));
        self.buf.drain(..4 + len);
        msg.map(Some)
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() & 1 == 1 || s.len() > 128 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn mac(secret: &[u8], role: &str, first: &str, second: &str, replica: Ipv4Addr) -> Hmac<Sha256> {
    // new_from_slice accepts keys of any length for HMAC.
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(secret).expect("HMAC takes any key length");
    for part in [
        "ftnet-control-v1",
        role,
        first,
        second,
        &replica.to_string(),
    ] {
        m.update(&u32::try_from(part.len()).unwrap_or(u32::MAX).to_be_bytes());
        m.update(part.as_bytes());
    }
    m
}

fn sign(secret: &[u8], role: &str, first: &str, second: &str, replica: Ipv4Addr) -> String {
    hex(&mac(secret, role, first, second, replica)
        .finalize()
        .into_bytes())
}

/// Constant-time check of a peer's MAC.
fn verify(
    secret: &[u8],
    role: &str,
    first: &str,
    second: &str,
    replica: Ipv4Addr,
    given: &str,
) -> bool {
    match unhex(given) {
        Some(b) => mac(secret, role, first, second, replica)
            .verify_slice(&b)
            .is_ok(),
        None => false,
    }
}

/// Timing of the heartbeats, chosen by the router and told to the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heartbeats {
    pub every: Duration,
    pub dead_after: Duration,
    /// What the router's `Welcome` says of the servers' clock: how often
    /// each service's order gets a clock tick (0: none).
    pub tick_ms: u64,
}

impl Default for Heartbeats {
    fn default() -> Self {
        Heartbeats {
            every: Duration::from_millis(100),
            dead_after: Duration::from_millis(500),
            tick_ms: 0,
        }
    }
}

/// What happened on a router-side session, for the router to act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouterEvent {
    /// The agent proved the secret; its replica is registered.
    Registered { replica: Ipv4Addr, host: String },
    /// The peer was refused (reason logged); close the connection.
    Rejected { reason: String },
    /// An authenticated agent fell silent: its host is lost.
    Lost { replica: Ipv4Addr, silent: Duration },
    /// The agent gives this session up and registers again at once
    /// ([`Msg::Reconnecting`]).
    Reconnecting { replica: Ipv4Addr },
    /// The agent's connection records (after registering).
    Records {
        replica: Ipv4Addr,
        records: Vec<ConnRecord>,
    },
    /// Where the input order stands at the agent (after registering).
    Order {
        replica: Ipv4Addr,
        services: Vec<OrderReport>,
    },
    /// The agent stored these connections' records.
    Stored {
        replica: Ipv4Addr,
        keys: Vec<ConnKey>,
    },
    /// The replica's server lost the input order: take it out of the group.
    OrderLost { replica: Ipv4Addr, reason: String },
    /// How many servers follow the order through this agent.
    Shims { replica: Ipv4Addr, count: u32 },
    /// The replicas out of service as the router before told the agent
    /// (after registering, before `Order` and `Records`).
    OutOfService {
        replica: Ipv4Addr,
        down: Vec<OutOfService>,
    },
    /// A piece of a join's state from the donor's agent (to relay).
    State {
        replica: Ipv4Addr,
        join: u64,
        data: String,
        last: bool,
        digest: Option<String>,
    },
    /// The joiner's agent restored the state.
    Restored {
        replica: Ipv4Addr,
        join: u64,
        digest: String,
    },
    /// The donor's agent fixed the checkpoint.
    Snapshot { replica: Ipv4Addr, join: u64 },
    /// An agent's part of a join failed.
    StateFailed {
        replica: Ipv4Addr,
        join: u64,
        reason: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum RState {
    AwaitHello,
    AwaitAuth {
        replica: Ipv4Addr,
        host: String,
        agent_nonce: String,
    },
    Live {
        replica: Ipv4Addr,
    },
    Closed,
}

/// The router's side of one agent connection. Time is milliseconds on any
/// monotonic clock the caller keeps.
#[derive(Debug)]
pub struct RouterSession {
    secret: Vec<u8>,
    nonce: String,
    hb: Heartbeats,
    state: RState,
    last_heard_ms: u64,
    opened_ms: u64,
    keys: Option<FrameKeys>,
    /// When `on_timeout` last ran: a gap in those calls is this side not
    /// running, not the agent's silence.
    checked_ms: u64,
}

impl RouterSession {
    /// `nonce`: 16 fresh random bytes from the caller.
    pub fn new(secret: &[u8], nonce: [u8; 16], hb: Heartbeats, now_ms: u64) -> RouterSession {
        RouterSession {
            secret: secret.to_vec(),
            nonce: hex(&nonce),
            hb,
            state: RState::AwaitHello,
            last_heard_ms: now_ms,
            opened_ms: now_ms,
            keys: None,
            checked_ms: now_ms,
        }
    }

    /// The session's frame keys, once the agent proved the secret and was
    /// welcomed: the `Welcome` is the last plain frame the router sends
    /// ([`Sealer::seal_after_welcome`]), the `Auth` the last it takes.
    pub fn frame_keys(&self) -> Option<FrameKeys> {
        self.keys.clone()
    }

    /// The registered replica, once authenticated.
    pub fn replica(&self) -> Option<Ipv4Addr> {
        match self.state {
            RState::Live { replica } => Some(replica),
            _ => None,
        }
    }

    pub fn is_closed(&self) -> bool {
        self.state == RState::Closed
    }

    fn reject(&mut self, reason: String, out: &mut Vec<Msg>) -> Option<RouterEvent> {
        self.state = RState::Closed;
        out.push(Msg::Reject {
            reason: reason.clone(),
        });
        Some(RouterEvent::Rejected { reason })
    }

    /// Handle one message from the agent; messages to send go to `out`.
    /// `known(replica)` says whether the replica is configured.
    pub fn handle(
        &mut self,
        msg: Msg,
        now_ms: u64,
        known: impl Fn(Ipv4Addr) -> bool,
        out: &mut Vec<Msg>,
    ) -> Option<RouterEvent> {
        self.handle_admitting(
            msg,
            now_ms,
            |r, _| {
                if known(r) {
                    Ok(())
                } else {
                    Err(format!("replica {r} is not in the router's configuration — add it to a [[service]] or fix the agent's --replica"))
                }
            },
            out,
        )
    }

    /// [`RouterSession::handle`] with the router's admission policy:
    /// `admit(replica, proven)` says why this peer may not speak for
    /// `replica`, if it may not (unknown replica, wrong source address, a
    /// live agent already speaks for it). It is asked twice: when the peer
    /// says who it is (`proven` false: a refused peer is not even
    /// challenged), and once it proved the secret, just before it is
    /// welcomed (`proven` true: what only an authenticated peer may be told,
    /// and what may have changed during the exchange).
    pub fn handle_admitting(
        &mut self,
        msg: Msg,
        now_ms: u64,
        admit: impl Fn(Ipv4Addr, bool) -> Result<(), String>,
        out: &mut Vec<Msg>,
    ) -> Option<RouterEvent> {
        self.last_heard_ms = now_ms;
        match (std::mem::replace(&mut self.state, RState::Closed), msg) {
            (
                RState::AwaitHello,
                Msg::Hello {
                    version,
                    replica,
                    host,
                    nonce,
                },
            ) => {
                if version != VERSION {
                    return self.reject(format!("protocol version {version}, router speaks {VERSION} — run the same ftnet version on router and agents"), out);
                }
                // What an unauthenticated peer says is never echoed or
                // logged at length: a host name is at most MAX_HOST
                // printable characters, a nonce 16 to 64 bytes.
                if host.len() > MAX_HOST || host.chars().any(char::is_control) {
                    return self.reject(
                        format!("a host name of {} bytes that is not one (at most {MAX_HOST} printable characters)", host.len()),
                        out,
                    );
                }
                if let Err(reason) = admit(replica, false) {
                    return self.reject(reason, out);
                }
                if unhex(&nonce).is_none_or(|n| n.len() < 16 || n.len() > 64) {
                    return self.reject("malformed nonce".into(), out);
                }
                self.state = RState::AwaitAuth {
                    replica,
                    host,
                    agent_nonce: nonce,
                };
                out.push(Msg::Challenge {
                    nonce: self.nonce.clone(),
                });
                None
            }
            (
                RState::AwaitAuth {
                    replica,
                    host,
                    agent_nonce,
                },
                Msg::Auth { mac },
            ) => {
                if !verify(
                    &self.secret,
                    "agent",
                    &self.nonce,
                    &agent_nonce,
                    replica,
                    &mac,
                ) {
                    return self.reject(format!("authentication failed for replica {replica} (host {host:?}): wrong shared secret"), out);
                }
                if let Err(reason) = admit(replica, true) {
                    return self.reject(
                        format!("{reason} (host {host:?} proved the shared secret)"),
                        out,
                    );
                }
                let mac = sign(&self.secret, "router", &agent_nonce, &self.nonce, replica);
                self.keys = Some(frame_keys(
                    session_key(&self.secret, &agent_nonce, &self.nonce, replica),
                    true,
                ));
                out.push(Msg::Welcome {
                    mac,
                    heartbeat_ms: ms(self.hb.every),
                    dead_after_ms: ms(self.hb.dead_after),
                    tick_ms: self.hb.tick_ms,
                });
                self.state = RState::Live { replica };
                Some(RouterEvent::Registered { replica, host })
            }
            (RState::Live { replica }, Msg::Heartbeat { seq, .. }) => {
                self.state = RState::Live { replica };
                out.push(Msg::HeartbeatAck { seq });
                None
            }
            (RState::Live { replica }, Msg::Records { records }) => {
                self.state = RState::Live { replica };
                Some(RouterEvent::Records { replica, records })
            }
            (RState::Live { replica }, Msg::Order { services }) => {
                self.state = RState::Live { replica };
                Some(RouterEvent::Order { replica, services })
            }
            (RState::Live { replica }, Msg::Stored { keys }) => {
                self.state = RState::Live { replica };
                Some(RouterEvent::Stored { replica, keys })
            }
            (RState::Live { replica }, Msg::OrderLost { reason }) => {
                self.state = RState::Live { replica };
                Some(RouterEvent::OrderLost { replica, reason })
            }
            (RState::Live { replica }, Msg::Reconnecting {}) => {
                self.state = RState::Live { replica };
                Some(RouterEvent::Reconnecting { replica })
            }
            (RState::Live { replica }, Msg::Shims { count }) => {
                self.state = RState::Live { replica };
                Some(RouterEvent::Shims { replica, count })
            }
            (RState::Live { replica }, Msg::OutOfService { down }) => {
                self.state = RState::Live { replica };
                Some(RouterEvent::OutOfService { replica, down })
            }
            (
                RState::Live { replica },
                Msg::State {
                    join,
                    data,
                    last,
                    digest,
                },
            ) => {
                self.state = RState::Live { replica };
                Some(RouterEvent::State {
                    replica,
                    join,
                    data,
                    last,
                    digest,
                })
            }
            (RState::Live { replica }, Msg::Restored { join, digest }) => {
                self.state = RState::Live { replica };
                Some(RouterEvent::Restored {
                    replica,
                    join,
                    digest,
                })
            }
            (RState::Live { replica }, Msg::Snapshot { join }) => {
                self.state = RState::Live { replica };
                Some(RouterEvent::Snapshot { replica, join })
            }
            (RState::Live { replica }, Msg::StateFailed { join, reason }) => {
                self.state = RState::Live { replica };
                Some(RouterEvent::StateFailed {
                    replica,
                    join,
                    reason,
                })
            }
            (RState::Closed, _) => None,
            (_, other) => self.reject(
                format!(
                    "unexpected {} message at this point of the exchange",
                    kind(&other)
                ),
                out,
            ),
        }
    }

    /// When [`RouterSession::on_timeout`] next has something to do.
    pub fn poll_timeout_ms(&self) -> Option<u64> {
        match self.state {
            RState::Closed => None,
            RState::Live { .. } => Some(self.last_heard_ms + ms(self.hb.dead_after)),
            // An unauthenticated peer gets the same time to finish the exchange.
            _ => Some(self.opened_ms + ms(self.hb.dead_after).max(1000)),
        }
    }

    /// Time passes: an authenticated agent silent for `dead_after` is lost;
    /// a peer that never finished authenticating is dropped.
    ///
    /// The caller calls this at least every few milliseconds (its read
    /// timeout). A gap of half `dead_after` or more between two calls is
    /// this side not running (the router's process stopped, or a host that
    /// did not schedule its thread): the agent's silence is counted
    /// without it. (A router stopped for 2 s took every agent for lost
    /// when it ran again, and its verdicts reset healthy replicas'
    /// connections.)
    pub fn on_timeout(&mut self, now_ms: u64, out: &mut Vec<Msg>) -> Option<RouterEvent> {
        let gap = now_ms.saturating_sub(self.checked_ms);
        self.checked_ms = self.checked_ms.max(now_ms);
        if matches!(self.state, RState::Live { .. }) && gap >= ms(self.hb.dead_after) / 2 {
            self.last_heard_ms = (self.last_heard_ms + gap).min(now_ms);
        }
        let due = self.poll_timeout_ms()?;
        if now_ms < due {
            return None;
        }
        match self.state.clone() {
            RState::Live { replica } => {
                self.state = RState::Closed;
                Some(RouterEvent::Lost {
                    replica,
                    silent: Duration::from_millis(now_ms - self.last_heard_ms),
                })
            }
            _ => self.reject("did not complete authentication in time".into(), out),
        }
    }
}

fn kind(m: &Msg) -> &'static str {
    match m {
        Msg::Hello { .. } => "hello",
        Msg::Challenge { .. } => "challenge",
        Msg::Auth { .. } => "auth",
        Msg::Welcome { .. } => "welcome",
        Msg::Reject { .. } => "reject",
        Msg::Heartbeat { .. } => "heartbeat",
        Msg::HeartbeatAck { .. } => "heartbeat_ack",
        Msg::ConnOpen { .. } => "conn_open",
        Msg::ConnClose { .. } => "conn_close",
        Msg::Stored { .. } => "stored",
        Msg::Input { .. } => "input",
        Msg::Records { .. } => "records",
        Msg::Order { .. } => "order",
        Msg::OrderLost { .. } => "order_lost",
        Msg::Shims { .. } => "shims",
        Msg::Reconnecting { .. } => "reconnecting",
        Msg::OutOfService { .. } => "out_of_service",
        Msg::Checkpoint { .. } => "checkpoint",
        Msg::State { .. } => "state",
        Msg::Restored { .. } => "restored",
        Msg::Snapshot { .. } => "snapshot",
        Msg::StateFailed { .. } => "state_failed",
        Msg::JoinEnded { .. } => "join_ended",
        Msg::Restart { .. } => "restart",
    }
}

/// What happened on the agent's side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentEvent {
    /// The router proved the secret and accepted us.
    Registered {
        heartbeat: Duration,
        dead_after: Duration,
    },
    /// The router refused us, or failed to prove the secret; do not retry
    /// faster than a back-off.
    Rejected { reason: String },
    /// The router fell silent: reconnect.
    RouterLost,
    /// An input event for the replica's shim, with the client's ISN where
    /// it is an accept of a connection whose record the agent keeps.
    Input(NumberedInput, Option<u32>),
    /// A join's checkpoint: this agent is its donor or its joiner.
    Checkpoint {
        join: u64,
        vip: Ipv4Addr,
        ports: Vec<u16>,
        seq: u64,
        donor: Ipv4Addr,
        joiner: Ipv4Addr,
    },
    /// A piece of a join's state, for the joiner.
    State {
        join: u64,
        data: String,
        last: bool,
        digest: Option<String>,
    },
    /// The join ended.
    JoinEnded { join: u64, ok: bool },
    /// This replica's servers are stale: end them (see [`Msg::Restart`]).
    Restart { reason: String },
}

/// How long the agent waits without a word from its router (every
/// heartbeat is answered) before it gives the session up and connects
/// anew, when the router's host does not acknowledge what the agent sends
/// either ([`AgentSession::router_host_acked`]): three heartbeats, at least
/// [`ROUTER_SILENCE_MIN_MS`], at most `dead_after`. A router cut off from
/// the network never closes its sessions; its standby takes the gateway
/// address over (VRRP: three adverts and a skew, ~0.35 s with adverts
/// every 0.1 s, ~0.18 s every 0.05 s as in the HA lab) but hears from an agent only when the
/// agent connects to it, and the connections wait for every agent's
/// records before they are rebuilt: the sooner the agents look, the sooner
/// clients are served again. A router whose host still acknowledges (its
/// process busy, as a router that has just taken over and rebuilds its
/// table under load is for hundreds of milliseconds) is given
/// [`busy_router_ms`]: a session given up while the router writes to it
/// costs more than a reconnection (the router cannot tell which records
/// the agent missed, and takes its replica out: fault campaign, fault #55
/// at 3481b94).
pub fn router_silence_ms(heartbeat_ms: u64, dead_after_ms: u64) -> u64 {
    (3 * heartbeat_ms)
        .max(ROUTER_SILENCE_MIN_MS)
        .min(dead_after_ms)
}

/// The shortest [`router_silence_ms`]. It applies only while the router's
/// host acknowledges nothing the agent sends: a live host's kernel
/// acknowledges each heartbeat within its delayed-ACK time (40 ms at
/// first), whatever its router process does, so three heartbeats of 50 ms
/// leave room for two of those late; a host cut off acknowledges nothing.
pub const ROUTER_SILENCE_MIN_MS: u64 = 150;

/// How long the agent waits for a router whose process is silent while
/// its host acknowledges what the agent sends: four times `dead_after`.
/// Nothing is gained by leaving it sooner. Killed, its kernel closes the
/// session at once; if its standby takes the address over, the next
/// heartbeat reaches a host with no such connection, which resets it; and
/// a router that still holds the address is the one the agent would
/// connect to again.
pub fn busy_router_ms(dead_after_ms: u64) -> u64 {
    dead_after_ms.saturating_mul(4)
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum AState {
    AwaitChallenge,
    AwaitWelcome {
        router_nonce: String,
    },
    /// `silence_ms`: [`router_silence_ms`]; `dead_ms`: [`busy_router_ms`],
    /// for a router whose host still acknowledges.
    Live {
        every_ms: u64,
        silence_ms: u64,
        dead_ms: u64,
    },
    Closed,
}

/// The agent's side of one control connection, and the connection records
/// it keeps for a recovering router.
#[derive(Debug)]
pub struct AgentSession {
    secret: Vec<u8>,
    replica: Ipv4Addr,
    nonce: String,
    state: AState,
    last_heard_ms: u64,
    /// When the router's host last acknowledged bytes this agent sent (its
    /// kernel: the router process may be busy), as the caller last said
    /// ([`AgentSession::router_host_acked`]); `None`: not known.
    host_acked_ms: Option<u64>,
    /// The last `on_timeout`.
    checked_ms: u64,
    next_beat_ms: u64,
    seq: u64,
    /// Records of live connections, by client-side key.
    pub records: HashMap<ConnKey, ConnRecord>,
    /// The input order as far as this agent passed it on.
    pub order: OrderLog,
    /// Why the replica's server lost the input order, once it did: told to
    /// the router at once and to every router registered with later.
    pub order_lost: Option<String>,
    /// How many shims follow the order through this agent, as last told
    /// to the router of this session (`None`: not told yet).
    shims_told: Option<u32>,
    /// The replicas out of service, as the last router said.
    pub down: Vec<OutOfService>,
    /// The hello for the shims ([`shim_hello`]), once the router said
    /// how the servers' clock goes.
    pub hello: Option<[u8; SHIM_RECORD]>,
    keys: Option<FrameKeys>,
    /// What the replica's kernel said of its connections
    /// ([`AgentSession::note_sockets`]), for the records of the next
    /// `Welcome`: each one it has (client address, client port, local
    /// port), with the bytes its peer acknowledged of its output where the
    /// kernel says, and whether it took the client's FIN. `None`: the
    /// kernel was not asked, or would not say.
    sockets: Option<Sockets>,
    /// What the agent knows of each record beyond it (carried from session
    /// to session with `records`).
    pub record_info: HashMap<ConnKey, RecordInfo>,
    /// Records dropped at the last `Welcome` because the replica's kernel
    /// no longer has their connection ([`AgentSession::take_dropped`]).
    dropped: Vec<ConnKey>,
}

/// What the replica's kernel says of one of its server's connections
/// ([`AgentSession::note_sockets`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SocketInfo {
    /// Bytes of the replica's output its peer acknowledged
    /// (`tcpi_bytes_acked`), where the kernel keeps them.
    pub bytes_acked: Option<u64>,
    /// It took the client's FIN (CLOSE-WAIT, LAST-ACK, CLOSING, TIME-WAIT).
    pub fin_received: bool,
}

/// The replica's connections by (client address, client port, local port).
pub type Sockets = HashMap<(Ipv4Addr, u16, u16), SocketInfo>;

/// How old a record must be before its connection's absence from the
/// replica's kernel counts, if no earlier look saw its socket: a
/// connection whose handshake the replica answered with a SYN cookie has
/// no socket until the client's ACK.
pub const RECORD_SETTLE_MS: u64 = 3_000;

/// What an agent knows of one of its records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecordInfo {
    /// When it came (ms, the agent's clock).
    pub stored_ms: u64,
    /// The replica's kernel had a socket of its connection at an earlier
    /// look: absent now, it closed (or the server restarted).
    pub seen: bool,
}

/// Replica `me`'s SND.UNA on the connection of `r`: its ISN + 1 + the
/// bytes acknowledged (modulo 2^32), if its kernel reported the socket.
fn snd_una(r: &ConnRecord, me: Ipv4Addr, sockets: &Sockets) -> Option<u32> {
    let isn = r.replica(me)?.isn;
    let b = sockets
        .get(&(r.key.client, r.key.cport, r.key.vport))?
        .bytes_acked?;
    let low = u32::try_from(b & u64::from(u32::MAX)).ok()?;
    Some(isn.wrapping_add(1).wrapping_add(low))
}

impl AgentSession {
    /// Start a session; the returned `Hello` must be sent first.
    pub fn new(
        secret: &[u8],
        replica: Ipv4Addr,
        host: &str,
        nonce: [u8; 16],
        now_ms: u64,
    ) -> (AgentSession, Msg) {
        let s = AgentSession {
            secret: secret.to_vec(),
            replica,
            nonce: hex(&nonce),
            state: AState::AwaitChallenge,
            last_heard_ms: now_ms,
            host_acked_ms: None,
            checked_ms: now_ms,
            next_beat_ms: u64::MAX,
            seq: 0,
            records: HashMap::new(),
            order: OrderLog::default(),
            order_lost: None,
            shims_told: None,
            down: Vec::new(),
            hello: None,
            keys: None,
            sockets: None,
            record_info: HashMap::new(),
            dropped: Vec::new(),
        };
        let hello = Msg::Hello {
            version: VERSION,
            replica,
            host: host.to_string(),
            nonce: s.nonce.clone(),
        };
        (s, hello)
    }

    pub fn is_live(&self) -> bool {
        matches!(self.state, AState::Live { .. })
    }

    /// Whether this session got as far as registering (the router proved
    /// the secret), even if it has ended since (a silent router closes it).
    pub fn registered(&self) -> bool {
        self.keys.is_some()
    }

    /// The session's frame keys, once the router's `Welcome` proved the
    /// secret: every frame after it, both ways, is sealed.
    pub fn frame_keys(&self) -> Option<FrameKeys> {
        self.keys.clone()
    }

    /// The replica's server lost the input order (`reason` for the logs):
    /// the router is told now if registered, else as soon as it is. Only
    /// the first reason is kept; it is never withdrawn (the server missed
    /// input for good).
    pub fn lose_order(&mut self, reason: &str, out: &mut Vec<Msg>) {
        if self.order_lost.is_some() {
            return;
        }
        self.order_lost = Some(reason.to_string());
        if self.is_live() {
            out.push(Msg::OrderLost {
                reason: reason.to_string(),
            });
        }
    }

    /// A join admitted this replica again: its (new) server follows the
    /// order, so the loss reported before is over.
    pub fn order_regained(&mut self) {
        self.order_lost = None;
    }

    /// How many shims follow the order through this agent now: the router
    /// is told when registered and the count changed.
    pub fn set_shims(&mut self, count: u32, out: &mut Vec<Msg>) {
        if self.is_live() && self.shims_told != Some(count) {
            self.shims_told = Some(count);
            out.push(Msg::Shims { count });
        }
    }

    fn reject(&mut self, reason: String) -> Option<AgentEvent> {
        self.state = AState::Closed;
        Some(AgentEvent::Rejected { reason })
    }

    pub fn handle(&mut self, msg: Msg, now_ms: u64, out: &mut Vec<Msg>) -> Option<AgentEvent> {
        self.last_heard_ms = now_ms;
        match (self.state.clone(), msg) {
            (_, Msg::Reject { reason }) => self.reject(format!("router refused: {reason}")),
            (AState::AwaitChallenge, Msg::Challenge { nonce }) => {
                out.push(Msg::Auth {
                    mac: sign(&self.secret, "agent", &nonce, &self.nonce, self.replica),
                });
                self.state = AState::AwaitWelcome {
                    router_nonce: nonce,
                };
                None
            }
            (
                AState::AwaitWelcome { router_nonce },
                Msg::Welcome {
                    mac,
                    heartbeat_ms,
                    dead_after_ms,
                    tick_ms,
                },
            ) => {
                if !verify(
                    &self.secret,
                    "router",
                    &self.nonce,
                    &router_nonce,
                    self.replica,
                    &mac,
                ) {
                    return self.reject("the router could not prove the shared secret — wrong router address or secret".into());
                }
                self.keys = Some(frame_keys(
                    session_key(&self.secret, &self.nonce, &router_nonce, self.replica),
                    false,
                ));
                let every = heartbeat_ms.clamp(10, 60_000);
                let dead = dead_after_ms.clamp(every * 2, 600_000);
                self.state = AState::Live {
                    every_ms: every,
                    silence_ms: router_silence_ms(every, dead),
                    dead_ms: busy_router_ms(dead),
                };
                self.next_beat_ms = now_ms;
                // First: a replica that left the group under the router
                // before must stay out before any record is adopted.
                out.push(Msg::OutOfService {
                    down: self.down.clone(),
                });
                out.push(Msg::Order {
                    services: self.order.report(),
                });
                // A server that lost the order stays out with every router.
                if let Some(reason) = &self.order_lost {
                    out.push(Msg::OrderLost {
                        reason: reason.clone(),
                    });
                }
                // Everything it keeps, for a router that starts or took
                // over (one that knows the connections ignores them).
                let me = self.replica;
                // A record of a connection the replica's kernel no longer
                // has (it closed there while no router could tell this
                // agent, or the server restarted) is dropped, not handed
                // over: adopted, its leg would be probed, answered with a
                // RST and evicted as a replica that reset a live connection
                // (a router that took over twice within seconds).
                self.dropped.clear();
                let sockets = self.sockets.take();
                if let Some(sockets) = &sockets {
                    let mut gone = Vec::new();
                    for k in self.records.keys() {
                        let info = self.record_info.entry(*k).or_default();
                        if sockets.contains_key(&(k.client, k.cport, k.vport)) {
                            info.seen = true;
                        } else if info.seen || now_ms >= info.stored_ms + RECORD_SETTLE_MS {
                            gone.push(*k);
                        }
                    }
                    for k in &gone {
                        self.records.remove(k);
                        self.record_info.remove(k);
                    }
                    self.dropped = gone;
                }
                let mut all: Vec<ConnRecord> = self
                    .records
                    .values()
                    .map(|r| {
                        let mut r = r.clone();
                        r.snd_una = sockets.as_ref().and_then(|m| snd_una(&r, me, m));
                        r.fin_received = sockets.as_ref().is_some_and(|m| {
                            m.get(&(r.key.client, r.key.cport, r.key.vport))
                                .is_some_and(|s| s.fin_received)
                        });
                        r
                    })
                    .collect();
                all.sort_by_key(|r| r.key);
                for chunk in all.chunks(RECORDS_PER_MSG) {
                    out.push(Msg::Records {
                        records: chunk.to_vec(),
                    });
                }
                // The last message has fewer than RECORDS_PER_MSG records
                // (none, if need be): the router then knows it has them all,
                // and stops waiting for this replica's record of a
                // connection it never had. Without it, an agent that kept
                // no record sent nothing, and every connection rebuilt from
                // the others' records waited 1 s for its.
                if all.len() % RECORDS_PER_MSG == 0 {
                    out.push(Msg::Records {
                        records: Vec::new(),
                    });
                }
                self.hello = Some(shim_hello(
                    &shim_seed(&self.secret),
                    tick_ms.min(60_000),
                    SHIM_EPOCH_MS,
                ));
                Some(AgentEvent::Registered {
                    heartbeat: Duration::from_millis(every),
                    dead_after: Duration::from_millis(dead),
                })
            }
            (AState::Live { .. }, Msg::HeartbeatAck { .. }) => None,
            (AState::Live { .. }, Msg::ConnOpen { mut record }) => {
                // What it learnt of the order is its own, not the router's.
                record.accepted = false;
                record.input_end = None;
                record.snd_una = None;
                let key = record.key;
                self.records.insert(key, record);
                self.record_info.insert(
                    key,
                    RecordInfo {
                        stored_ms: now_ms,
                        seen: false,
                    },
                );
                // Confirmed at once; records that came together are
                // confirmed together.
                match out.last_mut() {
                    Some(Msg::Stored { keys }) if keys.len() < STORED_PER_MSG => keys.push(key),
                    _ => out.push(Msg::Stored { keys: vec![key] }),
                }
                None
            }
            (AState::Live { .. }, Msg::OutOfService { down }) => {
                self.down = down;
                None
            }
            (AState::Live { .. }, Msg::ConnClose { key }) => {
                self.records.remove(&key);
                self.record_info.remove(&key);
                None
            }
            (AState::Live { .. }, Msg::Input { seq, key, kind }) => {
                let ev = NumberedInput { seq, key, kind };
                self.order.note(ev);
                let isn = match kind {
                    InputKind::Accept => self.records.get(&key).map(|r| r.client_isn),
                    _ => None,
                };
                if let Some(r) = self.records.get_mut(&key) {
                    match kind {
                        InputKind::Accept => r.accepted = true,
                        InputKind::Data { end } => r.input_end = Some(end),
                        InputKind::Join { base } => {
                            if !r.accepted {
                                r.accepted = true;
                                r.input_end = Some(base);
                            }
                        }
                        InputKind::Tick { .. } | InputKind::Reset => {}
                    }
                }
                Some(AgentEvent::Input(ev, isn))
            }
            (
                AState::Live { .. },
                Msg::Checkpoint {
                    join,
                    vip,
                    ports,
                    seq,
                    donor,
                    joiner,
                },
            ) => Some(AgentEvent::Checkpoint {
                join,
                vip,
                ports,
                seq,
                donor,
                joiner,
            }),
            (
                AState::Live { .. },
                Msg::State {
                    join,
                    data,
                    last,
                    digest,
                },
            ) => Some(AgentEvent::State {
                join,
                data,
                last,
                digest,
            }),
            (AState::Live { .. }, Msg::JoinEnded { join, ok }) => {
                Some(AgentEvent::JoinEnded { join, ok })
            }
            (AState::Live { .. }, Msg::Restart { reason }) => Some(AgentEvent::Restart { reason }),
            (AState::Closed, _) => None,
            (_, other) => self.reject(format!(
                "unexpected {} message from the router",
                kind(&other)
            )),
        }
    }

    /// The connections the replica's kernel has (client address, client
    /// port, local port), each with what its peer acknowledged of the
    /// replica's output where the kernel keeps it (`tcp_info`'s
    /// `tcpi_bytes_acked`) and whether it took the client's FIN, read by
    /// the caller just before it passes the router's `Welcome` to
    /// [`AgentSession::handle`]; `None` if the kernel would not say. The
    /// records handed over then carry the replica's SND.UNA
    /// ([`ConnRecord::snd_una`]): no router forwards the client's ACKs to
    /// the replica while the new one has no table, so it stands still
    /// until the record arrives, and whether it took the client's FIN
    /// ([`ConnRecord::fin_received`]). A record whose connection the
    /// kernel no longer has is dropped ([`AgentSession::take_dropped`]) if
    /// an earlier look saw its socket or it is [`RECORD_SETTLE_MS`] old.
    pub fn note_sockets(&mut self, sockets: Option<Sockets>) {
        self.sockets = sockets;
    }

    /// The records the last `Welcome` dropped because the replica's kernel
    /// has no socket of their connection any more (for the agent's log).
    pub fn take_dropped(&mut self) -> Vec<ConnKey> {
        std::mem::take(&mut self.dropped)
    }

    /// The router's host acknowledged bytes this agent sent `ago_ms` ago
    /// (`TCP_INFO`'s `tcpi_last_ack_recv`), at `now_ms`.
    pub fn router_host_acked(&mut self, now_ms: u64, ago_ms: u64) {
        let at = now_ms.saturating_sub(ago_ms);
        self.host_acked_ms = Some(self.host_acked_ms.map_or(at, |h| h.max(at)));
    }

    pub fn poll_timeout_ms(&self) -> Option<u64> {
        match self.state {
            AState::Live {
                silence_ms,
                dead_ms,
                ..
            } => {
                let mut t = self.next_beat_ms.min(self.last_heard_ms + dead_ms);
                let quiet = self.last_heard_ms + silence_ms;
                if quiet > self.checked_ms {
                    t = t.min(quiet);
                }
                Some(t)
            }
            AState::Closed => None,
            _ => Some(self.last_heard_ms + 5_000),
        }
    }

    /// Time passes: send a heartbeat when due; report a silent router.
    pub fn on_timeout(&mut self, now_ms: u64, out: &mut Vec<Msg>) -> Option<AgentEvent> {
        match self.state {
            AState::Live {
                every_ms,
                silence_ms,
                dead_ms,
            } => {
                self.checked_ms = now_ms;
                let host_heard = self.host_acked_ms.is_some_and(|h| h + silence_ms > now_ms);
                let limit = if host_heard { dead_ms } else { silence_ms };
                if now_ms >= self.last_heard_ms + limit {
                    self.state = AState::Closed;
                    // Its last word, should the router only have been held:
                    // the order is not lost, the agent comes back.
                    out.push(Msg::Reconnecting {});
                    return Some(AgentEvent::RouterLost);
                }
                if now_ms >= self.next_beat_ms {
                    self.seq += 1;
                    out.push(Msg::Heartbeat {
                        seq: self.seq,
                        records: self.records.len() as u64,
                    });
                    self.next_beat_ms = now_ms + every_ms;
                }
                None
            }
            AState::Closed => None,
            _ if now_ms >= self.last_heard_ms + 5_000 => {
                self.reject("the router did not answer the authentication in 5 s".into())
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const R: Ipv4Addr = Ipv4Addr::new(198, 18, 11, 2);

    /// Run messages between the two sessions until neither has anything to say.
    fn converse(
        a: &mut AgentSession,
        r: &mut RouterSession,
        first: Msg,
        now: u64,
    ) -> (Vec<AgentEvent>, Vec<RouterEvent>) {
        let (mut ae, mut re) = (Vec::new(), Vec::new());
        let mut to_router = vec![first];
        while !to_router.is_empty() {
            let mut to_agent = Vec::new();
            for m in to_router.drain(..) {
                // Through the codec, as on the wire.
                let mut d = Decoder::default();
                d.push(&encode(&m));
                let m = d.next_msg().unwrap().unwrap();
                re.extend(r.handle(m, now, |x| x == R, &mut to_agent));
            }
            for m in to_agent {
                ae.extend(a.handle(m, now, &mut to_router));
            }
        }
        (ae, re)
    }

    /// Both ends as the binaries run them: frames on two byte streams, the
    /// router sealing what follows its `Welcome`, the agent what follows
    /// its receipt; each decoder expects sealed frames from the same points.
    struct Wire {
        a: AgentSession,
        r: RouterSession,
        a_dec: Decoder,
        r_dec: Decoder,
        a_seal: Sealer,
        r_seal: Sealer,
    }

    impl Wire {
        fn new(agent_nonce: [u8; 16], router_nonce: [u8; 16]) -> Wire {
            let (a, hello) = AgentSession::new(b"s3cret", R, "host1", agent_nonce, 0);
            let r = RouterSession::new(b"s3cret", router_nonce, Heartbeats::default(), 0);
            let mut w = Wire {
                a,
                r,
                a_dec: Decoder::default(),
                r_dec: Decoder::default(),
                a_seal: Sealer::default(),
                r_seal: Sealer::default(),
            };
            let mut to_router = encode(&hello);
            for _ in 0..8 {
                w.r_dec.push(&std::mem::take(&mut to_router));
                let mut out = Vec::new();
                while let Some(m) = w.r_dec.next_msg().unwrap() {
                    w.r.handle(m, 0, |x| x == R, &mut out);
                    if !w.r_dec.is_sealed() {
                        if let Some(k) = w.r.frame_keys() {
                            w.r_dec.expect_sealed(k.recv);
                            w.r_seal.seal_after_welcome(k.send);
                        }
                    }
                }
                let to_agent: Vec<u8> = out.iter().flat_map(|m| w.r_seal.encode(m)).collect();
                w.a_dec.push(&to_agent);
                let mut out = Vec::new();
                while let Some(m) = w.a_dec.next_msg().unwrap() {
                    w.a.handle(m, 0, &mut out);
                    if !w.a_dec.is_sealed() {
                        if let Some(k) = w.a.frame_keys() {
                            w.a_dec.expect_sealed(k.recv);
                            w.a_seal.seal(k.send);
                        }
                    }
                }
                to_router = out.iter().flat_map(|m| w.a_seal.encode(m)).collect();
            }
            assert!(w.a.is_live() && w.r.replica() == Some(R));
            assert!(w.r_dec.is_sealed() && w.a_dec.is_sealed());
            assert!(w.r_seal.is_sealing() && w.a_seal.is_sealing());
            w
        }
    }

    /// After the handshake every frame is sealed both ways: the agent's
    /// sealed heartbeat and `Stored` are taken, in order; a forged one
    /// (plain, altered, sealed under another session's key, or a replay of
    /// one the router already took) is refused before it is parsed.
    #[test]
    fn after_the_welcome_frames_are_sealed_and_forged_or_replayed_ones_refused() {
        let key = ConnKey {
            client: Ipv4Addr::new(198, 18, 1, 2),
            cport: 40000,
            vip: Ipv4Addr::new(198, 19, 0, 1),
            vport: 6379,
        };
        let hb = Msg::Heartbeat { seq: 7, records: 0 };
        let stored = Msg::Stored { keys: vec![key] };
        // Sealed frames are taken in order.
        let mut w = Wire::new([1; 16], [2; 16]);
        let hb_frame = w.a_seal.encode(&hb);
        let stored_frame = w.a_seal.encode(&stored);
        w.r_dec.push(&hb_frame);
        w.r_dec.push(&stored_frame);
        let first = w.r_dec.next_msg().unwrap();
        assert_eq!(first, Some(hb.clone()));
        assert_eq!(w.r_dec.next_msg(), Ok(Some(stored.clone())));
        // A replay of a frame the router took.
        w.r_dec.push(&hb_frame);
        assert!(matches!(w.r_dec.next_msg(), Err(FrameError::Forged(_))));
        // A plain frame from whoever is on the path.
        let mut w = Wire::new([1; 16], [2; 16]);
        w.r_dec.push(&encode(&stored));
        assert!(matches!(w.r_dec.next_msg(), Err(FrameError::Forged(_))));
        // A sealed frame altered on the way (another connection's key).
        let mut w = Wire::new([1; 16], [2; 16]);
        let mut f = w.a_seal.encode(&stored);
        let at = f.windows(5).position(|x| x == b"40000").unwrap();
        f[at..at + 5].copy_from_slice(b"40001");
        w.r_dec.push(&f);
        assert!(matches!(w.r_dec.next_msg(), Err(FrameError::Forged(_))));
        // A frame recorded from another session of the same agent (same
        // secret, other nonces), replayed into this one.
        let mut old = Wire::new([3; 16], [4; 16]);
        let recorded = old.a_seal.encode(&hb);
        let mut w = Wire::new([1; 16], [2; 16]);
        w.r_dec.push(&recorded);
        assert!(matches!(w.r_dec.next_msg(), Err(FrameError::Forged(_))));
        // Frames reordered: the second one first.
        let mut w = Wire::new([1; 16], [2; 16]);
        let _one = w.a_seal.encode(&hb);
        let two = w.a_seal.encode(&stored);
        w.r_dec.push(&two);
        assert!(matches!(w.r_dec.next_msg(), Err(FrameError::Forged(_))));
        // Shorter than a tag.
        let mut w = Wire::new([1; 16], [2; 16]);
        w.r_dec.push(&[0, 0, 0, 3, b'{', b'}', b' ']);
        assert!(matches!(w.r_dec.next_msg(), Err(FrameError::Forged(_))));
        // The agent refuses a forged router frame (a restart, a record) the same way.
        let mut w = Wire::new([1; 16], [2; 16]);
        w.a_dec.push(&encode(&Msg::Restart {
            reason: "forged".into(),
        }));
        assert!(matches!(w.a_dec.next_msg(), Err(FrameError::Forged(_))));
        let mut w = Wire::new([1; 16], [2; 16]);
        let ack = w.r_seal.encode(&Msg::HeartbeatAck { seq: 7 });
        w.a_dec.push(&ack);
        assert_eq!(w.a_dec.next_msg(), Ok(Some(Msg::HeartbeatAck { seq: 7 })));
        // The key never shows in a debug print.
        let k = w.r.frame_keys().unwrap();
        assert!(!format!("{k:?}").contains(&format!("{:?}", k.send.key[0..4].to_vec())));
    }

    #[test]
    fn right_secret_registers_both_ways() {
        let (mut a, hello) = AgentSession::new(b"s3cret", R, "host1", [1; 16], 0);
        let mut r = RouterSession::new(b"s3cret", [2; 16], Heartbeats::default(), 0);
        let (ae, re) = converse(&mut a, &mut r, hello, 0);
        assert_eq!(
            re,
            vec![
                RouterEvent::Registered {
                    replica: R,
                    host: "host1".into()
                },
                RouterEvent::OutOfService {
                    replica: R,
                    down: vec![]
                },
                RouterEvent::Order {
                    replica: R,
                    services: vec![]
                },
                // No record kept: one empty message says so.
                RouterEvent::Records {
                    replica: R,
                    records: vec![]
                }
            ]
        );
        assert!(matches!(ae[..], [AgentEvent::Registered { .. }]));
        assert_eq!(r.replica(), Some(R));
        assert!(a.is_live());
    }

    /// A registered agent hears `Restart` (its stale servers are to be
    /// ended); before registration the same message ends the session.
    #[test]
    fn restart_reaches_only_a_registered_agent() {
        let m = Msg::Restart {
            reason: "down in redis; missed input".into(),
        };
        let mut d = Decoder::default();
        d.push(&encode(&m));
        assert_eq!(d.next_msg(), Ok(Some(m.clone())));
        let (mut a, hello) = AgentSession::new(b"s3cret", R, "host1", [1; 16], 0);
        let mut r = RouterSession::new(b"s3cret", [2; 16], Heartbeats::default(), 0);
        converse(&mut a, &mut r, hello, 0);
        let mut out = Vec::new();
        assert_eq!(
            a.handle(m.clone(), 1, &mut out),
            Some(AgentEvent::Restart {
                reason: "down in redis; missed input".into()
            })
        );
        let (mut fresh, _) = AgentSession::new(b"s3cret", R, "host1", [1; 16], 0);
        let ev = fresh.handle(m, 1, &mut out);
        assert!(!matches!(ev, Some(AgentEvent::Restart { .. })), "{ev:?}");
        assert!(!fresh.is_live());
    }

    /// An unauthenticated peer that announces a 200 kB "host name" (or one
    /// with control characters: a forged log line) is refused with a short
    /// reason that repeats none of it, before the challenge.
    #[test]
    fn a_hello_with_a_huge_or_forged_host_is_refused_without_echo() {
        for host in ["x".repeat(200_000), "h\n2026-01-01 WARN forged".to_string()] {
            let (_, hello) = AgentSession::new(b"s3cret", R, &host, [1; 16], 0);
            let mut r = RouterSession::new(b"s3cret", [2; 16], Heartbeats::default(), 0);
            let mut out = Vec::new();
            let ev = r.handle(hello, 0, |x| x == R, &mut out);
            let Some(RouterEvent::Rejected { reason }) = ev else {
                panic!("{ev:?}");
            };
            assert!(reason.len() < 120, "{} bytes", reason.len());
            assert!(
                !reason.contains("xxxx") && !reason.contains("forged"),
                "{reason}"
            );
            assert!(
                matches!(&out[..], [Msg::Reject { reason: r }] if r.len() < 120),
                "{out:?}"
            );
            assert!(r.is_closed());
        }
    }

    #[test]
    fn wrong_secret_is_rejected_with_a_reason() {
        let (mut a, hello) = AgentSession::new(b"guess", R, "h", [1; 16], 0);
        let mut r = RouterSession::new(b"s3cret", [2; 16], Heartbeats::default(), 0);
        let (ae, re) = converse(&mut a, &mut r, hello, 0);
        assert!(
            matches!(&re[..], [RouterEvent::Rejected { reason }] if reason.contains("wrong shared secret")),
            "{re:?}"
        );
        assert!(matches!(&ae[..], [AgentEvent::Rejected { .. }]), "{ae:?}");
        assert!(r.is_closed() && r.replica().is_none());
    }

    /// The router's admission policy is asked before the challenge and again
    /// after the proof: a peer refused at either point gets no welcome and
    /// registers nothing, with the policy's reason (here: a live agent took
    /// the replica while this one was authenticating).
    #[test]
    fn admission_refuses_before_the_challenge_and_after_the_proof() {
        let (_, hello) = AgentSession::new(b"s3cret", R, "intruder", [1; 16], 0);
        let mut r = RouterSession::new(b"s3cret", [2; 16], Heartbeats::default(), 0);
        let mut out = Vec::new();
        let ev = r.handle_admitting(
            hello,
            0,
            |_, _| Err("speaks from 198.18.1.2".into()),
            &mut out,
        );
        assert!(
            matches!(ev, Some(RouterEvent::Rejected { ref reason }) if reason.contains("198.18.1.2")),
            "{ev:?}"
        );
        assert!(matches!(out[..], [Msg::Reject { .. }]), "{out:?}");

        let (mut a, hello) = AgentSession::new(b"s3cret", R, "second", [1; 16], 0);
        let mut r = RouterSession::new(b"s3cret", [2; 16], Heartbeats::default(), 0);
        let admit = |_: Ipv4Addr, proven: bool| {
            if !proven {
                Ok(())
            } else {
                Err("a live agent already speaks for it".to_string())
            }
        };
        let mut to_agent = Vec::new();
        assert_eq!(r.handle_admitting(hello, 0, admit, &mut to_agent), None);
        let mut to_router = Vec::new();
        for m in to_agent.drain(..) {
            a.handle(m, 0, &mut to_router);
        }
        let mut re = Vec::new();
        for m in to_router {
            re.extend(r.handle_admitting(m, 0, admit, &mut to_agent));
        }
        assert!(
            matches!(&re[..], [RouterEvent::Rejected { reason }] if reason.contains("live agent") && reason.contains("proved the shared secret")),
            "{re:?}"
        );
        assert!(
            !to_agent.iter().any(|m| matches!(m, Msg::Welcome { .. })),
            "{to_agent:?}"
        );
        assert!(r.is_closed() && r.replica().is_none());
    }

    #[test]
    fn unknown_replica_and_skipped_steps_are_rejected() {
        let (_, hello) = AgentSession::new(b"s", Ipv4Addr::new(10, 0, 0, 9), "h", [1; 16], 0);
        let mut r = RouterSession::new(b"s", [2; 16], Heartbeats::default(), 0);
        let mut out = Vec::new();
        let ev = r.handle(hello, 0, |x| x == R, &mut out);
        assert!(
            matches!(ev, Some(RouterEvent::Rejected { ref reason }) if reason.contains("not in the router's configuration"))
        );

        // A heartbeat without authenticating first.
        let mut r = RouterSession::new(b"s", [2; 16], Heartbeats::default(), 0);
        let ev = r.handle(Msg::Heartbeat { seq: 1, records: 0 }, 0, |_| true, &mut out);
        assert!(matches!(ev, Some(RouterEvent::Rejected { .. })));
    }

    /// A router that does not know the secret cannot fake a welcome.
    #[test]
    fn agent_checks_the_router() {
        let (mut a, _hello) = AgentSession::new(b"s3cret", R, "h", [1; 16], 0);
        let mut out = Vec::new();
        a.handle(
            Msg::Challenge {
                nonce: hex(&[9; 16]),
            },
            0,
            &mut out,
        );
        let ev = a.handle(
            Msg::Welcome {
                mac: hex(&[0; 32]),
                heartbeat_ms: 100,
                dead_after_ms: 500,
                tick_ms: 10,
            },
            0,
            &mut out,
        );
        assert!(matches!(ev, Some(AgentEvent::Rejected { .. })), "{ev:?}");
    }

    /// Every agent of the group gives its shims the same hello: the seed
    /// from the shared secret (another secret, another seed), the router's
    /// tick and epoch; and a tick record carries the time and the service.
    #[test]
    fn agents_of_one_group_say_the_same_hello() {
        let hb = Heartbeats {
            tick_ms: 10,
            ..Heartbeats::default()
        };
        let hello_of = |secret: &[u8], nonce: u8| {
            let (mut a, hello) = AgentSession::new(secret, R, "h", [nonce; 16], 0);
            let mut r = RouterSession::new(secret, [nonce + 1; 16], hb, 0);
            assert!(
                a.hello.is_none(),
                "no hello before the router said how the clock goes"
            );
            converse(&mut a, &mut r, hello, 0);
            a.hello.expect("registered: a hello")
        };
        let h1 = hello_of(b"0123456789abcdef", 1);
        let h2 = hello_of(b"0123456789abcdef", 7);
        assert_eq!(h1, h2);
        assert_ne!(h1[..16], hello_of(b"0123456789abcdeX", 1)[..16]);
        assert_eq!(h1[16], 7);
        assert_eq!(h1[17], 1, "ticks on");
        let mut e = [0u8; 8];
        e[..6].copy_from_slice(&h1[18..24]);
        assert_eq!(u64::from_le_bytes(e), SHIM_EPOCH_MS);
        let tick = shim_record(
            &NumberedInput {
                seq: 5,
                key: ConnKey {
                    client: Ipv4Addr::UNSPECIFIED,
                    cport: 0,
                    vip: Ipv4Addr::new(198, 19, 0, 1),
                    vport: 6379,
                },
                kind: InputKind::Tick {
                    at_us: 0x0012_3456_789a_bcde,
                },
            },
            None,
        );
        assert_eq!(
            tick,
            [
                5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xeb, 0x18, 6, 0xde, 0xbc, 0x9a, 0x78,
                0x56, 0x34, 0x12
            ]
        );
    }

    #[test]
    fn silence_means_lost_heartbeats_keep_alive() {
        let hb = Heartbeats {
            every: Duration::from_millis(100),
            dead_after: Duration::from_millis(500),
            ..Heartbeats::default()
        };
        let (mut a, hello) = AgentSession::new(b"k", R, "h", [1; 16], 0);
        let mut r = RouterSession::new(b"k", [2; 16], hb, 0);
        converse(&mut a, &mut r, hello, 0);
        // Heartbeats flow for 2 s: nobody is lost.
        for t in (0..2000).step_by(10) {
            let mut to_r = Vec::new();
            assert_eq!(a.on_timeout(t, &mut to_r), None);
            let mut to_a = Vec::new();
            for m in to_r {
                assert_eq!(r.handle(m, t, |_| true, &mut to_a), None);
            }
            assert_eq!(r.on_timeout(t, &mut to_a), None, "lost at {t} ms");
            for m in to_a {
                a.handle(m, t, &mut Vec::new());
            }
        }
        // Then the agent falls silent (host lost) after its heartbeat at
        // 1900 ms: the router notices 500 ms later, not before.
        let mut out = Vec::new();
        for t in (2000..2399).step_by(10) {
            assert_eq!(r.on_timeout(t, &mut out), None);
        }
        assert_eq!(r.on_timeout(2399, &mut out), None);
        assert_eq!(
            r.on_timeout(2400, &mut out),
            Some(RouterEvent::Lost {
                replica: R,
                silent: Duration::from_millis(500)
            })
        );
        // The agent gave up on the router earlier (last ack at 1900 ms):
        // after three heartbeats (300 ms), to find a new master sooner.
        assert_eq!(a.on_timeout(2199, &mut out), None);
        assert_eq!(a.on_timeout(2200, &mut out), Some(AgentEvent::RouterLost));
        // Closed, but it was registered: the agent looks for the router's
        // successor at its fast pace.
        assert!(!a.is_live() && a.registered());
    }

    /// The router's side stops running for 2 s (its process stopped) while
    /// the agent's heartbeats stop reaching it: run again, it does not take
    /// the agent for lost at once (the silence it measured across its own
    /// gap is not the agent's), only after `dead_after` of silence it saw.
    #[test]
    fn a_router_that_did_not_run_counts_no_silence_across_its_own_gap() {
        let (mut a, hello) = AgentSession::new(b"s3cret", R, "host1", [1; 16], 0);
        let mut r = RouterSession::new(b"s3cret", [2; 16], Heartbeats::default(), 0);
        converse(&mut a, &mut r, hello, 0);
        assert_eq!(Heartbeats::default().dead_after, Duration::from_millis(500));
        let mut out = Vec::new();
        for t in (0..=100).step_by(10) {
            assert_eq!(r.on_timeout(t, &mut out), None);
        }
        // Heard last at 0; nothing runs from 100 ms to 2,100 ms.
        assert_eq!(r.on_timeout(2100, &mut out), None, "not lost at once");
        for t in (2110..2500).step_by(10) {
            assert_eq!(r.on_timeout(t, &mut out), None);
        }
        // 100 ms of silence before the gap, 400 after it: lost.
        assert_eq!(
            r.on_timeout(2500, &mut out),
            Some(RouterEvent::Lost {
                replica: R,
                silent: Duration::from_millis(500)
            })
        );
    }

    /// An agent that gives a silent router up says so in its last frame
    /// (`Reconnecting`): the router, should it only have been held, waits
    /// for the agent's next registration before it counts the order lost
    /// to the servers that follow it through this agent.
    #[test]
    fn an_agent_giving_its_router_up_says_it_comes_back() {
        let (mut a, hello) = AgentSession::new(b"k", R, "h", [1; 16], 0);
        let mut r = RouterSession::new(b"k", [2; 16], Heartbeats::default(), 0);
        converse(&mut a, &mut r, hello, 0);
        let mut out = Vec::new();
        let mut lost = None;
        for t in (0..=1000).step_by(10) {
            out.clear();
            if let Some(e) = a.on_timeout(t, &mut out) {
                lost = Some((e, t));
                break;
            }
        }
        let (e, t) = lost.expect("the silent router is given up");
        assert_eq!(e, AgentEvent::RouterLost);
        assert_eq!(out.last(), Some(&Msg::Reconnecting {}), "{out:?}");
        let mut back = Vec::new();
        let evs: Vec<_> = out
            .into_iter()
            .filter_map(|m| r.handle(m, t, |_| true, &mut back))
            .collect();
        assert_eq!(evs, vec![RouterEvent::Reconnecting { replica: R }]);
    }

    #[test]
    fn the_agent_gives_its_router_up_after_three_heartbeats_within_bounds() {
        assert_eq!(router_silence_ms(100, 500), 300);
        assert_eq!(router_silence_ms(50, 500), 150);
        assert_eq!(router_silence_ms(10, 500), 150, "never below 150 ms");
        assert_eq!(router_silence_ms(10, 100), 100, "never above dead_after");
        assert_eq!(router_silence_ms(1000, 5000), 3000);
    }

    /// A router whose process is silent while its host still acknowledges
    /// what the agent sends (busy: one that has just taken over rebuilds
    /// its table) is given 4 × `dead_after`, not three heartbeats: a session
    /// given up while the router writes to it takes the replica out. A
    /// host that acknowledges nothing either (cut off) is given up after
    /// three heartbeats.
    #[test]
    fn the_agent_gives_a_busy_router_whose_host_answers_dead_after() {
        for host_answers in [true, false] {
            let (mut a, hello) = AgentSession::new(b"k", R, "h", [1; 16], 0);
            let mut r = RouterSession::new(b"k", [2; 16], Heartbeats::default(), 0);
            converse(&mut a, &mut r, hello, 0);
            let mut out = Vec::new();
            let mut lost_at = None;
            for t in (0..=3000).step_by(10) {
                if host_answers {
                    // The router's kernel acknowledges each heartbeat.
                    a.router_host_acked(t, t % 100);
                }
                if let Some(e) = a.on_timeout(t, &mut out) {
                    assert_eq!(e, AgentEvent::RouterLost);
                    lost_at = Some(t);
                    break;
                }
            }
            let want = if host_answers { 2000 } else { 300 };
            assert_eq!(lost_at, Some(want), "host answers: {host_answers}");
        }
    }

    #[test]
    fn records_are_kept_until_closed() {
        let (mut a, hello) = AgentSession::new(b"k", R, "h", [1; 16], 0);
        let mut r = RouterSession::new(b"k", [2; 16], Heartbeats::default(), 0);
        converse(&mut a, &mut r, hello, 0);
        let id = ConnKey {
            client: Ipv4Addr::new(198, 18, 1, 2),
            cport: 40000,
            vip: Ipv4Addr::new(198, 19, 0, 1),
            vport: 6379,
        };
        let rec = ConnRecord {
            key: id,
            client_isn: 1,
            router_isn: 2,
            wscale_out: 7,
            ts_base: Some(5),
            client_mss: 1460,
            mss_out: 1448,
            client_wscale: Some(7),
            replicas: vec![ReplicaSetup {
                addr: R,
                isn: 3,
                wscale: 9,
            }],
            accepted: false,
            input_end: None,
            snd_una: None,
            fin_received: false,
        };
        let mut out = Vec::new();
        a.handle(
            Msg::ConnOpen {
                record: rec.clone(),
            },
            1,
            &mut out,
        );
        assert_eq!(a.records.get(&id), Some(&rec));
        a.handle(Msg::ConnClose { key: id }, 2, &mut out);
        assert!(a.records.is_empty());
    }

    /// Output commit: the agent confirms each record it stored, records
    /// that came together in one message, and the router's session turns
    /// that into an event naming the replica.
    #[test]
    fn stored_records_are_confirmed() {
        let (mut a, hello) = AgentSession::new(b"k", R, "h", [1; 16], 0);
        let mut r = RouterSession::new(b"k", [2; 16], Heartbeats::default(), 0);
        converse(&mut a, &mut r, hello, 0);
        let mut out = Vec::new();
        for p in [1, 2, 3] {
            a.handle(Msg::ConnOpen { record: record(p) }, 1, &mut out);
        }
        let keys: Vec<ConnKey> = [1, 2, 3].iter().map(|&p| record(p).key).collect();
        assert_eq!(out, vec![Msg::Stored { keys: keys.clone() }]);
        // On the wire and back.
        let mut dec = Decoder::default();
        dec.push(&encode(&out[0]));
        let m = dec.next_msg().unwrap().unwrap();
        let mut back = Vec::new();
        assert_eq!(
            r.handle(m, 2, |_| true, &mut back),
            Some(RouterEvent::Stored { replica: R, keys })
        );
        assert!(back.is_empty());
    }

    fn record(cport: u16) -> ConnRecord {
        ConnRecord {
            key: ConnKey {
                client: Ipv4Addr::new(198, 18, 1, 2),
                cport,
                vip: Ipv4Addr::new(198, 19, 0, 1),
                vport: 6379,
            },
            client_isn: u32::from(cport),
            router_isn: 2,
            wscale_out: 7,
            ts_base: None,
            client_mss: 1460,
            mss_out: 1448,
            client_wscale: Some(7),
            replicas: vec![ReplicaSetup {
                addr: R,
                isn: 3,
                wscale: 7,
            }],
            accepted: false,
            input_end: None,
            snd_una: None,
            fin_received: false,
        }
    }

    /// A router that starts or takes over gets every record the agent keeps
    /// as soon as the agent registers, in as many messages as needed.
    #[test]
    fn records_go_to_a_new_router_on_registering() {
        let (mut a, hello) = AgentSession::new(b"k", R, "h", [1; 16], 0);
        for p in 0..300 {
            let r = record(40000 + p);
            a.records.insert(r.key, r);
        }
        let mut r = RouterSession::new(b"k", [2; 16], Heartbeats::default(), 0);
        let (_, re) = converse(&mut a, &mut r, hello, 0);
        let mut got = Vec::new();
        for e in &re {
            if let RouterEvent::Records { replica, records } = e {
                assert_eq!(*replica, R);
                assert!(records.len() <= RECORDS_PER_MSG);
                assert!(
                    encode(&Msg::Records {
                        records: records.clone()
                    })
                    .len()
                        <= MAX_FRAME
                );
                got.extend(records.iter().map(|r| r.key.cport));
            }
        }
        got.sort_unstable();
        assert_eq!(got, (40000..40300).collect::<Vec<u16>>());
        // Only the last message is short: it tells the router it has them
        // all. An agent with no record, or a multiple of the chunk, sends
        // an empty one last.
        for n in [0usize, RECORDS_PER_MSG, 2 * RECORDS_PER_MSG, 5] {
            let (mut a, hello) = AgentSession::new(b"k", R, "h", [1; 16], 0);
            for p in 0..u16::try_from(n).expect("a few hundred") {
                let r = record(40000 + p);
                a.records.insert(r.key, r);
            }
            let mut r = RouterSession::new(b"k", [2; 16], Heartbeats::default(), 0);
            let (_, re) = converse(&mut a, &mut r, hello, 0);
            let sizes: Vec<usize> = re
                .iter()
                .filter_map(|e| match e {
                    RouterEvent::Records { records, .. } => Some(records.len()),
                    _ => None,
                })
                .collect();
            let (last, full) = sizes.split_last().expect("at least one Records message");
            assert!(*last < RECORDS_PER_MSG, "{n} records: {sizes:?}");
            assert!(
                full.iter().all(|&k| k == RECORDS_PER_MSG),
                "{n} records: {sizes:?}"
            );
            assert_eq!(sizes.iter().sum::<usize>(), n);
        }
        // Records from an agent that has not authenticated are refused.
        let mut r2 = RouterSession::new(b"k", [3; 16], Heartbeats::default(), 0);
        let mut out = Vec::new();
        let ev = r2.handle(
            Msg::Records {
                records: vec![record(1)],
            },
            0,
            |_| true,
            &mut out,
        );
        assert!(matches!(ev, Some(RouterEvent::Rejected { .. })), "{ev:?}");
    }

    /// The records handed to a new router carry the replica's SND.UNA
    /// where the caller read its kernel's count of acknowledged bytes
    /// before the `Welcome` (ISN + 1 + bytes, modulo 2^32), and whether
    /// the kernel took the client's FIN; only that once: the agent's own
    /// records are unchanged.
    #[test]
    fn records_handed_over_carry_the_replicas_snd_una() {
        let (mut a, hello) = AgentSession::new(b"k", R, "h", [1; 16], 0);
        for p in [40000, 40001] {
            let r = record(p);
            a.records.insert(r.key, r);
        }
        let client = Ipv4Addr::new(198, 18, 1, 2);
        let info = |b, fin_received| SocketInfo {
            bytes_acked: b,
            fin_received,
        };
        a.note_sockets(Some(HashMap::from([
            ((client, 40000, 6379), info(Some((1u64 << 32) + 5), false)),
            ((client, 40001, 6379), info(None, true)),
            ((client, 40002, 6379), info(Some(77), true)),
        ])));
        let una = |a: &mut AgentSession, hello| {
            let mut r = RouterSession::new(b"k", [2; 16], Heartbeats::default(), 0);
            let (_, re) = converse(a, &mut r, hello, 0);
            let mut got: Vec<(u16, Option<u32>, bool)> = re
                .iter()
                .filter_map(|e| match e {
                    RouterEvent::Records { records, .. } => Some(records.clone()),
                    _ => None,
                })
                .flatten()
                .map(|r| (r.key.cport, r.snd_una, r.fin_received))
                .collect();
            got.sort_unstable();
            got
        };
        assert_eq!(
            una(&mut a, hello),
            vec![(40000, Some(3 + 1 + 5), false), (40001, None, true)]
        );
        assert!(a
            .records
            .values()
            .all(|r| r.snd_una.is_none() && !r.fin_received));
        let (mut b, hello) = AgentSession::new(b"k", R, "h", [1; 16], 0);
        b.records = std::mem::take(&mut a.records);
        assert_eq!(
            una(&mut b, hello),
            vec![(40000, None, false), (40001, None, false)]
        );
    }

    /// A record whose connection the replica's kernel no longer has is
    /// dropped at the next `Welcome`, not handed over (adopted, its leg
    /// would be probed, answered with a RST and evicted as a replica that
    /// reset a live connection); unless it is younger than
    /// `RECORD_SETTLE_MS` and no earlier look saw its socket (a SYN
    /// cookie: no socket until the client's ACK), or the kernel would not
    /// say. What the agent knows of a record carries over to the next
    /// session with it.
    #[test]
    fn records_of_connections_the_kernel_closed_are_not_handed_over() {
        let client = Ipv4Addr::new(198, 18, 1, 2);
        let (mut a, hello) = AgentSession::new(b"k", R, "h", [1; 16], 0);
        let mut r = RouterSession::new(b"k", [2; 16], Heartbeats::default(), 0);
        converse(&mut a, &mut r, hello, 0);
        let mut out = Vec::new();
        // 40000 and 40001 stored at 1 s, 40002 and 40003 at 5 s.
        for (p, t) in [
            (40000, 1_000),
            (40001, 1_000),
            (40002, 5_000),
            (40003, 5_000),
        ] {
            a.handle(Msg::ConnOpen { record: record(p) }, t, &mut out);
        }
        let handed = |a: &mut AgentSession, now: u64, sockets| {
            let (mut b, hello) = AgentSession::new(b"k", R, "h", [1; 16], now);
            b.records = std::mem::take(&mut a.records);
            b.record_info = std::mem::take(&mut a.record_info);
            b.note_sockets(sockets);
            let mut r = RouterSession::new(b"k", [2; 16], Heartbeats::default(), now);
            let (_, re) = converse(&mut b, &mut r, hello, now);
            let mut got: Vec<u16> = re
                .iter()
                .filter_map(|e| match e {
                    RouterEvent::Records { records, .. } => Some(records.clone()),
                    _ => None,
                })
                .flatten()
                .map(|r| r.key.cport)
                .collect();
            got.sort_unstable();
            let mut dropped: Vec<u16> = b.take_dropped().iter().map(|k| k.cport).collect();
            dropped.sort_unstable();
            *a = b;
            (got, dropped)
        };
        // The kernel would not say: everything goes.
        assert_eq!(
            handed(&mut a, 5_500, None),
            (vec![40000, 40001, 40002, 40003], vec![])
        );
        // It has 40001 (TIME-WAIT, say: no byte count) and 40003: 40000 is
        // dropped; 40002 is too young to tell.
        let sockets = |ports: &[u16]| {
            Some(HashMap::from_iter(
                ports
                    .iter()
                    .map(|&p| ((client, p, 6379), SocketInfo::default())),
            ))
        };
        assert_eq!(
            handed(&mut a, 6_000, sockets(&[40001, 40003])),
            (vec![40001, 40002, 40003], vec![40000])
        );
        assert!(
            !a.records.keys().any(|k| k.cport == 40000),
            "forgotten here too"
        );
        // 40003's socket, seen at 6 s, is gone at 7 s: it closed, young as
        // its record is. 40002 was never seen and is still young.
        assert_eq!(
            handed(&mut a, 7_000, sockets(&[40001])),
            (vec![40001, 40002], vec![40003])
        );
        // Later, 40002 has settled and is gone as well.
        assert_eq!(
            handed(&mut a, 9_000, sockets(&[40001])),
            (vec![40001], vec![40002])
        );
    }

    /// The replicas out of service, as a router told the agent, go to the
    /// next router first thing after registering — before the records, so
    /// that a replica that left the group is out before anything is
    /// adopted; and only from an authenticated agent.
    #[test]
    fn the_agent_keeps_and_reports_replicas_out_of_service() {
        let (mut a, hello) = AgentSession::new(b"k", R, "h", [1; 16], 0);
        let mut r = RouterSession::new(b"k", [2; 16], Heartbeats::default(), 0);
        converse(&mut a, &mut r, hello, 0);
        let down = vec![OutOfService {
            vip: Ipv4Addr::new(198, 19, 0, 1),
            port: 6379,
            replica: Ipv4Addr::new(198, 18, 13, 2),
        }];
        let mut out = Vec::new();
        a.handle(Msg::OutOfService { down: down.clone() }, 1, &mut out);
        assert!(out.is_empty(), "kept, not answered");
        let r0 = record(40000);
        a.records.insert(r0.key, r0);
        // The next router (the agent's session carries its state over).
        let (mut b, hello) = AgentSession::new(b"k", R, "h", [3; 16], 2);
        b.down = std::mem::take(&mut a.down);
        b.records = std::mem::take(&mut a.records);
        let mut r2 = RouterSession::new(b"k", [4; 16], Heartbeats::default(), 2);
        let (_, re) = converse(&mut b, &mut r2, hello, 2);
        let at = |f: &dyn Fn(&RouterEvent) -> bool| re.iter().position(f);
        let oos = at(
            &|e| matches!(e, RouterEvent::OutOfService { replica, down: d } if *replica == R && *d == down),
        );
        let recs = at(&|e| matches!(e, RouterEvent::Records { .. }));
        assert!(oos.is_some() && recs.is_some() && oos < recs, "{re:?}");
        // Not from an agent that has not authenticated.
        let mut r3 = RouterSession::new(b"k", [5; 16], Heartbeats::default(), 0);
        let ev = r3.handle(Msg::OutOfService { down }, 0, |_| true, &mut out);
        assert!(matches!(ev, Some(RouterEvent::Rejected { .. })), "{ev:?}");
    }

    fn input(seq: u64, cport: u16, kind: InputKind) -> Msg {
        Msg::Input {
            seq,
            key: record(cport).key,
            kind,
        }
    }

    /// The agent remembers where the order stands, per connection (in its
    /// records) and per service port (its report on registering, with a
    /// bounded tail).
    #[test]
    fn the_agent_keeps_and_reports_the_order() {
        let (mut a, hello) = AgentSession::new(b"k", R, "h", [1; 16], 0);
        let mut r = RouterSession::new(b"k", [2; 16], Heartbeats::default(), 0);
        let (_, re) = converse(&mut a, &mut r, hello, 0);
        assert!(
            re.contains(&RouterEvent::Order {
                replica: R,
                services: vec![]
            }),
            "a fresh agent reports an empty order: {re:?}"
        );
        let mut out = Vec::new();
        a.handle(Msg::ConnOpen { record: record(7) }, 1, &mut out);
        let mut passed = Vec::new();
        let mut isns = Vec::new();
        let mut feed = |a: &mut AgentSession, m: Msg| {
            if let Some(AgentEvent::Input(e, isn)) = a.handle(m, 1, &mut Vec::new()) {
                passed.push(e.seq);
                isns.push(isn);
            }
        };
        feed(&mut a, input(1, 7, InputKind::Accept));
        for s in 2..=203 {
            feed(
                &mut a,
                input(
                    s,
                    7,
                    InputKind::Data {
                        end: u32::try_from(s).unwrap() * 10,
                    },
                ),
            );
        }
        assert_eq!(passed, (1..=203).collect::<Vec<u64>>());
        assert_eq!(
            isns[0],
            Some(record(7).client_isn),
            "an accept names its client's ISN for the shim"
        );
        assert!(isns[1..].iter().all(Option::is_none));
        let rec = &a.records[&record(7).key];
        assert!(rec.accepted);
        assert_eq!(rec.input_end, Some(2030));
        let rep = a.order.report();
        assert_eq!(rep.len(), 1);
        assert_eq!(rep[0].last_seq, 203);
        assert_eq!(rep[0].tail.len(), ORDER_TAIL);
        assert_eq!(rep[0].tail.last().map(|e| e.seq), Some(203));
        assert!(
            encode(&Msg::Order { services: rep }).len() * 8 <= MAX_FRAME,
            "eight service ports fit in a frame"
        );
    }

    /// A server that lost the order is reported at once when the agent is
    /// registered, on registering when it is not, and again to every later
    /// router: the replica must stay out of the group.
    #[test]
    fn a_lost_order_reaches_every_router() {
        let lost = |re: &[RouterEvent]| {
            re.iter()
                .filter_map(|e| match e {
                    RouterEvent::OrderLost { replica, reason } if *replica == R => {
                        Some(reason.clone())
                    }
                    _ => None,
                })
                .collect::<Vec<_>>()
        };
        let (mut a, hello) = AgentSession::new(b"k", R, "h", [1; 16], 0);
        let mut r = RouterSession::new(b"k", [2; 16], Heartbeats::default(), 0);
        let (_, re) = converse(&mut a, &mut r, hello, 0);
        assert!(lost(&re).is_empty(), "{re:?}");
        let mut out = Vec::new();
        a.lose_order("shim closed its socket", &mut out);
        a.lose_order("a second reason is not repeated", &mut out);
        assert_eq!(
            out,
            vec![Msg::OrderLost {
                reason: "shim closed its socket".into()
            }]
        );
        // Through the wire format and the router's session.
        let mut d = Decoder::default();
        d.push(&encode(&out[0]));
        let m = d.next_msg().unwrap().unwrap();
        let ev = r.handle(m, 1, |_| true, &mut Vec::new());
        assert_eq!(
            ev,
            Some(RouterEvent::OrderLost {
                replica: R,
                reason: "shim closed its socket".into()
            })
        );
        // The next router (a restart, a takeover) hears it on registering.
        let (mut b, hello) = AgentSession::new(b"k", R, "h", [3; 16], 5);
        b.order_lost = a.order_lost.take();
        let mut r2 = RouterSession::new(b"k", [4; 16], Heartbeats::default(), 5);
        let (_, re) = converse(&mut b, &mut r2, hello, 5);
        assert_eq!(lost(&re), vec!["shim closed its socket".to_string()]);
        // Lost before registering: said on registering.
        let (mut c, hello) = AgentSession::new(b"k", R, "h", [5; 16], 9);
        let mut out = Vec::new();
        c.lose_order("hole in the order", &mut out);
        assert!(out.is_empty(), "nobody to tell yet");
        let mut r3 = RouterSession::new(b"k", [6; 16], Heartbeats::default(), 9);
        let (_, re) = converse(&mut c, &mut r3, hello, 9);
        assert_eq!(lost(&re), vec!["hole in the order".to_string()]);
    }

    /// The router learns how many servers follow the order through the
    /// agent, once per change and again after registering anew.
    #[test]
    fn the_shim_count_is_told_on_change() {
        let (mut a, hello) = AgentSession::new(b"k", R, "h", [1; 16], 0);
        let mut out = Vec::new();
        a.set_shims(1, &mut out);
        assert!(out.is_empty(), "not registered yet");
        let mut r = RouterSession::new(b"k", [2; 16], Heartbeats::default(), 0);
        converse(&mut a, &mut r, hello, 0);
        a.set_shims(1, &mut out);
        a.set_shims(1, &mut out);
        a.set_shims(0, &mut out);
        assert_eq!(out, vec![Msg::Shims { count: 1 }, Msg::Shims { count: 0 }]);
        let ev = r.handle(out[0].clone(), 1, |_| true, &mut Vec::new());
        assert_eq!(
            ev,
            Some(RouterEvent::Shims {
                replica: R,
                count: 1
            })
        );
        // An agent of the previous protocol is refused with a reason.
        let mut r = RouterSession::new(b"k", [2; 16], Heartbeats::default(), 0);
        let mut o = Vec::new();
        let ev = r.handle(
            Msg::Hello {
                version: 2,
                replica: R,
                host: "h".into(),
                nonce: hex(&[1; 16]),
            },
            0,
            |_| true,
            &mut o,
        );
        assert!(
            matches!(ev, Some(RouterEvent::Rejected { reason }) if reason.contains("version 2"))
        );
    }

    /// A record from an agent of the previous version (without the fields
    /// added for takeover) still parses.
    /// The core's record and input events cross the wire unchanged (the
    /// one vocabulary: no conversion on either side).
    #[test]
    fn records_and_inputs_cross_the_wire_unchanged() {
        let mut rec = record(7);
        rec.ts_base = Some(99);
        rec.input_end = Some(12);
        let msgs = [
            Msg::ConnOpen { record: rec },
            input(3, 7, InputKind::Data { end: 0xdead_beef }),
            input(4, 8, InputKind::Accept),
        ];
        let mut dec = Decoder::default();
        for m in &msgs {
            dec.push(&encode(m));
        }
        for m in &msgs {
            assert_eq!(dec.next_msg().unwrap().as_ref(), Some(m));
        }
    }

    /// The same vector as the shim's `record_format_is_fixed` test: the two
    /// ends of the Unix socket agree byte for byte.
    #[test]
    fn shim_record_matches_the_shims_format() {
        let key = ConnKey {
            client: Ipv4Addr::new(0xc6, 0x12, 0x01, 0x02),
            cport: 40000,
            vip: Ipv4Addr::new(198, 19, 0, 1),
            vport: 6379,
        };
        let ev = NumberedInput {
            seq: 0x0102_0304_0506_0708,
            key,
            kind: InputKind::Data { end: 0xaabb_ccdd },
        };
        assert_eq!(
            shim_record(&ev, None),
            [
                8, 7, 6, 5, 4, 3, 2, 1, 0xc6, 0x12, 0x01, 0x02, 0x40, 0x9c, 0xeb, 0x18, 2, 0, 0, 0,
                0xdd, 0xcc, 0xbb, 0xaa
            ]
        );
    }

    #[test]
    fn decoder_handles_split_and_hostile_frames() {
        let f = encode(&Msg::HeartbeatAck { seq: 7 });
        let mut d = Decoder::default();
        for b in &f[..f.len() - 1] {
            d.push(&[*b]);
            assert_eq!(d.next_msg(), Ok(None));
        }
        d.push(&f[f.len() - 1..]);
        assert_eq!(d.next_msg(), Ok(Some(Msg::HeartbeatAck { seq: 7 })));

        let mut d = Decoder::default();
        d.push(&u32::MAX.to_be_bytes());
        assert_eq!(d.next_msg(), Err(FrameError::TooLarge(u32::MAX as usize)));
        let mut d = Decoder::default();
        d.push(&3u32.to_be_bytes());
        d.push(b"{x}");
        assert!(matches!(d.next_msg(), Err(FrameError::Malformed(_))));
    }
}

#[cfg(test)]
mod join_tests {
    use super::*;

    /// A join's messages cross the wire unchanged, state pieces inside a
    /// frame, and the hex of the state comes back byte for byte.
    #[test]
    fn join_messages_round_trip_and_fit_a_frame() {
        let state: Vec<u8> = (0..STATE_CHUNK)
            .map(|i| u8::try_from(i * 7 % 256).unwrap_or(0))
            .collect();
        let m = Msg::State {
            join: 3,
            data: state_hex(&state),
            last: true,
            digest: Some("ab".repeat(20)),
        };
        let wire = encode(&m);
        assert!(wire.len() <= MAX_FRAME, "{} bytes", wire.len());
        let mut d = Decoder::default();
        d.push(&wire);
        let back = d.next_msg().unwrap().unwrap();
        assert_eq!(back, m);
        let Msg::State { data, .. } = back else {
            unreachable!()
        };
        assert_eq!(state_unhex(&data).unwrap(), state);
        assert_eq!(state_unhex("0g"), None);
        assert_eq!(state_unhex("abc"), None);
        let q = shim_query(0x0102);
        assert_eq!((q[0], q[1], q[16]), (2, 1, 4));
        let j = shim_record(
            &NumberedInput {
                seq: 9,
                key: ConnKey {
                    client: Ipv4Addr::new(1, 2, 3, 4),
                    cport: 5,
                    vip: Ipv4Addr::new(9, 9, 9, 9),
                    vport: 6,
                },
                kind: InputKind::Join { base: 0x0a0b_0c0d },
            },
            Some(1),
        );
        assert_eq!(j[16], 3);
        assert_eq!(&j[20..24], &[0x0d, 0x0c, 0x0b, 0x0a]);
    }
}
