# Shared preamble of the recorded new-user sessions (bench/*_session.sh): sourced after the
# script sets DIR (its sandbox's data directory). Puts the checkout's venv first on PATH, points
# Spark at it, clears DIR, and defines `run` (a command as typed, its output and exit code),
# `spark` (spark-submit with its start-up chatter sent to $DIR/spark.log, as in make demo; the
# script sets URI first) and the trap that stops the sandbox on exit.
export PATH="$PWD/.venv/bin:$PATH"
export PYSPARK_PYTHON="$PWD/.venv/bin/python" PYSPARK_DRIVER_PYTHON="$PWD/.venv/bin/python"
export SPARK_LOCAL_IP=127.0.0.1 PYTHONPATH="$PWD"
rm -rf "$DIR"
mkdir -p "$DIR"

run() {  # the command as typed, then its output and exit code
  echo "\$ $*"
  "$@" 2>&1
  echo "[exit $?]"
  echo
}
spark() {  # spark-submit's start-up chatter goes to a log file, as in make demo
  echo "\$ spark-submit --master 'local[2]' $* --metadata-service-uri $URI"
  spark-submit --master 'local[2]' --conf spark.log.level=ERROR "$@" \
    --metadata-service-uri "$URI" 2>"$DIR/spark.log"
  echo "[exit $?]"
  echo
}
trap 'bk sandbox stop --data-dir "$DIR" >/dev/null 2>&1' EXIT
