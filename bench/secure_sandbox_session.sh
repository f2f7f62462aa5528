#!/usr/bin/env bash
# A new user's session with a secure sandbox, recorded into bench/secure_sandbox_session.txt:
# start it, run the demo jobs against it with the printed settings, then the refused
# attempts (no client certificate, a wrong ledger password, an unauthenticated ZooKeeper
# write) with their messages. Run from the checkout: bash bench/secure_sandbox_session.sh
set -uo pipefail
cd "$(dirname "$0")/.."
DIR=${BK_SESSION_DIR:-.bk-sandbox-secure}
ZK_PORT=${BK_SESSION_ZK_PORT:-2201}
# shellcheck source=bench/session_common.sh
source bench/session_common.sh

echo "# 1. Start a secure sandbox"
run bk sandbox start --secure --zk-port "$ZK_PORT" --bookie-port 0 --data-dir "$DIR"
URI="zk://127.0.0.1:$ZK_PORT/ledgers"
run ls "$DIR/secure"
run cat "$DIR/secure/client.env"
echo "\$ source $DIR/secure/client.env"
# shellcheck disable=SC1091
source "$DIR/secure/client.env"
echo
run bk bookies -m "$URI"

echo "# 2. The demo jobs (make demo's), with the environment of client.env"
run python examples/ledger_roundtrip.py --metadata-service-uri "$URI" --entries 5000
spark examples/produce_events.py --log events --rows 20000 --batches 3
spark examples/stream_aggregate.py --source events --sink user_totals \
  --checkpoint "$PWD/$DIR/checkpoints/stream-aggregate"
spark examples/export_parquet.py --log events --out "$PWD/$DIR/events.parquet"
echo "(the same jobs as make demo runs them: BK_DEMO_SECURE=1 make demo, at the end of the file)"
echo

echo "# 3. Refused attempts"
echo "## 3a. A client without a certificate (BK_TLS_CERT/BK_TLS_KEY unset)"
run env -u BK_TLS_CERT -u BK_TLS_KEY bk simpletest -m "$URI" --entries 10
run env -u BK_TLS_CERT -u BK_TLS_KEY python -c "
from bk_spark.core import BookKeeper
with BookKeeper('$URI') as bk:
    lh = bk.create_ledger(3, 2, 2)
    lh.add_entry(b'no certificate')
"
echo "## 3b. A wrong ledger password: refused by the client, and by every bookie"
run python -c "
from bk_spark.core import BookKeeper
with BookKeeper('$URI') as bk:
    lh = bk.create_ledger(3, 3, 2, password=b'demo-secret')
    for i in range(5):
        lh.add_entry(b'private-%d' % i)
    lh.close()
    print('ledger', lh.id, 'written with a password')
    open('$DIR/ledger-id', 'w').write(str(lh.id))
"
L=$(cat "$DIR/ledger-id")
run bk ledger read "$L" -m "$URI" -p wrong-password
run bk ledger delete "$L" -m "$URI" -p wrong-password --yes
run python -c "
# Raw gRPC with the project's stubs and a valid client certificate, skipping the client's
# own password check: each bookie checks the master key itself.
import os, grpc
from bk_spark.protocol.digest import master_key
from bk_spark.proto import bookie_pb2 as pb, bookie_pb2_grpc
from bk_spark.core import BookKeeper
creds = grpc.ssl_channel_credentials(*(open(os.environ[v], 'rb').read() for v in
                                       ('BK_TLS_CA', 'BK_TLS_KEY', 'BK_TLS_CERT')))
with BookKeeper('$URI') as bk:
    bookies = bk.ledger_metadata($L).ensembles[0][1]
for b in bookies:
    with grpc.secure_channel(b, creds) as ch:
        stub = bookie_pb2_grpc.BookieStub(ch)
        r = stub.ReadEntries(pb.ReadRequest(ledger_id=$L, first_entry=0, last_entry=4,
                                            master_key=master_key(b'wrong-password')))
        d = stub.DeleteLedger(pb.DeleteLedgerRequest(ledger_id=$L,
                                                     master_key=master_key(b'wrong-password')))
        print(b, 'read:', pb.StatusCode.Name(r.status), repr(r.message), len(r.entries),
              'entries; delete:', pb.StatusCode.Name(d.status))
"
run bk ledger read "$L" -m "$URI" -p demo-secret --to 1
echo "## 3c. Unauthenticated ZooKeeper writes"
run env -u BK_ZK_AUTH_FILE bk bookies -m "$URI"
run python -c "
# TLS with the sandbox's client certificate but no ZooKeeper credentials: ACLs refuse.
import os
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from bk_spark.io.metadata_store import ledger_path
p = ledger_path('/ledgers', $L)
zk = KazooClient(hosts='127.0.0.1:$ZK_PORT', use_ssl=True, ca=os.environ['BK_ZK_TLS_CA'],
                 certfile=os.environ['BK_ZK_TLS_CERT'], keyfile=os.environ['BK_ZK_TLS_KEY'])
zk.start(timeout=10)
for what, op in (('create /ledgers/intruder', lambda: zk.create('/ledgers/intruder', b'x')),
                 ('set ' + p, lambda: zk.set(p, b'forged')),
                 ('delete ' + p, lambda: zk.delete(p)),
                 ('read /ledgers', lambda: zk.get_children('/ledgers'))):
    try:
        op()
        print(what, '-> ACCEPTED')
    except NoAuthError as e:
        print(what, '-> refused:', type(e).__name__)
zk.stop()
"
run python -c "
# No TLS at all: ZooKeeper's TLS port gives a plaintext client no session.
from kazoo.client import KazooClient
zk = KazooClient(hosts='127.0.0.1:$ZK_PORT')
try:
    zk.start(timeout=5)
    print('connected')
except Exception as e:
    print('refused:', type(e).__name__, e)
finally:
    zk.stop()
"
run env -u BK_ZK_TLS_CA -u BK_ZK_TLS_CERT -u BK_ZK_TLS_KEY bk bookies -m "$URI"
run bk sandbox stop --data-dir "$DIR"
trap - EXIT
