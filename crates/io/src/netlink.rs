//! A small rtnetlink client (`NETLINK_ROUTE`): exactly the policy rules,
//! routes and link settings the router needs, without running `ip`.
//!
//! Rules and routes are given as the words of the equivalent `ip rule add`
//! / `ip route replace` command ([`Rule::parse`], [`Route::parse`]): that is
//! what the router logs and records (a record written by any version is
//! removable by any other), and each error names that command. The
//! messages are those `ip` (iproute2) sends for the same words: the same
//! header fields, attributes and flags, so the kernel ends up with the same
//! rules (`ip rule show` prints them identically).
//!
//! Sysctls are not here: the kernel has no netlink interface for them, they
//! are files under `/proc/sys` (see `routing.rs`).

use crate::Error;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

// linux/netlink.h
const NLMSG_HDRLEN: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_REPLACE: u16 = 0x100;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const NLM_F_DUMP: u16 = 0x300;
const NLA_TYPE_MASK: u16 = 0x3fff;

// linux/rtnetlink.h
const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
const RTM_NEWROUTE: u16 = 24;
const RTM_DELROUTE: u16 = 25;
const RTM_GETROUTE: u16 = 26;
const RTM_NEWRULE: u16 = 32;
const RTM_DELRULE: u16 = 33;
const RTM_GETRULE: u16 = 34;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const RTA_PRIORITY: u16 = 6;
const RTA_TABLE: u16 = 15;
const RTN_UNICAST: u8 = 1;
const RTN_LOCAL: u8 = 2;
const RTN_BLACKHOLE: u8 = 6;
const RTN_UNREACHABLE: u8 = 7;
const RTN_PROHIBIT: u8 = 8;
const RTPROT_BOOT: u8 = 3;
const RT_SCOPE_UNIVERSE: u8 = 0;
const RT_SCOPE_LINK: u8 = 253;
const RT_SCOPE_HOST: u8 = 254;
const RT_SCOPE_NOWHERE: u8 = 255;
const RT_TABLE_DEFAULT: u32 = 253;
const RT_TABLE_MAIN: u32 = 254;
const RT_TABLE_LOCAL: u32 = 255;
const RTM_F_LOOKUP_TABLE: u32 = 0x1000;
const AF_INET: u8 = 2;

// linux/fib_rules.h
const FRA_DST: u16 = 1;
const FRA_SRC: u16 = 2;
const FRA_IIFNAME: u16 = 3;
const FRA_GOTO: u16 = 4;
const FRA_PRIORITY: u16 = 6;
const FRA_TABLE: u16 = 15;
const FRA_OIFNAME: u16 = 17;
const FRA_IP_PROTO: u16 = 22;
const FRA_SPORT_RANGE: u16 = 23;
const FRA_DPORT_RANGE: u16 = 24;
const FR_ACT_TO_TBL: u8 = 1;
const FR_ACT_GOTO: u8 = 2;
const FR_ACT_NOP: u8 = 3;
const FIB_RULE_INVERT: u32 = 0x2;
const FIB_RULE_UNRESOLVED: u32 = 0x4;
const FIB_RULE_IIF_DETACHED: u32 = 0x8;
const FIB_RULE_OIF_DETACHED: u32 = 0x10;

// linux/if_link.h, linux/if.h
const IFLA_IFNAME: u16 = 3;
const IFLA_MTU: u16 = 4;
const IFLA_TXQLEN: u16 = 13;
const IFLA_LINKINFO: u16 = 18;
const IFLA_INFO_KIND: u16 = 1;
const IFLA_INFO_DATA: u16 = 2;
const IFLA_TUN_PERSIST: u16 = 6;
const IFLA_TUN_NUM_QUEUES: u16 = 8;
const IFF_UP: u32 = 0x1;

/// One netlink message being built: header, fixed part, attributes.
struct Msg(Vec<u8>);

impl Msg {
    /// `ty` with `flags` (NLM_F_REQUEST is always set) and the fixed part
    /// `head` (`struct fib_rule_hdr`, `rtmsg`, `ifinfomsg`).
    fn new(ty: u16, flags: u16, head: &[u8]) -> Msg {
        let mut b = vec![0u8; NLMSG_HDRLEN];
        b[4..6].copy_from_slice(&ty.to_ne_bytes());
        b[6..8].copy_from_slice(&(flags | NLM_F_REQUEST).to_ne_bytes());
        b.extend_from_slice(head);
        pad(&mut b);
        Msg(b)
    }

    fn attr(&mut self, ty: u16, data: &[u8]) {
        // Attributes here are at most an interface name (16 bytes).
        let len = u16::try_from(4 + data.len()).unwrap_or(u16::MAX);
        self.0.extend_from_slice(&len.to_ne_bytes());
        self.0.extend_from_slice(&ty.to_ne_bytes());
        self.0.extend_from_slice(data);
        pad(&mut self.0);
    }

    fn u32(&mut self, ty: u16, v: u32) {
        self.attr(ty, &v.to_ne_bytes());
    }

    /// A NUL-terminated string attribute (an interface name).
    fn name(&mut self, ty: u16, s: &str) {
        let mut v = s.as_bytes().to_vec();
        v.push(0);
        self.attr(ty, &v);
    }

    /// The bytes to send, with length and sequence number filled in.
    fn finish(mut self, seq: u32) -> Vec<u8> {
        let len = u32::try_from(self.0.len()).unwrap_or(u32::MAX);
        self.0[0..4].copy_from_slice(&len.to_ne_bytes());
        self.0[8..12].copy_from_slice(&seq.to_ne_bytes());
        self.0
    }
}

fn pad(b: &mut Vec<u8>) {
    b.resize(b.len().next_multiple_of(4), 0);
}

fn ne_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn ne_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The attributes of `b` (after the fixed part): (type, payload).
fn attrs(mut b: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    while let (Some(len), Some(ty)) = (ne_u16(b, 0), ne_u16(b, 2)) {
        let len = usize::from(len);
        let Some(data) = b.get(4..len) else { break };
        out.push((ty & NLA_TYPE_MASK, data));
        b = b.get(len.next_multiple_of(4)..).unwrap_or(&[]);
    }
    out
}

fn attr_u32(data: &[u8]) -> Option<u32> {
    ne_u32(data, 0)
}

fn attr_str(data: &[u8]) -> String {
    let end = data.iter().position(|&c| c == 0).unwrap_or(data.len());
    String::from_utf8_lossy(&data[..end]).into_owned()
}

