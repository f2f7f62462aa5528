"""Reading a ledger: batched reads with failover, LAC reads and long-poll tailing.

* Reads go to a bookie of the entry's write set and fail over to the next one
  on an error, a timeout, a missing entry or a bad digest; a corrupt copy is
  skipped and a read with no good copy raises (bookkeeper-protocol.txt).
* Many entries travel per request: one ``ReadEntries`` per bookie per batch.
* A non-fencing open reads only up to the last-add-confirmed (LAC): everything
  up to it is on Qa bookies, so every reader sees the same prefix. How the LAC is read
  (with quorum coverage, or best effort for tailing) is :mod:`bk_spark.core.lac`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future

import numpy as np

from bk_spark.core.context import ClientContext
from bk_spark.core.lac import BEST_EFFORT, COVERAGE, LacRead, read_lac
from bk_spark.errors import (
    BKError,
    BookieUnavailableError,
    NoSuchEntryError,
    ReadPastLacError,
    UnauthorizedError,
)
from bk_spark.io.entry import EntryCodec, LedgerEntry
from bk_spark.io.metadata_store import Versioned
from bk_spark.proto import bookie_pb2 as pb
from bk_spark.protocol.answers import NEGATIVE_ANSWERS
from bk_spark.protocol.ledger_metadata import LedgerMetadata, LedgerState
from bk_spark.protocol.read_plan import ReadPlan, failure_of
from bk_spark.protocol.records import Records

__all__ = ["FetchedEntries", "ReadHandle", "fetch_entries", "read_lac"]


class FetchedEntries:
    """The verified entries of one :func:`fetch_entries`, ascending entry id, as columns over
    the bookies' answers (:class:`~bk_spark.protocol.records.Records`, one per answer): no
    object per entry until one is asked for.

    ``entry_ids`` are the ids, ascending; entry ``entry_ids[i]`` is record ``row_of[i]`` of
    answer ``pieces[piece_of[i]]`` (bulk decoders work on those columns); :meth:`payloads`
    gives the payloads in id order (views, no copy) and ``fetched[e]`` one entry as a
    ``pb.Entry`` (callers that re-send entries)."""

    def __init__(self, ledger_id: int, pieces: list[Records]) -> None:
        self.ledger_id = ledger_id
        self.pieces = pieces
        if pieces:
            ids = np.concatenate([p.entry_ids for p in pieces])
            order = np.argsort(ids, kind="stable")
            self.piece_of: np.ndarray = np.concatenate(
                [np.full(len(p), k, dtype=np.int64) for k, p in enumerate(pieces)])[order]
            self.row_of: np.ndarray = np.concatenate(
                [np.arange(len(p), dtype=np.int64) for p in pieces])[order]
            self.entry_ids: np.ndarray = ids[order]
        else:
            self.entry_ids = self.piece_of = self.row_of = np.zeros(0, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.entry_ids)

    @property
    def nbytes(self) -> int:
        """Payload bytes of all the entries."""
        return int(sum(int(p.payload_lengths.sum()) for p in self.pieces))

    def payloads(self) -> list[memoryview]:
        """Every payload, ascending entry id (views into the answers)."""
        views = [memoryview(p.data) for p in self.pieces]
        starts = [p.payload_starts.tolist() for p in self.pieces]
        ends = [p.payload_ends.tolist() for p in self.pieces]
        return [views[k][starts[k][i]:ends[k][i]]
                for k, i in zip(self.piece_of.tolist(), self.row_of.tolist(), strict=True)]

    def _at(self, entry_id: int) -> tuple[Records, int]:
        i = int(np.searchsorted(self.entry_ids, entry_id))
        if i >= len(self.entry_ids) or int(self.entry_ids[i]) != entry_id:
            raise KeyError(entry_id)
        return self.pieces[int(self.piece_of[i])], int(self.row_of[i])

    def __contains__(self, entry_id: object) -> bool:
        try:
            self._at(entry_id)  # type: ignore[arg-type]
        except (KeyError, TypeError):
            return False
        return True

    def __getitem__(self, entry_id: int) -> pb.Entry:
        r, i = self._at(entry_id)
        d = r.data
        ds, ps, pe = int(r.digest_starts[i]), int(r.payload_starts[i]), int(r.payload_ends[i])
        return pb.Entry(ledger_id=int(r.ledger_ids[i]), entry_id=entry_id, lac=int(r.lacs[i]),
                        payload=d[ps:pe], digest=d[ds:ps])


def fetch_entries(bk: ClientContext, md: LedgerMetadata, codec: EntryCodec,
                  entry_ids: Sequence[int], master_key: bytes) -> FetchedEntries:
    """Read ``entry_ids`` (verified) from their write sets, failing over per entry.

    Each entry is asked of the bookies of its write set in turn (one packed ``ReadEntries``
    per bookie for up to ``PACKED_READ_BATCH`` of the entries it is asked for, all sent at
    once: entries are striped over the ensemble, so every bookie serves a share), moving to
    the next copy on an error, a missing entry or a bad digest, so a dead bookie costs one
    fast failure. When every copy of an entry failed and some failed only because their
    bookie was unreachable, those copies are asked again while the read timeout lasts, this
    time waiting for the connection (a bookie restarting, a channel in reconnect backoff, a
    slow handshake), each with an equal share of the time left: a live bookie is never
    declared unable to serve before the operation's own timeout. Errors carry every copy's
    reason.

    Every request carries the ledger's ``master_key``: bookies refuse reads without it. A
    wrong key is refused by every bookie alike, so it raises at once (no fail-over).

    Answers are checked as columns (:meth:`EntryCodec.verify_records`): the entries that
    come back good cost no Python object each; only failures are handled entry by entry.
    """
    plan = ReadPlan(md.ledger_id, md.ensembles, md.write_quorum_size, entry_ids)
    deadline = time.monotonic() + bk.config.client.read_timeout_s
    pieces: list[Records] = []
    while not plan.finished():
        asks = plan.next_asks(time_left=time.monotonic() < deadline)
        calls = bk.bookies.scatter_reads(
            md.ledger_id, master_key, asks, bookie=lambda key: key[0],
            timeout=lambda key: (max(0.05, (deadline - time.monotonic()) / key[1])
                                 if key[1] > 0 else None), packed=True)
        for (bookie, _shares), chunk, call in calls:
            asked = plan.positions(chunk)
            try:
                answer = call.result()
            except NEGATIVE_ANSWERS as exc:
                plan.failed(asked.tolist(), failure_of(exc, False), f"{bookie}: no such ledger")
                continue
            except UnauthorizedError as exc:  # every bookie refuses a wrong key alike
                raise UnauthorizedError(f"ledger {md.ledger_id}: {exc}") from None
            except BKError as exc:
                plan.failed(asked.tolist(),
                            failure_of(exc, isinstance(exc, BookieUnavailableError)),
                            f"{bookie}: {exc}")
                continue
            r = answer.records
            good = plan.on_records(
                asked, r.entry_ids, codec.verify_records(r),
                f"{bookie}: {codec.digest.digest_type} digest mismatch (corrupt or foreign "
                f"copy): read it from another bookie of its write quorum")
            if bool(good.any()):
                pieces.append(r if bool(good.all()) else r.take(good))
            plan.on_missing(asked, answer.missing, f"{bookie}: no such entry")
    return FetchedEntries(md.ledger_id, pieces)


#: Payload bytes one fetch of :meth:`ReadHandle.iter_batches` aims at, and its most entries
#: (one packed request per bookie of a 3-bookie ensemble).
FETCH_TARGET_BYTES = 16 << 20
FETCH_MAX_ENTRIES = 8192


class ReadHandle:
    """A ledger opened for reading: closed/recovered, or open without fencing."""

    def __init__(self, bk: ClientContext, md: Versioned[LedgerMetadata], codec: EntryCodec,
                 master_key: bytes) -> None:
        self._bk = bk
        self._md = md
        self._codec = codec
        self._master_key = master_key
        self.id = md.value.ledger_id
        m = md.value
        self._lac = m.last_entry_id if m.state == LedgerState.CLOSED else -1
        self._lock = threading.Lock()

    @property
    def metadata(self) -> LedgerMetadata:
        return self._md.value

    @property
    def versioned_metadata(self) -> Versioned[LedgerMetadata]:
        """The metadata as last read, with its store version (for
        :meth:`BookKeeper.open_ledger`'s ``metadata``: a planner hands it to a task)."""
        return self._md

    @property
    def is_closed(self) -> bool:
        return self._md.value.state == LedgerState.CLOSED

    @property
    def last_add_confirmed(self) -> int:
        """The highest entry id known to be readable (the last entry once closed)."""
        return self._lac

    @property
    def length(self) -> int:
        return self._md.value.length

    def confirmed_up_to(self, entry_id: int) -> None:
        """The caller knows entries up to ``entry_id`` are confirmed (a LAC it read
        before, e.g. a planner's): the LAC rises to it without asking the bookies. Only
        ever a LAC some reader was told (any LAC a bookie reports is confirmed)."""
        with self._lock:
            if entry_id > self._lac:
                self._lac = entry_id

    def read_entries(self, first: int, last: int) -> list[LedgerEntry]:
        """Entries ``first..last`` inclusive, in order (one batched fetch per bookie)."""
        return list(self.iter_entries(first, last))

    def iter_entries(self, first: int, last: int, batch_size: int = FETCH_MAX_ENTRIES
                     ) -> Iterator[LedgerEntry]:
        """Stream entries ``first..last`` in batches; reading past the LAC raises."""
        lid = self.id
        for got in self.iter_batches(first, last, max_entries=batch_size):
            for e, payload in zip(got.entry_ids.tolist(), got.payloads(), strict=True):
                yield LedgerEntry(lid, e, bytes(payload))

    def iter_batches(self, first: int, last: int, *, target_bytes: int = FETCH_TARGET_BYTES,
                     max_entries: int = FETCH_MAX_ENTRIES) -> Iterator[FetchedEntries]:
        """Entries ``first..last`` (verified, in order) as :class:`FetchedEntries` batches of
        about ``target_bytes`` of payload (at most ``max_entries`` entries), the next batch
        fetched on a thread while the caller works on the current one, so fetching and
        decoding overlap. Batches are sized from the entry size: a closed ledger's length
        over its entries, else the size seen in the previous batch (the first of a ledger
        whose size is unknown is small, and whole); the first batch of a known size is a
        quarter of the others, so the caller's work starts sooner. Reading past the LAC raises."""
        self._check_range(first, last)
        md = self._md.value
        floor = md.ensemble_size  # at least one entry per bookie of the ensemble
        size = md.length / (md.last_entry_id + 1) if \
            self.is_closed and md.length > 0 and md.last_entry_id >= 0 else None

        def count(entry_bytes: float | None) -> int:
            if entry_bytes is None:
                return min(max_entries, floor * 4)
            return max(1, min(max_entries, max(floor, int(target_bytes // max(1.0,
                                                                             entry_bytes)))))

        def fetch(lo: int, hi: int) -> FetchedEntries:
            return fetch_entries(self._bk, md, self._codec, range(lo, hi + 1),
                                 self._master_key)

        # the first fetch is small (a quarter of the target): the caller starts sooner;
        # entries of unknown size are fetched a full (small) batch first, so that the few
        # entries of a streaming micro-batch's slice are one fetch on this thread, not a
        # fetch of one per bookie and another for the rest on a thread of the pool
        hi = min(first + (count(size) if size is None else max(floor, count(size) // 4)) - 1,
                 last)
        if hi == last:  # one batch: no thread
            yield fetch(first, last)
            return
        # The read-ahead runs on the client's wait pool (core/client_threads.py): no
        # thread of its own, and a reader that stops early leaves none behind.
        submit = self._bk.threads.submit_wait
        pending: Future[FetchedEntries] | None = submit(fetch, first, hi)
        try:
            while pending is not None:
                got = pending.result()
                nxt, pending = hi + 1, None
                if nxt <= last:
                    if len(got):
                        size = got.nbytes / len(got)
                    hi = min(nxt + count(size) - 1, last)
                    pending = submit(fetch, nxt, hi)
                yield got
        finally:
            if pending is not None:
                pending.cancel()

    def _check_range(self, first: int, last: int) -> None:
        if first < 0 or last < first:
            raise NoSuchEntryError(f"ledger {self.id}: bad entry range {first}..{last}")
        if last > self._lac:
            if self.is_closed:
                raise NoSuchEntryError(f"ledger {self.id} is closed at entry {self._lac}; "
                                       f"entry {last} does not exist")
            raise ReadPastLacError(
                f"ledger {self.id} is open and its last-add-confirmed is {self._lac}: entry "
                f"{last} may not be replicated yet (read_last_add_confirmed / "
                f"wait_for_entry first)")

    def refresh_metadata(self) -> LedgerMetadata:
        """Re-read the metadata (a tailer notices a close this way)."""
        md = self._bk.metadata_store.read(self.id)
        with self._lock:
            self._md = md
            if md.value.state == LedgerState.CLOSED:
                self._lac = md.value.last_entry_id
        return md.value

    def read_last_add_confirmed(self) -> int:
        """Ask the bookies of the last fragment for their LAC; returns the new LAC.

        BookKeeper's ``readLastAddConfirmed``: the answers must cover every write quorum
        (:data:`bk_spark.core.lac.COVERAGE`), so the LAC is at least the one the last
        acknowledged entry carried; raises :class:`BookieUnavailableError` when too many
        bookies cannot answer."""
        if self.is_closed:
            return self._lac
        return self._poll_lac(wait_ms=0)

    def try_read_last_add_confirmed(self) -> int:
        """BookKeeper's ``tryReadLastAddConfirmed``: the highest LAC of whatever bookies of
        the last fragment answer (:data:`bk_spark.core.lac.BEST_EFFORT`), never lower than
        this handle already knew. Possibly stale: a later entry may be confirmed on bookies
        that did not answer (use :meth:`read_last_add_confirmed` for a LAC at least the
        last acknowledged entry's). Works with most bookies down (E3/Qw1/Qa1 with two
        down: the live one's LAC). Raises :class:`BookieUnavailableError` only when no
        bookie answered."""
        if self.is_closed:
            return self._lac
        return self._poll_lac(wait_ms=0, how=BEST_EFFORT)

    def wait_for_entry(self, entry_id: int, timeout: float) -> bool:
        """Long-poll until ``entry_id`` is confirmed (or the ledger closed); True if readable.

        Tailing needs no quorum coverage: any LAC a bookie reports is confirmed, so each
        round is a best-effort long poll (:meth:`try_read_last_add_confirmed`) and a
        tailing reader goes on while bookies are down, as long as one of the last
        fragment answers. A round no bookie answered is retried until ``timeout``; if no
        bookie answered any round, raises :class:`BookieUnavailableError`."""
        deadline = time.monotonic() + timeout
        unanswered: BookieUnavailableError | None = None
        while self._lac < entry_id:
            if self.is_closed:
                return False
            left = deadline - time.monotonic()
            if left <= 0:
                if unanswered is not None:
                    raise unanswered
                return False
            try:
                self._poll_lac(wait_ms=max(1, int(min(left, 5.0) * 1000)), how=BEST_EFFORT)
                unanswered = None
            except BookieUnavailableError as exc:
                unanswered = exc
                time.sleep(min(max(0.0, deadline - time.monotonic()), 0.2))
                continue
            if self._lac < entry_id and self.refresh_metadata().state == LedgerState.CLOSED:
                return self._lac >= entry_id
        return True

    def _poll_lac(self, wait_ms: int, how: LacRead = COVERAGE) -> int:
        """BookKeeper's ``ReadLastConfirmedOp``: ask every bookie of the last fragment for
        its LAC and take the highest; the LAC only rises.

        With :data:`~bk_spark.core.lac.COVERAGE` a round counts once the answers cover every
        write quorum ((Qw - Qa) + 1 bookies of each). Then at least one answer comes from a
        bookie holding the last acknowledged entry, so the LAC is at least the one that
        entry carried: every reader sees the same confirmed prefix. With
        :data:`~bk_spark.core.lac.BEST_EFFORT` (``tryReadLastAddConfirmed``) any answer
        counts: what the live bookies know, possibly stale.

        A long poll (``wait_ms`` > 0) returns as soon as one bookie reports a higher LAC
        (any LAC a bookie reports is confirmed), or once a round waited with no news.
        Raises BookieUnavailableError when the round does not count (too many bookies
        unreachable or silent within the read timeout), after re-reading the metadata once
        in case the writer replaced them: "nothing new" is never an unreachable cluster.
        """
        previous = self._lac
        for _ in range(2):
            m = self._md.value
            best, got = read_lac(self._bk, m, previous, wait_ms, how)
            with self._lock:
                if best > self._lac:
                    self._lac = best
            counts = bool(got.responses) if how.best_effort else got.covered
            if counts or (wait_ms > 0 and best > previous):
                return self._lac
            fresh = self.refresh_metadata()
            if fresh.state == LedgerState.CLOSED or fresh.last_ensemble == m.last_ensemble:
                break
        if self.is_closed:
            return self._lac
        if how.best_effort:
            raise BookieUnavailableError(
                f"ledger {self.id}: no bookie of its last fragment {list(m.last_ensemble)} "
                f"answered a last-add-confirmed read: {got.describe_errors(m.last_ensemble)}; "
                f"retry when bookies are back")
        raise BookieUnavailableError(
            f"ledger {self.id}: could not read its last-add-confirmed from enough bookies "
            f"((Qw - Qa) + 1 of every write quorum of {list(m.last_ensemble)}): "
            f"{got.describe_errors(m.last_ensemble)}; retry when bookies are back, or use "
            f"try_read_last_add_confirmed() for what the live bookies know")

    def close(self) -> None:
        """Nothing to release; present for symmetry with the writer's handle."""

    def __enter__(self) -> ReadHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
