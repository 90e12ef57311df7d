#!/usr/bin/env bash
# asyncio.sh with the server's asyncio loop on the select selector.
export FTNET_E2E_SELECTOR=select
exec "$(dirname "${BASH_SOURCE[0]}")/asyncio.sh" "$@"
