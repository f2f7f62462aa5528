#!/usr/bin/env bash
# A new user's session with tiered storage, recorded into bench/offload_session.txt: a sandbox
# (its bookies run an offloader by default), a log written through Spark with a password and an
# offload policy of 0, `bk log show` with both tiers, `bk offload status`, a Spark read through
# read_log and through the plain bookkeeper source, spark.read.parquet of the offload path, and
# the Iceberg table read back with pyiceberg. Run from the checkout:
#   bash bench/offload_session.sh > bench/offload_session.txt
set -uo pipefail
cd "$(dirname "$0")/.."
DIR=${BK_SESSION_DIR:-.bk-sandbox-offload}
ZK_PORT=${BK_SESSION_ZK_PORT:-2202}
# shellcheck source=bench/session_common.sh
source bench/session_common.sh
ABS="$PWD/$DIR"

echo "# 1. A sandbox (its bookies run an offloader contender: --offload, files under $DIR/offload)"
run bk sandbox start --zk-port "$ZK_PORT" --bookie-port 0 --data-dir "$DIR"
URI="zk://127.0.0.1:$ZK_PORT/ledgers"
export BK_METADATA_SERVICE_URI="$URI"

echo "# 2. A log with a policy of 0 (offload each ledger as soon as it closes), kept on the"
echo "#    bookies too for 10 minutes, with an Iceberg table beside the files"
run bk log create events
run bk log set events --offload-after 0 --offload-deletion-lag 10m \
  --offload-iceberg-catalog "sqlite:///$ABS/catalog.db"
spark examples/produce_events.py --log events --rows 20000 --batches 3

echo "# 3. A few seconds later: each ledger's tier, and the offloader"
sleep 8
run bk log show events
run bk offload status

echo "# 4. Spark reads: read_log (Parquet scan of the offloaded prefix + the bookkeeper source),"
echo "#    the plain bookkeeper source, and spark.read.parquet of the offload path"
cat > "$DIR/read.py" <<EOF
from pyspark.sql import SparkSession
from bk_spark.spark import read_log, offload_path

spark = SparkSession.builder.master("local[2]").config("spark.log.level", "ERROR").getOrCreate()
uri = "$URI"
both = read_log(spark, "events", uri=uri)
plain = spark.read.format("bookkeeper").option("metadataServiceUri", uri) \\
    .option("log", "events").load()
path = offload_path(uri, "events")
table = spark.read.parquet(path)
print("read_log rows:", both.count(), " bookkeeper source rows:", plain.count())
print("rows in one and not the other:", both.exceptAll(plain).count() + plain.exceptAll(both).count())
print("offload path:", path.replace("$ABS", "<sandbox>"))
print("spark.read.parquet rows:", table.count())
table.select("ledger_id", "entry_id", "timestamp").orderBy("ledger_id", "entry_id").show(3)
spark.stop()
EOF
echo "\$ python $DIR/read.py   # (the script is in the log below)"
sed 's/^/    /' "$DIR/read.py"
python "$DIR/read.py" 2>"$DIR/read.log"
echo "[exit $?]"
echo

echo "# 5. The same files as an Apache Iceberg table, read back with pyiceberg"
cat > "$DIR/iceberg.py" <<EOF
from pyiceberg.catalog.sql import SqlCatalog

catalog = SqlCatalog("bk", uri="sqlite:///$ABS/catalog.db", warehouse="file://$ABS/warehouse")
table = catalog.load_table(("bk", "events"))
arrow = table.scan().to_arrow()
print("iceberg rows:", arrow.num_rows, " snapshots:", len(table.metadata.snapshots))
print("columns:", arrow.column_names)
EOF
echo "\$ python $DIR/iceberg.py"
sed 's/^/    /' "$DIR/iceberg.py"
python "$DIR/iceberg.py" 2>&1
echo "[exit $?]"
echo

echo "# 5b. A log whose ledgers have a password, as most users' do: written, offloaded by the"
echo "#     sandbox's offloader (it was given no password), read back with the password"
run bk log create secrets
run bk log set secrets --offload-after 0
cat > "$DIR/secrets.py" <<EOF
from pyspark.sql import SparkSession

spark = SparkSession.builder.master("local[2]").config("spark.log.level", "ERROR").getOrCreate()
rows = spark.range(0, 50000, 1, 2).selectExpr("id", "CAST(id * 2 AS STRING) AS doubled")
rows.write.format("bookkeeper").mode("append").option("metadataServiceUri", "$URI") \\
    .option("log", "secrets").option("password", "p").save()
EOF
echo "\$ python $DIR/secrets.py"
sed 's/^/    /' "$DIR/secrets.py"
python "$DIR/secrets.py" 2>"$DIR/secrets.log"
echo "[exit $?]"
echo
sleep 8
run bk log show secrets
run bk offload status
cat > "$DIR/secrets_read.py" <<EOF
from pyspark.sql import SparkSession
from bk_spark.spark import read_log

spark = SparkSession.builder.master("local[2]").config("spark.log.level", "ERROR").getOrCreate()
df = read_log(spark, "secrets", uri="$URI", password="p")
print("rows:", df.count(), " distinct ids:", df.select("id").distinct().count())
EOF
echo "\$ python $DIR/secrets_read.py"
sed 's/^/    /' "$DIR/secrets_read.py"
python "$DIR/secrets_read.py" 2>"$DIR/secrets_read.log"
echo "[exit $?]"
echo

echo "# 6. Stop"
run bk sandbox stop --data-dir "$DIR"
