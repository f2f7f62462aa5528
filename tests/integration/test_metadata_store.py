"""The ledger metadata store against a real ZooKeeper: ids, CAS conflicts, listing."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from bk_spark.errors import (
    LedgerStateError,
    MetadataVersionError,
    NoSuchLedgerError,
)
from bk_spark.io.metadata_store import LedgerMetadataStore, Versioned, ledger_path
from bk_spark.io.zk import connect_zk
from bk_spark.metadata_uri import MetadataServiceUri, parse_metadata_service_uri
from bk_spark.protocol.ledger_metadata import LedgerMetadata, LedgerState

ENSEMBLE = ("127.0.0.1:3181", "127.0.0.1:3182", "127.0.0.1:3183")


@pytest.fixture
def msu(metadata_uri: str) -> MetadataServiceUri:
    return parse_metadata_service_uri(metadata_uri)


@pytest.fixture
def clients(msu: MetadataServiceUri) -> Iterator[list[KazooClient]]:
    """Two independent ZooKeeper sessions (two bk-spark clients)."""
    made = [connect_zk(msu), connect_zk(msu)]
    yield made
    for zk in made:
        zk.stop()
        zk.close()


@pytest.fixture
def stores(clients: list[KazooClient], msu: MetadataServiceUri) -> list[LedgerMetadataStore]:
    return [LedgerMetadataStore(zk, msu.root) for zk in clients]


def new_ledger(ledger_id: int) -> LedgerMetadata:
    return LedgerMetadata.new(ledger_id, ENSEMBLE, write_quorum_size=2, ack_quorum_size=2)


def test_create_gives_unique_increasing_ids_across_clients(stores):
    a, b = stores
    ids = [s.create(new_ledger).value.ledger_id for _ in range(10) for s in (a, b)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    for ledger_id in ids:
        assert a.read(ledger_id) == b.read(ledger_id)


def test_id_helper_znodes_are_deleted_after_use(stores, clients, msu):
    stores[0].create(new_ledger)
    zk = clients[0]
    generations = zk.get_children(f"{msu.root}/idgen")
    assert generations == ["0000000000"]
    assert zk.get_children(f"{msu.root}/idgen/0000000000") == []


def test_ids_stay_unique_and_increasing_when_the_sequence_counter_runs_out(clients, msu):
    class TinyIdSpace(LedgerMetadataStore):
        ID_LOW_BITS = 3  # a generation holds sequence numbers 0..7 (as 2^31 normally)

    a, b = (TinyIdSpace(zk, msu.root) for zk in clients)
    ids = [s.create(new_ledger).value.ledger_id for _ in range(12) for s in (a, b)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert len({i >> 3 for i in ids}) >= 3  # 24 ids, at most 8 per generation
    assert sorted(a.list_ledgers()) == ids


def test_read_returns_the_metadata_and_its_version(stores):
    created = stores[0].create(new_ledger)
    assert created.version == 0
    assert stores[1].read(created.value.ledger_id) == created


def test_reading_a_missing_ledger_raises_no_such_ledger(stores):
    with pytest.raises(NoSuchLedgerError, match="ledger 123 does not exist"):
        stores[0].read(123)
    with pytest.raises(NoSuchLedgerError):
        stores[0].write(new_ledger(123), 0)
    assert not stores[0].exists(123)


def test_a_write_with_a_stale_version_is_a_metadata_version_error(stores):
    a, b = stores
    created = a.create(new_ledger)
    md = created.value
    b.write(md.with_state(LedgerState.IN_RECOVERY), created.version)
    with pytest.raises(MetadataVersionError, match="changed since version 0"):
        a.write(md.closed(3, 30), created.version)
    assert a.read(md.ledger_id).value.state == LedgerState.IN_RECOVERY


def test_two_concurrent_closers_converge_on_one_close(stores):
    """Both read version 0; one CAS wins; the loser re-reads and sees the ledger closed."""
    a, b = stores
    created = a.create(new_ledger)
    ledger_id = created.value.ledger_id
    closed_by_a = a.update(
        ledger_id, lambda md: not md.is_closed, lambda md: md.closed(11, 1100), current=created
    )
    closed_by_b = b.update(
        ledger_id, lambda md: not md.is_closed, lambda md: md.closed(11, 1100), current=created
    )
    assert closed_by_b == closed_by_a == a.read(ledger_id)
    assert closed_by_a.version == 1  # a single write happened
    assert closed_by_b.value.last_entry_id == 11


def test_a_writers_ensemble_change_loses_to_a_recoverer_and_aborts(stores):
    """Writer (a) and recoverer (b) both hold version 0; recovery's IN_RECOVERY wins."""
    writer, recoverer = stores
    created = writer.create(new_ledger)
    ledger_id = created.value.ledger_id
    recoverer.update(
        ledger_id,
        lambda md: md.state == LedgerState.OPEN,
        lambda md: md.with_state(LedgerState.IN_RECOVERY),
    )

    attempts = []

    def change_ensemble(md: LedgerMetadata) -> LedgerMetadata:
        attempts.append(md.state)
        if md.state != LedgerState.OPEN:
            raise LedgerStateError(f"ledger {md.ledger_id} is {md.state}: stop writing")
        return md.with_ensemble_change(5, ("127.0.0.1:3184",) + ENSEMBLE[1:])

    with pytest.raises(LedgerStateError, match="stop writing"):
        writer.update(ledger_id, lambda md: True, change_ensemble, current=created)
    assert attempts == [LedgerState.OPEN, LedgerState.IN_RECOVERY]  # re-read, then decided
    after = writer.read(ledger_id)
    assert after.version == 1 and after.value.ensembles == ((0, ENSEMBLE),)


