"""Re-replication of password-protected ledgers: where the master key comes from, who may
read it from a bookie, how failures back off and where their reason is kept (pure parts)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bk_spark.autorecovery.replicator import LedgerSecret, ledger_secret
from bk_spark.errors import NoSuchLedgerError, RecoveryKeyUnavailableError, UnauthorizedError
from bk_spark.protocol.digest import master_key, password_digest
from bk_spark.protocol.ledger_metadata import LedgerMetadata, LedgerState
from bk_spark.protocol.recovery_plan import UnderReplicated
from bk_spark.protocol.replication_retry import retry_delay, warn_of_failure
from bookie_server.access import ADMIN, BOOKIE, CLIENT, AccessPolicy

A, B, C, D = "a:1", "b:1", "c:1", "d:1"
KEY = master_key(b"p")


def _md(digest: str = "crc32c") -> LedgerMetadata:
    return LedgerMetadata(ledger_id=7, ensemble_size=3, write_quorum_size=2, ack_quorum_size=2,
                          ensembles=((0, (A, B, C)),), state=LedgerState.CLOSED,
                          last_entry_id=9, digest_type=digest,
                          password_digest=password_digest(b"p"))


class _Bookie:
    def __init__(self, answer: bytes | Exception) -> None:
        self.answer = answer
        self.asked: list[int] = []

    def read_master_key(self, ledger_id: int) -> bytes:
        self.asked.append(ledger_id)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


class _Bookies(dict):
    def get(self, b):  # noqa: D102 - the BookieClients interface used here
        return self[b]


class _BK:
    def __init__(self, answers: dict[str, bytes | Exception]) -> None:
        self.bookies = _Bookies({b: _Bookie(a) for b, a in answers.items()})


REFUSED = UnauthorizedError("ReadMasterKey is answered to bookie certificates only")


def test_a_matching_candidate_password_comes_first_and_needs_no_bookie():
    bk = _BK({A: REFUSED, B: REFUSED, C: REFUSED})
    s = ledger_secret(bk, _md("mac"), [b"", b"p"])  # type: ignore[arg-type]
    assert (s.key, s.password, s.source) == (KEY, b"p", "password")
    assert not any(b.asked for b in bk.bookies.values())


def test_without_the_password_the_workers_own_bookie_gives_the_key_with_no_network_call():
    bk = _BK({A: REFUSED, B: REFUSED, C: REFUSED})
    s = ledger_secret(bk, _md(), [b""], local_key={7: KEY}.__getitem__)  # type: ignore[arg-type]
    assert (s.key, s.password, s.source) == (KEY, None, "local bookie")
    assert not any(b.asked for b in bk.bookies.values())


def test_a_surviving_bookie_that_answers_read_master_key_gives_it_the_missing_one_is_not_asked():
    def none_here(lid: int) -> bytes:
        raise NoSuchLedgerError(f"ledger {lid} is not on this bookie")

    bk = _BK({A: REFUSED, B: KEY, C: KEY})
    s = ledger_secret(bk, _md(), [b""], local_key=none_here,  # type: ignore[arg-type]
                      missing={A})
    assert (s.key, s.source) == (KEY, B)
    assert bk.bookies[A].asked == []


def test_no_password_no_local_copy_and_refused_everywhere_says_what_to_set():
    bk = _BK({A: REFUSED, B: REFUSED, C: REFUSED})
    with pytest.raises(RecoveryKeyUnavailableError, match="--allow-bookie.*--recovery-password"):
        ledger_secret(bk, _md(), [b""], missing={C})  # type: ignore[arg-type]


def test_a_mac_ledger_is_copied_only_with_its_password_since_its_digests_need_it():
    bk = _BK({A: KEY, B: KEY, C: KEY})
    with pytest.raises(RecoveryKeyUnavailableError, match="'mac' digests.*--recovery-password"):
        ledger_secret(bk, _md("mac"), [b""], local_key={7: KEY}.__getitem__)  # type: ignore
    # a crc32c copy is verified with the key alone
    s = LedgerSecret(KEY, None, "local bookie")
    codec = s.codec(_md())
    assert codec is not None


@pytest.mark.parametrize("role, allowed", [(CLIENT, False), (BOOKIE, True), (ADMIN, True)])
def test_only_bookie_and_admin_roles_may_read_a_ledgers_master_key(role, allowed):
    policy = AccessPolicy.of(clients=["app"], bookies=["bk"], admins=["ops"])
    assert policy.may_call(role, "ReadMasterKey") is allowed
    assert policy.may_call(role, "ReadEntries")


def test_without_allow_lists_every_peer_is_a_client_and_is_refused_the_master_key():
    policy = AccessPolicy.of()
    assert policy.role(frozenset()) == CLIENT
    assert not policy.may_call(policy.role(frozenset({"anyone"})), "ReadMasterKey")


def test_retries_of_a_failing_ledger_double_up_to_the_cap():
    assert [retry_delay(n, 5, 300) for n in range(1, 9)] == [5, 10, 20, 40, 80, 160, 300, 300]
    assert retry_delay(10_000, 5, 300) == 300
    assert retry_delay(3, 400, 300) == 300


def test_a_failure_is_a_warning_first_on_a_new_reason_and_at_the_cap_only():
    warned = [n for n in range(1, 30) if warn_of_failure(n, False, 5, 300)]
    assert warned == [1, 7]  # 7th: the delay reaches 300 s
    assert warn_of_failure(12, True, 5, 300)


def test_the_reason_travels_with_the_record_and_survives_merges_and_clears():
    r = UnderReplicated(7, frozenset({A}), 123, "RecoveryKeyUnavailableError: no key")
    back = UnderReplicated.from_bytes(7, r.to_bytes())
    assert back == r
    assert back.with_missing([B]).reason == r.reason
    assert back.without([A]).reason == r.reason
    assert UnderReplicated.from_bytes(7, replace(r, reason="").to_bytes()).reason == ""
    assert b"reason" not in replace(r, reason="").to_bytes()  # old readers see old records


class _Urm:
    """The under-replication records in memory (the recipe's interface the worker uses)."""

    def __init__(self, rec: UnderReplicated) -> None:
        self.rec: UnderReplicated | None = rec
        self.reason_writes = 0

    def list(self):
        return [self.rec] if self.rec else []

    def get(self, lid: int):
        return self.rec

    def is_enabled(self) -> bool:
        return True

    def try_lock(self, lid: int, owner: str) -> bool:
        return True

    def unlock(self, lid: int) -> None:
        pass

    def set_reason(self, lid: int, reason: str) -> None:
        if self.rec is not None and self.rec.reason != reason:
            self.reason_writes += 1
            self.rec = self.rec.with_reason(reason)

    def mark_replicated(self, lid: int, done) -> None:
        assert self.rec is not None
        self.rec = self.rec.without(done)
        if not self.rec.missing:
            self.rec = None


class _FailingReplicator:
    def __init__(self) -> None:
        self.attempts: list[float] = []
        self.heal = False
        self.watchers: dict[int, list] = {}  # ledger id -> [callback, stopped]

    def watch_metadata(self, lid: int, callback):
        """As the metadata store's watch: called now, then after every change."""
        w = self.watchers[lid] = [callback, False]
        callback(object())
        return lambda: w.__setitem__(1, True)

    def no_longer_named(self, lid: int, missing: set[str]) -> set[str]:
        return set()

    def change(self, lid: int) -> None:
        """The ledger's metadata changed (e.g. it was closed by a recovery)."""
        w = self.watchers.get(lid)
        if w is not None and not w[1]:
            w[0](object())

    def holds_copy(self, lid: int) -> bool:
        return False

    def replicate(self, lid: int, missing: set[str]):
        from bk_spark.autorecovery.replicator import ReplicationResult

        self.attempts.append(clock[0])
        if self.heal:
            return ReplicationResult(lid, replaced=set(missing), entries=3)
        raise RecoveryKeyUnavailableError(f"ledger {lid}: no key")


clock = [0.0]


def test_a_failing_ledger_is_retried_ever_less_often_warned_of_rarely_its_reason_kept(caplog):
    import logging

    from bk_spark.autorecovery.metrics import AutoRecoveryMetrics
    from bk_spark.autorecovery.worker import ReplicationWorker

    clock[0] = 0.0
    urm = _Urm(UnderReplicated(7, frozenset({A}), 1))
    rep = _FailingReplicator()
    metrics = AutoRecoveryMetrics()
    w = ReplicationWorker(urm, rep, "w", metrics, retry_s=5, max_retry_s=300,  # type: ignore
                          clock=lambda: clock[0])
    with caplog.at_level(logging.DEBUG, logger="bk_spark.autorecovery.worker"):
        while clock[0] < 3600:  # an hour of passes, one a second
            w.run_once()
            clock[0] += 1.0
    gaps = [b - a for a, b in zip(rep.attempts, rep.attempts[1:], strict=False)]
    assert gaps[:7] == [5, 10, 20, 40, 80, 160, 300]
    assert set(gaps[7:]) == {300}
    assert len(rep.attempts) < 20  # not 720 (every 5 s)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, [r.getMessage() for r in warnings]  # first, and at the cap
    assert "RecoveryKeyUnavailableError: ledger 7: no key" in urm.rec.reason
    assert urm.reason_writes == 1
    assert metrics.unhealable.collect()[0].samples[0].value == 1
    # the cause goes away: the next attempt heals it and the count starts again
    rep.heal = True
    clock[0] += 300
    w.run_once()
    assert urm.rec is None
    w.run_once()
    assert metrics.unhealable.collect()[0].samples[0].value == 0


def test_a_failed_ledger_is_retried_at_the_next_pass_once_its_metadata_changed():
    """A ledger no bookie held the key of (opened, never written) fails for want of it and
    backs off; a client with the password then recovers it (its metadata changes, the
    bookies it fenced now hold its key): the worker tries again at its next pass, not
    when the back-off ends (issue 26: a wiped bookie's hand-over waited past the fault
    suite's healing bound)."""
    from bk_spark.autorecovery.metrics import AutoRecoveryMetrics
    from bk_spark.autorecovery.worker import ReplicationWorker

    clock[0] = 0.0
    urm = _Urm(UnderReplicated(7, frozenset({A}), 1))
    rep = _FailingReplicator()
    w = ReplicationWorker(urm, rep, "w", AutoRecoveryMetrics(), retry_s=5,  # type: ignore
                          max_retry_s=300, clock=lambda: clock[0])
    while clock[0] < 40:
        w.run_once()
        clock[0] += 1.0
    assert rep.attempts == [0, 5, 15, 35]  # the next one would be at 75
    rep.heal = True
    rep.change(7)
    w.run_once()
    assert rep.attempts[-1] == 40 and urm.rec is None
    assert rep.watchers[7][1]  # healed: its watch is stopped
