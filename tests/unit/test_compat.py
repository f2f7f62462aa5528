"""The 3.10 stand-ins behave like what they stand in for (so declaring >=3.10 is honest)."""

from __future__ import annotations

import enum
import json
import logging

from bk_spark.compat import StrEnum310
from bk_spark.io.zk import quiet_kazoo_logger


class Color(StrEnum310):
    RED = "red"


class Color311(enum.StrEnum):
    RED = "red"


def test_strenum_stand_in_prints_compares_and_serializes_as_its_value_like_python_311():
    for member in (Color.RED, Color311.RED):
        assert member == "red"
        assert str(member) == "red"
        assert f"{member}|{member:>5}" == "red|  red"
        assert json.dumps({"c": member}) == '{"c": "red"}'
        assert type(member)("red") is member
    assert {Color.RED: 1}["red"] == 1


def test_kazoo_connection_warnings_are_quiet_unless_the_application_set_a_level():
    kazoo_log = logging.getLogger("kazoo.client")
    old = kazoo_log.level
    try:
        kazoo_log.setLevel(logging.NOTSET)
        quiet_kazoo_logger()
        assert not kazoo_log.isEnabledFor(logging.WARNING)  # "Connection dropped: ..."
        assert kazoo_log.isEnabledFor(logging.ERROR)
        kazoo_log.setLevel(logging.DEBUG)  # chosen by the application: kept
        quiet_kazoo_logger()
        assert kazoo_log.level == logging.DEBUG
    finally:
        kazoo_log.setLevel(old)
