"""Cookies on real processes: a bookie recognises its own directories and its cluster at
start-up and refuses, with the situation and the command that fixes it, when they do not
match (``bk_spark/protocol/cookie_rules.py``); ``bk cookie`` and ``bk bookie format`` as
an operator runs them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from dataclasses import replace

import pytest

from bk_spark.core import BookKeeper
from bk_spark.io.cookies import CookieStore, ensure_instance_id
from bk_spark.io.zk import connect_zk
from bk_spark.metadata_uri import parse_metadata_service_uri
from bk_spark.sandbox import (
    BOOKIE_COMMAND,
    BookieProcess,
    Sandbox,
    SandboxError,
    free_port,
    write_state,
)

CLI = [sys.executable, "-m", "bk_spark.cli"]


def bk(*args: str) -> subprocess.CompletedProcess:
    """`bk ...` as a script runs it (stdin is not a terminal)."""
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def start_refused(b: BookieProcess, *extra: str, uri: str | None = None,
                  port: int | None = None) -> str:
    """Start ``b``'s bookie in the foreground as an operator would; it must exit non-zero
    at once: returns what it printed on stderr."""
    cmd = [*BOOKIE_COMMAND, "--metadata-service-uri", uri or b.metadata_service_uri,
           "--port", str(port or b.port), "--data-dir", str(b.data_dir), *b.extra_args, *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=90,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    return r.stderr


def write_a_ledger(uri: str, ensemble: int) -> int:
    with BookKeeper(uri) as client:
        lh = client.create_ledger(ensemble, ensemble, ensemble, password=b"p")
        for i in range(10):
            lh.add_entry(f"e{i}".encode())
        lh.close()
        return lh.id


def test_a_wiped_bookie_with_on_lost_data_refuse_refuses_and_names_the_fix(
        cluster_factory, metadata_uri: str) -> None:
    c = cluster_factory(1)
    b = c.bookies[0]
    write_a_ledger(metadata_uri, 1)
    b.kill()
    b.drop_data()  # the disk replaced: journal and ledgers gone with their stamps
    err = start_refused(b, "--on-lost-data", "refuse")
    assert f"bookie {b.bookie_id} refuses to start (data_lost)" in err
    assert "lost their stamp while ZooKeeper holds the cookie" in err
    assert "it runs with --on-lost-data refuse" in err
    assert (f"`bk bookie format --data-dir {b.data_dir} --bookie-id {b.bookie_id} "
            f"-m {metadata_uri} --force`") in err
    assert "Traceback" not in err
    # it refused before serving: its directories were not re-created, let alone stamped
    assert not (b.data_dir / "journal" / "VERSION").exists()
    # the operator's way out: re-replication has nothing to do (one copy), format, start new
    r = bk("bookie", "format", "--data-dir", str(b.data_dir), "-m", metadata_uri, "--yes")
    assert r.returncode == 0, r.stderr  # no stamp, no --bookie-id: the cookie is kept...
    err = start_refused(b, "--on-lost-data", "refuse")  # ...so it still refuses
    assert "(data_lost)" in err
    r = bk("bookie", "format", "--data-dir", str(b.data_dir), "--bookie-id", b.bookie_id,
           "-m", metadata_uri, "--yes")
    assert r.returncode == 1 and "refusing to format" in r.stderr and "--force" in r.stderr
    r = bk("bookie", "format", "--data-dir", str(b.data_dir), "--bookie-id", b.bookie_id,
           "-m", metadata_uri, "--yes", "--force", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["cookies_deleted"] == [b.bookie_id]
    b.start()  # a new, empty bookie now
    assert (b.data_dir / "ledgers" / "VERSION").exists()


def test_a_directory_of_another_bookie_is_refused(cluster_factory) -> None:
    c = cluster_factory(2)
    a, other = c.bookies
    for x in (a, other):
        x.stop()
    shutil.rmtree(a.data_dir / "ledgers")
    shutil.copytree(other.data_dir / "ledgers", a.data_dir / "ledgers")
    err = start_refused(a)
    assert f"refuses to start (foreign_directory): {a.data_dir / 'ledgers'} belong to " \
           f"bookie {other.bookie_id}, not to {a.bookie_id}" in err
    assert "give this bookie its own --data-dir" in err


def test_a_bookie_pointed_at_another_clusters_zookeeper_root_is_refused(
        cluster_factory, metadata_uri: str) -> None:
    c = cluster_factory(1)
    b = c.bookies[0]
    b.stop()
    msu = parse_metadata_service_uri(metadata_uri)
    other_uri = f"zk://{msu.hosts}/t-other-{uuid.uuid4().hex[:8]}"
    zk = connect_zk(parse_metadata_service_uri(other_uri))
    try:
        theirs = ensure_instance_id(zk, parse_metadata_service_uri(other_uri))
    finally:
        zk.stop()
        zk.close()
    err = start_refused(b, uri=other_uri)
    assert f"bookie {b.bookie_id} refuses to start (other_cluster)" in err
    assert f"is the cluster {theirs}" in err and "pointed at the wrong ZooKeeper" in err
    # nothing was written in the other cluster: no cookie of this bookie there
    r = bk("cookie", "list", "-m", other_uri, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["cookies"] == [], r.stderr
    b.start()  # its own cluster still takes it


def test_a_bookie_whose_address_changed_is_refused(cluster_factory, metadata_uri: str
                                                   ) -> None:
    c = cluster_factory(1)
    b = c.bookies[0]
    b.stop()
    new_port = free_port()
    err = start_refused(b, port=new_port)
    assert f"bookie 127.0.0.1:{new_port} refuses to start (bookie_id_changed)" in err
    assert f"belong to bookie {b.bookie_id}" in err
    assert f"`bk cookie delete {b.bookie_id} -m {metadata_uri} --yes`" in err


def test_cookie_list_show_delete_and_format_guards(cluster_factory, metadata_uri: str
                                                   ) -> None:
    c = cluster_factory(1)
    b = c.bookies[0]
    m = ("-m", metadata_uri)
    listed = json.loads(bk("cookie", "list", *m, "--json").stdout)
    assert [x["bookie"] for x in listed["cookies"]] == [b.bookie_id]
    assert listed["cookies"][0]["registered"] is True
    assert listed["cookies"][0]["instance_id"] == listed["instance_id"]
    shown = json.loads(bk("cookie", "show", b.bookie_id, *m, "--json").stdout)
    assert shown["ledger_dirs"] == [str((b.data_dir / "ledgers").absolute())]
    stamp = json.loads((b.data_dir / "journal" / "VERSION").read_text())
    assert {k: shown[k] for k in stamp} == stamp  # the stamp is the cookie
    # a running bookie: neither its cookie nor its directories go without --force
    r = bk("cookie", "delete", b.bookie_id, *m, "--yes")
    assert r.returncode == 1 and "is registered (running)" in r.stderr, r.stderr
    r = bk("bookie", "format", "--data-dir", str(b.data_dir), *m, "--yes")
    assert r.returncode == 1 and "refusing to format" in r.stderr
    assert "is registered (running)" in r.stderr and "ZooKeeper holds the cookie" in r.stderr
    b.stop()
    r = bk("cookie", "delete", b.bookie_id, *m)  # a script without --yes is not asked
    assert r.returncode == 1 and "pass --yes" in r.stderr
    assert bk("cookie", "delete", b.bookie_id, *m, "--yes").returncode == 0
    r = bk("cookie", "show", b.bookie_id, *m)
    assert r.returncode == 1 and "no cookie for bookie" in r.stderr
    # stamps and no cookie: the bookie refuses, and says how to start it new
    err = start_refused(b)
    assert "(cookie_missing)" in err and "bk bookie format --data-dir" in err
    assert bk("bookie", "format", "--data-dir", str(b.data_dir), *m, "--yes").returncode == 0
    b.start()
    assert bk("cookie", "show", b.bookie_id, *m).returncode == 0


def test_a_restarted_bookie_serves_its_data_on_its_stamped_directories(
        cluster_factory, metadata_uri: str) -> None:
    c = cluster_factory(1)
    b = c.bookies[0]
    lid = write_a_ledger(metadata_uri, 1)
    b.kill()
    b.start()
    with BookKeeper(metadata_uri) as client:
        rh = client.open_ledger(lid, password=b"p", recovery=False)
        assert [e.payload for e in rh.read_entries(0, 9)] == [f"e{i}".encode()
                                                              for i in range(10)]


def test_a_sandbox_restarts_on_its_directories_and_shows_why_a_wiped_bookie_refuses(
        tmp_path) -> None:
    """`bk sandbox start/stop` and start again (with `--bookie-port 0`: the bookie keeps its
    port) serve; a bookie whose directory was deleted refuses, and the sandbox says why."""
    sb = Sandbox(tmp_path / "sb", n_bookies=1, zk_port=free_port(), first_bookie_port=0,
                 bookie_args=["--on-lost-data", "refuse"])
    sb.start()
    port = sb.bookies[0].port
    sb.stop()
    again = Sandbox(tmp_path / "sb", n_bookies=1, zk_port=sb.zk_port, first_bookie_port=0,
                    bookie_args=["--on-lost-data", "refuse"])
    try:
        write_state(tmp_path / "sb", again.start())
        assert again.bookies[0].port == port
    finally:
        again.stop()
    again.bookies[0].drop_data()
    third = Sandbox(tmp_path / "sb", n_bookies=1, zk_port=sb.zk_port, first_bookie_port=0,
                    bookie_args=["--on-lost-data", "refuse"])
    with pytest.raises(SandboxError) as err:
        third.start()  # stops what it started when a bookie does not come up
    assert third.bookies[0].port == port  # the state file kept its address
    assert f"bookie 127.0.0.1:{port} did not start: bookie 127.0.0.1:{port} refuses to " \
           f"start (data_lost)" in str(err.value)


def test_an_added_empty_directory_is_accepted_and_the_cookie_restamped(
        cluster_factory, metadata_uri: str) -> None:
    """Storage expansion. A bookie's directories are fixed by its --data-dir, so the added
    directory is made the other way round: the cookie is rewritten as one from before the
    bookie used its (empty) ledgers directory. The bookie accepts the new directory, stamps
    it, and its cookie lists it again (a CAS: the znode's version moves on)."""
    c = cluster_factory(1)
    b = c.bookies[0]
    b.stop()
    msu = parse_metadata_service_uri(metadata_uri)
    zk = connect_zk(msu)
    try:
        store = CookieStore(zk, msu)
        before = store.update(b.bookie_id, needs_change=lambda _c: True,
                              make_change=lambda c: replace(c, ledger_dirs=()))
        ledgers = b.data_dir / "ledgers"
        shutil.rmtree(ledgers)  # it held nothing: no ledger was written
        (b.data_dir / "journal" / "VERSION").write_bytes(before.value.to_bytes())
        b.start()
        after = store.read(b.bookie_id)
    finally:
        zk.stop()
        zk.close()
    assert after.value.ledger_dirs == (str(ledgers.absolute()),)
    assert after.version == before.version + 1
    assert json.loads((ledgers / "VERSION").read_text()) == after.value.to_dict()
    write_a_ledger(metadata_uri, 1)  # and it serves
