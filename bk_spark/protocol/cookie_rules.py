"""A bookie's start-up decision from its cookie and its directories' stamps (pure).

Theory of operation (Apache BookKeeper's ``Cookie`` and ``LegacyCookieValidation``, with
BP-46's ``DataIntegrityCookieValidation`` for the repair case)
---------------------------------------------------------------------------------------
A bookie's identity is a **cookie**: the layout version, the bookie id (its advertised
``host:port``, the name ledger metadata puts in ensembles), the directories it keeps data
in (journal and ledger directories) and the **instance id** of its cluster (a random id
created once, when the cluster's metadata root is first initialised:
``<root>/INSTANCEID``). The cookie is kept twice:

* in ZooKeeper at ``<root>/cookies/<bookie id>``: the authoritative copy, and
* as a **stamp** (file ``VERSION``) in each of its directories, written when the directory
  holds everything the cookie promises.

A directory without its stamp while ZooKeeper still holds the cookie is a wiped or
replaced disk: the bookie forgot entries it acknowledged and fences it applied, so it must
never serve as if it held them. A stamp naming another bookie or another cluster means a
directory was moved or a bookie was pointed at the wrong ZooKeeper: serving would mix two
bookies' data. So before a bookie registers (and before it serves any request) it gathers
the facts below and :func:`decide_startup` returns one of:

``SERVE``             everything matches.
``STAMP_NEW``         a new bookie: no cookie in ZooKeeper, no stamp, empty directories:
                      write the cookie to ZooKeeper, then stamp every directory (ZooKeeper
                      first, as BP-46 does: a crash in between leaves "cookie, no stamp",
                      which is repaired, never "stamp, no cookie", which is refused).
``REPAIR``            the cookie is in ZooKeeper but a directory it lists lost its stamp
                      (or is gone from the configuration): the bookie lost data. It repairs
                      itself before serving (``--on-lost-data repair``, the default) or
                      refuses to start (``refuse``, BookKeeper's default). Stamps are
                      written only once the repair finished.
``RESTAMP_EXPANDED``  storage expansion: every directory the cookie lists is stamped and a
                      new, empty, unstamped directory was added: update the cookie's
                      directory list (CAS), then stamp every directory.
``REFUSE``            with a :class:`Situation`: exit non-zero with a message that names
                      the situation and the command that fixes it (:data:`REFUSALS`).

The rows, first match wins (:data:`STARTUP_RULES`; ``tests/unit/test_cookie_rules.py``
has one test per row):

====  =========================================================  =======================
row   facts                                                      decision
====  =========================================================  =======================
1     a stamp cannot be read                                     REFUSE STAMP_UNREADABLE
2     a stamp or the ZooKeeper cookie names another instance id  REFUSE OTHER_CLUSTER
3     no cookie here, and every stamp names one other bookie id  REFUSE BOOKIE_ID_CHANGED
4     a stamp names another bookie id                            REFUSE FOREIGN_DIRECTORY
5     no cookie in ZooKeeper, stamps present                     REFUSE COOKIE_MISSING
6     no cookie, no stamp, a directory holds data                REFUSE UNSTAMPED_DATA
7     no cookie, no stamp, every directory empty                 STAMP_NEW
8     an unstamped directory the cookie does not list holds data REFUSE NEW_DIR_NOT_EMPTY
9     a listed directory lost its stamp or is no longer used     REPAIR
10    an unstamped, empty directory the cookie does not list     RESTAMP_EXPANDED
11    everything matches                                         SERVE
====  =========================================================  =======================

Directories are compared by their absolute paths as the bookie's configuration names
them; a directory listed by the cookie and no longer configured counts as lost (row 9):
the entries it held are gone from this bookie's point of view.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from bk_spark.errors import CookieFormatError

#: The cookie format written by this code (a JSON document; BookKeeper's is at 4).
COOKIE_LAYOUT_VERSION = 1
#: The stamp's file name in every directory (BookKeeper's ``VERSION_FILENAME``).
STAMP_FILE = "VERSION"


@dataclass(frozen=True)
class Cookie:
    """A bookie's identity (BookKeeper's ``Cookie``): stored in ZooKeeper and stamped in
    each of its directories. ``journal_dirs``/``ledger_dirs`` are absolute paths."""

    bookie_id: str
    instance_id: str
    journal_dirs: tuple[str, ...]
    ledger_dirs: tuple[str, ...]
    layout_version: int = COOKIE_LAYOUT_VERSION

    @property
    def directories(self) -> tuple[str, ...]:
        """Every directory it names, journal directories first."""
        return self.journal_dirs + self.ledger_dirs

    def to_dict(self) -> dict:
        return {"layout_version": self.layout_version, "bookie_id": self.bookie_id,
                "instance_id": self.instance_id, "journal_dirs": list(self.journal_dirs),
                "ledger_dirs": list(self.ledger_dirs)}

    def to_bytes(self) -> bytes:
        return (json.dumps(self.to_dict(), indent=2) + "\n").encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Cookie:
        """Parse a cookie (:class:`CookieFormatError` if it is none)."""
        try:
            d = json.loads(data)
            version = int(d["layout_version"])
            if version != COOKIE_LAYOUT_VERSION:
                raise CookieFormatError(f"cookie layout version {version} is not "
                                        f"{COOKIE_LAYOUT_VERSION}")
            return cls(bookie_id=str(d["bookie_id"]), instance_id=str(d["instance_id"]),
                       journal_dirs=tuple(str(p) for p in d["journal_dirs"]),
                       ledger_dirs=tuple(str(p) for p in d["ledger_dirs"]),
                       layout_version=version)
        except CookieFormatError:
            raise
        except (ValueError, KeyError, TypeError) as exc:
            raise CookieFormatError(f"not a cookie: {exc}") from None


@dataclass(frozen=True)
class DirFacts:
    """What the bookie found in one of its configured directories."""

    path: str
    stamp: Cookie | None = None  # the directory's stamp, None: no stamp file
    empty: bool = True  # holds nothing besides (maybe) its stamp
    unreadable: str | None = None  # why the stamp file could not be parsed


@dataclass(frozen=True)
class StartupFacts:
    """Everything :func:`decide_startup` looks at: gathered by the bookie at start-up."""

    bookie_id: str  # the configured one (advertised address:port)
    instance_id: str | None  # <root>/INSTANCEID, None: not created yet
    zk_cookie: Cookie | None  # <root>/cookies/<bookie_id>, None: absent
    dirs: tuple[DirFacts, ...]

    @property
    def stamps(self) -> list[Cookie]:
        return [d.stamp for d in self.dirs if d.stamp is not None]

    @property
    def known(self) -> frozenset[str]:
        """The directories the ZooKeeper cookie lists (none without a cookie)."""
        return frozenset(self.zk_cookie.directories if self.zk_cookie else ())


class Action(str, Enum):
    SERVE = "serve"
    STAMP_NEW = "stamp_new"
    REPAIR = "repair"
    RESTAMP_EXPANDED = "restamp_expanded"
    REFUSE = "refuse"


class Situation(str, Enum):
    """Why a bookie refuses to start (each has a message and a fix in :data:`REFUSALS`)."""

    STAMP_UNREADABLE = "stamp_unreadable"
    OTHER_CLUSTER = "other_cluster"
    BOOKIE_ID_CHANGED = "bookie_id_changed"
    FOREIGN_DIRECTORY = "foreign_directory"
    COOKIE_MISSING = "cookie_missing"
    UNSTAMPED_DATA = "unstamped_data"
    NEW_DIR_NOT_EMPTY = "new_dir_not_empty"
    DATA_LOST = "data_lost"  # REPAIR with --on-lost-data refuse


@dataclass(frozen=True)
class Decision:
    """The outcome, with the directories that made it (shown in messages)."""

    action: Action
    situation: Situation | None = None
    dirs: tuple[str, ...] = ()  # the directories concerned
    other: str | None = None  # the other bookie id / instance id concerned

    @property
    def refused(self) -> bool:
        return self.action is Action.REFUSE


# -- the rows ------------------------------------------------------------------------------

def _unreadable(f: StartupFacts) -> Decision | None:
    bad = tuple(d.path for d in f.dirs if d.unreadable is not None)
    return Decision(Action.REFUSE, Situation.STAMP_UNREADABLE, bad) if bad else None


def _other_cluster(f: StartupFacts) -> Decision | None:
    theirs = [(d.path, d.stamp.instance_id) for d in f.dirs
              if d.stamp is not None and d.stamp.instance_id != f.instance_id]
    if f.zk_cookie is not None and f.zk_cookie.instance_id != f.instance_id:
        theirs.append((f"<ZooKeeper cookie of {f.bookie_id}>", f.zk_cookie.instance_id))
    if not theirs:
        return None
    return Decision(Action.REFUSE, Situation.OTHER_CLUSTER, tuple(p for p, _ in theirs),
                    other=theirs[0][1])


def _bookie_id_changed(f: StartupFacts) -> Decision | None:
    ids = {s.bookie_id for s in f.stamps}
    if f.zk_cookie is None and len(ids) == 1 and f.bookie_id not in ids:
        return Decision(Action.REFUSE, Situation.BOOKIE_ID_CHANGED,
                        tuple(d.path for d in f.dirs if d.stamp is not None), other=ids.pop())
    return None


def _foreign_directory(f: StartupFacts) -> Decision | None:
    foreign = [(d.path, d.stamp.bookie_id) for d in f.dirs
               if d.stamp is not None and d.stamp.bookie_id != f.bookie_id]
    if not foreign:
        return None
    return Decision(Action.REFUSE, Situation.FOREIGN_DIRECTORY,
                    tuple(p for p, _ in foreign), other=foreign[0][1])


def _cookie_missing(f: StartupFacts) -> Decision | None:
    if f.zk_cookie is None and f.stamps:
        return Decision(Action.REFUSE, Situation.COOKIE_MISSING,
                        tuple(d.path for d in f.dirs if d.stamp is not None))
    return None


def _unstamped_data(f: StartupFacts) -> Decision | None:
    if f.zk_cookie is None:
        full = tuple(d.path for d in f.dirs if not d.empty)
        if full:
            return Decision(Action.REFUSE, Situation.UNSTAMPED_DATA, full)
    return None


def _new_bookie(f: StartupFacts) -> Decision | None:
    if f.zk_cookie is None:  # rows 5 and 6 ruled out stamps and data
        return Decision(Action.STAMP_NEW, dirs=tuple(d.path for d in f.dirs))
    return None


def _new_dir_not_empty(f: StartupFacts) -> Decision | None:
    full = tuple(d.path for d in f.dirs
                 if d.stamp is None and d.path not in f.known and not d.empty)
    return Decision(Action.REFUSE, Situation.NEW_DIR_NOT_EMPTY, full) if full else None


def _lost(f: StartupFacts) -> Decision | None:
    configured = {d.path for d in f.dirs}
    lost = [d.path for d in f.dirs if d.stamp is None and d.path in f.known]
    lost += sorted(f.known - configured)
    return Decision(Action.REPAIR, Situation.DATA_LOST, tuple(lost)) if lost else None


def _expanded(f: StartupFacts) -> Decision | None:
    added = tuple(d.path for d in f.dirs if d.stamp is None and d.path not in f.known)
    return Decision(Action.RESTAMP_EXPANDED, dirs=added) if added else None


def _serve(f: StartupFacts) -> Decision:
    return Decision(Action.SERVE)


#: The rows of the module docstring's table, in order: the first that returns a decision
#: wins (the last always does).
STARTUP_RULES: tuple[Callable[[StartupFacts], Decision | None], ...] = (
    _unreadable, _other_cluster, _bookie_id_changed, _foreign_directory, _cookie_missing,
    _unstamped_data, _new_bookie, _new_dir_not_empty, _lost, _expanded, _serve,
)


def decide_startup(facts: StartupFacts) -> Decision:
    """What a bookie does at start-up with ``facts`` (the module docstring's table)."""
    for rule in STARTUP_RULES:
        decision = rule(facts)
        if decision is not None:
            return decision
    raise AssertionError("the last row always decides")  # pragma: no cover


# -- refusals: what the user sees ------------------------------------------------------------

@dataclass(frozen=True)
class RefusalContext:
    """What a refusal message names: the bookie, its data directory, the cluster (its
    metadata service URI and instance id, None for a root no bookie started on)."""

    bookie_id: str
    data_dir: str
    uri: str  # the metadata service URI
    instance_id: str | None


@dataclass(frozen=True)
class Refusal:
    """One situation's message (what happened) and fix (the commands that resolve it);
    ``{...}`` names fields of :class:`RefusalContext` and ``dirs``/``other``."""

    what: str
    fix: str


#: The message of every refusal: what happened, and the exact command that fixes it.
REFUSALS: dict[Situation, Refusal] = {
    Situation.STAMP_UNREADABLE: Refusal(
        "the stamp (VERSION file) of {dirs} cannot be read: the directory is damaged or was "
        "written by something else",
        "if this bookie's data can be given up (its ledgers are re-replicated from the other "
        "replicas): `bk recover {bookie_id} -m {uri}` then `bk bookie format --data-dir "
        "{data_dir} --bookie-id {bookie_id} -m {uri} --force`"),
    Situation.OTHER_CLUSTER: Refusal(
        "{dirs} belong to the cluster with instance id {other}, but the metadata service "
        "{uri} is {cluster}: this bookie is pointed at the wrong ZooKeeper (or the root "
        "was reset)",
        "start it with the metadata service URI of its own cluster (`-m zk://.../root`); to "
        "make it a new, empty bookie of this cluster instead: `bk bookie format --data-dir "
        "{data_dir} -m {uri} --force`"),
    Situation.BOOKIE_ID_CHANGED: Refusal(
        "{dirs} belong to bookie {other}, but this bookie's id is now {bookie_id} (its "
        "advertised address or port changed): ledger metadata names {other}, so its data "
        "is useless at another address",
        "start it again at its old address (`--advertised-address`/`--port` giving {other}); "
        "or, to move it: `bk recover {other} -m {uri}` (re-replicates its ledgers), `bk "
        "cookie delete {other} -m {uri} --yes`, `bk bookie format --data-dir {data_dir} -m "
        "{uri} --force`, then start it at the new address"),
    Situation.FOREIGN_DIRECTORY: Refusal(
        "{dirs} belong to bookie {other}, not to {bookie_id}: a directory of another bookie "
        "was given to this one",
        "give this bookie its own --data-dir; to empty this one for it: `bk bookie format "
        "--data-dir {data_dir} -m {uri} --force`"),
    Situation.COOKIE_MISSING: Refusal(
        "{dirs} are stamped for bookie {bookie_id} of this cluster, but ZooKeeper has no "
        "cookie for it ({uri}, cookies/{bookie_id}): it was deleted (`bk cookie delete`, a "
        "decommission) and the cluster no longer expects this data",
        "if its ledgers were re-replicated (`bk recover {bookie_id} -m {uri}`), start it as "
        "a new, empty bookie: `bk bookie format --data-dir {data_dir} -m {uri} --force`"),
    Situation.UNSTAMPED_DATA: Refusal(
        "{dirs} hold data but no stamp, and ZooKeeper has no cookie for {bookie_id}: data of "
        "a bookie from before cookies, or of another cluster",
        "to start it as a new, empty bookie: `bk bookie format --data-dir {data_dir} -m "
        "{uri} --force`"),
    Situation.NEW_DIR_NOT_EMPTY: Refusal(
        "{dirs} are new to bookie {bookie_id} (its cookie does not list them) and are not "
        "empty: a directory added to a bookie must be empty",
        "empty {dirs}, or give the directories the bookie had before"),
    Situation.DATA_LOST: Refusal(
        "{dirs} lost their stamp while ZooKeeper holds the cookie of {bookie_id}: the disk "
        "was wiped or replaced: the bookie forgot entries it acknowledged and ledgers it "
        "fenced, and must not serve them as if nothing happened",
        "repair it in place: start it with `--on-lost-data repair` (the default); or "
        "re-replicate its ledgers and start it empty: `bk recover {bookie_id} -m {uri}`, "
        "then `bk bookie format --data-dir {data_dir} --bookie-id {bookie_id} -m {uri} "
        "--force`"),
}


def refusal_message(decision: Decision, ctx: RefusalContext, because: str = "") -> str:
    """The one-paragraph message of a refusal: the situation, what happened (and
    ``because``: why the bookie does not do better, if it could), the fix."""
    assert decision.situation is not None
    r = REFUSALS[decision.situation]
    fields = {"bookie_id": ctx.bookie_id, "data_dir": ctx.data_dir, "uri": ctx.uri,
              "cluster": (f"the cluster {ctx.instance_id}" if ctx.instance_id else
                          "a root no bookie has started on yet (no cluster instance id)"),
              "dirs": ", ".join(decision.dirs) or ctx.data_dir,
              "other": decision.other or "?"}
    return (f"bookie {ctx.bookie_id} refuses to start ({decision.situation.value}): "
            f"{r.what.format(**fields)}{'; it refuses because ' + because if because else ''}"
            f". To fix: {r.fix.format(**fields)}.")


__all__ = ["COOKIE_LAYOUT_VERSION", "REFUSALS", "STAMP_FILE", "STARTUP_RULES", "Action",
           "Cookie", "CookieFormatError", "Decision", "DirFacts", "Refusal",
           "RefusalContext", "Situation", "StartupFacts", "decide_startup",
           "refusal_message"]
