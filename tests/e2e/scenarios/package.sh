#!/usr/bin/env bash
# The Debian package, installed and run as the services it ships. scripts/package.sh builds the
# .deb from $FTNET's directory; `dpkg-deb -I/-c` must show its control data and every file. Then
# a real `dpkg -i` inside a private mount namespace whose /usr, /etc and /var are overlays with
# their upper directories in the test's work dir (the host's files stay as they were) and
# /run/ftnet a tmpfs. There: `systemd-analyze verify` of both units, `man` finds and renders every
# page, bash completes `ftnet ro` and `ftnet replica j` from the installed completion (through
# bash-completion's loader where installed), the zsh and fish files are there, `ftnet
# check-config` passes the installed example, and keepalived accepts the installed keepalived.conf.
# Two network namespaces (router host, replica host, joined by a veth pair; the router side
# named eth1, and eth0 for the clients' side, as keepalived.conf names them) run the units' own command lines
# (tests/e2e/unitexec.py: EnvironmentFile=, ExecStartPre=, CapabilityBoundingSet= through
# setpriv, WatchdogSec= as $WATCHDOG_USEC) with $NOTIFY_SOCKET at a datagram socket the test
# reads (notifyrecv.py). The router's config is the installed example with [control] uncommented
# and the first replica only.
# Pass: READY=1 from the router within 15 s, then WATCHDOG=1 pings (WATCHDOG_USEC 2 s: one a
# second); `ftnet status` answers; /usr/lib/ftnet/check-router exits 0 against its /healthz (and
# 1 against a port nobody serves); the unit's ExecReload= makes it reload; the agent's command
# line from /etc/default/ftnet-agent reaches READY=1 and registers (its STATUS= and the router's
# log); SIGTERM gives STOPPING=1 from both, exit 0, and no policy rule or TUN left; a second
# start stopped by the unit's ExecStop= (ftnet drain) exits within 5 s, STOPPING=1, no rule left.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

NOTIFY_RECV=$E2E_DIR/notifyrecv.py
UNITEXEC=$E2E_DIR/unitexec.py
ROUTER_UNIT=/lib/systemd/system/ftnet-router.service
AGENT_UNIT=/lib/systemd/system/ftnet-agent.service

# The policy rules of namespace $1 at ftnet's priorities (the example's table, 7000 and 7001).
ftnet_rules() { ip -n "$1" rule | grep -E '^700[01]:' || true; }

# notified FILE PATTERN — FILE (notifyrecv.py's log) has a datagram matching PATTERN.
notified() { grep -qE "$2" "$1" 2>/dev/null; }

