"""A recovery's write-back that gets no answer: what a user catching timeouts sees."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bk_spark.core import recovery
from bk_spark.errors import BKTimeoutError, RecoveryError
from bk_spark.io.metadata_store import Versioned
from bk_spark.proto import bookie_pb2 as pb
from bk_spark.protocol.ledger_metadata import LedgerMetadata, LedgerState

BOOKIES = ("b0:1", "b1:1", "b2:1")


class SilentBookie:
    """Takes a batch of adds and never answers (a paused or overloaded bookie)."""

    def send_batch(self, *args: object, **kwargs: object) -> None:
        pass


def test_a_write_back_with_no_answer_is_a_timeout_the_user_can_catch_as_one(monkeypatch):
    monkeypatch.setattr(recovery, "WRITE_BACK_GRACE_S", 0.0, raising=False)
    bk = SimpleNamespace(bookies=SimpleNamespace(get=lambda b: SilentBookie()),
                         config=SimpleNamespace(client=SimpleNamespace(add_timeout_s=0.05)))
    md = LedgerMetadata(ledger_id=7, ensemble_size=3, write_quorum_size=3, ack_quorum_size=2,
                        ensembles=((0, BOOKIES),), state=LedgerState.IN_RECOVERY)
    entries = [pb.Entry(ledger_id=7, entry_id=e, lac=-1, payload=b"x") for e in range(3)]
    with pytest.raises(BKTimeoutError) as caught:
        recovery.write_back(bk, Versioned(md, 1), b"key", entries)
    assert isinstance(caught.value, RecoveryError)  # and still a recovery's failure
    assert "ledger 7" in str(caught.value) and "open the ledger again" in str(caught.value)
