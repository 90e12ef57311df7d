//! The TUN device and the policy routing against a real kernel, inside a
//! private network namespace of the test thread (unshare(CLONE_NEWNET)
//! changes only the calling thread, and children it spawns inherit it).
//! Needs root; without it the test prints a loud SKIPPED line and passes.

use ftnet_core::Packet;
use ftnet_io::{ip, remove_recorded, Plan, Routing, RoutingSpec, Tun, TunOptions, RECV_BUF_LEN};
use ftnet_wire::checksum;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

fn is_root() -> bool {
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Run `f` on a fresh thread in a fresh network namespace.
fn in_netns(f: impl FnOnce() + Send + 'static) {
    std::thread::spawn(move || {
        // SAFETY: unshare(2) with CLONE_NEWNET only changes this thread's
        // network namespace; no memory is involved.
        let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
        assert_eq!(
            rc,
            0,
            "unshare(CLONE_NEWNET): {}",
            std::io::Error::last_os_error()
        );
        f();
    })
    .join()
    .expect("test thread panicked");
}

/// An ICMP echo request from `src` to `dst` with valid checksums.
fn echo_request(src: Ipv4Addr, dst: Ipv4Addr) -> Vec<u8> {
    let mut p = vec![0u8; 20 + 8 + 4];
    let total = u16::try_from(p.len()).unwrap();
    p[0] = 0x45;
    p[2..4].copy_from_slice(&total.to_be_bytes());
    p[8] = 64;
    p[9] = 1; // ICMP
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&dst.octets());
    let c = checksum::complete(&p[..20], 0);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p[20] = 8; // echo request
    p[24..26].copy_from_slice(&0x1234u16.to_be_bytes());
    p[26..28].copy_from_slice(&1u16.to_be_bytes());
    p[28..32].copy_from_slice(b"ftnt");
    let c = checksum::complete(&p[20..], 0);
    p[22..24].copy_from_slice(&c.to_be_bytes());
    p
}

