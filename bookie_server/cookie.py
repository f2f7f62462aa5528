"""The bookie's cookie check at start-up, and the stamps in its directories.

The decision is pure (:mod:`bk_spark.protocol.cookie_rules`, its table and theory of
operation); this module gathers its facts and carries it out:

1. Gather: the bookie's directories (``<data-dir>/journal`` and ``<data-dir>/ledgers``)
   with their stamps (``VERSION``) and whether they hold anything else; the cluster's
   instance id (``<root>/INSTANCEID``) and this bookie's cookie (``<root>/cookies/<id>``).
2. Decide (:func:`~bk_spark.protocol.cookie_rules.decide_startup`).
3. Act: ``SERVE`` nothing; ``STAMP_NEW`` creates the instance id if the root has none, the
   cookie in ZooKeeper, then the stamps; ``RESTAMP_EXPANDED`` updates the cookie (CAS) and
   stamps every directory; ``REFUSE`` raises :class:`~bk_spark.errors.InvalidCookieError`
   with the message and fix of :data:`~bk_spark.protocol.cookie_rules.REFUSALS`; ``REPAIR``
   refuses under ``--on-lost-data refuse`` and is otherwise returned to the server, which
   repairs before it serves and calls :func:`stamp_directories` once the repair finished.

It all runs before the bookie's storage opens and before it serves or registers: a bookie
that lost data never answers a request as if it held it.

A stamp is written atomically: the cookie goes to ``VERSION.tmp``, is fsync'd, renamed
over ``VERSION``, and the directory is fsync'd, so a crash leaves the old stamp or the new
one, never a torn one (a left-over ``.tmp`` is removed by the storage's own start-up).

Test-only: ``BK_TEST_UNSAFE_SERVE_LOST_DATA=1`` (:data:`UNSAFE_SERVE_LOST_DATA_ENV`, read
only by :func:`unsafe_serve_lost_data`) makes a bookie that lost its data re-stamp and serve
as if nothing happened, the behaviour before cookies: tests use it to show the data loss
that the repair prevents. It is not an option, and no deployment should set it.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from kazoo.client import KazooClient

from bk_spark.errors import InvalidConfigError, InvalidCookieError
from bk_spark.io.cookies import CookieStore, ensure_instance_id, read_instance_id
from bk_spark.io.zk import MetadataServiceUnavailableError, connect_zk
from bk_spark.metadata_uri import MetadataServiceUri, parse_metadata_service_uri
from bk_spark.protocol.cookie_rules import (
    STAMP_FILE,
    Action,
    Cookie,
    CookieFormatError,
    Decision,
    DirFacts,
    RefusalContext,
    StartupFacts,
    decide_startup,
    refusal_message,
)
from bookie_server.config import BookieConfig

log = logging.getLogger(__name__)

#: Test-only (module docstring): serve a bookie that lost its data as if nothing happened.
UNSAFE_SERVE_LOST_DATA_ENV = "BK_TEST_UNSAFE_SERVE_LOST_DATA"


def unsafe_serve_lost_data() -> bool:
    """Whether the test-only escape (module docstring) is set: the one place it is read."""
    return os.environ.get(UNSAFE_SERVE_LOST_DATA_ENV) == "1"


def data_directories(data_dir: str | Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The journal and ledger directories of a bookie with ``--data-dir data_dir``,
    absolute (what its cookie lists and what is stamped): the storage's
    ``<data-dir>/journal`` and ``<data-dir>/ledgers``."""
    base = Path(os.path.abspath(data_dir))
    return (str(base / "journal"),), (str(base / "ledgers"),)


def bookie_directories(config: BookieConfig) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """:func:`data_directories` of the bookie ``config`` describes."""
    return data_directories(config.data_dir)


def format_directories(data_dir: str | Path) -> list[str]:
    """Delete the journal and ledger directories of ``data_dir`` (data and stamps; other
    files, such as a bookie's log, stay): ``bk bookie format``. Returns those removed."""
    import shutil

    journal_dirs, ledger_dirs = data_directories(data_dir)
    removed = []
    for p in journal_dirs + ledger_dirs:
        if os.path.lexists(p):
            shutil.rmtree(p)
            removed.append(p)
    return removed


def master_cookie(config: BookieConfig, instance_id: str) -> Cookie:
    """The cookie this bookie's configuration describes (BookKeeper's master cookie)."""
    journal_dirs, ledger_dirs = bookie_directories(config)
    return Cookie(bookie_id=config.bookie_id, instance_id=instance_id,
                  journal_dirs=journal_dirs, ledger_dirs=ledger_dirs)


# -- stamps --------------------------------------------------------------------------------

def read_dir_facts(path: str) -> DirFacts:
    """One directory's stamp and whether it holds anything else (a missing directory is
    empty and unstamped)."""
    d = Path(path)
    try:
        names = [n for n in os.listdir(d) if n != STAMP_FILE and not n.endswith(".tmp")]
    except FileNotFoundError:
        return DirFacts(path)
    stamp_path = d / STAMP_FILE
    try:
        stamp = Cookie.from_bytes(stamp_path.read_bytes())
    except FileNotFoundError:
        return DirFacts(path, empty=not names)
    except (OSError, CookieFormatError) as exc:
        return DirFacts(path, empty=not names, unreadable=str(exc))
    return DirFacts(path, stamp=stamp, empty=not names)