fn attr_addr(data: &[u8]) -> Option<Ipv4Addr> {
    let o: [u8; 4] = data.get(..4)?.try_into().ok()?;
    Some(Ipv4Addr::from(o))
}

/// A `NETLINK_ROUTE` socket of the calling thread's network namespace.
struct Socket {
    fd: OwnedFd,
    seq: u32,
}

impl Socket {
    fn open() -> io::Result<Socket> {
        Socket::open_protocol(libc::NETLINK_ROUTE)
    }

    /// A netlink socket of `protocol` (`NETLINK_ROUTE`, `NETLINK_SOCK_DIAG`).
    fn open_protocol(protocol: libc::c_int) -> io::Result<Socket> {
        // SAFETY: socket(2) takes no pointers; the result is checked below.
        let raw = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                protocol,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` was just returned by socket(2), is valid and owned
        // by no one else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(Socket { fd, seq: 0 })
    }

    /// Send `msg` to the kernel; returns its sequence number.
    fn send(&mut self, msg: Msg) -> io::Result<u32> {
        self.seq = self.seq.wrapping_add(1);
        let bytes = msg.finish(self.seq);
        // SAFETY: `bytes` is valid for reads of `bytes.len()` bytes for the
        // duration of the call. An unbound netlink socket sends to the
        // kernel (port 0) and is bound on first use.
        let n = unsafe { libc::send(self.fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(self.seq)
    }

    /// The replies to request `seq`, as (type, payload) — until an
    /// acknowledgement, the end of a dump, or (`single`) the first reply.
    /// An error from the kernel is returned as its errno.
    fn replies(&mut self, seq: u32, single: bool) -> io::Result<Vec<(u16, Vec<u8>)>> {
        let mut out = Vec::new();
        // Large enough for any datagram the kernel builds for a dump.
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // SAFETY: `buf` is valid for writes of `buf.len()` bytes for the
            // duration of the call.
            let n =
                unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            let Ok(n) = usize::try_from(n) else {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            };
            let mut b = &buf[..n];
            while let (Some(len), Some(ty), Some(s)) = (ne_u32(b, 0), ne_u16(b, 4), ne_u32(b, 8)) {
                let len = usize::try_from(len).unwrap_or(usize::MAX);
                let Some(payload) = b.get(NLMSG_HDRLEN..len) else {
                    break;
                };
                b = b.get(len.next_multiple_of(4)..).unwrap_or(&[]);
                if s != seq {
                    continue;
                }
                match ty {
                    NLMSG_ERROR | NLMSG_DONE => {
                        // A negative errno, or 0 for an acknowledgement.
                        let err = payload
                            .get(..4)
                            .and_then(|e| e.try_into().ok())
                            .map_or(0, i32::from_ne_bytes);
                        if err < 0 {
                            return Err(io::Error::from_raw_os_error(-err));
                        }
                        return Ok(out);
                    }
                    _ => {
                        out.push((ty, payload.to_vec()));
                        if single {
                            return Ok(out);
                        }
                    }
                }
            }
        }
    }

    /// Send a change and wait for the kernel's acknowledgement.
    fn change(&mut self, msg: Msg) -> io::Result<()> {
        let seq = self.send(msg)?;
        self.replies(seq, false).map(|_| ())
    }
}

fn netlink_err(cmd: String) -> impl FnOnce(io::Error) -> Error {
    move |source| Error::Netlink { cmd, source }
}

fn invalid(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, what)
}

/// An IPv4 prefix in `ip`'s words: `all`/`default` (none), `A.B.C.D` or
/// `A.B.C.D/N`.
fn parse_prefix(w: &str) -> io::Result<Option<(Ipv4Addr, u8)>> {
    if w == "all" || w == "default" {
        return Ok(None);
    }
    let bad = || invalid(format!("bad IPv4 prefix {w:?}"));
    let (a, len) = match w.split_once('/') {
        Some((a, l)) => (a, l.parse::<u8>().map_err(|_| bad())?),
        None => (w, 32),
    };
    if len > 32 {
        return Err(bad());
    }
    Ok(Some((a.parse().map_err(|_| bad())?, len)))
}

fn parse_num<T: std::str::FromStr>(w: Option<&&str>, what: &str) -> io::Result<T> {
    let w = w.ok_or_else(|| invalid(format!("{what} needs a value")))?;
    w.parse().map_err(|_| invalid(format!("bad {what} {w:?}")))
}

fn parse_table(w: Option<&&str>) -> io::Result<u32> {
    match w.copied() {
        Some("main") => Ok(RT_TABLE_MAIN),
        Some("local") => Ok(RT_TABLE_LOCAL),
        Some("default") => Ok(RT_TABLE_DEFAULT),
        _ => parse_num(w, "table"),
    }
}

fn table_name(t: u32) -> String {
    match t {
        RT_TABLE_MAIN => "main".into(),
        RT_TABLE_LOCAL => "local".into(),
        RT_TABLE_DEFAULT => "default".into(),
        t => t.to_string(),
    }
}

/// The `fib_rule_hdr.table`/`rtmsg.rtm_table` byte: the table itself below
/// 256, else 0 (RT_TABLE_UNSPEC) and the table in an attribute.
fn table_byte(t: u32) -> (u8, bool) {
    match u8::try_from(t) {
        Ok(b) => (b, false),
        Err(_) => (0, true),
    }
}

fn parse_ports(w: Option<&&str>, what: &str) -> io::Result<(u16, u16)> {
    let s = w.ok_or_else(|| invalid(format!("{what} needs a value")))?;
    let bad = || invalid(format!("bad {what} {s:?}"));
    match s.split_once('-') {
        Some((a, b)) => Ok((a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?)),
        None => {
            let p = s.parse().map_err(|_| bad())?;
            Ok((p, p))
        }
    }
}

fn proto_number(w: Option<&&str>) -> io::Result<u8> {
    match w.copied() {
        Some("icmp") => Ok(1),
        Some("tcp") => Ok(6),
        Some("udp") => Ok(17),
        _ => parse_num(w, "ipproto"),
    }
}

fn proto_name(p: u8) -> String {
    match p {
        1 => "icmp".into(),
        6 => "tcp".into(),
        17 => "udp".into(),
        p => p.to_string(),
    }
}

/// What a rule does with a matching packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `lookup TABLE`.
    Lookup,
    /// `goto PRIORITY`: go on at the first rule of that priority.
    Goto(u32),
    /// `nop`: nothing (an anchor for gotos).
    Nop,
    /// `blackhole`, `unreachable`, `prohibit` (the route type's number).
    Drop(u8),
}

/// An IPv4 policy rule: the selectors and actions of `ip rule` the router
/// uses (a selector that is `None` matches everything).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub src: Option<(Ipv4Addr, u8)>,
    pub dst: Option<(Ipv4Addr, u8)>,
    pub iif: Option<String>,
    pub oif: Option<String>,
    pub ip_proto: Option<u8>,
    pub sport: Option<(u16, u16)>,
    pub dport: Option<(u16, u16)>,
    pub table: Option<u32>,
    pub priority: Option<u32>,
    pub action: Action,
}

impl Rule {
    /// A rule from the words of `ip rule add` (`from 198.18.11.2 iif r1
    /// ipproto tcp sport 6379 lookup 7000 pref 7000`, `pref 7001 nop`, …).
    pub fn parse(words: &[&str]) -> io::Result<Rule> {
        let mut r = Rule {
            src: None,
            dst: None,
            iif: None,
            oif: None,
            ip_proto: None,
            sport: None,
            dport: None,
            table: None,
            priority: None,
            action: Action::Lookup,
        };
        let mut it = words.iter();
        while let Some(w) = it.next() {
            let mut arg = || {
                it.next()
                    .ok_or_else(|| invalid(format!("{w:?} needs a value")))
            };
            match *w {
                "from" => r.src = parse_prefix(arg()?)?,
                "to" => r.dst = parse_prefix(arg()?)?,
                "iif" | "dev" => r.iif = Some(arg()?.to_string()),
                "oif" => r.oif = Some(arg()?.to_string()),
                "ipproto" => r.ip_proto = Some(proto_number(Some(arg()?))?),
                "sport" => r.sport = Some(parse_ports(Some(arg()?), "sport")?),
                "dport" => r.dport = Some(parse_ports(Some(arg()?), "dport")?),
                "lookup" | "table" => r.table = Some(parse_table(Some(arg()?))?),
                "pref" | "preference" | "priority" | "order" => {
                    r.priority = Some(parse_num(Some(arg()?), "priority")?)
                }
                "goto" => r.action = Action::Goto(parse_num(Some(arg()?), "goto")?),
                "nop" => r.action = Action::Nop,
                "blackhole" => r.action = Action::Drop(RTN_BLACKHOLE),
                "unreachable" => r.action = Action::Drop(RTN_UNREACHABLE),
                "prohibit" => r.action = Action::Drop(RTN_PROHIBIT),
                w => return Err(invalid(format!("unsupported rule word {w:?}"))),
            }
        }
        Ok(r)
    }

    /// The RTM_NEWRULE (`add`) or RTM_DELRULE message, as `ip rule` builds it.
    fn message(&self, add: bool) -> Msg {
        let mut table = self.table;
        let action = match self.action {
            Action::Lookup if add => {
                table = table.or(Some(RT_TABLE_MAIN));
                FR_ACT_TO_TBL
            }
            // A deletion matches any action unless one is named.
            Action::Lookup => 0,
            Action::Goto(_) => FR_ACT_GOTO,
            Action::Nop => FR_ACT_NOP,
            Action::Drop(t) => t,
        };
        let (tbyte, tattr) = table.map_or((0, false), table_byte);
        // struct fib_rule_hdr: family, dst_len, src_len, tos, table, res1,
        // res2, action; u32 flags.
        let head = [
            AF_INET,
            self.dst.map_or(0, |d| d.1),
            self.src.map_or(0, |s| s.1),
            0,
            tbyte,
            0,
            0,
            action,
            0,
            0,
            0,
            0,
        ];
        let (ty, flags) = if add {
            (RTM_NEWRULE, NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL)
        } else {
            (RTM_DELRULE, NLM_F_ACK)
        };
        let mut m = Msg::new(ty, flags, &head);
        if let Some((a, _)) = self.src {
            m.attr(FRA_SRC, &a.octets());
        }
        if let Some((a, _)) = self.dst {
            m.attr(FRA_DST, &a.octets());
        }
        if let Some(d) = &self.iif {
            m.name(FRA_IIFNAME, d);
        }
        if let Some(d) = &self.oif {
            m.name(FRA_OIFNAME, d);
        }
        if let Some(p) = self.ip_proto {
            m.attr(FRA_IP_PROTO, &[p]);
        }
        for (ty, range) in [(FRA_SPORT_RANGE, self.sport), (FRA_DPORT_RANGE, self.dport)] {
            if let Some((a, b)) = range {
                // struct fib_rule_port_range: start, end (host order).
                let mut v = a.to_ne_bytes().to_vec();
                v.extend_from_slice(&b.to_ne_bytes());
                m.attr(ty, &v);
            }
        }
        if let Action::Goto(t) = self.action {
            m.u32(FRA_GOTO, t);
        }
        if let (Some(t), true) = (table, tattr) {
            m.u32(FRA_TABLE, t);
        }
        if let Some(p) = self.priority {
            m.u32(FRA_PRIORITY, p);
        }
        m
    }

    /// A rule of a RTM_NEWRULE dump, and the kernel's `fib_rule_hdr.flags`.
    fn from_dump(p: &[u8]) -> Option<(Rule, u32)> {
        let (dst_len, src_len, tbyte, action) = (*p.get(1)?, *p.get(2)?, *p.get(4)?, *p.get(7)?);
        let flags = ne_u32(p, 8)?;
        let mut r = Rule {
            src: None,
            dst: None,
            iif: None,
            oif: None,
            ip_proto: None,
            sport: None,
            dport: None,
            table: (tbyte != 0).then_some(u32::from(tbyte)),
            priority: None,
            action: match action {
                FR_ACT_TO_TBL => Action::Lookup,
                FR_ACT_GOTO => Action::Goto(0),
                FR_ACT_NOP => Action::Nop,
                t => Action::Drop(t),
            },
        };
        let range = |d: &[u8]| Some((ne_u16(d, 0)?, ne_u16(d, 2)?));
        for (ty, d) in attrs(p.get(12..)?) {
            match ty {
                FRA_SRC => r.src = attr_addr(d).map(|a| (a, src_len)),
                FRA_DST => r.dst = attr_addr(d).map(|a| (a, dst_len)),
                FRA_IIFNAME => r.iif = Some(attr_str(d)),
                FRA_OIFNAME => r.oif = Some(attr_str(d)),
                FRA_IP_PROTO => r.ip_proto = d.first().copied(),
                FRA_SPORT_RANGE => r.sport = range(d),
                FRA_DPORT_RANGE => r.dport = range(d),
                FRA_TABLE => r.table = attr_u32(d).filter(|&t| t != 0),
                FRA_PRIORITY => r.priority = attr_u32(d),
                FRA_GOTO => {
                    if let (Action::Goto(_), Some(t)) = (r.action, attr_u32(d)) {
                        r.action = Action::Goto(t);
                    }
                }
                _ => {}
            }
        }
        Some((r, flags))
    }

    /// The line `ip rule show` prints for this rule (without its trailing
    /// blank), given the kernel's flags for it.
    fn show(&self, flags: u32) -> String {
        let mut s = format!("{}:\t", self.priority.unwrap_or(0));
        if flags & FIB_RULE_INVERT != 0 {
            s.push_str("not ");
        }
        let prefix = |(a, len): (Ipv4Addr, u8)| {
            if len == 32 {
                a.to_string()
            } else {
                format!("{a}/{len}")
            }
        };
        s.push_str(&format!("from {}", self.src.map_or("all".into(), prefix)));
        if let Some(d) = self.dst {
            s.push_str(&format!(" to {}", prefix(d)));
        }
        if let Some(d) = &self.iif {
            s.push_str(&format!(" iif {d}"));
            if flags & FIB_RULE_IIF_DETACHED != 0 {
                s.push_str(" [detached]");
            }
        }
        if let Some(d) = &self.oif {
            s.push_str(&format!(" oif {d}"));
            if flags & FIB_RULE_OIF_DETACHED != 0 {
                s.push_str(" [detached]");
            }
        }
        if let Some(p) = self.ip_proto {
            s.push_str(&format!(" ipproto {}", proto_name(p)));
        }
        for (what, range) in [("sport", self.sport), ("dport", self.dport)] {
            match range {
                Some((a, b)) if a == b => s.push_str(&format!(" {what} {a}")),
                Some((a, b)) => s.push_str(&format!(" {what} {a}-{b}")),
                None => {}
            }
        }
        if let Some(t) = self.table {
            s.push_str(&format!(" lookup {}", table_name(t)));
        }
        match self.action {
            Action::Lookup => {}
            Action::Goto(t) => {
                s.push_str(&format!(" goto {t}"));
                if flags & FIB_RULE_UNRESOLVED != 0 {
                    s.push_str(" [unresolved]");
                }
            }
            Action::Nop => s.push_str(" nop"),
            Action::Drop(RTN_BLACKHOLE) => s.push_str(" blackhole"),
            Action::Drop(RTN_UNREACHABLE) => s.push_str(" unreachable"),
            Action::Drop(RTN_PROHIBIT) => s.push_str(" prohibit"),
            Action::Drop(t) => s.push_str(&format!(" {t}")),
        }
        s
    }
}

/// An IPv4 route in a table, as `ip route` takes it: `[TYPE] PREFIX [via
/// GATEWAY] [dev NAME] [table N] [metric N]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// `RTN_UNICAST` (no type word), `RTN_LOCAL`, `RTN_BLACKHOLE`, …
    pub kind: u8,
    pub dst: Option<(Ipv4Addr, u8)>,
    pub via: Option<Ipv4Addr>,
    pub dev: Option<String>,
    pub table: Option<u32>,
    pub metric: Option<u32>,
}

