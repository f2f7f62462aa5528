"""Every option of the ``bookkeeper`` data source, parsed and validated in this one place.

Option names are case-insensitive (Spark lower-cases them). An unknown option, an option
that does not apply (a reading option given to a writer, ``endingOffsets`` to a stream) or a
malformed value fails at once with an :class:`~bk_spark.errors.InvalidConfigError` whose
message names the option. A blank value is the same as not giving the option.

:data:`OPTIONS` is the one list of the options: one :class:`Option` row each, with where it
applies, its default, how its value is parsed and what it means. The check of names (and its
"did you mean"), the defaults of :class:`ReadOptions`, the table at the end of this docstring
and the README's option table (``make readme``; ``tests/unit/test_readme_tables.py`` fails
when they differ) are all derived from it.

Positions: a ledger's entries are numbered from 0; a position names the next entry to read,
so ``{"ledger": 12, "entry": 0}`` is the start of ledger 12 and an ending position is
exclusive. Streaming offsets in the checkpoint use the same JSON plus each ledger's index in
the log and the log's id (see :mod:`bk_spark.datasource.offsets`), one entry per log, so
a query reading several logs (``log`` list, ``logPattern``) keeps a position per log.

The options (generated from :data:`OPTIONS`):

"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from bk_spark.errors import InvalidConfigError
from bk_spark.metadata_uri import parse_metadata_service_uri
from bk_spark.protocol.log_format import Position, validate_log_name
from bk_spark.protocol.log_rules import resolve_quorums
from bk_spark.security import ClientSecurity, ZkSecurity, read_secret_file

EntryFormat = Literal["raw", "arrow"]
ENTRY_FORMATS: tuple[str, ...] = ("raw", "arrow")

#: What ``startingOffsetsByTimestampStrategy`` may say.
TIMESTAMP_STRATEGIES: tuple[str, ...] = ("error", "latest")

#: The four operations of the data source, as an error message names them.
BATCH_READ, STREAM_READ = "a batch read", "a streaming read"
BATCH_WRITE, STREAM_WRITE = "a batch write", "a streaming write"
#: An option's scope -> the operations it applies to.
SCOPES: dict[str, frozenset[str]] = {
    "all": frozenset({BATCH_READ, STREAM_READ, BATCH_WRITE, STREAM_WRITE}),
    "read": frozenset({BATCH_READ, STREAM_READ}),
    "batch read": frozenset({BATCH_READ}),
    "stream read": frozenset({STREAM_READ}),
    "write": frozenset({BATCH_WRITE, STREAM_WRITE}),
    "stream write": frozenset({STREAM_WRITE}),
}

#: ``parse(option name, value) -> parsed value``; raises the option's InvalidConfigError.
Parser = Callable[[str, str], Any]


def _fail(option: str, problem: str) -> InvalidConfigError:
    return InvalidConfigError(f"bookkeeper data source option '{_shown(option)}': "
                              f"{problem.splitlines()[0] if problem else problem}")


def _shown(name: str) -> str:
    """An option name as the one-line message shows it (control characters and quotes
    escaped, so a name with a newline still gives one line)."""
    return name.encode("unicode_escape").decode("ascii").replace("'", "\\'")


def _at_least(minimum: int) -> Parser:
    def parse(name: str, raw: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            raise _fail(name, f"expected an integer, got {raw!r}") from None
        if value < minimum:
            raise _fail(name, f"must be >= {minimum}, got {value}")
        return value
    return parse


_positive, _ms = _at_least(1), _at_least(0)


def _boolean(name: str, raw: str) -> bool:
    v = raw.strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise _fail(name, f"expected true or false, got {raw!r}")


def _one_word_of(words: tuple[str, ...]) -> Parser:
    def parse(name: str, raw: str) -> str:
        v = raw.strip().lower()
        if v not in words:
            raise _fail(name, f"expected {' or '.join(words)}, got {v!r}")
        return v
    return parse


_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|secs|seconds?|m|min|minutes?|h|hours?)?"
                       r"\s*", re.IGNORECASE)
_UNIT_S = {"ms": 0.001, "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1, "m": 60,
           "min": 60, "minute": 60, "minutes": 60, "h": 3600, "hour": 3600, "hours": 3600}


def parse_duration_s(option: str, raw: str) -> float:
    """``"500ms"``, ``"10s"``, ``"5m"``, ``"1h"`` or plain seconds -> seconds."""
    m = _DURATION.fullmatch(raw)
    if m is None:
        raise _fail(option, f"expected a duration such as 500ms, 10s, 5m or 1h, got {raw!r}")
    return float(m.group(1)) * _UNIT_S[(m.group(2) or "s").lower()]


@dataclass(frozen=True)
class Option:
    """One option of the data source: a row of :data:`OPTIONS`.

    ``scope`` is a key of :data:`SCOPES`. ``default`` is the value assumed when the option
    is not given, written as a user would give it (None: no single value; ``default_doc``
    says what happens then). ``parse`` turns a given value (or the default) into the
    value used; None: the option is parsed together with the options it depends on, in
    :meth:`ReadOptions.parse` / :meth:`WriteOptions.parse`. ``doc`` is Markdown (single
    backticks), one paragraph."""

    name: str
    scope: str
    default: str | None
    parse: Parser | None
    doc: str
    default_doc: str = ""

    def shown_default(self) -> str:
        """The default as the tables show it (Markdown)."""
        if self.default is not None:
            return f"`{self.default}`"
        return self.default_doc or "none"


_BOUND_DOC = ('`earliest`, `latest` (streams only) or JSON per log, `{"events": {"ledger": '
              '12, "entry": 5}}` = start at entry 5 of ledger 12; a log\'s value may also be '
              '`"earliest"`/`"latest"` or a checkpoint\'s offset, `{"position": "12:5@3"}` '
              '(`LEDGER:ENTRY@INDEX`); unnamed logs start at the default.')

#: Every option, in the order the docs list them.
OPTIONS: tuple[Option, ...] = (
    Option("metadataServiceUri", "all", None, None,
           "`zk://host:port[,host:port]/root` of the cluster. Resolved on the driver.",
           "env `BK_METADATA_SERVICE_URI`, else `zk://127.0.0.1:2181/ledgers`"),
    Option("log", "all", None, None,
           "log name, or a comma-separated list to read several (also `load(\"<log>\")` / "
           "`save(\"<log>\")`)."),
    Option("path", "all", None, None,
           "set by Spark from `load(\"<log>\")` / `save(\"<log>\")`: `log` when `log` is "
           "not given."),
    Option("logPattern", "read", None, None,
           "a regular expression (Python `re`) the whole log name must match, as Kafka's "
           "`subscribePattern`: reads every matching log; a running stream also reads logs "
           "created later, from their earliest position (not with `log` or `ledgers`)."),
    Option("ledgers", "read", None, None,
           "comma-separated ledger ids instead of `log`: raw, read-only access to ledgers "
           "(entries of a log's ledger are unframed, others returned as stored)."),
    Option("startingOffsets", "read", None, None,
           _BOUND_DOC + " A position in a truncated ledger is data loss (`failOnDataLoss`), "
           "one in a ledger never in the log always an error: the log's record of the ledger "
           "ids truncation removed tells them apart; for a log truncated before it kept one, "
           'add `"index"` (the ledger\'s index in the log, as a checkpoint or `bk log show` '
           "has it).",
           "`earliest` (batch), `latest` (stream)"),
    Option("endingOffsets", "batch read", "latest", None,
           "`latest` (the snapshot at planning time) or JSON per log: exclusive end "
           "positions, as in `startingOffsets`."),
    Option("startingTimestamp", "read", None, _ms,
           "ms since the epoch: start every log at its first entry appended at or after it "
           "(not with `startingOffsets`)."),
    Option("startingOffsetsByTimestamp", "read", None, None,
           'JSON per log, `{"events": 1700000000000}`: the same per log, overriding '
           "`startingTimestamp` for the logs it names (not with `startingOffsets`)."),
    Option("startingOffsetsByTimestampStrategy", "read", "error",
           _one_word_of(TIMESTAMP_STRATEGIES),
           "a starting timestamp after every entry of a log: `error` fails naming the log, "
           "`latest` starts at its end (Kafka's option)."),
    Option("endingTimestamp", "batch read", None, _ms,
           "ms since the epoch: end every log before its first entry appended at or after "
           "it (past the end: the readable end) (not with `endingOffsets`)."),
    Option("endingOffsetsByTimestamp", "batch read", None, None,
           "JSON per log: the same per log, overriding `endingTimestamp` for the logs it "
           "names."),
    Option("maxEntriesPerTrigger", "stream read", None, _positive,
           "at most this many entries per micro-batch (all logs)."),
    Option("maxBytesPerTrigger", "stream read", None, _positive,
           "about this many bytes per micro-batch (estimated from ledger lengths; at least "
           "one entry)."),
    Option("minEntriesPerTrigger", "stream read", None, _positive,
           "wait for this many entries before a micro-batch..."),
    Option("maxTriggerDelay", "stream read", "15m", parse_duration_s,
           "...but no longer than this (`500ms`, `10s`, `5m`, `1h` or seconds; only with "
           "`minEntriesPerTrigger`)."),
    Option("failOnDataLoss", "read", "true", _boolean,
           "`true`: fail when data to read is gone (ledgers truncated before they were "
           "read, a starting position in a truncated ledger, a log deleted, or deleted and "
           "created again); `false`: log a warning saying what was lost and go on (from the "
           "earliest position; a recreated log from its start)."),
    Option("minPartitions", "read", None, _positive,
           "split ledgers into entry ranges so there are at least this many input "
           "partitions."),
    Option("includePositions", "read", "false", _boolean,
           "arrow logs: add `log, ledger_id, entry_id, timestamp` columns after the stored "
           "ones."),
    Option("password", "all", None, None,
           "ledger password. Spark redacts it in plans, the UI and the event log "
           "(`spark.redaction.regex`).", "empty"),
    Option("passwordFile", "all", None, None,
           "a file holding the ledger password (driver side)."),
    Option("tlsCaCert", "all", None, None,
           "PEM CA of the bookies' certificates: TLS to bookies.", "env `BK_TLS_CA`"),
    Option("tlsCert", "all", None, None,
           "PEM client certificate file for bookies that require one (mutual TLS; with "
           "`tlsKey`); every executor reads it.", "env `BK_TLS_CERT`"),
    Option("tlsKey", "all", None, None,
           "the private key file of `tlsCert`; every executor reads it.",
           "env `BK_TLS_KEY`"),
    Option("zkAuthSecret", "all", None, None,
           "ZooKeeper digest credentials `user:password` (redacted by Spark).",
           "env `BK_ZK_AUTH`"),
    Option("zkAuthSecretFile", "all", None, None,
           "a file holding them (driver side).", "env `BK_ZK_AUTH_FILE`"),
    Option("zkTlsCaCert", "all", None, None,
           "PEM CA of ZooKeeper's `secureClientPort`: TLS to ZooKeeper.",
           "env `BK_ZK_TLS_CA`"),
    Option("zkTlsCert", "all", None, None,
           "PEM client certificate file for ZooKeeper (with `zkTlsKey`).",
           "env `BK_ZK_TLS_CERT`"),
    Option("zkTlsKey", "all", None, None,
           "the private key file of `zkTlsCert`.", "env `BK_ZK_TLS_KEY`"),
    Option("ensembleSize", "write", None, _positive,
           "bookies per new ledger.", "the log's recorded quorums (`bk log create -E`), else 3"),
    Option("writeQuorumSize", "write", None, _positive,
           "copies of each entry.", "the log's, else 2"),
    Option("ackQuorumSize", "write", None, _positive,
           "acknowledgements awaited per entry.", "the log's, else 2"),
    Option("entryFormat", "write", None, _one_word_of(ENTRY_FORMATS),
           "`raw` (one entry per row of a `value` binary/string column) or `arrow` (rows "
           "packed as Arrow IPC record batches, schema kept in the log).",
           "the log's recorded format; a new or empty log: `arrow`; a log with entries but "
           "no recorded format: `raw`"),
    Option("sinkId", "stream write", None, None,
           "identity of a streaming sink for exactly-once commits.",
           "`checkpointLocation`"),
    Option("checkpointLocation", "stream write", None, None,
           "the query's checkpoint directory (Spark's own option): the sink's identity when "
           "`sinkId` is not given."),
)

#: lower-case name -> row
_BY_NAME: dict[str, Option] = {o.name.lower(): o for o in OPTIONS}
_ALL: tuple[str, ...] = tuple(o.name for o in OPTIONS)
#: lower-case name -> documented name
_NAMES = {n.lower(): n for n in _ALL}
#: The options :func:`_security` reads (``passwordFile`` is read by :func:`_password`).
_SECURITY = ("passwordFile", "tlsCaCert", "tlsCert", "tlsKey", "zkAuthSecret",
             "zkAuthSecretFile", "zkTlsCaCert", "zkTlsCert", "zkTlsKey")


def _names_for(operations: frozenset[str]) -> frozenset[str]:
    """Lower-case names of the options that apply to any of ``operations``."""
    return frozenset(o.name.lower() for o in OPTIONS if SCOPES[o.scope] & operations)


def _check_names(options: Mapping[str, str], operations: frozenset[str], what: str) -> None:
    """Every given option exists and applies to one of ``operations`` (``what`` names the
    operation in the message); a near miss of a name is suggested."""
    allowed = _names_for(operations)
    for key in options:
        k = key.lower()
        if k in allowed:
            continue
        if k in _NAMES:
            raise _fail(_NAMES[k], f"does not apply to {what}")
        close = difflib.get_close_matches(k, list(_NAMES), n=1)
        hint = f" (did you mean '{_NAMES[close[0]]}'?)" if close else ""
        raise _fail(key, f"unknown option{hint}; the options are listed in "
                         f"bk_spark/datasource/options.py")


def _value(options: Mapping[str, str], name: str) -> Any:
    """An option with a ``parse``: its given value parsed, else its default parsed (None
    when it has no default)."""
    row = _BY_NAME[name.lower()]
    assert row.parse is not None, name
    raw = _get(options, name)
    if raw is None or not raw.strip():
        return None if row.default is None else row.parse(name, row.default)
    return row.parse(name, raw)


def _default(name: str) -> Any:
    """The parsed default of an option (the value used when it is not given)."""
    return _value({}, name)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table() -> str:
    """The options as the README's Markdown table (``make readme`` writes it there)."""
    lines = ["| option | applies to | default | meaning |", "|---|---|---|---|"]
    for o in OPTIONS:
        lines.append(f"| `{o.name}` | {o.scope} | {_md_cell(o.shown_default())} | "
                     f"{_md_cell(o.doc)} |")
    return "\n".join(lines) + "\n"


