"""How a writer's round of entries is split among its ensemble (pure: no I/O, threads or
clocks).

The seed's distribution schedule (:func:`~bk_spark.protocol.schedule.write_set`): entry
``n`` goes to the ``Qw`` bookies starting at index ``n % E``. A writer ships its entries in
rounds of consecutive ids (:meth:`bk_spark.core.ledger.LedgerHandle._ship`), one request
per bookie of the ensemble: :func:`round_shares` is each bookie's share of a round.
"""

from __future__ import annotations

import numpy as np

from bk_spark.protocol.schedule import write_set


def round_shares(first: int, wire: list[bytes], E: int, Qw: int
                 ) -> list[tuple[int, np.ndarray | list[int], list[bytes]]]:
    """Each ensemble index's share of a round of entries ``first, first + 1, ...``
    (``wire``: their records): ``(index, its entry ids ascending within each write set,
    its records)``, for the indexes with any. The entries at offset k of the round share
    the write set of ``(first + k) % E`` (:func:`write_set`), so a big round's shares are
    a few numpy slices; a round of fewer than E entries (a thousand ledgers with a couple
    of adds in flight each) is split in plain Python, with lists of ids."""
    n = len(wire)
    if n < E:
        small: dict[int, tuple[list[int], list[bytes]]] = {}
        for k in range(n):
            eid, rec = first + k, wire[k]
            for idx in write_set(eid % E, E, Qw):
                got = small.get(idx)
                if got is None:
                    small[idx] = ([eid], [rec])
                else:
                    got[0].append(eid)
                    got[1].append(rec)
        return [(idx, ids, recs) for idx, (ids, recs) in sorted(small.items())]
    ids = np.arange(first, first + n, dtype=np.int64)
    per_index: list[tuple[list[np.ndarray], list[bytes]]] = [([], []) for _ in range(E)]
    for k in range(min(E, n)):
        part = wire[k::E]
        for idx in write_set((first + k) % E, E, Qw):
            per_index[idx][0].append(ids[k::E])
            per_index[idx][1].extend(part)
    return [(idx, np.concatenate(id_parts), part)
            for idx, (id_parts, part) in enumerate(per_index) if part]


def round_indexes(first: int, n: int, E: int, Qw: int) -> list[int] | range:
    """The ensemble indexes that get a share of a round of ``n`` entries from ``first``
    (:func:`round_shares` gives each of them something, and no other): every index once a
    round has E entries or more (or Qw == E)."""
    if n >= E or Qw == E:
        return range(E)
    return sorted({idx for k in range(n) for idx in write_set((first + k) % E, E, Qw)})