impl Route {
    /// A route from the words of `ip route replace`.
    pub fn parse(words: &[&str]) -> io::Result<Route> {
        let mut r = Route {
            kind: RTN_UNICAST,
            dst: None,
            via: None,
            dev: None,
            table: None,
            metric: None,
        };
        let mut it = words.iter();
        while let Some(w) = it.next() {
            let mut arg = || {
                it.next()
                    .ok_or_else(|| invalid(format!("{w:?} needs a value")))
            };
            match *w {
                "unicast" => r.kind = RTN_UNICAST,
                "local" => r.kind = RTN_LOCAL,
                "blackhole" => r.kind = RTN_BLACKHOLE,
                "unreachable" => r.kind = RTN_UNREACHABLE,
                "prohibit" => r.kind = RTN_PROHIBIT,
                "via" => {
                    let a = arg()?;
                    r.via = Some(
                        a.parse()
                            .map_err(|_| invalid(format!("bad gateway {a:?}")))?,
                    )
                }
                "dev" | "oif" => r.dev = Some(arg()?.to_string()),
                "table" => r.table = Some(parse_table(Some(arg()?))?),
                "metric" | "priority" | "preference" => {
                    r.metric = Some(parse_num(Some(arg()?), "metric")?)
                }
                "to" => r.dst = parse_prefix(arg()?)?,
                w if w == "default" || w.starts_with(|c: char| c.is_ascii_digit()) => {
                    r.dst = parse_prefix(w)?
                }
                w => return Err(invalid(format!("unsupported route word {w:?}"))),
            }
        }
        Ok(r)
    }

