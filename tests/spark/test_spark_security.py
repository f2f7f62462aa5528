"""A Spark job against a secured cluster: mutual TLS to the bookies, ZooKeeper digest auth,
a ledger password, all given as data source options; no secret reaches a plan, the event log
or a streaming query's checkpoint (the secret options' names match Spark's
``spark.redaction.regex``, should Spark ever show them)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bk_spark.certs import issue_cert, make_ca
from bk_spark.datasource import connections
from bk_spark.sandbox import BookieProcess, ZooKeeperServer, free_port, wait_for_registrations

ZK_SECRET = "zk-" + uuid.uuid4().hex  # random per run: found only if it leaked
LEDGER_SECRET = "ledger-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def secure(zk_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[dict[str, str]]:
    """Three bookies requiring client certificates, under a root protected by ACLs; yields
    the data source options of an allow-listed client."""
    base = tmp_path_factory.mktemp("secure")
    ca = make_ca(base / "ca")
    server, app = issue_cert(ca, base, "bookie"), issue_cert(ca, base, "spark-app")
    creds = base / "zk-auth"
    creds.write_text(f"bk-spark:{ZK_SECRET}\n")
    uri = f"zk://{zk_server.connect_string}/secure-{uuid.uuid4().hex[:8]}"
    args = ["--journal-file-size-mb", "8", "--tls-cert", str(server.cert), "--tls-key",
            str(server.key), "--tls-ca", str(ca.cert), "--tls-client-auth", "require",
            "--allow-client", "spark-app", "--zk-auth-file", str(creds)]
    bookies = [BookieProcess(uri, base / f"bookie-{i}", port=free_port(), extra_args=args)
               for i in range(3)]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BK_ZK_AUTH_FILE", str(creds))  # to watch the registrations only
        for b in bookies:
            b.start()
        wait_for_registrations(uri, 3)
    yield {"metadataServiceUri": uri, "tlsCaCert": str(ca.cert), "tlsCert": str(app.cert),
           "tlsKey": str(app.key), "zkAuthSecret": f"bk-spark:{ZK_SECRET}",
           "password": LEDGER_SECRET}
    connections.close_all()  # the clients the test's process borrowed, before the bookies go
    for b in bookies:
        b.stop()
        b.drop_data()


def test_a_job_over_mutual_tls_and_zookeeper_auth_keeps_secrets_out_of_plans_and_event_log(
        spark, secure: dict[str, str], log_name, capsys, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    name = log_name()
    rows = spark.range(200).selectExpr("id", "CAST(id * 7 AS STRING) AS value")
    rows.write.format("bookkeeper").mode("append").options(**secure).option("log", name).save()
    df = spark.read.format("bookkeeper").options(**secure).option("log", name).load()
    assert sorted(r.id for r in df.where("id % 2 = 0").collect()) == list(range(0, 200, 2))
    for mode in ("extended", "formatted"):
        df.explain(mode)
    plans = capsys.readouterr().out
    assert "BatchScan bookkeeper" in plans
    # A streaming copy through the same options: the query's checkpoint must hold no secret.
    ckpt = tmp_path / "checkpoint"
    q = (spark.readStream.format("bookkeeper").options(**secure).option("log", name)
         .option("startingOffsets", "earliest").load()
         .writeStream.format("bookkeeper").options(**secure).option("log", name + "-copy")
         .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None
    assert spark.read.format("bookkeeper").options(**secure).option("log", name + "-copy") \
        .load().count() == 200
    stored = "".join(p.read_text(errors="replace") for p in ckpt.rglob("*") if p.is_file())
    assert "offsets" in {p.name for p in ckpt.iterdir()}
    event_dir = Path(spark.conf.get("spark.eventLog.dir").removeprefix("file:"))
    events = "".join(p.read_text(errors="replace") for p in event_dir.rglob("*")
                     if p.is_file())
    # the job's own events are there: its write, its read
    assert "AppendData bookkeeper" in events and "BatchScan bookkeeper" in events
    for secret in (ZK_SECRET, LEDGER_SECRET):
        assert secret not in plans
        assert secret not in events
        assert secret not in stored


def test_the_readme_security_sections_spark_block_runs_as_written(
        spark, secure: dict[str, str], tmp_path: Path,  # type: ignore[no-untyped-def]
        monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """README, Security: the Spark read with client certificate files and ZooKeeper
    credentials named as the block names them (``ca.crt``, ``client.crt``, ``client.key``,
    ``zk-auth`` in its directory), of a log ``events`` written first; the block's URI is
    the secure cluster's (:func:`bk_spark.readme.for_cluster`)."""
    from bk_spark import readme

    blocks = [b for b in readme.python_blocks(readme.README.read_text())
              if b.needs == {"spark", "secure"}]
    assert blocks
    for option, name in (("tlsCaCert", "ca.crt"), ("tlsCert", "client.crt"),
                         ("tlsKey", "client.key")):
        (tmp_path / name).write_bytes(Path(secure[option]).read_bytes())
    (tmp_path / "zk-auth").write_text(secure["zkAuthSecret"] + "\n")
    spark.range(5).selectExpr("id").write.format("bookkeeper").mode("append") \
        .options(**{k: v for k, v in secure.items() if k != "password"}) \
        .option("log", "events").save()
    monkeypatch.chdir(tmp_path)
    for block in blocks:
        code = compile(readme.for_cluster(block.code, secure["metadataServiceUri"]),
                       f"README.md:{block.line}", "exec")
        exec(code, {"__name__": f"readme_block_{block.line}", "spark": spark})  # noqa: S102
    shown = capsys.readouterr().out
    assert "| id|" in shown and "|  4|" in shown  # the log's five rows, read over mutual TLS
