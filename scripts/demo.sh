#!/usr/bin/env bash
# The README's first command: installs what the demo needs, builds ftnet, and runs the demo
# (redis behind the VIP under load, one replica killed, no client error). Needs root.
# Usage: ./scripts/demo.sh [--replicas N]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/deps.sh
source scripts/deps.sh
if [[ $(id -u) != 0 ]]; then
	echo "demo.sh: the demo creates network namespaces and needs root: sudo $0 $*" >&2
	exit 1
fi
command -v cargo >/dev/null || { echo "demo.sh: cargo not found: install Rust (rustup.rs) and retry" >&2; exit 1; }
echo "== installing dependencies (if missing)"
ftnet_install_deps
echo "== building (cargo build --release --locked)"
cargo build --release --locked
ftnet=${CARGO_TARGET_DIR:-target}/release/ftnet
echo "== running: $ftnet lab demo $*"
exec "$ftnet" lab demo "$@"
