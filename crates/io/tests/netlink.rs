//! The TUN's link settings and the policy routing go over rtnetlink: with
//! `PATH` pointing at an empty directory, so that no `ip` binary can run,
//! the router's rules and routes are installed, listed and removed, and the
//! kernel ends up with exactly what `ip rule add` / `ip route replace` with
//! the same words installs. The test itself looks with `ip`, by its absolute
//! path. Runs in a private network namespace of the test thread; needs
//! root (without it the test prints a loud SKIPPED line and passes).
//!
//! One test in this binary: it changes the process's `PATH`.

use ftnet_io::{
    remove_recorded, rules_at, Binding, Plan, ReplicaRules, Routing, RoutingSpec, Tun, TunOptions,
};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

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

/// `ip`'s absolute path, looked up in `PATH` (before it is emptied).
fn ip_binary() -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join("ip"))
        .find(|p| p.is_file())
}

/// Run the `ip` at `bin` with `args` (split at blanks); its stdout.
fn ip(bin: &Path, args: &str) -> String {
    let out = Command::new(bin)
        .args(args.split_whitespace())
        .output()
        .expect("run ip");
    assert!(
        out.status.success(),
        "ip {args}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn routing_over_netlink_installs_what_ip_would_without_an_ip_binary() {
    if !is_root() {
        eprintln!("\n*** SKIPPED routing_over_netlink_installs_what_ip_would_without_an_ip_binary: needs root (TUN, network namespace) ***\n");
        return;
    }
    let bin = ip_binary().expect("iproute2's ip, for the test's own checks");
    let empty = std::env::temp_dir().join(format!("ftnet-empty-path-{}", std::process::id()));
    std::fs::create_dir_all(&empty).expect("empty dir");
    std::env::set_var("PATH", &empty);
    assert!(
        ftnet_io::ip(&["rule"]).is_err(),
        "an ip binary is still reachable"
    );
    in_netns(move || {
        let ip = |args: &str| ip(&bin, args);
        // Up, with its MTU and queue length, over netlink.
        let mut opts = TunOptions::new("fttest3");
        opts.mtu = 1400;
        opts.txqueuelen = 777;
        let _tun = Tun::open(&opts).expect("open TUN");
        let link = ip("-d link show fttest3");
        assert!(link.contains(",UP"), "{link}");
        assert!(link.contains("mtu 1400"), "{link}");
        assert!(link.contains("qlen 777"), "{link}");
        let l = ftnet_io::link_show("fttest3")
            .expect("link")
            .expect("exists");
        assert_eq!(
            (l.name.as_str(), l.kind.as_deref(), l.persist),
            ("fttest3", Some("tun"), false)
        );
        assert_eq!(ftnet_io::link_show("ftnone").expect("link"), None);
        let lo = ftnet_io::link_show("lo").expect("link").expect("lo");
        assert_eq!((lo.kind, lo.queues), (None, None));
        // A multi-queue TUN reports its attached queues.
        let mut mq = TunOptions::new("fttest4");
        mq.queues = 2;
        let two = Tun::open_queues(&mq).expect("two queues");
        let l = ftnet_io::link_show("fttest4")
            .expect("link")
            .expect("exists");
        assert_eq!((l.kind.as_deref(), l.queues), (Some("tun"), Some(2)));
        drop(two);

        // One replica on a network of its own, one behind a gateway.
        ip("link add ftrep3 type veth peer name ftrep3p");
        ip("addr add 198.18.11.1/24 dev ftrep3");
        ip("link add ftrep4 type veth peer name ftrep4p");
        ip("addr add 10.77.0.1/24 dev ftrep4");
        for d in ["ftrep3", "ftrep3p", "ftrep4", "ftrep4p"] {
            ip(&format!("link set {d} up"));
        }
        ip("route add 198.18.40.0/24 via 10.77.0.2 dev ftrep4");
        let veth = ftnet_io::link_show("ftrep3").expect("link").expect("veth");
        assert_eq!(veth.kind.as_deref(), Some("veth"));
        // Rules nobody recorded, at our priority and elsewhere: both stay.
        ip("rule add from 1.2.3.4 lookup 7123 pref 7123");
        ip("rule add from 5.6.7.8 lookup 100 pref 100");
        let rules_before = ip("rule");

        // The route lookup: output device and gateway; errors name `ip`.
        assert_eq!(
            Binding::resolve("fttest3", Ipv4Addr::new(198, 18, 40, 5)).expect("resolve"),
            Binding {
                replica: Ipv4Addr::new(198, 18, 40, 5),
                dev: "ftrep4".into(),
                via: Some(Ipv4Addr::new(10, 77, 0, 2)),
            }
        );
        let e = Binding::resolve("fttest3", Ipv4Addr::new(203, 0, 113, 9))
            .expect_err("no route")
            .to_string();
        assert!(e.contains("`ip -o route get 203.0.113.9`"), "{e}");
        assert!(e.contains("unreachable"), "{e}");

        let spec = RoutingSpec {
            tun: "fttest3".into(),
            table: 7123,
            vips: vec![Ipv4Addr::new(198, 19, 0, 1)],
            replica_ports: vec![
                (Ipv4Addr::new(198, 18, 11, 2), 6379),
                (Ipv4Addr::new(198, 18, 11, 2), 80),
                (Ipv4Addr::new(198, 18, 40, 5), 6379),
            ],
        };
        let plan = Plan::new(&spec).expect("plan");
        let devs: Vec<&str> = plan.bindings().iter().map(|b| b.dev.as_str()).collect();
        assert_eq!(devs, ["ftrep3", "ftrep4"]);
        let record = plan.record();
        let mut routing = Routing::install(plan).expect("routing install");
        let rules = ip("rule");
        let routes = ip("route show table 7123");
        // The lines `ip rule` printed for the rules `ip` installed before.
        let ours: Vec<&str> = rules
            .lines()
            .map(str::trim_end)
            .filter(|l| l.starts_with("7123:") || l.starts_with("7124:"))
            .collect();
        assert_eq!(
            ours,
            [
                "7123:\tfrom 1.2.3.4 lookup 7123",
                "7123:\tfrom all to 198.19.0.1 lookup 7123",
                "7123:\tfrom 198.18.11.2 iif ftrep3 ipproto tcp sport 6379 lookup 7123",
                "7123:\tfrom 198.18.11.2 iif ftrep3 ipproto tcp sport 80 lookup 7123",
                "7123:\tfrom 198.18.40.5 iif ftrep4 ipproto tcp sport 6379 lookup 7123",
                "7123:\tfrom all iif ftrep3 ipproto icmp lookup 7123",
                "7123:\tfrom all iif ftrep4 ipproto icmp lookup 7123",
                "7123:\tfrom 198.18.11.2 iif ftrep3 goto 7124",
                "7123:\tfrom 198.18.11.2 blackhole",
                "7123:\tfrom 198.18.40.5 iif ftrep4 goto 7124",
                "7123:\tfrom 198.18.40.5 blackhole",
                "7124:\tfrom all nop",
            ],
            "{rules}"
        );
        assert!(
            routes.contains("default dev fttest3 scope link"),
            "{routes}"
        );
        assert!(
            routes.contains("blackhole default metric 4294967295"),
            "{routes}"
        );

        // Rules added at run time; a rule the kernel refuses is an error
        // naming the `ip` command, and nothing of it stays.
        let more = ReplicaRules::more_ports(7123, routing_binding(&spec, 0), &[7001]);
        routing.add_replica(&more).expect("more ports");
        let vip2 = ReplicaRules::vip(7123, Ipv4Addr::new(198, 19, 0, 2));
        routing.add_replica(&vip2).expect("vip");
        let with_added = ip("rule");
        let e = routing
            .add_replica(&ReplicaRules::vip(7123, Ipv4Addr::new(198, 19, 0, 1)))
            .expect_err("a rule that exists already")
            .to_string();
        assert!(
            e.contains("`ip rule add to 198.19.0.1/32 lookup 7123 pref 7123`"),
            "{e}"
        );
        assert!(e.contains("File exists"), "{e}");
        assert_eq!(ip("rule"), with_added);
        // The listing of our priorities, as `ip rule show pref N` prints it.
        let mut shown = Vec::new();
        for pref in [7122, 7123, 7124] {
            shown.extend(
                ip(&format!("rule show pref {pref}"))
                    .lines()
                    .map(|l| l.trim().to_string()),
            );
        }
        assert_eq!(rules_at(7123), shown);
        assert!(
            shown.contains(
                &"7122:\tfrom 198.18.11.2 iif ftrep3 ipproto tcp sport 7001 lookup 7123".into()
            ),
            "{shown:?}"
        );

        // Drop removes everything it added, and nothing else.
        drop(routing);
        assert_eq!(ip("rule"), rules_before);
        assert_eq!(ip("route show table 7123"), "");

        // The same words through `ip`, as the router installed them
        // before: the kernel holds the same rules and routes.
        for l in &record {
            if let Some(r) = l.strip_prefix("route ") {
                ip(&format!("route replace {r}"));
            }
        }
        for l in &record {
            if let Some(r) = l.strip_prefix("rule ") {
                ip(&format!("rule add {r}"));
            }
        }
        assert_eq!(ip("rule"), rules);
        assert_eq!(ip("route show table 7123"), routes);
        // That record (a router of any version writes the same) removes
        // them, without `ip`.
        assert_eq!(remove_recorded(&record), record.len());
        assert_eq!(ip("rule"), rules_before);
        assert_eq!(ip("route show table 7123"), "");

        // A "crash": nothing removed by the process; its record does it.
        let routing = Routing::install(Plan::new(&spec).expect("plan")).expect("install");
        std::mem::forget(routing);
        assert_eq!(remove_recorded(&record), record.len());
        assert_eq!(ip("rule"), rules_before);
        assert_eq!(ip("route show table 7123"), "");
        // What is gone already is not counted again.
        assert_eq!(remove_recorded(&record), 0);
    });
    let _ = std::fs::remove_dir(&empty);
}

/// The binding of the `i`-th replica of `spec`, resolved again.
fn routing_binding(spec: &RoutingSpec, i: usize) -> Binding {
    Binding::resolve(&spec.tun, spec.replica_ports[i].0).expect("resolve")
}
