"""Invalid options of the ``bookkeeper`` Spark data source, fuzzed: each is refused with
one line naming the option, never an unexpected exception.

The option maps are what Spark hands the data source (``options`` of a read or a write):
known option names in any letter case with hostile values, misspelled and unknown names,
options that do not apply to the operation. :meth:`ReadOptions.parse` and
:meth:`WriteOptions.parse` run on the driver before anything touches a cluster, so the
property is checked on them directly; ``tests/spark/test_options.py`` shows the same
messages arriving through a real SparkSession.
"""

from __future__ import annotations

import json
import os
import re
import string

from hypothesis import given, settings
from hypothesis import strategies as st

from bk_spark.datasource.options import _ALL, ReadOptions, WriteOptions
from bk_spark.errors import InvalidConfigError

FUZZ = settings(max_examples=int(os.environ.get("BK_OPTIONS_FUZZ_EXAMPLES", "400")),
                deadline=None, database=None)
MESSAGE = re.compile(r"^bookkeeper data source option '((?:[^'\n\\]|\\.)+)': [^\n]+$")


def any_case(name: str) -> st.SearchStrategy[str]:
    return st.lists(st.booleans(), min_size=len(name), max_size=len(name)).map(
        lambda flips: "".join(c.upper() if f else c.lower() for c, f in zip(name, flips,
                                                                              strict=True)))


hostile_text = st.one_of(
    st.text(max_size=20),
    st.text(alphabet=string.printable, max_size=20),
    st.sampled_from(["", " ", "-1", "0", "1", "2", "3", "9" * 30, "1e3", "nan", "true",
                     "false", "yes", "maybe", "earliest", "latest", "{}", "[]", "null",
                     "{\"x\": 1}", "zk://", "zk://127.0.0.1:1/", "http://x/y", "a,b", "a,a",
                     ",", "500ms", "5 minutes", "-5s", "raw", "arrow", "csv", "\n", "\x00"]),
    st.integers(-(2**70), 2**70).map(str),
    st.dictionaries(st.text(max_size=6), st.one_of(
        st.integers(-3, 2**64), st.text(max_size=5), st.none(),
        st.dictionaries(st.sampled_from(["ledger", "entry", "index", "x"]),
                        st.one_of(st.integers(-3, 2**64), st.text(max_size=3), st.none()),
                        max_size=3)), max_size=3).map(json.dumps),
)
known_name = st.sampled_from(sorted(_ALL)).flatmap(any_case)
unknown_name = st.one_of(
    st.text(min_size=1, max_size=20),
    st.sampled_from(sorted(_ALL)).map(lambda n: n[:-1] + "x"),  # a misspelling
    st.sampled_from(["maxOffsetsPerTrigger", "subscribe", "kafka.bootstrap.servers",
                     "startingOffsetsByTimestamp", "ensemble", "quorum"]),
)
option_maps = st.dictionaries(st.one_of(known_name, known_name, known_name, unknown_name),
                              hostile_text, max_size=6)


def check_refusal(options: dict[str, str], exc: Exception) -> None:
    """The one property: an InvalidConfigError whose message is one line naming an option
    given (or a required one that is missing)."""
    assert isinstance(exc, InvalidConfigError), f"{options!r} raised {exc!r}"
    text = str(exc)
    m = MESSAGE.match(text)
    assert m, f"{options!r}: not one line naming the option: {text!r}"
    named = m.group(1).lower()
    given_names = {k.encode("unicode_escape").decode("ascii").replace("'", "\\'").lower()
                   for k in options}
    required = {"log", "sinkid", "ledgers"}
    assert named in given_names or named in required, \
        f"{options!r}: the message names {named!r}, which was not given: {text!r}"


@FUZZ
@given(options=option_maps, streaming=st.sampled_from([True, False, None]))
def test_read_options_parse_or_name_the_bad_option(options: dict[str, str],
                                                   streaming: bool | None) -> None:
    try:
        parsed = ReadOptions.parse(options, streaming)
    except Exception as exc:  # noqa: BLE001 - the property is about what was raised
        check_refusal(options, exc)
    else:  # something to read: logs, a log name pattern or ledgers
        assert parsed.logs or parsed.log_pattern or parsed.ledger_ids


@FUZZ
@given(options=option_maps, streaming=st.booleans())
def test_write_options_parse_or_name_the_bad_option(options: dict[str, str],
                                                    streaming: bool) -> None:
    try:
        parsed = WriteOptions.parse(options, streaming)
    except Exception as exc:  # noqa: BLE001
        check_refusal(options, exc)
    else:
        given = [q for q in (parsed.ensemble_size, parsed.write_quorum_size,
                             parsed.ack_quorum_size) if q is not None]
        assert all(q >= 1 for q in given)
        e, qw, qa = parsed.ensemble_size, parsed.write_quorum_size, parsed.ack_quorum_size
        assert e is None or qw is None or e >= qw
        assert qw is None or qa is None or qw >= qa