def test_update_writes_nothing_when_no_change_is_needed(stores):
    created = stores[0].create(new_ledger)
    result = stores[0].update(
        created.value.ledger_id,
        lambda md: False,
        lambda md: pytest.fail("make_change must not run"),
    )
    assert result == created
    assert stores[1].read(created.value.ledger_id).version == 0


def test_make_change_raising_aborts_the_update_without_writing(stores):
    created = stores[0].create(new_ledger)
    closed = stores[0].write(created.value.closed(-1, 0), created.version)
    with pytest.raises(LedgerStateError):
        stores[0].update(
            created.value.ledger_id,
            lambda md: True,
            lambda md: md.with_state(LedgerState.IN_RECOVERY),
        )
    assert stores[1].read(created.value.ledger_id) == closed


def test_concurrent_updates_from_two_clients_lose_no_change(stores):
    """Every increment goes through the CAS loop; conflicts are re-read, never lost."""
    a, b = stores
    ledger_id = a.create(new_ledger).value.ledger_id
    per_thread = 15

    def increment(md: LedgerMetadata) -> LedgerMetadata:
        n = int(dict(md.custom_metadata).get("n", "0"))
        return md.with_custom_metadata({"n": str(n + 1)})

    def worker(store: LedgerMetadataStore) -> None:
        for _ in range(per_thread):
            store.update(ledger_id, lambda md: True, increment)

    threads = [threading.Thread(target=worker, args=(s,)) for s in (a, b, a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    final = a.read(ledger_id)
    assert dict(final.value.custom_metadata)["n"] == str(4 * per_thread)
    assert final.version == 4 * per_thread


def test_delete_removes_the_ledger_and_checks_the_version(stores):
    created = stores[0].create(new_ledger)
    ledger_id = created.value.ledger_id
    updated = stores[0].write(created.value.closed(-1, 0), created.version)
    with pytest.raises(MetadataVersionError):
        stores[1].delete(ledger_id, version=created.version)
    stores[1].delete(ledger_id, version=updated.version)
    assert not stores[0].exists(ledger_id)
    assert list(stores[0].list_ledgers()) == []
    with pytest.raises(NoSuchLedgerError):
        stores[0].delete(ledger_id)


def test_watch_reports_each_change_and_the_deletion(stores):
    created = stores[0].create(new_ledger)
    ledger_id = created.value.ledger_id
    seen: list[Versioned[LedgerMetadata] | None] = []
    changed = threading.Condition()

    def on_change(v: Versioned[LedgerMetadata] | None) -> None:
        with changed:
            seen.append(v)
            changed.notify_all()

    def wait_for(n: int) -> None:
        with changed:
            assert changed.wait_for(lambda: len(seen) >= n, timeout=5)

    stop = stores[0].watch(ledger_id, on_change)
    wait_for(1)
    closed = stores[1].write(created.value.closed(4, 40), 0)
    wait_for(2)
    stores[1].delete(ledger_id)
    wait_for(3)
    stop()
    assert seen == [created, closed, None]


def test_list_walks_every_bucket_in_ascending_order(stores, clients, msu):
    """A few thousand ledgers spread over many buckets, from 0 up to ids near 2^63."""
    zk = clients[0]
    ids = sorted(
        {100 + i * 7 for i in range(3000)}  # leaf buckets 0000 .. 0002
        | {10_000 * k + 3 for k in range(0, 60, 3)}  # many leaf buckets
        | {(1 << 40) + 5, (1 << 62) + 1, (1 << 63) - 1}
    )  # upper levels
    data = new_ledger(0).to_bytes()
    paths = [ledger_path(msu.root, i) for i in ids]
    for parent in sorted({p.rsplit("/", 1)[0] for p in paths}):
        zk.ensure_path(parent)
    for start in range(0, len(paths), 500):  # multi-op transactions: fast to set up
        tx = zk.transaction()
        for path in paths[start : start + 500]:
            tx.create(path, data)
        results = tx.commit()
        assert not [r for r in results if isinstance(r, Exception)]
    created = stores[1].create(new_ledger).value.ledger_id  # the first id (0) is free
    listed = list(stores[1].list_ledgers())
    assert listed == sorted({*ids, created})


def test_a_hundred_thousand_ledgers_never_put_more_than_ten_thousand_children_in_a_znode():
    parents = Counter(ledger_path("/ledgers", i).rsplit("/", 1)[0] for i in range(100_000))
    assert max(parents.values()) <= 10_000
    # The deepest level above the leaves stays small too.
    grandparents = {p.rsplit("/", 1)[0] for p in parents}
    assert len(grandparents) == 1 and len(parents) == 10
    assert ledger_path("/ledgers", (1 << 63) - 1) == "/ledgers/ledgers/922/3372/0368/5477/L5807"


def test_a_log_cas_with_conditions_on_other_znodes_writes_all_or_nothing(clients, msu):
    """LogMetadataStore.write's also_check / also_delete (a roll claiming its spare in the
    CAS that lists it): all in one transaction; a failed condition writes nothing and is
    told apart from a changed log (which the CAS loop re-reads)."""
    from bk_spark.io.log_store import LogMetadataStore
    from bk_spark.protocol.log_format import LogMetadata

    zk = clients[0]
    logs = LogMetadataStore(zk, msu.root)
    v0 = logs.create("claims", LogMetadata(ctime_ms=1))
    base = f"{msu.root}/claims-test"
    zk.ensure_path(base)
    zk.create(f"{base}/spare", b"x")  # version 0
    zk.create(f"{base}/record", b"")
    one = v0.value.with_ledger_added(11, 5)

    zk.set(f"{base}/spare", b"recovered")  # version 1: the check fails
    with pytest.raises(LedgerStateError, match="spare changed or is gone"):
        logs.write("claims", one, v0.version, also_check=[(f"{base}/spare", 0)],
                   also_delete=[f"{base}/record"])
    assert logs.read("claims") == v0 and zk.exists(f"{base}/record") is not None

    written = logs.write("claims", one, v0.version, also_check=[(f"{base}/spare", 1)],
                         also_delete=[f"{base}/record"])
    assert logs.read("claims") == written and zk.exists(f"{base}/record") is None

    two = written.value.with_ledger_added(12, 6)
    with pytest.raises(LedgerStateError, match="record changed or is gone"):  # swept
        logs.write("claims", two, written.version, also_delete=[f"{base}/record"])
    # The log changed since: reported as a conflict first (a CAS of ours that landed
    # before a connection loss is re-read and found done, never taken for a lost claim).
    with pytest.raises(MetadataVersionError):
        logs.write("claims", two, v0.version, also_delete=[f"{base}/record"])
    assert logs.read("claims") == written
    zk.delete(base, recursive=True)
    logs.delete_tree("claims")
