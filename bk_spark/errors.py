"""The one exception tree of bk-spark, with Apache BookKeeper's names.

Every error a user can meet derives from :class:`BKError`; the message says
what the user can do about it. Errors that travel on the wire map one-to-one
to :class:`bk_spark.proto.bookie_pb2.StatusCode` values (``code``), so a bookie's
typed answer becomes the same exception type in the client.
"""

from __future__ import annotations


class BKError(Exception):
    """Root of every bk-spark error."""

    code: int = 8  # StatusCode.INTERNAL


def copy_error(err: BKError) -> BKError:
    """A fresh copy of a stopping error (a ledger's or a writer's) for one caller. Raising
    one exception object again and again, from every thread, grows its traceback with each
    raise and keeps those frames alive: each caller gets its own copy (and traceback)."""
    try:
        return type(err)(*err.args)
    except TypeError:  # pragma: no cover - every BKError takes its message
        return err


class NoSuchLedgerError(BKError):
    """The ledger does not exist (in the metadata store or on a bookie)."""

    code = 1


class NoSuchEntryError(BKError):
    """The entry does not exist on the bookie or in the ledger."""

    code = 2


class LedgerFencedError(BKError):
    """The ledger was fenced by a recovery open; the writer must stop.

    As the fencing document says, an add answered with this error may or may
    not have been written: only recovery decides. Treat it like a timeout.
    """

    code = 3


class UnauthorizedError(BKError):
    """Wrong ledger password (master key) for this ledger."""

    code = 4


class RecoveryKeyUnavailableError(UnauthorizedError):
    """Re-replication cannot learn what it needs to copy a ledger: its master key (from a
    matching ``--recovery-password``, the worker's own bookie, or a surviving bookie under
    mutual TLS), or for a ``mac`` ledger its password. The message names what to set."""


class TooLargeError(BKError):
    """An entry is larger than the bookie's maximum entry size."""

    code = 5


class ReadOnlyError(BKError):
    """The bookie is in readonly mode (disk usage over its threshold)."""

    code = 6


class InvalidRequestError(BKError):
    """A malformed request: bad ids, bad sizes, undecodable bytes."""

    code = 7


class UnknownError(BKError):
    """The bookie cannot tell whether it holds what was asked: it lost its data and is
    repairing the ledger (in limbo, BP-46). Never a negative ("no such entry"): readers,
    recovery and LAC reads count it as no answer and ask another bookie."""

    code = 9


class BookieUnavailableError(BKError):
    """A bookie could not be reached or did not answer in time."""


class NotEnoughBookiesError(BKError):
    """Fewer writable bookies are registered than the ensemble needs."""


class LedgerClosedError(BKError):
    """The ledger is closed (or being recovered) and takes no more adds."""


class LedgerStateError(BKError):
    """The ledger metadata is in a state that forbids the operation."""


class MetadataVersionError(BKError):
    """A compare-and-swap on metadata lost against a concurrent change."""


class MetadataSerializationError(BKError):
    """Stored metadata could not be encoded or decoded (corrupt, too large, or written in a
    newer format version)."""


class DigestMismatchError(BKError):
    """An entry's digest does not match its content (corrupt copy)."""


class CorruptedEntryError(BKError):
    """A bookie's stored entries are corrupt or gone (an entry log truncated, overwritten or
    missing): that copy is lost. Readers fail over to other copies; AutoRecovery
    re-replicates the ledger once the bookie is checked (``bk autorecovery status``)."""


class MalformedRecordsError(BKError):
    """A packed answer whose records do not parse (:mod:`bk_spark.protocol.records`):
    treated as a corrupt copy, and the read asks another bookie."""


class BKTimeoutError(BKError):
    """An operation did not finish within its timeout. Like an add answered with
    :class:`LedgerFencedError`, it may still have taken effect: check before retrying."""


class RecoveryError(BKError):
    """Recovery could not finish: a ledger's (too many bookies unavailable), or a bookie's
    re-replication (``bk recover``, ``bk bookie decommission``); the message says what to
    do, usually bring bookies back and retry."""


