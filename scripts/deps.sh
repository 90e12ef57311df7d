#!/usr/bin/env bash
# Installs the Debian packages that the end-to-end tests, the demo and the benchmark use, if any
# is missing, and makes sure none of their system services is left running on the host.
# Sourced by test.sh, demo.sh and quickbench.sh; can also be run on its own.
#
# Packages: redis-server redis-tools socat nginx iperf3 haproxy python3 iproute2 procps psmisc
# curl ca-certificates keepalived g++ (libFuzzer, built for the fuzz targets, is C++), chromium and
# python3-websocket (the status page's test drives a headless browser over the DevTools protocol),
# and for the package (scripts/package.sh, e2e package/n1-none): binutils (objdump), man-db, systemd
# (systemd-analyze verify; nothing is started) and bash-completion. On Debian 12 the `nginx` package itself is built with http_dav_module
# (nginx-light/-full/-core are only transitional or module bundles there); on older releases
# `nginx` pulls one of nginx-core/-full/-light, which all have it too. We check with `nginx -V`.
# iproute2 is for the lab, the demo and the tests (namespaces, veths, looking at rules); the
# router itself sets its routing over rtnetlink and runs no `ip`.

FTNET_DEB_PACKAGES=(redis-server redis-tools socat nginx iperf3 haproxy python3 iproute2 nftables tcpdump procps psmisc curl ca-certificates keepalived g++ chromium python3-websocket binutils man-db systemd bash-completion)
FTNET_SERVICES=(redis-server nginx haproxy iperf3 keepalived)

# command → package, for the check that decides whether to install anything at all.
ftnet_missing_packages() {
	local -A pkg_of=(
		[redis-server]=redis-server [redis-cli]=redis-tools [redis-benchmark]=redis-tools
		[socat]=socat [nginx]=nginx [iperf3]=iperf3 [haproxy]=haproxy [python3]=python3
		[ip]=iproute2 [nft]=nftables [tcpdump]=tcpdump [pgrep]=procps [killall]=psmisc [curl]=curl [keepalived]=keepalived
		[c++]=g++ [chromium]=chromium [objdump]=binutils [man]=man-db [systemd-analyze]=systemd
	)
	local cmd missing=()
	for cmd in "${!pkg_of[@]}"; do
		command -v "$cmd" >/dev/null 2>&1 || missing+=("${pkg_of[$cmd]}")
	done
	if command -v nginx >/dev/null 2>&1 && ! nginx -V 2>&1 | grep -q -- --with-http_dav_module; then
		missing+=(nginx)
	fi
	[[ -e /etc/ssl/certs/ca-certificates.crt ]] || missing+=(ca-certificates)
	[[ -e /usr/lib/python3/dist-packages/websocket/__init__.py ]] || missing+=(python3-websocket)
	[[ -e /usr/share/bash-completion/bash_completion ]] || missing+=(bash-completion)
	((${#missing[@]})) && printf '%s\n' "${missing[@]}" | sort -u
	return 0
}

ftnet_stop_services() {
	local s
	for s in "${FTNET_SERVICES[@]}"; do
		if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null; then
			systemctl disable --now "$s" >/dev/null 2>&1 || true
		elif command -v service >/dev/null; then
			service "$s" stop >/dev/null 2>&1 || true
			if command -v update-rc.d >/dev/null; then update-rc.d "$s" disable >/dev/null 2>&1 || true; fi
		fi
	done
}

ftnet_install_deps() {
	local missing
	missing=$(ftnet_missing_packages)
	if [[ -z $missing ]]; then
		echo "deps: all present (redis, socat, nginx with dav, iperf3, haproxy, python3, iproute2, curl, man-db, systemd-analyze, bash-completion)"
		return 0
	fi
	echo "deps: missing: ${missing//$'\n'/ }"
	if [[ $(id -u) != 0 ]]; then
		echo "deps: not root, cannot install; run: sudo apt-get install -y --no-install-recommends ${FTNET_DEB_PACKAGES[*]}" >&2
		return 1
	fi
	command -v apt-get >/dev/null || { echo "deps: no apt-get on this system; install the equivalents of: ${FTNET_DEB_PACKAGES[*]}" >&2; return 1; }
	# Keep the packages' maintainer scripts from starting their services (redis on 6379, nginx on
	# 80, haproxy): policy-rc.d exit 101 is Debian's "do not start" switch for invoke-rc.d.
	local policy=/usr/sbin/policy-rc.d made_policy=0
	if [[ ! -e $policy ]]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && made_policy=1
	fi
	local rc=0
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q && apt-get install -y -q --no-install-recommends "${FTNET_DEB_PACKAGES[@]}" </dev/null || rc=$?
	((made_policy)) && rm -f "$policy"
	((rc == 0)) || { echo "deps: apt-get failed (exit $rc)" >&2; return "$rc"; }
	# In case a service started anyway (no policy-rc.d support, or it was already there).
	ftnet_stop_services
	missing=$(ftnet_missing_packages)
	[[ -z $missing ]] || { echo "deps: still missing after install: ${missing//$'\n'/ }" >&2; return 1; }
	echo "deps: installed"
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
	set -euo pipefail
	ftnet_install_deps
fi
