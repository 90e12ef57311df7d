#!/usr/bin/env python3
"""Turns bench/run.sh's raw measurements (JSON lines) into <base>.json, <base>.md and <base>.svg.
python3 stdlib only."""
import argparse
import datetime
import json
import os
import platform
import statistics

# figure id -> (raw figure, field, label, unit, higher_is_better)
FIGURES = [
    ("rr-mean", "rr", "mean_us", "1-byte round trip, mean", "µs", False),
    ("rr-p50", "rr", "p50_us", "1-byte round trip, p50", "µs", False),
    ("rr-p99", "rr", "p99_us", "1-byte round trip, p99", "µs", False),
    ("cps", "cps", "conn_per_s", "new connections per second (1-byte echo each)", "conn/s", True),
    ("dl-small-1", "dl-small-1", "gbit_s", "download {small} MiB, 1 stream", "Gbit/s", True),
    ("dl-small-4", "dl-small-4", "gbit_s", "download {small} MiB, 4 streams (aggregate)", "Gbit/s", True),
    ("dl-big-1", "dl-big-1", "gbit_s", "download {big} MiB, 1 stream", "Gbit/s", True),
    ("dl-big-4", "dl-big-4", "gbit_s", "download {big} MiB, 4 streams (aggregate)", "Gbit/s", True),
    ("up-1", "up-1", "gbit_s", "upload {up} MiB, 1 stream", "Gbit/s", True),
]
# crashed rows: (figure id, raw figure, field, label, unit, higher_is_better, reference figure for ratios)
CRASH = [
    ("dl-kill", "dl-kill", "gbit_s", "download {big} MiB, 1 stream, one replica killed at ~40 % of the bytes", "Gbit/s", True, "dl-big-1"),
    ("stall-kill", "stall-kill", "fault_gap_ms", "client-visible stall, replica killed (stallmeter)", "ms", False, None),
    ("stall-cut", "stall-cut", "fault_gap_ms", "client-visible stall, replica link cut (stallmeter)", "ms", False, None),
]


def machine():
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cc = "?"
    try:
        cc = open("/proc/sys/net/ipv4/tcp_congestion_control").read().strip()
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "kernel": platform.release(), "cpu": cpu, "tcp_cc": cc,
            "hostname": platform.node()}


def ok(d):
    return d.get("ok", True) and not d.get("error") and not d.get("errors")


def stats(vals):
    if not vals:
        return None
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


