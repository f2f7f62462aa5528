#!/usr/bin/env bash
# make demo: start the sandbox detached, run the example job(s), always stop the sandbox.
set -euo pipefail
cd "$(dirname "$0")/.."
BK=.venv/bin/bk
PY=.venv/bin/python
DIR=.demo-sandbox
ZK_PORT=${BK_DEMO_ZK_PORT:-2181}
rm -rf "$DIR"
trap '$BK sandbox stop --data-dir "$DIR"' EXIT
URI=$($BK sandbox start --bookies 3 --data-dir "$DIR" --zk-port "$ZK_PORT" --bookie-port 0 | tail -n 1)
echo "sandbox up: $URI"
$BK bookies -m "$URI"
$PY examples/ledger_roundtrip.py --metadata-service-uri "$URI"
