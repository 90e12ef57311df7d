#!/usr/bin/env bash
# The ftnet test command: dependencies, release build, unit/simulation tests, fuzzing, then the
# end-to-end matrix in network namespaces (tests/e2e/run.sh; needs root).
#
# Usage: ./scripts/test.sh [run.sh options, e.g. --quick, --only REGEX, --figures]
# Environment:
#   FTNET_E2E=0   skip the end-to-end tests on purpose (otherwise skipping them is a failure)
#   FTNET_CARGO_TEST_TIMEOUT=1500   seconds before cargo test is stopped and counted as failed
#   FTNET_FUZZ_SECONDS=20   seconds each fuzz target runs (scripts/fuzz.sh; 0 skips fuzzing)
#   CARGO_TARGET_DIR is respected; by default the binary is target/release/ftnet.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$PWD
# shellcheck source=scripts/deps.sh
source scripts/deps.sh

section() { printf '\n==================== %s ====================\n' "$*"; }
t_start=$(date +%s)
elapsed() { echo "$(($(date +%s) - t_start))s"; }

section "environment"
echo "repo:   $REPO ($(git rev-parse --short HEAD 2>/dev/null || echo 'no git'))"
echo "kernel: $(uname -r), $(nproc) cores, user $(id -un) (uid $(id -u)), CI=${CI:-}"
command -v cargo >/dev/null || { echo "cargo not found: install Rust (rustup.rs) and retry" >&2; exit 1; }
cargo --version

section "dependencies"
e2e_wanted=1
[[ ${FTNET_E2E:-1} == 0 ]] && e2e_wanted=0
if [[ $(id -u) == 0 ]]; then
	ftnet_install_deps
elif ((e2e_wanted)); then
	# Not root: cannot install, and the e2e section below will refuse to run anyway.
	ftnet_install_deps || echo "deps: continuing with the build and unit tests"
else
	echo "deps: not needed (FTNET_E2E=0 and not root)"
fi

section "build (cargo build --release --locked --workspace)"
cargo build --release --locked --workspace
target_dir=${CARGO_TARGET_DIR:-$REPO/target}
export FTNET=$target_dir/release/ftnet
echo "built $FTNET [$(elapsed)]"

section "lints (cargo clippy: the unsafe and panic rules of ARCHITECTURE.md)"
# Only the workspace's own rules are errors here (root Cargo.toml [workspace.lints]), so that a
# newer clippy's new default lints cannot fail CI; run plain `cargo clippy` for the rest.
if ! cargo clippy --version >/dev/null 2>&1 && command -v rustup >/dev/null; then
	rustup component add clippy || true
fi
lint_rc=0
cargo clippy --release --locked --workspace --all-targets -- -A clippy::all \
	-D clippy::undocumented_unsafe_blocks -D clippy::cast_possible_truncation \
	-D unsafe_op_in_unsafe_fn || lint_rc=$?
if ((lint_rc)); then echo "lints FAILED (exit $lint_rc) [$(elapsed)]"; else echo "lints clean [$(elapsed)]"; fi

section "unit and simulation tests (cargo test --release --locked --workspace)"
# On failure, still run the end-to-end tests (they say more about the product) and fail at the end.
# Bounded, so that a hung test cannot eat CI's 90 minutes (FTNET_CARGO_TEST_TIMEOUT seconds).
cargo_rc=0
timeout -k 30 "${FTNET_CARGO_TEST_TIMEOUT:-1500}" cargo test --release --locked --workspace || cargo_rc=$?
((cargo_rc == 124)) && echo "cargo test TIMED OUT after ${FTNET_CARGO_TEST_TIMEOUT:-1500} s"
if ((cargo_rc)); then
	echo "cargo test FAILED (exit $cargo_rc) [$(elapsed)]; continuing with the end-to-end tests"
else
	echo "cargo test passed [$(elapsed)]"
fi

section "fuzzing (scripts/fuzz.sh -t ${FTNET_FUZZ_SECONDS:-20}: every target from its corpus in the tree)"
# Bounded: FTNET_FUZZ_SECONDS per target (0 skips). A crash fails the run; its input is kept in
# fuzz/artifacts/<target>/.
fuzz_rc=0
if [[ ${FTNET_FUZZ_SECONDS:-20} != 0 ]]; then
	scripts/fuzz.sh -t "${FTNET_FUZZ_SECONDS:-20}" || fuzz_rc=$?
	if ((fuzz_rc)); then echo "fuzzing FAILED (exit $fuzz_rc) [$(elapsed)]"; else echo "fuzzing clean [$(elapsed)]"; fi
else
	echo "fuzzing: skipped because FTNET_FUZZ_SECONDS=0 was set"
fi

section "end-to-end tests (tests/e2e/run.sh $*)"
if ((!e2e_wanted)); then
	echo "e2e: skipped because FTNET_E2E=0 was set"
	exit $((cargo_rc || lint_rc || fuzz_rc))
fi
skip_reason=
if [[ $(id -u) != 0 ]]; then
	skip_reason="not running as root (uid $(id -u)); the e2e tests create network namespaces"
elif ! ip netns add "ftnet-probe$$" 2>/dev/null; then
	skip_reason="cannot create network namespaces here (ip netns add failed: no CAP_SYS_ADMIN/CAP_NET_ADMIN?)"
else
	ip netns del "ftnet-probe$$"
fi
if [[ -n $skip_reason ]]; then
	cat >&2 <<MSG

  ###########################################################################
  ##  END-TO-END TESTS SKIPPED: $skip_reason
  ##  The product was NOT tested end to end (cargo test exit: $cargo_rc).
  ##  Run as root (sudo ./scripts/test.sh), or set FTNET_E2E=0 to skip on purpose.
  ###########################################################################

MSG
	exit 1
fi
rc=0
tests/e2e/run.sh "$@" || rc=$?
verdict=()
((cargo_rc)) && verdict+=("CARGO TEST FAILED")
((lint_rc)) && verdict+=("LINTS FAILED")
((fuzz_rc)) && verdict+=("FUZZ CRASHES")
((rc)) && verdict+=("END-TO-END FAILURES")
((${#verdict[@]})) || verdict=("ALL PASSED")
section "done in $(elapsed): ${verdict[*]}"
((cargo_rc == 0 && lint_rc == 0 && fuzz_rc == 0 && rc == 0))