def _rst(text: str) -> str:
    return re.sub(r"`([^`]+)`", r"``\1``", text)


def rst_table() -> str:
    """The options as a reStructuredText table (the end of this module's docstring)."""
    widths = (max(len(o.name) for o in OPTIONS) + 4, max(len(s) for s in SCOPES), 60)
    rule = "  ".join("=" * w for w in widths)
    rows = [rule, "  ".join(h.ljust(w) for h, w in
                            zip(("option", "used", "meaning (default)"), widths, strict=True)
                            ).rstrip(), rule]
    for o in OPTIONS:
        text = _rst(f"{o.doc} (default: {o.shown_default()})")
        wrapped = textwrap.wrap(text, widths[2], break_on_hyphens=False) or [""]
        first = f"``{o.name}``".ljust(widths[0]) + "  " + o.scope.ljust(widths[1]) + "  "
        rows.append(first + wrapped[0])
        rows.extend(" " * len(first) + line for line in wrapped[1:])
    rows.append(rule)
    return "\n".join(rows) + "\n"


__doc__ = (__doc__ or "") + rst_table()


@dataclass(frozen=True)
class GivenPosition:
    """A position given in ``startingOffsets`` / ``endingOffsets``: entry ``entry`` of
    ledger ``ledger``; ``index`` its ledger's absolute index in the log when given (as in
    a streaming checkpoint or ``bk log show``; -1: not given). With the index, a ledger that
    is no longer in the log is known to be truncated (its index is before the log's first
    ledger) rather than never part of it."""

    ledger: int
    entry: int
    index: int = -1