#[test]
fn tun_round_trip_with_vnet_header() {
    if !is_root() {
        eprintln!("\n*** SKIPPED tun_round_trip_with_vnet_header: needs root (TUN, network namespace) ***\n");
        return;
    }
    in_netns(|| {
        let mut tun = Tun::open(&TunOptions::new("fttest0")).expect("open TUN");
        assert_eq!(tun.name(), "fttest0");
        let link = ip(&["-d", "link", "show", "fttest0"]).expect("ip link");
        assert!(link.contains("vnet_hdr on"), "{link}");
        assert!(link.contains(",UP"), "{link}");
        assert!(link.contains("qlen 1000"), "{link}");
        ip(&["addr", "add", "10.9.0.1/24", "dev", "fttest0"]).expect("ip addr");

        // The kernel answers an echo request written into the TUN with an
        // echo reply read back from it, each behind a virtio-net header.
        let req = echo_request(Ipv4Addr::new(10, 9, 0, 2), Ipv4Addr::new(10, 9, 0, 1));
        tun.send(&Packet::plain(req)).expect("send");
        let mut buf = vec![0u8; RECV_BUF_LEN];
        let deadline = Instant::now() + Duration::from_secs(2);
        let reply = loop {
            match tun.recv(&mut buf).expect("recv") {
                Some(p) if p.data.len() >= 28 && p.data[9] == 1 && p.data[20] == 0 => break p,
                Some(_) => {} // router solicitations and the like
                None => {
                    assert!(Instant::now() < deadline, "no echo reply within 2 s");
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        };
        assert_eq!(&reply.data[12..16], &[10, 9, 0, 1]);
        assert_eq!(&reply.data[16..20], &[10, 9, 0, 2]);
        assert_eq!(&reply.data[28..32], b"ftnt");
        assert!(!reply.vnet.is_gso());
    });
}

/// Each replica is bound to the interface its route leaves by; install and
/// drop leave every other rule alone (one at our own priority too); a
/// record removes exactly what was installed, as after a crash.
#[test]
fn routing_installs_and_removes_exactly_its_rules() {
    if !is_root() {
        eprintln!("\n*** SKIPPED routing_installs_and_removes_exactly_its_rules: needs root (network namespace) ***\n");
        return;
    }
    in_netns(|| {
        let _tun = Tun::open(&TunOptions::new("fttest1")).expect("open TUN");
        // The replica's network, on an interface of its own.
        ip(&[
            "link", "add", "ftrep1", "type", "veth", "peer", "name", "ftrep1p",
        ])
        .expect("veth");
        ip(&["addr", "add", "198.18.11.1/24", "dev", "ftrep1"]).expect("addr");
        ip(&["link", "set", "ftrep1", "up"]).expect("up");
        ip(&["link", "set", "ftrep1p", "up"]).expect("up");
        // Rules nobody recorded, at our priority and elsewhere: both stay.
        ip(&[
            "rule", "add", "from", "1.2.3.4", "lookup", "7123", "pref", "7123",
        ])
        .expect("unrecorded");
        ip(&[
            "rule", "add", "from", "5.6.7.8", "lookup", "100", "pref", "100",
        ])
        .expect("foreign");
        let rules_before = ip(&["rule"]).expect("ip rule");
        let forward_before =
            std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").expect("sysctl");

        let spec = RoutingSpec {
            tun: "fttest1".into(),
            table: 7123,
            vips: vec![Ipv4Addr::new(198, 19, 0, 1)],
            replica_ports: vec![
                (Ipv4Addr::new(198, 18, 11, 2), 6379),
                (Ipv4Addr::new(198, 18, 11, 2), 80),
            ],
        };
        let plan = Plan::new(&spec).expect("plan");
        assert_eq!(plan.bindings().len(), 1);
        assert_eq!(plan.bindings()[0].dev, "ftrep1");
        let record = plan.record();
        let routing = Routing::install(plan).expect("routing install");
        let rules = ip(&["rule"]).expect("ip rule");
        assert!(
            rules.contains("1.2.3.4"),
            "unrecorded rule removed:\n{rules}"
        );
        for want in [
            "7123:\tfrom all to 198.19.0.1 lookup 7123",
            "from 198.18.11.2 iif ftrep1 ipproto tcp sport 6379 lookup 7123",
            "from 198.18.11.2 iif ftrep1 ipproto tcp sport 80 lookup 7123",
            "from all iif ftrep1 ipproto icmp lookup 7123",
            "from 198.18.11.2 iif ftrep1 goto 7124",
            "from 198.18.11.2 blackhole",
            "7124:\tfrom all nop",
        ] {
            assert!(rules.contains(want), "no {want:?} in:\n{rules}");
        }
        assert_eq!(rules.matches("ipproto icmp").count(), 1, "{rules}");
        assert!(ip(&["route", "show", "table", "7123"])
            .expect("route")
            .contains("default dev fttest1"));
        assert_eq!(
            std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward")
                .expect("sysctl")
                .trim(),
            "1"
        );

        drop(routing);
        assert_eq!(ip(&["rule"]).expect("ip rule"), rules_before);
        assert_eq!(
            std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").expect("sysctl"),
            forward_before
        );

        // A "crash": nothing removed by the process; its record does it.
        let routing = Routing::install(Plan::new(&spec).expect("plan")).expect("install");
        std::mem::forget(routing);
        assert_eq!(remove_recorded(&record), record.len());
        assert_eq!(ip(&["rule"]).expect("ip rule"), rules_before);
        assert!(!ip(&["route", "show", "table", "7123"])
            .expect("route")
            .contains("blackhole"));
    });
}

#[test]
fn bad_tun_name_is_rejected() {
    let e = Tun::open(&TunOptions::new("a/b")).expect_err("slash in name");
    assert!(e.to_string().contains("invalid interface name"), "{e}");
    let e = Tun::open(&TunOptions::new("abcdefghijklmnop")).expect_err("too long");
    assert!(e.to_string().contains("invalid interface name"), "{e}");
}

/// Four queues with the steering program (two per direction): every
/// packet the kernel sends into the device arrives on the queue the
/// reference computation names — VIP-bound ones on 0–1 by source, the rest on
/// 2–3 by destination — for 32 flows. The kernel's default steering (a flow
/// hash of its own) would agree by chance with probability 4^-32.
#[test]
fn steering_splits_queues_by_direction_and_client() {
    if !is_root() {
        eprintln!("\n*** SKIPPED steering_splits_queues_by_direction_and_client: needs root (TUN, eBPF, network namespace) ***\n");
        return;
    }
    in_netns(|| {
        let mut opts = TunOptions::new("fttest2");
        opts.queues = 4;
        let mut q = Tun::open_queues(&opts).expect("open 4 queues");
        assert_eq!(q.len(), 4);
        let vip = Ipv4Addr::new(10, 9, 0, 77);
        let vips = [Ipv4Addr::new(192, 0, 2, 1), vip];
        let prog = ftnet_io::steer::load(&vips, 2).expect("load steering program");
        use std::os::fd::AsRawFd;
        q[0].set_steering(prog.as_raw_fd()).expect("attach");
        drop(prog); // the device holds its own reference
        ip(&["addr", "add", "10.9.0.1/24", "dev", "fttest2"]).expect("ip addr");
        for i in 0..16u16 {
            // A fresh source port for each VIP-bound flow, a fresh destination port for the others.
            let sock = std::net::UdpSocket::bind("10.9.0.1:0").expect("udp");
            sock.send_to(b"x", (vip, 1000)).expect("send to vip");
            sock.send_to(b"y", (Ipv4Addr::new(10, 9, 0, 88), 2000 + i))
                .expect("send to other");
        }
        let mut buf = vec![0u8; RECV_BUF_LEN];
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut seen = [0usize; 4];
        while seen.iter().sum::<usize>() < 32 {
            let mut got = false;
            for (i, t) in q.iter_mut().enumerate() {
                while let Some(p) = t.recv(&mut buf).expect("recv") {
                    got = true;
                    if p.data.len() >= 28 && p.data[9] == 17 {
                        let want = ftnet_io::steer::queue_of(&p.data, &vips, 2);
                        assert_eq!(i, want, "packet to {:?} on queue {i}", &p.data[16..20]);
                        seen[i] += 1;
                    }
                }
            }
            if !got {
                assert!(
                    Instant::now() < deadline,
                    "only {seen:?} of 32 packets within 2 s"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        assert_eq!(seen[0] + seen[1], 16, "{seen:?}");
        assert_eq!(seen[2] + seen[3], 16, "{seen:?}");
    });
}
