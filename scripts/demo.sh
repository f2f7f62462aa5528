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
# BK_DEMO_SECURE=1: the same demo on a secure sandbox (mutual TLS to bookies and ZooKeeper,
# ZooKeeper credentials and ACLs), the clients and Spark jobs using the printed client.env.
SECURE=()
[ "${BK_DEMO_SECURE:-0}" = 1 ] && SECURE=(--secure)
URI=$($BK sandbox start "${SECURE[@]}" --bookies 3 --data-dir "$DIR" --zk-port "$ZK_PORT" \
      --bookie-port 0 | awk '/^zk:\/\// && !u { u = $0 } END { print u }')
echo "sandbox up: $URI"
if [ "${#SECURE[@]}" -gt 0 ]; then
  echo "secure: using $DIR/secure/client.env"
  # shellcheck disable=SC1091
  source "$DIR/secure/client.env"
fi
$BK bookies -m "$URI"
$PY examples/ledger_roundtrip.py --metadata-service-uri "$URI"

# The Spark examples, with spark-submit from the venv. Spark's Python workers find the data
# source by its module name (pyspark_bookkeeper): put the checkout on their PYTHONPATH (an
# editable install hides top-level modules from that lookup).
export PYSPARK_PYTHON="$PWD/$PY" PYSPARK_DRIVER_PYTHON="$PWD/$PY" SPARK_LOCAL_IP=127.0.0.1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
spark_run() {  # spark-submit's start-up chatter goes to a log file, shown on failure
  local log="$DIR/$(basename "$1" .py).log"
  if ! .venv/bin/spark-submit --master 'local[2]' --conf spark.log.level=ERROR \
      "$@" --metadata-service-uri "$URI" 2>"$log"; then
    tail -n 40 "$log"
    exit 1
  fi
}
echo "== Spark: produce events into log 'events' (batch writes, one CAS per write)"
spark_run examples/produce_events.py --log events --rows 20000 --batches 3
echo "== Spark: stream 'events', aggregate, write log 'user_totals' exactly once (availableNow)"
spark_run examples/stream_aggregate.py --source events --sink user_totals \
  --checkpoint "$PWD/$DIR/checkpoints/stream-aggregate"
echo "== Spark: export log 'events' to Parquet (batch read)"
spark_run examples/export_parquet.py --log events --out "$PWD/$DIR/events.parquet"
