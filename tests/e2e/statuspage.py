#!/usr/bin/env python3
"""Drive the router's status page in a real headless browser (Debian's chromium, over the
DevTools protocol): load it, wait until every replica shows serving, run KILL-COMMAND, and measure
how long until the page shows the victim out of service. Every request the page makes is recorded
and must go to the router; a script error fails the run. Screenshots before and after.

Usage: statuspage.py --url http://127.0.0.1:9100/ --victim 198.18.12.2 --out DIR -- KILL-COMMAND...
Prints one JSON object: {"loaded_ms", "replicas", "shown_down_ms", "requests", "foreign", ...}.
Exit 0 when the page loaded, showed the victim down within --within seconds, made no foreign
request and threw no error.
"""
import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import websocket  # python3-websocket


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--victim", required=True)
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--out", required=True)
    ap.add_argument("--within", type=float, default=1.0)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("kill", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    kill = a.kill[1:] if a.kill[:1] == ["--"] else a.kill
    deadline = time.monotonic() + a.timeout
    prof = tempfile.mkdtemp(prefix="ftnet-chromium-")
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser:
        print(json.dumps({"error": "chromium not installed"}))
        return 2
    proc = subprocess.Popen(
        [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--no-default-browser-check", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-extensions",
         "--window-size=1400,1000", "--remote-debugging-address=127.0.0.1",
         "--remote-debugging-port=0", f"--user-data-dir={prof}", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=open(os.path.join(a.out, "chromium.log"), "w"))
    res = {"error": None}
    try:
        port_file = os.path.join(prof, "DevToolsActivePort")
        while not os.path.exists(port_file) or not open(port_file).read().strip():
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.05)
        port = int(open(port_file).read().split()[0])
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5))
        page = next(t for t in targets if t.get("type") == "page")
        ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=10)
        ids = iter(range(1, 1 << 30))
        requests, errors = [], []

        def handle(m):
            meth = m.get("method")
            if meth == "Network.requestWillBeSent":
                requests.append(m["params"]["request"]["url"])
            elif meth == "Runtime.exceptionThrown":
                errors.append(m["params"]["exceptionDetails"].get("text", "exception"))
            elif meth == "Log.entryAdded" and m["params"]["entry"].get("level") == "error":
                errors.append(m["params"]["entry"].get("text", "error"))

        def call(method, **params):
            i = next(ids)
            ws.send(json.dumps({"id": i, "method": method, "params": params}))
            while True:
                m = json.loads(ws.recv())
                if m.get("id") == i:
                    if "error" in m:
                        raise RuntimeError(f"{method}: {m['error']}")
                    return m.get("result", {})
                handle(m)

        def js(expr):
            r = call("Runtime.evaluate", expression=expr, returnByValue=True)
            return r.get("result", {}).get("value")

        def shot(name):
            png = call("Page.captureScreenshot", format="png")["data"]
            with open(os.path.join(a.out, name), "wb") as f:
                f.write(base64.b64decode(png))

        for d in ("Network", "Page", "Runtime", "Log"):
            call(f"{d}.enable")
        t0 = time.monotonic()
        call("Page.navigate", url=a.url)
        states_js = ("JSON.stringify([...document.querySelectorAll('tr[data-replica]')]"
                     ".map(r => [r.dataset.replica, r.dataset.state]))")
        while True:
            st = json.loads(js(states_js) or "[]")
            if len(st) >= a.replicas and all(s == "serving" for _, s in st):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the page never showed {a.replicas} replicas serving: {st}")
            time.sleep(0.05)
        res["loaded_ms"] = round((time.monotonic() - t0) * 1000)
        res["replicas"] = st
        time.sleep(1.0)  # a few polls: rates filled in
        shot("before.png")
        res["summary_before"] = js("document.getElementById('summary').textContent")
        k0 = time.monotonic()
        kr = subprocess.run(kill, capture_output=True, text=True, timeout=30)
        res["kill_rc"] = kr.returncode
        res["kill_ms"] = round((time.monotonic() - k0) * 1000)
        victim_js = (f"(document.querySelector('tr[data-replica=\"{a.victim}\"]')||{{dataset:{{}}}})"
                     ".dataset.state || ''")
        shown = None
        while time.monotonic() < k0 + max(10.0, a.within * 5):
            s = js(victim_js)
            if s and s != "serving":
                shown = time.monotonic() - k0
                res["victim_state"] = s
                break
            time.sleep(0.02)
        res["shown_down_ms"] = round(shown * 1000) if shown is not None else None
        time.sleep(1.0)
        res["timeline"] = js("[...document.querySelectorAll('#timeline li')].slice(0, 8).map(l => l.textContent)")
        res["victim_row"] = js(f"(document.querySelector('tr[data-replica=\"{a.victim}\"]')||{{}}).textContent")
        shot("after.png")
        res["requests"] = len(requests)
        origin = a.url.split("/", 3)[:3]
        origin = "/".join(origin) + "/"
        res["foreign"] = sorted({u for u in requests if not u.startswith(origin) and not u.startswith("data:")})
        res["paths"] = sorted({u[len(origin) - 1:].split("?")[0] for u in requests if u.startswith(origin)})
        res["errors"] = errors
        ok = (shown is not None and shown <= a.within and not res["foreign"] and not errors
              and kr.returncode == 0)
        ws.close()
    except Exception as e:  # the JSON says what went wrong
        res["error"] = str(e)
        ok = False
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(prof, ignore_errors=True)
    print(json.dumps(res))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