# Runs inside the private mount namespace (unshare), after the overlays: everything the
# package touches is there.
inside() {
	local deb=$1 nsr=$2 nsh=$3
	FAILS=0
	local ov=$T/overlay d
	for d in usr etc var; do
		mkdir -p "$ov/$d/upper" "$ov/$d/work"
		mount -t overlay "ftnet-pkg-$d" -o "lowerdir=/$d,upperdir=$ov/$d/upper,workdir=$ov/$d/work" "/$d"
		# Never install onto the host: each directory must be our overlay.
		[[ $(findmnt -n -o SOURCE --mountpoint "/$d") == "ftnet-pkg-$d" ]] || die "/$d is not the test's overlay; not installing"
	done
	mkdir -p /run/ftnet
	mount -t tmpfs -o mode=755 ftnet-pkg-run /run/ftnet

	local t0; t0=$(now_ms)
	check "dpkg -i installs the package" bash -c "dpkg -i '$deb' >'$T/dpkg.out' 2>&1"
	say "dpkg -i: $(($(now_ms) - t0)) ms; $(tail -2 "$T/dpkg.out" | tr '\n' ' ')"
	check_eq "dpkg: ftnet is installed" "install ok installed" "$(dpkg-query -W -f '${Status}' ftnet 2>/dev/null)"
	local f
	for f in /usr/bin/ftnet /usr/lib/ftnet/libftnet_shim.so /usr/lib/ftnet/check-router \
		"$ROUTER_UNIT" "$AGENT_UNIT" /etc/ftnet/ftnet.toml /etc/ftnet/keepalived.conf \
		/etc/default/ftnet-router /etc/default/ftnet-agent \
		/usr/share/bash-completion/completions/ftnet /usr/share/zsh/vendor-completions/_ftnet \
		/usr/share/fish/vendor_completions.d/ftnet.fish /usr/share/man/man1/ftnet.1.gz; do
		check "installed: $f" test -s "$f"
	done
	check "/usr/bin/ftnet runs" bash -c "/usr/bin/ftnet --version | grep -q '^ftnet '"
	# `ftnet run` preloads the installed shim (a hello file stands in for the agent's).
	printf '%048d\nregistered\n' 0 >"$T/shim.sock.hello"
	local preload
	preload=$(env -u FTNET_SHIM_LIB -u LD_PRELOAD timeout 10 /usr/bin/ftnet run --socket "$T/shim.sock" -- \
		sh -c 'printf %s "$LD_PRELOAD"' 2>"$T/run.err") || true
	check_eq "ftnet run preloads the installed shim" /usr/lib/ftnet/libftnet_shim.so "$preload"

	# The units, as systemd reads them (it needs no systemd as PID 1 to verify).
	if command -v systemd-analyze >/dev/null; then
		local rc=0
		systemd-analyze verify "$ROUTER_UNIT" "$AGENT_UNIT" >"$T/verify.out" 2>&1 || rc=$?
		[[ -s $T/verify.out ]] && say "systemd-analyze verify: $(head -c 600 "$T/verify.out" | tr '\n' ' ')"
		check_eq "systemd-analyze verify: exit status" 0 "$rc"
		check "systemd-analyze verify: nothing said about the units" bash -c "! grep -E 'ftnet-(router|agent)' '$T/verify.out'"
	else
		say "skipped: systemd-analyze verify (no systemd-analyze; scripts/deps.sh installs systemd)"
	fi
	check "router unit: Type=notify" grep -qx 'Type=notify' "$ROUTER_UNIT"
	check "router unit: WatchdogSec=" grep -qE '^WatchdogSec=[0-9]+' "$ROUTER_UNIT"
	check "router unit: ExecReload= sends SIGHUP" grep -qE '^ExecReload=.*kill -HUP \$MAINPID' "$ROUTER_UNIT"
	check "agent unit: Type=notify" grep -qx 'Type=notify' "$AGENT_UNIT"

	# Man pages: found by name, rendered.
	local pages=0 page name
	for page in /usr/share/man/man1/ftnet*.1.gz; do
		name=$(basename "$page" .1.gz)
		pages=$((pages + 1))
		if ! MANPAGER=cat MANWIDTH=100 man -l "$page" 2>/dev/null >"$T/man.txt" || ! grep -q "^NAME" "$T/man.txt" ||
			! grep -q "$name" "$T/man.txt"; then
			say "CHECK FAILED: man -l $page renders no NAME section naming $name"
			FAILS=$((FAILS + 1))
		fi
	done
	check "man pages: one per command (ftnet, router, agent, drain, replica join, ...: $pages)" test "$pages" -ge 20
	check_eq "man -w ftnet-router finds the installed page" /usr/share/man/man1/ftnet-router.1.gz "$(man -w ftnet-router 2>&1)"
	MANPAGER=cat MANWIDTH=100 man ftnet-router >"$T/man-router.txt" 2>/dev/null || true
	check "man ftnet-router tells the configuration format" grep -q "metrics_listen" "$T/man-router.txt"

	# Completions.
	local loader=0
	[[ -f /usr/share/bash-completion/bash_completion ]] && loader=1
	cat >"$T/complete.bash" <<-'SH'
		if [[ $1 == 1 ]]; then
			source /usr/share/bash-completion/bash_completion
			_completion_loader ftnet
		else
			source /usr/share/bash-completion/completions/ftnet
		fi
		complete -p ftnet >/dev/null || { echo "no completion for ftnet"; exit 1; }
		fn=$(complete -p ftnet | sed -E 's/.*-F ([^ ]+).*/\1/')
		try() {
			COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
			COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}; COMPREPLY=()
			"$fn" ftnet "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
			echo "${COMPREPLY[*]}"
		}
		try ftnet ro
		try ftnet replica j
		try ftnet router --con
	SH
	bash "$T/complete.bash" "$loader" >"$T/complete.out" 2>&1 || true
	say "bash completion ($( ((loader)) && echo "bash-completion's loader" || echo "sourced"); ftnet ro / ftnet replica j / ftnet router --con): $(tr '\n' '/' <"$T/complete.out")"
	check "bash completes ftnet ro -> router" bash -c "sed -n 1p '$T/complete.out' | grep -qw router"
	check "bash completes ftnet replica j -> join" bash -c "sed -n 2p '$T/complete.out' | grep -qw join"
	check "bash completes ftnet router --con -> --config" bash -c "sed -n 3p '$T/complete.out' | grep -qw -- --config"
	check "zsh completion defines _ftnet" grep -q '^#compdef ftnet' /usr/share/zsh/vendor-completions/_ftnet
	check "fish completion completes ftnet's subcommands" grep -q "complete -c ftnet .*-a \"router\"" /usr/share/fish/vendor_completions.d/ftnet.fish

	check "ftnet check-config passes the installed example" bash -c "/usr/bin/ftnet check-config /etc/ftnet/ftnet.toml >'$T/check-config.out' 2>&1"

	# The network: router host (eth1 to the replica host, eth0 for the clients' side).
	ip -n "$nsr" link set lo up
	ip -n "$nsh" link set lo up
	ip -n "$nsr" link add eth1 type veth peer name eth0 netns "$nsh"
	ip -n "$nsr" link add eth0 type veth peer name client0
	ip -n "$nsr" link set client0 up
	ip -n "$nsr" addr add 198.18.1.1/24 dev eth0
	ip -n "$nsr" addr add 198.18.11.1/24 dev eth1
	ip -n "$nsh" addr add 198.18.11.2/24 dev eth0
	ip -n "$nsr" link set eth0 up
	ip -n "$nsr" link set eth1 up
	ip -n "$nsh" link set eth0 up
	ip -n "$nsh" route add default via 198.18.11.1

	if command -v keepalived >/dev/null; then
		check "keepalived accepts /etc/ftnet/keepalived.conf" bash -c \
			"ip netns exec '$nsr' keepalived --config-test -f /etc/ftnet/keepalived.conf >'$T/keepalived-test.out' 2>&1"
	else
		say "skipped: keepalived --config-test (no keepalived)"
	fi

	# The router's configuration: the example with agents ([control]) and the first replica.
	head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >/etc/ftnet/secret
	chmod 600 /etc/ftnet/secret
	sed -i -E -e 's/^# \[control\]/[control]/' -e 's/^# (listen|secret_file|heartbeat_ms|dead_after_ms) =/\1 =/' \
		-e 's/^replicas = .*/replicas = ["198.18.11.2"]/' /etc/ftnet/ftnet.toml
	check "the router's config (the example with [control]) passes check-config" bash -c \
		"/usr/bin/ftnet check-config /etc/ftnet/ftnet.toml >'$T/check-config-control.out' 2>&1"
	check "the router's config has agents" grep -q "control: agents connect to 0.0.0.0:7400" "$T/check-config-control.out"
	local before; before=$(ftnet_rules "$nsr")

	# The router, as ftnet-router.service starts it.
	python3 "$NOTIFY_RECV" "$T/notify-router.sock" "$T/notify-router.log" --max 120 &
	local recv=$!
	echo "$recv" >>"$T/pids"
	wait_for 5 test -S "$T/notify-router.sock" || die "notifyrecv.py did not bind its socket"
	t0=$(now_ms)
	ip netns exec "$nsr" env NOTIFY_SOCKET="$T/notify-router.sock" WATCHDOG_USEC=2000000 \
		python3 "$UNITEXEC" "$ROUTER_UNIT" --pre --caps >"$T/router.log" 2>&1 &
	local router=$!
	echo "$router" >>"$T/pids"
	check "router: READY=1 (the unit's Type=notify)" wait_for 15 notified "$T/notify-router.log" 'READY=1'
	local ready_ms=$(($(now_ms) - t0))
	say "router ready after $ready_ms ms: $(grep -m1 READY "$T/notify-router.log" | cut -d' ' -f2-)"
	check "router: serving when it says READY=1 (status socket answers)" bash -c "/usr/bin/ftnet status >'$T/status.txt' 2>&1"
	check "router: status shows the service" grep -q redis "$T/status.txt"
	check "router: its ExecStartPre (check-config) ran" grep -q "/etc/ftnet/ftnet.toml: ok" "$T/router.log"
	pings() { grep -c 'WATCHDOG=1' "$T/notify-router.log" || true; }
	check "router: WATCHDOG=1 pings (2 within 4 s of READY=1, at WATCHDOG_USEC/2 = 1 s)" wait_for 4 bash -c "(( \$(grep -c 'WATCHDOG=1' '$T/notify-router.log') >= 2 ))"
	check "router: the eBPF steering loaded under the unit's capabilities (or one thread was asked for)" \
		bash -c "! grep -q 'falling back to one data-plane thread' '$T/router.log'"
	check "check-router: 0 against the router's /healthz (metrics_listen of the config)" \
		ip netns exec "$nsr" /usr/lib/ftnet/check-router
	check "check-router: 1 against a port nobody serves" bash -c "! ip netns exec '$nsr' /usr/lib/ftnet/check-router 127.0.0.1:9 2>/dev/null"
	check "the unit's ExecReload= (SIGHUP) reloads the router" bash -c \
		"python3 '$UNITEXEC' '$ROUTER_UNIT' --key ExecReload --mainpid $router"
	check "router: logged the reload" wait_for 5 grep -q "SIGHUP: reloaded" "$T/router.log"

	# The agent, as ftnet-agent.service starts it (its arguments from /etc/default/ftnet-agent).
	python3 "$NOTIFY_RECV" "$T/notify-agent.sock" "$T/notify-agent.log" --max 120 &
	echo $! >>"$T/pids"
	wait_for 5 test -S "$T/notify-agent.sock" || die "notifyrecv.py did not bind its socket"
	ip netns exec "$nsh" env NOTIFY_SOCKET="$T/notify-agent.sock" \
		python3 "$UNITEXEC" "$AGENT_UNIT" --caps >"$T/agent.log" 2>&1 &
	local agent=$!
	echo "$agent" >>"$T/pids"
	check "agent: READY=1" wait_for 10 notified "$T/notify-agent.log" 'READY=1'
	check "agent: registered with the router (STATUS=)" wait_for 10 notified "$T/notify-agent.log" 'STATUS=registered'
	check "agent: logged its registration" grep -q "registered with the router" "$T/agent.log"
	check "router: the replica's agent registered" grep -q "agent registered replica=198.18.11.2" "$T/router.log"
	say "agent notifications: $(cut -d' ' -f2- "$T/notify-agent.log" | tr '\n' '/')"
	kill -TERM "$agent"
	rc=0
	wait "$agent" || rc=$?
	check_eq "agent: exit status after SIGTERM" 0 "$rc"
	check "agent: STOPPING=1" notified "$T/notify-agent.log" 'STOPPING=1'

	during=$(ftnet_rules "$nsr")
	check "router: policy rules installed while it ran" test -n "$during"
	kill -TERM "$router"
	rc=0
	wait "$router" || rc=$?
	check_eq "router: exit status after SIGTERM" 0 "$rc"
	check "router: STOPPING=1" notified "$T/notify-router.log" 'STOPPING=1'
	check_eq "router: its policy rules removed" "$before" "$(ftnet_rules "$nsr")"
	check "router: its TUN removed" bash -c "! ip -n '$nsr' link show ftnet0 >/dev/null 2>&1"
	say "router notifications: $(cut -d' ' -f2- "$T/notify-router.log" | sort | uniq -c | tr -s ' ' | tr '\n' '/')"

	# Again, stopped by the unit's ExecStop= (a drain: no connection is open, so it ends at once).
	: >"$T/notify-router.log"
	ip netns exec "$nsr" env NOTIFY_SOCKET="$T/notify-router.sock" WATCHDOG_USEC=2000000 \
		python3 "$UNITEXEC" "$ROUTER_UNIT" --pre --caps >"$T/router2.log" 2>&1 &
	router=$!
	echo "$router" >>"$T/pids"
	check "router (second start): READY=1" wait_for 15 notified "$T/notify-router.log" 'READY=1'
	t0=$(now_ms)
	rc=0
	timeout 20 python3 "$UNITEXEC" "$ROUTER_UNIT" --key ExecStop --mainpid "$router" --caps >"$T/execstop.out" 2>&1 || rc=$?
	say "ExecStop: exit $rc after $(($(now_ms) - t0)) ms: $(head -c 300 "$T/execstop.out" | tr '\n' ' ')"
	check_eq "the unit's ExecStop= (ftnet drain, then wait): exit status" 0 "$rc"
	gone() { ! kill -0 "$router" 2>/dev/null; }
	check "router: ended by ExecStop= within 5 s" wait_for 5 gone
	rc=0
	wait "$router" || rc=$?
	check_eq "router: exit status after the drain" 0 "$rc"
	check "router: logged that it drained" grep -q "drain" "$T/router2.log"
	check "router: STOPPING=1 after the drain" notified "$T/notify-router.log" 'STOPPING=1'
	check_eq "router: its policy rules removed after the drain" "$before" "$(ftnet_rules "$nsr")"
	kill "$recv" 2>/dev/null || true
	echo "$FAILS" >"$T/inside.fails"
}