def fmt(v, unit):
    if v is None:
        return "–"
    if unit == "Gbit/s":
        return "%.2f" % v
    if unit in ("µs", "ms"):
        return "%.0f" % v if v >= 100 else "%.1f" % v
    return "%.0f" % v


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def fr(x):
    return "–" if x is None else "%.2f" % x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--raw", required=True)
    ap.add_argument("--out", required=True, help="path without extension")
    ap.add_argument("--setups", required=True)
    for k in ("reps", "quick", "runtime", "big-mb", "small-mb", "up-mb", "rr-count"):
        ap.add_argument("--" + k, type=int, default=0)
    ap.add_argument("--cps-seconds", type=float, default=0)
    ap.add_argument("--sha", default="?")
    a = ap.parse_args()
    setups = a.setups.split()
    raw = [json.loads(l) for l in open(a.raw) if l.strip()]
    sz = {"big": a.big_mb, "small": a.small_mb, "up": a.up_mb}

    def values(setup, fig, field):
        vs, fails = [], []
        for r in raw:
            if r["setup"] == setup and r["figure"] == fig:
                d = r["data"]
                if ok(d) and d.get(field) is not None:
                    vs.append(float(d[field]))
                else:
                    fails.append({"rep": r["rep"], "error": d.get("error") or d.get("errors") or "missing %s" % field})
        return vs, fails

    results = {}
    for fid, fig, field, label, unit, hib in FIGURES:
        per = {}
        for s in setups:
            vs, fails = values(s, fig, field)
            per[s] = {"values": vs, "failures": fails, **(stats(vs) or {"median": None})}
        results[fid] = {"label": label.format(**sz), "unit": unit, "higher_is_better": hib, "setups": per}
        for s in setups:
            m = per[s]["median"]
            per[s]["vs_native"] = ratio(m, per.get("native", {}).get("median"))
            per[s]["vs_kernel_nat"] = ratio(m, per.get("kernel-nat", {}).get("median"))
    crash = {}
    for fid, fig, field, label, unit, hib, ref in CRASH:
        per = {}
        for s in setups:
            if not s.startswith("ftnet-N") or s == "ftnet-N1":
                continue
            vs, fails = values(s, fig, field)
            if not vs and not fails:
                continue
            extra = {}
            if fid == "dl-kill":
                fp, _ = values(s, fig, "fault_at_pct")
                extra["fault_at_pct"] = stats(fp)
                fb, _ = values(s, fig, "fault_at_bytes_pct")
                extra["fault_at_bytes_pct"] = stats(fb)
            if fid.startswith("stall"):
                mg, _ = values(s, fig, "max_gap_ms")
                extra["max_gap_ms"] = stats(mg)
                extra["victims"] = [r["data"].get("victim") for r in raw if r["setup"] == s and r["figure"] == fig]
            per[s] = {"values": vs, "failures": fails, **(stats(vs) or {"median": None}), **extra}
            if ref:
                m = per[s]["median"]
                rs = results[ref]["setups"]
                per[s]["vs_native"] = ratio(m, rs.get("native", {}).get("median"))
                per[s]["vs_kernel_nat"] = ratio(m, rs.get("kernel-nat", {}).get("median"))
                per[s]["vs_no_fault"] = ratio(m, rs.get(s, {}).get("median"))
        if per:
            crash[fid] = {"label": label.format(**sz), "unit": unit, "higher_is_better": hib, "setups": per}

    mem = {}
    for s in setups:
        for r in raw:
            if r["setup"] == s and r["figure"] == "mem-idle":
                mem[s] = r["data"]

    now = datetime.datetime.now(datetime.timezone.utc)
    meta = {"date": now.strftime("%Y-%m-%dT%H:%M:%SZ"), "commit": a.sha, "machine": machine(),
            "reps": a.reps, "quick": bool(a.quick), "runtime_s": a.runtime, "setups": setups,
            "sizes_mib": sz, "rr_count": a.rr_count, "cps_seconds": a.cps_seconds}
    doc = {"meta": meta, "figures": results, "crashed": crash, "memory_idle": mem, "raw": raw}
    with open(a.out + ".json", "w") as f:
        json.dump(doc, f, indent=1)

    # ---------------------------------------------------------------- Markdown
    m = meta["machine"]
    L = []
    L.append("# ftnet benchmark — %s, commit %s" % (meta["date"], a.sha))
    L.append("")
    L.append("Machine: %s cores, %s, Linux %s, TCP %s. Setups: %s. Medians of %d repetition(s) "
             "(interleaved across setups), min–max beside them%s. Run time %d s. "
             "Ratios compare medians from this run only (noisy machine: ±10–20 %% between runs)."
             % (m["nproc"], m["cpu"], m["kernel"], m["tcp_cc"], ", ".join(setups), a.reps,
                ", **--quick** sizes" if a.quick else "", a.runtime))
    L.append("")
    L.append("## Overview (medians; × native / × kernel-nat)")
    L.append("")
    cols = [f for f in FIGURES]
    L.append("| setup | " + " | ".join("%s [%s]" % (f[0], f[4]) for f in cols) + " |")
    L.append("|---|" + "---:|" * len(cols))
    for s in setups:
        cells = []
        for f in cols:
            p = results[f[0]]["setups"][s]
            cells.append("%s (%s / %s)" % (fmt(p["median"], f[4]), fr(p["vs_native"]), fr(p["vs_kernel_nat"])))
        L.append("| %s | %s |" % (s, " | ".join(cells)))
    L.append("")
    L.append("Lower is better for rr-* (latency); higher for the rest.")
    L.append("")
    for fid, fig, field, label, unit, hib in FIGURES:
        r = results[fid]
        L.append("### %s (%s, %s better)" % (r["label"], unit, "higher" if hib else "lower"))
        L.append("")
        L.append("| setup | median | min–max | n | × native | × kernel-nat | failures |")
        L.append("|---|---:|---:|---:|---:|---:|---|")
        for s in setups:
            p = r["setups"][s]
            mm = "%s–%s" % (fmt(p.get("min"), unit), fmt(p.get("max"), unit)) if p["median"] is not None else "–"
            fl = "; ".join("rep %d: %s" % (x["rep"], str(x["error"])[:80]) for x in p["failures"]) or ""
            L.append("| %s | %s | %s | %d | %s | %s | %s |" % (s, fmt(p["median"], unit), mm, len(p["values"]),
                                                          fr(p["vs_native"]), fr(p["vs_kernel_nat"]), fl))
        L.append("")
    if crash:
        L.append("## Crashed rows (ftnet N=2 and N=3, one replica faulted; a fresh lab for each run)")
        L.append("")
        for fid, c in crash.items():
            unit = c["unit"]
            L.append("### %s (%s, %s better)" % (c["label"], unit, "higher" if c["higher_is_better"] else "lower"))
            L.append("")
            if fid == "dl-kill":
                L.append("| setup | median | min–max | n | × native | × kernel-nat | × same setup, no fault | kill at: % of bytes (est.) / % of time | failures |")
                L.append("|---|---:|---:|---:|---:|---:|---:|---:|---|")
            else:
                L.append("| setup | median | min–max | n | largest gap in run (median) | × native | × kernel-nat | failures |")
                L.append("|---|---:|---:|---:|---:|---:|---:|---|")
            for s, p in c["setups"].items():
                mm = "%s–%s" % (fmt(p.get("min"), unit), fmt(p.get("max"), unit)) if p["median"] is not None else "–"
                fl = "; ".join("rep %d: %s" % (x["rep"], str(x["error"])[:80]) for x in p["failures"]) or ""
                if fid == "dl-kill":
                    fp = (p.get("fault_at_pct") or {}).get("median")
                    fb = (p.get("fault_at_bytes_pct") or {}).get("median")
                    L.append("| %s | %s | %s | %d | %s | %s | %s | %s | %s |" % (
                        s, fmt(p["median"], unit), mm, len(p["values"]), fr(p.get("vs_native")),
                        fr(p.get("vs_kernel_nat")), fr(p.get("vs_no_fault")),
                        "%s / %s" % ("–" if fb is None else "%.0f %%" % fb, "–" if fp is None else "%.0f %%" % fp), fl))
                else:
                    mg = p.get("max_gap_ms") or {}
                    L.append("| %s | %s | %s | %d | %s | – (no failover) | – (no failover) | %s |" % (
                        s, fmt(p["median"], unit), mm, len(p["values"]), fmt(mg.get("median"), unit), fl))
            L.append("")
        L.append("dl-kill ratios use the no-fault `dl-big-1` medians of native / kernel-nat / the same ftnet "
                 "setup; the kill is timed at 40 % of this run's fault-free duration (so ~40 % of the bytes), "
                 "which is a larger share of the faulted transfer's time because it speeds up with fewer replicas. Stall = the longest gap between echo receipts that was open at the fault or began "
                 "within 2 s after it (stallmeter: 4 KiB every 1 ms, fault at ~1.5 s of 4 s).")
        L.append("")
    if mem:
        L.append("## Router memory per idle connection")
        L.append("")
        L.append("Connections opened one by one through the echo service (1 byte echoed on each), then all "
                 "held open and idle; the router's resident set size (VmRSS) sampled at each count and again "
                 "after the hold. Per connection = (RSS at the last count − RSS before) / count; the step "
                 "slopes show whether the cost per connection stays flat as the table grows.")
        L.append("")
        L.append("| setup | connections | RSS before | RSS at count | RSS after hold | bytes / connection | slope per step (bytes / conn.) | ok |")
        L.append("|---|---:|---:|---:|---:|---:|---|---|")
        for s, d in mem.items():
            pts = d.get("points_kb") or []
            if not pts:
                L.append("| %s | – | – | – | – | – | %s | no |" % (s, str(d.get("error"))[:80]))
                continue
            held = d.get("held_kb") or [None, None]
            L.append("| %s | %s | %d KiB | %d KiB | %s KiB (%s s) | %s | %s | %s |" % (
                s, d.get("conns"), pts[0][1], pts[-1][1], held[1], d.get("hold_s"), d.get("bytes_per_conn"),
                ", ".join(str(x) for x in d.get("slopes_bytes_per_conn") or []), "yes" if d.get("ok") else "NO"))
        L.append("")
    with open(a.out + ".md", "w") as f:
        f.write("\n".join(L))

    # ---------------------------------------------------------------- SVG
    with open(a.out + ".svg", "w") as f:
        f.write(svg(results, crash, setups, meta))


