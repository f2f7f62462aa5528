"""Replacing bookies in a new fragment: the seed's "Ensemble changes", by one CAS.

"If a node fails to acknowledge a write, the writer will create a new ensemble by replacing
the failed node in the current ensemble. It creates a new fragment with this ensemble,
starting from the first message that has not been acknowledged to the client. Creating the
new fragment involves making a CAS write to the metadata." Recovery's write-back does the
same when a bookie of the last fragment cannot take the entries it writes back.

:func:`cas_new_fragment` is the one place that does it: the replacement is chosen by the
placement policy (:class:`~bk_spark.protocol.placement.Topology`: never a bookie of the
ensemble or an excluded one, racks spread over each write quorum), and what to do with the
metadata found after a lost CAS is the caller's decision function from
:mod:`bk_spark.protocol.ledger_rules` (the writer may change only an OPEN ledger; the
recoverer only one not CLOSED yet).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

from bk_spark.core.context import ClientContext
from bk_spark.errors import LedgerFencedError, NotEnoughBookiesError
from bk_spark.io.metadata_store import Versioned
from bk_spark.protocol.ledger_metadata import LedgerMetadata
from bk_spark.protocol.ledger_rules import Decision


def cas_new_fragment(bk: ClientContext, md: Versioned[LedgerMetadata], first: int,
                     replace: Mapping[int, str], decide: Callable[[LedgerMetadata], Decision],
                     exclude: Collection[str] = (), note: str = ""
                     ) -> Versioned[LedgerMetadata]:
    """Write a new fragment from entry ``first`` in which each bookie of ``replace``
    (ensemble index -> bookie) still named in the last fragment is replaced; returns the
    metadata written (or found, when ``decide`` says DONE).

    ``decide(metadata)`` runs on every metadata read (the first, and after each lost CAS):
    CHANGE writes, DONE returns it as it is, NOT_OPEN raises :class:`LedgerFencedError`
    (a recoverer took the ledger over). :class:`NotEnoughBookiesError` when no writable
    bookie outside the ensemble and ``exclude`` is left (``note`` is added to its message).
    """
    topology = bk.topology()
    lid = md.value.ledger_id

    def needs_change(m: LedgerMetadata) -> bool:
        decision = decide(m)
        if decision is Decision.NOT_OPEN:
            raise LedgerFencedError(f"ledger {lid} is {m.state.value}: a recoverer took it "
                                    f"over; outstanding adds fail")
        return decision is Decision.CHANGE

    def make_change(m: LedgerMetadata) -> LedgerMetadata:
        ensemble = list(m.last_ensemble)
        for index, bookie in replace.items():
            if ensemble[index] != bookie:
                continue  # replaced already (our own earlier attempt landed)
            try:
                ensemble[index] = topology.replace_bookie(
                    ensemble, index, m.write_quorum_size, exclude=exclude)
            except NotEnoughBookiesError as exc:
                raise NotEnoughBookiesError(
                    f"ledger {lid}: bookie {bookie} failed and no other writable bookie is "
                    f"available to replace it ({exc}){note}") from None
        return m.with_ensemble_change(max(first, m.ensembles[-1][0]), ensemble)

    return bk.metadata_store.update(lid, needs_change, make_change, current=md)
