"""What a ledger's writer and recoverer do with the metadata they find after a lost CAS.

Theory of operation (bookkeeper-protocol.txt): every change of a ledger's metadata is a
compare-and-swap through :func:`~bk_spark.io.metadata_store.metadata_update_loop`. When the
CAS fails the caller re-reads the metadata and must decide again; those decisions are the
protocol, so they live here, as tables over the ledger state, and the I/O code only maps
the answer to an action or an exception.

* **Closing a ledger as a writer** ("Closing a ledger as a writer"): "If the CAS operation
  fails, the writer must re-read the metadata. If the ledger is still OPEN, the writer
  retries. If the ledger is IN_RECOVERY, the writer has failed. If the ledger is CLOSED
  with the same last entry id, the writer has succeeded. If the ledger is CLOSED with a
  different last entry id, the writer has failed": :data:`CLOSE_AS_WRITER`.
* **Ensemble change by the writer** ("Ensemble changes"): a writer may add a fragment only
  while the ledger is OPEN ("a recoverer's IN_RECOVERY stops the writer's ensemble
  changes"); when its own earlier attempt already landed (the failed bookie is no longer in
  the last fragment) there is nothing to do: :func:`writer_ensemble_change`.
* **Replacing a bookie during recovery's write-back** ("Recovery"): only while the ledger is
  not CLOSED, and only for bookies the last fragment still names:
  :func:`recoverer_replacement`.
* Which errors make a bookie *replaceable* (the writer changes the ensemble, recovery adds
  a fragment) rather than fatal: :data:`REPLACEABLE_ERRORS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from types import MappingProxyType

from bk_spark.errors import BookieUnavailableError, ReadOnlyError
from bk_spark.protocol.ledger_metadata import LedgerMetadata, LedgerState

#: A bookie that answers with one of these is replaced in a new fragment (ensemble change
#: by the writer, a new fragment by the recoverer's write-back); any other error is the
#: ledger's own (fenced, deleted, unauthorized) and is not cured by another bookie.
REPLACEABLE_ERRORS: tuple[type[Exception], ...] = (BookieUnavailableError, ReadOnlyError)


class Decision(Enum):
    """What the caller of a CAS does with the metadata it found."""

    CHANGE = "change"              #: write the change (again) with a CAS
    DONE = "done"                  #: the change is already there: success, no write
    RECOVERING = "recovering"      #: fail: a recoverer owns the ledger
    CLOSED_ELSEWHERE = "closed elsewhere"  #: fail: closed at another last entry
    NOT_OPEN = "not open"          #: fail: the writer may no longer change the ledger


#: Closing a ledger as a writer: (state found, closed at the writer's last entry?) ->
#: decision. The second key only matters for CLOSED.
CLOSE_AS_WRITER: Mapping[tuple[LedgerState, bool], Decision] = MappingProxyType({
    (LedgerState.OPEN, False): Decision.CHANGE,
    (LedgerState.OPEN, True): Decision.CHANGE,
    (LedgerState.IN_RECOVERY, False): Decision.RECOVERING,
    (LedgerState.IN_RECOVERY, True): Decision.RECOVERING,
    (LedgerState.CLOSED, True): Decision.DONE,
    (LedgerState.CLOSED, False): Decision.CLOSED_ELSEWHERE,
})


def close_as_writer(m: LedgerMetadata, last_entry: int) -> Decision:
    """The writer's decision on closing at ``last_entry`` given metadata ``m``."""
    return CLOSE_AS_WRITER[(m.state, m.last_entry_id == last_entry)]


def writer_ensemble_change(m: LedgerMetadata, index: int, failed: str) -> Decision:
    """The writer's decision on replacing ``failed`` at ``index`` of the last fragment:
    CHANGE while OPEN and still named there, DONE when an earlier attempt of its own
    already landed, NOT_OPEN once a recoverer (IN_RECOVERY) or a close (CLOSED) took over."""
    if m.state != LedgerState.OPEN:
        return Decision.NOT_OPEN
    return Decision.CHANGE if m.last_ensemble[index] == failed else Decision.DONE


def recoverer_replacement(m: LedgerMetadata, broken: Mapping[int, str]) -> Decision:
    """The recoverer's decision on replacing the ``broken`` bookies (index -> bookie) of the
    last fragment for its write-back: DONE once the ledger is CLOSED (another recoverer
    finished) or when none of them is named there any more; CHANGE otherwise."""
    if m.is_closed:
        return Decision.DONE
    still = any(m.last_ensemble[i] == b for i, b in broken.items())
    return Decision.CHANGE if still else Decision.DONE
