#!/usr/bin/env bash
# (c') redis.sh with 50 concurrent client connections (redis-benchmark -c 50): every one of the
# 50 connections must ride through the fault, and the replicas must still agree. (Values and keys
# are the same for every client, so the survivors' digests agree whatever the interleaving.)
set -euo pipefail
E2E_REDIS_NAME=redis-conc E2E_REDIS_CLIENTS=50 exec "$(dirname "${BASH_SOURCE[0]}")/redis.sh" "$@"