#: A log's start or end: "earliest", "latest" or a position given by the user.
Bound = str | GivenPosition


def _get(options: Mapping[str, str], name: str) -> str | None:
    for key, value in options.items():
        if key.lower() == name.lower():
            return None if value is None else str(value)
    return None


def _uri(options: Mapping[str, str]) -> str:
    raw = _get(options, "metadataServiceUri")
    try:
        return parse_metadata_service_uri(raw or None).uri
    except InvalidConfigError as exc:
        raise _fail("metadataServiceUri", str(exc)) from None


def _password(options: Mapping[str, str]) -> bytes:
    """The ledger password: ``password`` or the content of ``passwordFile``."""
    value, path = _get(options, "password"), _get(options, "passwordFile")
    if value and path:
        raise _fail("passwordFile", "give either password or passwordFile, not both")
    if path:
        try:
            return read_secret_file(path, "the ledger password").encode()
        except InvalidConfigError as exc:
            raise _fail("passwordFile", str(exc)) from None
    return (value or "").encode()


def _security(options: Mapping[str, str]) -> ClientSecurity:
    """TLS files and ZooKeeper credentials: the options, else the environment's
    (:meth:`ClientSecurity.from_env`). A secret is never quoted in an error."""
    got = {n: _get(options, n) or None for n in _SECURITY[1:]}
    if not any(got.values()):
        return ClientSecurity.from_env()
    for cert, key, ca in (("tlsCert", "tlsKey", "tlsCaCert"),
                          ("zkTlsCert", "zkTlsKey", "zkTlsCaCert")):
        if (got[cert] is None) != (got[key] is None):
            given = cert if got[cert] else key
            raise _fail(given, f"{cert} and {key} go together (a certificate and its key)")
        if got[cert] and not got[ca]:
            raise _fail(cert, f"a client certificate needs {ca} too")
    if got["zkAuthSecret"] and got["zkAuthSecretFile"]:
        raise _fail("zkAuthSecretFile", "give either zkAuthSecret or zkAuthSecretFile")
    option = "zkAuthSecretFile" if got["zkAuthSecretFile"] else "zkAuthSecret"
    try:
        digest = got["zkAuthSecret"]
        if got["zkAuthSecretFile"]:
            digest = read_secret_file(got["zkAuthSecretFile"],
                                      "ZooKeeper credentials user:password")
        zk = ZkSecurity(digest=digest, tls_ca=got["zkTlsCaCert"], tls_cert=got["zkTlsCert"],
                        tls_key=got["zkTlsKey"])
    except InvalidConfigError as exc:
        raise _fail(option, str(exc)) from None
    return ClientSecurity(tls_ca=got["tlsCaCert"], tls_cert=got["tlsCert"],
                          tls_key=got["tlsKey"], zk=zk)


