#!/bin/bash
# Runs the AutoRecovery session as a new user would type it; prints "$ cmd" then its output.
cd /work/wt-i14/.i14/demo || exit 1
export PATH=/work/wt-i14/.venv/bin:$PATH
run() { echo "\$ $*"; eval "$@" 2>&1; echo; }
run 'bk sandbox start --bookies 5 --zk-port 2191 --bookie-port 3291 --data-dir ./sandbox --lost-bookie-recovery-delay 0'
run 'export BK_METADATA_SERVICE_URI=zk://127.0.0.1:2191/ledgers'
export BK_METADATA_SERVICE_URI=zk://127.0.0.1:2191/ledgers
run 'bk bookies'
run 'seq -f "event %g" 1 30000 > events.txt'
run 'bk log create events -E 3 -Qw 2 -Qa 2'
run 'bk log append events --file events.txt --roll-max-entries 3000'
run 'bk log show events'
run 'bk sandbox status --data-dir ./sandbox'
run 'bk autorecovery status'
FIRST=$(bk log show events --json | python -c 'import json,sys; d=json.load(sys.stdin); print(d["ledgers"][0]["ensembles"][0][1][0] if "ensembles" in d["ledgers"][0] else "")' 2>/dev/null)
echo "# (first bookie: $FIRST)" >&2