def esc(s):
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def bars(x0, y0, w, h, title, unit, groups, series, colors):
    """groups: list of names; series: list of (name, {group: (median, min, max)})."""
    out = []
    vmax = max([v[2] or v[0] for _, d in series for v in d.values() if v and v[0] is not None] + [1e-9]) * 1.1
    out.append('<text x="%d" y="%d" font-size="14" font-weight="bold">%s</text>' % (x0, y0 - 8, esc(title)))
    pl, pb = 50, 60  # left and bottom padding
    ax0, ay0, aw, ah = x0 + pl, y0, w - pl - 10, h - pb
    out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>' % (ax0, ay0 + ah, ax0 + aw, ay0 + ah))
    out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>' % (ax0, ay0, ax0, ay0 + ah))
    for i in range(5):
        v = vmax * i / 4
        y = ay0 + ah - ah * i / 4
        out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>' % (ax0, y, ax0 + aw, y))
        out.append('<text x="%d" y="%.1f" font-size="10" text-anchor="end">%s</text>' % (ax0 - 4, y + 3, "%.3g" % v))
    out.append('<text x="%d" y="%d" font-size="11" transform="rotate(-90 %d %d)" text-anchor="middle">%s</text>'
               % (x0 + 12, ay0 + ah // 2, x0 + 12, ay0 + ah // 2, esc(unit)))
    gw = aw / max(1, len(groups))
    bw = gw * 0.8 / max(1, len(series))
    for gi, g in enumerate(groups):
        gx = ax0 + gi * gw + gw * 0.1
        for si, (sname, d) in enumerate(series):
            v = d.get(g)
            if not v or v[0] is None:
                continue
            med, lo, hi = v
            bh = ah * med / vmax
            bx = gx + si * bw
            out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %s %s</title></rect>'
                       % (bx, ay0 + ah - bh, bw - 1, bh, colors[si % len(colors)], esc(g), esc(sname), "%.3g" % med, esc(unit)))
            if lo is not None and hi is not None:
                cx = bx + (bw - 1) / 2
                y1, y2 = ay0 + ah - ah * lo / vmax, ay0 + ah - ah * hi / vmax
                out.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#000"/>' % (cx, y1, cx, y2))
            out.append('<text x="%.1f" y="%.1f" font-size="9" text-anchor="middle">%s</text>'
                       % (bx + (bw - 1) / 2, ay0 + ah - bh - 3, "%.3g" % med))
        out.append('<text x="%.1f" y="%d" font-size="11" text-anchor="end" transform="rotate(-30 %.1f %d)">%s</text>'
                   % (gx + gw * 0.4, ay0 + ah + 14, gx + gw * 0.4, ay0 + ah + 14, esc(g)))
    lx, ly = ax0 + 10, y0 + h + 8  # legend below the x labels
    for si, (sname, _) in enumerate(series):
        out.append('<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d" font-size="11">%s</text>'
                   % (lx, ly + si * 14, colors[si % len(colors)], lx + 14, ly + 9 + si * 14, esc(sname)))
    return "\n".join(out)


def svg(results, crash, setups, meta):
    W, H = 900, 880
    colors = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2"]
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif">' % (W, H),
             '<rect width="100%" height="100%" fill="white"/>',
             '<text x="20" y="24" font-size="16" font-weight="bold">ftnet benchmark %s (%s) — %s cores, Linux %s</text>'
             % (esc(meta["date"]), esc(meta["commit"]), meta["machine"]["nproc"], esc(meta["machine"]["kernel"]))]

    def tri(p):
        return (p.get("median"), p.get("min"), p.get("max")) if p else None

    groups = list(setups)
    series = []
    for fid in ("dl-big-1", "dl-big-4", "dl-small-1"):
        r = results[fid]
        series.append((r["label"], {s: tri(r["setups"][s]) for s in setups}))
    if "dl-kill" in crash:
        for s in crash["dl-kill"]["setups"]:
            groups.append(s + " (kill)")
        series[0][1].update({s + " (kill)": tri(p) for s, p in crash["dl-kill"]["setups"].items()})
    parts.append(bars(20, 60, W - 40, 380, "Download throughput by setup (median, whisker = min–max)", "Gbit/s",
                      groups, series, colors))
    if crash:
        sg = sorted({s for fid in ("stall-kill", "stall-cut") if fid in crash for s in crash[fid]["setups"]})
        ser = []
        for fid in ("stall-kill", "stall-cut"):
            if fid in crash:
                ser.append((crash[fid]["label"], {s: tri(p) for s, p in crash[fid]["setups"].items()}))
        if ser:
            parts.append(bars(20, 560, 560, 240, "Failover stall seen by the client", "ms", sg, ser, colors[3:] + colors))
    parts.append("</svg>")
    return "\n".join(parts)


if __name__ == "__main__":
    main()
