//! Fixture tests of the router state machine: hand-built segments in,
//! segments out (smoltcp `socket/tcp.rs` style). The randomized end-to-end
//! checks with real TCP stacks are in `crates/sim`.
// Test data is built from small loop indices and constants; a cast that
// could drop bits never does here.
#![allow(clippy::cast_possible_truncation)]

use ftnet_core::{
    AgentMsg, Config, DropReason, Event, EvictReason, Instant, Packet, Router, Service,
};
use ftnet_wire::tcp::{flags, Repr, Segment};
use ftnet_wire::{icmp, ipv4, SeqNum};
use std::net::Ipv4Addr;

const CLIENT: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 2);
const VIP: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 1);
const PORT: u16 = 7000;
const CPORT: u16 = 40000;
const CISN: u32 = 0xffff_ff00; // wraps during the test (RFC 9293 §3.4)

fn replica(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 10 + i, 2)
}

fn router(n: u8) -> Router {
    router_of(n, false)
}

/// `n` replicas of service "t"; `stateless`: see `Service::stateless`.
fn router_of(n: u8, stateless: bool) -> Router {
    Router::new(config_of(n, stateless), [9; 16])
}

/// The configuration of `router_of`, for a test to change before it
/// builds the router.
fn config_of(n: u8, stateless: bool) -> Config {
    let mut c = Config::default();
    c.services.push(Service {
        name: "t".into(),
        vip: VIP,
        ports: vec![PORT],
        replicas: (1..=n).map(replica).collect(),
        voting: Default::default(),
        stateless,
        ack: ftnet_core::Ack::All,
        delivery: Default::default(),
    });
    c
}

#[derive(Debug)]
struct Out {
    src: Ipv4Addr,
    dst: Ipv4Addr,
    r: Repr,
    payload: Vec<u8>,
}

fn parse(p: &Packet) -> Out {
    let ip = ipv4::Packet::new_checked(&p.data[..]).expect("router emitted bad IPv4");
    assert!(ip.verify_checksum(), "IPv4 checksum");
    let t = Segment::new_checked(ip.payload()).expect("router emitted bad TCP");
    assert!(
        t.verify_checksum(ip.src(), ip.dst()),
        "TCP checksum after rewrite"
    );
    Out {
        src: ip.src(),
        dst: ip.dst(),
        r: Repr::parse(&t),
        payload: t.payload().to_vec(),
    }
}

/// The TCP segments the router sent; ICMP messages are checked and left
/// out (`drain_icmp` keeps them).
fn drain(r: &mut Router) -> Vec<Out> {
    drain_icmp(r).0
}

/// The TCP segments the router sent, and its ICMP destination-unreachable
/// messages (addressed to, quoting).
fn drain_icmp(r: &mut Router) -> (Vec<Out>, Vec<(Ipv4Addr, Ipv4Addr, icmp::Unreachable)>) {
    let (mut segs, mut icmps) = (Vec::new(), Vec::new());
    for s in drain_sent(r) {
        match s {
            Sent::Tcp(o) => segs.push(o),
            Sent::Icmp(src, dst, u) => icmps.push((src, dst, u)),
        }
    }
    (segs, icmps)
}

/// One packet the router sent: a TCP segment, or an ICMP destination
/// unreachable message about TCP (both checksums verified).
#[derive(Debug)]
enum Sent {
    Tcp(Out),
    Icmp(Ipv4Addr, Ipv4Addr, icmp::Unreachable),
}

/// Everything the router queued, in order.
fn drain_sent(r: &mut Router) -> Vec<Sent> {
    std::iter::from_fn(|| r.poll_transmit())
        .map(|p| {
            let ip = ipv4::Packet::new_checked(&p.data[..]).expect("router emitted bad IPv4");
            if ip.protocol() == ipv4::PROTO_ICMP {
                assert!(ip.verify_checksum(), "IPv4 checksum");
                assert_eq!(
                    ftnet_wire::checksum::complete(ip.payload(), 0),
                    0,
                    "ICMP checksum"
                );
                let u = icmp::parse_unreachable(ip.payload())
                    .expect("router emitted bad ICMP")
                    .expect("router emitted an ICMP message other than unreachable about TCP");
                Sent::Icmp(ip.src(), ip.dst(), u)
            } else {
                Sent::Tcp(parse(&p))
            }
        })
        .collect()
}

fn seg(src: Ipv4Addr, dst: Ipv4Addr, r: Repr, payload: &[u8]) -> Packet {
    Packet::plain(r.emit_ipv4(src, dst, payload))
}

/// The events an operator sees (the agents' messages are another queue).
fn log_events(r: &mut Router) -> Vec<Event> {
    std::iter::from_fn(|| r.poll_event()).collect()
}

/// A join failed, and said why in words containing `why`.
fn assert_join_failed(ev: &[Event], why: &str) {
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::JoinFailed { reason, .. } if reason.contains(why))),
        "no join failure saying {why:?}: {ev:?}"
    );
}

/// The messages for the agents, in order.
fn agent_msgs(r: &mut Router) -> Vec<AgentMsg> {
    std::iter::from_fn(|| r.poll_agent_msg()).collect()
}

fn t(ms: u64) -> Instant {
    Instant::from_micros(ms * 1000)
}

/// Client SYN, replicas answer with their own ISNs; returns the router's
/// ISN as the client saw it and the replica ISNs.
fn handshake(r: &mut Router, n: u8) -> (u32, Vec<u32>) {
    let mut syn = Repr::new(CPORT, PORT, SeqNum(CISN), SeqNum(0), flags::SYN, 64240);
    syn.mss = Some(1460);
    syn.wscale = Some(7);
    syn.sack_permitted = true;
    syn.timestamps = Some((1000, 0));
    r.handle_packet(t(0), seg(CLIENT, VIP, syn, b""));
    let out = drain(r);
    assert_eq!(out.len(), n as usize, "one SYN per replica");
    for (i, o) in out.iter().enumerate() {
        assert_eq!(o.dst, replica(i as u8 + 1));
        assert_eq!(o.src, CLIENT);
        assert!(!o.r.sack_permitted, "SACK is not offered to the group");
        assert_eq!(o.r.seq, SeqNum(CISN));
    }
    let isns: Vec<u32> = (0..n as u32).map(|i| 1_000_000 * (i + 1) + 77).collect();
    for i in 0..n {
        let mut sa = Repr::new(
            PORT,
            CPORT,
            SeqNum(isns[i as usize]),
            SeqNum(CISN).add(1),
            flags::SYN | flags::ACK,
            65160,
        );
        sa.mss = Some(1460 - 10 * i as u16);
        sa.wscale = Some(7 + i);
        sa.timestamps = Some((5000 * (i as u32 + 1), 1000));
        r.handle_packet(t(1), seg(replica(i + 1), CLIENT, sa, b""));
        let out = drain(r);
        if i + 1 < n {
            assert!(out.is_empty(), "SYN-ACK held until every replica answered");
        } else {
            assert_eq!(out.len(), 1);
            let o = &out[0];
            assert_eq!((o.src, o.dst), (VIP, CLIENT));
            assert_eq!(o.r.flags, flags::SYN | flags::ACK);
            assert_eq!(
                o.r.mss,
                Some(1460 - 10 * (n as u16 - 1)),
                "MSS is the minimum"
            );
            assert_eq!(o.r.wscale, Some(7 + n - 1), "one scale: the largest");
            assert_eq!(o.r.ack, SeqNum(CISN).add(1));
            assert_eq!(
                o.r.timestamps.map(|x| x.1),
                Some(1000),
                "TSecr echoes the client"
            );
            assert!(!isns.contains(&o.r.seq.0), "router ISN is its own");
            let risn = o.r.seq.0;
            let mut ack = Repr::new(
                CPORT,
                PORT,
                SeqNum(CISN).add(1),
                SeqNum(risn).add(1),
                flags::ACK,
                502,
            );
            ack.timestamps = Some((1001, o.r.timestamps.unwrap().0));
            r.handle_packet(t(2), seg(CLIENT, VIP, ack, b""));
            let acks = drain(r);
            assert_eq!(acks.len(), n as usize);
            for (j, a) in acks.iter().enumerate() {
                assert_eq!(
                    a.r.ack,
                    SeqNum(isns[j]).add(1),
                    "third ACK translated per replica"
                );
                assert!(
                    a.r.timestamps.unwrap().1 <= 5000 * (j as u32 + 1),
                    "TSecr never ahead of the replica's clock"
                );
            }
            return (risn, isns);
        }
    }
    unreachable!()
}

/// The client's first data segment (no ACK flag, timestamps on).
/// The router runs at each of its timers up to `until`, as its I/O loop
/// does (a single `handle_timeout` far past a due timer is a router that
/// did not run meanwhile: `Event::RouterPaused`).
/// Three replicas after the handshake; the client sent "ping" at 10 ms;
/// output and events so far drained.
fn three_pinged() -> (Router, Vec<u32>) {
    let mut r = router(3);
    let (_risn, isns) = handshake(&mut r, 3);
    client_data(&mut r, t(10), b"ping");
    drain(&mut r);
    log_events(&mut r);
    (r, isns)
}

/// Whether `ev` marks replica `i` down (for `reason`, if given).
fn marked_down(ev: &[Event], i: u8, reason: Option<EvictReason>) -> bool {
    ev.iter().any(|e| {
        matches!(e, Event::ReplicaDown { replica: a, reason: why, .. }
            if *a == replica(i) && reason.is_none_or(|x| x == *why))
    })
}

fn run_to(r: &mut Router, until: Instant) {
    while let Some(d) = r.poll_timeout().filter(|d| *d <= until) {
        r.handle_timeout(d);
    }
    r.handle_timeout(until);
}

fn client_data(r: &mut Router, now: Instant, payload: &[u8]) {
    let mut d = Repr::new(CPORT, PORT, SeqNum(CISN).add(1), SeqNum(0), flags::PSH, 502);
    d.timestamps = Some((1002, 0));
    r.handle_packet(now, seg(CLIENT, VIP, d, payload));
}

fn ack_from(i: u8, isn: u32, cack: SeqNum, win: u16) -> Packet {
    let mut a = Repr::new(PORT, CPORT, SeqNum(isn).add(1), cack, flags::ACK, win);
    a.timestamps = Some((6000, 1001));
    seg(replica(i), CLIENT, a, b"")
}

#[test]
fn handshake_and_inbound_translation() {
    let mut r = router(3);
    let (risn, isns) = handshake(&mut r, 3);
    // Client data: same bytes to every replica, ACK clipped to what each
    // replica has sent (nothing beyond its SYN yet).
    let mut d = Repr::new(
        CPORT,
        PORT,
        SeqNum(CISN).add(1),
        SeqNum(risn).add(1),
        flags::ACK | flags::PSH,
        502,
    );
    d.timestamps = Some((1002, 0));
    r.handle_packet(t(3), seg(CLIENT, VIP, d, b"hello"));
    let out = drain(&mut r);
    assert_eq!(out.len(), 3);
    for (j, o) in out.iter().enumerate() {
        assert_eq!(o.payload, b"hello");
        assert_eq!(o.r.seq, SeqNum(CISN).add(1));
        assert_eq!(o.r.ack, SeqNum(isns[j]).add(1));
    }
    // The client is acknowledged only when every replica acknowledged.
    let want = SeqNum(CISN).add(6);
    r.handle_packet(t(4), ack_from(1, isns[0], want, 500));
    r.handle_packet(t(4), ack_from(2, isns[1], want, 500));
    assert!(drain(&mut r).is_empty(), "min-ACK: not yet");
    r.handle_packet(t(4), ack_from(3, isns[2], want, 400));
    let out = drain(&mut r);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].r.ack, want);
    // Window: the smallest right edge (replica 1: 500 << 7 = 64000 bytes)
    // expressed in the group scale 9.
    assert_eq!(out[0].r.window, 64000 >> 9);
}

#[test]
fn first_copy_wins_and_lagging_replica_is_acked_on_behalf() {
    let mut r = router(2);
    let (risn, isns) = handshake(&mut r, 2);
    let cack = SeqNum(CISN).add(1);
    let data = |i: u8, off: u32, p: &[u8]| {
        let mut a = Repr::new(
            PORT,
            CPORT,
            SeqNum(isns[i as usize - 1]).add(1 + off),
            cack,
            flags::ACK | flags::PSH,
            500,
        );
        a.timestamps = Some((7000, 1001));
        seg(replica(i), CLIENT, a, p)
    };
    r.handle_packet(t(5), data(1, 0, b"abc"));
    let out = drain(&mut r);
    assert_eq!(out.len(), 1);
    assert_eq!(
        out[0].r.seq,
        SeqNum(risn).add(1),
        "replica seq translated to the router's space"
    );
    assert_eq!(out[0].payload, b"abc");
    let ts5 = out[0].r.timestamps.unwrap().0;
    // The client acknowledges it; replica 2 has not sent it yet, so its ACK
    // is clipped to what it has sent.
    let mut ca = Repr::new(CPORT, PORT, cack, SeqNum(risn).add(4), flags::ACK, 502);
    ca.timestamps = Some((1003, ts5));
    r.handle_packet(t(6), seg(CLIENT, VIP, ca, b""));
    let out = drain(&mut r);
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].r.ack, SeqNum(isns[0]).add(4));
    assert_eq!(
        out[1].r.ack,
        SeqNum(isns[1]).add(1),
        "never ACK bytes a replica has not sent"
    );
    // Replica 2 now sends the same bytes: suppressed, and ACKed on the
    // client's behalf since the client already has them.
    r.handle_packet(t(7), data(2, 0, b"abc"));
    let out = drain(&mut r);
    assert_eq!(
        out.len(),
        1,
        "no duplicate to the client, one ACK to replica 2"
    );
    assert_eq!(out[0].dst, replica(2));
    assert_eq!(out[0].r.ack, SeqNum(isns[1]).add(4));
    assert_eq!(r.counters().dropped(DropReason::DuplicateSuppressed), 1);
    assert_eq!(r.counters().suppressed_bytes, 3);
}

#[test]
fn rst_from_one_replica_evicts_it_and_last_one_resets_client() {
    let mut r = router(2);
    let (_risn, isns) = handshake(&mut r, 2);
    let rst = |i: u8| {
        seg(
            replica(i),
            CLIENT,
            Repr::new(
                PORT,
                CPORT,
                SeqNum(isns[i as usize - 1]).add(1),
                SeqNum(0),
                flags::RST,
                0,
            ),
            b"",
        )
    };
    r.handle_packet(t(5), rst(1));
    let out = drain(&mut r);
    assert!(
        out.iter()
            .all(|o| o.dst != CLIENT || o.r.flags & flags::RST == 0),
        "client not reset while a replica lives"
    );
    assert!(
        log_events(&mut r).is_empty(),
        "verdict waits: the others may reset too"
    );
    r.handle_timeout(t(106));
    let ev: Vec<Event> = log_events(&mut r);
    assert!(
        matches!(
            ev[0],
            Event::Evicted {
                reason: EvictReason::Reset,
                remaining: 1,
                ..
            }
        ),
        "{ev:?}"
    );
    r.handle_packet(t(200), rst(2));
    let out = drain(&mut r);
    assert!(
        out.iter()
            .any(|o| o.dst == CLIENT && o.r.flags & flags::RST != 0),
        "last replica gone: client reset"
    );
    assert_eq!(r.connections(), 0);
}

/// The router itself stops for 2 s (its process stopped, a host that did
/// not schedule it) while the client's bytes wait for the replicas'
/// answers. Resumed, it reads what waited in its queues one packet at a
/// time: replica 1's answer first. The others' silence across the pause
/// is the router's own, not theirs: nobody is evicted for it (a router
/// stalled for 2 s evicted two healthy replicas at once, and its resets
/// killed their connections). Silence after the pause still convicts.
#[test]
fn a_router_that_did_not_run_for_a_while_blames_no_replica_for_it() {
    let (mut r, isns) = three_pinged();
    // Nothing runs from t(10) to t(2010).
    r.handle_packet(t(2010), ack_from(1, isns[0], SeqNum(CISN).add(5), 500));
    r.handle_timeout(t(2011));
    r.handle_packet(t(2012), ack_from(2, isns[1], SeqNum(CISN).add(5), 500));
    r.handle_timeout(t(2013));
    let out = drain(&mut r);
    assert!(
        out.iter().all(|o| o.r.flags & flags::RST == 0),
        "no replica reset for the router's own pause: {out:?}"
    );
    let ev = log_events(&mut r);
    assert!(
        !ev.iter().any(|e| matches!(e, Event::Evicted { .. })),
        "nobody evicted: {ev:?}"
    );
    assert!(
        ev.iter().any(|e| matches!(
            e,
            Event::RouterPaused {
                ms: 2000,
                connections: 1,
                probation: true
            }
        )),
        "the pause is said: {ev:?}"
    );
    assert_eq!(r.counters().router_pauses, 1);
    // A verdict that takes a replica out of the service waits while the
    // router does not know whether another served meanwhile.
    r.host_lost(t(2014), replica(2));
    let ev = log_events(&mut r);
    assert!(
        !ev.iter()
            .any(|e| matches!(e, Event::ReplicaDown { .. } | Event::Evicted { .. })),
        "{ev:?}"
    );
    assert!(drain(&mut r).iter().all(|o| o.r.flags & flags::RST == 0));
    // Replica 3 stays silent after the pause: out one detection time on
    // (the router now runs at each of its timers).
    run_to(&mut r, t(2200));
    let ev = log_events(&mut r);
    assert!(
        ev.iter().any(|e| matches!(e, Event::Evicted { replica: a, reason: EvictReason::Stalled, .. } if *a == replica(3))),
        "silence after the pause convicts: {ev:?}"
    );
    assert!(!ev.iter().any(|e| matches!(e, Event::RouterPaused { .. })));
    assert!(
        !ev.iter().any(|e| matches!(e, Event::ReplicaDown { .. })),
        "{ev:?}"
    );
    // Packets came since the pause: the verdict holds once probation ends.
    r.handle_packet(t(2300), ack_from(1, isns[0], SeqNum(CISN).add(5), 500));
    run_to(&mut r, t(2010) + ftnet_core::PAUSE_PROBATION);
    let ev = log_events(&mut r);
    assert!(marked_down(&ev, 2, Some(EvictReason::HostLost)), "{ev:?}");
    assert_eq!(r.connections(), 1);
}

/// A shorter pause (a loaded host's hiccup, too short for a standby to
/// have taken over) restarts the silence clocks but puts no verdict on
/// hold.
#[test]
fn a_short_pause_holds_no_verdict() {
    let (mut r, isns) = three_pinged();
    r.handle_packet(t(140), ack_from(1, isns[0], SeqNum(CISN).add(5), 500));
    let ev = log_events(&mut r);
    assert!(
        ev.iter().any(|e| matches!(
            e,
            Event::RouterPaused {
                probation: false,
                ..
            }
        )),
        "{ev:?}"
    );
    r.host_lost(t(141), replica(2));
    let ev = log_events(&mut r);
    assert!(marked_down(&ev, 2, Some(EvictReason::HostLost)), "{ev:?}");
}

/// A router that did not run for a while and, run again, gets not one
/// packet: another router holds the addresses (a standby took over). Its
/// table is stale, and a verdict acted on would reset connections the
/// other router serves: verdicts that take a replica out wait until a
/// packet shows this router serves again.
#[test]
fn a_router_that_gets_nothing_after_its_pause_holds_its_verdicts() {
    let (mut r, isns) = three_pinged();
    r.handle_timeout(t(2010));
    r.host_lost(t(2011), replica(2));
    let ev = log_events(&mut r);
    assert!(
        ev.iter().any(|e| matches!(e, Event::RouterPaused { .. })),
        "{ev:?}"
    );
    let mut out = drain(&mut r);
    let end = t(2010) + ftnet_core::PAUSE_PROBATION * 2;
    while let Some(d) = r.poll_timeout().filter(|d| *d <= end) {
        r.handle_timeout(d);
        out.extend(drain(&mut r));
    }
    r.handle_timeout(end);
    out.extend(drain(&mut r));
    let ev = log_events(&mut r);
    assert!(
        !ev.iter().any(|e| matches!(e, Event::ReplicaDown { .. })),
        "{ev:?}"
    );
    assert!(
        out.iter().all(|o| o.r.flags & flags::RST == 0),
        "no reset: {out:?}"
    );
    assert!(all_alive(&r));
    // A packet: this router serves; the verdict holds.
    r.handle_packet(end, ack_from(1, isns[0], SeqNum(CISN).add(5), 500));
    let ev = log_events(&mut r);
    assert!(marked_down(&ev, 2, Some(EvictReason::HostLost)), "{ev:?}");
}

/// The first call after the router's pause is a control verdict (its
/// control sessions ran before its data plane, and their writes to agents
/// that had moved to another router failed): it waits on probation like
/// any other. (It was applied at once, before the pause was noticed: two
/// healthy replicas marked down and their servers ended, and the router
/// then found itself superseded.)
#[test]
fn a_control_verdict_heard_first_after_a_pause_waits_on_probation() {
    for lost_host in [false, true] {
        let (mut r, isns) = three_pinged();
        if lost_host {
            r.host_lost(t(2300), replica(2));
        } else {
            r.replica_failed(t(2300), replica(2));
        }
        let ev = log_events(&mut r);
        assert!(
            ev.iter().any(|e| matches!(
                e,
                Event::RouterPaused {
                    probation: true,
                    ..
                }
            )),
            "{ev:?}"
        );
        assert!(
            !ev.iter().any(|e| matches!(e, Event::ReplicaDown { .. })),
            "applied before the pause was noted: {ev:?}"
        );
        assert!(all_alive(&r));
        // Served again (packets, probation over): the verdict holds.
        let end = t(2300) + ftnet_core::PAUSE_PROBATION;
        run_to(&mut r, end);
        drain(&mut r);
        assert!(all_alive(&r), "{:?}", log_events(&mut r));
        r.handle_packet(end, ack_from(1, isns[0], SeqNum(CISN).add(5), 500));
        let ev = log_events(&mut r);
        assert!(marked_down(&ev, 2, None), "{ev:?}");
    }
}

/// Every agent fell silent together: this router is cut off, or another
/// one holds the addresses. A replica it then finds stalled in its own
/// table leaves that connection, but its side is not reset (the reset
/// would reach a connection the other router serves) and it is not marked
/// down, until an agent registers again.
#[test]
fn a_router_whose_agents_all_fell_silent_resets_and_marks_down_nobody() {
    let mut r = router(3);
    let (_risn, isns) = handshake(&mut r, 3);
    r.agents_all_silent(t(5));
    client_data(&mut r, t(10), b"ping");
    drain(&mut r);
    log_events(&mut r);
    r.handle_packet(t(11), ack_from(1, isns[0], SeqNum(CISN).add(5), 500));
    r.handle_packet(t(11), ack_from(3, isns[2], SeqNum(CISN).add(5), 500));
    let mut out = drain(&mut r);
    let mut at = 11;
    while at < 400 {
        at += 10;
        run_to(&mut r, t(at));
        out.extend(drain(&mut r));
        r.handle_packet(t(at), ack_from(1, isns[0], SeqNum(CISN).add(5), 500));
        out.extend(drain(&mut r));
    }
    let ev = log_events(&mut r);
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::Evicted { replica: a, .. } if *a == replica(2))),
        "it leaves the connection: {ev:?}"
    );
    assert!(
        !out.iter()
            .any(|o| o.dst == replica(2) && o.r.flags & flags::RST != 0),
        "not reset: {out:?}"
    );
    assert!(
        !ev.iter().any(|e| matches!(e, Event::ReplicaDown { .. })),
        "{ev:?}"
    );
    assert!(all_alive(&r));
    // An agent registers: the router hears its replicas again, and the
    // verdict holds.
    r.agent_registered(replica(1));
    r.handle_packet(t(at), ack_from(1, isns[0], SeqNum(CISN).add(5), 500));
    let ev = log_events(&mut r);
    assert!(marked_down(&ev, 2, None), "{ev:?}");
}

#[test]
fn stalled_replica_is_evicted_after_detection_time() {
    let mut r = router(2);
    let (_risn, isns) = handshake(&mut r, 2);
    client_data(&mut r, t(10), b"ping");
    drain(&mut r);
    r.handle_packet(t(11), ack_from(1, isns[0], SeqNum(CISN).add(5), 500));
    assert!(drain(&mut r).is_empty());
    // Replica 2 stays silent: after 100 ms it is out and the client gets
    // the ACK replica 1 gave.
    let due = r.poll_timeout().expect("a failure timer");
    assert!(due <= t(112), "timer at {due:?}");
    run_to(&mut r, t(112));
    let out = drain(&mut r);
    assert!(
        out.iter()
            .any(|o| o.dst == CLIENT && o.r.ack == SeqNum(CISN).add(5)),
        "ACK released after eviction"
    );
    assert!(
        out.iter()
            .any(|o| o.dst == replica(2) && o.r.flags & flags::RST != 0),
        "evicted side reset"
    );
    // The log line says why: what the silent replica owed.
    let evs: Vec<Event> = std::iter::from_fn(|| r.poll_event()).collect();
    let detail = evs
        .iter()
        .find_map(|e| match e {
            Event::Evicted {
                replica: a,
                reason: EvictReason::Stalled,
                detail,
                ..
            } if *a == replica(2) => Some(detail.clone()),
            _ => None,
        })
        .expect("a Stalled eviction of replica 2");
    assert!(
        detail.contains("acknowledged 4 client byte(s) less than the client sent and 4 less than the furthest replica"),
        "{detail}"
    );
    assert!(detail.contains("last heard"), "{detail}");
    // And how much room it had: it was probed, in the client's name.
    assert!(
        detail.contains("the last window it was sent ends"),
        "{detail}"
    );
    let st = r.status();
    assert!(!st.services[0].replicas[1].alive);
    // A new connection skips the dead replica.
    let syn = Repr::new(CPORT + 1, PORT, SeqNum(5), SeqNum(0), flags::SYN, 64240);
    r.handle_packet(t(200), seg(CLIENT, VIP, syn, b""));
    let out = drain(&mut r);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].dst, replica(1));
}

#[test]
fn unknown_port_refused_and_unknown_connection_dropped() {
    let mut r = router(1);
    let syn = Repr::new(CPORT, 9999, SeqNum(5), SeqNum(0), flags::SYN, 64240);
    r.handle_packet(t(0), seg(CLIENT, VIP, syn, b""));
    let out = drain(&mut r);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].r.flags, flags::RST | flags::ACK);
    assert_eq!(r.counters().dropped(DropReason::UnknownPort), 1);
    let a = Repr::new(CPORT, PORT, SeqNum(5), SeqNum(9), flags::ACK, 1);
    r.handle_packet(t(0), seg(CLIENT, VIP, a, b"x"));
    assert!(drain(&mut r).is_empty());
    assert_eq!(r.counters().dropped(DropReason::UnknownConnection), 1);
}

#[test]
fn syn_flood_keeps_table_bounded() {
    let mut c = Config::default();
    c.services.push(Service {
        name: "t".into(),
        vip: VIP,
        ports: vec![PORT],
        replicas: vec![replica(1)],
        voting: Default::default(),
        stateless: false,
        ack: ftnet_core::Ack::All,
        delivery: Default::default(),
    });
    c.limits.max_half_open = 100;
    c.limits.max_connections = 150;
    let mut r = Router::new(c, [1; 16]);
    for i in 0..10_000u32 {
        let src = Ipv4Addr::from(0x0a00_0000 + i);
        let syn = Repr::new(
            1024 + (i % 60000) as u16,
            PORT,
            SeqNum(i),
            SeqNum(0),
            flags::SYN,
            1000,
        );
        r.handle_packet(t(i as u64), seg(src, VIP, syn, b""));
        while r.poll_transmit().is_some() {}
    }
    assert!(
        r.connections() <= 100,
        "half-open bounded: {}",
        r.connections()
    );
    let (conns, timers, queue) = r.table_sizes();
    assert!(
        timers <= 2 * conns + 1025 && queue <= 2 * 100 + 1025,
        "bookkeeping bounded too: {timers} timers, {queue} queued"
    );
    assert!(r.counters().dropped(DropReason::HalfOpenEvicted) >= 9_900);
    // A real client still gets through: its SYN is the newest.
    let (_risn, _isns) = {
        let mut syn = Repr::new(CPORT, PORT, SeqNum(CISN), SeqNum(0), flags::SYN, 64240);
        syn.timestamps = Some((1, 0));
        r.handle_packet(t(20_000), seg(CLIENT, VIP, syn, b""));
        let out = drain(&mut r);
        assert_eq!(
            out.iter()
                .filter(|o| o.r.flags == flags::SYN && o.src == CLIENT)
                .count(),
            1
        );
        assert!(
            out.iter()
                .all(|o| o.r.flags == flags::SYN || o.r.flags & flags::RST != 0),
            "the evicted half-open one is reset at the replica"
        );
        (0, 0)
    };
}

#[test]
fn bad_checksum_and_garbage_are_dropped_not_panicking() {
    let mut r = router(2);
    handshake(&mut r, 2);
    let mut p = Repr::new(CPORT, PORT, SeqNum(CISN).add(1), SeqNum(0), flags::ACK, 1)
        .emit_ipv4(CLIENT, VIP, b"data");
    let n = p.len();
    p[n - 1] ^= 0xff;
    r.handle_packet(t(5), Packet::plain(p.clone()));
    assert_eq!(r.counters().dropped(DropReason::BadChecksum), 1);
    for cut in 0..p.len() {
        r.handle_packet(t(5), Packet::plain(p[..cut].to_vec()));
    }
    assert!(r.counters().dropped(DropReason::Truncated) > 0);
    let mut x: u32 = 12345;
    for _ in 0..20_000 {
        let mut q = p.clone();
        for _ in 0..4 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let i = (x as usize) % q.len();
            q[i] = (x >> 8) as u8;
        }
        r.handle_packet(t(6), Packet::plain(q));
        while r.poll_transmit().is_some() {}
    }
}

#[test]
fn rst_from_every_replica_is_the_services_abort() {
    let mut r = router(3);
    let (_risn, isns) = handshake(&mut r, 3);
    for i in 1..=3u8 {
        let rst = Repr::new(
            PORT,
            CPORT,
            SeqNum(isns[i as usize - 1]).add(1),
            SeqNum(0),
            flags::RST,
            0,
        );
        r.handle_packet(t(5), seg(replica(i), CLIENT, rst, b""));
    }
    let out = drain(&mut r);
    assert_eq!(
        out.iter()
            .filter(|o| o.dst == CLIENT && o.r.flags & flags::RST != 0)
            .count(),
        1
    );
    run_to(&mut r, t(1000));
    assert!(log_events(&mut r).is_empty(), "nobody blamed");
    assert!(r.status().services[0].replicas.iter().all(|x| x.alive));
}

/// A server that closed its side (FIN, acknowledged by the client) and then
/// resets the client's next write — Redis after a protocol error, any server
/// that closes with unread input (RFC 9293 §3.10.7.4: data to a closed
/// socket draws a RST). The client must learn at once that the connection
/// is gone, as it would without the router; the replicas reset together, so
/// nobody is blamed. (The router once took the RST for an answer to a stray
/// segment and dropped it: the client wrote on into a dead connection.)
#[test]
fn rst_after_the_servers_acknowledged_fin_reaches_the_client() {
    for n in [1u8, 3] {
        let mut r = router(n);
        let (risn, isns) = handshake(&mut r, n);
        for i in 1..=n {
            fin_from_replica(&mut r, t(10), &isns, i, (1, 1, 7000));
        }
        let out = drain(&mut r);
        assert!(
            out.iter()
                .any(|o| o.dst == CLIENT && o.r.flags & flags::FIN != 0),
            "n={n}: the group's FIN reaches the client"
        );
        // The client acknowledges the FIN and writes on (half-close).
        let mut d = Repr::new(
            CPORT,
            PORT,
            SeqNum(CISN).add(1),
            SeqNum(risn).add(2),
            flags::ACK | flags::PSH,
            502,
        );
        d.timestamps = Some((1003, 0));
        r.handle_packet(t(11), seg(CLIENT, VIP, d, b"more"));
        let out = drain(&mut r);
        assert_eq!(
            out.iter().filter(|o| o.payload == b"more").count(),
            n as usize,
            "n={n}: the write goes to every replica"
        );
        // Every replica's kernel answers with a RST at its SND.NXT (after
        // its FIN), as the segment's ACK field said.
        let mut reset = Vec::new();
        for i in 1..=n {
            let rst = Repr::new(
                PORT,
                CPORT,
                SeqNum(isns[i as usize - 1]).add(2),
                SeqNum(0),
                flags::RST,
                0,
            );
            r.handle_packet(t(12), seg(replica(i), CLIENT, rst, b""));
            reset.extend(drain(&mut r));
        }
        let rsts: Vec<&Out> = reset
            .iter()
            .filter(|o| o.dst == CLIENT && o.r.flags & flags::RST != 0)
            .collect();
        assert_eq!(rsts.len(), 1, "n={n}: the client is reset once");
        assert_eq!(
            rsts[0].r.seq,
            SeqNum(risn).add(2),
            "n={n}: at exactly the client's RCV.NXT (RFC 5961 §3.2)"
        );
        r.handle_timeout(t(1000));
        assert!(
            log_events(&mut r)
                .iter()
                .all(|e| !matches!(e, Event::ReplicaDown { .. })),
            "n={n}: the service's own abort blames nobody"
        );
        assert_eq!(r.connections(), 0, "n={n}: the connection is gone");
    }
}

#[test]
fn syn_refused_by_every_replica_refuses_the_client_without_marking_down() {
    let mut r = router(3);
    let syn = Repr::new(CPORT, PORT, SeqNum(CISN), SeqNum(0), flags::SYN, 64240);
    r.handle_packet(t(0), seg(CLIENT, VIP, syn, b""));
    drain(&mut r);
    for i in 1..=3u8 {
        let rst = Repr::new(
            PORT,
            CPORT,
            SeqNum(0),
            SeqNum(CISN).add(1),
            flags::RST | flags::ACK,
            0,
        );
        r.handle_packet(t(1), seg(replica(i), CLIENT, rst, b""));
    }
    let out = drain(&mut r);
    assert_eq!(out.len(), 1);
    assert_eq!(
        (out[0].dst, out[0].r.flags & flags::RST != 0),
        (CLIENT, true)
    );
    assert!(r.status().services[0].replicas.iter().all(|x| x.alive));
    assert_eq!(r.connections(), 0);
}

#[test]
fn syn_refused_by_one_replica_marks_it_down() {
    let mut r = router(2);
    let syn = Repr::new(CPORT, PORT, SeqNum(CISN), SeqNum(0), flags::SYN, 64240);
    r.handle_packet(t(0), seg(CLIENT, VIP, syn, b""));
    drain(&mut r);
    let rst = Repr::new(
        PORT,
        CPORT,
        SeqNum(0),
        SeqNum(CISN).add(1),
        flags::RST | flags::ACK,
        0,
    );
    r.handle_packet(t(1), seg(replica(1), CLIENT, rst, b""));
    let sa = Repr::new(
        PORT,
        CPORT,
        SeqNum(77),
        SeqNum(CISN).add(1),
        flags::SYN | flags::ACK,
        65160,
    );
    r.handle_packet(t(1), seg(replica(2), CLIENT, sa, b""));
    let out = drain(&mut r);
    assert!(out
        .iter()
        .any(|o| o.dst == CLIENT && o.r.flags == flags::SYN | flags::ACK));
    let st = r.status();
    assert!(!st.services[0].replicas[0].alive && st.services[0].replicas[1].alive);
}

#[test]
fn silent_lagging_replica_is_probed_and_kept_while_it_answers() {
    let mut r = router(2);
    let (_risn, isns) = handshake(&mut r, 2);
    client_data(&mut r, t(10), b"ping");
    drain(&mut r);
    r.handle_packet(t(11), ack_from(1, isns[0], SeqNum(CISN).add(5), 500));
    // Replica 2 lost the segment. At a quarter of the detection time it is
    // probed with a keep-alive carrying one old octet.
    r.handle_timeout(t(37));
    let out = drain(&mut r);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].dst, replica(2));
    assert_eq!(
        out[0].r.seq,
        SeqNum(CISN),
        "one octet before what it acknowledged"
    );
    assert_eq!(out[0].payload.len(), 1);
    // It answers (a duplicate ACK): alive, so not evicted at 111 ms.
    r.handle_packet(t(37), ack_from(2, isns[1], SeqNum(CISN).add(1), 500));
    r.handle_timeout(t(115));
    assert!(r.status().services[0].replicas[1].alive);
}

/// The router's timers run late (its loop starved of CPU by a storm of
/// connections, or holding them for another thread's lagging queue): the
/// replica that owes an answer was never asked during its silence. It is
/// asked first; one whose kernel answers is kept, one that stays silent
/// goes a quarter of the detection time after the question.
#[test]
fn a_router_whose_timers_ran_late_asks_before_it_convicts() {
    for answers in [true, false] {
        let mut r = router(2);
        let (_risn, isns) = handshake(&mut r, 2);
        client_data(&mut r, t(10), b"ping");
        drain(&mut r);
        r.handle_packet(t(11), ack_from(1, isns[0], SeqNum(CISN).add(5), 500));
        drain(&mut r);
        // Its packets keep coming (replica 1 repeats its ACK), but the
        // first timer run since is 190 ms later, long past the detection
        // time: the router was busy, not stopped.
        for at in (30..=190).step_by(20) {
            r.handle_packet(t(at), ack_from(1, isns[0], SeqNum(CISN).add(5), 500));
        }
        drain(&mut r);
        r.handle_timeout(t(200));
        let out = drain(&mut r);
        assert!(all_alive(&r), "convicted unasked: {:?}", log_events(&mut r));
        assert!(
            out.iter()
                .any(|o| o.dst == replica(2) && o.payload.len() == 1),
            "replica 2 is probed: {out:?}"
        );
        if answers {
            // Its kernel answers (a duplicate ACK): alive.
            r.handle_packet(t(201), ack_from(2, isns[1], SeqNum(CISN).add(1), 500));
            r.handle_timeout(t(240));
            drain(&mut r);
            assert!(all_alive(&r), "{:?}", log_events(&mut r));
        } else {
            r.handle_timeout(t(224));
            drain(&mut r);
            assert!(all_alive(&r), "before the answer was due");
            r.handle_timeout(t(226));
            drain(&mut r);
            assert!(
                !r.status().services[0].replicas[1].alive,
                "silent after the question: {:?}",
                log_events(&mut r)
            );
        }
    }
}

/// The client's segment is lost before the router: every replica holds
/// what follows out of order and none can acknowledge it. One replica
/// answers the probes, one stays silent (a stack that answers out-of-window
/// segments once a second, or a lost answer): that silence proves nothing
/// while nobody is ahead of it, so nobody is evicted. Once the client sends
/// the hole again and the others acknowledge it, the silent one is behind
/// them and goes at the detection time.
#[test]
fn a_client_hole_does_not_convict_a_replica_that_is_slow_to_answer() {
    let mut r = router(2);
    let (risn, isns) = handshake(&mut r, 2);
    // Bytes 0..4 never reach the router; 4..9 do and go to both.
    let out = client_bytes(&mut r, t(10), risn, 4, b"later");
    assert_eq!(out.iter().filter(|o| o.payload == b"later").count(), 2);
    // Replica 1 answers everything with a duplicate ACK; replica 2 never.
    let mut at = 10;
    while at < 400 {
        at += 5;
        r.handle_timeout(t(at));
        drain(&mut r);
        r.handle_packet(t(at), ack_from(1, isns[0], SeqNum(CISN).add(1), 500));
        drain(&mut r);
    }
    assert!(
        all_alive(&r),
        "a replica silent at the client's hole was evicted: {:?}",
        log_events(&mut r)
    );
    // The client fills the hole; replica 1 acknowledges all, 2 stays silent.
    client_bytes(&mut r, t(400), risn, 0, b"ping");
    r.handle_packet(t(401), ack_from(1, isns[0], SeqNum(CISN).add(10), 500));
    drain(&mut r);
    let mut evicted = None;
    at = 401;
    while at < 700 && evicted.is_none() {
        at += 5;
        r.handle_timeout(t(at));
        drain(&mut r);
        evicted = log_events(&mut r).into_iter().find_map(|e| match e {
            Event::Evicted {
                replica: a,
                reason: EvictReason::Stalled,
                ..
            } if a == replica(2) => Some(at),
            _ => None,
        });
    }
    let when = evicted.expect("the silent replica, behind replica 1, is evicted");
    assert!(when <= 401 + 115, "evicted at {when} ms");
}

/// A client segment lost before the router: every replica lacks the same
/// bytes and repeats its ACK for each later segment. The client gets one
/// duplicate ACK per segment it sent beyond the hole, as from one TCP
/// receiver. (Passed on from all three, it counted three per segment, more
/// than it had in flight; Linux took that for reordering, raised its
/// duplicate-ACK threshold to as much as 300 for the connection's life, and
/// every later loss, those of a router takeover among them, waited for its
/// retransmission timeout.) The replicas' answers to the router's own probes
/// are no duplicate ACKs of the client's, except a fast retransmit's worth
/// once the client has gone quiet (its tail may be what one replica lacks).
#[test]
fn a_hole_all_replicas_lack_gets_one_duplicate_ack_per_client_segment() {
    let mut r = router(3);
    let (risn, isns) = handshake(&mut r, 3);
    // Bytes 0..4 never reach the router; three segments after them do.
    let mut dups = 0;
    for (k, at) in [(4u32, 10u64), (9, 12), (14, 14)] {
        let out = client_bytes(&mut r, t(at), risn, k, b"later");
        assert_eq!(out.iter().filter(|o| o.payload == b"later").count(), 3);
        for i in 1..=3u8 {
            r.handle_packet(
                t(at + 1),
                ack_from(i, isns[i as usize - 1], SeqNum(CISN).add(1), 500),
            );
            for o in drain(&mut r) {
                if o.dst == CLIENT && o.payload.is_empty() {
                    assert_eq!(o.r.ack, SeqNum(CISN).add(1));
                    dups += 1;
                }
            }
        }
    }
    assert_eq!(
        dups, 3,
        "one duplicate ACK to the client per segment it sent"
    );
    // The router probes the replicas lagging the client; they answer with
    // the same ACK. The client sent nothing: none of that reaches it (a
    // Linux sender counts each duplicate ACK as a segment delivered).
    for at in 16..19 {
        r.handle_timeout(t(at));
        drain(&mut r);
        for i in 1..=3u8 {
            r.handle_packet(
                t(at),
                ack_from(i, isns[i as usize - 1], SeqNum(CISN).add(1), 500),
            );
            let to_client = drain(&mut r)
                .into_iter()
                .filter(|o| o.dst == CLIENT)
                .count();
            assert_eq!(
                to_client, 0,
                "a replica's ACK the client did not prompt went on"
            );
        }
    }
    // The client then sends nothing for 200 ms (waiting for its timeout,
    // its tail lost): a fast retransmit's worth of duplicate ACKs goes on,
    // no more until it sends again.
    let mut idle = 0;
    for at in 220..230 {
        for i in 1..=3u8 {
            r.handle_packet(
                t(at),
                ack_from(i, isns[i as usize - 1], SeqNum(CISN).add(1), 500),
            );
            idle += drain(&mut r)
                .into_iter()
                .filter(|o| o.dst == CLIENT)
                .count();
        }
    }
    assert_eq!(idle, 3, "three duplicate ACKs to a client that went quiet");
    // The client fills the hole: every replica acknowledges all of it.
    client_bytes(&mut r, t(240), risn, 0, b"ping");
    let mut acked = SeqNum(CISN);
    for i in 1..=3u8 {
        r.handle_packet(
            t(241),
            ack_from(i, isns[i as usize - 1], SeqNum(CISN).add(19), 500),
        );
        for o in drain(&mut r) {
            if o.dst == CLIENT {
                acked = o.r.ack;
            }
        }
    }
    assert_eq!(acked, SeqNum(CISN).add(19));
}

/// A replica closed its window (its server stopped reading), then opened
/// it again, and that window update was lost. The replica will not send it
/// again (the sender probes a zero window) and a client without a persist
/// timer never would: the router asks the replica, and passes its answer
/// on, so the client's window opens.
#[test]
fn a_replica_that_shut_the_clients_window_is_asked_for_it_again() {
    let mut r = router(2);
    let (_risn, isns) = handshake(&mut r, 2);
    client_data(&mut r, t(10), b"ping");
    drain(&mut r);
    r.handle_packet(t(11), ack_from(1, isns[0], SeqNum(CISN).add(5), 0));
    r.handle_packet(t(11), ack_from(2, isns[1], SeqNum(CISN).add(5), 500));
    let out = drain(&mut r);
    let to_client: Vec<&Out> = out.iter().filter(|o| o.dst == CLIENT).collect();
    assert!(!to_client.is_empty(), "the ACK reaches the client");
    assert_eq!(
        to_client.last().unwrap().r.window,
        0,
        "replica 1 shut the window"
    );
    // Replica 1's window update is lost. Within the detection time the
    // router asks it (and only it).
    let mut asked = None;
    let mut at = 11;
    while at < 100 && asked.is_none() {
        at += 5;
        r.handle_timeout(t(at));
        let out = drain(&mut r);
        assert!(out.iter().all(|o| o.dst != replica(2)), "{out:?}");
        if out.iter().any(|o| o.dst == replica(1)) {
            asked = Some(at);
        }
    }
    assert!(asked.is_some(), "replica 1 was never asked for its window");
    // Its answer carries the open window (beyond the edge the client was
    // given before): the client hears of it.
    r.handle_packet(t(at), ack_from(1, isns[0], SeqNum(CISN).add(5), 600));
    let out = drain(&mut r);
    assert!(
        out.iter().any(|o| o.dst == CLIENT && o.r.window > 0),
        "the window update reaches the client: {out:?}"
    );
    assert!(all_alive(&r));
}

/// ICMP host unreachable from the replica's side of the router (its
/// gateway address), addressed to the client, quoting a segment the
/// router sent replica 2: the replica leaves that connection; one
/// message does not mark it down for the service (RFC 5927 §4.1).
#[test]
fn icmp_unreachable_for_a_replica_evicts_it_from_that_connection() {
    let mut r = router(2);
    handshake(&mut r, 2);
    let gw = Ipv4Addr::new(198, 18, 12, 1);
    // A quote of a sequence number the router never sent: not believed.
    r.handle_packet(
        t(5),
        icmp_unreachable(
            gw,
            CLIENT,
            CLIENT,
            CPORT,
            replica(2),
            SeqNum(CISN).add(5000),
        ),
    );
    assert!(all_alive(&r));
    assert!(log_events(&mut r).is_empty());
    assert_eq!(dropped(&r, "icmp_unverified"), 1);
    r.handle_packet(
        t(5),
        icmp_unreachable(gw, CLIENT, CLIENT, CPORT, replica(2), SeqNum(CISN).add(1)),
    );
    assert!(all_alive(&r), "one ICMP demotes nobody service-wide");
    let ev = log_events(&mut r);
    assert!(
        matches!(
            ev.as_slice(),
            [Event::Evicted {
                reason: EvictReason::Unreachable,
                remaining: 1,
                ..
            }]
        ),
        "{ev:?}"
    );
    let out = drain(&mut r);
    assert!(
        out.iter()
            .any(|o| o.dst == replica(2) && o.r.flags & flags::RST != 0),
        "its side is reset"
    );
}

#[test]
fn out_of_window_ack_is_dropped() {
    let mut r = router(1);
    let (risn, _) = handshake(&mut r, 1);
    // The client cannot acknowledge bytes it was never sent.
    let a = Repr::new(
        CPORT,
        PORT,
        SeqNum(CISN).add(1),
        SeqNum(risn).add(1_000_000),
        flags::ACK,
        1,
    );
    r.handle_packet(t(5), seg(CLIENT, VIP, a, b"x"));
    assert!(drain(&mut r).is_empty());
    assert_eq!(r.counters().dropped(DropReason::OutOfWindow), 1);
}

/// A client's keep-alive or zero-window probe (no data, one below what it
/// was acknowledged: Linux's `tcp_xmit_probe_skb`) gets an answer with the
/// group's ACK and window. Every replica answers it too, and those answers
/// change nothing and are absorbed. Without the router's own answer, a
/// client's keep-alives would go unanswered until it gave up on the
/// connection, and a client told a zero window whose update was lost would
/// wait for good.
#[test]
fn a_clients_keep_alive_or_window_probe_is_answered() {
    let mut r = router(2);
    let (risn, isns) = handshake(&mut r, 2);
    client_data(&mut r, t(3), b"hello");
    drain(&mut r);
    let end = SeqNum(CISN).add(6);
    for i in 1..=2 {
        r.handle_packet(t(4), ack_from(i, isns[i as usize - 1], end, 500));
    }
    let out = drain(&mut r);
    assert!(
        out.iter().any(|o| o.dst == CLIENT && o.r.ack == end),
        "the group's ACK reached the client"
    );
    // Idle; the client probes at SND.UNA - 1 with nothing in it.
    let mut probe = Repr::new(
        CPORT,
        PORT,
        end.sub(1),
        SeqNum(risn).add(1),
        flags::ACK,
        502,
    );
    probe.timestamps = Some((9000, 0));
    for k in 0..3u64 {
        let at = 1000 + 1000 * k;
        r.handle_packet(t(at), seg(CLIENT, VIP, probe.clone(), b""));
        for i in 1..=2 {
            r.handle_packet(t(at + 1), ack_from(i, isns[i as usize - 1], end, 500));
        }
        let out = drain(&mut r);
        let answers: Vec<&Out> = out.iter().filter(|o| o.dst == CLIENT).collect();
        assert_eq!(answers.len(), 1, "probe {k}: one answer, {out:?}");
        assert_eq!(answers[0].r.ack, end, "probe {k}: the group's ACK");
        assert_eq!(answers[0].r.flags, flags::ACK, "probe {k}: a pure ACK");
        assert!(answers[0].r.window > 0, "probe {k}: the group's window");
    }
}

/// The replicas' ACK of the client's FIN may come only on FINs that repeat
/// the one the client already has: those pass nothing on. When the client
/// repeats its FIN (it is in CLOSING), the router answers with the group's
/// ACK of it. Before, it answered only a FIN that it had itself
/// acknowledged to the client, and the client repeated its FIN until it
/// gave up.
#[test]
fn a_repeated_client_fin_the_group_acknowledged_is_answered() {
    let mut r = router(2);
    let (risn, isns) = handshake(&mut r, 2);
    let cfin = SeqNum(CISN).add(1);
    let fin = Repr::new(
        CPORT,
        PORT,
        cfin,
        SeqNum(risn).add(1),
        flags::ACK | flags::FIN,
        502,
    );
    r.handle_packet(t(5), seg(CLIENT, VIP, fin.clone(), b""));
    drain(&mut r);
    // r1 closes having the client's FIN; r2 closes before it has it.
    let rfin = |i: u8, cack: SeqNum| {
        let isn = isns[i as usize - 1];
        let a = Repr::new(
            PORT,
            CPORT,
            SeqNum(isn).add(1),
            cack,
            flags::ACK | flags::FIN,
            500,
        );
        seg(replica(i), CLIENT, a, b"")
    };
    r.handle_packet(t(6), rfin(1, cfin.add(1)));
    r.handle_packet(t(6), rfin(2, cfin));
    let out = drain(&mut r);
    let to_client: Vec<&Out> = out.iter().filter(|o| o.dst == CLIENT).collect();
    assert!(
        to_client
            .iter()
            .any(|o| o.r.flags & flags::FIN != 0 && o.r.ack == cfin),
        "the group's FIN, not acknowledging the client's: {out:?}"
    );
    // The client acknowledges it; r2 then acknowledges the client's FIN on
    // a repeat of its own FIN.
    let ack = Repr::new(
        CPORT,
        PORT,
        cfin.add(1),
        SeqNum(risn).add(2),
        flags::ACK,
        502,
    );
    r.handle_packet(t(7), seg(CLIENT, VIP, ack, b""));
    r.handle_packet(t(8), rfin(2, cfin.add(1)));
    drain(&mut r);
    // The client, in CLOSING, repeats its FIN.
    let mut rfin_client = fin;
    rfin_client.ack = SeqNum(risn).add(2);
    r.handle_packet(t(300), seg(CLIENT, VIP, rfin_client, b""));
    let out = drain(&mut r);
    assert!(
        out.iter()
            .any(|o| o.dst == CLIENT && o.r.ack == cfin.add(1)),
        "the client's FIN acknowledged: {out:?}"
    );
}

#[test]
fn retransmitted_client_fin_is_acknowledged_by_the_router() {
    let mut r = router(2);
    let (risn, isns) = handshake(&mut r, 2);
    let fin = Repr::new(
        CPORT,
        PORT,
        SeqNum(CISN).add(1),
        SeqNum(risn).add(1),
        flags::ACK | flags::FIN,
        502,
    );
    r.handle_packet(t(5), seg(CLIENT, VIP, fin.clone(), b""));
    drain(&mut r);
    for i in 1..=2 {
        r.handle_packet(
            t(6),
            ack_from(i, isns[i as usize - 1], SeqNum(CISN).add(2), 500),
        );
    }
    let out = drain(&mut r);
    assert_eq!(out.len(), 1, "group ACK of the FIN");
    // Our ACK was lost; the client repeats its FIN. The replicas' answers
    // change nothing, so the router itself acknowledges it.
    r.handle_packet(t(300), seg(CLIENT, VIP, fin, b""));
    let out = drain(&mut r);
    assert!(
        out.iter()
            .any(|o| o.dst == CLIENT && o.r.ack == SeqNum(CISN).add(2)),
        "FIN re-acknowledged"
    );
}

#[test]
fn closed_connections_give_way_when_the_table_is_full() {
    let mut c = Config::default();
    c.services.push(Service {
        name: "t".into(),
        vip: VIP,
        ports: vec![PORT],
        replicas: vec![replica(1)],
        voting: Default::default(),
        stateless: false,
        ack: ftnet_core::Ack::All,
        delivery: Default::default(),
    });
    c.limits.max_connections = 1;
    c.limits.max_half_open = 1;
    let mut r = Router::new(c, [3; 16]);
    let (risn, isns) = handshake(&mut r, 1);
    // Full close: replica FIN, client FIN, both acknowledged.
    let rfin = Repr::new(
        PORT,
        CPORT,
        SeqNum(isns[0]).add(1),
        SeqNum(CISN).add(1),
        flags::ACK | flags::FIN,
        500,
    );
    r.handle_packet(t(5), seg(replica(1), CLIENT, rfin, b""));
    let cfin = Repr::new(
        CPORT,
        PORT,
        SeqNum(CISN).add(1),
        SeqNum(risn).add(2),
        flags::ACK | flags::FIN,
        500,
    );
    r.handle_packet(t(6), seg(CLIENT, VIP, cfin, b""));
    r.handle_packet(
        t(7),
        ack_from(1, isns[0].wrapping_add(1), SeqNum(CISN).add(2), 500),
    );
    drain(&mut r);
    assert_eq!(r.connections(), 1, "remembered after close");
    let syn = Repr::new(CPORT + 1, PORT, SeqNum(77), SeqNum(0), flags::SYN, 1000);
    r.handle_packet(t(8), seg(CLIENT, VIP, syn, b""));
    assert_eq!(
        drain(&mut r).len(),
        1,
        "new SYN admitted by retiring the closed one"
    );
    assert_eq!(r.counters().dropped(DropReason::TableFull), 0);
}

#[test]
fn fin_from_a_killed_idle_replica_does_not_make_the_others_suspect() {
    let mut r = router(2);
    let (_risn, isns) = handshake(&mut r, 2);
    // Replica 1's process dies while the connection is idle: its kernel
    // sends a FIN. Replica 2 owes nothing and stays silent.
    let fin = Repr::new(
        PORT,
        CPORT,
        SeqNum(isns[0]).add(1),
        SeqNum(CISN).add(1),
        flags::ACK | flags::FIN,
        500,
    );
    r.handle_packet(t(10), seg(replica(1), CLIENT, fin, b""));
    assert!(
        drain(&mut r).iter().all(|o| o.dst != CLIENT),
        "no FIN to the client from one replica"
    );
    // Replica 2 sent no FIN where replica 1's stands: it is asked whether
    // it lives (it could be the one that died, its FIN lost). It answers,
    // as a live stack does, and is not asked again while the connection
    // stays idle.
    let mut probed = 0;
    while let Some(due) = r.poll_timeout().filter(|d| *d <= t(5000)) {
        r.handle_timeout(due);
        for o in drain(&mut r) {
            if o.dst == replica(2) && o.r.flags & flags::RST == 0 {
                probed += 1;
                r.handle_packet(due, ack_from(2, isns[1], SeqNum(CISN).add(1), 500));
            }
        }
    }
    r.handle_timeout(t(5000));
    drain(&mut r);
    assert_eq!(
        probed, 1,
        "the replica without the FIN is asked once whether it lives"
    );
    assert!(
        r.status().services[0].replicas[1].alive,
        "the healthy idle replica that answers is not evicted"
    );
    // The next request: replica 2 answers; replica 1's FIN is contradicted.
    let mut d = Repr::new(CPORT, PORT, SeqNum(CISN).add(1), SeqNum(0), flags::PSH, 502);
    d.timestamps = Some((1002, 0));
    r.handle_packet(t(5001), seg(CLIENT, VIP, d, b"GET"));
    drain(&mut r);
    let mut a = Repr::new(
        PORT,
        CPORT,
        SeqNum(isns[1]).add(1),
        SeqNum(CISN).add(4),
        flags::ACK | flags::PSH,
        500,
    );
    a.timestamps = Some((6000, 1002));
    r.handle_packet(t(5002), seg(replica(2), CLIENT, a, b"reply"));
    let out = drain(&mut r);
    assert!(out
        .iter()
        .any(|o| o.dst == CLIENT && o.payload == b"reply" && o.r.flags & flags::FIN == 0));
    let ev: Vec<Event> = std::iter::from_fn(|| r.poll_event()).collect();
    assert!(
        ev.iter().any(|e| matches!(
            e,
            Event::Evicted {
                reason: EvictReason::Fin,
                ..
            }
        )),
        "{ev:?}"
    );
}

#[test]
fn several_services_are_kept_apart() {
    let mut c = Config::default();
    let vip2 = Ipv4Addr::new(198, 19, 0, 2);
    c.services.push(Service {
        name: "a".into(),
        vip: VIP,
        ports: vec![PORT],
        replicas: vec![replica(1), replica(2)],
        voting: Default::default(),
        stateless: false,
        ack: ftnet_core::Ack::All,
        delivery: Default::default(),
    });
    // Same replica hosts, another VIP and port.
    c.services.push(Service {
        name: "b".into(),
        vip: vip2,
        ports: vec![80, 443],
        replicas: vec![replica(2), replica(3)],
        voting: Default::default(),
        stateless: false,
        ack: ftnet_core::Ack::All,
        delivery: Default::default(),
    });
    let mut r = Router::new(c, [5; 16]);
    let syn_a = Repr::new(CPORT, PORT, SeqNum(1), SeqNum(0), flags::SYN, 1000);
    r.handle_packet(t(0), seg(CLIENT, VIP, syn_a, b""));
    let syn_b = Repr::new(CPORT, 443, SeqNum(2), SeqNum(0), flags::SYN, 1000);
    r.handle_packet(t(0), seg(CLIENT, vip2, syn_b, b""));
    let out = drain(&mut r);
    let a: Vec<Ipv4Addr> = out
        .iter()
        .filter(|o| o.r.dst_port == PORT)
        .map(|o| o.dst)
        .collect();
    let b: Vec<Ipv4Addr> = out
        .iter()
        .filter(|o| o.r.dst_port == 443)
        .map(|o| o.dst)
        .collect();
    assert_eq!(a, vec![replica(1), replica(2)]);
    assert_eq!(b, vec![replica(2), replica(3)]);
    // Replica 2 refuses service b's SYN while replica 3 accepts: down for b only.
    let rst = Repr::new(443, CPORT, SeqNum(0), SeqNum(3), flags::RST | flags::ACK, 0);
    r.handle_packet(t(1), seg(replica(2), CLIENT, rst, b""));
    let sa = Repr::new(
        443,
        CPORT,
        SeqNum(900),
        SeqNum(3),
        flags::SYN | flags::ACK,
        1000,
    );
    r.handle_packet(t(1), seg(replica(3), CLIENT, sa, b""));
    let out = drain(&mut r);
    assert!(
        out.iter()
            .any(|o| o.src == vip2 && o.dst == CLIENT && o.r.flags == flags::SYN | flags::ACK),
        "service b answers from its own VIP"
    );
    let st = r.status();
    assert!(
        st.services[0].replicas.iter().all(|x| x.alive),
        "service a untouched"
    );
    assert!(!st.services[1].replicas[0].alive && st.services[1].replicas[1].alive);
    assert_eq!(st.services[0].connections, 1);
    assert_eq!(st.services[1].connections, 1);
}

#[test]
fn replicas_that_never_answer_are_evicted_after_syn_retries() {
    // COSCANet-FT §III-E: after n client SYN retransmissions without an
    // answer the replica is treated as crashed — when another replica
    // answered that SYN. With nobody answering, the client is refused and
    // nobody is marked down: a SYN no replica answers (a flood the
    // servers' SYN queues shed, a replayed or forged SYN) is no evidence
    // against any one of them.
    let mut r = router(2);
    let syn = Repr::new(CPORT, PORT, SeqNum(CISN), SeqNum(0), flags::SYN, 64240);
    r.handle_packet(t(0), seg(CLIENT, VIP, syn.clone(), b""));
    assert_eq!(drain(&mut r).len(), 2);
    // A copy duplicated by the network is not a retry.
    r.handle_packet(t(1), seg(CLIENT, VIP, syn.clone(), b""));
    drain(&mut r);
    // First retransmission (syn_retries = 1): still waiting, SYN repeated.
    r.handle_packet(t(1000), seg(CLIENT, VIP, syn.clone(), b""));
    let out = drain(&mut r);
    assert_eq!(out.iter().filter(|o| o.r.flags == flags::SYN).count(), 2);
    assert!(r.status().services[0].replicas.iter().all(|x| x.alive));
    // Second retransmission: both out, the client refused. The last one
    // stays eligible for new connections: there is nothing to fail over to.
    r.handle_packet(t(3000), seg(CLIENT, VIP, syn, b""));
    let out = drain(&mut r);
    assert!(
        out.iter()
            .any(|o| o.dst == CLIENT && o.r.flags & flags::RST != 0),
        "client refused"
    );
    let alive = r.status().services[0]
        .replicas
        .iter()
        .filter(|x| x.alive)
        .count();
    assert_eq!(alive, 2, "nobody answered: nobody marked down");
    let ev: Vec<Event> = std::iter::from_fn(|| r.poll_event()).collect();
    assert!(
        !ev.iter().any(|e| matches!(e, Event::ReplicaDown { .. })),
        "{ev:?}"
    );
    assert!(ev.iter().any(|e| matches!(
        e,
        Event::Evicted {
            reason: EvictReason::NoSynAck,
            ..
        }
    )));
}

/// A replica that leaves a client's SYN unanswered while another answered
/// it is treated as crashed for the whole service (§III-E).
#[test]
fn a_replica_silent_to_a_syn_another_answered_is_marked_down() {
    let mut r = router(2);
    let syn = Repr::new(CPORT, PORT, SeqNum(CISN), SeqNum(0), flags::SYN, 64240);
    r.handle_packet(t(0), seg(CLIENT, VIP, syn.clone(), b""));
    assert_eq!(drain(&mut r).len(), 2);
    let sa = Repr::new(
        PORT,
        CPORT,
        SeqNum(1_000_000),
        SeqNum(CISN).add(1),
        flags::SYN | flags::ACK,
        65160,
    );
    r.handle_packet(t(1), seg(replica(1), CLIENT, sa, b""));
    drain(&mut r);
    run_to(&mut r, t(1000));
    r.handle_packet(t(1000), seg(CLIENT, VIP, syn.clone(), b""));
    drain(&mut r);
    run_to(&mut r, t(3000));
    r.handle_packet(t(3000), seg(CLIENT, VIP, syn, b""));
    drain(&mut r);
    let ev: Vec<Event> = std::iter::from_fn(|| r.poll_event()).collect();
    assert!(
        ev.iter().any(|e| matches!(
            e,
            Event::ReplicaDown {
                replica: a,
                reason: EvictReason::NoSynAck,
                ..
            } if *a == replica(2)
        )),
        "{ev:?}"
    );
    assert!(!r.status().services[0].replicas[1].alive);
    assert!(r.status().services[0].replicas[0].alive);
}

/// A replica that still holds an earlier connection of the client's
/// four-tuple (the router took it out of that one and its reset never
/// arrived) answers the client's SYN from the reused port with that
/// connection's challenge ACK, not a SYN-ACK. The router resets the stale
/// connection at exactly the ACK number it carries, as the client's stack
/// would in SYN-SENT (RFC 9293 §3.10.7.3), and sends the SYN again: the
/// replica joins the new connection, and nobody is marked down.
#[test]
fn a_replica_holding_a_stale_connection_of_the_port_is_reset_and_answers_again() {
    let mut r = router(2);
    let syn = Repr::new(CPORT, PORT, SeqNum(CISN), SeqNum(0), flags::SYN, 64240);
    r.handle_packet(t(0), seg(CLIENT, VIP, syn.clone(), b""));
    assert_eq!(drain(&mut r).len(), 2);
    let sa = |isn: u32| {
        Repr::new(
            PORT,
            CPORT,
            SeqNum(isn),
            SeqNum(CISN).add(1),
            flags::SYN | flags::ACK,
            65160,
        )
    };
    r.handle_packet(t(1), seg(replica(1), CLIENT, sa(1_000_000), b""));
    assert!(drain(&mut r).is_empty(), "SYN-ACK held for replica 2");
    // Replica 2's answer: the old connection's challenge ACK.
    let old_rcv_nxt = SeqNum(0x1234_5678);
    let challenge = Repr::new(PORT, CPORT, SeqNum(777_777), old_rcv_nxt, flags::ACK, 502);
    r.handle_packet(t(2), seg(replica(2), CLIENT, challenge, b""));
    let out = drain(&mut r);
    let rst = out
        .iter()
        .position(|o| o.dst == replica(2) && o.r.flags == flags::RST)
        .expect("the stale connection is reset");
    assert_eq!(out[rst].r.seq, old_rcv_nxt, "at exactly its RCV.NXT");
    assert_eq!(out[rst].src, CLIENT);
    let again = out
        .iter()
        .position(|o| o.dst == replica(2) && o.r.flags == flags::SYN)
        .expect("the SYN goes again at once");
    assert!(again > rst, "after the reset");
    assert_eq!(out[again].r.seq, SeqNum(CISN));
    assert!(out.iter().all(|o| o.dst != CLIENT), "{out:?}");
    // An acceptable ACK without a SYN is not reset.
    let bare = Repr::new(
        PORT,
        CPORT,
        SeqNum(2_000_000),
        SeqNum(CISN).add(1),
        flags::ACK,
        502,
    );
    r.handle_packet(t(3), seg(replica(2), CLIENT, bare, b""));
    assert!(drain(&mut r).is_empty());
    // Its SYN-ACK now completes the handshake.
    r.handle_packet(t(4), seg(replica(2), CLIENT, sa(2_000_000), b""));
    let out = drain(&mut r);
    assert!(
        out.iter()
            .any(|o| o.dst == CLIENT && o.r.flags == flags::SYN | flags::ACK),
        "{out:?}"
    );
    let ev = log_events(&mut r);
    assert!(
        !ev.iter()
            .any(|e| matches!(e, Event::Evicted { .. } | Event::ReplicaDown { .. })),
        "{ev:?}"
    );
    assert!(all_alive(&r));
}

/// A replica whose stale connection outlives the router's resets (a
/// TIME-WAIT that ignores them) leaves the new connection when its time is
/// up, as one that never answered would, but it answered: it is alive and
/// stays in service for new connections. Its resets are bounded.
#[test]
fn a_replica_whose_stale_connection_persists_leaves_only_that_connection() {
    let mut r = router(2);
    let syn = Repr::new(CPORT, PORT, SeqNum(CISN), SeqNum(0), flags::SYN, 64240);
    r.handle_packet(t(0), seg(CLIENT, VIP, syn.clone(), b""));
    drain(&mut r);
    let sa = Repr::new(
        PORT,
        CPORT,
        SeqNum(1_000_000),
        SeqNum(CISN).add(1),
        flags::SYN | flags::ACK,
        65160,
    );
    r.handle_packet(t(1), seg(replica(1), CLIENT, sa, b""));
    let challenge = Repr::new(PORT, CPORT, SeqNum(777_777), SeqNum(42), flags::ACK, 502);
    let mut syns = 0;
    for k in 0..6 {
        r.handle_packet(t(2 + k), seg(replica(2), CLIENT, challenge.clone(), b""));
        let out = drain(&mut r);
        assert!(
            out.iter()
                .any(|o| o.dst == replica(2) && o.r.flags == flags::RST && o.r.seq == SeqNum(42)),
            "{out:?}"
        );
        syns += out.iter().filter(|o| o.r.flags == flags::SYN).count();
    }
    assert_eq!(syns, 2, "the SYN goes again twice at most");
    // The group answers the client without it once detection runs out.
    let mut now = t(10);
    while let Some(due) = r.poll_timeout() {
        if due > t(5000) {
            break;
        }
        now = due.max(now);
        r.handle_timeout(now);
        if drain(&mut r)
            .iter()
            .any(|o| o.dst == CLIENT && o.r.flags == flags::SYN | flags::ACK)
        {
            break;
        }
    }
    let ev = log_events(&mut r);
    assert!(
        ev.iter().any(|e| matches!(
            e,
            Event::Evicted {
                reason: EvictReason::NoSynAck,
                replica: a,
                ..
            } if *a == replica(2)
        )),
        "{ev:?}"
    );
    assert!(
        !ev.iter().any(|e| matches!(e, Event::ReplicaDown { .. })),
        "it answered: alive, {ev:?}"
    );
    assert!(all_alive(&r));
}

/// After the router took a replica out of an open connection, the
/// replica's side may live on: the reset at what it acknowledged fell
/// short of its RCV.NXT (or was lost on a cut link). Any segment it sends
/// there carries its RCV.NXT, and the router resets the side at exactly
/// that number, as a stack does for a segment to a connection it no longer
/// has (RFC 9293 §3.10.7.1); a bounded number of times.
#[test]
fn an_evicted_replicas_side_that_lives_on_is_reset_at_its_ack() {
    let mut r = router(2);
    let (_risn, isns) = handshake(&mut r, 2);
    client_data(&mut r, t(10), b"ping");
    drain(&mut r);
    r.handle_packet(t(11), ack_from(1, isns[0], SeqNum(CISN).add(5), 500));
    drain(&mut r);
    run_to(&mut r, t(112));
    let out = drain(&mut r);
    let first = out
        .iter()
        .find(|o| o.dst == replica(2) && o.r.flags & flags::RST != 0)
        .expect("evicted side reset");
    assert_eq!(first.r.seq, SeqNum(CISN).add(1), "at what it acknowledged");
    // It had the four bytes after all: its challenge ACK (or a segment of
    // its server's reply) says so.
    for k in 0..5 {
        r.handle_packet(t(120 + k), ack_from(2, isns[1], SeqNum(CISN).add(5), 500));
        let out = drain(&mut r);
        let rst: Vec<_> = out
            .iter()
            .filter(|o| o.dst == replica(2) && o.r.flags == flags::RST)
            .collect();
        if k < 3 {
            assert_eq!(rst.len(), 1, "{out:?}");
            assert_eq!(rst[0].r.seq, SeqNum(CISN).add(5));
            assert_eq!(rst[0].src, CLIENT);
        } else {
            assert!(rst.is_empty(), "bounded: {out:?}");
        }
        assert!(out.iter().all(|o| o.dst != CLIENT), "{out:?}");
    }
}

/// An established connection is announced once with what the agents keep
/// (each replica's own ISN), and forgotten when it leaves the table.
#[test]
fn established_connections_are_announced_and_forgotten() {
    let mut r = router(2);
    let (risn, isns) = handshake(&mut r, 2);
    let evs = agent_msgs(&mut r);
    let recs: Vec<_> = evs
        .iter()
        .filter_map(|e| {
            if let AgentMsg::Established { record } = e {
                Some(record.clone())
            } else {
                None
            }
        })
        .collect();
    assert_eq!(recs.len(), 1, "{evs:?}");
    let rec = &recs[0];
    assert_eq!(
        (rec.key.client, rec.key.cport, rec.key.vip, rec.key.vport),
        (CLIENT, CPORT, VIP, PORT)
    );
    assert_eq!((rec.client_isn, rec.router_isn), (CISN, risn));
    assert_eq!(
        rec.replicas
            .iter()
            .map(|x| (x.addr, x.isn))
            .collect::<Vec<_>>(),
        vec![(replica(1), isns[0]), (replica(2), isns[1])]
    );
    assert!(rec.ts_base.is_some(), "timestamps were agreed");
    // More traffic does not announce it again.
    client_data(&mut r, t(3), b"x");
    drain(&mut r);
    for i in 1..=2 {
        r.handle_packet(
            t(3),
            ack_from(i, isns[i as usize - 1], SeqNum(CISN).add(2), 500),
        );
    }
    drain(&mut r);
    assert!(!agent_msgs(&mut r)
        .iter()
        .any(|e| matches!(e, AgentMsg::Established { .. })));
    // A client RST removes it: forgotten, with the replicas to tell.
    let rst = Repr::new(CPORT, PORT, SeqNum(CISN).add(2), SeqNum(0), flags::RST, 0);
    r.handle_packet(t(4), seg(CLIENT, VIP, rst, b""));
    drain(&mut r);
    let evs = agent_msgs(&mut r);
    assert!(evs.iter().any(|e| matches!(e, AgentMsg::Forgotten { key, replicas } if key.cport == CPORT && replicas == &vec![replica(1), replica(2)])), "{evs:?}");
}

/// A host lost (agent silent) is taken out of an idle connection at once —
/// no traffic owed, so passive detection would never notice — and marked
/// down; the survivors carry the connection on.
#[test]
fn host_lost_evicts_from_idle_connections() {
    let mut r = router(3);
    let (_risn, isns) = handshake(&mut r, 3);
    while r.poll_event().is_some() {}
    assert_eq!(r.host_lost(t(10), replica(2)), 1);
    let evs: Vec<Event> = std::iter::from_fn(|| r.poll_event()).collect();
    assert!(evs.iter().any(|e| matches!(e, Event::ReplicaDown { replica: a, reason: EvictReason::HostLost, .. } if *a == replica(2))), "{evs:?}");
    assert!(
        evs.iter()
            .any(|e| matches!(e, Event::Evicted { replica: a, .. } if *a == replica(2))),
        "{evs:?}"
    );
    // New data goes to the two survivors only.
    client_data(&mut r, t(11), b"ping");
    let out = drain(&mut r);
    let dsts: Vec<Ipv4Addr> = out
        .iter()
        .filter(|o| o.payload == b"ping")
        .map(|o| o.dst)
        .collect();
    assert_eq!(dsts, vec![replica(1), replica(3)]);
    // Their ACKs alone now acknowledge the client.
    let want = SeqNum(CISN).add(5);
    r.handle_packet(t(12), ack_from(1, isns[0], want, 500));
    r.handle_packet(t(12), ack_from(3, isns[2], want, 500));
    assert!(
        drain(&mut r)
            .iter()
            .any(|o| o.dst == CLIENT && o.r.ack == want),
        "client acknowledged by the survivors"
    );
    // Unknown addresses and a second report change nothing; the last replica is never marked down.
    assert_eq!(r.host_lost(t(13), Ipv4Addr::new(10, 0, 0, 1)), 0);
    assert_eq!(r.host_lost(t(13), replica(2)), 0);
    r.host_lost(t(14), replica(1));
    while r.poll_event().is_some() {}
    r.host_lost(t(15), replica(3));
    assert!(
        !std::iter::from_fn(|| r.poll_event()).any(|e| matches!(e, Event::ReplicaDown { .. })),
        "last replica kept"
    );
}

/// What the router can tell of a failure's detection and of the client's
/// stall: a replica declared down says how long it had been silent on its
/// connections, and the gap in reply bytes the client saw around the
/// eviction goes into `stall_after_eviction` (not for a connection that
/// was idle when it happened).
#[test]
fn a_failover_records_its_detection_delay_and_the_clients_stall() {
    let mut r = router(3);
    let (_risn, isns) = handshake(&mut r, 3);
    let cack = SeqNum(CISN).add(1);
    let data = |i: u8, off: u32, p: &[u8]| {
        let mut a = Repr::new(
            PORT,
            CPORT,
            SeqNum(isns[i as usize - 1]).add(1 + off),
            cack,
            flags::ACK | flags::PSH,
            500,
        );
        a.timestamps = Some((7000, 1001));
        seg(replica(i), CLIENT, a, p)
    };
    for i in 1..=3 {
        r.handle_packet(t(10 + u64::from(i)), data(i, 0, b"abc"));
    }
    assert!(drain(&mut r)
        .iter()
        .any(|o| o.dst == CLIENT && o.payload == b"abc"));
    while r.poll_event().is_some() {}
    assert_eq!(r.counters().stall_after_eviction.count(), 0);
    // Replica 1's host is declared lost at 40 ms: last heard at 11 ms.
    assert_eq!(r.host_lost(t(40), replica(1)), 1);
    let evs = log_events(&mut r);
    assert!(
        evs.iter().any(|e| matches!(e, Event::ReplicaDown { replica: a, silent_ms: Some(29), .. } if *a == replica(1))),
        "{evs:?}"
    );
    let mut pass = ftnet_core::StatusPass::default();
    while !r.status_slice(&mut pass, 64) {}
    let st = r.status_of(pass, t(40));
    assert_eq!(st.services[0].replicas[1].heard_ms_ago, Some(28));
    assert_eq!(st.services[0].replicas[0].bytes_from, 3);
    assert_eq!(st.services[0].client_bytes_out, 3);
    // The next reply bytes reach the client at 300 ms: a 289 ms gap since
    // the last before the eviction (replica 1's copy, at 11 ms; bucket
    // ≤ 512 ms).
    r.handle_packet(t(300), data(2, 3, b"def"));
    r.handle_packet(t(301), data(3, 3, b"def"));
    assert!(drain(&mut r)
        .iter()
        .any(|o| o.dst == CLIENT && o.payload == b"def"));
    let h = &r.counters().stall_after_eviction;
    assert_eq!(h.count(), 1, "{h:?}");
    assert_eq!(h.counts[9], 1, "{h:?}");
    assert_eq!(h.sum_us, 289_000);
    assert_eq!(r.status().services[0].client_bytes_out, 6);
    // An eviction on a connection that was idle for seconds opens no stall.
    run_to(&mut r, t(5_000));
    assert_eq!(r.host_lost(t(5_000), replica(2)), 1);
    r.handle_packet(t(5_100), data(3, 6, b"ghi"));
    assert!(drain(&mut r)
        .iter()
        .any(|o| o.dst == CLIENT && o.payload == b"ghi"));
    assert_eq!(
        r.counters().stall_after_eviction.count(),
        1,
        "idle: no stall"
    );
}

/// The replicas a client SYN is sent to.
fn syn_targets(r: &mut Router, now: Instant, cport: u16) -> Vec<Ipv4Addr> {
    let syn = Repr::new(cport, PORT, SeqNum(CISN), SeqNum(0), flags::SYN, 64240);
    r.handle_packet(now, seg(CLIENT, VIP, syn, b""));
    drain(r)
        .iter()
        .filter(|o| o.r.flags & flags::SYN != 0)
        .map(|o| o.dst)
        .collect()
}

/// A replica that left the group stays out when its agent registers again
/// (a cut link that comes back brings back a server that missed every write
/// while cut): only an operator brings it back.
#[test]
fn a_lost_host_stays_out_when_its_agent_registers_again() {
    let mut r = router(3);
    assert_eq!(r.host_lost(t(1), replica(2)), 1);
    let msgs = agent_msgs(&mut r);
    assert!(
        msgs.iter().any(|e| matches!(e, AgentMsg::OutOfService { down } if down.len() == 1 && down[0].replica == replica(2))),
        "the agents are told who is out: {msgs:?}"
    );
    while r.poll_event().is_some() {}
    assert_eq!(r.agent_registered(replica(2)), vec!["t".to_string()]);
    assert!(r.poll_event().is_none(), "no ReplicaUp");
    assert!(!r.status().services[0].replicas[1].alive);
    assert_eq!(
        syn_targets(&mut r, t(2), 40001),
        vec![replica(1), replica(3)]
    );
    // The operator's action brings it back (and tells the agents).
    assert_eq!(
        r.enable_replica(replica(2), Some("other")),
        Vec::<String>::new()
    );
    assert_eq!(r.enable_replica(replica(2), None), vec!["t".to_string()]);
    let evs: Vec<Event> = std::iter::from_fn(|| r.poll_event()).collect();
    assert!(
        evs.iter()
            .any(|e| matches!(e, Event::ReplicaUp { replica: a, .. } if *a == replica(2))),
        "{evs:?}"
    );
    let msgs = agent_msgs(&mut r);
    assert!(
        msgs.iter()
            .any(|e| matches!(e, AgentMsg::OutOfService { down } if down.is_empty())),
        "{msgs:?}"
    );
    assert_eq!(
        syn_targets(&mut r, t(3), 40002),
        vec![replica(1), replica(2), replica(3)]
    );
    assert!(
        r.enable_replica(replica(2), None).is_empty(),
        "already in service"
    );
}

/// A router that starts or takes over (with agents) gives new connections
/// only to replicas whose agent registered, and keeps out the replicas the
/// agents report out of service: a replica that left the group under the
/// router before is never readmitted by a restart or a takeover.
#[test]
fn replicas_reported_down_stay_out_after_a_restart() {
    let mut r = router(3);
    r.require_agents();
    assert!(
        syn_targets(&mut r, t(1), 40001).is_empty(),
        "nobody confirmed yet"
    );
    assert_eq!(r.counters().dropped(DropReason::AwaitingAgents), 1);
    assert!(!r.status().services[0].replicas[0].alive);
    assert!(r.status().services[0].replicas[0].awaiting_agent);
    assert!(r.agent_registered(replica(1)).is_empty());
    // r1's agent kept what the router before said: r3 is out.
    let out = [ftnet_core::OutOfService {
        vip: VIP,
        port: PORT,
        replica: replica(3),
    }];
    assert_eq!(r.reported_down(t(2), replica(1), &out), 1);
    assert_eq!(r.reported_down(t(2), replica(2), &out), 0, "already out");
    let evs: Vec<Event> = log_events(&mut r);
    assert!(evs.iter().any(|e| matches!(e, Event::ReplicaDown { replica: a, reason: EvictReason::ReportedDown, .. } if *a == replica(3))), "{evs:?}");
    assert!(r.agent_registered(replica(2)).is_empty());
    assert_eq!(r.agent_registered(replica(3)), vec!["t".to_string()]);
    // r1 and r2 serve; a SYN before r2's agent would have gone to r1 only.
    assert_eq!(
        syn_targets(&mut r, t(3), 40002),
        vec![replica(1), replica(2)]
    );
    let st = r.status();
    assert!(st.services[0].replicas[0].alive && st.services[0].replicas[1].alive);
    assert!(!st.services[0].replicas[2].alive && !st.services[0].replicas[2].awaiting_agent);
    // Reports about unknown services or replicas change nothing.
    let junk = [
        ftnet_core::OutOfService {
            vip: Ipv4Addr::new(10, 9, 9, 9),
            port: PORT,
            replica: replica(1),
        },
        ftnet_core::OutOfService {
            vip: VIP,
            port: PORT,
            replica: Ipv4Addr::new(10, 9, 9, 9),
        },
    ];
    assert_eq!(r.reported_down(t(4), replica(2), &junk), 0);
    // Never the last replica in service.
    let all = [1u8, 2].map(|i| ftnet_core::OutOfService {
        vip: VIP,
        port: PORT,
        replica: replica(i),
    });
    assert_eq!(r.reported_down(t(5), replica(2), &all), 2);
    assert_eq!(
        r.status().services[0]
            .replicas
            .iter()
            .filter(|x| x.alive)
            .count(),
        1,
        "the last replica in service stays"
    );
}

/// An agent stopped past the failure-detection time (SIGSTOP, a cut link)
/// missed the announcement that its replica was back in service, and
/// registers again with the list it had before, which says that replica is
/// out. This router brought the replica back itself: the report is older
/// than that verdict and changes nothing (it took a healthy replica out
/// again: e2e flood-control, once). A replica this router never judged is
/// still taken out on an agent's word (the takeover case).
#[test]
fn a_report_older_than_the_routers_own_readmission_changes_nothing() {
    let mut r = router(3);
    r.require_agents();
    for i in 1..=3 {
        assert!(r.agent_registered(replica(i)).is_empty());
    }
    assert_eq!(syn_targets(&mut r, t(1), 40001).len(), 3);
    assert_eq!(r.host_lost(t(2), replica(2)), 1);
    assert!(!r.status().services[0].replicas[1].alive);
    assert_eq!(r.enable_replica(replica(2), None), vec!["t".to_string()]);
    assert!(r.status().services[0].replicas[1].alive);
    let stale = [2u8, 3].map(|i| ftnet_core::OutOfService {
        vip: VIP,
        port: PORT,
        replica: replica(i),
    });
    assert_eq!(r.reported_down(t(3), replica(2), &stale), 1, "r3 only");
    let st = r.status();
    assert!(st.services[0].replicas[1].alive, "r2 stays in service");
    assert!(
        !st.services[0].replicas[2].alive,
        "r3, never judged here, goes"
    );
}

/// A client's SYN at `syn` and both replicas' SYN-ACKs at `answered`
/// (replica ISNs 1,000,000 and 2,000,000): the connection's record is
/// announced and its SYN-ACK waits for it (`record_commit` set). Returns
/// the connection's key.
fn committing(r: &mut Router, syn: Instant, answered: Instant) -> ftnet_core::ConnKey {
    let s = Repr::new(CPORT, PORT, SeqNum(CISN), SeqNum(0), flags::SYN, 64240);
    r.handle_packet(syn, seg(CLIENT, VIP, s, b""));
    drain(r);
    for i in 1..=2u8 {
        let sa = Repr::new(
            PORT,
            CPORT,
            SeqNum(1_000_000 * u32::from(i)),
            SeqNum(CISN).add(1),
            flags::SYN | flags::ACK,
            65160,
        );
        r.handle_packet(answered, seg(replica(i), CLIENT, sa, b""));
    }
    assert!(drain(r).is_empty(), "no SYN-ACK before the record");
    agent_msgs(r)
        .iter()
        .find_map(|e| match e {
            AgentMsg::Established { record } => Some(record.key),
            _ => None,
        })
        .expect("the record is announced")
}

/// How many SYN-ACKs to the client are among `out`.
fn synack(out: &[Out]) -> usize {
    out.iter()
        .filter(|o| o.dst == CLIENT && o.r.flags == flags::SYN | flags::ACK)
        .count()
}

/// A record no agent can store (none of its replicas' agents registered
/// and live): the SYN-ACK goes at once, unconfirmed. Not from a router whose
/// agents all fell silent together (cut off, or another router took its
/// addresses while clients still reach this one by their stale neighbour
/// entries): a client got a SYN-ACK from such a router, its connection
/// known to no router that serves, and timed out 30 s later. It is held
/// until an agent registers again (then the wait's end sends it), and
/// meanwhile the client's repeated SYN may reach the router that serves.
#[test]
fn a_router_cut_off_from_its_agents_holds_a_synack_no_agent_can_store() {
    for cut_off in [false, true] {
        let mut c = config_of(2, false);
        c.timeouts.record_commit = Some(std::time::Duration::from_millis(50));
        let mut r = Router::new(c, [9; 16]);
        r.require_agents();
        for i in 1..=2u8 {
            r.agent_registered(replica(i));
        }
        if cut_off {
            r.agents_all_silent(t(0));
        }
        let key = committing(&mut r, t(1), t(2));
        // The control plane has no live agent to send the record to.
        r.record_unstored(t(2), key);
        if !cut_off {
            assert_eq!(synack(&drain(&mut r)), 1, "nobody to wait for: at once");
            assert_eq!(r.counters().synacks_uncommitted, 1);
            continue;
        }
        run_to(&mut r, t(500));
        assert_eq!(synack(&drain(&mut r)), 0, "cut off: held");
        r.agent_registered(replica(1));
        run_to(&mut r, t(600));
        assert_eq!(synack(&drain(&mut r)), 1, "an agent is back: it goes");
        assert_eq!(r.counters().synacks_uncommitted, 1);
    }
}

/// A router that did not run for a while (its process stopped) may have
/// been superseded: the agents are likely registered with the router that
/// took over, and a record this one announces now may never be stored. A
/// SYN-ACK whose record no agent stored is held on, not sent when the wait
/// runs out, and while the router is on probation not even once every
/// agent it went to is gone: sent, it gave a client a connection that no
/// router could find (dropped as unknown, the client timed out 30 s
/// later). One agent's confirmation sends it; once probation is over (and
/// a packet showed this router still serves) an orphaned record's SYN-ACK
/// goes unconfirmed, as before.
#[test]
fn a_paused_router_holds_a_synack_no_agent_confirmed() {
    for confirmed in [true, false] {
        let mut c = config_of(2, false);
        c.timeouts.record_commit = Some(std::time::Duration::from_millis(50));
        let mut r = Router::new(c, [9; 16]);
        let key = committing(&mut r, t(0), t(1));
        // The router stops for 2 s: its commit timer (due at 51 ms) runs
        // late, on probation.
        r.handle_timeout(t(2000));
        let ev = log_events(&mut r);
        assert!(
            ev.iter().any(|e| matches!(
                e,
                Event::RouterPaused {
                    probation: true,
                    ..
                }
            )),
            "{ev:?}"
        );
        run_to(&mut r, t(3000));
        assert_eq!(synack(&drain(&mut r)), 0, "held while on probation");
        // Every agent it went to is gone (they went to the router that
        // took over), none stored it: still held, the router in doubt.
        r.record_unstored(t(2500), key);
        run_to(&mut r, t(3000));
        assert_eq!(synack(&drain(&mut r)), 0, "orphaned, on probation: held");
        if confirmed {
            // One agent (registered again) stored it.
            r.record_heard(t(3000), key);
            assert_eq!(synack(&drain(&mut r)), 1, "an agent has it: it goes");
            assert_eq!(r.counters().synacks_uncommitted, 1);
        } else {
            // Probation over (its time, and the client's repeated SYN shows
            // this router still serves): the orphaned record's SYN-ACK goes.
            run_to(&mut r, t(4001));
            assert_eq!(synack(&drain(&mut r)), 0);
            let again = Repr::new(CPORT, PORT, SeqNum(CISN), SeqNum(0), flags::SYN, 64240);
            r.handle_packet(t(4002), seg(CLIENT, VIP, again, b""));
            run_to(&mut r, t(4200));
            assert_eq!(
                synack(&drain(&mut r)),
                1,
                "sent unconfirmed after probation"
            );
            assert_eq!(r.counters().synacks_uncommitted, 1);
        }
    }
}

/// Output commit (`record_commit`): once every replica answered, the
/// connection's record is announced and the SYN-ACK waits until the control
/// plane says the agents stored it — or until the wait runs out. A client
/// SYN repeated meanwhile gets nothing (its SYN-ACK follows the record).
#[test]
fn synack_waits_for_the_record_to_be_stored() {
    let mut c = config_of(2, false);
    c.timeouts.record_commit = Some(std::time::Duration::from_millis(50));
    let mut r = Router::new(c, [9; 16]);
    // Two connections: the first is confirmed, the second never is.
    for (cport, at) in [(CPORT, 0u64), (CPORT + 1, 100)] {
        let syn = Repr::new(cport, PORT, SeqNum(CISN), SeqNum(0), flags::SYN, 64240);
        r.handle_packet(t(at), seg(CLIENT, VIP, syn, b""));
        assert_eq!(drain(&mut r).len(), 2, "SYN to both replicas");
        for i in 1..=2u8 {
            let sa = Repr::new(
                PORT,
                cport,
                SeqNum(1_000_000 * i as u32),
                SeqNum(CISN).add(1),
                flags::SYN | flags::ACK,
                65160,
            );
            r.handle_packet(t(at + 1), seg(replica(i), CLIENT, sa, b""));
        }
        assert!(
            drain(&mut r).is_empty(),
            "no SYN-ACK before the record is stored"
        );
        let evs = agent_msgs(&mut r);
        let key = evs
            .iter()
            .find_map(|e| match e {
                AgentMsg::Established { record } => Some(record.key),
                _ => None,
            })
            .expect("the record is announced before the SYN-ACK");
        assert_eq!(key.cport, cport);
        // The client repeats its SYN: still held.
        let again = Repr::new(cport, PORT, SeqNum(CISN), SeqNum(0), flags::SYN, 64240);
        r.handle_packet(t(at + 2), seg(CLIENT, VIP, again, b""));
        assert!(
            drain(&mut r).is_empty(),
            "a repeated SYN does not release it"
        );
        if cport == CPORT {
            r.record_stored(t(at + 3), key);
            let out = drain(&mut r);
            assert_eq!(out.len(), 1, "the SYN-ACK follows the record");
            assert_eq!(
                (out[0].dst, out[0].r.flags),
                (CLIENT, flags::SYN | flags::ACK)
            );
            r.record_stored(t(at + 4), key);
            assert!(
                drain(&mut r).is_empty(),
                "a second confirmation sends nothing"
            );
            assert_eq!(r.counters().synacks_committed, 1);
        } else {
            r.handle_timeout(t(at + 40));
            assert!(drain(&mut r).is_empty(), "before the wait runs out");
            let due = r.poll_timeout().expect("a timer for the wait");
            assert!(due <= t(at + 51), "{due:?}");
            r.handle_timeout(t(at + 51));
            assert!(
                drain(&mut r).is_empty(),
                "the wait ran out, but no agent has the record and they may only be slow: held"
            );
            // Every agent it went to is gone, none stored it: it goes.
            r.record_unstored(t(at + 60), key);
            let out = drain(&mut r);
            assert_eq!(out.len(), 1, "no agent left to wait for: SYN-ACK sent");
            assert_eq!(r.counters().synacks_uncommitted, 1);
            // The commit waits in the histogram: 2 ms (confirmed), 59 ms
            // (sent unconfirmed).
            let h = &r.counters().commit_wait;
            assert_eq!(h.count(), 2);
            assert_eq!((h.counts[1], h.counts[6]), (1, 1), "{h:?}");
            assert_eq!(h.sum_us, 61_000);
        }
        // The handshake completes as usual.
        assert!(
            !agent_msgs(&mut r)
                .iter()
                .any(|e| matches!(e, AgentMsg::Established { .. })),
            "announced once"
        );
    }
}

/// A replica's zero-window probe or keep-alive (Linux: a pure segment at
/// SND.UNA − 1) is passed on to the client, at most one per 50 ms, so that
/// the client answers with its window: a window update the client sent and
/// the network (or a router that died) lost would otherwise stop the
/// connection for good. An ordinary pure ACK is still absorbed.
#[test]
fn replica_probes_reach_the_client() {
    let mut r = router(2);
    let (risn, isns) = handshake(&mut r, 2);
    drain(&mut r);
    let probe = |i: u8, isn: u32| {
        let mut a = Repr::new(PORT, CPORT, SeqNum(isn), SeqNum(CISN).add(1), flags::ACK, 0);
        a.timestamps = Some((6000, 1001));
        seg(replica(i), CLIENT, a, b"")
    };
    // An ordinary pure ACK (at SND.NXT) changes nothing: absorbed.
    r.handle_packet(t(10), ack_from(1, isns[0], SeqNum(CISN).add(1), 65160));
    assert!(drain(&mut r).is_empty(), "nothing new: absorbed");
    r.handle_packet(t(11), probe(1, isns[0]));
    let out = drain(&mut r);
    assert_eq!(out.len(), 1, "the probe goes on");
    assert_eq!(out[0].dst, CLIENT);
    assert_eq!(
        out[0].r.seq,
        SeqNum(risn),
        "one below what the client has: it must answer"
    );
    assert_eq!(out[0].r.ack, SeqNum(CISN).add(1));
    // The other replica's probe of the same round: the client's answer serves both.
    r.handle_packet(t(12), probe(2, isns[1]));
    assert!(drain(&mut r).is_empty(), "one per 50 ms");
    r.handle_packet(t(70), probe(2, isns[1]));
    assert_eq!(drain(&mut r).len(), 1, "the next round goes on");
    assert_eq!(r.counters().probes_passed, 2);
    // The client's answer (its window open again) reaches every replica.
    let mut a = Repr::new(
        CPORT,
        PORT,
        SeqNum(CISN).add(1),
        SeqNum(risn).add(1),
        flags::ACK,
        900,
    );
    a.timestamps = Some((1010, 0));
    r.handle_packet(t(71), seg(CLIENT, VIP, a, b""));
    let out = drain(&mut r);
    assert_eq!(out.len(), 2, "to both replicas");
    for o in &out {
        assert_eq!(o.r.window, 900);
    }
}

/// Marking a replica down (here: its host lost) never takes a
/// connection's last replica: a router cut off from every replica host sees
/// them "lost" one after the other, and resetting the client would help
/// nobody. The connection keeps it and its own failure detection judges.
#[test]
fn a_lost_host_never_takes_a_connections_last_replica() {
    let mut r = router(2);
    let (risn, isns) = handshake(&mut r, 2);
    drain(&mut r);
    // r1 resets this connection alone (its own verdict: out of this
    // connection only, still up for the service).
    let rst = Repr::new(
        PORT,
        CPORT,
        SeqNum(isns[0]).add(1),
        SeqNum(0),
        flags::RST,
        0,
    );
    r.handle_packet(t(5), seg(replica(1), CLIENT, rst, b""));
    r.handle_timeout(t(200));
    drain(&mut r);
    while r.poll_event().is_some() {}
    assert!(
        r.status().services[0].replicas[0].alive,
        "r1 is still up for the service"
    );
    // r2's host is lost: marked down for the service (r1 is left for new
    // connections), but this connection keeps it.
    assert_eq!(r.host_lost(t(210), replica(2)), 1);
    let out = drain(&mut r);
    assert!(
        !out.iter()
            .any(|o| o.dst == CLIENT && o.r.flags & flags::RST != 0),
        "no client reset"
    );
    assert_eq!(r.connections(), 1);
    // It still carries the client's bytes.
    let mut d = Repr::new(
        CPORT,
        PORT,
        SeqNum(CISN).add(1),
        SeqNum(risn).add(1),
        flags::ACK | flags::PSH,
        502,
    );
    d.timestamps = Some((1005, 0));
    r.handle_packet(t(220), seg(CLIENT, VIP, d, b"hi"));
    let out = drain(&mut r);
    assert!(
        out.iter()
            .any(|o| o.dst == replica(2) && o.payload == b"hi"),
        "r2 still gets the client's bytes"
    );
}

/// A takeover: the router adopts a connection of replicas 1 and 2 (router
/// ISN `risn`, replica ISNs `isns`, the client's 86 bytes taken by both)
/// from their agents' records, and each answers the position probe: it
/// sent `sent[i]` bytes. The connection is rebuilt; the client has not
/// spoken yet.
fn rebuild_two(r: &mut Router, risn: u32, isns: [u32; 2], sent: [u32; 2]) {
    adopt_two(r, risn, isns, 0);
    // Each replica answers with its position: SND.NXT, RCV.NXT.
    for i in 0..2usize {
        let a = Repr::new(
            PORT,
            CPORT,
            SeqNum(isns[i]).add(1 + sent[i]),
            SeqNum(CISN).add(1 + 86),
            flags::ACK,
            64,
        );
        r.handle_packet(t(1), seg(replica(i as u8 + 1), CLIENT, a, b""));
    }
    drain(r);
    assert_eq!(r.status().rebuilding, 0, "rebuilt");
}

/// After a takeover a download can sit in zero-window persist: the
/// client's window update went to the router that died, so the client has
/// nothing more to say. The replicas' persist probes must reach it even
/// though the new router has not heard from it yet, or the transfer stops
/// until the server times out.
#[test]
fn a_rebuilt_connection_passes_probes_to_a_silent_client() {
    let mut r = router(2);
    let (risn, isns) = (7_000_000u32, [1_000_000u32, 2_000_000]);
    let sent = 50_000u32; // server bytes every replica sent (and the client acknowledged)
    rebuild_two(&mut r, risn, isns, [sent, sent]);
    // A persist probe from r1 at SND.UNA − 1: it reaches the client.
    let probe = Repr::new(
        PORT,
        CPORT,
        SeqNum(isns[0]).add(sent),
        SeqNum(CISN).add(1 + 86),
        flags::ACK,
        64,
    );
    r.handle_packet(t(300), seg(replica(1), CLIENT, probe, b""));
    let out = drain(&mut r);
    assert!(
        out.iter()
            .any(|o| o.dst == CLIENT && o.r.seq == SeqNum(risn).add(sent)),
        "the probe goes to the client, one below what it has"
    );
}

/// After a takeover, before the client spoke, the new router cannot know
/// what the client holds: segments of the replica ahead may have died in
/// the router before, so the client may lack bytes below even the slowest
/// replica's position. An ACK the router makes in the client's name then
/// (a keep-alive to a replica that is behind) must be one no replica takes:
/// taken, it acknowledges bytes the client lacks, every replica drops
/// them, and the connection hangs with a hole nobody fills (the e2e
/// takeover-get hang). And the probe of the replica ahead, above the
/// slowest position, reaches the client, which answers and so tells.
#[test]
fn before_the_client_speaks_no_replica_takes_an_ack_in_its_name() {
    let mut r = router(2);
    let (risn, isns) = (7_000_000u32, [1_000_000u32, 2_000_000]);
    // r1 sent 50 000 bytes, r2 40 000; the client holds 30 000 (what the
    // router that died still carried of r1's never reached it).
    rebuild_two(&mut r, risn, isns, [50_000, 40_000]);
    // Both stand still (r2 is behind: it owes output and is probed).
    let rcv_nxt = SeqNum(CISN).add(1 + 86);
    let mut probed = 0;
    for ms in (50..6_000).step_by(50) {
        r.handle_timeout(t(ms));
        for o in drain(&mut r) {
            let Some(i) = (1..=2u8).position(|k| o.dst == replica(k)) else {
                continue;
            };
            if o.r.flags & flags::ACK == 0 || o.r.flags & flags::RST != 0 {
                continue;
            }
            probed += 1;
            // Linux takes the ACK of a segment that ends at or after
            // RCV.WUP (at most a window below RCV.NXT).
            let end = o.r.seq.add(o.payload.len() as u32);
            let taken = !end.is_before(rcv_nxt.sub(1 << 20));
            let client_holds = SeqNum(isns[i]).add(1 + 30_000);
            assert!(
                !taken || !o.r.ack.is_after(client_holds),
                "at {ms} ms: a segment to r{} that it takes acknowledges {} byte(s), the client holds 30000",
                i + 1,
                o.r.ack.diff(SeqNum(isns[i]).add(1))
            );
        }
    }
    assert!(probed > 0, "r2, behind, is probed");
    // r1's persist probe at its SND.UNA − 1, above r2's position: the
    // client gets it.
    let probe = Repr::new(
        PORT,
        CPORT,
        SeqNum(isns[0]).add(45_000),
        SeqNum(CISN).add(1 + 86),
        flags::ACK,
        64,
    );
    r.handle_packet(t(6_100), seg(replica(1), CLIENT, probe, b""));
    assert!(
        drain(&mut r)
            .iter()
            .any(|o| o.dst == CLIENT && o.r.seq == SeqNum(risn).add(45_000)),
        "r1's probe reaches the client"
    );
}

// ----------------------------------------------------------------------
// A hostile client (issue 13, item 3): nothing a client sends may evict a
// healthy replica service-wide, kill a live connection blindly, or stall
// the sequencer.
// ----------------------------------------------------------------------

/// Drops counted under `name` (0 if the router does not know the name).
fn dropped(r: &Router, name: &str) -> u64 {
    r.status()
        .drops
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(0, |(_, c)| *c)
}

/// An ICMP destination unreachable (code 1, host) from `src` to `dst`
/// quoting a segment `inner_src:iport → inner_dst:PORT` with sequence
/// number `seq`.
fn icmp_unreachable(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    inner_src: Ipv4Addr,
    iport: u16,
    inner_dst: Ipv4Addr,
    seq: SeqNum,
) -> Packet {
    let mut inner =
        Repr::new(iport, PORT, seq, SeqNum(0), flags::ACK, 1).emit_ipv4(inner_src, inner_dst, b"");
    inner.truncate(28);
    let mut icmp = vec![3u8, 1, 0, 0, 0, 0, 0, 0];
    icmp.extend_from_slice(&inner);
    let c = ftnet_wire::checksum::complete(&icmp, 0);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    let mut pkt = vec![0u8; 20];
    ipv4::emit_header(
        &mut pkt,
        src,
        dst,
        ipv4::PROTO_ICMP,
        (20 + icmp.len()) as u16,
        64,
    );
    pkt.extend_from_slice(&icmp);
    Packet::plain(pkt)
}

/// Client data at stream offset `off` (bytes after the SYN), acknowledging
/// the router's SYN-ACK.
fn client_bytes(r: &mut Router, now: Instant, risn: u32, off: u32, payload: &[u8]) -> Vec<Out> {
    let d = Repr::new(
        CPORT,
        PORT,
        SeqNum(CISN).add(1 + off),
        SeqNum(risn).add(1),
        flags::ACK | flags::PSH,
        502,
    );
    r.handle_packet(now, seg(CLIENT, VIP, d, payload));
    drain(r)
}

fn all_alive(r: &Router) -> bool {
    r.status().services[0].replicas.iter().all(|x| x.alive)
}

/// RFC 5927 §4.1: ICMP about a TCP connection is checked against the
/// connection. The client itself (its own address, to the VIP) quoting
/// its own connection with a replica as inner destination is no evidence
/// of anything: before, one such packet marked the replica down for the
/// whole service.
#[test]
fn icmp_from_the_client_quoting_its_own_connection_demotes_nobody() {
    let mut r = router(3);
    let (risn, _) = handshake(&mut r, 3);
    let quote = SeqNum(CISN).add(1);
    r.handle_packet(
        t(5),
        icmp_unreachable(CLIENT, VIP, CLIENT, CPORT, replica(2), quote),
    );
    // Addressed to the client, but sent by it (a spoofed gateway would
    // not be the client's own address either way).
    r.handle_packet(
        t(5),
        icmp_unreachable(CLIENT, CLIENT, CLIENT, CPORT, replica(2), quote),
    );
    assert!(all_alive(&r), "no replica marked down");
    assert_eq!(dropped(&r, "icmp_unverified"), 2);
    let out = client_bytes(&mut r, t(6), risn, 0, b"hi");
    assert_eq!(out.len(), 3, "every replica still gets the client's bytes");
}

/// Two packets from one client took 2 of 3 replicas out of the service.
#[test]
fn two_client_icmps_cannot_take_two_of_three_replicas_out() {
    let mut r = router(3);
    let (risn, _) = handshake(&mut r, 3);
    for i in [2u8, 3] {
        r.handle_packet(
            t(5),
            icmp_unreachable(CLIENT, VIP, CLIENT, CPORT, replica(i), SeqNum(CISN).add(1)),
        );
    }
    assert!(all_alive(&r));
    let out = client_bytes(&mut r, t(6), risn, 0, b"hi");
    assert_eq!(out.len(), 3);
    assert!(log_events(&mut r)
        .iter()
        .all(|e| !matches!(e, Event::ReplicaDown { .. } | Event::Evicted { .. })));
}

/// Fully off-path: a spoofed SYN from an address the attacker does not
/// own, then an ICMP (from yet another address) quoting exactly that SYN.
/// The quote checks out, so the replica may leave that one (spoofed)
/// connection; it must stay up for the service.
#[test]
fn off_path_spoofed_syn_then_icmp_demotes_nobody() {
    let mut r = router(3);
    let victim = Ipv4Addr::new(203, 0, 113, 5);
    let isn = SeqNum(0x1234_5678);
    let syn = Repr::new(4444, PORT, isn, SeqNum(0), flags::SYN, 64240);
    r.handle_packet(t(0), seg(victim, VIP, syn, b""));
    assert_eq!(drain(&mut r).len(), 3);
    r.handle_packet(
        t(1),
        icmp_unreachable(
            Ipv4Addr::new(203, 0, 113, 9),
            victim,
            victim,
            4444,
            replica(1),
            isn,
        ),
    );
    assert!(
        all_alive(&r),
        "one ICMP never demotes a replica service-wide"
    );
    let out = drain(&mut r);
    assert!(
        out.iter().all(|o| o.dst == replica(1)),
        "at most that one (spoofed) connection loses the replica"
    );
    // A real client's connection still goes to every replica.
    handshake(&mut r, 3);
}

/// RFC 9293 §3.10.7.3 (SYN-SENT): a RST is acceptable only if its ACK
/// acknowledges the SYN. A RST with a replica's source address that does
/// not is not that replica refusing.
#[test]
fn rst_to_the_syn_must_acknowledge_it() {
    let mut r = router(2);
    let syn = Repr::new(CPORT, PORT, SeqNum(CISN), SeqNum(0), flags::SYN, 64240);
    r.handle_packet(t(0), seg(CLIENT, VIP, syn, b""));
    drain(&mut r);
    // No ACK flag, then a wrong ACK number.
    let rst = Repr::new(PORT, CPORT, SeqNum(0), SeqNum(0), flags::RST, 0);
    r.handle_packet(t(1), seg(replica(1), CLIENT, rst, b""));
    let rst = Repr::new(
        PORT,
        CPORT,
        SeqNum(0),
        SeqNum(CISN).add(2),
        flags::RST | flags::ACK,
        0,
    );
    r.handle_packet(t(1), seg(replica(1), CLIENT, rst, b""));
    let sa = Repr::new(
        PORT,
        CPORT,
        SeqNum(77),
        SeqNum(CISN).add(1),
        flags::SYN | flags::ACK,
        65160,
    );
    r.handle_packet(t(1), seg(replica(2), CLIENT, sa, b""));
    assert!(all_alive(&r), "an unacceptable RST refuses nothing");
    assert_eq!(dropped(&r, "rst_bad_ack"), 2);
    assert!(
        drain(&mut r).iter().all(|o| o.dst != CLIENT),
        "the SYN-ACK still waits for replica 1"
    );
}

/// RFC 5961 §3.2 on the replica side: a RST from an open replica counts
/// only at exactly the sequence number the router expects next from it;
/// one in the window but not exact is answered with a challenge ACK and
/// changes nothing.
#[test]
fn replica_rst_in_window_but_not_exact_changes_nothing() {
    let mut r = router(2);
    let (risn, isns) = handshake(&mut r, 2);
    let rst = Repr::new(
        PORT,
        CPORT,
        SeqNum(isns[0]).add(1 + 1000),
        SeqNum(0),
        flags::RST,
        0,
    );
    r.handle_packet(t(5), seg(replica(1), CLIENT, rst, b""));
    let out = drain(&mut r);
    assert_eq!(out.len(), 1, "a challenge ACK to the replica");
    assert_eq!(out[0].dst, replica(1));
    assert_eq!(out[0].r.flags, flags::ACK);
    assert_eq!(out[0].r.ack, SeqNum(isns[0]).add(1));
    run_to(&mut r, t(500));
    assert!(log_events(&mut r).is_empty(), "nobody evicted");
    assert_eq!(dropped(&r, "rst_not_exact"), 1);
    let out = client_bytes(&mut r, t(501), risn, 0, b"hi");
    assert_eq!(out.len(), 2, "both replicas still serve");
}

/// A blind RST from the client side: anywhere in the window but not
/// exactly at the next sequence number it changes nothing (RFC 5961 §3.2)
/// and the client gets a challenge ACK; at exactly that number it aborts
/// the connection at every replica. Before, any RST within ±2^30 made
/// the router forget the connection while the replicas kept it.
#[test]
fn blind_client_rst_in_window_changes_nothing_and_exact_one_aborts() {
    let mut r = router(2);
    let (risn, isns) = handshake(&mut r, 2);
    let rst = |s: SeqNum| {
        seg(
            CLIENT,
            VIP,
            Repr::new(CPORT, PORT, s, SeqNum(0), flags::RST, 0),
            b"",
        )
    };
    r.handle_packet(t(5), rst(SeqNum(CISN).add(1 + 1000)));
    let out = drain(&mut r);
    assert_eq!(out.len(), 1, "one challenge ACK, nothing to the replicas");
    assert_eq!((out[0].src, out[0].dst), (VIP, CLIENT));
    assert_eq!(out[0].r.flags, flags::ACK);
    assert_eq!(out[0].r.ack, SeqNum(CISN).add(1));
    assert_eq!(out[0].r.seq, SeqNum(risn).add(1));
    // A second one within 50 ms: no second challenge ACK (RFC 5961 §7).
    r.handle_packet(t(6), rst(SeqNum(CISN).add(1 + 2000)));
    assert!(drain(&mut r).is_empty());
    // Outside the window: dropped.
    r.handle_packet(t(7), rst(SeqNum(CISN).add(1 + (1 << 29))));
    assert!(drain(&mut r).is_empty());
    assert_eq!(dropped(&r, "rst_not_exact"), 2);
    assert_eq!(dropped(&r, "rst_out_of_window"), 1);
    assert_eq!(r.connections(), 1);
    // The connection keeps working.
    let out = client_bytes(&mut r, t(8), risn, 0, b"hello");
    assert_eq!(out.len(), 2);
    for (j, i) in [1u8, 2].iter().enumerate() {
        r.handle_packet(t(9), ack_from(*i, isns[j], SeqNum(CISN).add(6), 500));
    }
    let out = drain(&mut r);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].r.ack, SeqNum(CISN).add(6));
    // The exact one aborts, at every replica.
    r.handle_packet(t(10), rst(SeqNum(CISN).add(6)));
    let out = drain(&mut r);
    assert_eq!(
        out.iter()
            .filter(|o| o.r.flags & flags::RST != 0 && o.dst != CLIENT)
            .count(),
        2
    );
    assert_eq!(r.connections(), 0);
}

/// RFC 9293 §3.10.7.4 (SYN-RECEIVED) with RFC 5961 §3: a RST to a
/// half-open connection must carry the client's ISN + 1. Before, any RST
/// killed it.
#[test]
fn rst_to_a_half_open_connection_must_carry_the_isn_plus_one() {
    let mut r = router(2);
    let syn = Repr::new(CPORT, PORT, SeqNum(CISN), SeqNum(0), flags::SYN, 64240);
    r.handle_packet(t(0), seg(CLIENT, VIP, syn, b""));
    drain(&mut r);
    let rst = |s: SeqNum| {
        seg(
            CLIENT,
            VIP,
            Repr::new(CPORT, PORT, s, SeqNum(0), flags::RST, 0),
            b"",
        )
    };
    r.handle_packet(t(1), rst(SeqNum(CISN).add(5000)));
    assert!(drain(&mut r).is_empty());
    assert_eq!(
        r.connections(),
        1,
        "a blind RST kills no half-open connection"
    );
    r.handle_packet(t(2), rst(SeqNum(CISN).add(1)));
    assert_eq!(drain(&mut r).len(), 2, "the replicas are reset");
    assert_eq!(r.connections(), 0);
}

fn adopt_two(r: &mut Router, risn: u32, isns: [u32; 2], wscale: u8) {
    adopt_two_with(r, risn, isns, wscale, None);
}

/// `adopt_two`, timestamps on if `ts_base` is given.
fn adopt_two_with(r: &mut Router, risn: u32, isns: [u32; 2], wscale: u8, ts_base: Option<u32>) {
    adopt_two_una(r, risn, isns, wscale, ts_base, [None; 2]);
}

/// `adopt_two_with`, each agent's record carrying its replica's SND.UNA
/// as `unas` says.
fn adopt_two_una(
    r: &mut Router,
    risn: u32,
    isns: [u32; 2],
    wscale: u8,
    ts_base: Option<u32>,
    unas: [Option<u32>; 2],
) {
    adopt_two_as(r, t(0), risn, isns, wscale, ts_base, |i, rec| {
        rec.snd_una = unas[usize::from(i)];
    });
}

/// `adopt_two_with` at `at`, each agent's record (replica `i`, 0 or 1)
/// changed by `f` as it hands it over.
fn adopt_two_as(
    r: &mut Router,
    at: Instant,
    risn: u32,
    isns: [u32; 2],
    wscale: u8,
    ts_base: Option<u32>,
    f: impl Fn(u8, &mut ftnet_core::ConnRecord),
) {
    use ftnet_core::{ConnKey, ConnRecord, ReplicaSetup};
    let key = ConnKey {
        client: CLIENT,
        cport: CPORT,
        vip: VIP,
        vport: PORT,
    };
    let rec = ConnRecord {
        key,
        client_isn: CISN,
        router_isn: risn,
        wscale_out: wscale,
        ts_base,
        client_mss: 1460,
        mss_out: 1460,
        replicas: (0..2u8)
            .map(|i| ReplicaSetup {
                addr: replica(i + 1),
                isn: isns[usize::from(i)],
                wscale,
            })
            .collect(),
        client_wscale: Some(7),
        accepted: true,
        input_end: Some(86),
        snd_una: None,
        fin_received: false,
    };
    for i in 0..2u8 {
        let mut rec = rec.clone();
        f(i, &mut rec);
        r.adopt(at, replica(i + 1), &rec);
    }
    drain(r); // the position probes
}

/// After a takeover the client waits until every live replica told its
/// position, and a replica may answer the position probe once a second
/// (smoltcp, the BSDs), its allowance perhaps spent on the dead router's
/// last segments: with a detection time of 2.5 s it is asked every 333 ms,
/// not every 625 ms, so that a round falls soon after its limit lifts.
#[test]
fn a_replica_whose_position_a_rebuild_awaits_is_asked_often() {
    let mut c = config_of(2, false);
    c.timeouts.failure_detection = std::time::Duration::from_millis(2500);
    let mut r = Router::new(c, [9; 16]);
    let (risn, isns) = (7_000_000u32, [1_000_000u32, 2_000_000]);
    adopt_two(&mut r, risn, isns, 7);
    // Replica 1 answers at once; replica 2 stays silent.
    let mut a = Repr::new(
        PORT,
        CPORT,
        SeqNum(isns[0]).add(1),
        SeqNum(CISN).add(1 + 86),
        flags::ACK,
        500,
    );
    a.timestamps = None;
    r.handle_packet(t(1), seg(replica(1), CLIENT, a, b""));
    drain(&mut r);
    let mut rounds = Vec::new();
    let mut at = 1;
    while at < 1100 {
        at += 10;
        r.handle_timeout(t(at));
        if drain(&mut r).iter().any(|o| o.dst == replica(2)) {
            rounds.push(at);
        }
    }
    assert!(
        rounds.len() >= 3,
        "probe rounds to the silent replica in 1.1 s: {rounds:?}"
    );
    assert!(all_alive(&r), "{:?}", log_events(&mut r));
}

/// RFC 5961 §4 after a takeover: a SYN with a new ISN on an adopted,
/// rebuilt connection gets a challenge ACK and replaces nothing. A client
/// whose old connection had ended answers it with a RST at exactly the
/// ACK's number, which frees the four-tuple; its next SYN opens a fresh
/// connection. Before, the SYN alone replaced the live connection.
#[test]
fn a_syn_with_a_new_isn_on_an_adopted_connection_is_challenged() {
    let mut r = router(2);
    let (risn, isns) = (7_000_000u32, [1_000_000u32, 2_000_000]);
    adopt_two(&mut r, risn, isns, 0);
    let sent = 500u32;
    for i in 0..2u8 {
        let a = Repr::new(
            PORT,
            CPORT,
            SeqNum(isns[i as usize]).add(1 + sent),
            SeqNum(CISN).add(1 + 86),
            flags::ACK,
            64,
        );
        r.handle_packet(t(1), seg(replica(i + 1), CLIENT, a, b""));
    }
    drain(&mut r);
    assert_eq!(r.status().rebuilding, 0, "rebuilt");
    let new_isn = SeqNum(0x5555_0000);
    let syn = Repr::new(CPORT, PORT, new_isn, SeqNum(0), flags::SYN, 64240);
    r.handle_packet(t(10), seg(CLIENT, VIP, syn.clone(), b""));
    let out = drain(&mut r);
    assert_eq!(
        out.len(),
        1,
        "a challenge ACK only: {:?}",
        out.iter().map(|o| o.dst).collect::<Vec<_>>()
    );
    assert_eq!((out[0].dst, out[0].r.flags), (CLIENT, flags::ACK));
    assert_eq!(out[0].r.seq, SeqNum(risn).add(1 + sent));
    let challenge_ack = out[0].r.ack;
    assert_eq!(challenge_ack, SeqNum(CISN).add(1 + 86));
    assert!(r.status().sample[0].adopted, "the adopted connection stays");
    // The client's connection had ended: its SYN-SENT answers the
    // unacceptable ACK with <SEQ=SEG.ACK><CTL=RST> (RFC 9293 §3.10.7.3).
    let rst = Repr::new(CPORT, PORT, challenge_ack, SeqNum(0), flags::RST, 0);
    r.handle_packet(t(11), seg(CLIENT, VIP, rst, b""));
    let out = drain(&mut r);
    assert_eq!(
        out.iter().filter(|o| o.r.flags & flags::RST != 0).count(),
        2,
        "both replicas reset"
    );
    assert_eq!(r.connections(), 0);
    // Its retransmitted SYN opens a fresh connection.
    r.handle_packet(t(1010), seg(CLIENT, VIP, syn, b""));
    let out = drain(&mut r);
    assert_eq!(out.len(), 2);
    assert!(out
        .iter()
        .all(|o| o.r.flags == flags::SYN && o.r.seq == new_isn));
}

/// While an adopted connection is still rebuilding its positions are not
/// known, so no challenge ACK can be built: a SYN with a new ISN is only
/// dropped (counted), and the connection stays.
#[test]
fn a_syn_on_an_adopted_connection_still_rebuilding_is_dropped() {
    let mut r = router(2);
    adopt_two(&mut r, 7_000_000, [1_000_000, 2_000_000], 0);
    let syn = Repr::new(
        CPORT,
        PORT,
        SeqNum(0x5555_0000),
        SeqNum(0),
        flags::SYN,
        64240,
    );
    r.handle_packet(t(10), seg(CLIENT, VIP, syn, b""));
    assert!(drain(&mut r).is_empty());
    assert_eq!(r.status().rebuilding, 1, "still the adopted connection");
    assert_eq!(dropped(&r, "syn_on_live_connection"), 1);
}

fn sequencer_router(n: u8) -> Router {
    sequencer_router_joining(n, false)
}

/// `sequencer_router`, with live joins (`Config::join_live`) or not.
fn sequencer_router_joining(n: u8, join_live: bool) -> Router {
    sequencer_router_with(n, join_live, Default::default())
}

/// A router with the sequencer, live joins or not, and this delivery.
fn sequencer_router_with(n: u8, join_live: bool, delivery: ftnet_core::Delivery) -> Router {
    sequencer_router_of(n, join_live, delivery, false)
}

/// `sequencer_router_with`, the service stateless or not.
fn sequencer_router_of(
    n: u8,
    join_live: bool,
    delivery: ftnet_core::Delivery,
    stateless: bool,
) -> Router {
    let mut c = Config {
        sequencer: true,
        join_live,
        ..Default::default()
    };
    c.services.push(Service {
        name: "t".into(),
        vip: VIP,
        ports: vec![PORT],
        replicas: (1..=n).map(replica).collect(),
        voting: Default::default(),
        stateless,
        ack: ftnet_core::Ack::All,
        delivery,
    });
    Router::new(c, [9; 16])
}

/// The chunk ends the sequencer numbered, in order.
fn input_ends(r: &mut Router) -> Vec<u32> {
    std::iter::from_fn(|| r.poll_agent_msg())
        .filter_map(|e| match e {
            AgentMsg::Input {
                kind: ftnet_core::InputKind::Data { end },
                ..
            } => Some(end),
            _ => None,
        })
        .collect()
}

/// The sequencer stall: a client segment 256 MiB ahead of its stream
/// (inside ±2^30, outside every replica's window) got an input number for
/// a chunk that could never complete, and every shim waited for it. Only
/// bytes inside every live replica's window, contiguous from the in-order
/// point, may be numbered.
#[test]
fn a_segment_far_ahead_gets_no_input_number() {
    let mut r = sequencer_router(2);
    let (risn, _) = handshake(&mut r, 2);
    client_bytes(&mut r, t(3), risn, 0, b"a");
    assert_eq!(input_ends(&mut r), vec![1]);
    let out = client_bytes(&mut r, t(4), risn, 256 << 20, b"far");
    assert_eq!(input_ends(&mut r), Vec::<u32>::new(), "no number for it");
    assert!(out.is_empty(), "no replica would take it: not forwarded");
    client_bytes(&mut r, t(5), risn, 1, b"bc");
    assert_eq!(input_ends(&mut r), vec![3], "the next bytes are numbered");
}

/// A segment beyond a hole does not move the numbered end past the hole;
/// the bytes are numbered once the hole is filled and a replica
/// acknowledged them (they are then contiguous).
#[test]
fn a_segment_beyond_a_hole_is_numbered_once_the_hole_is_filled() {
    let mut r = sequencer_router(2);
    let (risn, isns) = handshake(&mut r, 2);
    let out = client_bytes(&mut r, t(3), risn, 10, b"after");
    assert_eq!(out.len(), 2, "forwarded: inside the window");
    assert_eq!(input_ends(&mut r), Vec::<u32>::new(), "beyond a hole");
    client_bytes(&mut r, t(4), risn, 0, b"0123456789");
    assert_eq!(input_ends(&mut r), vec![10], "up to the hole's end");
    r.handle_packet(t(5), ack_from(1, isns[0], SeqNum(CISN).add(16), 500));
    assert_eq!(input_ends(&mut r), vec![15], "a replica has it all");
}

/// `order_report` with a hostile `last_seq` of u64::MAX: numbering on from
/// it overflowed (a panic in a debug build).
#[test]
fn an_order_report_at_the_largest_number_does_not_overflow() {
    let mut r = sequencer_router(1);
    r.await_order();
    r.order_report(
        t(0),
        replica(1),
        &[ftnet_core::OrderReport {
            vip: VIP,
            vport: PORT,
            last_seq: u64::MAX,
            tail: Vec::new(),
        }],
    );
    let (risn, _) = handshake(&mut r, 1);
    client_bytes(&mut r, t(3), risn, 0, b"a");
    // A late report at the largest number too.
    r.order_report(
        t(4),
        replica(1),
        &[ftnet_core::OrderReport {
            vip: VIP,
            vport: PORT,
            last_seq: u64::MAX,
            tail: Vec::new(),
        }],
    );
    let n = std::iter::from_fn(|| r.poll_event()).count();
    assert!(n > 0);
}

/// RFC 7323 §2.3: a shift count above 14 is used as 14. An adopted
/// record with a larger one made the router shift a window by 40 bits
/// (a panic in a debug build, garbage in release).
#[test]
fn an_adopted_window_scale_above_14_is_clamped() {
    let mut r = router(2);
    let (risn, isns) = (7_000_000u32, [1_000_000u32, 2_000_000]);
    adopt_two(&mut r, risn, isns, 40);
    for i in 0..2u8 {
        let a = Repr::new(
            PORT,
            CPORT,
            SeqNum(isns[i as usize]).add(1),
            SeqNum(CISN).add(1 + 86),
            flags::ACK,
            64,
        );
        r.handle_packet(t(1), seg(replica(i + 1), CLIENT, a, b""));
    }
    let out = drain(&mut r);
    assert_eq!(r.status().rebuilding, 0, "rebuilt");
    let ack = out
        .iter()
        .find(|o| o.dst == CLIENT)
        .expect("one ACK to the client");
    // 64 << 14 bytes, told with scale 14.
    assert_eq!(ack.r.window, 64);
}

/// A router that stalled lost its address to the standby for a while; the
/// standby served, numbered the order on, and died; this router got the
/// address back. The first agent that registers reports an input event
/// this router never numbered (or another event under a number it used):
/// everything it knows is stale, and acting on it ended healthy replicas'
/// servers and numbered over the other's order (the fault campaign's Redis
/// lab never recovered). It is found superseded and starts over as a router
/// that just started.
#[test]
fn a_router_an_agent_finds_superseded_starts_over() {
    let mut r = sequencer_router(2);
    r.require_agents();
    r.agent_registered(replica(1));
    r.agent_registered(replica(2));
    let (risn, _) = handshake(&mut r, 2);
    client_bytes(&mut r, t(3), risn, 0, b"abc");
    let numbered: Vec<ftnet_core::NumberedInput> = std::iter::from_fn(|| r.poll_agent_msg())
        .filter_map(|m| match m {
            AgentMsg::Input { seq, key, kind, .. } => {
                Some(ftnet_core::NumberedInput { seq, key, kind })
            }
            _ => None,
        })
        .collect();
    let top = numbered.last().expect("numbered input").seq;
    let report = |last: u64, tail: Vec<ftnet_core::NumberedInput>| {
        vec![ftnet_core::OrderReport {
            vip: VIP,
            vport: PORT,
            last_seq: last,
            tail,
        }]
    };
    // What this router numbered, as its agents saw it: not superseded.
    assert_eq!(
        r.superseded(replica(1), &report(top, numbered.clone())),
        None
    );
    assert_eq!(r.superseded(replica(1), &report(0, Vec::new())), None);
    // A number it never handed out.
    let why = r
        .superseded(replica(2), &report(top + 5, Vec::new()))
        .expect("an event it never numbered");
    assert!(why.contains(&format!("up to {top}")), "{why}");
    // Another event under a number it used (a clock tick instead).
    let mut other = numbered.clone();
    let last = other.last_mut().unwrap();
    last.kind = ftnet_core::InputKind::Tick { at_us: 12345 };
    assert!(r.superseded(replica(1), &report(top, other)).is_some());
    // Starting over: no connection, the order waits for the agents' reports.
    assert_eq!(r.status().connections, 1);
    r.start_over();
    assert_eq!(r.status().connections, 0);
    assert_eq!(r.superseded(replica(2), &report(top + 5, Vec::new())), None);
    r.order_report(t(10), replica(1), &report(top + 5, Vec::new()));
    r.order_report(t(10), replica(2), &report(top + 5, Vec::new()));
    let evs: Vec<Event> = std::iter::from_fn(|| r.poll_event()).collect();
    assert!(
        evs.iter()
            .any(|e| matches!(e, Event::OrderResumed { last, .. } if *last == top + 5)),
        "numbers on after the agents' order: {evs:?}"
    );
    // No replica serves before its own agent registered again.
    let mut syn = Repr::new(CPORT + 1, PORT, SeqNum(CISN), SeqNum(0), flags::SYN, 64240);
    syn.mss = Some(1460);
    r.handle_packet(t(11), seg(CLIENT, VIP, syn, b""));
    let out = drain(&mut r);
    assert!(out.iter().all(|o| o.dst == CLIENT), "{out:?}");
}

/// A replica whose agent missed input events nobody can replay to it (a
/// router that started or took over found it behind the others' tails)
/// cannot keep the order: it leaves the group at once (`OrderLost`) rather
/// than serve on with its shim in the kernel's order. Not in a stateless
/// service, whose servers keep no state the order would keep equal (as a
/// connection's input left out does not take such a replica out, `left_out`):
/// there, two healthy replicas left the group at a router cut that
/// interrupted their agents' streams, and the new router refused their
/// records, so an echo connection only they still served was lost
/// (campaign at `073e6c9`, fault #427: the client's send timed out).
#[test]
fn a_replica_that_missed_unreplayable_input_leaves_the_group() {
    for stateless in [false, true] {
        a_replica_that_missed_unreplayable_input(stateless);
    }
}

fn a_replica_that_missed_unreplayable_input(stateless: bool) {
    let mut r = sequencer_router_of(3, false, Default::default(), stateless);
    r.await_order();
    let report = |last: u64, from: u64| ftnet_core::OrderReport {
        vip: VIP,
        vport: PORT,
        last_seq: last,
        tail: (from..=last)
            .map(|s| ftnet_core::NumberedInput {
                seq: s,
                key: ftnet_core::ConnKey {
                    client: CLIENT,
                    cport: 40000 + s as u16,
                    vip: VIP,
                    vport: PORT,
                },
                kind: ftnet_core::InputKind::Accept,
            })
            .collect(),
    };
    r.order_report(t(0), replica(1), &[report(100, 95)]);
    r.order_report(t(0), replica(3), &[report(100, 95)]);
    // r2 stands at 90: 91..94 are in nobody's tail.
    r.order_report(t(0), replica(2), &[report(90, 80)]);
    let evs: Vec<Event> = std::iter::from_fn(|| r.poll_event()).collect();
    // (Reported lost only where it matters.)
    let lost = if stateless {
        vec![]
    } else {
        vec![(replica(2), 91)]
    };
    assert!(
        evs.iter()
            .any(|e| matches!(e, Event::OrderResumed { lost: l, .. } if *l == lost)),
        "{evs:?}"
    );
    let down = evs.iter().any(|e| matches!(e, Event::ReplicaDown { replica: a, reason: EvictReason::OrderLost, .. } if *a == replica(2)));
    assert_eq!(down, !stateless, "stateless {stateless}: {evs:?}");
    let st = r.status();
    assert_eq!(st.services[0].replicas[1].alive, stateless);
    assert!(st.services[0].replicas[0].alive && st.services[0].replicas[2].alive);
}

/// A standby router (one that has served no connection yet) whose agents
/// left for the router holding the addresses judges nobody: when it takes
/// over and the agents register with it, their replicas serve. (It once
/// marked them down for good, and a takeover lost two of three replicas.)
#[test]
fn a_router_that_served_nothing_marks_no_lost_host_down() {
    let mut r = router(3);
    r.require_agents();
    for i in 1..=3 {
        r.agent_registered(replica(i));
    }
    assert_eq!(r.host_lost(t(1), replica(1)), 0);
    assert!(log_events(&mut r)
        .iter()
        .all(|e| !matches!(e, Event::ReplicaDown { .. })));
    let st = r.status();
    assert!(!st.services[0].replicas[0].alive && st.services[0].replicas[0].awaiting_agent);
    assert_eq!(
        syn_targets(&mut r, t(2), 40001),
        vec![replica(2), replica(3)]
    );
    assert!(
        r.agent_registered(replica(1)).is_empty(),
        "back: nothing to judge"
    );
    assert_eq!(
        syn_targets(&mut r, t(3), 40002),
        vec![replica(1), replica(2), replica(3)]
    );
    // Once it served, a lost host is marked down and stays out.
    assert_eq!(r.host_lost(t(4), replica(2)), 1);
    assert_eq!(r.agent_registered(replica(2)), vec!["t".to_string()]);
}

/// Server bytes from replica `i` at server-stream offset `off` (bytes after
/// the SYN), acknowledging all of the client's (none sent), with its TSval.
fn server_seg(isns: &[u32], i: u8, off: u32, tsval: u32, fl: u8, p: &[u8]) -> Packet {
    let mut a = Repr::new(
        PORT,
        CPORT,
        SeqNum(isns[i as usize - 1]).add(1 + off),
        SeqNum(CISN).add(1),
        flags::ACK | fl,
        500,
    );
    a.timestamps = Some((tsval, 1001));
    seg(replica(i), CLIENT, a, p)
}

fn to_client(out: &[Out]) -> Vec<&Out> {
    out.iter().filter(|o| o.dst == CLIENT).collect()
}

/// RFC 7323 §5.5 (PAWS): the client drops a segment whose TSval is below
/// one it saw. The TSvals it gets are the router's (a per-connection base +
/// its ms clock), whichever replica sent the bytes, so they never decrease:
/// also when the replica whose segments it saw leaves and one whose clock
/// is far behind carries on.
#[test]
fn tsvals_to_the_client_are_the_routers_and_never_decrease() {
    let mut r = router(2);
    let (risn, isns) = handshake(&mut r, 2);
    // Replica 1's clock is far ahead of replica 2's.
    r.handle_packet(t(5), server_seg(&isns, 1, 0, 9_000_000, flags::PSH, b"abc"));
    let out = drain(&mut r);
    let c = to_client(&out);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].payload, b"abc");
    let ts_a = c[0].r.timestamps.expect("timestamps agreed").0;
    assert_ne!(ts_a, 9_000_000, "not the replica's TSval");
    let mut ca = Repr::new(
        CPORT,
        PORT,
        SeqNum(CISN).add(1),
        SeqNum(risn).add(4),
        flags::ACK,
        502,
    );
    ca.timestamps = Some((1003, ts_a));
    r.handle_packet(t(6), seg(CLIENT, VIP, ca, b""));
    drain(&mut r);
    r.handle_packet(t(7), server_seg(&isns, 2, 0, 10, flags::PSH, b"abc"));
    drain(&mut r);
    // Replica 1 resets (exactly at the end of what it sent) and leaves.
    let rst = Repr::new(
        PORT,
        CPORT,
        SeqNum(isns[0]).add(4),
        SeqNum(0),
        flags::RST,
        0,
    );
    r.handle_packet(t(10), seg(replica(1), CLIENT, rst, b""));
    r.handle_timeout(t(150));
    drain(&mut r);
    assert!(
        log_events(&mut r).iter().any(|e| matches!(
            e,
            Event::Evicted {
                reason: EvictReason::Reset,
                ..
            }
        )),
        "replica 1 left"
    );
    // Replica 2, whose clock is 9 million behind, carries on.
    r.handle_packet(t(200), server_seg(&isns, 2, 3, 20, flags::PSH, b"def"));
    let out = drain(&mut r);
    let c = to_client(&out);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].payload, b"def");
    let ts_b = c[0].r.timestamps.expect("timestamps agreed").0;
    assert_ne!(ts_b, 20, "not the replica's TSval");
    assert!(
        SeqNum(ts_b).is_after(SeqNum(ts_a)),
        "TSval went from {ts_a} to {ts_b}: the client would drop it (PAWS)"
    );
    assert_eq!(
        ts_b.wrapping_sub(ts_a),
        195,
        "the router's clock: one tick per ms between the two segments"
    );
    // The last replica resets at the end of its stream: the client gets
    // the RST, on the router's clock as well (RFC 7323 §5.2 exempts a RST
    // from PAWS, but a replica's clock is not for the client to see).
    r.handle_packet(t(250), server_seg(&isns, 2, 6, 25, flags::RST, b""));
    let out = drain(&mut r);
    let c = to_client(&out);
    assert_eq!(c.len(), 1, "the client gets the last replica's RST");
    assert_ne!(c[0].r.flags & flags::RST, 0);
    assert_eq!(
        c[0].r.timestamps.map(|(v, _)| v),
        Some(ts_a.wrapping_add(245)),
        "the RST's TSval is the router's clock, not the replica's 25"
    );
}

/// The FIN reaches the client once, where every replica's stream ends.
#[test]
fn a_fin_at_the_same_place_from_every_replica_reaches_the_client_once() {
    let mut r = router(3);
    let (risn, isns) = handshake(&mut r, 3);
    let mut fins = Vec::new();
    for i in 1..=3 {
        r.handle_packet(
            t(5 + u64::from(i)),
            server_seg(&isns, i, 0, 7000, flags::PSH | flags::FIN, b"bye"),
        );
        let out = drain(&mut r);
        for o in to_client(&out) {
            if o.r.flags & flags::FIN != 0 {
                fins.push((i, o.r.seq, o.payload.len()));
            }
        }
        if i < 3 {
            assert!(
                fins.is_empty(),
                "no FIN while replica {} has not sent its own",
                i + 1
            );
        }
    }
    assert_eq!(fins.len(), 1, "exactly one FIN: {fins:?}");
    let (_, seq, len) = fins[0];
    assert_eq!(
        seq.add(u32::try_from(len).unwrap()),
        SeqNum(risn).add(4),
        "at the end of the 3 bytes"
    );
    assert!(log_events(&mut r).is_empty(), "nobody blamed");
}

/// A replica that FINs where another went past stopped early: it is evicted
/// (`fin`), the client gets the other's bytes and no FIN at the early point
/// — whether the early FIN comes first or last.
#[test]
fn an_early_fin_is_evicted_and_never_reaches_the_client() {
    for early_first in [true, false] {
        let mut r = router(3);
        let (risn, isns) = handshake(&mut r, 3);
        let early = server_seg(&isns, 1, 0, 7000, flags::PSH | flags::FIN, b"abc");
        let full = |i: u8| server_seg(&isns, i, 0, 7000, flags::PSH, b"abcdef");
        let mut got = Vec::new();
        let order: Vec<Packet> = if early_first {
            vec![early, full(2), full(3)]
        } else {
            vec![full(2), full(3), early]
        };
        for (k, p) in order.into_iter().enumerate() {
            r.handle_packet(t(5 + k as u64), p);
            got.extend(drain(&mut r).into_iter().filter(|o| o.dst == CLIENT));
        }
        assert!(
            got.iter().all(|o| o.r.flags & flags::FIN == 0),
            "no FIN to the client (early_first={early_first})"
        );
        let end = got
            .iter()
            .map(|o| o.r.seq.add(u32::try_from(o.payload.len()).unwrap()))
            .max_by(|a, b| {
                if a.is_after(*b) {
                    std::cmp::Ordering::Greater
                } else {
                    std::cmp::Ordering::Less
                }
            })
            .expect("bytes reached the client");
        assert_eq!(
            end,
            SeqNum(risn).add(7),
            "all six bytes (early_first={early_first})"
        );
        let ev = log_events(&mut r);
        assert!(
            ev.iter().any(|e| matches!(
                e,
                Event::Evicted { replica: a, reason: EvictReason::Fin, .. } if *a == replica(1)
            )),
            "the early FIN's replica is evicted (early_first={early_first}): {ev:?}"
        );
    }
}

/// Drain (COSCANet-FT §V, membership at run time): a draining replica gets
/// no new connection but stays in the ones it is in until they end; then it
/// is announced drained, once. `enable` makes it serve again.
#[test]
fn a_draining_replica_gets_no_new_connections_and_finishes_its_own() {
    let mut r = router(3);
    let (_risn, isns) = handshake(&mut r, 3);
    log_events(&mut r);
    assert_eq!(r.drain_replica(t(5), "t", replica(2)), Ok(1));
    let evs = log_events(&mut r);
    assert!(
        evs.iter().any(|e| matches!(e, Event::ReplicaDraining { replica: a, connections: 1, .. } if *a == replica(2))),
        "{evs:?}"
    );
    // The open connection's bytes still reach all three.
    client_data(&mut r, t(6), b"abc");
    let to: Vec<Ipv4Addr> = drain(&mut r)
        .iter()
        .filter(|o| o.payload == b"abc")
        .map(|o| o.dst)
        .collect();
    assert_eq!(to, vec![replica(1), replica(2), replica(3)]);
    for i in 1..=3 {
        r.handle_packet(
            t(6),
            ack_from(i, isns[i as usize - 1], SeqNum(CISN).add(4), 500),
        );
    }
    drain(&mut r);
    // A new connection skips it.
    assert_eq!(
        syn_targets(&mut r, t(7), 40001),
        vec![replica(1), replica(3)]
    );
    let st = &r.status().services[0].replicas[1];
    assert_eq!(st.state, ftnet_core::MemberState::Draining);
    assert!(!st.alive);
    // Not drained while the connection is open.
    r.handle_timeout(t(500));
    assert!(!log_events(&mut r)
        .iter()
        .any(|e| matches!(e, Event::ReplicaDrained { .. })));
    // The client resets: the connection ends, the replica is drained.
    let rst = Repr::new(CPORT, PORT, SeqNum(CISN).add(4), SeqNum(0), flags::RST, 0);
    r.handle_packet(t(600), seg(CLIENT, VIP, rst, b""));
    drain(&mut r);
    let due = r.poll_timeout().expect("a drain check is due");
    r.handle_timeout(due.max(t(700)));
    let evs = log_events(&mut r);
    assert_eq!(
        evs.iter()
            .filter(|e| matches!(e, Event::ReplicaDrained { replica: a, .. } if *a == replica(2)))
            .count(),
        1,
        "{evs:?}"
    );
    r.handle_timeout(t(2000));
    assert!(!log_events(&mut r)
        .iter()
        .any(|e| matches!(e, Event::ReplicaDrained { .. })));
    // Back into service.
    assert_eq!(r.enable_replica(replica(2), None), vec!["t".to_string()]);
    assert_eq!(
        syn_targets(&mut r, t(2001), 40002),
        vec![replica(1), replica(2), replica(3)]
    );
}

/// Remove: the replica leaves every connection at once, like an eviction,
/// but never a connection's last replica, and never the service's last
/// serving one; `add` makes the address a member again.
#[test]
fn a_removed_replica_leaves_every_connection_but_never_the_last() {
    use ftnet_core::MembershipError;
    let mut r = router(2);
    let (_risn, _isns) = handshake(&mut r, 2);
    log_events(&mut r);
    assert_eq!(r.remove_replica(t(5), "t", replica(1)), Ok((1, 0)));
    let evs = log_events(&mut r);
    assert!(evs.iter().any(|e| matches!(e, Event::Evicted { replica: a, reason: EvictReason::Removed, .. } if *a == replica(1))), "{evs:?}");
    assert!(evs.iter().any(|e| matches!(e, Event::ReplicaRemoved { replica: a, left: 1, kept: 0, .. } if *a == replica(1))), "{evs:?}");
    client_data(&mut r, t(6), b"abc");
    let to: Vec<Ipv4Addr> = drain(&mut r)
        .iter()
        .filter(|o| o.payload == b"abc")
        .map(|o| o.dst)
        .collect();
    assert_eq!(to, vec![replica(2)], "the connection goes on without it");
    assert_eq!(syn_targets(&mut r, t(7), 40001), vec![replica(2)]);
    assert!(matches!(
        r.remove_replica(t(8), "t", replica(2)),
        Err(MembershipError::LastServing { .. })
    ));
    assert!(matches!(
        r.drain_replica(t(8), "t", replica(2)),
        Err(MembershipError::LastServing { .. })
    ));
    assert!(matches!(
        r.remove_replica(t(8), "t", replica(1)),
        Err(MembershipError::NotAMember { .. })
    ));
    assert!(matches!(r.enable_replica(replica(1), None).as_slice(), []));
    // Back as a member: the same slot, new connections use it.
    assert_eq!(r.add_replica(t(9), "t", replica(1)), Ok(()));
    assert_eq!(
        syn_targets(&mut r, t(10), 40002),
        vec![replica(1), replica(2)]
    );
}

/// Add: a new address becomes a member of a running service: new
/// connections use it and its replies are taken; the connections open
/// before go on without it. Mistakes are refused with a reason.
#[test]
fn an_added_replica_serves_new_connections() {
    use ftnet_core::MembershipError;
    let mut r = router(2);
    let (_risn, _isns) = handshake(&mut r, 2);
    assert_eq!(r.add_replica(t(5), "t", replica(3)), Ok(()));
    assert!(log_events(&mut r)
        .iter()
        .any(|e| matches!(e, Event::ReplicaAdded { replica: a, .. } if *a == replica(3))));
    client_data(&mut r, t(6), b"abc");
    let to: Vec<Ipv4Addr> = drain(&mut r)
        .iter()
        .filter(|o| o.payload == b"abc")
        .map(|o| o.dst)
        .collect();
    assert_eq!(
        to,
        vec![replica(1), replica(2)],
        "not in the open connection"
    );
    let (cport, isn3) = (40001u16, 77_000u32);
    assert_eq!(
        syn_targets(&mut r, t(7), cport),
        vec![replica(1), replica(2), replica(3)]
    );
    // Its SYN-ACK is taken (it is a replica of the service now).
    let mut sa = Repr::new(
        PORT,
        cport,
        SeqNum(isn3),
        SeqNum(CISN).add(1),
        flags::SYN | flags::ACK,
        500,
    );
    sa.mss = Some(1460);
    r.handle_packet(t(8), seg(replica(3), CLIENT, sa, b""));
    for d in [
        DropReason::NotOurs,
        DropReason::UnknownConnection,
        DropReason::BadState,
    ] {
        assert_eq!(r.counters().dropped(d), 0, "{d:?}");
    }
    assert_eq!(
        r.status().services[0].replicas[2].state,
        ftnet_core::MemberState::Serving
    );
    assert!(matches!(
        r.add_replica(t(9), "t", replica(3)),
        Err(MembershipError::AlreadyMember { .. })
    ));
    assert!(matches!(
        r.add_replica(t(9), "nope", replica(4)),
        Err(MembershipError::NoService(_))
    ));
}

/// A stateless service heals by itself: a replica that went down is probed
/// (a SYN from the VIP to its service port, like a load balancer's health
/// check); a RST (nobody listening yet) keeps it down, a SYN-ACK that
/// acknowledges exactly the probe brings it back, and the probe is reset.
/// A forged answer (wrong ACK) changes nothing. A service that keeps
/// state is never probed.
#[test]
fn a_stateless_service_takes_a_replica_back_once_it_answers_a_probe() {
    let mut r = router_of(3, true);
    assert_eq!(r.host_lost(t(0), replica(2)), 1);
    log_events(&mut r);
    drain(&mut r);
    let due = r.poll_timeout().expect("a probe is due");
    assert_eq!(due, t(ftnet_core::PROBE_EVERY.as_millis() as u64));
    r.handle_timeout(due);
    let out = drain(&mut r);
    assert_eq!(out.len(), 1, "one probe");
    let p = &out[0];
    assert_eq!((p.src, p.dst, p.r.dst_port), (VIP, replica(2), PORT));
    assert_eq!(p.r.flags, flags::SYN);
    // Nobody listens yet: a RST. Still down; probed again later.
    let rst = Repr::new(
        PORT,
        p.r.src_port,
        SeqNum(0),
        p.r.seq.add(1),
        flags::RST | flags::ACK,
        0,
    );
    r.handle_packet(t(600), seg(replica(2), VIP, rst, b""));
    assert!(!r.status().services[0].replicas[1].alive);
    // A forged SYN-ACK (it does not acknowledge the probe's ISN).
    let mut sa = Repr::new(
        PORT,
        p.r.src_port,
        SeqNum(5000),
        p.r.seq.add(77),
        flags::SYN | flags::ACK,
        500,
    );
    sa.mss = Some(1460);
    r.handle_packet(t(700), seg(replica(2), VIP, sa.clone(), b""));
    assert!(
        !r.status().services[0].replicas[1].alive,
        "a forged answer changes nothing"
    );
    r.handle_timeout(t(1000));
    let again = drain(&mut r);
    assert_eq!(again.len(), 1, "probed again");
    assert_eq!(again[0].r.seq, p.r.seq, "the same probe");
    // The server listens again.
    sa.ack = p.r.seq.add(1);
    r.handle_packet(t(1001), seg(replica(2), VIP, sa, b""));
    let out = drain(&mut r);
    assert!(
        out.iter().any(|o| o.dst == replica(2)
            && o.r.flags & flags::RST != 0
            && o.r.seq == p.r.seq.add(1)),
        "the half-open probe is reset"
    );
    assert!(r.status().services[0].replicas[1].alive);
    let evs = log_events(&mut r);
    assert!(evs.iter().any(|e| matches!(e, Event::ReplicaRejoined { replica: a, was: EvictReason::HostLost, down_ms: 1001, .. } if *a == replica(2))), "{evs:?}");
    assert_eq!(
        syn_targets(&mut r, t(1002), 40001),
        vec![replica(1), replica(2), replica(3)]
    );
    // No more probes.
    r.handle_timeout(t(5000));
    assert!(drain(&mut r).is_empty());
    // A service that keeps state is never probed.
    let mut s = router(3);
    s.host_lost(t(0), replica(2));
    s.handle_timeout(t(5000));
    assert!(drain(&mut s).iter().all(|o| o.dst != replica(2)));
    assert!(!s.status().services[0].replicas[1].alive);
}

/// A sequencer router with 3 replicas and one connection on which the
/// client sent "hello" and got "world" from replicas 1 and 2, all of it
/// acknowledged; replica 3 left the group before. Returns the router's and
/// the replicas' ISNs.
fn quiet_service_without_replica_3() -> (Router, u32, Vec<u32>) {
    quiet_service_without_replica_3_joining(false)
}

fn quiet_service_without_replica_3_joining(live: bool) -> (Router, u32, Vec<u32>) {
    let mut r = sequencer_router_joining(3, live);
    let (risn, isns) = handshake(&mut r, 3);
    assert_eq!(r.replica_failed(t(3), replica(3)), 1);
    assert!(drain(&mut r)
        .iter()
        .all(|o| o.dst == replica(3) && o.r.flags & flags::RST != 0));
    let out = client_bytes(&mut r, t(4), risn, 0, b"hello");
    assert_eq!(out.len(), 2, "to replicas 1 and 2");
    for i in 1..=2u8 {
        from_replica(&mut r, t(5), &isns, i, (1, 6, 6000), b"world");
    }
    client_acks(&mut r, t(6), risn, 6);
    drain(&mut r);
    log_events(&mut r);
    agent_msgs(&mut r);
    (r, risn, isns)
}

/// The client's bytes `payload` at offset 5, acknowledging "world".
fn more(r: &mut Router, now: Instant, risn: u32, payload: &[u8]) -> Vec<Out> {
    let d = Repr::new(
        CPORT,
        PORT,
        SeqNum(CISN).add(6),
        SeqNum(risn).add(6),
        flags::ACK | flags::PSH,
        502,
    );
    r.handle_packet(now, seg(CLIENT, VIP, d, payload));
    drain(r)
}

/// The keep-alives a join sends replicas 1 and 2 to learn where their
/// output ends: one octet one below what they acknowledged (`acked`
/// client bytes past the ISN).
fn rest_probes(r: &mut Router, acked: u32) {
    let out = drain(r);
    let mut to: Vec<_> = out.iter().map(|o| o.dst).collect();
    to.sort();
    assert_eq!(to, vec![replica(1), replica(2)]);
    for o in &out {
        assert_eq!((o.r.seq, o.payload.len()), (SeqNum(CISN).add(acked - 1), 1));
    }
}

/// Replica `i`'s segment to the client: sequence number `nxt` bytes past
/// its ISN, acknowledging `acked` client bytes past the client's ISN, with
/// TSval `tsval` and `payload` (PSH with one).
fn from_replica(
    r: &mut Router,
    now: Instant,
    isns: &[u32],
    i: u8,
    (nxt, acked, tsval): (u32, u32, u32),
    payload: &[u8],
) {
    let fl = if payload.is_empty() {
        flags::ACK
    } else {
        flags::ACK | flags::PSH
    };
    let mut a = Repr::new(
        PORT,
        CPORT,
        SeqNum(isns[i as usize - 1]).add(nxt),
        SeqNum(CISN).add(acked),
        fl,
        500,
    );
    a.timestamps = Some((tsval, 1001));
    r.handle_packet(now, seg(replica(i), CLIENT, a, payload));
}

/// Replica `i` sends `reply` (after the client's 5 bytes) in segments of
/// 1,400 bytes, the one at offset `at` at `when(at)`.
fn reply_in_segments(
    r: &mut Router,
    isns: &[u32],
    i: u8,
    reply: &[u8],
    when: impl Fn(u32) -> Instant,
) {
    for (k, chunk) in reply.chunks(1_400).enumerate() {
        let at = u32::try_from(k * 1_400).unwrap();
        from_replica(r, when(at), isns, i, (1 + at, 6, 7000), chunk);
    }
}

/// Replica `i`'s FIN at `nxt` bytes past its ISN, acknowledging `acked`
/// client bytes (past the client's ISN), with TSval `tsval`.
fn fin_from_replica(
    r: &mut Router,
    now: Instant,
    isns: &[u32],
    i: u8,
    (nxt, acked, tsval): (u32, u32, u32),
) {
    let mut fin = Repr::new(
        PORT,
        CPORT,
        SeqNum(isns[i as usize - 1]).add(nxt),
        SeqNum(CISN).add(acked),
        flags::ACK | flags::FIN,
        500,
    );
    fin.timestamps = Some((tsval, 1001));
    r.handle_packet(now, seg(replica(i), CLIENT, fin, b""));
}

/// Replica `i`'s pure ACK with its SND.NXT at `nxt` bytes past its ISN.
fn rest_answer(r: &mut Router, now: Instant, isns: &[u32], i: u8, nxt: u32) {
    from_replica(r, now, isns, i, (nxt, 6, 6001), b"");
}

/// The client acknowledges the router's output up to `out` bytes past its
/// ISN, having sent 5 bytes.
/// The client's FIN after `off` bytes of its own, acknowledging `out`
/// bytes of the router's: what the router sent.
fn client_fin(r: &mut Router, now: Instant, risn: u32, off: u32, out: u32) -> Vec<Out> {
    let f = Repr::new(
        CPORT,
        PORT,
        SeqNum(CISN).add(1 + off),
        SeqNum(risn).add(out),
        flags::ACK | flags::FIN,
        502,
    );
    r.handle_packet(now, seg(CLIENT, VIP, f, b""));
    drain(r)
}

fn client_acks(r: &mut Router, now: Instant, risn: u32, out: u32) {
    let a = Repr::new(
        CPORT,
        PORT,
        SeqNum(CISN).add(6),
        SeqNum(risn).add(out),
        flags::ACK,
        502,
    );
    r.handle_packet(now, seg(CLIENT, VIP, a, b""));
}

/// After the proof (a paused join) or the donor's point (a live one) the
/// router asks replicas 1 and 2 once more where their output ends; both
/// answer that it ends where it did (6 bytes), at `at` ms. Then the join
/// goes on (the joiner's legs; a live join's input resumes).
fn confirm_rest(r: &mut Router, at: u64, isns: &[u32]) {
    // (A live join's joiner, part of the connection already, is asked too.)
    let out = drain(r);
    let mut to: Vec<_> = out.iter().map(|o| o.dst).collect();
    to.sort();
    to.retain(|a| *a != replica(3));
    assert_eq!(to, vec![replica(1), replica(2)], "{out:?}");
    for o in &out {
        assert_eq!((o.r.seq, o.payload.len()), (SeqNum(CISN).add(5), 1));
    }
    for i in 1..=2 {
        rest_answer(r, t(at), isns, i, 6);
    }
    r.handle_timeout(t(at));
}

/// Starts the join of replica 3: the service pauses and is quiet at once;
/// replicas 1 and 2 confirm that their output ends where the router's copy
/// does, and replica 1 is asked for a checkpoint at input event 2 (Accept,
/// "hello"). "more" from the client is held meanwhile; the client is told
/// a zero window. Returns the join's id.
fn start_join(r: &mut Router, risn: u32, isns: &[u32]) -> u64 {
    let id = r.join_replica(t(10), "t", replica(3)).expect("join");
    let ev = log_events(r);
    assert!(
        ev.iter().any(|e| matches!(e, Event::JoinStarted { .. })),
        "{ev:?}"
    );
    assert!(
        !ev.iter().any(|e| matches!(e, Event::JoinCheckpoint { .. })),
        "not before the replicas confirmed their output: {ev:?}"
    );
    rest_probes(r, 6);
    for i in 1..=2 {
        rest_answer(r, t(10), isns, i, 6);
    }
    r.handle_timeout(t(12));
    let ev = log_events(r);
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::JoinCheckpoint { seq: 2, .. })),
        "quiet at once: {ev:?}"
    );
    let msgs = agent_msgs(r);
    assert!(
        msgs.iter().any(|m| matches!(m,
            AgentMsg::Checkpoint { join, seq: 2, donor, joiner, .. }
                if *join == id && *donor == replica(1) && *joiner == replica(3))),
        "{msgs:?}"
    );
    let out = more(r, t(11), risn, b"more");
    assert_eq!(out.len(), 1, "held: nothing reaches a replica");
    assert_eq!((out[0].dst, out[0].r.window), (CLIENT, 0), "zero window");
    assert_eq!(out[0].r.ack, SeqNum(CISN).add(6));
    assert!(input_ends(r).is_empty(), "held input gets no number");
    id
}

/// The joiner's SYN-ACK to the SYN a join sends it for the open
/// connection (`start_join`, then the proof of state). Returns its ISN.
fn joiner_syn_ack(r: &mut Router, now: Instant) -> u32 {
    let jisn = 9_000_077u32;
    let mut sa = Repr::new(
        PORT,
        CPORT,
        SeqNum(jisn),
        SeqNum(CISN).add(6),
        flags::SYN | flags::ACK,
        65160,
    );
    sa.mss = Some(1460);
    sa.wscale = Some(9);
    sa.timestamps = Some((777, 1001));
    r.handle_packet(now, seg(replica(3), CLIENT, sa, b""));
    jisn
}

/// A replica whose last output segment was lost on its way to the router
/// (it answers the join's probe with an SND.NXT beyond the output the
/// router has) is not at rest: its server is past the output the group
/// sent, and a joiner's output would be placed where the lost segment
/// belongs. The join waits for it; once the replica's retransmission
/// reaches the client and is acknowledged, the service comes to rest.
#[test]
fn a_join_waits_for_output_lost_before_the_pause() {
    let (mut r, risn, isns) = quiet_service_without_replica_3();
    r.join_replica(t(10), "t", replica(3)).expect("join");
    rest_probes(&mut r, 6);
    rest_answer(&mut r, t(10), &isns, 1, 6);
    // Replica 2 sent "!!" after "world"; the router never got it.
    rest_answer(&mut r, t(10), &isns, 2, 8);
    for ms in [12, 100, 400] {
        r.handle_timeout(t(ms));
        let ev = log_events(&mut r);
        assert!(
            !ev.iter().any(|e| matches!(e, Event::JoinCheckpoint { .. })),
            "at {ms} ms: {ev:?}"
        );
        drain(&mut r);
    }
    // Both retransmit (replica 1 has the same output: it is behind).
    for i in 1..=2u8 {
        from_replica(&mut r, t(401), &isns, i, (6, 6, 6100), b"!!");
    }
    client_acks(&mut r, t(402), risn, 8);
    drain(&mut r);
    r.handle_timeout(t(460));
    rest_probes(&mut r, 6);
    for i in 1..=2 {
        rest_answer(&mut r, t(461), &isns, i, 8);
    }
    r.handle_timeout(t(463));
    let ev = log_events(&mut r);
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::JoinCheckpoint { seq: 2, .. })),
        "at rest now: {ev:?}"
    );
}

/// A connection whose client closed after its last bytes reached every
/// replica does not hold a join off while its FIN is still on its way to
/// the replicas (or never comes: a client that gave up retransmitting it):
/// the servers hold all of its input, and the joiner takes no part in it.
/// (Found by the fault campaign: one such connection after a router cut
/// kept a service from ever taking a replica back.) A connection whose
/// client closed before every replica took its last bytes still waits.
#[test]
fn a_client_fin_the_replicas_have_not_acknowledged_does_not_hold_a_join_off() {
    let fin = |r: &mut Router, now: Instant, risn: u32, off: u32| {
        let f = Repr::new(
            CPORT,
            PORT,
            SeqNum(CISN).add(1 + off),
            SeqNum(risn).add(6),
            flags::ACK | flags::FIN,
            502,
        );
        r.handle_packet(now, seg(CLIENT, VIP, f, b""));
        drain(r)
    };
    // Every byte taken: the FIN (to replicas 1 and 2) is never acknowledged.
    let (mut r, risn, isns) = quiet_service_without_replica_3();
    assert_eq!(
        fin(&mut r, t(7), risn, 5).len(),
        2,
        "the FIN to replicas 1 and 2"
    );
    r.join_replica(t(10), "t", replica(3)).expect("join");
    r.handle_timeout(t(12));
    let ev = log_events(&mut r);
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::JoinCheckpoint { seq: 2, .. })),
        "at rest: the closing connection is not joined: {ev:?}"
    );
    // "more" reached replica 1 only when the client closed: the join waits.
    let (mut r, risn, isns2) = quiet_service_without_replica_3();
    assert_eq!(isns, isns2);
    more(&mut r, t(7), risn, b"more");
    fin(&mut r, t(7), risn, 9);
    from_replica(&mut r, t(8), &isns, 1, (6, 10, 6002), b"");
    drain(&mut r);
    log_events(&mut r);
    r.join_replica(t(10), "t", replica(3)).expect("join");
    for ms in [12, 100, 400] {
        r.handle_timeout(t(ms));
        drain(&mut r);
    }
    let ev = log_events(&mut r);
    assert!(
        !ev.iter().any(|e| matches!(e, Event::JoinCheckpoint { .. })),
        "replica 2 lacks \"more\": {ev:?}"
    );
}

/// A server of a replica that is down in a stateful service, while another
/// replica serves, is stale (it missed input): the driver has it restarted
/// so that it can join. A serving replica's server is not.
#[test]
fn a_down_replicas_server_is_stale_only_while_another_serves() {
    let (mut r, _, _) = quiet_service_without_replica_3();
    assert_eq!(r.stale_in(replica(3)), vec!["t".to_string()]);
    assert!(r.stale_in(replica(1)).is_empty());
    r.host_lost(t(50), replica(1));
    assert_eq!(r.stale_in(replica(3)), vec!["t".to_string()], "2 serves");
    assert_eq!(
        r.stale_in(replica(1)),
        vec!["t".to_string()],
        "down now: a server of it that speaks again missed input"
    );
    assert!(r.stale_in(replica(2)).is_empty(), "it serves");
}

/// A router with the sequencer and two services on one VIP, each with
/// replicas 1..=n: `(name, stateless)` for each, on PORT and PORT + 1.
fn two_services(n: u8, services: [(&str, bool); 2]) -> Router {
    let mut c = Config {
        sequencer: true,
        ..Default::default()
    };
    for ((name, stateless), port) in services.into_iter().zip([PORT, PORT + 1]) {
        c.services.push(Service {
            name: name.into(),
            vip: VIP,
            ports: vec![port],
            replicas: (1..=n).map(replica).collect(),
            voting: Default::default(),
            stateless,
            ack: ftnet_core::Ack::All,
            delivery: Default::default(),
        });
    }
    Router::new(c, [9; 16])
}

/// The restart requests (`AgentMsg::Restart`) among the agents' messages.
fn restarts(r: &mut Router) -> Vec<Ipv4Addr> {
    agent_msgs(r)
        .into_iter()
        .filter_map(|m| match m {
            AgentMsg::Restart { replica, .. } => Some(replica),
            _ => None,
        })
        .collect()
}

/// A replica taken out while its agent stays connected (here: its server
/// lost the order; the same path takes one out for a stall, a reset or a
/// divergence) has servers that miss input from then on: its agent is
/// told at once, so that a fresh server can join. Not for a service's
/// last replica (never taken out), nor for a stateless service (nothing
/// to miss: its replicas come back by the health check).
#[test]
fn a_replica_taken_out_has_its_stale_servers_restarted() {
    let mut r = two_services(2, [("t", false), ("web", true)]);
    assert_eq!(r.replica_failed(t(1), replica(2)), 2);
    let why: Vec<String> = agent_msgs(&mut r)
        .into_iter()
        .filter_map(|m| match m {
            AgentMsg::Restart { replica: a, reason } if a == replica(2) => Some(reason),
            _ => None,
        })
        .collect();
    assert_eq!(why.len(), 1, "once, for the stateful service: {why:?}");
    assert!(
        why[0].contains("out of service in t ") && why[0].contains("OrderLost"),
        "{why:?}"
    );
    // The last replica in service is never taken out: nothing to restart.
    assert_eq!(r.replica_failed(t(2), replica(1)), 0);
    assert!(restarts(&mut r).is_empty());
    // Only stateless services: no request.
    let mut c = Config {
        sequencer: true,
        ..Default::default()
    };
    c.services.push(Service {
        name: "web".into(),
        vip: VIP,
        ports: vec![PORT],
        replicas: (1..=2).map(replica).collect(),
        voting: Default::default(),
        stateless: true,
        ack: ftnet_core::Ack::All,
        delivery: Default::default(),
    });
    let mut r = Router::new(c, [9; 16]);
    assert_eq!(r.replica_failed(t(1), replica(2)), 1);
    assert!(restarts(&mut r).is_empty());
}

/// A replica taken out of one connection only (here: it closed early, a
/// FIN where the others send on, or reset it) misses that connection's input from then
/// on, which the others apply. Where its server follows the service's
/// input order, its state is no longer the group's: it leaves the service
/// (`MissedInput`) and its agent is told to restart its servers, instead of
/// serving on with commands missing (a Redis replica's digest differed
/// after a takeover's connections evicted it as slow). A replica whose
/// servers do not follow the order misses nothing the order carries: it
/// stays.
#[test]
fn a_replica_taken_out_of_a_connection_with_input_to_come_leaves_the_service() {
    for (follows, by_reset) in [(true, false), (false, false)] {
        let mut r = sequencer_router(3);
        if follows {
            for i in 1..=3 {
                r.set_follows_order(replica(i), true);
            }
        }
        let (risn, isns) = handshake(&mut r, 3);
        client_bytes(&mut r, t(3), risn, 0, b"0123456789");
        // Replica 3 closes (or resets) at once; 1 and 2 send on past that
        // point.
        let (fl, how) = if by_reset {
            (flags::RST | flags::ACK, EvictReason::Reset)
        } else {
            (flags::ACK | flags::FIN, EvictReason::Fin)
        };
        let fin = Repr::new(
            PORT,
            CPORT,
            SeqNum(isns[2]).add(1),
            SeqNum(CISN).add(11),
            fl,
            500,
        );
        r.handle_packet(t(4), seg(replica(3), CLIENT, fin, b""));
        for i in 1..=2u8 {
            let d = Repr::new(
                PORT,
                CPORT,
                SeqNum(isns[i as usize - 1]).add(1),
                SeqNum(CISN).add(11),
                flags::ACK | flags::PSH,
                500,
            );
            r.handle_packet(t(5), seg(replica(i), CLIENT, d, b"reply"));
        }
        // A reset's verdict waits until another replica proves it was no
        // abort of the service's (here: the others' replies), at most the
        // detection time.
        r.handle_timeout(t(200));
        drain(&mut r);
        let ev = log_events(&mut r);
        assert!(
            ev.iter().any(|e| matches!(e, Event::Evicted { replica: a, reason, .. } if *a == replica(3) && *reason == how)),
            "replica 3 left the connection: {ev:?}"
        );
        let alive: Vec<bool> = r.status().services[0]
            .replicas
            .iter()
            .map(|x| x.alive)
            .collect();
        if follows {
            assert_eq!(alive, vec![true, true, false], "out of the service: {ev:?}");
            assert!(ev.iter().any(|e| matches!(e, Event::ReplicaDown { replica: a, reason: EvictReason::MissedInput, .. } if *a == replica(3))));
            assert_eq!(restarts(&mut r), vec![replica(3)]);
        } else {
            assert_eq!(
                alive,
                vec![true, true, true],
                "no server follows the order there"
            );
            assert!(restarts(&mut r).is_empty());
        }
    }
}

/// A join that fails after the joiner took the state leaves its server
/// with a state that is not the group's ("digest differs"): asking that
/// server again can only fail ("already took input"), so its agent is
/// told to restart it, and a fresh server joins. A join that fails
/// before the joiner was touched (the donor's fault) does not restart it.
#[test]
fn a_joiner_left_with_a_foreign_state_is_restarted() {
    let (mut r, risn, isns) = quiet_service_without_replica_3();
    let id = start_join(&mut r, risn, &isns);
    r.checkpoint_taken(t(20), id, Ok("d1".into()));
    r.state_restored(t(30), id, Ok("stale".into()));
    drain(&mut r);
    assert_eq!(restarts(&mut r), vec![replica(3)]);

    let (mut r, risn, isns) = quiet_service_without_replica_3();
    let id = start_join(&mut r, risn, &isns);
    r.checkpoint_taken(t(20), id, Err("the checkpoint command failed".into()));
    drain(&mut r);
    let ev = log_events(&mut r);
    assert!(
        ev.iter().any(|e| matches!(e, Event::JoinFailed { .. })),
        "{ev:?}"
    );
    assert!(
        restarts(&mut r).is_empty(),
        "the joiner's server is untouched"
    );
}

/// Readmission only with proof of state, by any path: where a down
/// replica missed input that lives on in another (a service it could
/// join), `replica enable` must not take the operator's word for its
/// state (`enable_needs_join` says where; the driver starts a join there
/// when the servers follow the order). A draining replica never left the
/// order, and a stateless service has no state to miss.
#[test]
fn enable_needs_a_join_where_a_replica_missed_input() {
    let mut r = two_services(3, [("t", false), ("web", true)]);
    assert!(r.enable_needs_join(replica(3), None).is_empty(), "serving");
    assert_eq!(r.replica_failed(t(1), replica(3)), 2);
    assert_eq!(r.enable_needs_join(replica(3), None), vec!["t".to_string()]);
    assert_eq!(
        r.enable_needs_join(replica(3), Some("t")),
        vec!["t".to_string()]
    );
    assert!(r.enable_needs_join(replica(3), Some("web")).is_empty());
    r.drain_replica(t(2), "t", replica(2)).unwrap();
    assert!(
        r.enable_needs_join(replica(2), Some("t")).is_empty(),
        "draining: never out of the order"
    );
    // Without the sequencer nothing follows an order: nothing to join.
    let mut c = Config::default();
    c.services.push(Service {
        name: "t".into(),
        vip: VIP,
        ports: vec![PORT],
        replicas: (1..=3).map(replica).collect(),
        voting: Default::default(),
        stateless: false,
        ack: ftnet_core::Ack::All,
        delivery: Default::default(),
    });
    let mut r = Router::new(c, [9; 16]);
    assert_eq!(r.replica_failed(t(1), replica(3)), 1);
    assert!(r.enable_needs_join(replica(3), None).is_empty());
}

/// An agent ends every server it orders: while its replica serves one
/// service, none of its servers is called stale, even where it is down.
#[test]
fn no_server_is_stale_while_its_replica_serves_another_service() {
    // u is stateless: `replica enable` brings a down replica back there
    // (in t it would take a join).
    let mut r = two_services(3, [("t", false), ("u", true)]);
    assert_eq!(r.replica_failed(t(1), replica(3)), 2);
    assert_eq!(r.stale_in(replica(3)), vec!["t".to_string()]);
    assert_eq!(
        r.enable_replica(replica(3), Some("u")),
        vec!["u".to_string()]
    );
    assert!(r.stale_in(replica(3)).is_empty(), "it serves u");
}

/// A joiner whose SYN-ACK offers a smaller MSS than the client was told
/// (1440) would get segments it cannot take (the router does not split
/// them): it is refused, and the join fails saying why.
#[test]
fn a_joiner_with_a_smaller_mss_is_refused() {
    let (mut r, risn, isns) = quiet_service_without_replica_3();
    let id = start_join(&mut r, risn, &isns);
    r.checkpoint_taken(t(20), id, Ok("d1".into()));
    r.state_restored(t(30), id, Ok("d1".into()));
    confirm_rest(&mut r, 30, &isns);
    drain(&mut r);
    log_events(&mut r);
    let mut sa = Repr::new(
        PORT,
        CPORT,
        SeqNum(9_000_077),
        SeqNum(CISN).add(6),
        flags::SYN | flags::ACK,
        65160,
    );
    sa.mss = Some(1400);
    sa.wscale = Some(9);
    sa.timestamps = Some((777, 1001));
    r.handle_packet(t(31), seg(replica(3), CLIENT, sa, b""));
    r.handle_timeout(t(40));
    let ev = log_events(&mut r);
    assert_join_failed(&ev, "its MSS 1400 is below the 1440 the client was told");
    assert!(!r.status().services[0].replicas[2].alive);
}

/// A new client's SYN that comes while a join pauses the service is held,
/// and so are the client's repeats of it (its SYN timer runs on). Only the
/// first copy is released: released together, each copy would reach the
/// servers as a new SYN, and a listener may take a repeat for a second
/// connection and have none left for the next client.
#[test]
fn a_syn_repeated_during_a_joins_pause_is_released_once() {
    let (mut r, risn, isns) = quiet_service_without_replica_3();
    let id = start_join(&mut r, risn, &isns);
    let other = CPORT + 1;
    let mut syn = Repr::new(other, PORT, SeqNum(77), SeqNum(0), flags::SYN, 64240);
    syn.mss = Some(1460);
    for k in 0..3u64 {
        syn.timestamps = Some((2000 + k as u32, 0));
        r.handle_packet(t(13 + k), seg(CLIENT, VIP, syn.clone(), b""));
        let out = drain(&mut r);
        assert!(
            out.iter().all(|o| o.dst == CLIENT),
            "held: nothing reaches a replica: {out:?}"
        );
    }
    r.checkpoint_taken(t(20), id, Ok("d1".into()));
    r.state_restored(t(30), id, Ok("d1".into()));
    confirm_rest(&mut r, 30, &isns);
    let mut out = drain(&mut r);
    // The joiner takes the open connection; then the service resumes.
    joiner_syn_ack(&mut r, t(31));
    out.extend(drain(&mut r));
    assert!(
        log_events(&mut r)
            .iter()
            .any(|e| matches!(e, Event::Joined { .. })),
        "joined"
    );
    let syns: Vec<&Out> = out
        .iter()
        .filter(|o| o.r.src_port == other && o.r.flags == flags::SYN)
        .collect();
    let mut to: Vec<_> = syns.iter().map(|o| o.dst).collect();
    to.sort();
    to.dedup();
    assert!(!to.is_empty(), "the SYN is released: {out:?}");
    assert_eq!(syns.len(), to.len(), "one SYN per replica: {syns:?}");
    assert_eq!(
        syns[0].r.timestamps.map(|x| x.0),
        Some(2000),
        "the first copy"
    );
}

/// Issue 15: a replica joins a stateful service — readmitted only with the
/// group's state proven (the donor's and the joiner's digests at the
/// paused input event agree), and part of the connection that was open
/// before it came: its own TCP connection starts where the client's
/// stream stands, and its output is translated like the others'.
#[test]
fn a_replica_joins_an_open_connection_with_proof_of_state() {
    let (mut r, risn, isns) = quiet_service_without_replica_3();
    let id = start_join(&mut r, risn, &isns);
    r.checkpoint_taken(t(20), id, Ok("d1".into()));
    assert!(
        drain(&mut r).is_empty(),
        "nothing before the joiner's proof"
    );
    r.state_restored(t(30), id, Ok("d1".into()));
    // Proven: replicas 1 and 2 are asked once more where their output
    // ends (nothing else goes out before they answer), then the joiner's
    // leg is placed there.
    confirm_rest(&mut r, 30, &isns);
    let out = drain(&mut r);
    assert_eq!(out.len(), 1, "a SYN to the joiner");
    let syn = &out[0];
    assert_eq!((syn.src, syn.dst), (CLIENT, replica(3)));
    assert_eq!(syn.r.flags, flags::SYN);
    assert_eq!(
        syn.r.seq,
        SeqNum(CISN).add(5),
        "where the client's stream stands"
    );
    assert_eq!(syn.r.wscale, Some(7), "the client's own scale");
    assert_eq!(syn.r.mss, Some(1460));
    assert_eq!(syn.r.timestamps, Some((1001, 0)));
    let msgs = agent_msgs(&mut r);
    assert!(
        msgs.iter().any(|m| matches!(m,
            AgentMsg::Input { kind: ftnet_core::InputKind::Join { base: 5 }, replicas, .. }
                if replicas.contains(&replica(3)) && replicas.contains(&replica(1)))),
        "{msgs:?}"
    );
    let jisn = joiner_syn_ack(&mut r, t(31));
    let out = drain(&mut r);
    let to3: Vec<&Out> = out.iter().filter(|o| o.dst == replica(3)).collect();
    assert!(
        to3.iter().any(|o| o.r.flags == flags::ACK
            && o.r.seq == SeqNum(CISN).add(6)
            && o.r.ack == SeqNum(jisn).add(1)),
        "the handshake completed in the client's name"
    );
    let ev = log_events(&mut r);
    assert!(
        ev.iter().any(|e| matches!(
            e,
            Event::Joined {
                connections: 1,
                seq: 2,
                ..
            }
        )),
        "{ev:?}"
    );
    // The held bytes go to all three now, in the joiner's space too; the
    // client gets its window back.
    let data: Vec<&Out> = out.iter().filter(|o| o.payload == b"more").collect();
    assert_eq!(data.len(), 3, "released to every replica");
    let d3 = data.iter().find(|o| o.dst == replica(3)).expect("joiner");
    assert_eq!(d3.r.seq, SeqNum(CISN).add(6));
    assert_eq!(
        d3.r.ack,
        SeqNum(jisn).add(1),
        "what the client acked, in its space"
    );
    assert!(
        out.iter().any(|o| o.dst == CLIENT && o.r.window > 0),
        "window update"
    );
    assert_eq!(input_ends(&mut r), vec![9], "the held chunk numbered");
    // The joiner answers first: its bytes reach the client at the group's
    // next output position.
    let mut d = Repr::new(
        PORT,
        CPORT,
        SeqNum(jisn).add(1),
        SeqNum(CISN).add(10),
        flags::ACK | flags::PSH,
        500,
    );
    d.timestamps = Some((800, 1001));
    r.handle_packet(t(32), seg(replica(3), CLIENT, d, b"again"));
    // The client follows replica 1 (output policy `primary`): the
    // joiner's copy waits; replica 1's identical bytes go out, compared
    // equal with the joiner's at the same position.
    assert!(
        drain(&mut r).iter().all(|o| o.dst != CLIENT),
        "a follower's bytes wait"
    );
    from_replica(&mut r, t(32), &isns, 1, (6, 10, 6001), b"again");
    let out = drain(&mut r);
    let c: Vec<&Out> = out.iter().filter(|o| o.dst == CLIENT).collect();
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].payload, b"again");
    assert_eq!(c[0].r.seq, SeqNum(risn).add(6));
    assert_eq!(
        r.counters().divergences,
        0,
        "the joiner's bytes sit where replica 1's do"
    );
    let st = r.status();
    assert_eq!(
        st.services[0].replicas[2].state,
        ftnet_core::MemberState::Serving
    );
    assert_eq!(st.services[0].replicas[2].connections, 1);
    // A client segment that carries an ACK from before the join (reordered
    // in the network) reaches the joiner acknowledging at least its SYN:
    // never output from before it existed.
    let old = Repr::new(
        CPORT,
        PORT,
        SeqNum(CISN).add(10),
        SeqNum(risn).add(1),
        flags::ACK | flags::PSH,
        502,
    );
    r.handle_packet(t(33), seg(CLIENT, VIP, old, b"late"));
    let out = drain(&mut r);
    let to3 = out
        .iter()
        .find(|o| o.dst == replica(3) && o.payload == b"late")
        .expect("to the joiner");
    assert_eq!(to3.r.ack, SeqNum(jisn).add(1));
}

/// Proof of state: a joiner whose restored state's digest differs from the
/// donor's is not admitted; the input resumes without it.
#[test]
fn a_joiner_whose_digest_differs_stays_out() {
    let (mut r, risn, isns) = quiet_service_without_replica_3();
    let id = start_join(&mut r, risn, &isns);
    r.checkpoint_taken(t(20), id, Ok("d1".into()));
    r.state_restored(t(30), id, Ok("stale".into()));
    let out = drain(&mut r);
    assert!(out.iter().all(|o| o.dst != replica(3)), "no SYN to it");
    let data: Vec<&Out> = out.iter().filter(|o| o.payload == b"more").collect();
    assert_eq!(data.len(), 2, "released to replicas 1 and 2 only");
    let ev = log_events(&mut r);
    assert_join_failed(&ev, "differs");
    let st = r.status();
    assert_eq!(
        st.services[0].replicas[2].state,
        ftnet_core::MemberState::Down
    );
    assert!(!st.services[0].replicas[2].alive);
    // The router tries again by itself, JOIN_ATTEMPTS times in all.
    let mut at = 30;
    for attempt in 2..=ftnet_core::JOIN_ATTEMPTS {
        at += 10_000;
        // The replicas took the released "more": the service is at rest.
        for i in 1..=2u8 {
            let mut a = Repr::new(
                PORT,
                CPORT,
                SeqNum(isns[i as usize - 1]).add(6),
                SeqNum(CISN).add(10),
                flags::ACK,
                500,
            );
            a.timestamps = Some((6001, 1001));
            r.handle_packet(t(at - 100), seg(replica(i), CLIENT, a, b""));
        }
        drain(&mut r);
        agent_msgs(&mut r);
        r.handle_timeout(t(at));
        let ev = log_events(&mut r);
        assert!(
            ev.iter().any(
                |e| matches!(e, Event::JoinStarted { join, .. } if *join == u64::from(attempt))
            ),
            "attempt {attempt}: {ev:?}"
        );
        // Where their output ends is confirmed (see `start_join`).
        rest_probes(&mut r, 10);
        for i in 1..=2u8 {
            from_replica(&mut r, t(at), &isns, i, (6, 10, 6002), b"");
        }
        r.handle_timeout(t(at + 2));
        let id = u64::from(attempt);
        r.checkpoint_taken(t(at + 3), id, Ok("d1".into()));
        r.state_restored(t(at + 4), id, Ok("stale".into()));
        let ev = log_events(&mut r);
        let last = attempt == ftnet_core::JOIN_ATTEMPTS;
        assert!(
            ev.iter().any(|e| matches!(e, Event::JoinFailed { retry_in_ms, .. } if retry_in_ms.is_none() == last)),
            "{ev:?}"
        );
        drain(&mut r);
        agent_msgs(&mut r);
    }
    run_to(&mut r, t(at + 60_000));
    assert!(log_events(&mut r).is_empty(), "no more attempts");
}

/// A service that does not come to rest (a replica never acknowledges the
/// client's bytes) is not checkpointed: after `JOIN_QUIET_MAX` the join
/// fails and the input resumes.
#[test]
fn a_join_waits_for_rest_and_gives_up_loudly() {
    let mut r = sequencer_router(3);
    let (risn, _) = handshake(&mut r, 3);
    r.replica_failed(t(3), replica(3));
    client_bytes(&mut r, t(4), risn, 0, b"hello");
    drain(&mut r);
    log_events(&mut r);
    let id = r.join_replica(t(10), "t", replica(3)).expect("join");
    assert!(id > 0);
    r.handle_timeout(t(500));
    assert!(
        !agent_msgs(&mut r)
            .iter()
            .any(|m| matches!(m, AgentMsg::Checkpoint { .. })),
        "not quiet: no checkpoint"
    );
    r.handle_timeout(t(2100));
    let ev = log_events(&mut r);
    assert_join_failed(&ev, "did not come to rest");
    // The log names the connection and where each replica stands.
    let reason = ev
        .iter()
        .find_map(|e| match e {
            Event::JoinFailed { reason, .. } => Some(reason.clone()),
            _ => None,
        })
        .unwrap_or_default();
    assert!(
        reason.contains("client bytes not acknowledged by every replica (connection ")
            && reason.contains("the client sent 5 byte(s), 5 numbered")
            && reason.contains(&format!("replica {} acknowledged 0 and sent 0", replica(1))),
        "{reason}"
    );
    assert!(
        r.join_replica(t(2200), "t", replica(1)).is_err(),
        "serving: not a joiner"
    );
}

/// A connection of the same four-tuple lingers in the joiner's kernel (its
/// server was killed with it open): the joiner answers the router's SYN
/// with a challenge ACK. The router resets the stale connection at exactly
/// the sequence number that ACK asks for and sends the SYN again, so the
/// join goes through instead of timing out.
#[test]
fn a_stale_connection_in_the_joiners_kernel_is_reset_and_the_syn_repeated() {
    let (mut r, risn, isns) = quiet_service_without_replica_3();
    let id = start_join(&mut r, risn, &isns);
    r.checkpoint_taken(t(20), id, Ok("d".into()));
    r.state_restored(t(30), id, Ok("d".into()));
    confirm_rest(&mut r, 30, &isns);
    assert_eq!(drain(&mut r).len(), 1, "the SYN");
    let stale = Repr::new(
        PORT,
        CPORT,
        SeqNum(4242),
        SeqNum(CISN).add(3),
        flags::ACK,
        100,
    );
    r.handle_packet(t(31), seg(replica(3), CLIENT, stale, b""));
    let out = drain(&mut r);
    assert_eq!(out.len(), 2, "a RST, then the SYN again");
    assert_eq!((out[0].src, out[0].dst), (CLIENT, replica(3)));
    assert_eq!(out[0].r.flags, flags::RST);
    assert_eq!(
        out[0].r.seq,
        SeqNum(CISN).add(3),
        "exactly where the stale one asked"
    );
    assert_eq!(out[1].r.flags, flags::SYN);
    assert_eq!(out[1].r.seq, SeqNum(CISN).add(5));
}

/// The joiner answers the join's SYN with a SYN-ACK to another SYN (an
/// earlier join's, whose half-open connection lingers in its kernel after
/// that join gave up): RFC 9293 §3.10.7.3, the router resets it at
/// exactly that SYN-ACK's ACK and sends its SYN again, instead of waiting
/// until the join times out (simulation seed 1640).
#[test]
fn a_synack_to_an_earlier_joins_syn_is_reset_and_the_syn_repeated() {
    let (mut r, risn, isns) = quiet_service_without_replica_3();
    let id = start_join(&mut r, risn, &isns);
    r.checkpoint_taken(t(20), id, Ok("d".into()));
    r.state_restored(t(30), id, Ok("d".into()));
    confirm_rest(&mut r, 30, &isns);
    assert_eq!(drain(&mut r).len(), 1, "the SYN");
    let mut stale = Repr::new(
        PORT,
        CPORT,
        SeqNum(4242),
        SeqNum(CISN).add(2),
        flags::SYN | flags::ACK,
        100,
    );
    stale.mss = Some(1460);
    r.handle_packet(t(31), seg(replica(3), CLIENT, stale, b""));
    let out = drain(&mut r);
    assert_eq!(out.len(), 2, "a RST, then the SYN again: {out:?}");
    assert_eq!((out[0].dst, out[0].r.flags), (replica(3), flags::RST));
    assert_eq!(out[0].r.seq, SeqNum(CISN).add(2), "at its ACK");
    assert_eq!(out[1].r.flags, flags::SYN);
    assert_eq!(out[1].r.seq, SeqNum(CISN).add(5));
}

/// During a join's pause a client retransmission of bytes the replicas
/// were already sent passes (a replica that lost them needs them to come
/// to rest); only new input waits.
#[test]
fn a_retransmission_passes_the_pause_and_new_bytes_wait() {
    let (mut r, risn, isns) = quiet_service_without_replica_3();
    start_join(&mut r, risn, &isns);
    let again = Repr::new(
        CPORT,
        PORT,
        SeqNum(CISN).add(1),
        SeqNum(risn).add(6),
        flags::ACK | flags::PSH,
        502,
    );
    r.handle_packet(t(12), seg(CLIENT, VIP, again, b"hello"));
    let out = drain(&mut r);
    let to: Vec<Ipv4Addr> = out
        .iter()
        .filter(|o| o.payload == b"hello")
        .map(|o| o.dst)
        .collect();
    assert_eq!(to, vec![replica(1), replica(2)], "repeated bytes pass");
    assert!(input_ends(&mut r).is_empty(), "no new input event");
}

/// `replica add` to a service whose servers follow the input order: the
/// replica is a member out of service (`NotJoined`) until it joined with
/// the group's state — it gets no new connection on the operator's word
/// alone — and its agent is told to end a server running there (it holds
/// a state that is not the group's). The same for a removed replica added
/// back.
#[test]
fn a_replica_added_to_an_ordered_service_serves_only_after_a_join() {
    let mut r = two_services(2, [("t", false), ("web", true)]);
    r.add_replica_to_join(t(1), "t", replica(3)).unwrap();
    let st = &r.status().services[0].replicas[2];
    assert_eq!(st.state, ftnet_core::MemberState::Down);
    assert!(!st.alive);
    assert_eq!(
        st.down.as_ref().map(|d| d.reason),
        Some(EvictReason::NotJoined)
    );
    assert_eq!(restarts(&mut r), vec![replica(3)]);
    assert_eq!(r.joinable(replica(3)), vec!["t".to_string()]);
    assert_eq!(r.enable_needs_join(replica(3), None), vec!["t".to_string()]);
    log_events(&mut r);
    // A new connection: a SYN to replicas 1 and 2 only.
    handshake(&mut r, 2);
    // Its join can start (the join's own tests take it from there).
    assert!(r.join_replica(t(2), "t", replica(3)).is_ok());

    // Removed, then added back: out of service again until a join. (Its
    // agent's servers are ended only where the replica serves no other
    // service: `Router::stale_in`.)
    let mut r = two_services(3, [("t", false), ("web", true)]);
    r.remove_replica(t(1), "t", replica(3)).unwrap();
    r.remove_replica(t(1), "web", replica(3)).unwrap();
    assert!(
        restarts(&mut r).is_empty(),
        "removed: nobody to restart yet"
    );
    r.add_replica_to_join(t(2), "t", replica(3)).unwrap();
    assert_eq!(
        r.status().services[0].replicas[2].state,
        ftnet_core::MemberState::Down
    );
    assert_eq!(restarts(&mut r), vec![replica(3)]);
    assert!(matches!(
        r.add_replica_to_join(t(3), "t", replica(3)),
        Err(ftnet_core::MembershipError::AlreadyMember { .. })
    ));
}

/// SIGHUP with a `[[service]]` new in the file: the router takes it as if
/// configured from the start — a SYN to its VIP and port reaches its
/// replicas — and refuses, changing nothing, a name, VIP port or replica
/// port a running service holds.
#[test]
fn a_service_added_at_run_time_takes_connections() {
    let mut r = router(2);
    let svc = |name: &str, port: u16, replicas: Vec<Ipv4Addr>| Service {
        name: name.into(),
        vip: VIP,
        ports: vec![port],
        replicas,
        voting: Default::default(),
        stateless: false,
        ack: ftnet_core::Ack::All,
        delivery: Default::default(),
    };
    let mut syn = Repr::new(CPORT, PORT + 1, SeqNum(CISN), SeqNum(0), flags::SYN, 64240);
    syn.mss = Some(1460);
    r.handle_packet(t(0), seg(CLIENT, VIP, syn.clone(), b""));
    assert!(
        drain(&mut r).iter().all(|o| o.dst == CLIENT),
        "no service on PORT + 1 yet: nothing to a replica"
    );
    assert!(matches!(
        r.add_service(t(1), svc("t", PORT + 1, vec![replica(3)])),
        Err(ftnet_core::MembershipError::ServiceExists(_))
    ));
    assert!(matches!(
        r.add_service(t(1), svc("u", PORT, vec![replica(3)])),
        Err(ftnet_core::MembershipError::VipTaken { .. })
    ));
    let mut other_vip = svc("u", PORT, vec![replica(1)]);
    other_vip.vip = Ipv4Addr::new(198, 19, 0, 99);
    assert!(matches!(
        r.add_service(t(1), other_vip),
        Err(ftnet_core::MembershipError::PortTaken { .. })
    ));
    assert_eq!(r.status().services.len(), 1, "refused: nothing changed");
    r.add_service(t(2), svc("u", PORT + 1, vec![replica(2), replica(3)]))
        .unwrap();
    assert!(log_events(&mut r)
        .iter()
        .any(|e| matches!(e, Event::ServiceAdded { service, .. } if service == "u")));
    r.handle_packet(t(3), seg(CLIENT, VIP, syn, b""));
    let out = drain(&mut r);
    let to: Vec<Ipv4Addr> = out.iter().map(|o| o.dst).collect();
    assert_eq!(to, vec![replica(2), replica(3)]);
    assert!(out.iter().all(|o| o.r.dst_port == PORT + 1));
    let st = r.status();
    assert_eq!(st.services.len(), 2);
    assert_eq!(st.services[1].name, "u");
    // The first service's connections are not touched: its handshake
    // still goes to its two replicas.
    handshake(&mut r, 2);
}

/// SIGHUP with a `[[service]]` gone from the file: the service takes no
/// new connection (a SYN is refused as by a closed port, nothing reaches
/// a replica), its open connection goes on to the end, and its name, VIP
/// port and — once that connection is gone — its replicas' ports are free
/// for a service added again.
#[test]
fn a_service_removed_at_run_time_lets_its_connections_finish() {
    let mut r = router(2);
    handshake(&mut r, 2);
    assert_eq!(r.remove_service(t(3), "t"), Ok(1));
    assert!(log_events(&mut r)
        .iter()
        .any(|e| matches!(e, Event::ServiceRemoved { service, connections: 1 } if service == "t")));
    let st = r.status();
    assert!(st.services[0].removed && st.services[0].connections == 1);
    // The open connection: the client's bytes still reach both replicas.
    client_data(&mut r, t(4), b"PING\r\n");
    let out = drain(&mut r);
    let to: Vec<Ipv4Addr> = out
        .iter()
        .filter(|o| o.payload == b"PING\r\n")
        .map(|o| o.dst)
        .collect();
    assert_eq!(to, vec![replica(1), replica(2)], "{out:?}");
    // A new connection: refused, nothing to a replica.
    assert_eq!(syn_targets(&mut r, t(5), CPORT + 1), Vec::<Ipv4Addr>::new());
    let mut syn = Repr::new(CPORT + 2, PORT, SeqNum(CISN), SeqNum(0), flags::SYN, 64240);
    syn.mss = Some(1460);
    r.handle_packet(t(5), seg(CLIENT, VIP, syn, b""));
    let out = drain(&mut r);
    assert!(
        out.len() == 1 && out[0].dst == CLIENT && out[0].r.flags & flags::RST != 0,
        "{out:?}"
    );
    assert!(matches!(
        r.remove_service(t(6), "t"),
        Err(ftnet_core::MembershipError::NoService(_))
    ));
    assert!(matches!(
        r.add_replica(t(6), "t", replica(3)),
        Err(ftnet_core::MembershipError::NoService(_))
    ));
    // Added again while its connection is open: its replicas' ports are
    // still that connection's.
    let again = Service {
        name: "t".into(),
        vip: VIP,
        ports: vec![PORT],
        replicas: vec![replica(1), replica(2)],
        voting: Default::default(),
        stateless: false,
        ack: ftnet_core::Ack::All,
        delivery: Default::default(),
    };
    assert!(matches!(
        r.add_service(t(7), again.clone()),
        Err(ftnet_core::MembershipError::PortBusy { connections: 1, .. })
    ));
    // With other replicas it starts at once (the name and the VIP port
    // are free), and takes new connections.
    let mut other = again.clone();
    other.replicas = vec![replica(3)];
    r.add_service(t(8), other).unwrap();
    assert_eq!(syn_targets(&mut r, t(9), CPORT + 3), vec![replica(3)]);
    assert_eq!(r.live_services().len(), 1);
}

/// Two replicas of an ordered service lost together both come back: the
/// second one's join, refused while the first one's runs (one join at a
/// time per service), is tried again by the router itself once the service
/// is free, without an operator or a new registration.
#[test]
fn a_join_refused_while_another_runs_starts_after_it() {
    let mut r = sequencer_router(4);
    r.host_lost(t(1), replica(3));
    r.host_lost(t(1), replica(4));
    log_events(&mut r);
    let id = r.join_replica(t(10), "t", replica(3)).expect("join");
    let busy = r.join_replica(t(10), "t", replica(4));
    assert!(
        matches!(&busy, Err(ftnet_core::MembershipError::CannotJoin { why, .. }) if why.contains("joins after it")),
        "{busy:?}"
    );
    r.handle_timeout(t(12));
    r.checkpoint_taken(t(20), id, Ok("d1".into()));
    // While the first join runs, the second waits (no second JoinStarted).
    r.handle_timeout(t(400));
    let ev = log_events(&mut r);
    assert!(
        !ev.iter()
            .any(|e| matches!(e, Event::JoinStarted { replica: a, .. } if *a == replica(4))),
        "{ev:?}"
    );
    r.state_restored(t(500), id, Ok("d1".into()));
    let ev = log_events(&mut r);
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::Joined { replica: a, .. } if *a == replica(3))),
        "{ev:?}"
    );
    r.handle_timeout(t(800));
    let ev = log_events(&mut r);
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::JoinStarted { replica: a, .. } if *a == replica(4))),
        "the second join starts by itself: {ev:?}"
    );
}

/// A service that does not vote compares the later copies after the fact:
/// replica 3's reply differs from what replicas 1 and 2 sent, so it is
/// counted, logged with the offset, and taken out of the service (a
/// stateful one: its state differs). A replica that cut the same bytes into
/// other segments is not a difference.
#[test]
fn without_voting_a_minority_reply_is_found_and_taken_out() {
    let mut r = router(3);
    let (risn, isns) = handshake(&mut r, 3);
    client_bytes(&mut r, t(1), risn, 0, b"GET k\r\n");
    drain(&mut r);
    // One reply of 6000 bytes (two blocks): replica 1 in one segment,
    // replica 2 in three, replica 3 with one byte changed past the first
    // block.
    let reply: Vec<u8> = (0..6000u32).map(|x| (x % 253) as u8).collect();
    from_replica(&mut r, t(2), &isns, 1, (1, 8, 7000), &reply);
    for (a, b) in [(0usize, 100usize), (100, 4200), (4200, 6000)] {
        from_replica(
            &mut r,
            t(2),
            &isns,
            2,
            (1 + a as u32, 8, 7000),
            &reply[a..b],
        );
    }
    assert_eq!(r.counters().divergences, 0, "same bytes, other cuts");
    assert!(log_events(&mut r).is_empty());
    let mut bad = reply.clone();
    bad[5000] ^= 0x20;
    from_replica(&mut r, t(3), &isns, 3, (1, 8, 7000), &bad);
    assert_eq!(r.counters().divergences, 1);
    let ev = log_events(&mut r);
    assert!(
        ev.iter().any(|e| matches!(e, Event::OutputDiffers { replica: a, offset: 6000, agreeing: 2, live: 3, evicted: true, .. } if *a == replica(3))),
        "{ev:?}"
    );
    assert!(
        ev.iter().any(|e| matches!(e, Event::Evicted { replica: a, reason: EvictReason::Diverged, .. } if *a == replica(3))),
        "{ev:?}"
    );
    let st = r.status();
    assert_eq!(
        st.services[0].replicas[2].state,
        ftnet_core::MemberState::Down
    );
    assert!(st.services[0].replicas[0].alive && st.services[0].replicas[1].alive);
}

/// Two replicas that differ: nobody can be blamed. Counted and reported once
/// per connection; both stay.
#[test]
fn without_voting_two_replicas_that_differ_are_reported_not_evicted() {
    let mut c = config_of(2, false);
    c.services[0].voting = ftnet_core::Voting::Fastest;
    let mut r = Router::new(c, [9; 16]);
    let (risn, isns) = handshake(&mut r, 2);
    client_bytes(&mut r, t(1), risn, 0, b"TIME\r\n");
    drain(&mut r);
    from_replica(&mut r, t(2), &isns, 1, (1, 7, 7000), b":1000\r\n");
    from_replica(&mut r, t(2), &isns, 2, (1, 7, 7000), b":1001\r\n");
    assert_eq!(r.counters().divergences, 1);
    let ev = log_events(&mut r);
    let diff: Vec<_> = ev
        .iter()
        .filter(|e| {
            matches!(
                e,
                Event::OutputDiffers {
                    evicted: false,
                    live: 2,
                    offset: 7,
                    ..
                }
            )
        })
        .collect();
    assert_eq!(diff.len(), 2, "both named: {ev:?}");
    assert!(
        !ev.iter().any(|e| matches!(e, Event::Evicted { .. })),
        "{ev:?}"
    );
    // The next difference is counted, not logged again.
    from_replica(&mut r, t(3), &isns, 1, (8, 7, 7001), b"+a\r\n");
    from_replica(&mut r, t(3), &isns, 2, (8, 7, 7001), b"+b\r\n");
    assert_eq!(r.counters().divergences, 2);
    assert!(!log_events(&mut r)
        .iter()
        .any(|e| matches!(e, Event::OutputDiffers { .. })));
    assert!(r.status().services[0].replicas.iter().all(|x| x.alive));
}

/// Output voting with two replicas: one's server dies and its kernel closes
/// the socket (a FIN) where the other sends on. No majority can form, but
/// this is a crash, not a divergence: the replica that closed early leaves
/// the connection (as without voting, §III-D), the other's bytes are
/// decided and reach the client. (The tie policy used to keep the replica
/// listed first, the dead one, and evict the live one: the connection
/// ended with the crash.)
#[test]
fn a_vote_between_a_fin_and_more_bytes_takes_the_fin_for_a_crash() {
    let mut c = Config::default();
    c.services.push(Service {
        name: "t".into(),
        vip: VIP,
        ports: vec![PORT],
        replicas: vec![replica(1), replica(2)],
        voting: ftnet_core::Voting::Majority {
            tie: ftnet_core::Tie::First,
        },
        stateless: false,
        ack: ftnet_core::Ack::All,
        delivery: Default::default(),
    });
    let mut r = Router::new(c, [9; 16]);
    let (risn, isns) = handshake(&mut r, 2);
    client_bytes(&mut r, t(1), risn, 0, b"GET k\r\n");
    drain(&mut r);
    for i in 1..=2u8 {
        from_replica(&mut r, t(2), &isns, i, (1, 8, 7000), b"+OK\r\n");
    }
    let out = drain(&mut r);
    assert!(out
        .iter()
        .any(|o| o.dst == CLIENT && o.payload == b"+OK\r\n"));
    let mut fin = Repr::new(
        PORT,
        CPORT,
        SeqNum(isns[0]).add(6),
        SeqNum(CISN).add(8),
        flags::ACK | flags::FIN,
        500,
    );
    fin.timestamps = Some((7001, 1001));
    r.handle_packet(t(3), seg(replica(1), CLIENT, fin, b""));
    from_replica(&mut r, t(3), &isns, 2, (6, 8, 7001), b"+MORE\r\n");
    let ev = log_events(&mut r);
    assert!(
        ev.iter().any(|e| matches!(e, Event::Evicted { replica: a, reason: EvictReason::Fin, .. } if *a == replica(1))),
        "{ev:?}"
    );
    assert!(
        !ev.iter()
            .any(|e| matches!(e, Event::Diverged { .. } | Event::ConnectionLost { .. })),
        "{ev:?}"
    );
    let out = drain(&mut r);
    assert!(
        out.iter()
            .any(|o| o.dst == CLIENT && o.payload == b"+MORE\r\n"),
        "{out:?}"
    );
}

/// Output voting keeps the decided bytes for the slowest live replica
/// until it sends them too, and evicts one more than 16 MiB behind as
/// lagging. A replica slower than the others but alive (it lost input and
/// waits for its retransmission, or its CPU is busy) is not to be taken
/// out for that: the faster replicas' windows end 8 MiB past the slowest's
/// output, so the group goes at its pace, and once it moves on they are
/// sent a window update (they would otherwise wait for a zero-window
/// probe while the client waits for the bytes the group holds).
#[test]
fn under_voting_a_slow_replica_holds_the_others_back_instead_of_leaving() {
    const LEAD: u32 = 8 << 20;
    const CHUNK: u32 = 1_400;
    let mut c = config_of(3, false);
    c.services[0].voting = ftnet_core::Voting::Majority {
        tie: ftnet_core::Tie::First,
    };
    let mut r = Router::new(c, [9; 16]);
    let (risn, isns) = handshake(&mut r, 3);
    client_bytes(&mut r, t(3), risn, 0, b"GET k");
    drain(&mut r);
    // Replica 3 acknowledges the request and sends nothing yet.
    from_replica(&mut r, t(4), &isns, 3, (1, 6, 7000), b"");
    let byte = |off: u32| (off.wrapping_mul(2_654_435_761) >> 24) as u8;
    let bytes = |from: u32, len: u32| -> Vec<u8> { (from..from + len).map(byte).collect() };
    // Replica-space offsets (past its ISN) of each leader's next byte and
    // of the right edge of the last window the router sent it.
    let mut nxt = [1u32; 2];
    let mut edge = [1u32; 2];
    let mut got = 1u32; // the client's next byte, past the router's ISN
    let mut cut_to = None;
    let mut widest = 0;
    let mut ts = 7001;
    for k in 0..400u64 {
        let now = Instant::from_micros(5_000 + k * 500);
        let mut sent = false;
        for l in 0..2 {
            for _ in 0..45 {
                let n = CHUNK.min(edge[l].saturating_sub(nxt[l]));
                if n == 0 {
                    break;
                }
                from_replica(
                    &mut r,
                    now,
                    &isns,
                    l as u8 + 1,
                    (nxt[l], 6, ts),
                    &bytes(nxt[l], n),
                );
                nxt[l] += n;
                sent = true;
            }
        }
        ts += 1;
        for o in drain(&mut r) {
            if o.dst == CLIENT && !o.payload.is_empty() {
                got = got.max(o.r.seq.diff(SeqNum(risn)) as u32 + o.payload.len() as u32);
            }
        }
        // The client reads everything at once: its window stays 8 MiB.
        let a = Repr::new(
            CPORT,
            PORT,
            SeqNum(CISN).add(6),
            SeqNum(risn).add(got),
            flags::ACK,
            0xffff,
        );
        r.handle_packet(now, seg(CLIENT, VIP, a, b""));
        for o in drain(&mut r) {
            for l in 0..2 {
                if o.dst == replica(l as u8 + 1) && o.r.flags & flags::ACK != 0 {
                    let e = o.r.ack.diff(SeqNum(isns[l])) as u32 + (u32::from(o.r.window) << 7);
                    widest = widest.max(e);
                    if e < got + (0xffff << 7) {
                        cut_to.get_or_insert(e);
                    }
                    edge[l] = edge[l].max(e);
                }
            }
        }
        if !sent && k > 2 || nxt[0] > 2 * LEAD {
            break;
        }
    }
    let ev = log_events(&mut r);
    assert!(
        !ev.iter().any(|e| matches!(e, Event::Evicted { .. })),
        "nobody leaves: {ev:?}"
    );
    assert!(cut_to.is_some(), "the leaders' windows were cut");
    assert!(
        nxt[0] > LEAD - CHUNK - (1 << 7),
        "they went as far as the lead: {}",
        nxt[0]
    );
    assert_eq!(got, nxt[0], "the client got what both agree on");
    assert!(all_alive(&r));
    assert!(widest <= 1 + LEAD, "a window to {widest}, past the lead");
    assert_eq!(r.counters().pace_updates, 0);
    // Replica 3 catches up by 1 MiB: the leaders' windows open by as much
    // (updates go every 256 KiB it moves).
    const STEP: u32 = 256 << 10;
    let mut at = 1;
    while at < 1 + (1 << 20) {
        from_replica(&mut r, t(300), &isns, 3, (at, 6, ts), &bytes(at, CHUNK));
        at += CHUNK;
    }
    // (Segments of one MSS: the router hands larger ones to the kernel to
    // cut, checksum unfinished.)
    let out = drain(&mut r);
    for l in 0..2 {
        let e = out
            .iter()
            .filter(|o| o.dst == replica(l as u8 + 1) && o.r.flags & flags::ACK != 0)
            .map(|o| o.r.ack.diff(SeqNum(isns[l])) as u32 + (u32::from(o.r.window) << 7))
            .max();
        assert!(
            e.is_some_and(|e| e + STEP + CHUNK > edge[l] + (1 << 20) && e <= at + LEAD),
            "replica {}: window update to {e:?} (was {})",
            l + 1,
            edge[l]
        );
    }
    assert!(r.counters().pace_updates >= 2);
    assert!(all_alive(&r));
}

/// A replica behind the others is acknowledged only what it sent (Linux
/// drops an ACK beyond its SND.NXT); the bytes between that and the
/// client's ACK the client already holds, so its window reaches the
/// client's edge, not the client's window past its own ACK. Before, a
/// client whose window had closed (its buffer full of the others' bytes)
/// kept a replica 1,224 bytes behind from sending them until it read, and
/// after 1 s of that the replica was evicted as stalled, alive and correct
/// (a 64 KiB GET in a storm of them).
#[test]
fn a_replica_behind_may_send_what_the_client_holds_through_a_closed_window() {
    let mut r = router(3);
    let (risn, isns) = handshake(&mut r, 3);
    client_bytes(&mut r, t(3), risn, 0, b"GET k");
    drain(&mut r);
    let body: Vec<u8> = (0..3_000u32).map(|k| (k * 7) as u8).collect();
    // Replicas 1 and 2 send 3,000 bytes; replica 3 sent 1,776 of them.
    for (i, upto) in [(1, 3_000), (2, 3_000), (3, 1_776)] {
        reply_in_segments(&mut r, &isns, i, &body[..upto], |_| t(4));
    }
    let out = drain(&mut r);
    let to_client: usize = out
        .iter()
        .filter(|o| o.dst == CLIENT)
        .map(|o| o.payload.len())
        .sum();
    assert_eq!(to_client, 3_000);
    // The client holds all of it and its window closed.
    let a = Repr::new(
        CPORT,
        PORT,
        SeqNum(CISN).add(6),
        SeqNum(risn).add(3_001),
        flags::ACK,
        0,
    );
    r.handle_packet(t(5), seg(CLIENT, VIP, a, b""));
    let out = drain(&mut r);
    let to = |i: u8| {
        out.iter()
            .find(|o| o.dst == replica(i))
            .unwrap_or_else(|| panic!("the client's ACK reaches replica {i}: {out:?}"))
    };
    for i in [1, 2] {
        assert_eq!(to(i).r.ack, SeqNum(isns[i as usize - 1]).add(3_001));
        assert_eq!(
            to(i).r.window,
            0,
            "a replica level with the client gets its window"
        );
    }
    let o = to(3);
    assert_eq!(
        o.r.ack,
        SeqNum(isns[2]).add(1_777),
        "acknowledged what it sent"
    );
    // The client's scale is 7: 1,224 bytes are 9.6 units, rounded up.
    assert_eq!(o.r.window, 10, "its window reaches the client's edge");
    // It sends them: the client gets nothing new, the replica is
    // acknowledged on the client's behalf and nobody is taken out.
    from_replica(
        &mut r,
        t(6),
        &isns,
        3,
        (1_777, 6, 7001),
        &body[1_776..2_800],
    );
    from_replica(&mut r, t(6), &isns, 3, (2_801, 6, 7001), &body[2_800..]);
    let out = drain(&mut r);
    assert!(
        out.iter().all(|o| o.dst != CLIENT || o.payload.is_empty()),
        "nothing new for the client: {out:?}"
    );
    let back = out
        .iter()
        .filter(|o| o.dst == replica(3))
        .map(|o| o.r.ack)
        .max_by_key(|a| a.diff(SeqNum(isns[2])));
    assert_eq!(
        back,
        Some(SeqNum(isns[2]).add(3_001)),
        "acknowledged on the client's behalf"
    );
    run_to(&mut r, t(3_000));
    let ev = log_events(&mut r);
    assert!(
        !ev.iter().any(|e| matches!(e, Event::Evicted { .. })),
        "nobody leaves: {ev:?}"
    );
}

/// As above, but replica 3 is 1,096 bytes behind the client's edge, less
/// than a segment: Linux sends nothing into a window that cannot take its
/// next segment whole (`tcp_snd_wnd_test`), and every ACK it gets, the
/// router's own probes among them, restarts its window probe timer
/// (`tcp_ack_probe`). It answers every probe and sends nothing until the
/// client reads. Before, it was evicted as stalled after 1 s, alive and
/// correct (e2e `closed-window`, a FLAKY). Once the client reads, its
/// window has room for a segment, and a replica that still sends nothing
/// a second later is taken out as before.
#[test]
fn a_replica_less_than_a_segment_behind_a_closed_window_waits_for_the_client() {
    let mut r = router(3);
    let (risn, isns) = handshake(&mut r, 3);
    client_bytes(&mut r, t(3), risn, 0, b"GET k");
    drain(&mut r);
    let body: Vec<u8> = (0..4_000u32).map(|k| (k * 7) as u8).collect();
    // Replica 3 sends 1,904 bytes; then replicas 1 and 2 send 3,000, one
    // segment a millisecond.
    for (i, upto) in [(3, 1_904), (1, 3_000), (2, 3_000)] {
        reply_in_segments(&mut r, &isns, i, &body[..upto], |at| {
            t(if i == 3 { 4 } else { 5 + u64::from(at / 1_400) })
        });
    }
    drain(&mut r);
    // The client holds all 3,000 bytes and its window closed.
    let client_ack = |r: &mut Router, now: Instant, win: u16| {
        let a = Repr::new(
            CPORT,
            PORT,
            SeqNum(CISN).add(6),
            SeqNum(risn).add(3_001),
            flags::ACK,
            win,
        );
        r.handle_packet(now, seg(CLIENT, VIP, a, b""));
    };
    client_ack(&mut r, t(8), 0);
    let out = drain(&mut r);
    let w = out
        .iter()
        .find(|o| o.dst == replica(3))
        .map(|o| o.r.window)
        .expect("the client's ACK reaches replica 3");
    assert!(
        (w as u32) << 7 < 1_096 + 1_460,
        "less than a segment of room: {w}"
    );
    // Every replica answers whatever it is sent, replica 3 with a pure ACK
    // at its SND.NXT and nothing else, for `until`.
    let mut ts = 7001;
    let mut answer = |r: &mut Router, from: u64, until: u64, lead: u32| {
        let mut now = from;
        while now < until {
            now += 10;
            r.handle_timeout(t(now));
            for o in drain(r) {
                if let Some(i) = (1..=3u8).find(|&i| o.dst == replica(i)) {
                    let nxt = if i == 3 { 1 + 1_904 } else { 1 + lead };
                    ts += 1;
                    from_replica(r, t(now), &isns, i, (nxt, 6, ts), b"");
                }
            }
        }
    };
    answer(&mut r, 8, 4_000, 3_000);
    let ev = log_events(&mut r);
    assert!(
        !ev.iter().any(|e| matches!(e, Event::Evicted { .. })),
        "it waits for the client, alive: {ev:?}"
    );
    // The client reads: its window opens, and replicas 1 and 2 send their
    // last 1,000 bytes. Replica 3's window now has room for its segment;
    // it still sends nothing: its output stands still while theirs moved.
    client_ack(&mut r, t(4_001), 100);
    drain(&mut r);
    for i in [1, 2] {
        from_replica(&mut r, t(4_002), &isns, i, (3_001, 6, 9000), &body[3_000..]);
    }
    drain(&mut r);
    // Its standstill counts from the window that gave it room, not from
    // its last output 4 s ago: it is not taken out the moment the client
    // reads.
    answer(&mut r, 4_002, 4_900, 4_000);
    let ev = log_events(&mut r);
    assert!(
        !ev.iter().any(|e| matches!(e, Event::Evicted { .. })),
        "a second to use its room: {ev:?}"
    );
    answer(&mut r, 4_900, 7_000, 4_000);
    let ev = log_events(&mut r);
    assert!(
        ev.iter().any(|e| matches!(
            e,
            Event::Evicted { replica: a, reason: EvictReason::Stalled, .. } if *a == replica(3)
        )),
        "{ev:?}"
    );
}

/// The client closes (FIN) having got the reply from replicas 1 and 2
/// while replica 3 has sent only part of it. A lone server never sees its
/// client close before the client has what it had then; replica 3 would,
/// and nginx gives a reply up when its client closes: it closed in the
/// middle of bytes the client held, the vote took that for divergence and
/// the replica left the service (e2e `vote-slow`, `fin-behind`). The FIN
/// goes to replica 3 once it has sent what the client had acknowledged.
#[test]
fn the_clients_fin_waits_for_a_replica_behind_what_the_client_had() {
    let mut c = config_of(3, false);
    c.services[0].voting = ftnet_core::Voting::Majority {
        tie: ftnet_core::Tie::First,
    };
    let mut r = Router::new(c, [9; 16]);
    let (risn, isns) = handshake(&mut r, 3);
    client_bytes(&mut r, t(3), risn, 0, b"GET k");
    drain(&mut r);
    let body: Vec<u8> = (0..3_000u32).map(|k| (k * 13) as u8).collect();
    let send = |r: &mut Router, now, i: u8, from: u32, to: u32| {
        let mut at = from;
        while at < to {
            let n = (to - at).min(1_400);
            from_replica(
                r,
                now,
                &isns,
                i,
                (1 + at, 6, 7000),
                &body[at as usize..(at + n) as usize],
            );
            at += n;
        }
    };
    send(&mut r, t(4), 1, 0, 3_000);
    send(&mut r, t(4), 2, 0, 3_000);
    send(&mut r, t(4), 3, 0, 1_000);
    let out = drain(&mut r);
    let to_client: usize = out
        .iter()
        .filter(|o| o.dst == CLIENT)
        .map(|o| o.payload.len())
        .sum();
    assert_eq!(to_client, 3_000);
    // The client has all 3,000 bytes and closes.
    let out = client_fin(&mut r, t(5), risn, 5, 3_001);
    let to = |out: &[Out], i: u8| -> Vec<Repr> {
        out.iter()
            .filter(|o| o.dst == replica(i))
            .map(|o| o.r.clone())
            .collect()
    };
    for i in [1, 2] {
        assert!(
            to(&out, i)
                .iter()
                .any(|s| s.flags & flags::FIN != 0 && s.seq == SeqNum(CISN).add(6)),
            "replica {i}, level with the client, gets its FIN: {out:?}"
        );
    }
    let r3 = to(&out, 3);
    assert!(!r3.is_empty(), "replica 3 gets the client's ACK: {out:?}");
    assert!(
        r3.iter().all(|s| s.flags & flags::FIN == 0),
        "no FIN for replica 3 while it is behind what the client had: {r3:?}"
    );
    assert_eq!(r.counters().fins_held, 1);
    // The client repeats its FIN (the group has not acknowledged it): still
    // held.
    let r3 = to(&client_fin(&mut r, t(205), risn, 5, 3_001), 3);
    assert!(r3.iter().all(|s| s.flags & flags::FIN == 0), "{r3:?}");
    // Replica 3 sends the rest of its reply: then it gets the FIN.
    send(&mut r, t(206), 3, 1_000, 2_400);
    let r3 = to(&drain(&mut r), 3);
    assert!(
        r3.iter().all(|s| s.flags & flags::FIN == 0),
        "600 bytes short still: {r3:?}"
    );
    send(&mut r, t(207), 3, 2_400, 3_000);
    let out = drain(&mut r);
    assert!(
        out.iter().all(|o| o.dst != CLIENT || o.payload.is_empty()),
        "nothing new for the client: {out:?}"
    );
    let r3 = to(&out, 3);
    assert!(
        r3.iter().any(|s| s.flags & flags::FIN != 0
            && s.seq == SeqNum(CISN).add(6)
            && s.ack == SeqNum(isns[2]).add(3_001)),
        "replica 3 caught up: the client's FIN, acknowledging its reply: {r3:?}"
    );
    // Every replica acknowledges the FIN and closes where the reply ends.
    for i in 1..=3u8 {
        fin_from_replica(&mut r, t(208), &isns, i, (3_001, 7, 7001));
    }
    let out = drain(&mut r);
    assert!(
        out.iter()
            .any(|o| o.dst == CLIENT && o.r.flags & flags::FIN != 0),
        "the group's FIN reaches the client: {out:?}"
    );
    run_to(&mut r, t(3_000));
    let ev = log_events(&mut r);
    assert!(
        !ev.iter()
            .any(|e| matches!(e, Event::Evicted { .. } | Event::Diverged { .. })),
        "nobody leaves: {ev:?}"
    );
    assert!(all_alive(&r));
}

/// A draining router (`ftnet drain`) takes no new connection — the SYN is
/// dropped, counted, and nothing reaches a replica — while an open one goes
/// on; `open_connections` is what the drain waits for. Draining off takes
/// new connections again.
#[test]
fn a_draining_router_takes_no_new_connection_and_serves_the_open_ones() {
    let mut r = router(2);
    let (risn, _isns) = handshake(&mut r, 2);
    assert_eq!(r.open_connections(), 1);
    r.set_draining(true);
    let mut syn = Repr::new(CPORT + 1, PORT, SeqNum(CISN), SeqNum(0), flags::SYN, 64240);
    syn.mss = Some(1460);
    r.handle_packet(t(1), seg(CLIENT, VIP, syn.clone(), b""));
    assert!(drain(&mut r).is_empty(), "nothing to the replicas, no RST");
    assert_eq!(dropped(&r, "draining"), 1);
    assert_eq!(r.connections(), 1);
    let out = client_bytes(&mut r, t(2), risn, 0, b"still here");
    assert_eq!(
        out.len(),
        2,
        "the open connection's bytes reach both replicas"
    );
    r.set_draining(false);
    r.handle_packet(t(3), seg(CLIENT, VIP, syn, b""));
    assert_eq!(drain(&mut r).len(), 2, "a SYN to each replica again");
}

/// `n` replicas of service "t" that acknowledge the client from the
/// router's input log once `k` replicas have its bytes (`Ack::Log`), each
/// connection's log holding at most `cap` bytes.
fn router_log(n: u8, k: u8, cap: usize) -> Router {
    let mut c = Config::default();
    c.services.push(Service {
        name: "t".into(),
        vip: VIP,
        ports: vec![PORT],
        replicas: (1..=n).map(replica).collect(),
        voting: Default::default(),
        stateless: false,
        ack: ftnet_core::Ack::Log { replicas: k },
        delivery: Default::default(),
    });
    c.limits.log_per_connection = cap;
    Router::new(c, [9; 16])
}

/// A client segment at stream offset `off` (bytes after its SYN), with
/// the client's ACK of the router's SYN.
fn client_at(risn: u32, off: u32, fl: u8, payload: &[u8]) -> Packet {
    let mut d = Repr::new(
        CPORT,
        PORT,
        SeqNum(CISN).add(1 + off),
        SeqNum(risn).add(1),
        flags::ACK | fl,
        502,
    );
    d.timestamps = Some((1002 + off, 0));
    seg(CLIENT, VIP, d, payload)
}

/// The client bytes (and FIN) segments to replica `i` carried, by their
/// stream offset.
fn to_replica(out: &[Out], i: u8) -> Vec<(u32, Vec<u8>, bool)> {
    out.iter()
        .filter(|o| o.dst == replica(i) && o.r.flags & flags::RST == 0)
        .filter(|o| !o.payload.is_empty() || o.r.flags & flags::FIN != 0)
        .map(|o| {
            (
                o.r.seq.diff(SeqNum(CISN).add(1)) as u32,
                o.payload.clone(),
                o.r.flags & flags::FIN != 0,
            )
        })
        .collect()
}

/// Run the router's timers until it sends replica `i` client bytes or a
/// FIN, at most until `by`; what it sent then.
fn until_sent(r: &mut Router, i: u8, by: Instant) -> Vec<Out> {
    while let Some(due) = r.poll_timeout().filter(|d| *d <= by) {
        r.handle_timeout(due);
        let out = drain(r);
        if !to_replica(&out, i).is_empty() {
            return out;
        }
    }
    Vec::new()
}

#[test]
fn with_an_input_log_the_first_replica_acknowledges_and_the_router_repairs_a_replica_that_lost_a_segment(
) {
    let mut r = router_log(3, 1, 1 << 20);
    let (risn, isns) = handshake(&mut r, 3);
    r.handle_packet(t(10), client_at(risn, 0, flags::PSH, b"hello"));
    assert_eq!(drain(&mut r).len(), 3, "to every replica");
    assert_eq!(r.counters().log_bytes, 5, "the router keeps the bytes");
    // Replica 1 has them: the client is acknowledged at once, although
    // replicas 2 and 3 have not answered (with `ack = "all"` it would
    // wait for the slowest).
    r.handle_packet(t(11), ack_from(1, isns[0], SeqNum(CISN).add(6), 500));
    let out = drain(&mut r);
    assert!(
        out.iter()
            .any(|o| o.dst == CLIENT && o.r.ack == SeqNum(CISN).add(6)),
        "the client is acknowledged when the log and one replica hold its bytes: {out:?}"
    );
    // Replica 2 has them too; replica 3 lost the segment and is silent.
    r.handle_packet(t(12), ack_from(2, isns[1], SeqNum(CISN).add(6), 500));
    drain(&mut r);
    // Its liveness probe is due (a quarter of the detection time): it
    // gets the lost bytes from the router, not a keep-alive.
    let out = until_sent(&mut r, 3, t(40));
    assert_eq!(
        to_replica(&out, 3),
        vec![(0, b"hello".to_vec(), false)],
        "replica 3 gets the bytes it lacks: {out:?}"
    );
    assert!(to_replica(&out, 1).is_empty() && to_replica(&out, 2).is_empty());
    r.handle_packet(t(41), ack_from(3, isns[2], SeqNum(CISN).add(6), 500));
    drain(&mut r);
    assert_eq!(
        r.counters().log_bytes,
        0,
        "every replica has them: the log lets go"
    );
    assert_eq!(r.counters().log_resent_bytes, 5);
    assert!(
        !log_events(&mut r)
            .iter()
            .any(|e| matches!(e, Event::Evicted { .. })),
        "nobody evicted"
    );
}

#[test]
fn with_an_input_log_a_duplicate_ack_draws_the_lost_segment_and_a_window_update_the_rest() {
    let mut r = router_log(2, 1, 1 << 20);
    let (risn, isns) = handshake(&mut r, 2);
    r.handle_packet(t(10), client_at(risn, 0, flags::PSH, b"aaaa"));
    r.handle_packet(t(10), client_at(risn, 4, flags::PSH, b"bbbb"));
    drain(&mut r);
    r.handle_packet(t(11), ack_from(1, isns[0], SeqNum(CISN).add(9), 500));
    drain(&mut r);
    // Replica 2 lost "aaaa": it repeats its ACK of the SYN.
    r.handle_packet(t(12), ack_from(2, isns[1], SeqNum(CISN).add(1), 500));
    let out = drain(&mut r);
    assert_eq!(
        to_replica(&out, 2),
        vec![(0, b"aaaabbbb".to_vec(), false)],
        "one segment at the hole, as much as it holds: {out:?}"
    );
    assert!(
        out.iter()
            .all(|o| o.dst != CLIENT || o.r.ack == SeqNum(CISN).add(9)),
        "the client is not asked to repeat: {out:?}"
    );
    // It takes it, then closes its window at 4: nothing more fits.
    r.handle_packet(t(13), ack_from(2, isns[1], SeqNum(CISN).add(5), 0));
    let out = drain(&mut r);
    assert!(to_replica(&out, 2).is_empty(), "{out:?}");
    // The window opens with a duplicate ACK: the router has already sent
    // "bbbb" once (it was beyond nothing then), so only the silence timer
    // would repeat it; a fresh client byte beyond its window then is sent
    // when the window opens.
    r.handle_packet(t(14), client_at(risn, 8, flags::PSH, b"c"));
    drain(&mut r);
    r.handle_packet(t(15), ack_from(2, isns[1], SeqNum(CISN).add(9), 500));
    let out = drain(&mut r);
    assert_eq!(
        to_replica(&out, 2),
        vec![(8, b"c".to_vec(), false)],
        "{out:?}"
    );
}

#[test]
fn with_an_input_log_a_lagging_replica_holds_the_client_back_only_at_the_logs_bound() {
    let mut r = router_log(2, 1, 1000);
    let (risn, isns) = handshake(&mut r, 2);
    // Replica 2's window is small (2 << 8 bytes): with `ack = "all"` the
    // client could send no further.
    r.handle_packet(t(5), ack_from(2, isns[1], SeqNum(CISN).add(1), 2));
    drain(&mut r);
    let data = vec![7u8; 1400];
    r.handle_packet(t(10), client_at(risn, 0, flags::PSH, &data));
    drain(&mut r);
    assert_eq!(r.counters().log_bytes, 1000, "at most the bound");
    assert_eq!(r.counters().log_full, 1);
    r.handle_packet(t(11), ack_from(1, isns[0], SeqNum(CISN).add(1401), 500));
    let out = drain(&mut r);
    let to_client: Vec<&Out> = out.iter().filter(|o| o.dst == CLIENT).collect();
    assert_eq!(to_client.len(), 1, "{out:?}");
    let a = &to_client[0].r;
    assert_eq!(
        a.ack,
        SeqNum(CISN).add(1001),
        "acknowledged only as far as the log holds the bytes"
    );
    // The window: no further than the bound beyond the slowest replica
    // (the group's scale is 8: replica 2 announced 7 + 1).
    let edge = a.ack.add(u32::from(a.window) << 8);
    assert!(
        !edge.is_after(SeqNum(CISN).add(1001)),
        "window edge {} beyond slowest + bound",
        edge.diff(SeqNum(CISN).add(1))
    );
    // Replica 2 catches up: the whole stream is acknowledged.
    r.handle_packet(t(12), ack_from(2, isns[1], SeqNum(CISN).add(1401), 500));
    let out = drain(&mut r);
    assert!(
        out.iter()
            .any(|o| o.dst == CLIENT && o.r.ack == SeqNum(CISN).add(1401)),
        "{out:?}"
    );
    assert_eq!(r.counters().log_bytes, 0);
}

#[test]
fn with_an_input_log_a_lagging_replica_gets_the_clients_fin_from_the_router() {
    let mut r = router_log(2, 1, 1 << 20);
    let (risn, isns) = handshake(&mut r, 2);
    r.handle_packet(t(10), client_at(risn, 0, flags::PSH | flags::FIN, b"bye"));
    drain(&mut r);
    r.handle_packet(t(11), ack_from(1, isns[0], SeqNum(CISN).add(5), 500));
    let out = drain(&mut r);
    assert!(
        out.iter()
            .any(|o| o.dst == CLIENT && o.r.ack == SeqNum(CISN).add(5)),
        "the FIN is acknowledged with one replica: {out:?}"
    );
    let out = until_sent(&mut r, 2, t(40));
    assert_eq!(
        to_replica(&out, 2),
        vec![(0, b"bye".to_vec(), true)],
        "the bytes and the FIN: {out:?}"
    );
}

/// After a takeover, the input log died with the old router: on a
/// connection of a service that acknowledges from the log, a replica
/// behind another may lack bytes the client saw acknowledged, which
/// nobody can send it again. It leaves that connection at once (loudly,
/// `LogLost`) instead of stalling the order, and the stateful service; the
/// furthest stays, and a service that acknowledges what every replica has
/// keeps both.
#[test]
fn after_a_takeover_a_replica_behind_what_the_log_acknowledged_leaves_the_connection() {
    for log in [true, false] {
        let mut r = if log {
            router_log(2, 1, 1 << 20)
        } else {
            router(2)
        };
        let (risn, isns) = (7_000_000u32, [1_000_000u32, 2_000_000]);
        adopt_two(&mut r, risn, isns, 0);
        // r1 has 86 client bytes, r2 only 40.
        for (i, got) in [(0usize, 86u32), (1, 40)] {
            let a = Repr::new(
                PORT,
                CPORT,
                SeqNum(isns[i]).add(1),
                SeqNum(CISN).add(1 + got),
                flags::ACK,
                64,
            );
            r.handle_packet(t(1), seg(replica(i as u8 + 1), CLIENT, a, b""));
        }
        drain(&mut r);
        assert_eq!(r.status().rebuilding, 0, "rebuilt");
        let evs = log_events(&mut r);
        let down = evs.iter().any(|e| {
            matches!(e, Event::ReplicaDown { replica: a, reason: EvictReason::LogLost, .. } if *a == replica(2))
        });
        let lost: Vec<Ipv4Addr> = evs
            .iter()
            .filter_map(|e| match e {
                Event::Evicted {
                    replica,
                    reason: EvictReason::LogLost,
                    ..
                } => Some(*replica),
                _ => None,
            })
            .collect();
        if log {
            assert_eq!(lost, vec![replica(2)], "the one behind leaves");
            // Its server went on without input the other applied: out of
            // the (stateful) service, until it joins with the group's state.
            assert!(down, "{evs:?}");
        } else {
            assert!(lost.is_empty(), "the client repeats what r2 lacks");
        }
    }
}

/// The client resets while a replica lacks bytes the others took (AR-TCP's
/// safe delivery, for the client's last words): with an input log that
/// replica gets them first, then the abort; a replica with every byte is
/// reset at once. Without it the lagging replica's shim would count the
/// reset connection's chunks complete with less input than the others had.
#[test]
fn with_an_input_log_a_client_reset_reaches_a_lagging_replica_after_its_bytes() {
    let mut r = router_log(2, 1, 1 << 20);
    let (risn, isns) = handshake(&mut r, 2);
    r.handle_packet(t(10), client_at(risn, 0, flags::PSH, b"SET k v"));
    drain(&mut r);
    r.handle_packet(t(11), ack_from(1, isns[0], SeqNum(CISN).add(8), 500));
    drain(&mut r);
    // Replica 2 lost the segment. The client resets at its SND.NXT.
    let rst = Repr::new(CPORT, PORT, SeqNum(CISN).add(8), SeqNum(0), flags::RST, 0);
    r.handle_packet(t(12), seg(CLIENT, VIP, rst, b""));
    let out = drain(&mut r);
    let rst_to = |out: &[Out], i: u8| {
        out.iter()
            .any(|o| o.dst == replica(i) && o.r.flags & flags::RST != 0)
    };
    assert!(
        rst_to(&out, 1),
        "replica 1 has every byte: reset at once: {out:?}"
    );
    assert_eq!(
        to_replica(&out, 2),
        vec![(0, b"SET k v".to_vec(), false)],
        "replica 2 gets the bytes it lacks first: {out:?}"
    );
    assert!(!rst_to(&out, 2), "and not the abort yet");
    assert_eq!(r.connections(), 1, "the connection stays for it");
    // A late segment from the client changes nothing.
    r.handle_packet(t(13), client_at(risn, 7, flags::PSH, b"more"));
    assert!(to_replica(&drain(&mut r), 2).is_empty());
    r.handle_packet(t(14), ack_from(2, isns[1], SeqNum(CISN).add(8), 500));
    let out = drain(&mut r);
    assert!(
        rst_to(&out, 2),
        "replica 2 has them: now the abort: {out:?}"
    );
    let rst2 = out
        .iter()
        .find(|o| o.dst == replica(2) && o.r.flags & flags::RST != 0)
        .expect("a RST");
    assert_eq!(rst2.r.seq, SeqNum(CISN).add(8), "at its RCV.NXT exactly");
    assert!(
        out.iter().all(|o| o.dst != CLIENT),
        "nothing for the client"
    );
    assert_eq!(r.connections(), 0);
    assert!(!log_events(&mut r)
        .iter()
        .any(|e| matches!(e, Event::Evicted { .. })));
}

/// The client's RST at its stream offset `off` (from its ISN).
fn client_rst(r: &mut Router, at: Instant, off: u32) {
    let rst = Repr::new(CPORT, PORT, SeqNum(CISN).add(off), SeqNum(0), flags::RST, 0);
    r.handle_packet(at, seg(CLIENT, VIP, rst, b""));
}

/// The sequence number of the RST `out` sends replica `i`, if any.
fn rst_seq_to(out: &[Out], i: u8) -> Option<SeqNum> {
    out.iter()
        .find(|o| o.dst == replica(i) && o.r.flags & flags::RST != 0)
        .map(|o| o.r.seq)
}

/// Run the timers until the connection is gone (at most until `until`):
/// what was sent meanwhile.
fn until_gone(r: &mut Router, until: Instant) -> Vec<Out> {
    let mut out = Vec::new();
    while let Some(due) = r.poll_timeout().filter(|d| *d <= until) {
        r.handle_timeout(due);
        out.extend(drain(r));
        if r.connections() == 0 {
            break;
        }
    }
    out
}

/// Without an input log, the client resets while one replica has
/// acknowledged its request and the other's ACK is still on its way (or
/// delayed): the first is reset at once, the second is probed and reset
/// once it acknowledged as much, at exactly its RCV.NXT. Before, it got the
/// RST at the client's sequence number: where its ACK was late that was
/// fine, but where it lacked the bytes its kernel only challenged the RST,
/// and the chunk it lacked held its server's input for ever.
#[test]
fn without_a_log_a_client_reset_waits_for_a_replica_whose_ack_is_late() {
    let mut r = router(2);
    let (risn, isns) = handshake(&mut r, 2);
    r.handle_packet(t(10), client_at(risn, 0, flags::PSH, b"SET k v"));
    drain(&mut r);
    r.handle_packet(t(11), ack_from(1, isns[0], SeqNum(CISN).add(8), 500));
    drain(&mut r);
    client_rst(&mut r, t(12), 8);
    let out = drain(&mut r);
    assert_eq!(rst_seq_to(&out, 1), Some(SeqNum(CISN).add(8)), "{out:?}");
    assert_eq!(
        rst_seq_to(&out, 2),
        None,
        "replica 2 is asked first: {out:?}"
    );
    assert!(out.iter().any(|o| o.dst == replica(2)), "a probe: {out:?}");
    assert_eq!(r.connections(), 1, "the connection stays for it");
    r.handle_packet(t(13), ack_from(2, isns[1], SeqNum(CISN).add(8), 500));
    let out = drain(&mut r);
    assert_eq!(rst_seq_to(&out, 2), Some(SeqNum(CISN).add(8)), "{out:?}");
    assert!(
        out.iter().all(|o| o.dst != CLIENT),
        "nothing for the client"
    );
    assert_eq!(r.connections(), 0);
    assert!(!log_events(&mut r)
        .iter()
        .any(|e| matches!(e, Event::Evicted { .. })));
}

/// Without an input log, a replica that lost the client's last bytes
/// (another acknowledged them) when the client resets can never get them:
/// it answers the probe with less, and after the failure-detection time it
/// leaves the service, loudly (`InputLost`), and is reset at its own
/// RCV.NXT so that its connection ends. It never goes on serving with less
/// input than the others.
#[test]
fn without_a_log_a_replica_that_lost_bytes_before_a_client_reset_leaves_the_service() {
    let mut r = router(2);
    let (risn, isns) = handshake(&mut r, 2);
    r.handle_packet(t(10), client_at(risn, 0, flags::PSH, b"SET k v"));
    drain(&mut r);
    r.handle_packet(t(11), ack_from(1, isns[0], SeqNum(CISN).add(8), 500));
    client_rst(&mut r, t(12), 8);
    drain(&mut r);
    // Its answer to the probe: it has nothing of the request.
    r.handle_packet(t(13), ack_from(2, isns[1], SeqNum(CISN).add(1), 500));
    assert!(drain(&mut r)
        .iter()
        .all(|o| o.dst != replica(2) || o.r.flags & flags::RST == 0));
    let out = until_gone(&mut r, t(5000));
    assert_eq!(r.connections(), 0, "gone");
    assert_eq!(
        rst_seq_to(&out, 2),
        Some(SeqNum(CISN).add(1)),
        "at its RCV.NXT exactly"
    );
    let evs = log_events(&mut r);
    assert!(
        evs.iter().any(|e| matches!(
            e,
            Event::Evicted { replica: a, reason: EvictReason::InputLost, .. } if *a == replica(2)
        )),
        "{evs:?}"
    );
    assert!(
        evs.iter().any(|e| matches!(
            e,
            Event::ReplicaDown { replica: a, reason: EvictReason::InputLost, .. } if *a == replica(2)
        )),
        "out of the service: {evs:?}"
    );
    assert!(!evs.iter().any(|e| matches!(
        e,
        Event::Evicted { replica: a, .. } if *a == replica(1)
    )));
}

/// Without an input log, a request and the client's RST back to back:
/// no replica's ACK has reached the router when the RST does. Each replica
/// is asked and reset once it acknowledged the request; one that lost it
/// (the sequencer numbered it as it went through: its server would wait
/// for that chunk for ever) leaves the service.
#[test]
fn without_a_log_a_reset_right_behind_a_request_waits_for_every_replica_to_have_it() {
    let mut r = router(2);
    let (risn, isns) = handshake(&mut r, 2);
    r.handle_packet(t(10), client_at(risn, 0, flags::PSH, b"SET k v"));
    client_rst(&mut r, t(10), 8);
    let out = drain(&mut r);
    assert!(
        out.iter().all(|o| o.r.flags & flags::RST == 0),
        "nobody acknowledged the request yet: nobody reset: {out:?}"
    );
    r.handle_packet(t(11), ack_from(1, isns[0], SeqNum(CISN).add(8), 500));
    let out = drain(&mut r);
    assert!(
        out.iter().any(|o| o.dst == replica(1)
            && o.r.flags & flags::RST != 0
            && o.r.seq == SeqNum(CISN).add(8)),
        "{out:?}"
    );
    until_gone(&mut r, t(5000));
    let evs = log_events(&mut r);
    assert_eq!(r.connections(), 0);
    assert!(
        evs.iter().any(|e| matches!(
            e,
            Event::Evicted { replica: a, reason: EvictReason::InputLost, .. } if *a == replica(2)
        )),
        "{evs:?}"
    );
}

/// Without an input log, bytes that no replica acknowledged by the end of
/// the wait are input none of them has: the same for every one. Each is
/// reset where it stands, and nobody is evicted.
#[test]
fn without_a_log_bytes_no_replica_took_before_a_client_reset_evict_nobody() {
    let mut r = router(2);
    let (risn, _isns) = handshake(&mut r, 2);
    r.handle_packet(t(10), client_at(risn, 0, flags::PSH, b"SET k v"));
    client_rst(&mut r, t(10), 8);
    let mut out = drain(&mut r);
    out.extend(until_gone(&mut r, t(5000)));
    assert_eq!(r.connections(), 0);
    for i in 1..=2 {
        assert_eq!(
            rst_seq_to(&out, i),
            Some(SeqNum(CISN).add(1)),
            "replica {i} reset at its RCV.NXT: {out:?}"
        );
    }
    let evs = log_events(&mut r);
    assert!(
        !evs.iter().any(|e| matches!(e, Event::Evicted { .. })),
        "{evs:?}"
    );
}

/// A replica that never takes the bytes the client's reset waits for is
/// evicted as stalled (loudly), and the connection is gone: the wait is
/// bounded.
#[test]
fn with_an_input_log_a_reset_waits_for_a_silent_replica_no_longer_than_failure_detection() {
    let mut r = router_log(2, 1, 1 << 20);
    let (risn, isns) = handshake(&mut r, 2);
    r.handle_packet(t(10), client_at(risn, 0, flags::PSH, b"SET k v"));
    r.handle_packet(t(11), ack_from(1, isns[0], SeqNum(CISN).add(8), 500));
    let rst = Repr::new(CPORT, PORT, SeqNum(CISN).add(8), SeqNum(0), flags::RST, 0);
    r.handle_packet(t(12), seg(CLIENT, VIP, rst, b""));
    drain(&mut r);
    while let Some(due) = r.poll_timeout().filter(|d| *d <= t(5000)) {
        r.handle_timeout(due);
        drain(&mut r);
        if r.connections() == 0 {
            break;
        }
    }
    assert_eq!(r.connections(), 0, "gone");
    assert!(log_events(&mut r).iter().any(|e| matches!(
        e,
        Event::Evicted { replica: a, reason: EvictReason::Stalled, .. } if *a == replica(2)
    )));
    assert_eq!(r.counters().log_bytes, 0, "the log is given back");
}
/// A replica whose FIN was lost on the way and which then crashed (its
/// RST one beyond what the router has of it: not exact, so not taken)
/// owes the FIN the other replica sent where its data ends. It is probed,
/// stays silent, and is evicted: the client gets its FIN. Before, the
/// client's FIN waited for it for good (simulation seed 10549).
#[test]
fn a_replica_whose_fin_was_lost_before_it_crashed_does_not_hold_the_clients_fin() {
    let mut r = router(2);
    let (risn, isns) = handshake(&mut r, 2);
    r.handle_packet(t(10), client_at(risn, 0, flags::FIN, b""));
    drain(&mut r);
    for i in 1..=2u8 {
        r.handle_packet(
            t(11),
            ack_from(i, isns[usize::from(i) - 1], SeqNum(CISN).add(2), 500),
        );
    }
    drain(&mut r);
    // Replica 1's FIN is lost; it dies: its RST carries SND.NXT past the FIN.
    let rst = Repr::new(
        PORT,
        CPORT,
        SeqNum(isns[0]).add(2),
        SeqNum(0),
        flags::RST,
        0,
    );
    r.handle_packet(t(12), seg(replica(1), CLIENT, rst, b""));
    drain(&mut r);
    let mut fin = Repr::new(
        PORT,
        CPORT,
        SeqNum(isns[1]).add(1),
        SeqNum(CISN).add(2),
        flags::ACK | flags::FIN,
        500,
    );
    fin.timestamps = Some((6000, 1001));
    r.handle_packet(t(13), seg(replica(2), CLIENT, fin.clone(), b""));
    assert!(
        drain(&mut r)
            .iter()
            .all(|o| o.dst != CLIENT || o.r.flags & flags::FIN == 0),
        "the FIN waits for replica 1's"
    );
    // Replica 2's FIN is not acknowledged: it sends it again on its
    // retransmission timeout (200 ms here).
    let mut fin_out = false;
    let mut retx = 213;
    while let Some(due) = r.poll_timeout().filter(|d| *d <= t(2000)) {
        let due = due.min(t(retx));
        if due == t(retx) {
            r.handle_packet(due, seg(replica(2), CLIENT, fin.clone(), b""));
            retx += 200;
        } else {
            r.handle_timeout(due);
        }
        fin_out |= drain(&mut r)
            .iter()
            .any(|o| o.dst == CLIENT && o.r.flags & flags::FIN != 0);
        if fin_out {
            break;
        }
    }
    assert!(
        fin_out,
        "the client gets the FIN once the silent replica is out"
    );
    assert!(log_events(&mut r).iter().any(|e| matches!(
        e,
        Event::Evicted { replica: a, reason: EvictReason::Stalled, .. } if *a == replica(1)
    )));
}

/// e2e idle/n3-kill with the second replica killed: its kernel's FIN
/// stands while the connection is idle for seconds, and the healthy two
/// owe it (asked once whether they live, they answer). When the client
/// speaks again one of them acknowledges its bytes a moment before the
/// other: that moment is no stall. (A version that started the
/// no-progress clock at the FIN evicted the slower healthy replica on
/// the spot.)
#[test]
fn an_owed_fin_does_not_start_the_no_progress_clock() {
    let mut r = router(3);
    let (risn, isns) = handshake(&mut r, 3);
    let fin = Repr::new(
        PORT,
        CPORT,
        SeqNum(isns[1]).add(1),
        SeqNum(CISN).add(1),
        flags::ACK | flags::FIN,
        500,
    );
    r.handle_packet(t(10), seg(replica(2), CLIENT, fin, b""));
    drain(&mut r);
    while let Some(due) = r.poll_timeout().filter(|d| *d <= t(3000)) {
        r.handle_timeout(due);
        for o in drain(&mut r) {
            for i in [1u8, 3] {
                if o.dst == replica(i) && o.r.flags & flags::RST == 0 {
                    let isn = isns[usize::from(i) - 1];
                    r.handle_packet(due, ack_from(i, isn, SeqNum(CISN).add(1), 500));
                }
            }
        }
    }
    drain(&mut r);
    client_bytes(&mut r, t(3000), risn, 0, b"INCR");
    r.handle_packet(t(3001), ack_from(1, isns[0], SeqNum(CISN).add(5), 500));
    drain(&mut r);
    r.handle_timeout(t(3001));
    drain(&mut r);
    r.handle_packet(t(3002), ack_from(3, isns[2], SeqNum(CISN).add(5), 500));
    drain(&mut r);
    let st = r.status();
    assert!(st.services[0].replicas[0].alive && st.services[0].replicas[2].alive);
    assert!(
        !log_events(&mut r).iter().any(|e| matches!(
            e,
            Event::Evicted { replica: a, .. } if *a == replica(1) || *a == replica(3)
        )),
        "a healthy replica was evicted"
    );
}

/// A replica retransmits its FIN from LAST-ACK on a connection the router
/// no longer has (its ACK of the client's FIN was lost, and the connection
/// was forgotten, or died with the previous router): the router answers as
/// a stack answers a segment for no connection, a RST at the FIN's ACK
/// number, so the replica does not hold the socket for minutes. Not before
/// the replica's agent registered and its records had time to come (a
/// connection it still serves is adopted from them), and never anything
/// but a FIN.
#[test]
fn a_replicas_fin_for_no_connection_is_answered_with_a_reset() {
    let mut r = router(2);
    r.require_agents();
    let mut fin = Repr::new(
        PORT,
        CPORT,
        SeqNum(5_000),
        SeqNum(CISN).add(10),
        flags::ACK | flags::FIN,
        500,
    );
    fin.timestamps = Some((6000, 1001));
    let fin = seg(replica(1), CLIENT, fin, b"");
    r.handle_packet(t(10), fin.clone());
    assert!(drain(&mut r).is_empty(), "its agent has not registered");
    r.handle_timeout(t(20));
    r.agent_registered(replica(1));
    r.handle_packet(t(500), fin.clone());
    assert!(
        drain(&mut r).is_empty(),
        "its records may still be on their way"
    );
    r.handle_packet(t(2100), fin);
    let out = drain(&mut r);
    assert_eq!(out.len(), 1, "{out:?}");
    let o = &out[0];
    assert_eq!((o.src, o.dst), (CLIENT, replica(1)));
    assert_eq!((o.r.src_port, o.r.dst_port), (CPORT, PORT));
    assert_eq!(o.r.flags, flags::RST);
    assert_eq!(o.r.seq, SeqNum(CISN).add(10));
    // Data or a bare ACK for no connection: nothing.
    let ack = Repr::new(
        PORT,
        CPORT,
        SeqNum(5_000),
        SeqNum(CISN).add(10),
        flags::ACK,
        500,
    );
    r.handle_packet(t(2101), seg(replica(1), CLIENT, ack, b"x"));
    assert!(drain(&mut r).is_empty());
    assert_eq!(dropped(&r, "unknown_connection"), 4);
}

#[test]
fn the_client_is_never_told_a_lower_ack_when_a_replica_that_made_up_the_count_leaves() {
    // Two of three replicas with the log acknowledge the client; the third
    // lags. Replica 2 then leaves: the group's count falls back to replica
    // 3's position, but the log still holds the bytes the client was
    // acknowledged, and a receiver may drop a segment whose ACK lies below
    // its SND.UNA, data and all (smoltcp does).
    let mut r = router_log(3, 2, 1 << 20);
    let (risn, isns) = handshake(&mut r, 3);
    r.handle_packet(t(10), client_at(risn, 0, flags::PSH, b"hello"));
    drain(&mut r);
    r.handle_packet(t(11), ack_from(1, isns[0], SeqNum(CISN).add(6), 500));
    r.handle_packet(t(11), ack_from(2, isns[1], SeqNum(CISN).add(6), 500));
    let out = drain(&mut r);
    assert!(
        out.iter()
            .any(|o| o.dst == CLIENT && o.r.ack == SeqNum(CISN).add(6)),
        "two replicas and the log hold the bytes: acknowledged {out:?}"
    );
    r.replica_failed(t(12), replica(2));
    drain(&mut r);
    let mut a = Repr::new(
        PORT,
        CPORT,
        SeqNum(isns[0]).add(1),
        SeqNum(CISN).add(6),
        flags::ACK | flags::PSH,
        500,
    );
    a.timestamps = Some((7000, 1001));
    r.handle_packet(t(13), seg(replica(1), CLIENT, a, b"world"));
    let out = drain(&mut r);
    let to_client: Vec<&Out> = out.iter().filter(|o| o.dst == CLIENT).collect();
    assert_eq!(to_client.len(), 1, "{out:?}");
    assert_eq!(to_client[0].payload, b"world");
    assert_eq!(
        to_client[0].r.ack,
        SeqNum(CISN).add(6),
        "the ACK stays where the client was told it is"
    );
}

/// The client was told a zero window; the replicas open theirs again, but
/// not beyond the furthest edge the client was ever offered (a replica's
/// window moved back: it shrank it, or an older ACK came late). The
/// client must hear that the window is open: a client that waits on a
/// zero window without a persist timer of its own would wait for ever.
#[test]
fn a_window_opened_again_after_a_zero_window_is_told_to_the_client() {
    let mut r = router(2);
    let (risn, isns) = handshake(&mut r, 2);
    r.handle_packet(t(10), client_at(risn, 0, flags::PSH, b"hello"));
    drain(&mut r);
    r.handle_packet(t(11), ack_from(1, isns[0], SeqNum(CISN).add(6), 0));
    r.handle_packet(t(11), ack_from(2, isns[1], SeqNum(CISN).add(6), 0));
    let out = drain(&mut r);
    let last = out
        .iter()
        .rev()
        .find(|o| o.dst == CLIENT)
        .expect("an ACK to the client");
    assert_eq!(
        (last.r.ack, last.r.window),
        (SeqNum(CISN).add(6), 0),
        "{out:?}"
    );
    r.handle_packet(t(12), ack_from(1, isns[0], SeqNum(CISN).add(6), 100));
    r.handle_packet(t(12), ack_from(2, isns[1], SeqNum(CISN).add(6), 100));
    let out = drain(&mut r);
    assert!(
        out.iter().any(|o| o.dst == CLIENT && o.r.window > 0),
        "the client hears the window open again: {out:?}"
    );
}

/// Simulation seed 7728: a live join's legs are placed where the group's
/// output ends when the service comes to rest, but a server may write
/// more after its replica answered the rest probe (output of input it had
/// read, held back by a full send buffer), on its way while the legs were
/// placed. Had it left the donor's server before the checkpoint, the
/// joiner (restored from that checkpoint) would never send it, and its
/// output would be placed short of the group's. So once the donor fixed
/// its point, the replicas are asked again; one whose output moved fails
/// the join (tried again later) instead of the input resuming.
#[test]
fn a_live_join_fails_when_output_moved_past_the_joiners_start() {
    let (mut r, _risn, isns) = quiet_service_without_replica_3_joining(true);
    let id = r.join_replica(t(10), "t", replica(3)).expect("join");
    rest_probes(&mut r, 6);
    for i in 1..=2 {
        rest_answer(&mut r, t(10), &isns, i, 6);
    }
    r.handle_timeout(t(12));
    drain(&mut r);
    joiner_syn_ack(&mut r, t(14));
    r.checkpoint_point(t(15), id);
    let out = drain(&mut r);
    assert!(
        out.iter().all(|o| o.dst != CLIENT),
        "the input does not resume before the answers: {out:?}"
    );
    // Replica 2 stands where it stood; replica 1's kernel has sent two more
    // bytes (on their way to the router).
    rest_answer(&mut r, t(15), &isns, 2, 6);
    rest_answer(&mut r, t(15), &isns, 1, 8);
    r.handle_timeout(t(16));
    let ev = log_events(&mut r);
    assert_join_failed(
        &ev,
        "a replica sent output past where the joiner's leg begins",
    );
    assert!(
        !ev.iter().any(|e| matches!(e, Event::JoinResumed { .. })),
        "{ev:?}"
    );
    assert!(!r.status().services[0].replicas[2].alive);
}

/// The same for a paused join: after the proof the replicas are asked
/// again before the joiner's legs are placed; output that moved since the
/// service came to rest fails the join.
#[test]
fn a_paused_join_confirms_the_rest_after_the_proof() {
    let (mut r, risn, isns) = quiet_service_without_replica_3();
    let id = start_join(&mut r, risn, &isns);
    r.checkpoint_taken(t(20), id, Ok("d1".into()));
    r.state_restored(t(30), id, Ok("d1".into()));
    rest_probes(&mut r, 6);
    rest_answer(&mut r, t(30), &isns, 1, 6);
    r.handle_timeout(t(31));
    assert!(
        drain(&mut r).iter().all(|o| o.dst != replica(3)),
        "no SYN to the joiner before every replica answered"
    );
    rest_answer(&mut r, t(32), &isns, 2, 9);
    r.handle_timeout(t(33));
    let ev = log_events(&mut r);
    assert_join_failed(&ev, "stirred during the pause");
}

/// A live join (`Config::join_live`): the input pauses only until the
/// service is at rest, the joiner is part of the open connection and the
/// donor fixed its checkpoint; then it resumes while the state travels.
/// The joiner (held by its agent) gets the client's bytes and every new
/// connection meanwhile; its output standing still does not evict it (its
/// kernel answers); it serves only once its proof equals the donor's.
#[test]
fn a_live_join_resumes_the_input_before_the_proof() {
    let (mut r, risn, isns) = quiet_service_without_replica_3_joining(true);
    let id = r.join_replica(t(10), "t", replica(3)).expect("join");
    rest_probes(&mut r, 6);
    for i in 1..=2 {
        rest_answer(&mut r, t(10), &isns, i, 6);
    }
    r.handle_timeout(t(12));
    let ev = log_events(&mut r);
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::JoinCheckpoint { seq: 2, .. })),
        "{ev:?}"
    );
    let msgs = agent_msgs(&mut r);
    let cp = msgs
        .iter()
        .position(|m| matches!(m, AgentMsg::Checkpoint { join, .. } if *join == id))
        .expect("checkpoint asked");
    let je = msgs
        .iter()
        .position(|m| {
            matches!(m,
            AgentMsg::Input { kind: ftnet_core::InputKind::Join { base: 5 }, replicas, .. }
                if replicas.contains(&replica(3)))
        })
        .expect("join event at once");
    assert!(
        cp < je,
        "the joiner's agent hears of the join before its input: {msgs:?}"
    );
    let out = drain(&mut r);
    assert!(
        out.iter().any(|o| o.dst == replica(3)
            && o.r.flags == flags::SYN
            && o.r.seq == SeqNum(CISN).add(5)),
        "the joiner's SYN before any state: {out:?}"
    );
    // Still paused: the point is not fixed.
    let out = more(&mut r, t(13), risn, b"more");
    assert_eq!(out.len(), 1, "held");
    assert_eq!((out[0].dst, out[0].r.window), (CLIENT, 0));
    let jisn = joiner_syn_ack(&mut r, t(14));
    let out = drain(&mut r);
    assert!(
        out.iter().all(|o| o.payload != b"more"),
        "nothing resumes before the donor's point"
    );
    // The donor forked: once replicas 1 and 2 confirmed that their output
    // still ends where the joiner's leg begins, the input resumes, the
    // joiner takes it too.
    r.checkpoint_point(t(15), id);
    confirm_rest(&mut r, 15, &isns);
    let ev = log_events(&mut r);
    assert!(
        ev.iter().any(|e| matches!(
            e,
            Event::JoinResumed {
                connections: 1,
                pause_ms: 5,
                ..
            }
        )),
        "{ev:?}"
    );
    assert!(
        !ev.iter().any(|e| matches!(e, Event::Joined { .. })),
        "{ev:?}"
    );
    let out = drain(&mut r);
    let data: Vec<&Out> = out.iter().filter(|o| o.payload == b"more").collect();
    assert_eq!(data.len(), 3, "released to every replica, the joiner too");
    assert!(
        out.iter().any(|o| o.dst == CLIENT && o.r.window > 0),
        "window update"
    );
    assert_eq!(
        r.status().services[0].replicas[2].state,
        ftnet_core::MemberState::Joining,
        "not serving before its proof"
    );
    // A new connection meanwhile: the joiner gets its SYN with the others.
    let mut syn = Repr::new(CPORT + 1, PORT, SeqNum(CISN), SeqNum(0), flags::SYN, 64240);
    syn.mss = Some(1460);
    r.handle_packet(t(16), seg(CLIENT, VIP, syn, b""));
    let mut to: Vec<Ipv4Addr> = drain(&mut r)
        .iter()
        .filter(|o| o.r.flags == flags::SYN)
        .map(|o| o.dst)
        .collect();
    to.sort();
    assert_eq!(to, vec![replica(1), replica(2), replica(3)]);
    // Replicas 1 and 2 answer "more"; the held joiner's kernel only
    // acknowledges it, and answers every probe, for 3 s: it stays.
    for i in 1..=2u8 {
        from_replica(&mut r, t(17), &isns, i, (6, 10, 6002), b"again");
    }
    let mut a = Repr::new(
        PORT,
        CPORT,
        SeqNum(jisn).add(1),
        SeqNum(CISN).add(10),
        flags::ACK,
        500,
    );
    a.timestamps = Some((800, 1001));
    r.handle_packet(t(17), seg(replica(3), CLIENT, a.clone(), b""));
    let mut now = 17;
    while now < 3_017 {
        now += 20;
        r.handle_timeout(t(now));
        for o in drain(&mut r) {
            if o.dst == replica(3)
                && o.r.flags & flags::SYN == 0
                && o.src == CLIENT
                && o.r.dst_port == PORT
                && o.r.src_port == CPORT
            {
                r.handle_packet(t(now), seg(replica(3), CLIENT, a.clone(), b""));
            }
        }
    }
    let ev = log_events(&mut r);
    assert!(
        !ev.iter().any(|e| matches!(e, Event::Evicted { replica: x, .. } | Event::ReplicaDown { replica: x, .. } if *x == replica(3))
            || matches!(e, Event::JoinFailed { .. })),
        "a held joiner whose kernel answers is not stalled: {ev:?}"
    );
    r.checkpoint_taken(t(now), id, Ok("d1".into()));
    assert!(log_events(&mut r)
        .iter()
        .all(|e| !matches!(e, Event::Joined { .. })));
    r.state_restored(t(now + 1), id, Ok("d1".into()));
    let ev = log_events(&mut r);
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::Joined { pause_ms: 5, join_ms, .. } if *join_ms > 3_000)),
        "{ev:?}"
    );
    assert_eq!(
        r.status().services[0].replicas[2].state,
        ftnet_core::MemberState::Serving
    );
}

/// Output policy `primary` (the default without voting): a reply whose
/// length differs between replicas (Redis `INFO`) is never spliced. The
/// client gets replica 1's bytes alone, whichever replica is faster; the
/// followers whose bytes differ are detached (no majority: not out of the
/// service, and still given the connection's input), and the next reply
/// on the connection is whole.
#[test]
fn primary_never_splices_replies_that_differ() {
    let mut r = router(3);
    let (risn, isns) = handshake(&mut r, 3);
    client_bytes(&mut r, t(1), risn, 0, b"INFO\r\n");
    // The followers are faster, and their replies are longer.
    from_replica(&mut r, t(2), &isns, 2, (1, 7, 7000), b"$9\r\nused:2222\r\n");
    from_replica(
        &mut r,
        t(2),
        &isns,
        3,
        (1, 7, 7000),
        b"$10\r\nused:33333\r\n",
    );
    assert!(
        drain(&mut r)
            .iter()
            .all(|o| o.dst != CLIENT || o.payload.is_empty()),
        "nothing but the followed replica's bytes reaches the client"
    );
    from_replica(&mut r, t(3), &isns, 1, (1, 7, 7000), b"$6\r\nused:1\r\n");
    let out = drain(&mut r);
    let got: Vec<u8> = out
        .iter()
        .filter(|o| o.dst == CLIENT)
        .flat_map(|o| o.payload.clone())
        .collect();
    assert_eq!(got, b"$6\r\nused:1\r\n");
    let named = |ev: &[Event], i: u8| {
        ev.iter().any(|e| matches!(e, Event::OutputDiffers { replica: a, evicted: false, service_wide: false, follows: Some(f), .. } if *a == replica(i) && *f == replica(1)))
    };
    // Replica 2, the standby (the one a failover would follow), is
    // compared exactly where replica 1's reply ended.
    let ev = log_events(&mut r);
    assert!(named(&ev, 2), "{ev:?}");
    assert!(all_alive(&r), "no majority: nobody leaves the service");
    assert!(r.counters().divergences >= 1);
    // The next exchange: replica 1 alone serves the connection, whole.
    client_acks(&mut r, t(4), risn, 1 + 12);
    client_bytes(&mut r, t(5), risn, 6, b"PING\r\n");
    drain(&mut r);
    from_replica(&mut r, t(6), &isns, 1, (13, 13, 7001), b"+PONG\r\n");
    let out = drain(&mut r);
    let c: Vec<&Out> = out
        .iter()
        .filter(|o| o.dst == CLIENT && !o.payload.is_empty())
        .collect();
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].payload, b"+PONG\r\n");
    assert_eq!(c[0].r.seq, SeqNum(risn).add(13));
    // Replica 3 is compared where its own reply ended, once replica 1's
    // stream got there.
    let ev = log_events(&mut r);
    assert!(named(&ev, 3), "{ev:?}");
    assert!(all_alive(&r));
    assert!(
        !ev.iter().any(|e| matches!(e, Event::Evicted { .. })),
        "detached, not evicted: {ev:?}"
    );
    // The detached followers still get the client's input (their servers
    // keep the service's state); their replies are acknowledged by the
    // router and dropped.
    let out = client_bytes(&mut r, t(7), risn, 12, b"SET a b\r\n");
    for i in [1, 2, 3] {
        assert!(
            out.iter()
                .any(|o| o.dst == replica(i) && o.payload == b"SET a b\r\n"),
            "replica {i} gets the input"
        );
    }
    from_replica(&mut r, t(8), &isns, 2, (16, 21, 7002), b"+OK\r\n");
    let out = drain(&mut r);
    assert!(out.iter().all(|o| o.dst != CLIENT || o.payload.is_empty()));
    let ack = out
        .iter()
        .find(|o| o.dst == replica(2))
        .expect("the router acknowledges a detached leg's output");
    assert_eq!(ack.r.ack, SeqNum(isns[1]).add(21));
    // The followed replica fails: nobody can continue what the client
    // got, and the client is reset.
    let rst = Repr::new(
        PORT,
        CPORT,
        SeqNum(isns[0]).add(20),
        SeqNum(0),
        flags::RST,
        0,
    );
    r.handle_packet(t(9), seg(replica(1), CLIENT, rst, b""));
    let out = drain(&mut r);
    assert!(
        out.iter()
            .any(|o| o.dst == CLIENT && o.r.flags & flags::RST != 0),
        "the client is reset"
    );
}

/// `primary`, the followers detached (their `INFO` replies differed): a
/// FIN from the followed replica alone may be its server's crash (Redis
/// killed with nothing unread closes with a FIN), and no detached follower
/// can take over: the client must then be reset, not told the server
/// closed. The FIN waits the failure detection time for a verdict, or for
/// the detached followers to close too.
#[test]
fn a_followed_replicas_lone_fin_waits_for_a_verdict_when_its_followers_are_detached() {
    // (the followers' FINs, at their own reply's end; none: the agent's
    // verdict or the wait's end decides)
    enum Then {
        Crash,
        FollowersClose,
        Nothing,
    }
    let fin_to_client = |out: &[Out]| {
        out.iter()
            .any(|o| o.dst == CLIENT && o.r.flags & flags::FIN != 0)
    };
    let rst_to_client = |out: &[Out]| {
        out.iter()
            .any(|o| o.dst == CLIENT && o.r.flags & flags::RST != 0)
    };
    for then in [Then::Crash, Then::FollowersClose, Then::Nothing] {
        let mut r = router(3);
        let (risn, isns) = handshake(&mut r, 3);
        client_bytes(&mut r, t(1), risn, 0, b"INFO\r\n");
        from_replica(&mut r, t(2), &isns, 1, (1, 7, 7000), b"$6\r\nused:1\r\n");
        from_replica(&mut r, t(2), &isns, 2, (1, 7, 7000), b"$9\r\nused:2222\r\n");
        from_replica(
            &mut r,
            t(2),
            &isns,
            3,
            (1, 7, 7000),
            b"$10\r\nused:33333\r\n",
        );
        drain(&mut r);
        client_acks(&mut r, t(3), risn, 13);
        drain(&mut r);
        assert_eq!(r.counters().detached, 2, "both followers detached");
        // The followed replica's FIN, right after its reply.
        fin_from_replica(&mut r, t(10), &isns, 1, (13, 7, 7001));
        r.handle_timeout(t(10));
        let out = drain(&mut r);
        assert!(!fin_to_client(&out), "the lone FIN waits: {out:?}");
        assert_eq!(r.counters().lone_fins_held, 1);
        match then {
            Then::Crash => {
                // Its agent: the server is gone (the shim's socket closed).
                r.handle_timeout(t(11));
                r.replica_failed(t(11), replica(1));
                r.handle_timeout(t(11));
                let out = drain(&mut r);
                assert!(rst_to_client(&out), "the client is reset: {out:?}");
                for k in 12..400 {
                    r.handle_timeout(t(k));
                }
                fin_from_replica(&mut r, t(400), &isns, 1, (13, 7, 7002));
                assert!(!fin_to_client(&drain(&mut r)), "and never told of a close");
            }
            Then::FollowersClose => {
                fin_from_replica(&mut r, t(20), &isns, 2, (16, 7, 7001));
                r.handle_timeout(t(20));
                assert!(!fin_to_client(&drain(&mut r)), "one follower closed of two");
                fin_from_replica(&mut r, t(30), &isns, 3, (18, 7, 7001));
                r.handle_timeout(t(30));
                let out = drain(&mut r);
                assert!(fin_to_client(&out), "every server closed: {out:?}");
                let f = out
                    .iter()
                    .find(|o| o.dst == CLIENT && o.r.flags & flags::FIN != 0)
                    .unwrap();
                assert_eq!(
                    f.r.seq,
                    SeqNum(risn).add(13),
                    "at the end of the client's stream"
                );
            }
            Then::Nothing => {
                // The time the router next needs, not later than the end
                // of the wait.
                assert!(r.poll_timeout().is_some_and(|d| d <= t(110)));
                for k in 11..110 {
                    r.handle_timeout(t(k));
                }
                assert!(!fin_to_client(&drain(&mut r)), "within the detection time");
                r.handle_timeout(t(110));
                let out = drain(&mut r);
                assert!(
                    fin_to_client(&out),
                    "no verdict came: its FIN goes: {out:?}"
                );
                assert!(!rst_to_client(&out));
            }
        }
    }
}

/// The client's FIN is held back from a replica behind what the client
/// had only under voting
/// (`the_clients_fin_waits_for_a_replica_behind_what_the_client_had`).
/// Under `primary` a follower's reply may be shorter than the followed
/// replica's (Redis `INFO`): held, its FIN would never come, and its
/// output standing still would take it out. It gets the FIN at once.
#[test]
fn a_follower_with_a_shorter_reply_gets_the_clients_fin_at_once() {
    let mut r = router(3);
    let (risn, isns) = handshake(&mut r, 3);
    client_bytes(&mut r, t(1), risn, 0, b"INFO\r\n");
    from_replica(
        &mut r,
        t(2),
        &isns,
        1,
        (1, 7, 7000),
        b"$10\r\nused:33333\r\n",
    );
    from_replica(&mut r, t(2), &isns, 2, (1, 7, 7000), b"$6\r\nused:1\r\n");
    from_replica(&mut r, t(2), &isns, 3, (1, 7, 7000), b"$6\r\nused:2\r\n");
    let sent: usize = drain(&mut r)
        .iter()
        .filter(|o| o.dst == CLIENT)
        .map(|o| o.payload.len())
        .sum();
    assert_eq!(sent, 17, "replica 1's reply alone");
    assert!(
        !log_events(&mut r)
            .iter()
            .any(|e| matches!(e, Event::Evicted { .. })),
        "nobody evicted"
    );
    // The client has the 17 bytes and closes.
    let out = client_fin(&mut r, t(3), risn, 6, 18);
    for i in [1, 2, 3] {
        assert!(
            out.iter()
                .any(|o| o.dst == replica(i) && o.r.flags & flags::FIN != 0),
            "replica {i} gets the client's FIN: {out:?}"
        );
    }
    assert_eq!(r.counters().fins_held, 0);
}

/// The same replies under `fastest`: the client's stream is spliced from
/// several replicas (the behaviour `primary` replaces as the default).
#[test]
fn fastest_splices_replies_that_differ_in_length() {
    let mut c = config_of(3, false);
    c.services[0].voting = ftnet_core::Voting::Fastest;
    let mut r = Router::new(c, [9; 16]);
    let (risn, isns) = handshake(&mut r, 3);
    client_bytes(&mut r, t(1), risn, 0, b"INFO\r\n");
    from_replica(&mut r, t(2), &isns, 1, (1, 7, 7000), b"$6\r\nused:1\r\n");
    from_replica(&mut r, t(2), &isns, 2, (1, 7, 7000), b"$9\r\nused:2222\r\n");
    let got: Vec<u8> = drain(&mut r)
        .iter()
        .filter(|o| o.dst == CLIENT)
        .flat_map(|o| o.payload.clone())
        .collect();
    // Replica 2's copy overlaps and runs on: the client keeps the first
    // 12 bytes and takes the last 3 of replica 2's.
    assert_eq!(got.len(), 12 + 15);
}

/// `primary`: the client got every byte but lost the group's FIN, and the
/// followed replica died silently after sending its own (it would have
/// repeated it). A follower's repeated FIN brings the router to repeat the
/// group's FIN itself: every replica's stream ends there. Before, those
/// repeats were dropped, and the client waited in FIN-WAIT-2 for good
/// (simulation seed 694, with a change that sent clients duplicate ACKs
/// after a rebuild, since dropped).
#[test]
fn primary_repeats_the_groups_fin_when_a_follower_repeats_its_own() {
    let mut r = router(2);
    let (risn, isns) = handshake(&mut r, 2);
    client_bytes(&mut r, t(1), risn, 0, b"hello");
    let fin = |i: u8, payload: &[u8]| {
        let mut a = Repr::new(
            PORT,
            CPORT,
            SeqNum(isns[usize::from(i) - 1]).add(1 + 5 - u32::try_from(payload.len()).unwrap()),
            SeqNum(CISN).add(6),
            flags::ACK | flags::FIN | if payload.is_empty() { 0 } else { flags::PSH },
            500,
        );
        a.timestamps = Some((7000, 1001));
        seg(replica(i), CLIENT, a, payload)
    };
    r.handle_packet(t(2), fin(1, b"world"));
    r.handle_packet(t(2), fin(2, b"world"));
    let out = drain(&mut r);
    assert!(
        out.iter()
            .any(|o| o.dst == CLIENT && o.r.flags & flags::FIN != 0),
        "the group's FIN: {out:?}"
    );
    // The client acknowledges the bytes, not the FIN (it lost it).
    client_acks(&mut r, t(3), risn, 1 + 5);
    drain(&mut r);
    // Replica 1 (followed) is silent; replica 2 repeats its FIN.
    r.handle_packet(t(300), fin(2, b""));
    let out = drain(&mut r);
    let f = out
        .iter()
        .find(|o| o.dst == CLIENT && o.r.flags & flags::FIN != 0)
        .expect("the group's FIN again");
    assert_eq!(f.r.seq, SeqNum(risn).add(1 + 5));
    assert!(f.payload.is_empty());
    assert_eq!(r.counters().follower_repeats, 1);
}

/// `primary`: the followed replica fails (its server is killed and its
/// kernel resets the connection) after a follower had sent its reply: the
/// client gets the follower's reply at once, from what the router kept,
/// not after the follower's retransmission timeout.
#[test]
fn primary_failover_sends_on_what_the_follower_sent_ahead() {
    let mut r = router(2);
    let (risn, isns) = handshake(&mut r, 2);
    client_bytes(&mut r, t(1), risn, 0, b"hello");
    from_replica(&mut r, t(2), &isns, 2, (1, 6, 6000), b"world");
    assert!(drain(&mut r).iter().all(|o| o.dst != CLIENT));
    let rst = Repr::new(
        PORT,
        CPORT,
        SeqNum(isns[0]).add(1),
        SeqNum(0),
        flags::RST,
        0,
    );
    r.handle_packet(t(3), seg(replica(1), CLIENT, rst, b""));
    let out = drain(&mut r);
    let c: Vec<&Out> = out.iter().filter(|o| o.dst == CLIENT).collect();
    assert_eq!(
        c.len(),
        1,
        "{:?}",
        c.iter().map(|o| &o.payload).collect::<Vec<_>>()
    );
    assert_eq!(c[0].payload, b"world");
    assert_eq!(c[0].r.seq, SeqNum(risn).add(1));
    assert_eq!(r.counters().failover_sent_on, 1);
}

/// `primary`: the followed replica fails after the client got its reply,
/// and the follower's copy of that reply differs: the follower cannot
/// continue the client's stream. It leaves, and with nobody left the
/// client is reset — never handed the follower's bytes after the others.
#[test]
fn primary_failover_to_a_follower_that_differs_resets_the_client() {
    let mut r = router(2);
    let (risn, isns) = handshake(&mut r, 2);
    client_bytes(&mut r, t(1), risn, 0, b"TIME\r\n");
    from_replica(&mut r, t(2), &isns, 1, (1, 7, 7000), b":1000\r\n");
    let got: Vec<u8> = drain(&mut r)
        .iter()
        .filter(|o| o.dst == CLIENT)
        .flat_map(|o| o.payload.clone())
        .collect();
    assert_eq!(got, b":1000\r\n");
    let rst = Repr::new(
        PORT,
        CPORT,
        SeqNum(isns[0]).add(8),
        SeqNum(0),
        flags::RST,
        0,
    );
    r.handle_packet(t(3), seg(replica(1), CLIENT, rst, b""));
    drain(&mut r);
    from_replica(&mut r, t(4), &isns, 2, (1, 7, 7000), b":1001\r\n+more\r\n");
    let out = drain(&mut r);
    assert!(
        out.iter().all(|o| o.dst != CLIENT || o.payload.is_empty()),
        "none of the follower's bytes"
    );
    assert!(
        out.iter()
            .any(|o| o.dst == CLIENT && o.r.flags & flags::RST != 0),
        "the client is reset"
    );
    let ev = log_events(&mut r);
    assert!(
        ev.iter().any(
            |e| matches!(e, Event::OutputDiffers { replica: a, offset: 7, .. } if *a == replica(2))
        ),
        "{ev:?}"
    );
}

/// `sequencer_router` with `delivery = "safe"`.
fn safe_router(n: u8) -> Router {
    sequencer_router_with(n, false, ftnet_core::Delivery::Safe)
}

/// The input events the sequencer numbered, in order.
fn input_kinds(r: &mut Router) -> Vec<ftnet_core::InputKind> {
    std::iter::from_fn(|| r.poll_agent_msg())
        .filter_map(|e| match e {
            AgentMsg::Input { kind, .. } => Some(kind),
            _ => None,
        })
        .collect()
}

/// Safe delivery (AR-TCP §4.1): a chunk is numbered — released to the
/// servers — only once every live replica acknowledged it (the stable
/// watermark), never as it arrives; a replica that leaves the connection
/// lets the watermark move on without it.
#[test]
fn safe_delivery_numbers_only_what_every_replica_acknowledged() {
    use ftnet_core::InputKind;
    let mut r = safe_router(3);
    let (risn, isns) = handshake(&mut r, 3);
    client_bytes(&mut r, t(3), risn, 0, b"SET k v\r\n");
    assert_eq!(
        input_kinds(&mut r),
        vec![InputKind::Accept],
        "forwarded, not numbered"
    );
    r.handle_packet(t(4), ack_from(1, isns[0], SeqNum(CISN).add(10), 500));
    r.handle_packet(t(4), ack_from(2, isns[1], SeqNum(CISN).add(10), 500));
    assert_eq!(
        input_kinds(&mut r),
        vec![],
        "replica 3 has not acknowledged it"
    );
    r.handle_packet(t(5), ack_from(3, isns[2], SeqNum(CISN).add(6), 500));
    assert_eq!(
        input_kinds(&mut r),
        vec![InputKind::Data { end: 5 }],
        "what all three hold"
    );
    r.handle_packet(t(6), ack_from(3, isns[2], SeqNum(CISN).add(10), 500));
    assert_eq!(input_kinds(&mut r), vec![InputKind::Data { end: 9 }]);
    // More bytes; replica 3 falls silent and is evicted: the other two
    // acknowledged them, so they are released then.
    client_bytes(&mut r, t(7), risn, 9, b"GET k\r\n");
    r.handle_packet(t(8), ack_from(1, isns[0], SeqNum(CISN).add(17), 500));
    r.handle_packet(t(8), ack_from(2, isns[1], SeqNum(CISN).add(17), 500));
    assert_eq!(input_kinds(&mut r), vec![]);
    let mut at = 8;
    while r.status().services[0].replicas[2].alive && at < 10_000 {
        at += 10;
        r.handle_timeout(t(at));
        drain(&mut r);
    }
    assert!(
        !r.status().services[0].replicas[2].alive,
        "replica 3 evicted"
    );
    assert_eq!(input_kinds(&mut r), vec![InputKind::Data { end: 16 }]);
}

/// Safe delivery waits for every replica's ACK of a request before any
/// server reads it, and a replica's kernel in delayed-ACK mode would hold
/// that ACK back up to 40 ms (requests/s fell to 1/12 of the sequencer's
/// without safe delivery). Each client segment goes with a copy of its last
/// byte right behind it: a duplicate on arrival, which Linux acknowledges
/// at once. The copy is the client's own byte, at its own place. Without
/// safe delivery no copy goes.
#[test]
fn safe_delivery_prompts_each_replica_to_acknowledge_at_once() {
    for (safe, mut r) in [(true, safe_router(3)), (false, sequencer_router(3))] {
        let (risn, isns) = handshake(&mut r, 3);
        let out = client_bytes(&mut r, t(3), risn, 0, b"SET k v\r\n");
        for j in 0..3u8 {
            let to: Vec<&Out> = out.iter().filter(|o| o.dst == replica(j + 1)).collect();
            if !safe {
                assert_eq!(to.len(), 1, "{to:?}");
                continue;
            }
            assert_eq!(to.len(), 2, "the segment and its last byte: {to:?}");
            assert_eq!(
                (to[0].r.seq, &to[0].payload[..]),
                (SeqNum(CISN).add(1), &b"SET k v\r\n"[..])
            );
            assert_eq!(
                (to[1].r.seq, &to[1].payload[..]),
                (SeqNum(CISN).add(9), &b"\n"[..])
            );
            assert_eq!(to[1].r.ack, SeqNum(isns[j as usize]).add(1));
            assert_eq!(
                (to[1].r.window, to[1].r.flags),
                (to[0].r.window, flags::ACK)
            );
            assert_eq!(to[1].r.timestamps, to[0].r.timestamps);
        }
        assert_eq!(r.counters().ack_prompts, if safe { 3 } else { 0 });
    }
}

/// Safe delivery: the others acknowledged everything, the lagging replica
/// resets. The reset awaits its verdict (another replica's progress, which
/// may never come: these two have nothing left to do), but the replica no
/// longer holds the watermark back: what the others hold is numbered at
/// once, not left to a verdict a router may die before (simulation seed
/// 6882 with a second takeover).
#[test]
fn safe_delivery_numbers_what_the_others_hold_when_the_laggard_resets() {
    use ftnet_core::InputKind;
    let mut r = safe_router(3);
    let (risn, isns) = handshake(&mut r, 3);
    client_bytes(&mut r, t(3), risn, 0, b"SET k v\r\n");
    r.handle_packet(t(4), ack_from(1, isns[0], SeqNum(CISN).add(10), 500));
    r.handle_packet(t(4), ack_from(2, isns[1], SeqNum(CISN).add(10), 500));
    r.handle_packet(t(4), ack_from(3, isns[2], SeqNum(CISN).add(6), 500));
    assert_eq!(
        input_kinds(&mut r),
        vec![InputKind::Accept, InputKind::Data { end: 5 }]
    );
    let rst = Repr::new(
        PORT,
        CPORT,
        SeqNum(isns[2]).add(1),
        SeqNum(0),
        flags::RST,
        0,
    );
    r.handle_packet(t(5), seg(replica(3), CLIENT, rst, b""));
    assert!(log_events(&mut r).is_empty(), "no verdict yet");
    assert_eq!(
        input_kinds(&mut r),
        vec![InputKind::Data { end: 9 }],
        "what replicas 1 and 2 hold, at the reset"
    );
}

/// The client resets while one replica lags (it has none of the request):
/// under safe delivery no server read the request (it was never numbered),
/// so the sequencer ends the connection's input (`Reset`) and every
/// replica is reset at its own RCV.NXT, none taken out. Best effort, the
/// same reset numbered the request (the others' servers ran it) and the
/// lagging replica leaves the service (`InputLost`).
#[test]
fn safe_delivery_a_client_reset_while_a_replica_lags_leaves_the_same_input_everywhere() {
    use ftnet_core::InputKind;
    let mut r = safe_router(2);
    let (risn, isns) = handshake(&mut r, 2);
    client_bytes(&mut r, t(10), risn, 0, b"SET k v");
    r.handle_packet(t(11), ack_from(1, isns[0], SeqNum(CISN).add(8), 500));
    drain(&mut r);
    client_rst(&mut r, t(12), 8);
    let out = drain(&mut r);
    assert_eq!(rst_seq_to(&out, 1), Some(SeqNum(CISN).add(8)), "{out:?}");
    assert_eq!(
        rst_seq_to(&out, 2),
        Some(SeqNum(CISN).add(1)),
        "at its own RCV.NXT: {out:?}"
    );
    // The request was forwarded to replica 2 and may still be on its way:
    // once it arrives, its RCV.NXT is 8 and a RST at 1 is out of its
    // window. A second one at the end of what it was sent is exact then
    // (the connection is forgotten here, nobody would answer its challenge
    // ACK). Replica 1 acknowledged all: one RST.
    let rsts = |i: u8| -> Vec<SeqNum> {
        out.iter()
            .filter(|o| o.dst == replica(i) && o.r.flags & flags::RST != 0)
            .map(|o| o.r.seq)
            .collect()
    };
    assert_eq!(rsts(2), vec![SeqNum(CISN).add(1), SeqNum(CISN).add(8)]);
    assert_eq!(rsts(1), vec![SeqNum(CISN).add(8)]);
    assert_eq!(r.connections(), 0);
    assert_eq!(
        input_kinds(&mut r),
        vec![InputKind::Accept, InputKind::Reset],
        "the request was never released"
    );
    assert!(!log_events(&mut r)
        .iter()
        .any(|e| matches!(e, Event::Evicted { .. } | Event::ReplicaDown { .. })));
    assert!(r.status().services[0].replicas.iter().all(|x| x.alive));

    // The control: best effort.
    let mut r = sequencer_router(2);
    let (risn, isns) = handshake(&mut r, 2);
    client_bytes(&mut r, t(10), risn, 0, b"SET k v");
    r.handle_packet(t(11), ack_from(1, isns[0], SeqNum(CISN).add(8), 500));
    client_rst(&mut r, t(12), 8);
    drain(&mut r);
    r.handle_packet(t(13), ack_from(2, isns[1], SeqNum(CISN).add(1), 500));
    until_gone(&mut r, t(5000));
    assert_eq!(
        input_kinds(&mut r),
        vec![
            InputKind::Accept,
            InputKind::Data { end: 7 },
            InputKind::Reset
        ],
        "released as it came, then the end of the connection's input"
    );
    assert!(log_events(&mut r).iter().any(|e| matches!(
        e,
        Event::Evicted { replica: a, reason: EvictReason::InputLost, .. } if *a == replica(2)
    )));
}

/// How long `Router::status` takes at a full table (65,536 connections of
/// three replicas): it runs under the data plane's lock every 250 ms, so
/// packets wait that long. A figure, printed; `cargo test --release -p
/// ftnet-core --test router status_at_a_full_table -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement: prints the figure"]
fn status_at_a_full_table() {
    let mut c = config_of(3, false);
    c.limits.max_half_open = 1 << 20;
    let mut r = Router::new(c, [9; 16]);
    let n = r.status().counters.connections_opened;
    assert_eq!(n, 0);
    let mut opened = 0u32;
    for i in 0..65_536u32 {
        let client = Ipv4Addr::new(198, 18, 2 + (i >> 14) as u8, ((i >> 6) & 0xff) as u8);
        let cport = 10_000 + (i & 0x3f) as u16;
        let mut syn = Repr::new(cport, PORT, SeqNum(CISN), SeqNum(0), flags::SYN, 64240);
        syn.mss = Some(1460);
        r.handle_packet(t(0), seg(client, VIP, syn, b""));
        drain(&mut r);
        let mut risn = None;
        for k in 1..=3u8 {
            let sa = Repr::new(
                PORT,
                cport,
                SeqNum(1_000_000 * u32::from(k)),
                SeqNum(CISN).add(1),
                flags::SYN | flags::ACK,
                65160,
            );
            let p = seg(replica(k), client, sa, b"");
            r.handle_packet(t(1), p);
            for o in drain(&mut r) {
                if o.r.flags == flags::SYN | flags::ACK {
                    risn = Some(o.r.seq);
                }
            }
        }
        let Some(risn) = risn else { continue };
        let ack = Repr::new(
            cport,
            PORT,
            SeqNum(CISN).add(1),
            risn.add(1),
            flags::ACK,
            502,
        );
        r.handle_packet(t(2), seg(client, VIP, ack, b""));
        drain(&mut r);
        opened += 1;
    }
    let st = r.status();
    assert_eq!(st.connections, 65_536, "opened {opened}");
    let runs = 20;
    let t0 = std::time::Instant::now();
    for _ in 0..runs {
        std::hint::black_box(r.status());
    }
    let per = t0.elapsed() / runs;
    println!(
        "status at {} connections (3 replicas each): {:.2} ms per call",
        st.connections,
        per.as_secs_f64() * 1000.0
    );
}

/// The status's sample of a connection: a replica that never answered
/// the SYN has no stream offsets to show (none, not 2^32 - 1 from the
/// ISNs); one that answered has them.
#[test]
fn a_replica_that_never_answered_has_no_offsets_in_the_status() {
    let mut r = router(2);
    let syn = Repr::new(CPORT, PORT, SeqNum(CISN), SeqNum(0), flags::SYN, 64240);
    r.handle_packet(t(0), seg(CLIENT, VIP, syn, b""));
    drain(&mut r);
    let sa = Repr::new(
        PORT,
        CPORT,
        SeqNum(777),
        SeqNum(CISN).add(1),
        flags::SYN | flags::ACK,
        65160,
    );
    r.handle_packet(t(1), seg(replica(1), CLIENT, sa, b""));
    drain(&mut r);
    let st = r.status();
    let legs = &st.sample[0].legs;
    assert_eq!(
        (legs[0].sent, legs[0].acked),
        (Some(0), Some(0)),
        "{legs:?}"
    );
    assert_eq!(
        (legs[1].sent, legs[1].acked, legs[1].window_edge),
        (None, None, None),
        "{legs:?}"
    );
    assert_eq!(legs[1].state, "SynSent");
}

/// A connection adopted after a takeover is, once whole again and at
/// rest, like any other for a join. (The rest check once took every
/// adopted connection for one still being rebuilt, for as long as it
/// lived: after a takeover no replica could join a service whose clients
/// kept their connections, and every attempt paused the service's input
/// for the rest timeout, again and again.)
#[test]
fn a_connection_adopted_after_a_takeover_does_not_hold_a_join_off() {
    let mut r = sequencer_router_joining(3, false);
    assert_eq!(r.replica_failed(t(0), replica(3)), 1);
    let (risn, isns) = (7_000_000u32, [1_000_000u32, 2_000_000]);
    // Records from replicas 1 and 2: 86 client bytes in, nothing out yet.
    adopt_two(&mut r, risn, isns, 7);
    let position = |r: &mut Router, now: Instant, i: u8, out: u32, acked: u32, payload: &[u8]| {
        let mut a = Repr::new(
            PORT,
            CPORT,
            SeqNum(isns[usize::from(i) - 1]).add(1 + out),
            SeqNum(CISN).add(1 + acked),
            if payload.is_empty() {
                flags::ACK
            } else {
                flags::ACK | flags::PSH
            },
            500,
        );
        a.timestamps = None;
        r.handle_packet(now, seg(replica(i), CLIENT, a, payload));
    };
    for i in 1..=2 {
        position(&mut r, t(1), i, 0, 86, b"");
    }
    drain(&mut r);
    assert_eq!(r.status().rebuilding, 0, "whole again");
    // The client goes on: "hello", answered "world" by both, acknowledged.
    let mut d = Repr::new(
        CPORT,
        PORT,
        SeqNum(CISN).add(1 + 86),
        SeqNum(risn).add(1),
        flags::ACK | flags::PSH,
        502,
    );
    d.timestamps = None;
    r.handle_packet(t(2), seg(CLIENT, VIP, d, b"hello"));
    assert_eq!(drain(&mut r).len(), 2, "to replicas 1 and 2");
    for i in 1..=2 {
        position(&mut r, t(3), i, 0, 91, b"world");
    }
    let mut a = Repr::new(
        CPORT,
        PORT,
        SeqNum(CISN).add(1 + 91),
        SeqNum(risn).add(1 + 5),
        flags::ACK,
        502,
    );
    a.timestamps = None;
    r.handle_packet(t(4), seg(CLIENT, VIP, a, b""));
    drain(&mut r);
    log_events(&mut r);
    agent_msgs(&mut r);
    r.join_replica(t(10), "t", replica(3)).expect("join");
    // At rest at once: the replicas are asked where their output ends.
    let probed: Vec<Ipv4Addr> = drain(&mut r).iter().map(|o| o.dst).collect();
    assert!(
        probed.contains(&replica(1)) && probed.contains(&replica(2)),
        "rest probes, not a wait for a rebuild long over: {probed:?} {:?}",
        log_events(&mut r)
    );
    for i in 1..=2 {
        position(&mut r, t(10), i, 5, 91, b"");
    }
    r.handle_timeout(t(12));
    let ev = log_events(&mut r);
    assert!(
        ev.iter().any(|e| matches!(e, Event::JoinCheckpoint { .. })),
        "{ev:?}"
    );
}

/// A connection the client closed just before a takeover: the replicas
/// took its FIN and closed too (LAST-ACK), the client acknowledged their
/// FIN (TIME-WAIT) and that ACK died with the router. After the rebuild
/// the replicas' RCV.NXT counts the client's FIN, and their agents say
/// they took it (`fin_received`, read from the kernel): the client closed,
/// no input is left to come on the connection, and a join passes it by.
/// Taken for one more byte of input, its FIN never
/// coming again, the connection stood "closing: the servers closed it, and
/// the client has not" and held a join off until the join gave up (a
/// fault campaign: a replica's join failed after 2 s and every client of
/// the service waited those 2 s).
#[test]
fn a_rebuilt_connection_whose_replicas_took_the_clients_fin_holds_no_join_off() {
    for (told, fin_again) in [(true, false), (true, true), (false, false), (false, true)] {
        let mut r = sequencer_router_joining(3, false);
        assert_eq!(r.replica_failed(t(0), replica(3)), 1);
        let (risn, isns) = (7_000_000u32, [1_000_000u32, 2_000_000]);
        // 86 client bytes and its FIN in; "world" and the servers' FIN out.
        adopt_two_as(&mut r, t(0), risn, isns, 7, None, |_, rec| {
            rec.fin_received = told;
        });
        for i in 0..2usize {
            // LAST-ACK answers the position probe at SND.NXT (past its FIN).
            let mut a = Repr::new(
                PORT,
                CPORT,
                SeqNum(isns[i]).add(1 + 6),
                SeqNum(CISN).add(1 + 87),
                flags::ACK,
                500,
            );
            a.timestamps = None;
            if fin_again && i == 0 {
                // Or its FIN again, on its retransmission timer.
                a.seq = a.seq.sub(1);
                a.flags |= flags::FIN;
            }
            r.handle_packet(t(1), seg(replica(i as u8 + 1), CLIENT, a, b""));
        }
        drain(&mut r);
        assert_eq!(r.status().rebuilding, 0, "whole again");
        let ends = input_ends(&mut r);
        if told {
            // The FIN is no byte of input: no chunk numbers it.
            assert!(ends.iter().all(|&e| e <= 86), "{ends:?}");
        }
        // The client, in TIME-WAIT, answers the rebuild's probe with its
        // ACK of everything (the servers' FIN included).
        let mut a = Repr::new(
            CPORT,
            PORT,
            SeqNum(CISN).add(1 + 87),
            SeqNum(risn).add(1 + 6),
            flags::ACK,
            502,
        );
        a.timestamps = None;
        r.handle_packet(t(5), seg(CLIENT, VIP, a, b""));
        let to: Vec<Ipv4Addr> = drain(&mut r).iter().map(|o| o.dst).collect();
        assert!(
            to.contains(&replica(1)) && to.contains(&replica(2)),
            "the client's ACK reaches the replicas: {to:?}"
        );
        // Their sockets are gone now; nothing more comes from them.
        log_events(&mut r);
        agent_msgs(&mut r);
        r.join_replica(t(10), "t", replica(3)).expect("join");
        drain(&mut r);
        r.handle_timeout(t(12));
        r.handle_timeout(t(2100));
        let ev = log_events(&mut r);
        let checkpoint = ev.iter().any(|e| matches!(e, Event::JoinCheckpoint { .. }));
        if told {
            assert!(checkpoint, "the client closed; the join goes on: {ev:?}");
        } else {
            // An agent that cannot say (an older one, or a kernel that would
            // not tell) leaves the router where it was: the FIN is unknown.
            assert!(!checkpoint, "{ev:?}");
        }
    }
}

/// After a takeover, while the order waits for the agents' reports, a
/// client's SYN waits too if a replica of the group has not registered
/// yet: opened at once it would leave that replica out of the connection,
/// its server would miss the connection's input events (a hole in its
/// order) and the replica would leave the group. (A fault campaign's
/// router kill did exactly that: a new connection in the 20 ms before the
/// last agent registered took that replica out.) Once the last agent
/// reported, the SYN opens with all three.
#[test]
fn a_syn_waits_for_the_agents_of_the_group_after_a_takeover() {
    let mut r = sequencer_router(3);
    r.require_agents();
    r.await_order();
    let report = |last: u64| ftnet_core::OrderReport {
        vip: VIP,
        vport: PORT,
        last_seq: last,
        tail: Vec::new(),
    };
    for i in 1..=2 {
        r.agent_registered(replica(i));
        r.order_report(t(0), replica(i), &[report(40)]);
    }
    assert!(
        syn_targets(&mut r, t(1), 40001).is_empty(),
        "held while replica 3's agent is awaited"
    );
    r.agent_registered(replica(3));
    r.order_report(t(20), replica(3), &[report(40)]);
    let mut to: Vec<Ipv4Addr> = drain(&mut r)
        .iter()
        .filter(|o| o.r.flags & flags::SYN != 0)
        .map(|o| o.dst)
        .collect();
    to.sort();
    assert_eq!(to, vec![replica(1), replica(2), replica(3)]);
    // An agent that never comes holds nobody for longer than the order's
    // wait: then the SYN opens with the replicas registered.
    let mut r = sequencer_router(3);
    r.require_agents();
    r.await_order();
    for i in 1..=2 {
        r.agent_registered(replica(i));
        r.order_report(t(0), replica(i), &[report(40)]);
    }
    assert!(syn_targets(&mut r, t(1), 40002).is_empty());
    r.handle_timeout(t(1001));
    let mut to: Vec<Ipv4Addr> = drain(&mut r)
        .iter()
        .filter(|o| o.r.flags & flags::SYN != 0)
        .map(|o| o.dst)
        .collect();
    to.sort();
    assert_eq!(to, vec![replica(1), replica(2)]);
}

/// An agent that was away when its replica left the group (a link cut)
/// still holds the records of the connections the replica was taken out
/// of. When it registers again it hands them over, and the router tells it
/// to forget them: kept, they would bring the replica back into
/// connections its kernel no longer has at the next takeover (a fault
/// campaign: the new router's probes were answered by RSTs, a healthy
/// replica was declared down for a reset, and echo streams stalled).
#[test]
fn a_returning_agent_forgets_the_records_of_connections_its_replica_left() {
    let mut r = router(3);
    let (risn, isns) = handshake(&mut r, 3);
    assert_eq!(r.host_lost(t(5), replica(2)), 1);
    drain(&mut r);
    agent_msgs(&mut r);
    let rec = record_of_three(risn, &isns);
    let key = rec.key;
    r.agent_registered(replica(2));
    assert_eq!(
        r.adopt(t(10), replica(2), &rec),
        ftnet_core::Adopted::Refused
    );
    let msgs = agent_msgs(&mut r);
    assert!(
        msgs.iter().any(|m| matches!(m, AgentMsg::Forgotten { key: k, replicas } if *k == key && replicas == &vec![replica(2)])),
        "{msgs:?}"
    );
}

/// After a takeover a connection waits for the records of the replicas it
/// was set up with, in case their agents register late; an agent that
/// registered and handed over all its records without this one ends the
/// wait at once. (Replica 3 left the connection before the takeover and
/// its agent forgot the record: before, the client waited the whole
/// `ADOPT_WAIT`, a second, on every such connection.)
#[test]
fn a_rebuild_does_not_wait_for_a_record_an_agent_did_not_have() {
    let mut r = router(3);
    let (risn, isns) = (7_000_000u32, [1_000_000u32, 2_000_000, 3_000_000]);
    let rec = record_of_three(risn, &isns);
    for i in 1..=2u8 {
        r.adopt(t(0), replica(i), &rec);
        r.records_done(t(0), replica(i));
    }
    drain(&mut r);
    for i in 1..=2u8 {
        let mut a = Repr::new(
            PORT,
            CPORT,
            SeqNum(isns[usize::from(i) - 1]).add(1),
            SeqNum(CISN).add(1),
            flags::ACK,
            500,
        );
        a.timestamps = None;
        r.handle_packet(t(1), seg(replica(i), CLIENT, a, b""));
    }
    drain(&mut r);
    assert_eq!(
        r.status().rebuilding,
        1,
        "replica 3's record may still come"
    );
    r.records_done(t(2), replica(3));
    assert_eq!(
        r.status().rebuilding,
        0,
        "whole at once, not after a second"
    );
}

/// The same when the agent that lacks the record registers first: a
/// connection another agent brings later does not wait for it either.
/// (A fault campaign: the agent of a replica whose server had just been
/// restarted registered first, with 2 of the 5 records, and each of the
/// other 3 connections held its client for `ADOPT_WAIT`: a router kill
/// stalled the web lab's clients 1.2 to 1.35 s.)
#[test]
fn a_rebuild_does_not_wait_for_an_agent_that_registered_first_without_the_record() {
    let mut r = router(3);
    let (risn, isns) = (7_000_000u32, [1_000_000u32, 2_000_000, 3_000_000]);
    let rec = record_of_three(risn, &isns);
    r.agent_registered(replica(3));
    r.records_done(t(0), replica(3));
    for i in 1..=2u8 {
        r.agent_registered(replica(i));
        r.adopt(t(0), replica(i), &rec);
        r.records_done(t(0), replica(i));
    }
    drain(&mut r);
    for i in 1..=2u8 {
        let mut a = Repr::new(
            PORT,
            CPORT,
            SeqNum(isns[usize::from(i) - 1]).add(1),
            SeqNum(CISN).add(1),
            flags::ACK,
            500,
        );
        a.timestamps = None;
        r.handle_packet(t(1), seg(replica(i), CLIENT, a, b""));
    }
    drain(&mut r);
    assert_eq!(
        r.status().rebuilding,
        0,
        "whole once both replicas told their position, not after a second"
    );
    // An agent that registers again hands its records over again: until
    // then a new adoption waits for its record.
    let mut r = router(3);
    r.agent_registered(replica(3));
    r.records_done(t(0), replica(3));
    r.agent_registered(replica(3));
    for i in 1..=2u8 {
        r.agent_registered(replica(i));
        r.adopt(t(0), replica(i), &rec);
        r.records_done(t(0), replica(i));
    }
    drain(&mut r);
    for i in 1..=2u8 {
        let mut a = Repr::new(
            PORT,
            CPORT,
            SeqNum(isns[usize::from(i) - 1]).add(1),
            SeqNum(CISN).add(1),
            flags::ACK,
            500,
        );
        a.timestamps = None;
        r.handle_packet(t(1), seg(replica(i), CLIENT, a, b""));
    }
    drain(&mut r);
    assert_eq!(r.status().rebuilding, 1, "replica 3's records are coming");
}

/// The record of the test connection with replicas 1 to 3 (ISNs `isns`),
/// no window scaling, no timestamps, its Accept passed on.
fn record_of_three(risn: u32, isns: &[u32]) -> ftnet_core::ConnRecord {
    use ftnet_core::{ConnKey, ConnRecord, ReplicaSetup};
    ConnRecord {
        key: ConnKey {
            client: CLIENT,
            cport: CPORT,
            vip: VIP,
            vport: PORT,
        },
        client_isn: CISN,
        router_isn: risn,
        wscale_out: 0,
        ts_base: None,
        client_mss: 1460,
        mss_out: 1460,
        replicas: (0..3u8)
            .map(|i| ReplicaSetup {
                addr: replica(i + 1),
                isn: isns[usize::from(i)],
                wscale: 0,
            })
            .collect(),
        client_wscale: None,
        accepted: true,
        input_end: None,
        snd_una: None,
        fin_received: false,
    }
}

/// After a takeover a connection's record may leave out a replica that
/// serves in the group (the router before took it out of that connection,
/// or had not yet; its agent never heard). The connection's input events
/// then skip it: its shim would find a hole in the order and its server
/// would serve on until then. Where the replica's servers follow the order
/// (its agent said so) it leaves the group at once, loudly (`OrderLost`,
/// its agent told to end its servers); where they do not (a service whose
/// servers read their sockets directly) it misses nothing and stays.
/// (Simulation seed 6731: an agent passed on number 74 after 72.)
#[test]
fn a_replica_an_adopted_connections_events_leave_out_leaves_the_group() {
    for follows in [true, false] {
        let mut r = sequencer_router(3);
        r.set_follows_order(replica(3), follows);
        let (risn, isns) = (7_000_000u32, [1_000_000u32, 2_000_000, 3_000_000]);
        let mut rec = record_of_three(risn, &isns);
        rec.replicas.truncate(2);
        rec.accepted = false;
        for i in 1..=3u8 {
            r.agent_registered(replica(i));
        }
        for i in 1..=2u8 {
            r.adopt(t(0), replica(i), &rec);
        }
        for i in 1..=3u8 {
            r.records_done(t(0), replica(i));
        }
        drain(&mut r);
        for i in 1..=2u8 {
            let a = Repr::new(
                PORT,
                CPORT,
                SeqNum(isns[usize::from(i) - 1]).add(1),
                SeqNum(CISN).add(1),
                flags::ACK,
                500,
            );
            r.handle_packet(t(1), seg(replica(i), CLIENT, a, b""));
        }
        drain(&mut r);
        let msgs = agent_msgs(&mut r);
        let accept = msgs.iter().find_map(|m| match m {
            AgentMsg::Input {
                kind: ftnet_core::InputKind::Accept,
                replicas,
                ..
            } => Some(replicas.clone()),
            _ => None,
        });
        assert_eq!(accept, Some(vec![replica(1), replica(2)]), "{msgs:?}");
        let evs = log_events(&mut r);
        let down = evs.iter().any(|e| matches!(e, Event::ReplicaDown { replica: a, reason: EvictReason::OrderLost, .. } if *a == replica(3)));
        let restart = msgs
            .iter()
            .any(|m| matches!(m, AgentMsg::Restart { replica: a, .. } if *a == replica(3)));
        assert_eq!(
            (down, restart),
            (follows, follows),
            "follows {follows}: {evs:?} {msgs:?}"
        );
    }
}

/// After a takeover a replica named in a connection's record may have no
/// part in the connection as rebuilt: its agent had no record of it (its
/// server lost the socket: the router before reset it while no router
/// could tell). Its shim gets the connection's events and drops them, so
/// its server misses that connection's input from the first chunk on,
/// while it serves the rest (a Redis replica served on with ten writers'
/// commands missing, its digest differing at the end). Where its servers
/// follow the order it leaves the service then, loudly (`MissedInput`,
/// with the reason in the log and its agent told to end its servers);
/// not before a chunk is numbered (a connection that gets no more input
/// costs it nothing), and not where its servers do not follow the order.
#[test]
fn a_replica_with_no_part_in_an_adopted_connection_leaves_at_its_first_chunk() {
    for follows in [true, false] {
        let mut r = sequencer_router(3);
        for i in 1..=3u8 {
            r.set_follows_order(replica(i), follows);
        }
        let (risn, isns) = (7_000_000u32, [1_000_000u32, 2_000_000, 3_000_000]);
        let rec = record_of_three(risn, &isns);
        for i in 1..=3u8 {
            r.agent_registered(replica(i));
        }
        // Only replica 1's agent has the record; 2's and 3's had none.
        r.adopt(t(0), replica(1), &rec);
        for i in 1..=3u8 {
            r.records_done(t(0), replica(i));
        }
        drain(&mut r);
        let a = Repr::new(
            PORT,
            CPORT,
            SeqNum(isns[0]).add(1),
            SeqNum(CISN).add(1),
            flags::ACK,
            500,
        );
        r.handle_packet(t(1), seg(replica(1), CLIENT, a, b""));
        drain(&mut r);
        agent_msgs(&mut r);
        let evs = log_events(&mut r);
        assert!(
            !evs.iter().any(|e| matches!(e, Event::ReplicaDown { .. })),
            "rebuilt, no chunk yet: {evs:?}"
        );
        let d = Repr::new(
            CPORT,
            PORT,
            SeqNum(CISN).add(1),
            SeqNum(risn).add(1),
            flags::ACK | flags::PSH,
            502,
        );
        r.handle_packet(t(2), seg(CLIENT, VIP, d, b"SET k v\r\n"));
        drain(&mut r);
        let msgs = agent_msgs(&mut r);
        assert!(
            msgs.iter().any(|m| matches!(
                m,
                AgentMsg::Input {
                    kind: ftnet_core::InputKind::Data { .. },
                    ..
                }
            )),
            "the chunk is numbered: {msgs:?}"
        );
        let evs = log_events(&mut r);
        for i in 2..=3u8 {
            let down = evs.iter().any(|e| matches!(e, Event::ReplicaDown { replica: a, reason: EvictReason::MissedInput, .. } if *a == replica(i)));
            let told = evs.iter().any(|e| matches!(e, Event::Evicted { replica: a, reason: EvictReason::MissedInput, detail, .. } if *a == replica(i) && detail.contains("no part in the connection as rebuilt")));
            let restart = msgs
                .iter()
                .any(|m| matches!(m, AgentMsg::Restart { replica: a, .. } if *a == replica(i)));
            assert_eq!(
                (down, told, restart),
                (follows, follows, follows),
                "follows {follows}, replica {i}: {evs:?} {msgs:?}"
            );
        }
        assert!(
            !evs.iter()
                .any(|e| matches!(e, Event::ReplicaDown { replica: a, .. } if *a == replica(1))),
            "{evs:?}"
        );
        // Once: the next chunk says nothing more.
        let d = Repr::new(
            CPORT,
            PORT,
            SeqNum(CISN).add(10),
            SeqNum(risn).add(1),
            flags::ACK | flags::PSH,
            502,
        );
        r.handle_packet(t(3), seg(CLIENT, VIP, d, b"GET k\r\n"));
        let evs = log_events(&mut r);
        assert!(
            !evs.iter().any(|e| matches!(
                e,
                Event::Evicted {
                    reason: EvictReason::MissedInput,
                    ..
                }
            )),
            "{evs:?}"
        );
    }
}

/// Both servers closed a connection whose bytes were all delivered both
/// ways, and its closing handshake then stood still (the client neither
/// acknowledged their FIN nor sent its own: a FIN lost while no router was
/// up, its sender gone). Waiting for it would hold every join off until
/// the idle timeout (the fault campaign's stuck join after a router cut):
/// once it has been still for 5 s a join ends it, with a RST to the client
/// and to each replica at exactly what each acknowledged, and goes on. A
/// connection with output the client has not acknowledged is not ended.
#[test]
fn a_join_ends_a_connection_whose_closing_stood_still() {
    for client_acked_all in [true, false] {
        let (mut r, risn, isns) = if client_acked_all {
            quiet_service_without_replica_3()
        } else {
            // "world" was never acknowledged: the client may still need it.
            quiet_service_without_replica_3_unacked()
        };
        servers_close(&mut r, &isns);
        log_events(&mut r);
        run_to(&mut r, t(3000));
        r.join_replica(t(3000), "t", replica(3)).expect("join");
        r.handle_timeout(t(3012));
        let ev = log_events(&mut r);
        assert!(
            !ev.iter()
                .any(|e| matches!(e, Event::ConnectionEnded { .. })),
            "still for 3 s only: {ev:?}"
        );
        run_to(&mut r, t(5001));
        log_events(&mut r);
        drain(&mut r);
        run_to(&mut r, t(7000));
        r.join_replica(t(7000), "t", replica(3)).ok();
        r.handle_timeout(t(7012));
        let ev = log_events(&mut r);
        let out = drain(&mut r);
        let ended = ev.iter().any(|e| matches!(e, Event::ConnectionEnded { why, .. } if why.contains("the servers closed")));
        assert_eq!(ended, client_acked_all, "{ev:?}");
        if client_acked_all {
            let mut rsts: Vec<_> = out
                .iter()
                .filter(|o| o.r.flags & flags::RST != 0)
                .map(|o| (o.dst, o.r.seq.0))
                .collect();
            rsts.sort();
            assert_eq!(
                rsts,
                vec![
                    (CLIENT, SeqNum(risn).add(6).0),
                    (replica(1), SeqNum(CISN).add(6).0),
                    (replica(2), SeqNum(CISN).add(6).0),
                ],
                "{out:?}"
            );
            assert!(
                ev.iter().any(|e| matches!(e, Event::JoinCheckpoint { .. })),
                "the join goes on: {ev:?}"
            );
        }
    }
}

/// `quiet_service_without_replica_3`, but the client acknowledged none of
/// "world".
fn quiet_service_without_replica_3_unacked() -> (Router, u32, Vec<u32>) {
    let mut r = sequencer_router_joining(3, false);
    let (risn, isns) = handshake(&mut r, 3);
    assert_eq!(r.replica_failed(t(3), replica(3)), 1);
    drain(&mut r);
    client_bytes(&mut r, t(4), risn, 0, b"hello");
    for i in 1..=2u8 {
        from_replica(&mut r, t(5), &isns, i, (1, 6, 6000), b"world");
    }
    drain(&mut r);
    log_events(&mut r);
    agent_msgs(&mut r);
    (r, risn, isns)
}

/// Replicas 1 and 2's servers close the connection after "world" (their
/// FIN at 6 bytes past their ISN), at 7 ms.
fn servers_close(r: &mut Router, isns: &[u32]) {
    for i in 1..=2u8 {
        let mut f = Repr::new(
            PORT,
            CPORT,
            SeqNum(isns[usize::from(i) - 1]).add(6),
            SeqNum(CISN).add(6),
            flags::ACK | flags::FIN,
            500,
        );
        f.timestamps = Some((6002, 1001));
        r.handle_packet(t(7), seg(replica(i), CLIENT, f, b""));
    }
    drain(r);
}

/// The ACKs to the client in `out`.
fn acks_to_client(out: &[Out]) -> Vec<SeqNum> {
    out.iter()
        .filter(|o| o.dst == CLIENT && o.r.flags & flags::ACK != 0)
        .map(|o| o.r.ack)
        .collect()
}

/// A slow replica acknowledges part of the client's bytes after the client
/// sent them again (its retransmission timeout): the ACK that moves into
/// them goes to the client without a timestamp echo. (The replica's echo
/// is older than the retransmission: Linux, seeing it, undoes its timeout
/// as spurious while the retransmission is still out, then counts that
/// retransmission twice at its next timeout, and its retransmission clock
/// never stops: two timeouts in a row at a router takeover, even hours
/// later, end the connection with ETIMEDOUT.) Without a retransmission the
/// echo goes as always; and once all is acknowledged, again.
#[test]
fn an_ack_into_bytes_the_client_sent_again_echoes_no_timestamp() {
    for resent in [false, true] {
        let mut r = router(2);
        let (risn, isns) = handshake(&mut r, 2);
        client_bytes(&mut r, t(3), risn, 0, b"0123456789");
        client_bytes(&mut r, t(3), risn, 10, b"abcdefghij");
        // Replica 1 has all 20 bytes, replica 2 none yet: nothing to tell.
        r.handle_packet(t(4), ack_from(1, isns[0], SeqNum(CISN).add(21), 500));
        assert!(acks_to_client(&drain(&mut r)).is_empty());
        if resent {
            // The client's retransmission timeout: both segments in one.
            client_bytes(&mut r, t(250), risn, 0, b"0123456789abcdefghij");
            drain(&mut r);
        }
        // Replica 2 acknowledges the first segment only.
        r.handle_packet(t(251), ack_from(2, isns[1], SeqNum(CISN).add(11), 500));
        let out = drain(&mut r);
        let to_c: Vec<&Out> = out.iter().filter(|o| o.dst == CLIENT).collect();
        assert_eq!(to_c.len(), 1, "{out:?}");
        assert_eq!(to_c[0].r.ack, SeqNum(CISN).add(11));
        let echo = to_c[0].r.timestamps.map(|x| x.1);
        if resent {
            assert_eq!(echo, Some(0), "an ACK into resent bytes echoed");
        } else {
            assert!(echo.is_some_and(|e| e != 0), "{echo:?}");
        }
        // Then all of them: the echo is back.
        r.handle_packet(t(252), ack_from(2, isns[1], SeqNum(CISN).add(21), 500));
        let out = drain(&mut r);
        assert_eq!(acks_to_client(&out), vec![SeqNum(CISN).add(21)]);
        assert!(out[0].r.timestamps.is_some_and(|x| x.1 != 0), "{out:?}");
    }
}

/// After a takeover, the client's bytes beyond the slowest replica's
/// position may be a retransmission the new router never saw (it died with
/// the router before): until the client sends bytes, segments to it echo
/// no timestamp, so that an ACK moving into such a retransmission cannot
/// make Linux take its timeout for spurious while the retransmission is
/// out (its retransmission count then never returns to zero, and two
/// timeouts in a row at any later takeover end the connection). Once the
/// client sent bytes, those it sent again are known: no echo while the ACK
/// lies inside them, the replicas' echoes once past.
#[test]
fn after_a_takeover_no_echo_until_the_client_sends_nor_while_acking_into_its_resent_bytes() {
    let mut r = router(2);
    let (risn, isns) = (7_000_000u32, [1_000_000u32, 2_000_000]);
    adopt_two_with(&mut r, risn, isns, 0, Some(4242));
    // Positions: both sent 100 bytes and acknowledged 86 client bytes.
    for i in 0..2usize {
        let mut a = Repr::new(
            PORT,
            CPORT,
            SeqNum(isns[i]).add(101),
            SeqNum(CISN).add(1 + 86),
            flags::ACK,
            64,
        );
        a.timestamps = Some((9000, 777));
        r.handle_packet(t(1), seg(replica(i as u8 + 1), CLIENT, a, b""));
    }
    let reply = |i: usize, off: u32, p: &[u8], ack: u32| {
        let mut d = Repr::new(
            PORT,
            CPORT,
            SeqNum(isns[i]).add(101 + off),
            SeqNum(CISN).add(1 + ack),
            flags::ACK | flags::PSH,
            64,
        );
        d.timestamps = Some((9001, 777));
        seg(replica(i as u8 + 1), CLIENT, d, p)
    };
    let echo = |out: Vec<Out>| -> Vec<Option<u32>> {
        out.iter()
            .filter(|o| o.dst == CLIENT)
            .map(|o| o.r.timestamps.map(|x| x.1))
            .collect()
    };
    let mut echoes = echo(drain(&mut r));
    r.handle_packet(t(2), reply(0, 0, b"xyz", 86));
    echoes.extend(echo(drain(&mut r)));
    assert!(!echoes.is_empty());
    assert!(
        echoes.iter().all(|e| *e == Some(0)),
        "no echo yet: {echoes:?}"
    );
    // The client's retransmission: bytes 80..100, of which the replicas
    // hold up to 86.
    let mut d = Repr::new(
        CPORT,
        PORT,
        SeqNum(CISN).add(1 + 80),
        SeqNum(risn).add(1 + 103),
        flags::ACK | flags::PSH,
        502,
    );
    d.timestamps = Some((5555, 9001));
    r.handle_packet(t(3), seg(CLIENT, VIP, d, &[b'c'; 20]));
    drain(&mut r);
    // Replica 1 takes all of it, replica 2 only up to 90: the ACK into
    // the resent bytes echoes nothing.
    r.handle_packet(t(4), reply(0, 3, b"uvw", 100));
    r.handle_packet(t(4), reply(1, 0, b"xyzuvw", 90));
    let out = drain(&mut r);
    let to_c: Vec<&Out> = out.iter().filter(|o| o.dst == CLIENT).collect();
    assert!(!to_c.is_empty(), "{out:?}");
    for o in &to_c {
        assert!(o.r.ack.is_before(SeqNum(CISN).add(101)));
        assert_eq!(o.r.timestamps.map(|x| x.1), Some(0), "{o:?}");
    }
    // Replica 2 has all: the client is told.
    let mut a = Repr::new(
        PORT,
        CPORT,
        SeqNum(isns[1]).add(107),
        SeqNum(CISN).add(101),
        flags::ACK,
        64,
    );
    a.timestamps = Some((9002, 5555));
    r.handle_packet(t(5), seg(replica(2), CLIENT, a, b""));
    let out = drain(&mut r);
    assert_eq!(acks_to_client(&out), vec![SeqNum(CISN).add(101)]);
    assert!(
        out[0].r.timestamps.is_some_and(|x| x.1 != 0),
        "echoes pass again: {out:?}"
    );
}

/// After a takeover the client echoes the dead router's clock until a
/// segment of the new one fills what it lacks. Mapped to a replica's
/// clock, that echo dates the client's ACK before the retransmissions of
/// the outage: a Linux replica without SACK then takes its timeout for
/// spurious and resends the next segment the outage ate only at its next
/// timeout (half a second later, seen in the fault campaign's router
/// cuts). Such an echo goes to the replicas as none; once the client
/// echoes the new router's clock, echoes are mapped again.
#[test]
fn after_a_takeover_the_clients_echo_of_the_old_routers_clock_reaches_no_replica() {
    let mut r = router(2);
    let (risn, isns) = (7_000_000u32, [1_000_000u32, 2_000_000]);
    adopt_two_with(&mut r, risn, isns, 0, Some(4242));
    for i in 0..2usize {
        let mut a = Repr::new(
            PORT,
            CPORT,
            SeqNum(isns[i]).add(101),
            SeqNum(CISN).add(1 + 86),
            flags::ACK,
            64,
        );
        a.timestamps = Some((9000, 777));
        r.handle_packet(t(1), seg(replica(i as u8 + 1), CLIENT, a, b""));
    }
    drain(&mut r);
    let client = |at: u64, off: u32, tsval: u32, echo: u32, r: &mut Router| -> Vec<Out> {
        let mut d = Repr::new(
            CPORT,
            PORT,
            SeqNum(CISN).add(1 + off),
            SeqNum(risn).add(1 + 90),
            flags::ACK | flags::PSH,
            502,
        );
        d.timestamps = Some((tsval, echo));
        r.handle_packet(t(at), seg(CLIENT, VIP, d, b"abcd"));
        drain(r)
    };
    let echoes_to_replicas = |out: &[Out]| -> Vec<Option<u32>> {
        out.iter()
            .filter(|o| o.dst != CLIENT)
            .filter(|o| o.r.flags & flags::SYN == 0)
            .map(|o| o.r.timestamps.map(|x| x.1))
            .collect()
    };
    // The old router's TSval 4000 (its base 4242 at the adoption).
    let out = client(3, 86, 5555, 4000, &mut r);
    let e = echoes_to_replicas(&out);
    assert_eq!(e.len(), 2, "{out:?}");
    assert!(e.iter().all(|x| *x == Some(0)), "old echo forwarded: {e:?}");
    // The router answers; the client echoes the TSval it took from it.
    let mut a = Repr::new(
        PORT,
        CPORT,
        SeqNum(isns[0]).add(101),
        SeqNum(CISN).add(1 + 90),
        flags::ACK,
        64,
    );
    a.timestamps = Some((9010, 5555));
    let mut a2 = a.clone();
    r.handle_packet(t(4), seg(replica(1), CLIENT, a, b""));
    a2.seq = SeqNum(isns[1]).add(101);
    r.handle_packet(t(4), seg(replica(2), CLIENT, a2, b""));
    let out = drain(&mut r);
    let own = out
        .iter()
        .filter(|o| o.dst == CLIENT)
        .find_map(|o| o.r.timestamps.map(|x| x.0))
        .expect("a segment to the client");
    let out = client(5, 90, 5556, own, &mut r);
    let e = echoes_to_replicas(&out);
    assert_eq!(e.len(), 2, "{out:?}");
    assert!(
        e.iter().all(|x| x.is_some_and(|v| v != 0)),
        "the new router's clock is mapped: {e:?}"
    );
}

/// A router can die between the replicas' SYN-ACKs and the client's ACK
/// of the handshake: the agents have the record, but the replicas are still
/// half-open. Linux (6.14 on) takes an ACK in SYN-RECEIVED only if it echoes
/// one of its SYN-ACKs' TSvals, or none; the router knows only the newer
/// TSval of a replica's position answer. So a leg whose replica has neither
/// acknowledged nor sent a byte gets TSecr 0 (on the client's segments and
/// the router's own), and the mapped echo once it has.
#[test]
fn a_replica_still_half_open_after_a_takeover_is_sent_no_echo_it_would_reject() {
    let mut r = router(2);
    let (risn, isns) = (7_000_000u32, [1_000_000u32, 2_000_000]);
    adopt_two_with(&mut r, risn, isns, 0, Some(4242));
    // Both at the handshake: nothing sent, nothing acknowledged.
    for i in 0..2usize {
        let mut a = Repr::new(
            PORT,
            CPORT,
            SeqNum(isns[i]).add(1),
            SeqNum(CISN).add(1),
            flags::ACK,
            64,
        );
        a.timestamps = Some((9000, 1000));
        r.handle_packet(t(1), seg(replica(i as u8 + 1), CLIENT, a, b""));
    }
    let out = drain(&mut r);
    let own = out
        .iter()
        .filter(|o| o.dst == CLIENT)
        .find_map(|o| o.r.timestamps.map(|x| x.0))
        .expect("the rebuild's ACK to the client");
    let send = |r: &mut Router, at: u64, off: u32| -> Vec<Out> {
        let mut d = Repr::new(
            CPORT,
            PORT,
            SeqNum(CISN).add(1 + off),
            SeqNum(risn).add(1),
            flags::ACK | flags::PSH,
            502,
        );
        d.timestamps = Some((5555 + off, own));
        r.handle_packet(t(at), seg(CLIENT, VIP, d, b"abcd"));
        drain(r)
    };
    let echo_to = |out: &[Out], i: u8| -> Vec<u32> {
        out.iter()
            .filter(|o| o.dst == replica(i) && !o.payload.is_empty())
            .map(|o| o.r.timestamps.expect("timestamps").1)
            .collect()
    };
    let out = send(&mut r, 2, 0);
    assert_eq!(echo_to(&out, 1), vec![0], "{out:?}");
    assert_eq!(echo_to(&out, 2), vec![0], "{out:?}");
    // Replica 1's kernel took it (established now); replica 2's did not.
    let mut a = Repr::new(
        PORT,
        CPORT,
        SeqNum(isns[0]).add(1),
        SeqNum(CISN).add(5),
        flags::ACK,
        64,
    );
    a.timestamps = Some((9010, 5555));
    r.handle_packet(t(3), seg(replica(1), CLIENT, a, b""));
    drain(&mut r);
    let out = send(&mut r, 4, 4);
    let e1 = echo_to(&out, 1);
    assert!(e1.len() == 1 && e1[0] != 0, "mapped again: {out:?}");
    assert_eq!(echo_to(&out, 2), vec![0], "{out:?}");
}

/// Replica `i` answers a rebuilt connection's position probe: its SND.NXT
/// is `snd_nxt`, and it acknowledged `acked` bytes of the client's.
fn position_answer(r: &mut Router, at: Instant, i: u8, snd_nxt: SeqNum, acked: u32) {
    let a = Repr::new(
        PORT,
        CPORT,
        snd_nxt,
        SeqNum(CISN).add(1 + acked),
        flags::ACK,
        64,
    );
    r.handle_packet(at, seg(replica(i), CLIENT, a, b""));
}

/// A replica whose agent reported its SND.UNA with the record (read from
/// its kernel) and whose output goes beyond it is prompted to resend as
/// soon as the connection is whole, quoting exactly that, before the
/// client speaks: the client's ACK, forwarded later, may move its SND.UNA,
/// and Linux then ignores the prompt and rearms a fresh RTO. A replica
/// with nothing unacknowledged, or without a report, is not prompted here.
#[test]
fn a_rebuilt_connection_prompts_a_replica_at_the_snd_una_its_agent_read() {
    let mut r = router(2);
    let (risn, isns) = (7_000_000u32, [1_000_000u32, 2_000_000]);
    // Replica 1's peer acknowledged 90 of its 100 bytes; replica 2's all.
    adopt_two_una(
        &mut r,
        risn,
        isns,
        0,
        None,
        [Some(isns[0] + 1 + 90), Some(isns[1] + 1 + 100)],
    );
    position_answer(&mut r, t(1), 1, SeqNum(isns[0]).add(101), 86);
    assert!(
        drain_sent(&mut r)
            .iter()
            .all(|s| !matches!(s, Sent::Icmp(..))),
        "not whole yet"
    );
    position_answer(&mut r, t(2), 2, SeqNum(isns[1]).add(101), 86);
    let sent = drain_sent(&mut r);
    let to_replicas: Vec<&Sent> = sent
        .iter()
        .filter(|s| match s {
            Sent::Icmp(_, dst, _) => *dst != CLIENT,
            Sent::Tcp(o) => o.dst != CLIENT,
        })
        .collect();
    assert_eq!(
        to_replicas.len(),
        3,
        "three prompts to replica 1, nothing else: {sent:?}"
    );
    for s in to_replicas {
        let Sent::Icmp(src, dst, u) = s else {
            panic!("{sent:?}")
        };
        assert_eq!((*src, *dst), (CLIENT, replica(1)));
        assert_eq!(u.code, icmp::CODE_HOST_UNREACHABLE);
        assert_eq!(
            (u.src, u.dst, u.src_port, u.dst_port),
            (replica(1), CLIENT, PORT, CPORT)
        );
        assert_eq!(u.seq, SeqNum(isns[0]).add(1 + 90), "its SND.UNA exactly");
    }
    // The client's prompts follow as before (three, the ACK, the probe).
    assert_eq!(r.counters().rto_prompts, 6);
    // Without reports, nothing goes to the replicas before the client speaks.
    let mut r = router(2);
    adopt_two_una(&mut r, risn, isns, 0, None, [None, None]);
    position_answer(&mut r, t(1), 1, SeqNum(isns[0]).add(101), 86);
    position_answer(&mut r, t(2), 2, SeqNum(isns[1]).add(101), 86);
    let sent = drain_sent(&mut r);
    assert!(
        sent.iter().all(|s| match s {
            Sent::Icmp(_, dst, _) => *dst == CLIENT,
            Sent::Tcp(o) => o.dst == CLIENT,
        }),
        "{sent:?}"
    );
    assert_eq!(r.counters().rto_prompts, 3);
}

/// A client whose data died with the router resends it at its timeout. If
/// that resend reaches the new router while the connection is still
/// rebuilt, it goes at once only to the replicas whose position is known;
/// the others get it as soon as they tell theirs, with the client's newest
/// ACK. Dropped for them, the group would not acknowledge it, and the
/// client would wait out another timeout (the campaign's echo streams
/// stalled about 490 ms: one RTO lost in the rebuild, then a second).
#[test]
fn a_clients_resend_during_a_rebuild_reaches_the_replicas_that_tell_their_position_later() {
    let mut r = router(2);
    let (risn, isns) = (7_000_000u32, [1_000_000u32, 2_000_000]);
    adopt_two_with(&mut r, risn, isns, 0, None);
    position_answer(&mut r, t(1), 1, SeqNum(isns[0]).add(101), 86);
    drain(&mut r);
    let d = Repr::new(
        CPORT,
        PORT,
        SeqNum(CISN).add(1 + 86),
        SeqNum(risn).add(1 + 100),
        flags::ACK | flags::PSH,
        502,
    );
    r.handle_packet(t(2), seg(CLIENT, VIP, d, &[b'c'; 14]));
    let out = drain(&mut r);
    let data: Vec<&Out> = out.iter().filter(|o| !o.payload.is_empty()).collect();
    assert_eq!(data.len(), 1, "replica 1 only, at once: {out:?}");
    assert_eq!(data[0].dst, replica(1));
    // Replica 2 tells its position: it gets the resend now.
    position_answer(&mut r, t(3), 2, SeqNum(isns[1]).add(101), 86);
    let out = drain(&mut r);
    let data: Vec<&Out> = out
        .iter()
        .filter(|o| !o.payload.is_empty() && o.dst != CLIENT)
        .collect();
    assert_eq!(data.len(), 1, "replica 2 gets the resend: {out:?}");
    let o = data[0];
    assert_eq!(o.dst, replica(2));
    assert_eq!(o.r.seq, SeqNum(CISN).add(1 + 86));
    assert_eq!(o.payload, vec![b'c'; 14]);
    assert_eq!(
        o.r.ack,
        SeqNum(isns[1]).add(1 + 100),
        "in replica 2's space"
    );
    assert_eq!(r.counters().rebuild_resends, 1);
    // Once the connection is whole, nothing is kept or sent again.
    position_answer(&mut r, t(4), 2, SeqNum(isns[1]).add(101), 100);
    position_answer(&mut r, t(4), 1, SeqNum(isns[0]).add(101), 100);
    let out = drain(&mut r);
    assert!(
        out.iter().all(|o| o.payload.is_empty() || o.dst == CLIENT),
        "{out:?}"
    );
    assert_eq!(r.counters().rebuild_resends, 1);
}

/// A router that takes over holds the virtual address before the agents
/// registered with it (a router cut: VRRP moved it after ~100 ms, the
/// agents gave the silent router up after 150 ms). A client's resend that
/// lands in between belongs to no connection yet; dropped, the client
/// waited for its next resend, backed off (~400 ms after its first). It is
/// kept instead, and reaches the connection as the records bring it in,
/// then each replica as it tells its position. Kept only a second, and
/// only while the router may be taking over.
#[test]
fn a_clients_resend_before_the_agents_registered_reaches_the_connection_adopted_later() {
    let (risn, isns) = (7_000_000u32, [1_000_000u32, 2_000_000]);
    let resend = |r: &mut Router, now: Instant| {
        let d = Repr::new(
            CPORT,
            PORT,
            SeqNum(CISN).add(1 + 86),
            SeqNum(risn).add(1 + 100),
            flags::ACK | flags::PSH,
            502,
        );
        r.handle_packet(now, seg(CLIENT, VIP, d, &[b'c'; 14]));
    };
    for (kept, adopt_at) in [(true, 300u64), (false, 1_300)] {
        let mut r = router(2);
        r.require_agents();
        resend(&mut r, t(0));
        assert!(drain(&mut r).is_empty());
        assert_eq!(r.counters().orphans_kept, 1);
        for i in 1..=2 {
            r.handle_timeout(t(adopt_at));
            r.agent_registered(replica(i));
        }
        adopt_two_as(&mut r, t(adopt_at), risn, isns, 0, None, |_, _| {});
        let mut got = Vec::new();
        for i in 1..=2u8 {
            position_answer(
                &mut r,
                t(adopt_at + 1),
                i,
                SeqNum(isns[usize::from(i) - 1]).add(101),
                86,
            );
            got.extend(
                drain(&mut r)
                    .into_iter()
                    .filter(|o| o.dst != CLIENT && o.payload == vec![b'c'; 14])
                    .map(|o| (o.dst, o.r.seq.diff(SeqNum(CISN)))),
            );
        }
        if kept {
            assert_eq!(
                got,
                vec![(replica(1), 87), (replica(2), 87)],
                "the resend reaches both replicas"
            );
            assert_eq!(r.counters().orphans_replayed, 1);
        } else {
            assert!(got.is_empty(), "older than a second: dropped {got:?}");
            assert_eq!(r.counters().orphans_replayed, 0);
        }
    }
    // At most `ORPHANS_PER_CONN` of one connection are kept.
    let mut r = router(2);
    r.require_agents();
    for k in 0..12 {
        resend(&mut r, t(k));
    }
    assert_eq!(
        r.counters().orphans_kept,
        ftnet_core::ORPHANS_PER_CONN as u64
    );
    // Long after the agents registered, a segment of no connection is
    // dropped at once.
    let mut r = router(2);
    r.require_agents();
    r.handle_timeout(t(1));
    r.agent_registered(replica(1));
    resend(&mut r, t(2_100));
    assert_eq!(r.counters().orphans_kept, 0);
}

/// After a takeover the router does not know which replica's stream the
/// client followed. The client holds at least what the slowest replica
/// sent; a replica whose output reaches beyond must resend that part on
/// its own retransmission timer, while one that stands where the client
/// does sends its next bytes fresh. The client follows the latter (an echo
/// stream in the campaign waited 690 ms on a replica that owed it 162 KB
/// while another's next 38 KB were held back as a standby's).
#[test]
fn a_rebuilt_connection_follows_the_replica_that_owes_the_client_least() {
    for first_ahead in [true, false] {
        let what = format!("the replica adopted first is ahead: {first_ahead}");
        let mut r = router(2);
        let (risn, isns) = (7_000_000u32, [1_000_000u32, 2_000_000]);
        adopt_two_with(&mut r, risn, isns, 0, None);
        // One replica sent 300 bytes (the last 200 died with the router),
        // the other 100.
        let (a, b) = if first_ahead { (300, 100) } else { (100, 300) };
        position_answer(&mut r, t(1), 1, SeqNum(isns[0]).add(1 + a), 86);
        position_answer(&mut r, t(2), 2, SeqNum(isns[1]).add(1 + b), 86);
        drain(&mut r);
        // The one at 100 sends its next 50 bytes at once.
        let (i, isn) = if first_ahead {
            (2u8, isns[1])
        } else {
            (1, isns[0])
        };
        let d = Repr::new(
            PORT,
            CPORT,
            SeqNum(isn).add(101),
            SeqNum(CISN).add(1 + 86),
            flags::ACK | flags::PSH,
            64,
        );
        r.handle_packet(t(3), seg(replica(i), CLIENT, d, &[b's'; 50]));
        let out = drain(&mut r);
        let to_client: Vec<&Out> = out
            .iter()
            .filter(|o| o.dst == CLIENT && !o.payload.is_empty())
            .collect();
        assert_eq!(to_client.len(), 1, "{what}: {out:?}");
        assert_eq!(to_client[0].r.seq, SeqNum(risn).add(101), "{what}");
        assert_eq!(to_client[0].payload.len(), 50, "{what}");
    }
}

/// A connection rebuilt after a takeover: each endpoint may be waiting out
/// a backed-off retransmission timeout (what it sent into the outage died).
/// Right before the rebuild's ACK the client gets ICMP host-unreachable
/// messages quoting its segment at that ACK (RFC 6069: Linux takes back one
/// back-off step each and resends at once; after an ACK that moved its
/// SND.UNA it would ignore them), then, after the ACK, a garbage octet
/// 2^30 back that it answers with what it holds. A replica that sent more than that
/// gets the same prompt, quoting its SND.UNA, after the client's ACK went
/// to it. A client that spoke to the new router before the connection was
/// whole is prompted too (its resend reached only the replicas whose
/// position was known); a replica the client has everything of is not.
#[test]
fn a_rebuilt_connection_prompts_both_ends_to_retransmit() {
    for (client_speaks, client_holds) in [(false, 90u32), (false, 100), (true, 90)] {
        let what = format!("client speaks first: {client_speaks}, holds {client_holds}");
        let mut r = router(2);
        let (risn, isns) = (7_000_000u32, [1_000_000u32, 2_000_000]);
        adopt_two_with(&mut r, risn, isns, 0, None);
        // Positions: both sent 100 bytes and acknowledged 86 client bytes.
        let answer = |r: &mut Router, i: usize, at: u64| {
            position_answer(r, t(at), i as u8 + 1, SeqNum(isns[i]).add(101), 86);
        };
        answer(&mut r, 0, 1);
        if client_speaks {
            // Its retransmission of bytes 86..100 reaches the new router.
            let d = Repr::new(
                CPORT,
                PORT,
                SeqNum(CISN).add(1 + 86),
                SeqNum(risn).add(1 + 100),
                flags::ACK | flags::PSH,
                502,
            );
            r.handle_packet(t(2), seg(CLIENT, VIP, d, &[b'c'; 14]));
        }
        answer(&mut r, 1, 3);
        let sent = drain_sent(&mut r);
        let icmps: Vec<&Sent> = sent
            .iter()
            .filter(|s| matches!(s, Sent::Icmp(..)))
            .collect();
        if client_speaks {
            // It spoke before the connection was whole: its resend reached
            // replica 1 only (replica 2's position was not known), so the
            // group still acknowledges 86 and it waits for its next,
            // backed-off timeout. It is prompted at 86 (where its resend
            // began, and the group's ACK), and probed all the same: what it
            // said came before the group's position was known, and its
            // answer is its first word since (`first_word_due`).
            assert_eq!(icmps.len(), 3, "{what}: {sent:?}");
            for s in &icmps {
                let Sent::Icmp(_, dst, u) = s else {
                    unreachable!()
                };
                assert_eq!((*dst, u.seq), (CLIENT, SeqNum(CISN).add(1 + 86)), "{what}");
            }
            assert!(
                sent.iter()
                    .any(|s| matches!(s, Sent::Tcp(o) if o.dst == CLIENT && o.payload.len() == 1)),
                "{what}: {sent:?}"
            );
            assert_eq!(r.counters().rto_prompts, 3, "{what}");
            continue;
        }
        let ack = SeqNum(CISN).add(1 + 86);
        // Three prompts, the rebuild's ACK, the probe.
        assert_eq!(sent.len(), 5, "{what}: {sent:?}");
        match &sent[3] {
            Sent::Tcp(o) => {
                assert_eq!(
                    (o.dst, o.r.ack, o.payload.len()),
                    (CLIENT, ack, 0),
                    "{what}"
                );
            }
            s => panic!("{what}: the rebuild's ACK after the prompts, got {s:?}"),
        }
        for s in &sent[..3] {
            let Sent::Icmp(src, dst, u) = s else {
                panic!("{what}: prompts before the ACK that may move SND.UNA to {ack:?}: {sent:?}")
            };
            assert_eq!((*src, *dst), (VIP, CLIENT));
            assert_eq!(u.code, icmp::CODE_HOST_UNREACHABLE);
            assert_eq!(
                (u.src, u.dst, u.src_port, u.dst_port),
                (CLIENT, VIP, CPORT, PORT)
            );
            assert_eq!(u.seq, ack, "{what}: quoting the client's SND.UNA");
        }
        let Sent::Tcp(probe) = &sent[4] else {
            panic!("{what}: {sent:?}")
        };
        assert_eq!(probe.dst, CLIENT);
        assert_eq!(probe.payload.len(), 1);
        assert_eq!(
            probe.r.seq,
            SeqNum(risn).add(101).sub(1 << 30),
            "{what}: 2^30 before what the client was sent"
        );
        assert_eq!(r.counters().rto_prompts, 3, "{what}");
        // The client answers the probe: it holds `client_holds` bytes of
        // the replicas' 100 (their last bytes died with the router).
        let a = Repr::new(
            CPORT,
            PORT,
            SeqNum(CISN).add(1 + 86),
            SeqNum(risn).add(1 + client_holds),
            flags::ACK,
            502,
        );
        r.handle_packet(t(4), seg(CLIENT, VIP, a.clone(), b""));
        let sent = drain_sent(&mut r);
        let mut acked = [false; 2];
        let mut prompts = [0; 2];
        for s in &sent {
            match s {
                Sent::Tcp(o) => {
                    let i = [replica(1), replica(2)]
                        .iter()
                        .position(|a| *a == o.dst)
                        .unwrap();
                    assert_eq!(
                        prompts[i], 0,
                        "{what}: the client's ACK reaches replica {i} first"
                    );
                    assert_eq!(o.r.ack, SeqNum(isns[i]).add(1 + client_holds));
                    acked[i] = true;
                }
                Sent::Icmp(src, dst, u) => {
                    let i = [replica(1), replica(2)]
                        .iter()
                        .position(|a| *a == *dst)
                        .unwrap();
                    assert!(acked[i], "{what}");
                    assert_eq!(*src, CLIENT, "{what}");
                    assert_eq!(
                        (u.src, u.dst, u.src_port, u.dst_port),
                        (replica(i as u8 + 1), CLIENT, PORT, CPORT)
                    );
                    assert_eq!(
                        u.seq,
                        SeqNum(isns[i]).add(1 + client_holds),
                        "{what}: its SND.UNA"
                    );
                    prompts[i] += 1;
                }
            }
        }
        if client_holds == 100 {
            assert_eq!(prompts, [0, 0], "{what}: nothing to resend: {sent:?}");
        } else {
            assert_eq!(prompts, [3, 3], "{what}: {sent:?}");
        }
        // Once only.
        r.handle_packet(t(5), seg(CLIENT, VIP, a, b""));
        r.handle_timeout(t(500));
        assert!(drain_icmp(&mut r).1.is_empty(), "{what}");
    }
}

/// A request/response client is acknowledged only once the last replica
/// took its request, so its SND.UNA may trail what the replicas hold when
/// the router dies: the router before had not yet passed their ACK on.
/// The new router cannot know where it stands; with the sequencer, the
/// agents' reports say where the client's last segments (chunks) ended,
/// and the prompts quote each of those within a window below the
/// replicas' ACK (the one that is its SND.UNA takes back a back-off step),
/// all before the rebuild's ACK moves SND.UNA (after which Linux ignores
/// them).
#[test]
fn a_rebuilt_connection_prompts_the_client_at_its_last_chunk_ends_too() {
    use ftnet_core::{InputKind, NumberedInput, OrderReport};
    let mut r = sequencer_router(2);
    r.await_order();
    let (risn, isns) = (7_000_000u32, [1_000_000u32, 2_000_000]);
    let key = ftnet_core::ConnKey {
        client: CLIENT,
        cport: CPORT,
        vip: VIP,
        vport: PORT,
    };
    // Chunks ending at 20, 59 and 86 (the replicas' ACK), and one of
    // another connection.
    let ev = |seq: u64, cport: u16, end: u32| NumberedInput {
        seq,
        key: ftnet_core::ConnKey { cport, ..key },
        kind: InputKind::Data { end },
    };
    let tail = vec![
        ev(1, CPORT, 20),
        ev(2, CPORT, 59),
        ev(3, CPORT + 1, 70),
        ev(4, CPORT, 86),
    ];
    for i in 1..=2u8 {
        r.order_report(
            t(0),
            replica(i),
            &[OrderReport {
                vip: VIP,
                vport: PORT,
                last_seq: 4,
                tail: tail.clone(),
            }],
        );
    }
    adopt_two_with(&mut r, risn, isns, 0, None);
    for i in 0..2u8 {
        position_answer(
            &mut r,
            t(1 + u64::from(i)),
            i + 1,
            SeqNum(isns[usize::from(i)]).add(101),
            86,
        );
    }
    let sent = drain_sent(&mut r);
    let ack_at = sent
        .iter()
        .position(|s| matches!(s, Sent::Tcp(o) if o.dst == CLIENT && o.payload.is_empty()))
        .expect("the rebuild's ACK");
    let mut quoted = Vec::new();
    for (n, s) in sent.iter().enumerate() {
        if let Sent::Icmp(src, dst, u) = s {
            assert!(n < ack_at, "every prompt before the ACK: {sent:?}");
            assert_eq!((*src, *dst, u.src_port), (VIP, CLIENT, CPORT));
            quoted.push(u.seq.0.wrapping_sub(CISN + 1));
        }
    }
    quoted.dedup();
    assert_eq!(
        quoted,
        vec![86, 59, 20],
        "the replicas' ACK, then the chunk ends below it"
    );
    assert_eq!(r.counters().rto_prompts, 9);
}

/// A connection the router that died recorded but whose SYN-ACK perhaps
/// never reached the client: the replicas hold nothing of the client's
/// (RCV.NXT is its ISN + 1). An ICMP host-unreachable quoting ISN + 1 would
/// end a connect still in SYN-SENT with EHOSTUNREACH (Linux takes it as a
/// hard error there): no prompt, only the probe (discarded in SYN-SENT).
/// Found by the fault campaign: short connections opened across a router
/// kill failed with "No route to host".
#[test]
fn a_rebuilt_connection_that_may_still_be_connecting_gets_no_icmp() {
    let mut r = router(2);
    let (risn, isns) = (7_000_000u32, [1_000_000u32, 2_000_000]);
    adopt_two_with(&mut r, risn, isns, 0, None);
    for (i, at) in [(0usize, 1u64), (1, 2)] {
        position_answer(&mut r, t(at), i as u8 + 1, SeqNum(isns[i]).add(1), 0);
    }
    let sent = drain_sent(&mut r);
    assert!(
        !sent.iter().any(|s| matches!(s, Sent::Icmp(..))),
        "{sent:?}"
    );
    assert!(
        sent.iter()
            .any(|s| matches!(s, Sent::Tcp(o) if o.dst == CLIENT && o.payload.len() == 1)),
        "the probe still goes: {sent:?}"
    );
    assert_eq!(r.counters().rto_prompts, 0);
    // Its SYN-ACK goes again, as recorded: a client still connecting need
    // not wait a second for its SYN's timeout (and a sequenced service's
    // servers for its Accept).
    let synacks: Vec<&Out> = sent
        .iter()
        .filter_map(|s| match s {
            Sent::Tcp(o) if o.dst == CLIENT && o.r.flags == flags::SYN | flags::ACK => Some(o),
            _ => None,
        })
        .collect();
    assert_eq!(synacks.len(), 1, "{sent:?}");
    let o = synacks[0];
    assert_eq!((o.r.seq, o.r.ack), (SeqNum(risn), SeqNum(CISN).add(1)));
    assert_eq!((o.r.mss, o.r.wscale), (Some(1460), None));
    assert_eq!(r.counters().rebuild_synacks, 1);
    // The client had it: its challenge ACK says where it stands.
    let a = Repr::new(
        CPORT,
        PORT,
        SeqNum(CISN).add(1),
        SeqNum(risn).add(1),
        flags::ACK,
        500,
    );
    r.handle_packet(t(3), seg(CLIENT, VIP, a, b""));
    let sent = drain_sent(&mut r);
    for i in 0..2u8 {
        assert!(
            sent.iter()
                .any(|s| matches!(s, Sent::Tcp(o) if o.dst == replica(i + 1) && o.r.flags & flags::RST == 0)),
            "its ACK reaches replica {}: {sent:?}", i + 1
        );
    }
    assert!(
        !sent
            .iter()
            .any(|s| matches!(s, Sent::Tcp(o) if o.r.flags & flags::RST != 0)),
        "{sent:?}"
    );
}

/// As below, but the client's pure ACK came while the connection was
/// still rebuilt (or before the agents' records, kept for it: a router
/// that takes over holds the address before they register). That was its
/// first word, and it came too early to tell anything: the group's ACK was
/// not known. The rebuild's probe asks it again, and its answer gets the
/// duplicate ACKs (an echo stream waited 760 ms across a router kill whose
/// rebuild took 72 ms, its tail's resend at its own timeout).
#[test]
fn a_client_that_spoke_during_the_rebuild_gets_its_duplicate_acks_at_its_next_word() {
    for early in [true, false] {
        let mut r = router(2);
        let (risn, isns) = (7_000_000u32, [1_000_000u32, 2_000_000]);
        let group_ack = SeqNum(CISN).add(1 + 5000);
        let tail = |r: &mut Router, now: Instant| {
            let a = Repr::new(
                CPORT,
                PORT,
                group_ack.add(12 * 1448),
                SeqNum(risn).add(101),
                flags::ACK,
                500,
            );
            r.handle_packet(now, seg(CLIENT, VIP, a, b""));
        };
        adopt_two_with(&mut r, risn, isns, 0, None);
        position_answer(&mut r, t(1), 1, SeqNum(isns[0]).add(101), 5000);
        if early {
            tail(&mut r, t(1));
        }
        position_answer(&mut r, t(2), 2, SeqNum(isns[1]).add(101), 5000);
        let sent = drain_sent(&mut r);
        let probed = sent
            .iter()
            .any(|s| matches!(s, Sent::Tcp(o) if o.dst == CLIENT && o.payload.len() == 1));
        assert!(probed, "the rebuild's probe goes to the client: {sent:?}");
        // Its answer (or, not early, its first word).
        tail(&mut r, t(3));
        let dups = drain_sent(&mut r)
            .iter()
            .filter(|s| {
                matches!(s, Sent::Tcp(o) if o.dst == CLIENT
                    && o.payload.is_empty()
                    && o.r.flags == flags::ACK
                    && o.r.ack == group_ack)
            })
            .count();
        assert_eq!(
            (dups, r.counters().rebuild_dup_acks),
            (3, 3),
            "early {early}"
        );
    }
}

/// A client whose first word after a rebuild is a pure ACK beyond the
/// group's ACK had segments in flight that died with the router before:
/// it is sent duplicate ACKs at once, one fewer than those segments and
/// three at most, so that it resends now, not at its retransmission
/// timeout (a fault campaign: an echo client waited 760 ms after a rebuild
/// of 200 ms, its RTO rearmed by the rebuild's ACK). One segment in
/// flight gets none (more duplicates than it has in flight would raise
/// its reordering estimate), nor does a client that resends on its own.
#[test]
fn a_client_whose_tail_died_with_the_router_gets_duplicate_acks_at_once() {
    let dup_acks_after = |beyond: u32, payload: &[u8]| {
        let mut r = router(2);
        let (risn, isns) = (7_000_000u32, [1_000_000u32, 2_000_000]);
        adopt_two_with(&mut r, risn, isns, 0, None);
        for (i, at) in [(0usize, 1u64), (1, 2)] {
            position_answer(&mut r, t(at), i as u8 + 1, SeqNum(isns[i]).add(101), 5000);
        }
        let rebuilt = drain_sent(&mut r);
        assert!(
            !rebuilt
                .iter()
                .any(|s| matches!(s, Sent::Tcp(o) if o.r.flags & flags::SYN != 0)),
            "replicas sent and took bytes: the client is connected {rebuilt:?}"
        );
        let group_ack = SeqNum(CISN).add(1 + 5000);
        let seq = if payload.is_empty() {
            group_ack.add(beyond)
        } else {
            group_ack
        };
        let a = Repr::new(CPORT, PORT, seq, SeqNum(risn).add(101), flags::ACK, 500);
        r.handle_packet(t(3), seg(CLIENT, VIP, a, payload));
        let sent = drain_sent(&mut r);
        let n = sent
            .iter()
            .filter(|s| {
                matches!(s, Sent::Tcp(o) if o.dst == CLIENT
                    && o.payload.is_empty()
                    && o.r.flags == flags::ACK
                    && o.r.ack == group_ack)
            })
            .count();
        (n, r.counters().rebuild_dup_acks)
    };
    assert_eq!(dup_acks_after(12 * 1448, b""), (3, 3), "twelve in flight");
    assert_eq!(dup_acks_after(2 * 1448, b""), (1, 1), "two in flight");
    assert_eq!(dup_acks_after(1000, b""), (0, 0), "one in flight");
    assert_eq!(dup_acks_after(0, b""), (0, 0), "nothing in flight");
    assert_eq!(
        dup_acks_after(0, &[7; 100]),
        (0, 0),
        "it resends on its own"
    );
}

/// A client that connects and resets at once (a TCP health check), best
/// effort: the sequencer numbers the connection's accept at the client's
/// ACK, then its reset. A replica whose kernel never got that ACK (lost,
/// or its accept queue full) dropped the connection at the reset: its shim
/// learns from the reset event that the connection will not come, and
/// gives its server the accept and the reset the others' servers see.
/// Without the reset event it waited 10 s for the connection, then gave
/// the order up (campaign fault #964).
#[test]
fn a_client_reset_right_after_the_handshake_ends_the_input_in_the_order() {
    use ftnet_core::InputKind;
    let mut r = sequencer_router(3);
    let _ = handshake(&mut r, 3);
    client_rst(&mut r, t(12), 1);
    drain(&mut r);
    assert_eq!(r.connections(), 0);
    assert_eq!(
        input_kinds(&mut r),
        vec![InputKind::Accept, InputKind::Reset]
    );
    // A reset before the client's ACK (no accept numbered): nothing.
    let mut r = sequencer_router(3);
    let mut syn = Repr::new(CPORT, PORT, SeqNum(CISN), SeqNum(0), flags::SYN, 64240);
    syn.mss = Some(1460);
    r.handle_packet(t(0), seg(CLIENT, VIP, syn, b""));
    drain(&mut r);
    client_rst(&mut r, t(1), 1);
    drain(&mut r);
    assert_eq!(input_kinds(&mut r), vec![]);
}