def _logs(options: Mapping[str, str], required: bool, single: bool) -> tuple[str, ...]:
    raw = _get(options, "log")
    option = "log"
    if raw is None:
        raw, option = _get(options, "path"), "path"
    if raw is None or not raw.strip():
        if required:
            raise _fail("log", "required: name the log, e.g. .option('log', 'events')")
        return ()
    names = tuple(n.strip() for n in raw.split(","))
    for n in names:
        try:
            validate_log_name(n)
        except InvalidConfigError as exc:
            raise _fail(option, str(exc)) from None
    if len(set(names)) != len(names):
        raise _fail(option, f"names a log twice: {raw!r}")
    if single and len(names) != 1:
        raise _fail(option, f"write to one log at a time, got {raw!r}")
    return names


def _ledger_ids(options: Mapping[str, str]) -> tuple[int, ...]:
    raw = _get(options, "ledgers")
    if raw is None or not raw.strip():
        return ()
    try:
        ids = tuple(int(x.strip()) for x in raw.split(","))
    except ValueError:
        raise _fail("ledgers", f"expected comma-separated ledger ids, got {raw!r}") from None
    if any(i < 0 for i in ids):
        raise _fail("ledgers", f"ledger ids are >= 0, got {raw!r}")
    return ids


def _pattern(options: Mapping[str, str]) -> re.Pattern[str] | None:
    raw = _get(options, "logPattern")
    if raw is None or not raw.strip():
        return None
    try:
        return re.compile(raw.strip())
    except re.error as exc:
        raise _fail("logPattern", f"not a regular expression ({exc}): {raw!r}") from None