def write_stamp(path: str, cookie: Cookie) -> None:
    """Stamp directory ``path`` with ``cookie`` atomically (write a temporary file, fsync,
    rename, fsync the directory); creates the directory if needed."""
    d = Path(path)
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f"{STAMP_FILE}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, cookie.to_bytes())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, d / STAMP_FILE)
    dfd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def remove_stamps(config: BookieConfig) -> None:
    """Remove the stamps from the bookie's directories (``bk bookie format``)."""
    journal_dirs, ledger_dirs = bookie_directories(config)
    for p in journal_dirs + ledger_dirs:
        try:
            os.unlink(Path(p) / STAMP_FILE)
        except FileNotFoundError:
            pass


# -- ZooKeeper -----------------------------------------------------------------------------

def _msu(config: BookieConfig) -> MetadataServiceUri:
    if not config.metadata_service_uri:
        raise InvalidConfigError("a bookie without a metadata service has no cookie")
    return parse_metadata_service_uri(config.metadata_service_uri)


def _connect(msu: MetadataServiceUri, config: BookieConfig) -> KazooClient:
    """A ZooKeeper session for the check (with the bookie's credentials): a bookie cannot
    tell whether it may serve without its cookie, so it waits for ZooKeeper (saying so)
    rather than serve blind."""
    while True:
        try:
            return connect_zk(msu, security=config.zk_security)
        except MetadataServiceUnavailableError as exc:
            log.warning("%s; the bookie waits for it to check its cookie", exc)
            time.sleep(1.0)


def gather_facts(config: BookieConfig, zk: KazooClient) -> StartupFacts:
    """Step 1 of the module docstring."""
    msu = _msu(config)
    journal_dirs, ledger_dirs = bookie_directories(config)
    found = CookieStore(zk, msu).find(config.bookie_id)
    return StartupFacts(bookie_id=config.bookie_id, instance_id=read_instance_id(zk, msu),
                        zk_cookie=found.value if found is not None else None,
                        dirs=tuple(read_dir_facts(p) for p in journal_dirs + ledger_dirs))


def stamp_directories(config: BookieConfig, zk: KazooClient | None = None, *,
                      new: bool = False) -> Cookie:
    """Make the cookie in ZooKeeper describe this bookie's configuration (a CAS through
    ``metadata_update_loop``; created if absent), then stamp every directory with it.

    ZooKeeper first, as BP-46 does: a crash before the stamps leaves directories without
    a stamp under a cookie, which the next start repairs again. Called by the start-up
    check (a new bookie, storage expansion) and by the self-repair once it finished; a
    repair must call it only when every ledger is back. ``zk``: a started client (default:
    a session of its own for the call); ``new``: a new bookie's first stamp, which fails
    (:class:`~bk_spark.errors.MetadataVersionError`) if a cookie appeared meanwhile.
    Returns the cookie stamped."""
    msu = _msu(config)
    own = zk is None
    client = _connect(msu, config) if zk is None else zk
    try:
        instance_id = ensure_instance_id(client, msu)
        want = master_cookie(config, instance_id)
        store = CookieStore(client, msu)
        if new or store.find(config.bookie_id) is None:
            store.create(want)  # never over another process's cookie
        else:
            store.update(config.bookie_id, needs_change=lambda c: c != want,
                         make_change=lambda _c: want)
        for path in want.directories:
            write_stamp(path, want)
        log.info("bookie %s: cookie stamped in ZooKeeper and in %s", config.bookie_id,
                 ", ".join(want.directories))
        return want
    finally:
        if own:
            client.stop()
            client.close()


def lost_data_error(config: BookieConfig, decision: Decision,
                    because: str = "it runs with --on-lost-data refuse") -> InvalidCookieError:
    """The refusal of a bookie that lost data and does not repair itself (``DATA_LOST``);
    ``because``: why it does not."""
    msu = _msu(config)
    ctx = RefusalContext(bookie_id=config.bookie_id, data_dir=os.path.abspath(config.data_dir),
                         uri=msu.uri, instance_id=None)
    return InvalidCookieError(refusal_message(decision, ctx, because))


def check_cookies(config: BookieConfig, on_lost_data: str | None = None) -> Decision:
    """The start-up check (module docstring). Returns the decision when the bookie may go
    on (``SERVE``, after ``STAMP_NEW`` or ``RESTAMP_EXPANDED`` carried out, or ``REPAIR``
    for the server's self-repair); raises :class:`InvalidCookieError` otherwise.
    ``on_lost_data``: ``repair`` or ``refuse`` (default: the config's)."""
    on_lost_data = on_lost_data or config.on_lost_data
    msu = _msu(config)
    zk = _connect(msu, config)
    try:
        facts = gather_facts(config, zk)
        decision = decide_startup(facts)
        log.info("bookie %s: cookie check: %s%s", config.bookie_id, decision.action.value,
                 f" ({decision.situation.value}: {', '.join(decision.dirs)})"
                 if decision.situation else "")
        ctx = RefusalContext(bookie_id=config.bookie_id,
                             data_dir=os.path.abspath(config.data_dir), uri=msu.uri,
                             instance_id=facts.instance_id)
        if decision.action is Action.REFUSE:
            raise InvalidCookieError(refusal_message(decision, ctx))
        if decision.action is Action.REPAIR:
            if unsafe_serve_lost_data():
                log.warning("bookie %s lost data (%s) and serves as if nothing happened: "
                            "%s=1 is set (test only)", config.bookie_id,
                            ", ".join(decision.dirs), UNSAFE_SERVE_LOST_DATA_ENV)
                stamp_directories(config, zk)
                return Decision(Action.SERVE)
            if on_lost_data == "refuse":
                raise lost_data_error(config, decision)
            return decision
        if decision.action in (Action.STAMP_NEW, Action.RESTAMP_EXPANDED):
            stamp_directories(config, zk, new=decision.action is Action.STAMP_NEW)
        return decision
    finally:
        zk.stop()
        zk.close()
