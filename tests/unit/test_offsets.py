"""Streaming offsets (datasource/offsets.py): Position's string form in checkpoints, and
offsets of older checkpoints still read. Pure (files only)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bk_spark.datasource.offsets import LogOffset, checkpoint_offsets, from_json, to_json
from bk_spark.datasource.options import GivenPosition, ReadOptions
from bk_spark.errors import InvalidConfigError
from bk_spark.protocol.log_format import Position


def test_an_offset_is_written_in_positions_string_form_and_read_back() -> None:
    offsets = {"events": LogOffset(3, 5, 12, "6f1c"), "next": LogOffset(4, 0, -1)}
    d = to_json(offsets)
    assert d == {"events": {"position": "12:5@3", "log_id": "6f1c"},
                 "next": {"position": "-1:0@4"}}
    assert from_json(json.loads(json.dumps(d))) == offsets
    assert offsets["events"].position == Position(12, 5, 3)


def _checkpoint(root: Path, line: str) -> Path:
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    (root / "offsets" / "0").write_text(
        'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}\n' + line + "\n")
    (root / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}\n')
    return root


@pytest.mark.parametrize("line", [
    '{"events":{"index":3,"ledger":12,"entry":5,"log_id":"6f1c"}}',  # before the string form
    '{"events":{"index":3,"ledger":12,"entry":5}}',                  # before log ids
    '{"events":{"position":"12:5@3","log_id":"6f1c"}}',              # today's
])
def test_a_checkpoint_of_every_offset_form_is_read(tmp_path: Path, line: str) -> None:
    batch, offsets = checkpoint_offsets(_checkpoint(tmp_path, line))
    off = offsets["events"]
    assert (batch, off.position, off) == (0, Position(12, 5, 3), LogOffset(3, 5, 12))
    assert off.log_id == ("6f1c" if "log_id" in line else "")


@pytest.mark.parametrize("bad", [{"position": "12:5"}, {"position": "x"}, {"position": 5},
                                 {"index": 3, "entry": 5}])
def test_a_malformed_offset_is_refused_naming_both_forms(bad: dict) -> None:
    with pytest.raises(InvalidConfigError, match="LEDGER:ENTRY@INDEX.*older checkpoints"):
        from_json({"events": bad})


def test_starting_offsets_take_a_checkpoints_offset_as_written() -> None:
    o = ReadOptions.parse({"metadataServiceUri": "zk://127.0.0.1:2181/x", "log": "a,b",
                           "startingOffsets": '{"a": {"position": "12:5@3", "log_id": "6f"},'
                                              ' "b": {"position": "4:2"}}'}, streaming=True)
    assert o.start_bound("a") == GivenPosition(12, 5, 3)
    assert o.start_bound("b") == GivenPosition(4, 2)
    with pytest.raises(InvalidConfigError, match="startingOffsets.*LEDGER:ENTRY"):
        ReadOptions.parse({"metadataServiceUri": "zk://127.0.0.1:2181/x", "log": "a",
                           "startingOffsets": '{"a": {"position": "12"}}'}, streaming=True)
