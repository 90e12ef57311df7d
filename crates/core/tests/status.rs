//! The status of a large table: built in slices (so that a router serving
//! traffic never holds its data plane for a whole walk), the same as at
//! once when nothing changes, with exact totals while connections close.
// Addresses and ports are built from loop indices below 2^16.
#![allow(clippy::cast_possible_truncation)]

use ftnet_core::{Config, Instant, Packet, Router, Service, StatusPass};
use ftnet_wire::tcp::{flags, Repr, Segment};
use ftnet_wire::{ipv4, SeqNum};
use std::net::Ipv4Addr;

const VIP: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 1);
const PORT: u16 = 7000;

fn replica(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 10 + i, 2)
}

fn client(i: u32) -> (Ipv4Addr, u16) {
    (
        Ipv4Addr::from(0xc612_0100u32 + (i >> 8)),
        10_000 + (i & 0xff) as u16,
    )
}

fn drain(r: &mut Router) -> Option<u32> {
    let mut seq = None;
    while let Some(p) = r.poll_transmit() {
        let ip = ipv4::Packet::new_checked(&p.data[..]).expect("IPv4");
        let t = Segment::new_checked(ip.payload()).expect("TCP");
        seq = Some(Repr::parse(&t).seq.0);
    }
    while r.poll_event().is_some() {}
    while r.poll_agent_msg().is_some() {}
    seq
}

/// A router with `n` established connections to 3 replicas.
fn table(n: u32) -> Router {
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
    c.limits.max_connections = 1 << 20;
    let mut r = Router::new(c, [9; 16]);
    let now = Instant::from_micros(1000);
    for i in 0..n {
        let (addr, port) = client(i);
        let mut syn = Repr::new(port, PORT, SeqNum(i), SeqNum(0), flags::SYN, 64240);
        syn.mss = Some(1460);
        r.handle_packet(now, Packet::plain(syn.emit_ipv4(addr, VIP, b"")));
        drain(&mut r);
        let mut risn = 0;
        for k in 1..=3u8 {
            let sa = Repr::new(
                PORT,
                port,
                SeqNum(1000 * u32::from(k)),
                SeqNum(i).add(1),
                flags::SYN | flags::ACK,
                65160,
            );
            r.handle_packet(now, Packet::plain(sa.emit_ipv4(replica(k), addr, b"")));
            if let Some(s) = drain(&mut r) {
                risn = s;
            }
        }
        let ack = Repr::new(
            port,
            PORT,
            SeqNum(i).add(1),
            SeqNum(risn).add(1),
            flags::ACK,
            502,
        );
        r.handle_packet(now, Packet::plain(ack.emit_ipv4(addr, VIP, b"")));
        drain(&mut r);
    }
    assert_eq!(r.connections(), n as usize);
    r
}

#[test]
fn a_status_built_in_slices_is_the_status_of_the_table() {
    let n = 20_000;
    let r = table(n);
    let whole = r.status();
    let mut pass = StatusPass::default();
    let mut slices = 0;
    while !r.status_slice(&mut pass, 512) {
        slices += 1;
    }
    slices += 1;
    // One slice per 512 connections, and the last one finds the end.
    assert_eq!(slices, n.div_ceil(512) + u32::from(n % 512 == 0));
    assert_eq!(pass.open(), n as usize);
    let sliced = r.status_of(pass, Instant::from_micros(1000));
    assert_eq!(format!("{sliced:?}"), format!("{whole:?}"));
    assert_eq!(sliced.services[0].connections, n as usize);
    assert!(sliced.services[0]
        .replicas
        .iter()
        .all(|x| x.connections == n as usize));
    assert_eq!(sliced.sample.len(), 8);
}

#[test]
fn totals_stay_exact_while_connections_close_during_a_pass() {
    let n = 4_000;
    let mut r = table(n);
    let mut pass = StatusPass::default();
    let mut closed = 0;
    let now = Instant::from_micros(2000);
    while !r.status_slice(&mut pass, 256) {
        // A client resets one connection in every 7 between slices (an
        // in-window RST, which ends it at once).
        for _ in 0..40 {
            let i = closed * 7 % n;
            closed += 1;
            let (addr, port) = client(i);
            let rst = Repr::new(port, PORT, SeqNum(i).add(1), SeqNum(0), flags::RST, 0);
            r.handle_packet(now, Packet::plain(rst.emit_ipv4(addr, VIP, b"")));
            drain(&mut r);
        }
    }
    let st = r.status_of(pass, Instant::from_micros(1000));
    assert_eq!(st.connections, r.connections(), "the total is exact");
    let counted = st.services[0].connections;
    // Per service, the pass is off by at most the churn while it ran.
    let churn = n as usize - r.open_connections();
    assert!(churn > 100, "the resets closed connections ({churn})");
    assert!(
        counted.abs_diff(r.open_connections()) <= churn,
        "counted {counted}, open {}, churn {churn}",
        r.open_connections()
    );
    // The sample holds only connections that are still in the table.
    assert!(st.sample.len() <= 8);
}

/// The figure behind the slice size: a whole walk of 65,536 connections
/// against the longest slice (printed; a test machine's timing is no
/// assertion).
#[test]
fn a_slice_holds_the_table_briefly() {
    let r = table(65_536);
    let t = std::time::Instant::now();
    let _ = r.status();
    let whole = t.elapsed();
    let mut pass = StatusPass::default();
    let mut worst = std::time::Duration::ZERO;
    loop {
        let t = std::time::Instant::now();
        let done = r.status_slice(&mut pass, 512);
        worst = worst.max(t.elapsed());
        if done {
            break;
        }
    }
    eprintln!("status of 65,536 connections: one walk {whole:?}, longest slice of 512 {worst:?}");
    assert_eq!(pass.open(), 65_536);
}
