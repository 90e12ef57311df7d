#!/usr/bin/env bash
# nginx-get.sh with output voting (lab --vote majority): 100 MB built from voted bytes (GSO
# super-packets towards the client), intact through a fault.
export FTNET_E2E_VOTE=1
exec "$(dirname "${BASH_SOURCE[0]}")/nginx-get.sh" "$@"