    /// The RTM_NEWROUTE (`replace`) or RTM_DELROUTE message, as `ip route`
    /// builds it; `oif` is the index of [`Route::dev`].
    fn message(&self, replace: bool, oif: Option<u32>) -> Msg {
        let table = self.table.unwrap_or(RT_TABLE_MAIN);
        let (tbyte, tattr) = table_byte(table);
        let (proto, scope, kind) = if replace {
            let scope = if self.kind == RTN_LOCAL {
                RT_SCOPE_HOST
            } else if self.kind == RTN_UNICAST && self.via.is_none() && self.dev.is_some() {
                RT_SCOPE_LINK
            } else {
                RT_SCOPE_UNIVERSE
            };
            (RTPROT_BOOT, scope, self.kind)
        } else {
            // A deletion matches any scope, and any type unless one is named.
            let kind = if self.kind == RTN_UNICAST {
                0
            } else {
                self.kind
            };
            (0, RT_SCOPE_NOWHERE, kind)
        };
        // struct rtmsg: family, dst_len, src_len, tos, table, protocol,
        // scope, type; u32 flags.
        let head = [
            AF_INET,
            self.dst.map_or(0, |d| d.1),
            0,
            0,
            tbyte,
            proto,
            scope,
            kind,
            0,
            0,
            0,
            0,
        ];
        let (ty, flags) = if replace {
            (RTM_NEWROUTE, NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE)
        } else {
            (RTM_DELROUTE, NLM_F_ACK)
        };
        let mut m = Msg::new(ty, flags, &head);
        if tattr {
            m.u32(RTA_TABLE, table);
        }
        if let Some((a, _)) = self.dst {
            m.attr(RTA_DST, &a.octets());
        }
        if let Some(g) = self.via {
            m.attr(RTA_GATEWAY, &g.octets());
        }
        if let Some(p) = self.metric {
            m.u32(RTA_PRIORITY, p);
        }
        if let Some(i) = oif {
            m.u32(RTA_OIF, i);
        }
        m
    }
}

