#!/usr/bin/env bash
# A hung server under long-lived writers only — see join-hang.sh.
FTNET_E2E_HANG_NAME=hang-writers exec "$(dirname "${BASH_SOURCE[0]}")/join-hang.sh" "$@"
