#!/usr/bin/env bash
# Issue 15 (c): a connection outlives every replica it began with — see join.sh.
FTNET_E2E_JOIN_NAME=join-outlive exec "$(dirname "${BASH_SOURCE[0]}")/join.sh" "$@"
