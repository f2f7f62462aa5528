"""The start-up table of a bookie's cookie (``bk_spark/protocol/cookie_rules.py``): one
test per row, named for what the row guarantees, and the refusal messages."""

from __future__ import annotations

import pytest

from bk_spark.protocol.cookie_rules import (
    REFUSALS,
    STARTUP_RULES,
    Action,
    Cookie,
    CookieFormatError,
    Decision,
    DirFacts,
    RefusalContext,
    Situation,
    StartupFacts,
    decide_startup,
    refusal_message,
)

ME = "127.0.0.1:3181"
CLUSTER = "c0ffee"
J, L = "/data/b1/journal", "/data/b1/ledgers"


def cookie(bookie_id: str = ME, instance_id: str = CLUSTER,
           ledger_dirs: tuple[str, ...] = (L,)) -> Cookie:
    return Cookie(bookie_id=bookie_id, instance_id=instance_id, journal_dirs=(J,),
                  ledger_dirs=ledger_dirs)


def stamped(path: str, c: Cookie | None = None) -> DirFacts:
    return DirFacts(path, stamp=c or cookie(), empty=False)


def facts(*dirs: DirFacts, zk: Cookie | None = None, instance_id: str | None = CLUSTER,
          bookie_id: str = ME) -> StartupFacts:
    return StartupFacts(bookie_id=bookie_id, instance_id=instance_id, zk_cookie=zk,
                        dirs=tuple(dirs))


def test_a_new_bookie_with_empty_directories_and_no_cookie_stamps_both() -> None:
    d = decide_startup(facts(DirFacts(J), DirFacts(L), instance_id=None))
    assert d == Decision(Action.STAMP_NEW, dirs=(J, L))


def test_a_bookie_whose_stamps_and_cookie_all_match_serves() -> None:
    assert decide_startup(facts(stamped(J), stamped(L), zk=cookie())).action is Action.SERVE


def test_a_directory_without_its_stamp_while_zookeeper_has_the_cookie_is_repaired() -> None:
    for wiped in (DirFacts(L), DirFacts(L, empty=False)):  # emptied, or only its stamp lost
        d = decide_startup(facts(stamped(J), wiped, zk=cookie()))
        assert (d.action, d.situation, d.dirs) == (Action.REPAIR, Situation.DATA_LOST, (L,))
    # every directory wiped: the same
    assert decide_startup(facts(DirFacts(J), DirFacts(L), zk=cookie())).action is Action.REPAIR


def test_a_directory_the_cookie_lists_and_the_bookie_no_longer_uses_is_repaired() -> None:
    d = decide_startup(facts(stamped(J), stamped(L), zk=cookie(ledger_dirs=(L, "/old/l"))))
    assert (d.action, d.dirs) == (Action.REPAIR, ("/old/l",))


def test_stamps_without_a_cookie_in_zookeeper_refuse() -> None:
    d = decide_startup(facts(stamped(J), stamped(L), zk=None))
    assert (d.action, d.situation) == (Action.REFUSE, Situation.COOKIE_MISSING)


def test_stamps_of_another_clusters_instance_id_refuse() -> None:
    theirs = cookie(instance_id="other")
    d = decide_startup(facts(stamped(J, theirs), stamped(L, theirs), zk=None))
    assert (d.action, d.situation, d.other) == (Action.REFUSE, Situation.OTHER_CLUSTER,
                                                "other")
    # a fresh root (no instance id yet) is another cluster too
    d = decide_startup(facts(stamped(J), stamped(L), instance_id=None))
    assert d.situation is Situation.OTHER_CLUSTER
    # and so is a cookie in ZooKeeper of another instance id (INSTANCEID re-created)
    d = decide_startup(facts(stamped(J), stamped(L), zk=cookie(instance_id="older")))
    assert d.situation is Situation.OTHER_CLUSTER


def test_a_bookie_whose_id_changed_refuses() -> None:
    old = cookie(bookie_id="127.0.0.1:3999")
    d = decide_startup(facts(stamped(J, old), stamped(L, old), zk=None))
    assert (d.action, d.situation, d.other) == (Action.REFUSE, Situation.BOOKIE_ID_CHANGED,
                                                "127.0.0.1:3999")


def test_a_directory_stamped_for_another_bookie_refuses() -> None:
    other = cookie(bookie_id="127.0.0.1:3999")
    d = decide_startup(facts(stamped(J), stamped(L, other), zk=cookie()))
    assert (d.action, d.situation, d.dirs) == (Action.REFUSE, Situation.FOREIGN_DIRECTORY,
                                               (L,))


def test_an_added_empty_directory_is_storage_expansion_accepted_and_restamped() -> None:
    d = decide_startup(facts(stamped(J), stamped(L), DirFacts("/data/b1/ledgers2"),
                             zk=cookie()))
    assert d == Decision(Action.RESTAMP_EXPANDED, dirs=("/data/b1/ledgers2",))


def test_an_added_directory_that_holds_data_refuses() -> None:
    d = decide_startup(facts(stamped(J), stamped(L), DirFacts("/x", empty=False), zk=cookie()))
    assert (d.action, d.situation) == (Action.REFUSE, Situation.NEW_DIR_NOT_EMPTY)


def test_data_without_stamp_or_cookie_refuses_never_adopted() -> None:
    d = decide_startup(facts(DirFacts(J, empty=False), DirFacts(L)))
    assert (d.action, d.situation, d.dirs) == (Action.REFUSE, Situation.UNSTAMPED_DATA, (J,))


def test_an_unreadable_stamp_refuses() -> None:
    d = decide_startup(facts(DirFacts(J, unreadable="bad json"), stamped(L), zk=cookie()))
    assert (d.action, d.situation) == (Action.REFUSE, Situation.STAMP_UNREADABLE)


def test_the_table_has_a_row_per_docstring_line_and_the_last_always_decides() -> None:
    assert len(STARTUP_RULES) == 11
    assert STARTUP_RULES[-1](facts()) is not None


def test_every_refusal_names_its_situation_and_a_bk_command_that_fixes_it() -> None:
    ctx = RefusalContext(ME, "/data/b1", "zk://127.0.0.1:2181/ledgers", CLUSTER)
    for situation in Situation:
        msg = refusal_message(Decision(Action.REFUSE, situation, (L,), "x"), ctx)
        assert f"({situation.value})" in msg and "To fix:" in msg, msg
        assert "{" not in msg, msg  # every field filled
    assert set(REFUSALS) == set(Situation)
    fmt = refusal_message(Decision(Action.REFUSE, Situation.COOKIE_MISSING, (L,)), ctx)
    assert "`bk bookie format --data-dir /data/b1 -m zk://127.0.0.1:2181/ledgers --force`" in fmt


def test_a_cookie_round_trips_as_json_and_garbage_is_no_cookie() -> None:
    c = cookie()
    assert Cookie.from_bytes(c.to_bytes()) == c
    for bad in (b"", b"{}", b"not json", b'{"layout_version": 99}'):
        with pytest.raises(CookieFormatError):
            Cookie.from_bytes(bad)
