#!/usr/bin/env bash
# asyncio.sh with the server's asyncio loop on the epoll selector.
export FTNET_E2E_SELECTOR=epoll
exec "$(dirname "${BASH_SOURCE[0]}")/asyncio.sh" "$@"
