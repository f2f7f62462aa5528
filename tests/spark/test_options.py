"""Options: case-insensitive, validated in one place, every error names its option."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.errors import PySparkException

from bk_spark.datasource.options import GivenPosition, ReadOptions, WriteOptions
from bk_spark.errors import InvalidConfigError
from bk_spark.log import create_log

URI = "zk://127.0.0.1:2181/ledgers"


@pytest.mark.parametrize(("options", "streaming", "message"), [
    ({"log": "a", "maxEntriesPerTriger": "5"}, True,
     "'maxEntriesPerTriger': unknown option (did you mean 'maxEntriesPerTrigger'?)"),
    ({"log": "a", "maxEntriesPerTrigger": "lots"}, True,
     "'maxEntriesPerTrigger': expected an integer, got 'lots'"),
    ({"log": "a", "maxBytesPerTrigger": "0"}, True, "'maxBytesPerTrigger': must be >= 1"),
    ({"log": "a", "maxEntriesPerTrigger": "5"}, False,
     "'maxEntriesPerTrigger': does not apply to a batch read"),
    ({"log": "a", "endingOffsets": "latest"}, True,
     "'endingOffsets': does not apply to a streaming read"),
    ({}, False, "'log': required"),
    ({"log": "a b"}, False, "'log': log name 'a b'"),
    ({"log": "a", "ledgers": "1"}, False, "'ledgers': give either 'log' or 'ledgers'"),
    ({"ledgers": "1,x"}, False, "'ledgers': expected comma-separated ledger ids"),
    ({"log": "a", "startingOffsets": "latest"}, False,
     "'startingOffsets': 'latest' is not allowed here"),
    ({"log": "a", "startingOffsets": '{"b": {"ledger": 1, "entry": 0}}'}, False,
     "'startingOffsets': names logs that are not read: b"),
    ({"log": "a", "startingOffsets": '{"a": {"ledger": -1, "entry": 0}}'}, False,
     "'startingOffsets': position of log 'a' must be"),
    ({"log": "a", "startingOffsets": "{nope"}, False, "'startingOffsets': expected earliest"),
    ({"log": "a", "startingOffsets": "earliest", "startingTimestamp": "5"}, True,
     "'startingTimestamp': give either startingTimestamp or startingOffsets"),
    ({"logPattern": "ev(ents", "startingOffsets": "earliest"}, True,
     "'logPattern': not a regular expression"),
    ({"log": "a", "logPattern": "a.*"}, False, "'logPattern': give either 'log', 'ledgers'"),
    ({"logPattern": "ev.*", "startingOffsets": '{"other": "earliest"}'}, True,
     "'startingOffsets': names logs that do not match logPattern 'ev.*': other"),
    ({"log": "a", "startingOffsetsByTimestamp": '{"a": "noon"}'}, True,
     "'startingOffsetsByTimestamp': expected JSON mapping logs to ms"),
    ({"log": "a", "startingOffsets": "earliest", "startingOffsetsByTimestamp": '{"a": 1}'},
     True, "'startingOffsetsByTimestamp': give either startingOffsetsByTimestamp or "
           "startingOffsets"),
    ({"log": "a", "startingOffsetsByTimestampStrategy": "closest"}, True,
     "'startingOffsetsByTimestampStrategy': expected error or latest"),
    ({"log": "a", "endingTimestamp": "5"}, True,
     "'endingTimestamp': does not apply to a streaming read"),
    ({"log": "a", "endingOffsetsByTimestamp": '{"b": 5}'}, False,
     "'endingOffsetsByTimestamp': names logs that are not read: b"),
    ({"log": "a", "maxTriggerDelay": "5s"}, True,
     "'maxTriggerDelay': only applies with minEntriesPerTrigger"),
    ({"log": "a", "minEntriesPerTrigger": "5", "maxTriggerDelay": "soon"}, True,
     "'maxTriggerDelay': expected a duration"),
    ({"log": "a", "failOnDataLoss": "maybe"}, True,
     "'failOnDataLoss': expected true or false"),
    ({"log": "a", "metadataServiceUri": "http://x"}, False,
     "'metadataServiceUri': metadataServiceUri 'http://x': expected zk://"),
])
def test_bad_read_options_fail_naming_the_option(options, streaming, message):
    with pytest.raises(InvalidConfigError) as info:
        ReadOptions.parse({"metadataServiceUri": URI, **options}, streaming=streaming)
    assert message in str(info.value)


@pytest.mark.parametrize(("options", "streaming", "message"), [
    ({"log": "a", "ensembleSize": "2", "writeQuorumSize": "3"}, False,
     "'writeQuorumSize': 3 is more than ensembleSize 2"),
    ({"log": "a", "entryFormat": "json"}, False, "'entryFormat': expected raw or arrow"),
    ({"log": "a,b"}, False, "'log': write to one log at a time"),
    ({"log": "a", "startingOffsets": "earliest"}, False,
     "'startingOffsets': does not apply to a batch write"),
    ({"log": "a"}, True, "'sinkId': a streaming sink needs an identity"),
    ({"log": "a", "sinkId": "q", "minPartitions": "2"}, True,
     "'minPartitions': does not apply to a streaming write"),
])
def test_bad_write_options_fail_naming_the_option(options, streaming, message):
    with pytest.raises(InvalidConfigError) as info:
        WriteOptions.parse({"metadataServiceUri": URI, **options}, streaming=streaming)
    assert message in str(info.value)


def test_option_names_are_case_insensitive_and_values_typed():
    o = ReadOptions.parse({"METADATASERVICEURI": URI, "Log": "a,b", "maxentriespertrigger": "7",
                           "MinEntriesPerTrigger": "3", "maxTriggerDelay": "250ms",
                           "startingOffsets": '{"b": {"ledger": 4, "entry": 2}}',
                           "FAILONDATALOSS": "False"}, streaming=True)
    assert o.logs == ("a", "b") and o.max_entries_per_trigger == 7
    assert o.max_trigger_delay_s == 0.25 and o.fail_on_data_loss is False
    assert o.start_bound("a") == "latest" and o.start_bound("b") == GivenPosition(4, 2)


def test_metadata_service_uri_defaults_to_the_environment(monkeypatch):
    monkeypatch.setenv("BK_METADATA_SERVICE_URI", "zk://10.0.0.1:2181/prod")
    assert ReadOptions.parse({"log": "a"}, streaming=False).uri == "zk://10.0.0.1:2181/prod"
    monkeypatch.delenv("BK_METADATA_SERVICE_URI")
    assert WriteOptions.parse({"log": "a"}, streaming=False).uri == URI


def test_spark_reports_a_bad_option_before_running_anything(spark, uri):
    with pytest.raises(PySparkException, match="'minPartitions': must be >= 1"):
        spark.read.format("bookkeeper").option("metadataServiceUri", uri) \
            .option("log", "x").option("minPartitions", "0").load()
    with pytest.raises(PySparkException, match="'ackQuorumSize': 3 is more than"):
        spark.range(1).write.format("bookkeeper").mode("append") \
            .option("metadataServiceUri", uri).option("log", "x") \
            .option("ackQuorumSize", "3").save()


_BAD_READ_OPTION = st.one_of(
    st.tuples(st.sampled_from(["minPartitions", "startingTimestamp"]),
              st.one_of(st.integers(-(2**40), -1).map(str), st.text(
                  alphabet="abcxyz.,-", min_size=1, max_size=8))),
    st.tuples(st.just("failOnDataLoss"), st.sampled_from(["maybe", "2", "tru", "-"])),
    st.tuples(st.just("startingOffsets"), st.sampled_from(
        ["latest", "{", "[1]", '{"other": "earliest"}',
         '{"fuzzed-options": {"ledger": -1, "entry": 0}}',
         '{"fuzzed-options": {"ledger": "a", "entry": 0}}'])),
    st.tuples(st.sampled_from(["maxEntriesPerTriger", "subscribe", "kafka.bootstrap.servers",
                               "startingOffsetsByTimestamp"]), st.just("1")),
)


@settings(max_examples=12, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bad=_BAD_READ_OPTION)
def test_spark_names_the_bad_option_of_fuzzed_batch_reads(spark, uri, bk, bad):
    """Through a real SparkSession: a batch read of an existing log with one invalid option
    fails before reading, and the error carries one line naming that option."""
    from bk_spark.errors import LogExistsError

    try:
        create_log(bk, "fuzzed-options")
    except LogExistsError:
        pass
    name, value = bad
    reader = spark.read.format("bookkeeper").option("metadataServiceUri", uri) \
        .option("log", "fuzzed-options").option(name, value)
    with pytest.raises(PySparkException) as info:
        reader.load().collect()
    lines = [ln for ln in str(info.value).splitlines()
             if "bookkeeper data source option '" in ln]
    assert lines, str(info.value)
    assert f"option '{name.lower()}'" in lines[-1].lower(), lines[-1]  # Spark lower-cases names