def _check_log_names(option: str, names: list[str], logs: tuple[str, ...],
                     pattern: re.Pattern[str] | None) -> None:
    """The logs a per-log JSON option names must be read (named in ``log`` or matching
    ``logPattern``)."""
    if pattern is not None:
        unknown = sorted(n for n in names if not pattern.fullmatch(n))
        if unknown:
            raise _fail(option, f"names logs that do not match logPattern "
                                f"{pattern.pattern!r}: {', '.join(unknown)}")
        return
    unknown = sorted(set(names) - set(logs))
    if unknown:
        raise _fail(option, f"names logs that are not read: {', '.join(unknown)}")


def _bounds(options: Mapping[str, str], name: str, logs: tuple[str, ...],
            pattern: re.Pattern[str] | None, allowed: tuple[str, ...]
            ) -> str | dict[str, Bound] | None:
    """``earliest``/``latest`` for every log, or the JSON form's per-log bounds (logs it
    does not name take the default); None when the option is not given."""
    raw = _get(options, name)
    if raw is None or not raw.strip():
        return None
    text = raw.strip()
    if text.lower() in ("earliest", "latest"):
        if text.lower() not in allowed:
            raise _fail(name, f"{text.lower()!r} is not allowed here (use one of "
                              f"{', '.join(allowed)} or JSON positions)")
        return text.lower()
    try:
        spec = json.loads(text)
    except ValueError as exc:
        raise _fail(name, f"expected earliest, latest or JSON such as "
                          f'{{"events": {{"ledger": 12, "entry": 5}}}}: {exc}') from None
    if not isinstance(spec, dict):
        raise _fail(name, f"JSON must map log names to positions, got {text!r}")
    _check_log_names(name, list(spec), logs, pattern)
    out: dict[str, Bound] = {}
    for log_name, pos in spec.items():
        if isinstance(pos, str) and pos.lower() in allowed:
            out[log_name] = pos.lower()
            continue
        if isinstance(pos, dict) and set(pos) <= {"position", "log_id"} and "position" in pos:
            try:  # a checkpoint's offset: Position's string form
                p = Position.parse(pos["position"])
            except InvalidConfigError as exc:
                raise _fail(name, f"position of log {log_name!r}: {exc}") from None
            if p.ledger_id < 0:
                raise _fail(name, f"position of log {log_name!r} names no ledger: "
                                  f"{json.dumps(pos)}")
            out[log_name] = GivenPosition(p.ledger_id, p.entry_id, p.ledger_index)
            continue
        if not (isinstance(pos, dict) and set(pos) <= {"ledger", "entry", "index", "log_id"}
                and all(isinstance(pos.get(k, 0), int) and pos.get(k, 0) >= 0
                        for k in ("ledger", "entry", "index"))
                and "ledger" in pos and "entry" in pos):
            raise _fail(name, f"position of log {log_name!r} must be "
                              f'{{"ledger": <id>, "entry": <id>}} (ids >= 0; optionally '
                              f'"index": <the ledger\'s index in the log>), '
                              f'{{"position": "LEDGER:ENTRY[@INDEX]"}} or one of '
                              f"{', '.join(allowed)}, got {json.dumps(pos)}")
        out[log_name] = GivenPosition(pos["ledger"], pos["entry"], pos.get("index", -1))
    return out


