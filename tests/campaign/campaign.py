#!/usr/bin/env python3
"""ftnet's fault campaign: many faults at random points under load, everything the clients saw
checked, the stalls and recoveries measured.

Two labs run side by side, each with two routers under keepalived (`ftnet lab up --ha`) and three
replicas with agents:
  redis  Redis under the determinism shim, supervised (`--supervise`): writers with exact
         counters and lists, a fresh connection every 200 ms;
  web    nginx (downloads of a 4 MiB file, uploads) and a socat echo service (echo streams
         that open and close through the faults), `stateless = true`.
(A lab serves one service, so the mix runs on two routers on the same 2-core machine.)

Each fault, at a random moment (0.2-1 s after the group recovered from the last one), in a
random lab, on a random replica, is one of:
  kill         kill -9 of the replica's server (redis: its supervisor starts a fresh one, which
               joins with the group's state; web: `ftnet lab restart` after 0.2-1 s)
  cut          the replica's link down (`lab cut`) for 0.2-1.5 s, then up (`lab heal`); redis:
               its stale server is ended and a fresh one joins; web: probed back
  stop         SIGSTOP of the replica's server for 0.05-1.5 s, then SIGCONT (shorter than the
               failure detection: nothing may happen; longer: taken out, then back as above)
  router-kill  kill -9 of the router holding the addresses; the other takes over; the killed
               one is started again as the backup
  router-cut   every link of that router down; the same
After each fault the campaign waits until every replica serves again and both routers run (at
most --recover-s); a group that does not recover ends the campaign.

Afterwards: every client failure (a connection broken, a reply or byte wrong), laid against the
fault before it; Redis counters and lists read back against what was acknowledged, the three
replicas' `DEBUG DIGEST` equal; every acknowledged upload intact on each replica that holds it
and held by at least one; and per fault the longest stall a stream or command saw from the
fault until 0.5 s after recovery. Results: JSON and a Markdown summary in --out (with --record,
also bench/results/campaign-<date>-<commit>.{json,md}).

  tests/campaign/campaign.py --faults 30            # what CI runs (e2e campaign/n3-mixed)
  tests/campaign/campaign.py --faults 1000 --record # the long campaign (~1.5 h on 2 cores)
Exit status 0 only if nothing was lost, broken or wrong and the group recovered every time.
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
VIP = "198.19.0.1"
KINDS = ["kill", "cut", "stop", "router-kill", "router-cut"]
NO_FAILURE = "no client failure (connection broken, reply or byte wrong)"


def now_ms():
    return time.time() * 1000.0


def log(msg):
    print(f"[campaign {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Lab:
    def __init__(self, c, name, kind):
        self.c, self.name, self.kind = c, name, kind
        self.dir = f"/run/ftnet/lab/{name}"
        self.load = None

    def ftnet(self, *args, timeout=120, check=True):
        r = subprocess.run([self.c.ftnet, "lab", *args[:1], "--name", self.name, *args[1:]],
                           capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise RuntimeError(f"ftnet lab {' '.join(args)} --name {self.name}: exit {r.returncode}: {r.stderr.strip()[-600:]}")
        return r

    def up(self):
        self.ftnet("down", check=False)
        if self.kind == "redis":
            self.ftnet("up", "--ha", "--supervise", "--port", "6379", "--failure-ms", str(self.c.a.failure_ms), timeout=180)
        else:
            self.ftnet("up", "--ha", "--stateless", "--port", "8080", "--port", "7000", "--failure-ms", str(self.c.a.failure_ms),
                       "--server", f"{self.c.work}/web.sh {{dir}}", timeout=180)
        if self.c.a.client_retries2:
            # A client that gives up after this many timeouts in a row (Linux's default 15 is about
            # 15 minutes): a client whose retransmission state the product corrupted (a stale
            # retransmission clock) dies at its next two timeouts in a row, so at a router fault.
            subprocess.run(["ip", "netns", "exec", f"ftnet-{self.name}-client", "sysctl", "-qw",
                            f"net.ipv4.tcp_retries2={self.c.a.client_retries2}"], check=True)

    def status(self):
        r = self.ftnet("status", "--json", timeout=20, check=False)
        if r.returncode != 0:
            return None
        try:
            return json.loads(r.stdout)
        except ValueError:
            return None

    def replicas(self):
        s = self.status()
        if not s:
            return None
        return s["status"]["services"][0]["replicas"]

    def routers_up(self):
        for r in ("router", "router2"):
            try:
                pid = int(open(f"{self.dir}/{r}.pid").read().split()[0])
                os.kill(pid, 0)
            except (OSError, ValueError):
                return False
            try:  # "1" once its ftnet exited (keepalived's tracked file)
                if open(f"{self.dir}/{r}.down").read().strip() != "0":
                    return False
            except OSError:
                return False
        return True

    def server_pids(self, i):
        """The replica's server processes (not its agent or supervisor)."""
        names = {"redis": ("redis-server",), "web": ("nginx", "socat")}[self.kind]
        out = subprocess.run(["ip", "netns", "pids", f"ftnet-{self.name}-r{i}"], capture_output=True, text=True).stdout
        pids = []
        for p in out.split():
            try:
                if open(f"/proc/{p}/comm").read().strip() in names:
                    pids.append(int(p))
            except OSError:
                pass
        return pids

    def start_load(self):
        stop = f"{self.c.work}/stop-{self.name}"
        if os.path.exists(stop):
            os.unlink(stop)
        args = ["python3", f"{HERE}/load.py", "--host", VIP, "--stop-file", stop,
                "--gap-ms", str(self.c.gap_ms), "--max-seconds", str(self.c.max_seconds)]
        if self.kind == "redis":
            args += ["--redis", "6379", "--writers", "8"]
        else:
            args += ["--echo", "7000", "--streams", "3", "--http", "8080", "--big", f"{self.c.work}/big.bin",
                     "--diag", f"{self.c.ftnet} lab status --name {self.name} --json"]
        self.load_out = open(f"{self.c.out}/load-{self.name}.json", "w")
        self.load_err = open(f"{self.c.out}/load-{self.name}.err", "w")
        self.load = subprocess.Popen([self.c.ftnet, "lab", "exec", "--name", self.name, "client", "--", *args],
                                     stdout=self.load_out, stderr=self.load_err)
        self.stop_file = stop

    def stop_load(self):
        open(self.stop_file, "w").close()
        try:
            self.load.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.load.kill()
        self.load_out.close()
        self.load_err.close()
        try:
            return json.load(open(f"{self.c.out}/load-{self.name}.json"))
        except ValueError:
            return None