class RecoveryTimeoutError(RecoveryError, BKTimeoutError):
    """A recovery's write-back got no answer from its bookies within the add timeout: a
    :class:`BKTimeoutError` too (whoever catches timeouts catches it), and like one it may
    have taken effect on some bookies; opening the ledger again retries the recovery."""


class MetadataServiceUnavailableError(BKError):
    """ZooKeeper could not be reached at the metadata service URI."""


class MetadataStoreError(BKError):
    """The metadata store refused an operation for a reason other than a lost
    compare-and-swap (a failed ZooKeeper transaction, the ledger id space exhausted or its
    generator reset); the message says which."""


class BookieStorageError(BKError):
    """A bookie's journal or entry logs failed, or are not running: restart the bookie
    (its journal replays what was acknowledged)."""


class CheckFailedError(BKError):
    """A health check (``bk simpletest``, ``bk bookie-sanity``, ``bk recover``'s
    verification) found a fault; the message says which."""


class InvalidCookieError(BKError):
    """A bookie's cookie does not match its directories or its cluster (BookKeeper's
    InvalidCookieException): it refuses to start; the message names the situation and the
    command that fixes it (:mod:`bk_spark.protocol.cookie_rules`)."""


class CookieNotFoundError(BKError):
    """No cookie in ZooKeeper for that bookie id (BookKeeper's CookieNotFoundException)."""


class CookieFormatError(BKError, ValueError):
    """Bytes that are not a cookie of a known layout (a ``ValueError`` too, as before)."""


class FragmentChangedError(BKError):
    """The fragment being re-replicated changed under the copy (an ensemble change or a
    close meanwhile): AutoRecovery starts that fragment again."""


class SandboxError(BKError):
    """The sandbox could not start (Java missing, port taken, process died)."""


class TestBedError(BKError):
    """The test bed could not be built (namespaces, a process, a readiness wait)."""

    __test__ = False  # not a pytest test class, despite its name


class ScenarioError(TestBedError):
    """A test bed scenario's promise did not hold (the message says which)."""


class InvalidConfigError(BKError, ValueError):
    """A bad option or argument; the message names it."""


class ReadPastLacError(BKError):
    """A read beyond the last-add-confirmed of a ledger that is still open."""


class LogNotFoundError(BKError):
    """The named log does not exist."""


class LogExistsError(BKError):
    """A log with this name already exists."""


class LogOwnershipLostError(BKError):
    """Another writer took over the log (fenced our ledger or won the CAS)."""


class LogTruncatedError(BKError):
    """A position refers to a ledger that truncation removed from the log."""


class LogFormatError(BKError):
    """A log entry's framing could not be decoded (not written by a log writer, or written
    in a newer format)."""


class TooManyRequestsError(BKError):
    """The client already has as many bytes of adds in flight as it may (its
    ``ClientConfig.adds_in_flight_max_bytes``) and is set to fail fast
    (``adds_block_when_full=False``): retry once earlier adds are acknowledged, or raise the
    bound (BookKeeper's ``TooManyRequestsException``)."""


_BY_CODE: dict[int, type[BKError]] = {
    cls.code: cls
    for cls in (
        NoSuchLedgerError,
        NoSuchEntryError,
        LedgerFencedError,
        UnauthorizedError,
        TooLargeError,
        ReadOnlyError,
        InvalidRequestError,
        UnknownError,
    )
}


def error_for_code(code: int, message: str) -> BKError:
    """The exception a wire status code stands for (``code`` must not be OK)."""
    return _BY_CODE.get(code, BKError)(message)



class OffloadRecordsFullError(BKError):
    """A log's offload records (one per offloaded ledger, in its metadata znode) would
    leave too little of ZooKeeper's 1 MB znode for its writer: no ledger is offloaded
    until the log is truncated (:mod:`bk_spark.protocol.offload_rules`,
    :func:`~bk_spark.protocol.offload_rules.check_records_room`)."""


class OffloadTargetError(BKError):
    """The offload target (tiered storage, :mod:`bk_spark.offload`) cannot be reached or
    written: the offloader retries; readers keep reading the bookies' copy."""
