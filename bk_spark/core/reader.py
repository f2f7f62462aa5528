"""Reading a ledger: batched reads with failover, LAC reads and long-poll tailing.

* Reads go to a bookie of the entry's write set and fail over to the next one
  on an error, a timeout, a missing entry or a bad digest; a corrupt copy is
  skipped and a read with no good copy raises (bookkeeper-protocol.txt).
* Many entries travel per request: one ``ReadEntries`` per bookie per batch.
* A non-fencing open reads only up to the last-add-confirmed (LAC): everything
  up to it is on Qa bookies, so every reader sees the same prefix.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence

from bk_spark.core.context import ClientContext
from bk_spark.core.recovery import FragmentAnswers, ask_last_fragment
from bk_spark.errors import (
    BKError,
    BookieUnavailableError,
    DigestMismatchError,
    NoSuchEntryError,
    NoSuchLedgerError,
    ReadPastLacError,
    UnauthorizedError,
)
from bk_spark.io.bookie_client import READ_BATCH
from bk_spark.io.entry import EntryCodec, LedgerEntry
from bk_spark.io.metadata_store import Versioned
from bk_spark.proto import bookie_pb2 as pb
from bk_spark.protocol.ledger_metadata import LedgerMetadata, LedgerState
from bk_spark.protocol.schedule import write_set


def fetch_entries(bk: ClientContext, md: LedgerMetadata, codec: EntryCodec,
                  entry_ids: Sequence[int], master_key: bytes) -> dict[int, pb.Entry]:
    """Read ``entry_ids`` (verified) from their write sets, failing over per entry.

    Each entry is asked of the bookies of its write set in turn (one ``ReadEntries`` per
    bookie for all the entries it is asked for), moving to the next copy on an error, a
    missing entry or a bad digest, so a dead bookie costs one fast failure. When every
    copy of an entry failed and some failed only because their bookie was unreachable,
    those copies are asked again while the read timeout lasts, this time waiting for the
    connection (a bookie restarting, a channel in reconnect backoff, a slow handshake),
    each with an equal share of the time left: a live bookie is never declared unable to
    serve before the operation's own timeout. Errors carry every copy's reason.

    Every request carries the ledger's ``master_key``: bookies refuse reads without it. A
    wrong key is refused by every bookie alike, so it raises at once (no fail-over).
    """
    E, Qw = md.ensemble_size, md.write_quorum_size
    deadline = time.monotonic() + bk.config.client.read_timeout_s
    attempt = dict.fromkeys(entry_ids, 0)
    # the copies (write-set positions) still to ask, once the first pass found no good copy
    patient: dict[int, list[int]] = {}
    unreachable: dict[int, list[int]] = defaultdict(list)
    problems: dict[int, list[str]] = defaultdict(list)
    out: dict[int, pb.Entry] = {}
    while attempt:
        groups: dict[tuple[str, int], list[int]] = defaultdict(list)
        for e, a in attempt.items():
            copies = patient.get(e)
            if a >= (Qw if copies is None else len(copies)):
                if copies is None and unreachable[e] and time.monotonic() < deadline:
                    copies = patient[e] = unreachable.pop(e)
                    a = attempt[e] = 0
                else:
                    raise _no_good_copy(md.ledger_id, e, problems[e])
            ws = write_set(e, E, Qw)
            if copies is None:
                groups[(md.ensemble_for(e)[ws[a]], -1)].append(e)
            else:  # second pass: wait for the connection, a share of the time left each
                groups[(md.ensemble_for(e)[ws[copies[a]]], len(copies) - a)].append(e)
        calls = bk.bookies.scatter_reads(
            md.ledger_id, master_key, groups, bookie=lambda key: key[0],
            timeout=lambda key: (max(0.05, (deadline - time.monotonic()) / key[1])
                                 if key[1] > 0 else None))
        for (bookie, _shares), chunk, call in calls:
            try:
                resp = call.result()
            except NoSuchLedgerError:
                for e in chunk:
                    problems[e].append(f"{bookie}: no such ledger")
                    attempt[e] += 1
                continue
            except UnauthorizedError as exc:
                raise UnauthorizedError(f"ledger {md.ledger_id}: {exc}") from None
            except BKError as exc:
                for e in chunk:
                    problems[e].append(f"{bookie}: {exc}")
                    if isinstance(exc, BookieUnavailableError) and e not in patient:
                        unreachable[e].append(attempt[e])
                    attempt[e] += 1
                continue
            for ent in resp.entries:
                if ent.entry_id not in attempt:
                    continue
                try:
                    codec.verify(ent)
                except DigestMismatchError as exc:
                    problems[ent.entry_id].append(f"{bookie}: {exc}")
                    attempt[ent.entry_id] += 1
                    continue
                out[ent.entry_id] = ent
                del attempt[ent.entry_id]
            for e in resp.missing:
                if e in attempt:
                    problems[e].append(f"{bookie}: no such entry")
                    attempt[e] += 1
            # ids neither found nor missing were cut by the bookie's size limit: ask again
    return out


def _no_good_copy(ledger_id: int, entry_id: int, problems: list[str]) -> BKError:
    detail = "; ".join(problems)
    if problems and all("digest" in p for p in problems):
        return DigestMismatchError(f"entry {entry_id} of ledger {ledger_id}: every copy is "
                                   f"corrupt ({detail})")
    if problems and all("no such" in p for p in problems):
        return NoSuchEntryError(f"entry {entry_id} of ledger {ledger_id} is on no bookie of "
                                f"its write set ({detail})")
    return BookieUnavailableError(f"entry {entry_id} of ledger {ledger_id}: no bookie of its "
                                  f"write set could serve it ({detail})")


def read_lac(bk: ClientContext, m: LedgerMetadata, previous: int = -1, wait_ms: int = 0
             ) -> tuple[int, FragmentAnswers]:
    """One round of ClientContext's ``ReadLastConfirmedOp`` on the last fragment of ``m``:
    the highest LAC the bookies report (-1: none) and the answers, whose ``covered`` says
    whether (Qw - Qa) + 1 bookies of every write quorum answered (only then is the LAC at
    least the one the last acknowledged entry carried). A bookie that never saw the ledger
    answers LAC -1. ``wait_ms`` > 0 long-polls: the round ends as soon as one bookie
    reports more than ``previous``. Needs no password: a LAC carries no entry data."""
    get = bk.bookies.get
    got = ask_last_fragment(
        m, lambda b: get(b).read_lac_future(m.ledger_id, previous, wait_ms,
                                            wait_for_ready=True),
        timeout=bk.config.client.read_timeout_s + wait_ms / 1000.0 + 1,
        counts_as_answer=(NoSuchLedgerError,),
        stop_when=(lambda r: r.lac > previous) if wait_ms > 0 else None)
    best = max((r.lac for r in got.responses.values() if r is not None), default=-1)
    return best, got


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
    def is_closed(self) -> bool:
        return self._md.value.state == LedgerState.CLOSED

    @property
    def last_add_confirmed(self) -> int:
        """The highest entry id known to be readable (the last entry once closed)."""
        return self._lac

    @property
    def length(self) -> int:
        return self._md.value.length

    def read_entries(self, first: int, last: int) -> list[LedgerEntry]:
        """Entries ``first..last`` inclusive, in order (one batched fetch per bookie)."""
        return list(self.iter_entries(first, last))

    def iter_entries(self, first: int, last: int, batch_size: int = 4 * READ_BATCH
                     ) -> Iterator[LedgerEntry]:
        """Stream entries ``first..last`` in batches; reading past the LAC raises."""
        self._check_range(first, last)
        lid = self.id
        for lo in range(first, last + 1, batch_size):
            hi = min(lo + batch_size - 1, last)
            got = fetch_entries(self._bk, self._md.value, self._codec, range(lo, hi + 1),
                                self._master_key)
            for e in range(lo, hi + 1):
                yield LedgerEntry(lid, e, got[e].payload)

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
        """Ask the bookies of the last fragment for their LAC; returns the new LAC."""
        if self.is_closed:
            return self._lac
        return self._poll_lac(wait_ms=0)

    def wait_for_entry(self, entry_id: int, timeout: float) -> bool:
        """Long-poll until ``entry_id`` is confirmed (or the ledger closed); True if readable."""
        deadline = time.monotonic() + timeout
        while self._lac < entry_id:
            if self.is_closed:
                return False
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._poll_lac(wait_ms=max(1, int(min(left, 5.0) * 1000)))
            if self._lac < entry_id and self.refresh_metadata().state == LedgerState.CLOSED:
                return self._lac >= entry_id
        return True

    def _poll_lac(self, wait_ms: int) -> int:
        """ClientContext's ``ReadLastConfirmedOp``: ask every bookie of the last fragment for
        its LAC and take the highest once the answers cover every write quorum
        ((Qw - Qa) + 1 bookies of each, :func:`recovery.ask_last_fragment`). Then at least
        one answer comes from a bookie holding the last acknowledged entry, so the LAC is
        at least the one that entry carried: every reader sees the same confirmed prefix.
        A bookie that never saw the ledger (NoSuchLedger) answers LAC -1.

        A long poll (``wait_ms`` > 0) returns as soon as one bookie reports a higher LAC
        (any LAC a bookie reports is confirmed), or once a coverage waited with no news.
        Raises BookieUnavailableError when the answers cannot cover (too many bookies
        unreachable or silent within the read timeout), after re-reading the metadata once
        in case the writer replaced them: "nothing new" is never an unreachable cluster.
        """
        previous = self._lac
        for _ in range(2):
            m = self._md.value
            best, got = read_lac(self._bk, m, previous, wait_ms)
            with self._lock:
                if best > self._lac:
                    self._lac = best
            if got.covered or (wait_ms > 0 and best > previous):
                return self._lac
            fresh = self.refresh_metadata()
            if fresh.state == LedgerState.CLOSED or fresh.last_ensemble == m.last_ensemble:
                break
        if self.is_closed:
            return self._lac
        raise BookieUnavailableError(
            f"ledger {self.id}: could not read its last-add-confirmed from enough bookies "
            f"((Qw - Qa) + 1 of every write quorum of {list(m.last_ensemble)}): "
            f"{got.describe_errors(m.last_ensemble)}; retry when bookies are back")

    def close(self) -> None:
        """Nothing to release; present for symmetry with the writer's handle."""

    def __enter__(self) -> ReadHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
