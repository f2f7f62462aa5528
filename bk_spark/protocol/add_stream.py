"""The add stream's decisions (issue 28 §2): when a request goes, how many go together, and
what a bookie's refusal of the stream means. Pure: no clocks, threads, gRPC or I/O.

Theory of operation. A client keeps one long-lived ``AddStream`` call per bookie
(:mod:`bk_spark.io.add_stream`); every ledger's add requests (and explicit LACs) to that
bookie go on it. As BookKeeper's per-connection pipelining does, the stream gathers: while
the messages in flight on it are at their bound, the requests that become ready (rounds of
other ledgers, LACs) wait, and go together in ONE message when an answer frees the window
(Nagle-like). A thousand writers sharing a bookie thus cost it a few messages per round
trip, not a request each.

* :func:`window_open`: whether a request (a ledger's on the unary path, a stream message)
  may go now, the one rule for both: while fewer than ``max_in_flight`` are out, always;
  beyond, a big one (``pipeline_min_bytes``) while the bytes in flight stay under
  ``max_in_flight_bytes`` (``ClientConfig``'s settings of those names);
* :func:`message_size`: how many of the queued requests the next message carries (in order,
  at least one, at most ``max_bytes`` of them together: ``ClientConfig.max_batch_bytes``);
* :func:`message_take`: the same, when the queue also holds *units*
  (``AddStreamRequest.adds``: many ledgers' adds in one ``LedgerAdds``, made by one pass of
  the client's I/O loop for one bookie): a unit goes alone in its message, and a message of
  requests stops before the next unit (queue order is kept: a ledger's requests reach the
  bookie in the order they were made);
* :func:`unit_parts`: the layout of a unit (part i is ``counts[i]`` records): which part
  each record belongs to, and :func:`failing_parts`, the parts that hold a record failing a
  check (the bookie refuses those parts alone);
* :data:`IDLE_CLOSE_S`: a stream idle that long is ended by the client (a reused Spark
  worker keeps no thread for it, an idle client holds none of a bookie's stream slots);
* :data:`REFUSALS`: a stream that ends with one of these codes before any answer was never
  served (the bookie refused it before reading a request, or has no such method), so its
  requests go again as unary ``AddEntries``, for a while or for good. Any other end breaks
  the stream: every request outstanding on it fails as a failed unary call fails.
"""

from __future__ import annotations

import enum
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from itertools import accumulate

import numpy as np


def window_open(in_flight: int, in_flight_bytes: int, size: int, *, max_in_flight: int,
                max_in_flight_bytes: int, pipeline_min_bytes: int) -> bool:
    """Whether a request of ``size`` bytes may go now, with ``in_flight`` requests holding
    ``in_flight_bytes`` outstanding (see the module docstring)."""
    if in_flight < max_in_flight:
        return True
    return size >= pipeline_min_bytes and in_flight_bytes + size <= max_in_flight_bytes


def message_size(sizes: Sequence[int], max_bytes: int) -> int:
    """How many of the queued requests (``sizes``, oldest first) the next message carries:
    the longest prefix of at most ``max_bytes`` together, and at least one."""
    if not sizes:
        return 0
    return max(1, bisect_right(list(accumulate(sizes)), max_bytes))


def message_take(sizes: Sequence[int], units: Sequence[bool], max_bytes: int) -> int:
    """How many of the queued items (``sizes``, ``units``: whether each is a unit, oldest
    first) the next message carries: a unit at the head alone; else :func:`message_size` of
    the requests before the first unit."""
    if not sizes:
        return 0
    if units[0]:
        return 1
    k = next((i for i, u in enumerate(units) if u), len(units))
    return message_size(sizes[:k], max_bytes)


def unit_parts(counts: Sequence[int] | np.ndarray, n_records: int) -> np.ndarray | None:
    """The part of each of a unit's ``n_records`` records (part i holds ``counts[i]`` of
    them, in part order), or None when the counts do not add up to the records (the unit
    is malformed: every part of it is refused)."""
    c = np.asarray(counts, dtype=np.int64)
    if int(c.sum()) != n_records or (len(c) and int(c.min()) < 0):
        return None
    return np.repeat(np.arange(len(c), dtype=np.int64), c)


def failing_parts(parts: np.ndarray, bad: np.ndarray) -> list[int]:
    """The parts (ascending) holding at least one record of the boolean mask ``bad``."""
    if not bool(bad.any()):
        return []
    return np.unique(parts[bad]).tolist()


class Refusal(enum.Enum):
    """What a refused stream means for the bookie's next adds."""

    UNARY_FOR_GOOD = "unary for good"  # the bookie has no AddStream, or not for this peer
    UNARY_FOR_A_WHILE = "unary for a while"  # the bookie has no stream to spare now


#: gRPC status (name) a stream ends with before any answer -> what it means.
REFUSALS: Mapping[str, Refusal] = {
    "UNIMPLEMENTED": Refusal.UNARY_FOR_GOOD,  # a bookie that predates the stream
    "PERMISSION_DENIED": Refusal.UNARY_FOR_GOOD,  # its AddEntries answers the typed error
    "RESOURCE_EXHAUSTED": Refusal.UNARY_FOR_A_WHILE,  # max_add_streams reached
}

#: Seconds a client sends unary adds to a bookie that had no stream to spare, before it
#: asks again.
RETRY_STREAM_S = 30.0

#: Seconds a stream with nothing queued or outstanding stays open: then the client ends it
#: (its threads end with it, and the bookie's slot is free for another client); the next
#: request opens a new one.
IDLE_CLOSE_S = 2.0


def refusal(code_name: str, answered: bool) -> Refusal | None:
    """What a stream's end with gRPC status ``code_name`` means: a :class:`Refusal` if the
    stream never got an answer (``answered`` False) and the code is one of
    :data:`REFUSALS`; None: the stream broke (its outstanding requests fail)."""
    return None if answered else REFUSALS.get(code_name)
