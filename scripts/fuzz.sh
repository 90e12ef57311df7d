#!/usr/bin/env bash
# Build the fuzz targets (fuzz/) with libFuzzer's coverage instrumentation and run each for a
# bounded time from its corpus in the tree (fuzz/corpus/<target>). Stable rustc: the
# instrumentation is rustc's sancov pass (the flags cargo-fuzz passes, without a sanitizer; the
# harnesses use no unsafe code) plus overflow checks and debug assertions, so an arithmetic
# overflow is a crash too.
#
# Usage: scripts/fuzz.sh [-t SECONDS_PER_TARGET] [-j JOBS] [--merge] [TARGET ...]
#   -t S      run each target S seconds (default 20)
#   -j N      run N targets at once (default 1)
#   --merge   afterwards, add what the run found to fuzz/corpus/<target>, minimized
#             (libFuzzer -merge=1): for a long run whose corpus is to be kept
#   TARGET    wire, router, control, shim (default: all)
# A crash leaves its input in fuzz/artifacts/<target>/ and fails the script; replay it with
#   fuzz/target/<triple>/release/<target> fuzz/artifacts/<target>/crash-…
# Prints per target: executions, seconds, corpus size, crashes.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
secs=20 jobs=1 merge=0 targets=()
while (($#)); do
	case $1 in
	-t) secs=$2; shift 2 ;;
	-j) jobs=$2; shift 2 ;;
	--merge) merge=1; shift ;;
	-h | --help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	-*) echo "fuzz.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
	*) targets+=("$1"); shift ;;
	esac
done
((${#targets[@]})) || targets=(wire router control shim)
triple=$(rustc -vV | sed -n 's/^host: //p')
# --target: the flags reach the fuzzed code only, not build scripts and proc macros.
export RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares -Cdebug-assertions -Coverflow-checks"
(cd fuzz && cargo build --release --locked --target "$triple" --bins)
bin=fuzz/target/$triple/release
work=$(mktemp -d /tmp/ftnet-fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT

run_one() {
	local t=$1
	mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t" "$work/$t"
	# New inputs go to the scratch corpus (first directory); the tree's is read only here.
	"$bin/$t" -max_total_time="$secs" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
		-artifact_prefix="fuzz/artifacts/$t/" "$work/$t" "fuzz/corpus/$t" >"$work/$t.log" 2>&1
}

fail=0
pids=()
names=()
for t in "${targets[@]}"; do
	[[ -x $bin/$t ]] || { echo "fuzz.sh: no target $t (wire, router, control, shim)" >&2; exit 2; }
	run_one "$t" &
	pids+=($!)
	names+=("$t")
	if ((${#pids[@]} >= jobs)); then
		wait "${pids[0]}" || true
		pids=("${pids[@]:1}")
	fi
done
for p in "${pids[@]}"; do wait "$p" || true; done

printf '%-8s %12s %8s %8s %8s\n' target execs seconds corpus crashes
for t in "${names[@]}"; do
	log=$work/$t.log
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
	took=$(sed -n 's/^stat::total_time_s: *//p' "$log" 2>/dev/null | tail -1)
	[[ -n $took ]] || took=$secs
	crashes=$(find "fuzz/artifacts/$t" -type f 2>/dev/null | wc -l)
	if [[ -z $execs ]] || grep -qE '^==[0-9]+== ERROR|panicked at|deadly signal' "$log"; then
		crashes=$((crashes > 0 ? crashes : 1))
	fi
	corpus=$(($(find "$work/$t" -type f | wc -l) + $(find "fuzz/corpus/$t" -type f | wc -l)))
	printf '%-8s %12s %8s %8s %8s\n' "$t" "${execs:-?}" "$took" "$corpus" "$crashes"
	if ((crashes)); then
		fail=1
		echo "---- $t: the end of libFuzzer's log ----"
		tail -40 "$log"
	fi
	if ((merge)) && ((crashes == 0)); then
		"$bin/$t" -merge=1 "fuzz/corpus/$t" "$work/$t" >"$work/$t.merge.log" 2>&1 ||
			{ echo "merge of $t failed:"; tail -5 "$work/$t.merge.log"; fail=1; }
	fi
done
exit $fail