class Campaign:
    def __init__(self, a):
        self.a = a
        self.ftnet = a.ftnet
        self.out = a.out
        self.work = a.work
        self.gap_ms = a.gap_ms
        self._lines = {}
        self.max_seconds = a.max_seconds
        self.rnd = random.Random(a.seed)
        self.faults = []

    def inject(self, lab, kind, victim):
        """One fault; returns (what was done, the time it hit in epoch ms)."""
        r = self.rnd
        if kind == "kill":
            if lab.kind == "redis":
                pids = lab.server_pids(victim)
                t = now_ms()
                for p in pids:
                    os.kill(p, signal.SIGKILL)
                return f"kill -9 r{victim}'s redis-server {pids} (its supervisor starts a fresh one)", t
            t = now_ms()
            lab.ftnet("kill", str(victim))
            hold = r.uniform(0.2, 1.0)
            time.sleep(hold)
            lab.ftnet("restart", str(victim))
            return f"lab kill r{victim}, restart after {hold:.2f} s", t
        if kind == "cut":
            hold = r.uniform(0.2, 1.5)
            t = now_ms()
            lab.ftnet("cut", str(victim))
            time.sleep(hold)
            lab.ftnet("heal", str(victim))
            return f"lab cut r{victim}, heal after {hold:.2f} s", t
        if kind == "stop":
            hold = r.uniform(0.05, 1.5)
            listed = lab.server_pids(victim)
            t = now_ms()
            pids = []
            for p in listed:
                # A worker of the web lab's servers may exit between the listing and the signal.
                try:
                    os.kill(p, signal.SIGSTOP)
                    pids.append(p)
                except ProcessLookupError:
                    pass
            time.sleep(hold)
            for p in pids:
                try:
                    os.kill(p, signal.SIGCONT)
                except OSError:
                    pass
            self.hold_s = hold
            return f"SIGSTOP r{victim}'s server {pids} for {hold:.2f} s", t
        if kind in ("router-kill", "router-cut"):
            t = now_ms()
            lab.ftnet("kill-router" if kind == "router-kill" else "cut-router")
            time.sleep(r.uniform(0.5, 1.5))
            lab.ftnet("restart-router", timeout=180)
            return f"lab {kind.replace('router-', '')}-router, restarted as backup", t
        raise ValueError(kind)

    def recovered(self, lab, deadline):
        """Wait until every replica serves and both routers run; whether they did. When not,
        what was missing and the routers' processes go to <out>/<lab>/not-recovered-<n>.txt."""
        why = ""
        # A verdict lands up to the failure detection after the replica fell silent (a short cut
        # may be healed before it): nothing counts as recovered before that, and only a state
        # that holds for two looks 200 ms apart.
        time.sleep(max(0.0, (self.a.failure_ms + 300) / 1000 - (time.time() - self.fault_t / 1000)))
        seen = False
        while time.monotonic() < deadline:
            reps = lab.replicas()
            if not reps:
                why = "no status from the router holding the addresses"
            elif not all(x["alive"] and x["state"] == "serving" for x in reps):
                why = "replicas: " + ", ".join(f"{x['addr']} {x['state']}" for x in reps)
            elif not lab.routers_up():
                why = "a router is not running (pid file, process or its keepalived track file)"
            elif lab.kind == "redis" and not all(lab.server_pids(i) for i in (1, 2, 3)):
                why = "a replica has no redis-server"
            elif seen:
                return True
            else:
                seen = True
                time.sleep(0.2)
                continue
            seen = False
            time.sleep(0.1)
        d = f"{self.out}/{lab.name}"
        os.makedirs(d, exist_ok=True)
        with open(f"{d}/not-recovered-{len(self.faults) + 1}.txt", "w") as f:
            f.write(f"last reason: {why}\n\n")
            for r in ("router", "router2"):
                for ext in ("pid", "down", "master"):
                    try:
                        f.write(f"{r}.{ext}: {open(f'{lab.dir}/{r}.{ext}').read().strip()}\n")
                    except OSError as e:
                        f.write(f"{r}.{ext}: {e}\n")
                ns = f"ftnet-{lab.name}-{r}"
                pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
                for p in pids:
                    try:
                        cmd = open(f"/proc/{p}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
                        st = [ln for ln in open(f"/proc/{p}/status") if ln.startswith(("State", "Name"))]
                        f.write(f"  {ns} pid {p}: {cmd[:200]} {' '.join(x.strip() for x in st)}\n")
                    except OSError:
                        pass
            st = lab.status()
            f.write("\nstatus: " + json.dumps(st)[:20000] + "\n")
        log(f"{lab.name} not recovered: {why}")
        return False

    def run(self):
        a = self.a
        # The tree the binaries were built from, taken now: the tree may move on during a long run.
        self.commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short=8", "HEAD"],
                                     capture_output=True, text=True).stdout.strip()
        if subprocess.run(["git", "-C", REPO, "diff", "--quiet", "HEAD", "--", "crates"]).returncode != 0:
            self.commit += "-dirty"
        os.makedirs(self.out, exist_ok=True)
        os.makedirs(self.work, exist_ok=True)
        with open(f"{self.work}/big.bin", "wb") as f:
            f.write(random.Random(1).randbytes(4 << 20))
        shutil.copy(f"{HERE}/web.sh", f"{self.work}/web.sh")
        labs = [Lab(self, f"{a.prefix}r", "redis"), Lab(self, f"{a.prefix}w", "web")]
        labs = [l for l in labs if l.kind in a.labs]
        t_start = time.time()
        try:
            for l in labs:
                log(f"lab {l.name} ({l.kind}) up")
                l.up()
            caps = []
            if a.capture:
                # Headers only (96 bytes a packet), in a ring: what the client and each replica saw
                # of the echo streams and HTTP (web) or the Redis commands (redis), to follow a connection
                # that went wrong.
                for l in labs:
                    ports = "tcp port 7000 or tcp port 8080" if l.kind == "web" else "tcp port 6379"
                    for ns in ("client", "r1", "r2", "r3"):
                        caps.append(subprocess.Popen(
                            ["ip", "netns", "exec", f"ftnet-{l.name}-{ns}", "tcpdump", "-Z", "root", "-q", "-n",
                             "-i", "any", "-s", "96", "-C", "500", "-W", "6", "-w", f"{self.out}/{l.name}-{ns}.pcap",
                             f"{ports} or icmp"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            for l in labs:
                l.start_load()
            time.sleep(2)
            stop_at = time.monotonic() + a.max_minutes * 60 if a.max_minutes else None
            for n in range(a.faults):
                if stop_at and time.monotonic() > stop_at:
                    log(f"--max-minutes {a.max_minutes} reached after {n} faults: stopping")
                    break
                lab = self.rnd.choice(labs)
                kind = self.rnd.choice(a.kinds)
                victim = self.rnd.randrange(1, 4)
                time.sleep(self.rnd.uniform(0.2, 1.0))
                if any(l.load.poll() is not None for l in labs):
                    log("a load process ended early: stopping")
                    break
                self.hold_s = 0
                what, t = self.inject(lab, kind, victim)
                self.fault_t = t
                ok = self.recovered(lab, time.monotonic() + a.recover_s)
                rec = now_ms() - t - (200 if ok else 0)
                f = {"n": n + 1, "lab": lab.name, "workload": lab.kind, "kind": kind, "victim": victim,
                     "what": what, "t_ms": round(t), "recovered_ms": round(rec) if ok else None,
                     "hold_s": round(self.hold_s, 3)}
                self.faults.append(f)
                log(f"fault {n + 1}/{a.faults} {lab.name}: {what}; " +
                    (f"recovered in {rec:.0f} ms" if ok else f"NOT RECOVERED in {a.recover_s} s"))
                if not ok:
                    break
        finally:
            for c in caps if "caps" in locals() else []:
                c.terminate()
            loads = {}
            for l in labs:
                if l.load:
                    loads[l.name] = l.stop_load()
            # The routers' logs first: the checks read them (`diverged`).
            for l in labs:
                self.keep_logs(l)
            checks = self.final_checks(labs, loads)
            for l in labs:
                if not a.keep:
                    l.ftnet("down", check=False)
        return self.report(labs, loads, checks, time.time() - t_start)

    def final_checks(self, labs, loads):
        checks = []
        for l in labs:
            load = loads.get(l.name)
            if load is None:
                checks.append((l.name, "the load reported", False, "no JSON from load.py"))
                continue
            if l.kind == "redis":
                w = load["redis"].get("wrong")
                checks.append((l.name, "counters and lists equal what was acknowledged", w == [],
                               f"{load['redis'].get('keys_checked', 0)} keys, wrong: {(w or [])[:5]}"))
                digests = []
                for i in (1, 2, 3):
                    r = subprocess.run([self.ftnet, "lab", "exec", "--name", l.name, f"r{i}", "--",
                                        "redis-cli", "-p", "6379", "DEBUG", "DIGEST"],
                                       capture_output=True, text=True, timeout=30)
                    digests.append(r.stdout.strip())
                # Only the replicas in service hold the group's state; one left out (a fault the
                # group did not recover from) is stale by design, and shown apart.
                reps = l.replicas() or []
                serving = [i for i, r in zip((1, 2, 3), reps) if r["alive"] and r["state"] == "serving"] or [1, 2, 3]
                ds = [digests[i - 1] for i in serving]
                same = len(set(ds)) == 1 and ds[0] not in ("", "0" * 40)
                checks.append((l.name, "the serving replicas' DEBUG DIGEST equal", same,
                               ", ".join(f"r{i} {d[:12]}{'' if i in serving else ' (out of service)'}"
                                         for i, d in zip((1, 2, 3), digests))))
            else:
                ups = load["http"]["uploads"]
                bad, missing = [], []
                import hashlib
                for u in ups:
                    held = 0
                    for i in (1, 2, 3):
                        p = f"{l.dir}/r{i}/www/upload/{u['name']}"
                        if os.path.exists(p):
                            held += 1
                            if hashlib.md5(open(p, "rb").read()).hexdigest() != u["md5"]:
                                bad.append(f"r{i}/{u['name']}")
                    if held == 0:
                        missing.append(u["name"])
                checks.append((l.name, "every acknowledged upload intact where held, held somewhere",
                               not bad and not missing,
                               f"{len(ups)} uploads, corrupt {bad[:5]}, held nowhere {missing[:5]}"))
            errs = [e for e in load["errors"] if not self.beyond_model(l.name, e)]
            checks.append((l.name, NO_FAILURE, not errs,
                           f"{len(errs)}: " + "; ".join(f"{e['kind']}: {e['what']}" for e in errs[:5])
                           + f" (and {len(load['errors']) - len(errs)} beyond the fault model)"))
        return checks

    def keep_logs(self, l):
        d = f"{self.out}/{l.name}"
        os.makedirs(d, exist_ok=True)
        # router.log.1 holds what earlier incarnations of a restarted router logged.
        for f in ("router.log", "router.log.1", "router2.log", "router2.log.1",
                  "keepalived-router.log", "keepalived-router2.log", "router.master", "router2.master"):
            if os.path.exists(f"{l.dir}/{f}"):
                shutil.copy(f"{l.dir}/{f}", d)
        for i in (1, 2, 3):
            for f in ("agent.log", "server.log"):
                p = f"{l.dir}/r{i}/{f}"
                if os.path.exists(p):
                    with open(p, "rb") as src, open(f"{d}/r{i}-{f}", "wb") as dst:
                        src.seek(max(0, os.path.getsize(p) - 2_000_000))
                        dst.write(src.read())

    def beyond_model(self, lab, e):
        """A stateless service's connection that every one of the 3 replicas was out of during its
        life: each was hit by a fault (kill, cut, or a stop past the failure-detection time) that
        came before the failure and whose outage (until its recovery) reached past the connection's
        start. A replica still out when the connection opened was never in it (campaign #175: a
        stream opened while r2 recovered from a kill, then r3 and r1 were killed)."""
        if not e.get("since_ms"):
            return False
        out = {f.get("victim") for f in self.faults if f["lab"] == lab and f["t_ms"] <= e["t_ms"]
               and f["t_ms"] + (f.get("recovered_ms") or 0) >= e["since_ms"]
               and (f["kind"] in ("kill", "cut") or (f["kind"] == "stop" and f.get("hold_s", 0) * 1000 >= self.a.failure_ms))}
        # Replicas whose replies on this very connection differed from what the client got (the
        # web lab's nginx runs without the shim: its Date header differs when the replicas answer
        # on either side of a second) left it as diverged, at the router's word: the connection
        # lost that redundancy without a fault (campaign/n3-none at 02604cf: a download's r2 and
        # r3 diverged, then its r1 was killed).
        if e.get("port"):
            out |= {int(addr.split(".")[2]) % 10 for t, addr in self.diverged(lab, e["port"])
                    if e["since_ms"] - 1000 <= t <= e["t_ms"]}
        return len(out) >= 3

    def diverged(self, lab, port):
        """(epoch ms, replica address) of each replica whose reply on client port `port` differed
        from what the client got (the routers' log)."""
        import types
        key = (lab, "reply differs from what the client got")
        if key not in self._lines:
            self._lines[key] = self.lines_full(types.SimpleNamespace(name=lab), key[1])
        import re
        out = []
        for t, _, line in self._lines[key]:
            m = re.search(r":(\d+)->\S+: replica (\d+\.\d+\.\d+\.\d+)'s reply differs", line)
            if m and int(m.group(1)) == port:
                out.append((t, m.group(2)))
        return out

    def lines(self, l, what):
        """(epoch ms, replica address) of each router log line of this lab containing `what`."""
        return [(t, a) for t, a, _ in self.lines_full(l, what)]

    def lines_full(self, l, what):
        """(epoch ms, replica address, line) of each router log line of this lab containing `what`."""
        import datetime
        import re
        out = []
        for f in ("router.log.1", "router.log", "router2.log.1", "router2.log"):
            p = f"{self.out}/{l.name}/{f}"
            if not os.path.exists(p):
                continue
            for line in open(p, errors="replace"):
                if what not in line:
                    continue
                m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z.*replica (\d+\.\d+\.\d+\.\d+)", line)
                if m:
                    ts = datetime.datetime.fromisoformat(m.group(1)[:26]).replace(tzinfo=datetime.timezone.utc)
                    out.append((ts.timestamp() * 1000, m.group(2), line))
        return out

    def report(self, labs, loads, checks, elapsed):
        # Stalls and failures laid against the fault before them, in the same lab: a stall that
        # began within 1 s of the fault is the fault's (detection, eviction, takeover); one that
        # began later, until 0.5 s after the recovery, is the heal's (a join pauses the input).
        for f in self.faults:
            load = loads.get(f["lab"]) or {"stalls": [], "errors": []}
            end = f["t_ms"] + (f["recovered_ms"] or self.a.recover_s * 1000) + 500
            near = [s for s in load["stalls"] if f["t_ms"] - 100 <= s["t_ms"] <= end]
            f["stall_ms"] = max([s["ms"] for s in near if s["t_ms"] <= f["t_ms"] + 1000] or [0])
            f["heal_stall_ms"] = max([s["ms"] for s in near if s["t_ms"] > f["t_ms"] + 1000] or [0])
            f["failures"] = [e for e in load["errors"] if f["t_ms"] - 100 <= e["t_ms"] <= end
                             and not self.beyond_model(f["lab"], e)]
        # A stateless service's open connection never gets a replica back (no state to join
        # with): one that lived through 3 faults that took replicas out had none left. Such a
        # failure is beyond the fault model (N - 1 faults per connection), counted apart.
        self.beyond = [e for name, load in loads.items() if load for e in load["errors"]
                       if self.beyond_model(name, e)]
        # Replicas the routers took out: each "declared down" line, and whether a fault of the
        # campaign had hit that replica in the 3 s before (a replica taken out that no fault hit
        # is a false verdict: counted, not a failure, as the group heals it).
        self.spontaneous = []
        for l in labs:
            for line in self.lines(l, "declared down"):
                t, addr = line
                hit = any(f["lab"] == l.name and f["t_ms"] - 200 <= t <= f["t_ms"] + (f["recovered_ms"] or 0) + 3000
                          and (f["kind"].startswith("router") or f"198.18.{10 + f['victim']}.2" == addr)
                          for f in self.faults)
                if not hit:
                    self.spontaneous.append({"lab": l.name, "t_ms": t, "replica": addr})

        def pct(xs, p):
            xs = sorted(xs)
            return xs[min(len(xs) - 1, int(len(xs) * p))] if xs else None

        by_kind = {}
        for k in KINDS:
            fs = [f for f in self.faults if f["kind"] == k]
            if not fs:
                continue
            st = [f["stall_ms"] for f in fs]
            hs = [f["heal_stall_ms"] for f in fs]
            rc = [f["recovered_ms"] for f in fs if f["recovered_ms"] is not None]
            by_kind[k] = {"faults": len(fs), "stall_p50_ms": pct(st, 0.5), "stall_p90_ms": pct(st, 0.9),
                          "stall_p99_ms": pct(st, 0.99), "stall_max_ms": max(st),
                          "heal_stall_p50_ms": pct(hs, 0.5), "heal_stall_max_ms": max(hs),
                          "recovery_p50_ms": pct(rc, 0.5), "recovery_max_ms": max(rc) if rc else None,
                          "with_failures": sum(1 for f in fs if f["failures"])}
        totals = {}
        for name, load in loads.items():
            if load:
                totals[name] = {"echo_streams": load["echo"]["streams"], "echo_bytes": load["echo"]["bytes"],
                                "downloads": load["http"]["downloads"], "uploads": len(load["http"]["uploads"]),
                                "redis_commands": load["redis"]["commands"], "redis_short": load["redis"]["short"],
                                "errors": len(load["errors"]), "seconds": round((load["end_ms"] - load["start_ms"]) / 1000)}
        ok = ((len(self.faults) == self.a.faults or bool(self.a.max_minutes)) and all(f["recovered_ms"] is not None for f in self.faults)
              and all(c[2] for c in checks))
        commit = self.commit
        res = {"ok": ok, "commit": commit, "seed": self.a.seed, "faults_planned": self.a.faults,
               "faults": self.faults, "by_kind": by_kind, "totals": totals,
               "taken_out_unhit": self.spontaneous,
               "failures_beyond_model": self.beyond,
               "checks": [{"lab": c[0], "check": c[1], "ok": c[2], "detail": c[3]} for c in checks],
               "elapsed_s": round(elapsed), "gap_ms": self.gap_ms,
               "machine": f"{os.cpu_count()} CPUs, Linux {os.uname().release}",
               "client_retries2": self.a.client_retries2 or 15,
               "failure_ms": self.a.failure_ms}
        json.dump(res, open(f"{self.out}/campaign.json", "w"), indent=1)
        md = self.markdown(res)
        open(f"{self.out}/campaign.md", "w").write(md)
        print(md)
        if self.a.record:
            stamp = time.strftime("%Y%m%d-%H%M")
            base = f"{REPO}/bench/results/campaign-{stamp}-{commit}"
            json.dump(res, open(base + ".json", "w"), indent=1)
            open(base + ".md", "w").write(md)
            log(f"recorded {base}.{{json,md}}")
        return 0 if ok else 1

    def markdown(self, res):
        L = [f"# Fault campaign {time.strftime('%Y-%m-%d %H:%M')} at {res['commit']} (seed {res['seed']})", "",
             f"{len(res['faults'])} of {res['faults_planned']} faults in {res['elapsed_s']} s on {res['machine']}; "
             f"verdict: **{'PASS' if res['ok'] else 'FAIL'}**. A stall is the longest silence (> {res['gap_ms']} ms) "
             "a client stream or command saw from the fault until 0.5 s after the group recovered; recovery is "
             "until every replica serves again and both routers run. The clients' tcp_retries2: "
             f"{res['client_retries2']}; the routers' failure detection: {res['failure_ms']} ms (a replica "
             "cut's stall is measured against it).", "",
             "| fault | count | stall at the fault p50 / p90 / p99 / max (ms) | stall while healing p50 / max (ms) | recovery p50 / max (ms) | faults with a client failure |",
             "|---|---|---|---|---|---|"]
        for k, v in res["by_kind"].items():
            L.append(f"| {k} | {v['faults']} | {v['stall_p50_ms']} / {v['stall_p90_ms']} / {v['stall_p99_ms']} / "
                     f"{v['stall_max_ms']} | {v['heal_stall_p50_ms']} / {v['heal_stall_max_ms']} | "
                     f"{v['recovery_p50_ms']} / {v['recovery_max_ms']} | {v['with_failures']} |")
        bm = res["failures_beyond_model"]
        L += ["", f"Client failures beyond the fault model (a stateless service's connection that lived "
              f"through faults of all 3 replicas, or whose other replicas left it as their replies differed, so had "
              f"no replica left): {len(bm)}"]
        sp = res["taken_out_unhit"]
        L += ["", f"Replicas taken out that no fault had hit (false verdicts; the group healed them): {len(sp)}"]
        for x in sp[:10]:
            L.append(f"- {x['lab']} {x['replica']} at {time.strftime('%H:%M:%S', time.gmtime(x['t_ms'] / 1000))}")
        L += ["", "| lab | load | client errors |", "|---|---|---|"]
        for name, t in res["totals"].items():
            L.append(f"| {name} | {t['seconds']} s: {t['redis_commands']} Redis commands, {t['redis_short']} short "
                     f"connections, {t['echo_streams']} echo streams ({t['echo_bytes'] >> 20} MiB), "
                     f"{t['downloads']} downloads, {t['uploads']} uploads | {t['errors']} |")
        L += ["", "| lab | check | result |", "|---|---|---|"]
        for c in res["checks"]:
            L.append(f"| {c['lab']} | {c['check']} | {'ok' if c['ok'] else 'FAILED'}: {c['detail']} |")
        bad = [f for f in res["faults"] if f["failures"] or f["recovered_ms"] is None]
        if bad:
            L += ["", "Faults with a client failure or no recovery:"]
            for f in bad[:30]:
                L.append(f"- #{f['n']} {f['lab']} {f['what']}: recovered {f['recovered_ms']} ms; " +
                         "; ".join(f"{e['kind']}: {e['what']}" for e in f["failures"][:3]))
        return "\n".join(L) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="\n".join(__doc__.splitlines()[1:]),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--faults", type=int, default=30, help="how many faults (default 30)")
    ap.add_argument("--seed", type=int, default=int(os.environ.get("FTNET_CAMPAIGN_SEED", "1")))
    ap.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated subset of {','.join(KINDS)}")
    ap.add_argument("--labs", default="redis,web", help="redis, web or both")
    ap.add_argument("--prefix", default="fc", help="lab name prefix (labs <prefix>r and <prefix>w)")
    ap.add_argument("--ftnet", default=os.environ.get("FTNET", f"{REPO}/target/release/ftnet"))
    ap.add_argument("--out", default="/tmp/ftnet-campaign")
    ap.add_argument("--work", default="/tmp/ftnet-campaign-work")
    ap.add_argument("--gap-ms", type=float, default=20.0)
    ap.add_argument("--failure-ms", type=int, default=300,
                    help="the routers' failure detection (default 300: on 2 cores running two HA labs and "
                    "their load, 100 ms verdicts are taken on scheduling delay alone)")
    ap.add_argument("--recover-s", type=float, default=60.0)
    ap.add_argument("--max-seconds", type=float, default=4 * 3600, help="bound on the load's run time")
    ap.add_argument("--max-minutes", type=float, default=0,
                    help="stop injecting after this long (the checks and the report follow as usual)")
    ap.add_argument("--record", action="store_true", help="also write bench/results/campaign-*.{json,md}")
    ap.add_argument("--keep", action="store_true", help="leave the labs up")
    ap.add_argument("--capture", action="store_true",
                    help="tcpdump the echo streams and HTTP (web lab) and the Redis connections (redis lab), headers only, in "
                         "each lab's client and replica namespaces into OUT/<lab>-<ns>.pcap* (a ring of 6 x 500 MB "
                         "each, about 25 minutes of the web lab; needs tcpdump)")
    ap.add_argument("--client-retries2", type=int, default=0,
                    help="the clients' net.ipv4.tcp_retries2 (default: Linux's 15, about 15 minutes of timeouts "
                         "in a row); 6 (about 25 s) ends, at the next router fault, a client connection whose "
                         "retransmission state went wrong long before")
    a = ap.parse_args()
    a.kinds = [k for k in a.kinds.split(",") if k]
    a.labs = [k for k in a.labs.split(",") if k]
    bad = [k for k in a.kinds if k not in KINDS]
    if bad or not a.kinds:
        ap.error(f"unknown fault kind(s) {bad}; known: {KINDS}")
    if os.geteuid() != 0:
        ap.error("needs root (network namespaces)")
    if a.capture and not shutil.which("tcpdump"):
        ap.error("--capture needs tcpdump (apt-get install -y tcpdump)")
    return Campaign(a).run()


if __name__ == "__main__":
    sys.exit(main())