def _timestamps(options: Mapping[str, str], name: str, logs: tuple[str, ...],
                pattern: re.Pattern[str] | None) -> dict[str, int] | None:
    """``{"<log>": <ms since the epoch>, ...}`` (None: not given)."""
    raw = _get(options, name)
    if raw is None or not raw.strip():
        return None
    try:
        spec = json.loads(raw)
    except ValueError:
        spec = None
    if not isinstance(spec, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in spec.values()):
        raise _fail(name, f'expected JSON mapping logs to ms since the epoch, such as '
                          f'{{"events": 1700000000000}}, got {raw!r}')
    _check_log_names(name, list(spec), logs, pattern)
    return dict(spec)


def _one_of(options: Mapping[str, str], names: tuple[str, ...]) -> None:
    given = [n for n in names if (_get(options, n) or "").strip()]
    if len(given) > 1:
        raise _fail(given[1], f"give either {given[1]} or {given[0]}, not both")


@dataclass(frozen=True)
class ReadOptions:
    """Options of a batch or streaming read (plain, picklable data). The logs read are
    ``logs``, or those whose whole name matches ``log_pattern`` (listed when planning)."""

    uri: str
    logs: tuple[str, ...] = ()
    log_pattern: str | None = None
    ledger_ids: tuple[int, ...] = ()
    password: bytes = field(default=b"", repr=False)
    security: ClientSecurity = field(default_factory=ClientSecurity)
    starting: dict[str, Bound] = field(default_factory=dict)
    starting_default: str = "earliest"
    ending: dict[str, Bound] = field(default_factory=dict)
    starting_timestamps: dict[str, int] = field(default_factory=dict)
    starting_timestamp_ms: int | None = None
    ending_timestamps: dict[str, int] = field(default_factory=dict)
    ending_timestamp_ms: int | None = None
    timestamp_strategy: str = _default("startingOffsetsByTimestampStrategy")
    min_partitions: int | None = None
    include_positions: bool = _default("includePositions")
    max_entries_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    min_entries_per_trigger: int | None = None
    max_trigger_delay_s: float = _default("maxTriggerDelay")
    fail_on_data_loss: bool = _default("failOnDataLoss")
    streaming: bool = False

    def start_bound(self, log: str) -> Bound:
        """Where ``startingOffsets`` starts ``log`` (its default when not named)."""
        return self.starting.get(log, self.starting_default)

    def end_bound(self, log: str) -> Bound:
        """Where ``endingOffsets`` ends ``log`` (its default when not named)."""
        return self.ending.get(log, _BY_NAME["endingoffsets"].default or "latest")

    def start_timestamp(self, log: str) -> int | None:
        """``startingOffsetsByTimestamp`` of ``log``, else ``startingTimestamp``."""
        return self.starting_timestamps.get(log, self.starting_timestamp_ms)

    def end_timestamp(self, log: str) -> int | None:
        """``endingOffsetsByTimestamp`` of ``log``, else ``endingTimestamp``."""
        return self.ending_timestamps.get(log, self.ending_timestamp_ms)

    def matches(self, log: str) -> bool:
        """Whether ``logPattern`` takes ``log`` (the whole name must match)."""
        return self.log_pattern is not None and re.fullmatch(self.log_pattern, log) \
            is not None

    @classmethod
    def parse(cls, options: Mapping[str, str], streaming: bool | None) -> ReadOptions:
        """``streaming`` None: not known yet (``schema()``), accept both kinds."""
        what = STREAM_READ if streaming else BATCH_READ
        _check_names(options, {True: frozenset({STREAM_READ}), False: frozenset({BATCH_READ}),
                               None: SCOPES["read"]}[streaming], what)
        logs = _logs(options, required=False, single=False)
        pattern = _pattern(options)
        ledger_ids = _ledger_ids(options)
        if logs and ledger_ids:
            raise _fail("ledgers", "give either 'log' or 'ledgers', not both")
        if pattern is not None and (logs or ledger_ids):
            raise _fail("logPattern", "give either 'log', 'ledgers' or 'logPattern', not "
                                      "two of them")
        if not logs and not ledger_ids and pattern is None:
            raise _fail("log", "required: name the log(s) to read, e.g. "
                               ".option('log', 'events') (or give 'logPattern' or "
                               "'ledgers')")
        if streaming and ledger_ids:
            raise _fail("ledgers", "ledgers are read in batch only; stream a log instead")
        # Positions or timestamps; a per-log timestamp overrides the one for all logs.
        for by_time in ("Timestamp", "OffsetsByTimestamp"):
            _one_of(options, ("startingOffsets", "starting" + by_time))
            _one_of(options, ("endingOffsets", "ending" + by_time))
        if ledger_ids:
            for name in ("startingOffsets", "endingOffsets", "startingTimestamp",
                         "startingOffsetsByTimestamp", "endingTimestamp",
                         "endingOffsetsByTimestamp"):
                if _get(options, name):
                    raise _fail(name, "applies to logs, not to 'ledgers'")
        start_allowed = ("earliest",) if streaming is False else ("earliest", "latest")
        default_start = "latest" if streaming else "earliest"
        starting = _bounds(options, "startingOffsets", logs, pattern, start_allowed)
        if isinstance(starting, str):
            starting, default_start = {}, starting
        ending = None if streaming else _bounds(options, "endingOffsets", logs, pattern,
                                                ("latest",))
        strategy = _value(options, "startingOffsetsByTimestampStrategy")
        min_entries = _value(options, "minEntriesPerTrigger")
        if (_get(options, "maxTriggerDelay") or "").strip() and min_entries is None:
            raise _fail("maxTriggerDelay", "only applies with minEntriesPerTrigger")
        max_entries = _value(options, "maxEntriesPerTrigger")
        if min_entries is not None and max_entries is not None and min_entries > max_entries:
            raise _fail("minEntriesPerTrigger", f"{min_entries} is more than "
                                                f"maxEntriesPerTrigger {max_entries}")
        return cls(
            uri=_uri(options), logs=logs,
            log_pattern=pattern.pattern if pattern is not None else None,
            ledger_ids=ledger_ids,
            password=_password(options), security=_security(options),
            starting=starting or {}, starting_default=default_start,
            ending=ending if isinstance(ending, dict) else {},
            starting_timestamps=_timestamps(options, "startingOffsetsByTimestamp", logs,
                                            pattern) or {},
            starting_timestamp_ms=_value(options, "startingTimestamp"),
            ending_timestamps=_timestamps(options, "endingOffsetsByTimestamp", logs,
                                          pattern) or {},
            ending_timestamp_ms=_value(options, "endingTimestamp"),
            timestamp_strategy=strategy,
            min_partitions=_value(options, "minPartitions"),
            include_positions=_value(options, "includePositions"),
            max_entries_per_trigger=max_entries,
            max_bytes_per_trigger=_value(options, "maxBytesPerTrigger"),
            min_entries_per_trigger=min_entries,
            max_trigger_delay_s=_value(options, "maxTriggerDelay"),
            fail_on_data_loss=_value(options, "failOnDataLoss"),
            streaming=bool(streaming))