fn join(words: &[&str]) -> String {
    words.join(" ")
}

/// `ip rule add WORDS`.
pub fn rule_add(words: &[&str]) -> Result<(), Error> {
    rule_change(words, true)
}

/// `ip rule del WORDS`.
pub fn rule_del(words: &[&str]) -> Result<(), Error> {
    rule_change(words, false)
}

fn rule_change(words: &[&str], add: bool) -> Result<(), Error> {
    let cmd = format!(
        "ip rule {} {}",
        if add { "add" } else { "del" },
        join(words)
    );
    let run = || -> io::Result<()> {
        let rule = Rule::parse(words)?;
        Socket::open()?.change(rule.message(add))
    };
    run().map_err(netlink_err(cmd))
}

/// `ip route replace WORDS`.
pub fn route_replace(words: &[&str]) -> Result<(), Error> {
    route_change(words, true)
}

/// `ip route del WORDS`.
pub fn route_del(words: &[&str]) -> Result<(), Error> {
    route_change(words, false)
}

fn route_change(words: &[&str], replace: bool) -> Result<(), Error> {
    let cmd = format!(
        "ip route {} {}",
        if replace { "replace" } else { "del" },
        join(words)
    );
    let run = || -> io::Result<()> {
        let route = Route::parse(words)?;
        let mut s = Socket::open()?;
        let oif = match &route.dev {
            Some(d) => Some(
                link(&mut s, LinkKey::Name(d))?
                    .ok_or_else(|| invalid(format!("Cannot find device {d:?}")))?
                    .index,
            ),
            None => None,
        };
        s.change(route.message(replace, oif))
    };
    run().map_err(netlink_err(cmd))
}

