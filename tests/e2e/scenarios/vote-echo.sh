#!/usr/bin/env bash
# echo.sh with output voting (lab --vote majority): every reply byte goes out once a majority of
# the live replicas sent it; the stream must still arrive intact through a fault.
export FTNET_E2E_VOTE=1
exec "$(dirname "${BASH_SOURCE[0]}")/echo.sh" "$@"