if [[ ${1:-} == --inside ]]; then
	shift
	trap 'set +e; for p in $(cat "$T/pids" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done' EXIT
	E2E_TEST=package/inside
	inside "$@"
	exit 0
fi

e2e_init package "$@"
[[ $N == 1 && $FAULT == none ]] || die "package runs as n1-none"
for tool in dpkg dpkg-deb unshare setpriv python3 man; do
	command -v "$tool" >/dev/null || die "missing $tool (scripts/deps.sh installs it)"
done
NSR=ftnet-pkg-$LAB-router NSH=ftnet-pkg-$LAB-host
package_cleanup() {
	local rc=$?
	set +e
	local p ns
	for p in $(cat "$T/pids" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
	for ns in "$NSR" "$NSH"; do
		for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
		ip netns del "$ns" 2>/dev/null
	done
	# Evidence of a failure (or FTNET_E2E_EVIDENCE=always): the logs and outputs, not the
	# overlays' contents nor the package.
	if ((rc != 0)) || [[ -n ${FTNET_E2E_EVIDENCE:-} ]]; then
		local dest=${FTNET_E2E_ARTIFACTS:-/tmp/ftnet-e2e-artifacts}/package-n1-none-$LAB
		mkdir -p "$dest"
		find "$T" -maxdepth 1 -type f -exec cp {} "$dest/" \;
		say "evidence in $dest"
	fi
	(exit "$rc")
	e2e_on_exit
}
trap package_cleanup EXIT

t_start=$(now_ms)
rc=0
"$REPO/scripts/package.sh" --no-build --bin-dir "$(dirname "$FTNET")" --out "$T/deb" >"$T/package.out" 2>"$T/package.err" || rc=$?
check_eq "scripts/package.sh: exit status" 0 "$rc"
((rc == 0)) || die "no package: $(tail -5 "$T/package.err")"
DEB=$(tail -1 "$T/package.out")
say "built $DEB in $(($(now_ms) - t_start)) ms: $(cat "$T/package.err")"
dpkg-deb -I "$DEB" >"$T/info.txt"
dpkg-deb -c "$DEB" | awk '{print $6}' | sed 's|^\./|/|' >"$T/contents.txt"
version=$("$FTNET" --version | awk '{print $2}')
check "control: Package: ftnet" grep -qx ' Package: ftnet' "$T/info.txt"
check "control: Version: $version" grep -qx " Version: $version" "$T/info.txt"
check "control: Depends on libc6 and iproute2" grep -qE '^ Depends: libc6 \(>= 2\.[0-9]+\), .*iproute2' "$T/info.txt"
for f in /etc/ftnet/ftnet.toml /etc/ftnet/keepalived.conf /etc/default/ftnet-router /etc/default/ftnet-agent; do
	check "conffile: $f" bash -c "dpkg-deb -f '$DEB' >/dev/null && dpkg-deb --ctrl-tarfile '$DEB' | tar -xO ./conffiles | grep -qx '$f'"
done
for f in /usr/bin/ftnet /usr/lib/ftnet/libftnet_shim.so /usr/lib/ftnet/check-router \
	/lib/systemd/system/ftnet-router.service /lib/systemd/system/ftnet-agent.service \
	/etc/ftnet/ftnet.toml /etc/ftnet/keepalived.conf /etc/default/ftnet-router /etc/default/ftnet-agent \
	/usr/share/man/man1/ftnet.1.gz /usr/share/man/man1/ftnet-router.1.gz /usr/share/man/man1/ftnet-agent.1.gz \
	/usr/share/man/man1/ftnet-drain.1.gz /usr/share/man/man1/ftnet-replica-join.1.gz \
	/usr/share/bash-completion/completions/ftnet /usr/share/zsh/vendor-completions/_ftnet \
	/usr/share/fish/vendor_completions.d/ftnet.fish /usr/share/doc/ftnet/copyright; do
	check "package holds $f" grep -qx "$f" "$T/contents.txt"
done

# What the host has of ftnet before (an operator's machine may have the package installed).
host_state() { { dpkg-query -W -f '${Status} ${Version}' ftnet; stat -c '%n %s %Y' /usr/bin/ftnet /etc/ftnet; } 2>&1 | tr '\n' ' ' || true; }
host_before=$(host_state)
ip netns add "$NSR"
ip netns add "$NSH"
t0=$(now_ms)
export T FTNET
timeout -k 10 150 unshare --mount --propagation private bash "${BASH_SOURCE[0]}" --inside "$DEB" "$NSR" "$NSH" || say "CHECK FAILED: the installed package's checks ended early (exit $?)"
inner=$(cat "$T/inside.fails" 2>/dev/null || echo 1)
[[ $inner =~ ^[0-9]+$ ]] || inner=1
FAILS=$((FAILS + inner))
say "installed and run in $(($(now_ms) - t0)) ms"
check_eq "the host is untouched (its dpkg database's ftnet, /usr/bin/ftnet, /etc/ftnet)" "$host_before" "$(host_state)"
e2e_finish