/// `ip route get DST`: the output device and the next hop (none when `dst`
/// is on a directly connected network).
pub fn route_get(dst: Ipv4Addr) -> Result<(String, Option<Ipv4Addr>), Error> {
    let cmd = format!("ip -o route get {dst}");
    let run = || -> io::Result<(String, Option<Ipv4Addr>)> {
        let mut s = Socket::open()?;
        let mut head = [AF_INET, 32, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        head[8..12].copy_from_slice(&RTM_F_LOOKUP_TABLE.to_ne_bytes());
        let mut m = Msg::new(RTM_GETROUTE, 0, &head);
        m.attr(RTA_DST, &dst.octets());
        let seq = s.send(m)?;
        let reply = s.replies(seq, true)?;
        let p = reply
            .first()
            .and_then(|(_, p)| p.get(12..))
            .ok_or_else(|| invalid("no route in the kernel's answer".into()))?;
        let (mut oif, mut via) = (None, None);
        for (ty, d) in attrs(p) {
            match ty {
                RTA_OIF => oif = attr_u32(d),
                RTA_GATEWAY => via = attr_addr(d),
                _ => {}
            }
        }
        let oif = oif.ok_or_else(|| invalid("no output device".into()))?;
        let name = link(&mut s, LinkKey::Index(oif))?
            .ok_or_else(|| invalid(format!("output device {oif} vanished")))?
            .name;
        Ok((name, via))
    };
    run().map_err(netlink_err(cmd))
}

/// The IPv4 rules at priority `pref`, as `ip rule show pref PREF` prints
/// them (one line each, in the kernel's order).
pub fn rules_show(pref: u32) -> Result<Vec<String>, Error> {
    let cmd = format!("ip rule show pref {pref}");
    let run = || -> io::Result<Vec<String>> {
        let mut s = Socket::open()?;
        let head = [AF_INET, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let seq = s.send(Msg::new(RTM_GETRULE, NLM_F_DUMP, &head))?;
        Ok(s.replies(seq, false)?
            .iter()
            .filter_map(|(_, p)| Rule::from_dump(p))
            .filter(|(r, _)| r.priority.unwrap_or(0) == pref)
            .map(|(r, flags)| r.show(flags))
            .collect())
    };
    run().map_err(netlink_err(cmd))
}

/// What `ip -d link show` says of an interface, as far as the router asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub index: u32,
    pub name: String,
    /// `tun`, `veth`, … (none for a device without a link kind, e.g. `lo`).
    pub kind: Option<String>,
    /// A TUN device that outlives its last holder (`persist on`).
    pub persist: bool,
    /// A multi-queue TUN's attached queues (none for a single-queue TUN,
    /// for which the kernel does not report it).
    pub queues: Option<u32>,
}

enum LinkKey<'a> {
    Name(&'a str),
    Index(u32),
}

/// RTM_GETLINK for one interface; `None` if there is none such.
fn link(s: &mut Socket, key: LinkKey) -> io::Result<Option<Link>> {
    let mut head = [0u8; 16]; // struct ifinfomsg
    if let LinkKey::Index(i) = key {
        head[4..8].copy_from_slice(&i.to_ne_bytes());
    }
    let mut m = Msg::new(RTM_GETLINK, 0, &head);
    if let LinkKey::Name(n) = key {
        m.name(IFLA_IFNAME, n);
    }
    let seq = s.send(m)?;
    let reply = match s.replies(seq, true) {
        Ok(r) => r,
        Err(e) if e.raw_os_error() == Some(libc::ENODEV) => return Ok(None),
        Err(e) => return Err(e),
    };
    let Some(p) = reply.first().map(|(_, p)| p.as_slice()) else {
        return Ok(None);
    };
    let mut l = Link {
        index: ne_u32(p, 4).unwrap_or(0),
        name: String::new(),
        kind: None,
        persist: false,
        queues: None,
    };
    for (ty, d) in attrs(p.get(16..).unwrap_or(&[])) {
        match ty {
            IFLA_IFNAME => l.name = attr_str(d),
            IFLA_LINKINFO => {
                for (ty, d) in attrs(d) {
                    match ty {
                        IFLA_INFO_KIND => l.kind = Some(attr_str(d)),
                        IFLA_INFO_DATA => {
                            for (ty, d) in attrs(d) {
                                match ty {
                                    IFLA_TUN_PERSIST => l.persist = d.first() == Some(&1),
                                    IFLA_TUN_NUM_QUEUES => l.queues = attr_u32(d),
                                    _ => {}
                                }
                            }
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Ok(Some(l))
}

/// `ip -d link show dev NAME`: `None` if there is no such interface.
pub fn link_show(name: &str) -> Result<Option<Link>, Error> {
    let cmd = format!("ip -d link show dev {name}");
    Socket::open()
        .and_then(|mut s| link(&mut s, LinkKey::Name(name)))
        .map_err(netlink_err(cmd))
}

/// `ip link set dev NAME up mtu MTU txqueuelen QLEN`.
pub fn link_up(name: &str, mtu: u32, txqueuelen: u32) -> Result<(), Error> {
    let cmd = format!("ip link set dev {name} up mtu {mtu} txqueuelen {txqueuelen}");
    let run = || -> io::Result<()> {
        let mut s = Socket::open()?;
        let index = link(&mut s, LinkKey::Name(name))?
            .ok_or_else(|| invalid(format!("Cannot find device {name:?}")))?
            .index;
        s.change(link_up_message(index, mtu, txqueuelen))
    };
    run().map_err(netlink_err(cmd))
}

fn link_up_message(index: u32, mtu: u32, txqueuelen: u32) -> Msg {
    // struct ifinfomsg: family, pad, type (u16), index, flags, change.
    let mut head = [0u8; 16];
    head[4..8].copy_from_slice(&index.to_ne_bytes());
    head[8..12].copy_from_slice(&IFF_UP.to_ne_bytes());
    head[12..16].copy_from_slice(&IFF_UP.to_ne_bytes());
    let mut m = Msg::new(RTM_NEWLINK, NLM_F_ACK, &head);
    m.u32(IFLA_MTU, mtu);
    m.u32(IFLA_TXQLEN, txqueuelen);
    m
}

/// The bytes are those `ip` (iproute2 6.1) sends for the same words, as
/// strace shows them on x86-64 (sequence number 1).
#[cfg(all(test, target_endian = "little"))]
mod tests {
    use super::*;

    /// A server socket's acknowledged output as the kernel reports it: the
    /// bytes its peer read and acknowledged, for that socket only.
    #[test]
    fn sock_diag_reports_a_sockets_acknowledged_output() {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (mut srv, peer) = l.accept().unwrap();
        srv.write_all(&[7u8; 3000]).unwrap();
        let mut got = [0u8; 3000];
        c.read_exact(&mut got).unwrap();
        let key = TcpPeer {
            addr: Ipv4Addr::LOCALHOST,
            port: peer.port(),
            local_port: port,
        };
        // The peer's ACK may trail its read by a moment.
        let mut acked = None;
        for _ in 0..100 {
            let m = tcp_sockets(&[port]).unwrap();
            assert!(m.keys().all(|k| k.local_port == port), "{m:?}");
            acked = m.get(&key).and_then(|s| s.bytes_acked);
            if acked == Some(3000) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(acked, Some(3000));
    }

    /// A connection the server closed first is still there in TIME-WAIT;
    /// one whose peer closed first is gone once the server's FIN is
    /// acknowledged (LAST-ACK, then no socket).
    #[test]
    fn sock_diag_lists_time_wait_and_forgets_what_closed() {
        use std::io::Read;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let key = |peer: std::net::SocketAddr| TcpPeer {
            addr: Ipv4Addr::LOCALHOST,
            port: peer.port(),
            local_port: port,
        };
        // The server closes first: TIME-WAIT on its side.
        let mut c1 = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (s1, p1) = l.accept().unwrap();
        drop(s1);
        let mut buf = [0u8; 1];
        assert_eq!(c1.read(&mut buf).unwrap(), 0);
        drop(c1);
        // The client closes first: the server's socket ends in CLOSED.
        let c2 = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (mut s2, p2) = l.accept().unwrap();
        drop(c2);
        assert_eq!(s2.read(&mut buf).unwrap(), 0);
        drop(s2);
        let mut last = None;
        for _ in 0..100 {
            let m = tcp_sockets(&[port]).unwrap();
            let state = (m.contains_key(&key(p1)), m.contains_key(&key(p2)));
            last = Some(state);
            if state == (true, false) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(last, Some((true, false)), "(TIME-WAIT listed, closed gone)");
    }

    /// A server socket whose peer closed (CLOSE-WAIT) is reported as having
    /// taken its peer's FIN; an open one is not.
    #[test]
    fn sock_diag_says_which_sockets_took_their_peers_fin() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let key = |peer: std::net::SocketAddr| TcpPeer {
            addr: Ipv4Addr::LOCALHOST,
            port: peer.port(),
            local_port: port,
        };
        let _c1 = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (_s1, p1) = l.accept().unwrap();
        let c2 = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (_s2, p2) = l.accept().unwrap();
        drop(c2);
        let mut last = None;
        for _ in 0..100 {
            let m = tcp_sockets(&[port]).unwrap();
            let state = (
                m.get(&key(p1)).map(|s| s.fin_received),
                m.get(&key(p2)).map(|s| s.fin_received),
            );
            last = Some(state);
            if state == (Some(false), Some(true)) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(last, Some((Some(false), Some(true))), "(open, CLOSE-WAIT)");
    }

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn rule(words: &str, add: bool) -> Vec<u8> {
        let w: Vec<&str> = words.split_whitespace().collect();
        Rule::parse(&w).unwrap().message(add).finish(1)
    }

    fn route(words: &str, replace: bool, oif: Option<u32>) -> Vec<u8> {
        let w: Vec<&str> = words.split_whitespace().collect();
        Route::parse(&w).unwrap().message(replace, oif).finish(1)
    }

    // nlmsghdr: len, type, flags, seq, pid.
    const NEWRULE: &str = "2000 0506 01000000 00000000"; // REQUEST|ACK|EXCL|CREATE
    const SRC: &str = "0800 0200 c6120b02"; // FRA_SRC 198.18.11.2
    const IIF: &str = "0b00 0300 667472657031 00 00"; // FRA_IIFNAME "ftrep1\0" + pad
    const TABLE: &str = "0800 0f00 581b0000"; // 7000
    const PREF: &str = "0800 0600 581b0000"; // 7000

    #[test]
    fn steering_rule_has_the_kernels_layout() {
        let want = hex(&format!(
            "50000000 {NEWRULE}
             02 00 20 00 00 00 00 01 00000000
             {SRC} {IIF}
             0500 1600 06 000000
             0800 1700 eb18 eb18
             {TABLE} {PREF}"
        ));
        assert_eq!(
            rule(
                "from 198.18.11.2 iif ftrep1 ipproto tcp sport 6379 lookup 7000 pref 7000",
                true
            ),
            want
        );
        let want = hex(&format!(
            "34000000 {NEWRULE} 02 20 00 00 00 00 00 01 00000000
             0800 0100 c6130001 {TABLE} {PREF}"
        ));
        assert_eq!(rule("to 198.19.0.1/32 lookup 7000 pref 7000", true), want);
        let want = hex(&format!(
            "40000000 {NEWRULE} 02 00 00 00 00 00 00 01 00000000
             {IIF} 0500 1600 01 000000 {TABLE} {PREF}"
        ));
        assert_eq!(
            rule("iif ftrep1 ipproto icmp lookup 7000 pref 7000", true),
            want
        );
    }

    #[test]
    fn goto_nop_and_blackhole_rules_have_the_kernels_layout() {
        let want = hex(&format!(
            "24000000 {NEWRULE} 02 00 00 00 00 00 00 03 00000000
             0800 0600 591b0000"
        ));
        assert_eq!(rule("pref 7001 nop", true), want);
        let want = hex(&format!(
            "40000000 {NEWRULE} 02 00 20 00 00 00 00 02 00000000
             {SRC} {IIF} 0800 0400 591b0000 {PREF}"
        ));
        assert_eq!(
            rule("from 198.18.11.2 iif ftrep1 goto 7001 pref 7000", true),
            want
        );
        let want = hex(&format!(
            "2c000000 {NEWRULE} 02 00 20 00 00 00 00 06 00000000 {SRC} {PREF}"
        ));
        assert_eq!(rule("from 198.18.11.2 blackhole pref 7000", true), want);
        // RTM_DELRULE, REQUEST|ACK.
        let want = hex(&format!(
            "2c000000 2100 0500 01000000 00000000
             02 00 20 00 00 00 00 06 00000000 {SRC} {PREF}"
        ));
        assert_eq!(rule("from 198.18.11.2 blackhole pref 7000", false), want);
    }

    #[test]
    fn table_routes_have_the_kernels_layout() {
        // RTM_NEWROUTE, REQUEST|ACK|REPLACE|CREATE; rtmsg: family, dst_len,
        // src_len, tos, table, protocol (boot), scope, type; flags.
        let want = hex(&format!(
            "2c000000 1800 0505 01000000 00000000
             02 00 00 00 00 03 fd 01 00000000
             {TABLE} 0800 0400 05000000"
        ));
        assert_eq!(route("default dev ftnet0 table 7000", true, Some(5)), want);
        let want = hex(&format!(
            "2c000000 1800 0505 01000000 00000000
             02 00 00 00 00 03 00 06 00000000
             {TABLE} 0800 0600 ffffffff"
        ));
        assert_eq!(
            route("blackhole default table 7000 metric 4294967295", true, None),
            want
        );
        // RTM_DELROUTE: any protocol, any scope (nowhere).
        let want = hex(&format!(
            "2c000000 1900 0500 01000000 00000000
             02 00 00 00 00 00 ff 06 00000000
             {TABLE} 0800 0600 ffffffff"
        ));
        assert_eq!(
            route(
                "blackhole default table 7000 metric 4294967295",
                false,
                None
            ),
            want
        );
    }

    #[test]
    fn route_get_and_link_up_have_the_kernels_layout() {
        let mut head = [AF_INET, 32, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        head[8..12].copy_from_slice(&RTM_F_LOOKUP_TABLE.to_ne_bytes());
        let mut m = Msg::new(RTM_GETROUTE, 0, &head);
        m.attr(RTA_DST, &[198, 18, 11, 2]);
        let want = hex("24000000 1a00 0100 01000000 00000000
             02 20 00 00 00 00 00 00 00100000
             0800 0100 c6120b02");
        assert_eq!(m.finish(1), want);
        let want = hex("30000000 1000 0500 01000000 00000000
             0000 0000 07000000 01000000 01000000
             0800 0400 78050000 0800 0d00 f4010000");
        assert_eq!(link_up_message(7, 1400, 500).finish(1), want);
    }

    /// A dumped rule prints as `ip rule show` prints it.
    #[test]
    fn dumped_rules_print_as_ip_rule_show() {
        let dump = |words: &str| {
            let b = rule(words, true);
            Rule::from_dump(&b[NLMSG_HDRLEN..]).unwrap()
        };
        for (words, line) in [
            ("pref 7001 nop", "7001:\tfrom all nop"),
            (
                "to 198.19.0.1/32 lookup 7000 pref 7000",
                "7000:\tfrom all to 198.19.0.1 lookup 7000",
            ),
            (
                "from 198.18.11.2 iif ftrep1 ipproto tcp sport 6379 lookup 7000 pref 7000",
                "7000:\tfrom 198.18.11.2 iif ftrep1 ipproto tcp sport 6379 lookup 7000",
            ),
            (
                "from 198.18.11.2 iif ftrep1 goto 7001 pref 7000",
                "7000:\tfrom 198.18.11.2 iif ftrep1 goto 7001",
            ),
            (
                "from 198.18.11.2 blackhole pref 7000",
                "7000:\tfrom 198.18.11.2 blackhole",
            ),
            (
                "from 10.0.0.0/8 dport 80-90 lookup main pref 5",
                "5:\tfrom 10.0.0.0/8 dport 80-90 lookup main",
            ),
        ] {
            let (r, flags) = dump(words);
            assert_eq!(r.show(flags), line, "{words}");
        }
        let (r, _) = dump("from 198.18.11.2 iif ftrep1 goto 7001 pref 7000");
        assert_eq!(
            r.show(FIB_RULE_IIF_DETACHED | FIB_RULE_UNRESOLVED),
            "7000:\tfrom 198.18.11.2 iif ftrep1 [detached] goto 7001 [unresolved]"
        );
    }

    #[test]
    fn words_it_does_not_know_are_refused_not_ignored() {
        for w in [
            "fwmark 1 lookup 7000",
            "from 1.2.3.4/33 lookup 7000",
            "from",
            "sport x lookup 1",
        ] {
            let words: Vec<&str> = w.split_whitespace().collect();
            assert!(Rule::parse(&words).is_err(), "{w}");
        }
        assert!(Route::parse(&["default", "proto", "static"]).is_err());
    }

    /// A kernel error names the `ip` command it stands for.
    #[test]
    fn errors_name_the_equivalent_ip_command() {
        let e = rule_add(&["fwmark", "1"]).unwrap_err().to_string();
        assert!(e.contains("`ip rule add fwmark 1`"), "{e}");
        assert!(e.contains("unsupported rule word \"fwmark\""), "{e}");
    }
}

// linux/sock_diag.h, linux/inet_diag.h, net/tcp_states.h
const NETLINK_SOCK_DIAG: libc::c_int = 4;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const INET_DIAG_INFO: u16 = 2;
/// `struct inet_diag_msg`: family, state, timer, retrans, the socket id
/// (48 bytes), expires, rqueue, wqueue, uid, inode.
const INET_DIAG_MSG_LEN: usize = 72;
const TCP_ESTABLISHED: u32 = 1;
const TCP_SYN_SENT: u32 = 2;
const TCP_SYN_RECV: u32 = 3;
const TCP_FIN_WAIT1: u32 = 4;
const TCP_FIN_WAIT2: u32 = 5;
const TCP_TIME_WAIT: u32 = 6;
const TCP_CLOSE_WAIT: u32 = 8;
const TCP_LAST_ACK: u32 = 9;
const TCP_CLOSING: u32 = 11;
/// A request socket (a connection in SYN-RECEIVED under its listener).
const TCP_NEW_SYN_RECV: u32 = 12;

/// One TCP socket of this network namespace: its peer and local port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TcpPeer {
    pub addr: Ipv4Addr,
    pub port: u16,
    pub local_port: u16,
}

/// What the kernel says of one TCP socket ([`tcp_sockets`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpSock {
    /// Bytes of its output its peer acknowledged (`tcpi_bytes_acked`, the
    /// FIN counted once acknowledged), where the kernel keeps a full
    /// socket with a `tcp_info` long enough.
    pub bytes_acked: Option<u64>,
    /// It took its peer's FIN: CLOSE-WAIT, LAST-ACK, CLOSING or TIME-WAIT.
    pub fin_received: bool,
}

/// Every IPv4 TCP connection of the calling thread's network namespace
/// whose local port is one of `ports`, in any state from SYN-RECEIVED
/// (request sockets included) to TIME-WAIT, with, where the kernel keeps a
/// full socket, how many bytes of its output its peer acknowledged
/// (`tcp_info`'s `tcpi_bytes_acked`, the FIN counted once acknowledged),
/// and whether it took its peer's FIN (its state). With the socket's ISN
/// the bytes acknowledged give its SND.UNA: `ISN + 1 + bytes_acked`
/// modulo 2^32. A connection absent from the map has no socket left here.
/// One `sock_diag` dump (what `ss -tai` reads), no process's sockets
/// touched.
pub fn tcp_sockets(ports: &[u16]) -> Result<std::collections::HashMap<TcpPeer, TcpSock>, Error> {
    let what = || "sock_diag dump of TCP sockets (ss -tai)".to_string();
    let mut sock = Socket::open_protocol(NETLINK_SOCK_DIAG).map_err(netlink_err(what()))?;
    // struct inet_diag_req_v2: family, protocol, ext, pad, states, id.
    let states = [
        TCP_ESTABLISHED,
        TCP_SYN_SENT,
        TCP_SYN_RECV,
        TCP_FIN_WAIT1,
        TCP_FIN_WAIT2,
        TCP_TIME_WAIT,
        TCP_CLOSE_WAIT,
        TCP_LAST_ACK,
        TCP_CLOSING,
        TCP_NEW_SYN_RECV,
    ]
    .iter()
    .fold(0u32, |m, s| m | (1 << s));
    let mut req = vec![AF_INET, 6, 1 << (INET_DIAG_INFO - 1), 0];
    req.extend_from_slice(&states.to_ne_bytes());
    req.extend_from_slice(&[0u8; 48]);
    let seq = sock
        .send(Msg::new(SOCK_DIAG_BY_FAMILY, NLM_F_DUMP, &req))
        .map_err(netlink_err(what()))?;
    let replies = sock.replies(seq, false).map_err(netlink_err(what()))?;
    Ok(replies
        .iter()
        .filter(|(ty, _)| *ty == SOCK_DIAG_BY_FAMILY)
        .filter_map(|(_, b)| diag_sock(b))
        .filter(|(p, _)| ports.contains(&p.local_port))
        .collect())
}

/// One `inet_diag_msg` with its attributes: the socket, its state and, if
/// it has a `tcp_info` long enough to hold it, `tcpi_bytes_acked`.
fn diag_sock(b: &[u8]) -> Option<(TcpPeer, TcpSock)> {
    let head = b.get(..INET_DIAG_MSG_LEN)?;
    if head[0] != AF_INET {
        return None;
    }
    let state = u32::from(head[1]);
    // The socket id: sport, dport (network order), src, dst (16 bytes each).
    let local_port = u16::from_be_bytes(head.get(4..6)?.try_into().ok()?);
    let port = u16::from_be_bytes(head.get(6..8)?.try_into().ok()?);
    let dst: [u8; 4] = head.get(24..28)?.try_into().ok()?;
    let off = std::mem::offset_of!(libc::tcp_info, tcpi_bytes_acked);
    let acked = attrs(&b[INET_DIAG_MSG_LEN..])
        .into_iter()
        .find(|(ty, _)| *ty == INET_DIAG_INFO)
        .and_then(|(_, info)| info.get(off..off + 8)?.try_into().ok())
        .map(u64::from_ne_bytes);
    Some((
        TcpPeer {
            addr: Ipv4Addr::from(dst),
            port,
            local_port,
        },
        TcpSock {
            bytes_acked: acked,
            fin_received: matches!(
                state,
                TCP_CLOSE_WAIT | TCP_LAST_ACK | TCP_CLOSING | TCP_TIME_WAIT
            ),
        },
    ))
}
