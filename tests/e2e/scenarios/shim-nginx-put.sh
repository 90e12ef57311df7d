#!/usr/bin/env bash
# nginx-put.sh with every replica under the determinism shim (lab --shim: `ftnet run` fed by an agent).
export FTNET_E2E_SHIM=1
exec "$(dirname "${BASH_SOURCE[0]}")/nginx-put.sh" "$@"