def _check_quorums(e: int | None, qw: int | None, qa: int | None) -> None:
    """E >= Qw >= Qa for the quorums known (given as options, or resolved from the log)."""
    if e is not None and qw is not None and qw > e:
        raise _fail("writeQuorumSize", f"{qw} is more than ensembleSize {e}")
    if qw is not None and qa is not None and qa > qw:
        raise _fail("ackQuorumSize", f"{qa} is more than writeQuorumSize {qw}")


@dataclass(frozen=True)
class WriteOptions:
    """Options of a batch write or a streaming sink (plain, picklable data)."""

    uri: str
    log: str
    password: bytes = field(default=b"", repr=False)
    security: ClientSecurity = field(default_factory=ClientSecurity)
    # None: the log's recorded quorums, else 3/2/2 (log_rules.log_quorums)
    ensemble_size: int | None = None
    write_quorum_size: int | None = None
    ack_quorum_size: int | None = None
    entry_format: EntryFormat | None = None  # None: decided from the log (see the table)
    sink_id: str | None = None

    def with_log_quorums(self, properties: Mapping[str, object]) -> WriteOptions:
        """These options with every quorum resolved: the option given, else the log's
        recorded quorum (its ``properties``), else 3/2/2
        (:func:`~bk_spark.protocol.log_rules.resolve_quorums`); an impossible combination
        is refused naming the option."""
        e, qw, qa = resolve_quorums(
            properties, (self.ensemble_size, self.write_quorum_size, self.ack_quorum_size))
        _check_quorums(e, qw, qa)
        return dataclasses.replace(self, ensemble_size=e, write_quorum_size=qw,
                                   ack_quorum_size=qa)

    @classmethod
    def parse(cls, options: Mapping[str, str], streaming: bool) -> WriteOptions:
        what = STREAM_WRITE if streaming else BATCH_WRITE
        _check_names(options, frozenset({what}), what)
        (log_name,) = _logs(options, required=True, single=True)
        e = _value(options, "ensembleSize")
        qw = _value(options, "writeQuorumSize")
        qa = _value(options, "ackQuorumSize")
        _check_quorums(e, qw, qa)
        fmt = _value(options, "entryFormat")
        sink_id = _get(options, "sinkId") or _get(options, "checkpointLocation")
        if streaming and not sink_id:
            raise _fail("sinkId", "a streaming sink needs an identity for exactly-once "
                                  "commits: set checkpointLocation (or sinkId)")
        return cls(uri=_uri(options), log=log_name,
                   password=_password(options), security=_security(options),
                   ensemble_size=e, write_quorum_size=qw, ack_quorum_size=qa,
                   entry_format=fmt,  # type: ignore[arg-type]
                   sink_id=sink_id)

