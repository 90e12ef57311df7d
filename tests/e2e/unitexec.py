#!/usr/bin/env python3
"""Start a systemd unit's command the way systemd would (the subset ftnet's units use), where no
systemd runs as PID 1: reads UNIT, loads its EnvironmentFile= and Environment=, expands $VAR
(split into words) and ${VAR} (one word) and $$ in the command line, strips the -@:+! prefixes.

  unitexec.py UNIT [--pre] [--caps] [--key ExecStart] [--mainpid PID] [--print]

--pre runs the ExecStartPre= lines first (a failing one ends here with its status, unless its
line starts with -); --caps execs under setpriv with the unit's CapabilityBoundingSet= (and
NoNewPrivileges=); --mainpid sets $MAINPID (for ExecReload=, ExecStop=); WATCHDOG_USEC comes
from the unit's WatchdogSec= unless the caller set it, with WATCHDOG_PID = this process, which
execs the command. --print shows the command instead of running it."""
import argparse
import os
import re
import shlex
import subprocess
import sys

p = argparse.ArgumentParser()
p.add_argument("unit")
p.add_argument("--key", default="ExecStart")
p.add_argument("--pre", action="store_true")
p.add_argument("--caps", action="store_true")
p.add_argument("--mainpid")
p.add_argument("--print", action="store_true")
a = p.parse_args()


def unit_lines(path):
    """(key, value) of every assignment, continuation lines joined."""
    out, cont = [], ""
    for raw in open(path):
        line = raw.rstrip("\n")
        if cont:
            line = cont + line.lstrip()
            cont = ""
        if line.endswith("\\"):
            cont = line[:-1] + " "
            continue
        s = line.strip()
        if not s or s[0] in "#;[":
            continue
        k, _, v = s.partition("=")
        out.append((k.strip(), v.strip()))
    return out


def env_file(path, env):
    for raw in open(path):
        s = raw.strip()
        if not s or s[0] in "#;":
            continue
        k, _, v = s.partition("=")
        v = v.strip()
        if len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'":
            v = v[1:-1]
        env[k.strip()] = v


def seconds(v):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(ms|s|sec|min|m)?", v.strip())
    if not m:
        sys.exit(f"unitexec: cannot read the time span {v!r}")
    n = float(m.group(1))
    return n * {"ms": 0.001, "min": 60, "m": 60}.get(m.group(2), 1)


lines = unit_lines(a.unit)
env = dict(os.environ)
for k, v in lines:
    if k == "EnvironmentFile":
        optional = v.startswith("-")
        path = v.lstrip("-")
        if os.path.exists(path):
            env_file(path, env)
        elif not optional:
            sys.exit(f"unitexec: EnvironmentFile {path} is missing")
    elif k == "Environment":
        for w in shlex.split(v):
            ek, _, ev = w.partition("=")
            env[ek] = ev
if a.mainpid:
    env["MAINPID"] = a.mainpid


def expand(value):
    """systemd's command line: words first, then $VAR splits into words, ${VAR} stays one."""
    argv = []
    for w in shlex.split(value.replace("$$", "\0")):
        m = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", w)
        if m:
            argv.extend(env.get(m.group(1), "").split())
            continue
        w = re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: env.get(m.group(1), ""), w)
        argv.append(w.replace("\0", "$"))
    return argv


def command(key):
    vals = [v for k, v in lines if k == key]
    cmds = []
    for v in vals:
        prefix = re.match(r"[-@:+!]*", v).group(0)
        argv = expand(v[len(prefix):])
        if argv:
            cmds.append((prefix, argv))
    return cmds


caps = []
if a.caps:
    for k, v in lines:
        if k == "CapabilityBoundingSet":
            caps += [c.lower().removeprefix("cap_") for c in v.split()]
    nnp = any(k == "NoNewPrivileges" and v == "yes" for k, v in lines)
    wrap = ["setpriv", "--bounding-set", ",".join(["-all"] + ["+" + c for c in caps])] if caps else ["setpriv"]
    if nnp:
        wrap.append("--no-new-privs")
    wrap.append("--")
else:
    wrap = []

if a.pre:
    for prefix, argv in command("ExecStartPre"):
        rc = subprocess.run(wrap + argv, env=env).returncode
        if rc != 0 and "-" not in prefix:
            sys.exit(rc)
cmds = command(a.key)
if len(cmds) != 1:
    sys.exit(f"unitexec: {a.unit} has {len(cmds)} {a.key}= lines, not one")
argv = wrap + cmds[0][1]
if a.key == "ExecStart" and "WATCHDOG_USEC" not in env:
    ws = [v for k, v in lines if k == "WatchdogSec"]
    if ws:
        env["WATCHDOG_USEC"] = str(int(seconds(ws[-1]) * 1_000_000))
if "WATCHDOG_USEC" in env and a.key == "ExecStart":
    env["WATCHDOG_PID"] = str(os.getpid())
if a.print:
    print(shlex.join(argv))
    sys.exit(0)
sys.stdout.flush()
os.execvpe(argv[0], argv, env)
