"""Writer processes of the fault suite; each prints what its client told it (transcript.py).

    python -m bk_spark.faults.writers ledger URI TAG --quorum E,Qw,Qa --entries-per-ledger N
    python -m bk_spark.faults.writers log URI TAG LOG --quorum E,Qw,Qa --roll-every N

A ledger writer creates ledgers one after another and writes derived payloads
(payloads.py) into each, closing it after ``--entries-per-ledger`` entries. A log writer
opens the log as its writer and appends; whenever it loses the log or fails it opens the log
again (so two of them on one log duel). Both run until SIGTERM, then finish their in-flight
adds, close, print ``done`` and exit.

After being fenced (LedgerFenced, LogOwnershipLost) a writer keeps trying, as a writer that
has not noticed would: it adds again through its fenced handle and, once the recovery has
closed the ledger, through a *stale* handle (the state of a writer paused through the
recovery) adding past the ledger's last entry. It prints ``ok-after-fence`` /
``ok-after-lost`` for any success, and for any add acknowledged after an earlier add of the
same writer failed: the checker counts each as a violation.

``--roll-pause S`` (log writers): after a roll's CAS succeeded, print ``roll-cas`` and wait
``S`` seconds before closing the previous ledger, while appends continue into it, so that
``kill -9`` lands inside the roll (the case where a new owner must fence the last *two*
ledgers).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from kazoo.protocol.states import KazooState

from bk_spark.core.client import BookKeeper, BookKeeperConfig
from bk_spark.core.futures import InFlightWindow
from bk_spark.core.ledger import LedgerHandle
from bk_spark.errors import LedgerFencedError, LedgerStateError, LogOwnershipLostError
from bk_spark.faults.payloads import ledger_payload, log_payload
from bk_spark.io.bookie_client import ClientConfig
from bk_spark.io.entry import EntryCodec
from bk_spark.io.metadata_store import Versioned
from bk_spark.log import open_log_writer
from bk_spark.log.testing import after_roll_cas
from bk_spark.protocol.digest import DigestManager, master_key
from bk_spark.protocol.ledger_metadata import LedgerMetadata
from bk_spark.protocol.log_format import Position, encode_entry, now_ms

PASSWORD = b"fault-pw"
STALE_ADDS = 3

_print_lock = threading.Lock()


def say(line: str) -> None:
    """Print one transcript line, flushed at once (a kill -9 loses nothing printed)."""
    with _print_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def _name(exc: BaseException) -> str:
    return type(exc).__name__


class StaleWriter(LedgerHandle):
    """A writer that never learned its ledger was fenced: it goes on adding at
    ``next_entry`` with the metadata it last knew (a writer paused through the recovery)."""

    def __init__(self, bk: BookKeeper, md: LedgerMetadata, next_entry: int) -> None:
        codec = EntryCodec(md.ledger_id, DigestManager(md.digest_type, PASSWORD))
        super().__init__(bk, Versioned(md, 0), PASSWORD, codec, master_key(PASSWORD),
                         next_entry=next_entry)


def try_after_fence(bk: BookKeeper, ledger_id: int, timeout: float,
                    fenced_add: Callable[[], Future] | None, report: str,
                    payload: Callable[[int], bytes]) -> None:
    """Keep trying after the fence; print ``<report> <ledger id> <entry id>`` per success.

    First through the writer's own (fenced) handle: it must refuse at once. Then, once the
    recovery is over (the metadata says CLOSED at last entry L: every write quorum has been
    fenced), through a stale handle adding L+1, L+2, ...: a success there is an add accepted
    by a quorum after fencing. Before the recovery ends the fence may still be on its way to
    some bookies, and an add they accept is simply part of the ledger recovery reads.
    """
    if fenced_add is not None:
        try:
            got = fenced_add().result(timeout)
            say(f"{report} {getattr(got, 'ledger_id', ledger_id)} "
                f"{getattr(got, 'entry_id', got)}")
        except Exception:  # noqa: BLE001 - every failure is the expected outcome
            pass
    deadline = time.monotonic() + timeout
    md = None
    while time.monotonic() < deadline:
        try:
            md = bk.ledger_metadata(ledger_id)
        except Exception:  # noqa: BLE001 - deleted, or ZooKeeper away: try again
            md = None
        if md is not None and md.is_closed:
            break
        time.sleep(0.2)
    if md is None or not md.is_closed:
        say(f"stale-skipped {ledger_id}")
        return
    first = md.last_entry_id + 1
    stale = StaleWriter(bk, md, first)
    futs = []
    for i in range(STALE_ADDS):
        try:
            futs.append(stale.add_entry_async(payload(first + i)))
        except Exception:  # noqa: BLE001
            break
    refused = 0
    for fut in futs:
        try:
            say(f"{report} {ledger_id} {fut.result(timeout)}")
        except Exception:  # noqa: BLE001
            refused += 1
    say(f"stale-refused {ledger_id} {refused}")


def make_client(args: argparse.Namespace) -> BookKeeper:
    cfg = BookKeeperConfig(client=ClientConfig(add_timeout_s=args.timeout,
                                               read_timeout_s=args.timeout))
    bk = BookKeeper(args.uri, cfg)

    def announce() -> None:
        time.sleep(0.05)
        sid, pwd = bk.zk.client_id
        say(f"zk {sid:x} {pwd.hex()}")

    def on_state(state: str) -> None:
        if state == KazooState.CONNECTED:
            threading.Thread(target=announce, daemon=True).start()

    announce()
    bk.zk.add_listener(on_state)
    return bk


class Pacer:
    """Keeps a writer at about ``rate`` adds per second (the machine is shared)."""

    def __init__(self, rate: float) -> None:
        self.rate, self.n, self.t0 = rate, 0, time.monotonic()

    def tick(self) -> None:
        self.n += 1
        ahead = self.t0 + self.n / self.rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)


# ------------------------------------------------------------------------------ ledgers


class _Stuck(Exception):
    """An add or append did not complete within the timeout: the writer abandons it."""


def _settler(state: dict, timeout: float, lost: tuple[type[BaseException], ...],
             lost_outcome: str, stuck: Callable[[Any], str],
             ok: Callable[[Any, Any], str], after_failure: Callable[[Any, Any], str]
             ) -> Callable[[Future, Any], None]:
    """How a harness writer settles each add of its :class:`InFlightWindow`, in order.

    Adds complete in entry order, so once one failed no later one may succeed: a success
    after a failure is reported with ``after_failure`` (a violation the checker counts).
    A timeout reports ``stuck`` and raises :class:`_Stuck` (the writer stops there)."""

    def settle(fut: Future, tag: Any) -> None:
        try:
            got = fut.result(timeout)
        except FutureTimeout:
            say(stuck(tag))
            state["outcome"] = state["outcome"] or "stuck"
            raise _Stuck from None
        except lost:
            state["outcome"] = state["outcome"] or lost_outcome
            state["failed"] = True
            return
        except Exception as exc:  # noqa: BLE001 - any other failure ends this writer
            state["outcome"] = state["outcome"] or f"fail {_name(exc)}"
            state["failed"] = True
            return
        say(after_failure(tag, got) if state["failed"] else ok(tag, got))

    return settle


def write_ledger(bk: BookKeeper, lh: LedgerHandle, args: argparse.Namespace,
                 stop: threading.Event, pacer: Pacer) -> None:
    wait = 4 * args.timeout + 10
    state: dict = {"outcome": None, "failed": False}
    window = InFlightWindow(args.window, on_done=_settler(
        state, wait, (LedgerFencedError, LedgerStateError), "fenced",
        stuck=lambda eid: f"stuck {lh.id} {eid}",
        ok=lambda _eid, got: f"ack {lh.id} {got}",
        after_failure=lambda _eid, got: f"ok-after-fence {lh.id} {got}"))
    eid = 0
    try:
        while state["outcome"] is None and not stop.is_set() and \
                eid < args.entries_per_ledger:
            try:
                fut = lh.add_entry_async(ledger_payload(lh.id, eid))
            except (LedgerFencedError, LedgerStateError):
                state["outcome"] = "fenced"
                break
            except Exception as exc:  # noqa: BLE001
                state["outcome"] = f"fail {_name(exc)}"
                break
            window.push(fut, tag=eid)
            eid += 1
            pacer.tick()
        window.drain()
    except _Stuck:
        pass
    outcome = state["outcome"]
    if outcome == "stuck":
        return  # abandoned open: the checker recovers it
    if outcome is None or outcome.startswith("fail"):
        if outcome is not None:
            say(f"fail {lh.id} {outcome.split()[1]}")
        try:
            lh.close(timeout=wait)
            say(f"closed {lh.id} {lh.last_add_confirmed}")
            return
        except (LedgerFencedError, LedgerStateError):
            outcome = "fenced"
        except Exception as exc:  # noqa: BLE001
            say(f"fail {lh.id} {_name(exc)}")
            return
    say(f"fenced {lh.id}")
    try_after_fence(bk, lh.id, wait, lambda: lh.add_entry_async(ledger_payload(lh.id, eid)),
                    "ok-after-fence", lambda e: ledger_payload(lh.id, e))


def ledger_writer(args: argparse.Namespace, stop: threading.Event) -> None:
    E, Qw, Qa = args.quorum
    bk = make_client(args)
    pacer = Pacer(args.rate)
    while not stop.is_set():
        try:
            lh = bk.create_ledger(E, Qw, Qa, password=PASSWORD)
        except Exception as exc:  # noqa: BLE001 - no bookies, ZooKeeper away: retry
            say(f"create-failed {_name(exc)}")
            stop.wait(0.3)
            continue
        say(f"ledger {lh.id} {E} {Qw} {Qa}")
        write_ledger(bk, lh, args, stop, pacer)
    finish(bk)


# ------------------------------------------------------------------------------ logs


def roll_hook(session: list[int], pause: float) -> Callable[[int], None]:
    """The writer's ``after_roll_cas`` hook: print ``roll-cas`` once a roll's CAS succeeded,
    then hold the roll ``pause`` seconds (both ledgers of the writer open meanwhile)."""

    def cas_then_pause(new_id: int) -> None:
        say(f"roll-cas {session[0]} {new_id}")
        time.sleep(pause)

    return cas_then_pause


def log_writer(args: argparse.Namespace, stop: threading.Event) -> None:
    E, Qw, Qa = args.quorum
    session = [0]
    hook = roll_hook(session, args.roll_pause) if args.roll_pause > 0 else None
    bk = make_client(args)
    pacer = Pacer(args.rate)
    wait = 4 * args.timeout + 10
    seq = 0
    while not stop.is_set():
        try:
            w = open_log_writer(bk, args.log, password=PASSWORD, ensemble_size=E,
                                write_quorum_size=Qw, ack_quorum_size=Qa,
                                roll_max_entries=args.roll_every)
            after_roll_cas(w, hook)
        except Exception as exc:  # noqa: BLE001 - lost the race, no bookies, ...: retry
            say(f"open-failed {_name(exc)}")
            stop.wait(random.uniform(0.1, 0.4))
            continue
        session[0] += 1
        s = session[0]
        say(f"open {s} {w.ledger_id}")
        state: dict = {"outcome": None, "failed": False, "last": {}}

        def acked(seq: int, pos: Position, s: int = s, state: dict = state) -> str:
            state["last"][pos.ledger_id] = pos.entry_id
            return f"ack {s} {seq} {pos.ledger_id} {pos.entry_id} {pos.ledger_index}"

        # Appends made before the writer lost the log may still succeed: they are
        # acknowledged, and the checker looks for them; a success after a failed append is
        # a violation (ok-after-lost).
        window = InFlightWindow(args.window, on_done=_settler(
            state, wait, (LogOwnershipLostError,), "lost",
            stuck=lambda seq, s=s: f"stuck-log {s} {seq}", ok=acked,
            after_failure=lambda _seq, pos, s=s:
                f"ok-after-lost {s} {pos.ledger_id} {pos.entry_id}"))
        try:
            while state["outcome"] is None and not stop.is_set():
                try:
                    fut = w.append_async(log_payload(args.tag, s, seq))
                except LogOwnershipLostError:
                    state["outcome"] = "lost"
                    break
                except Exception as exc:  # noqa: BLE001
                    state["outcome"] = f"fail {_name(exc)}"
                    break
                # The seq is spent once submitted: pushing may give up on an older append
                # (_Stuck) and this one may still land in the log, so the next session
                # must not reuse it (long seed 21 did: "seq 1441 appears 2 times").
                seq += 1
                window.push(fut, tag=seq - 1)
                pacer.tick()
            window.drain()
        except _Stuck:
            pass
        outcome = state["outcome"]
        if outcome == "lost":
            lid = w.ledger_id
            say(f"lost {s} {lid}")
            try_after_fence(bk, lid, wait,
                            lambda w=w, s=s: w.append_async(log_payload(args.tag, s, -1)),
                            f"ok-after-lost {s}",
                            lambda _e, s=s: encode_entry(log_payload(args.tag, s, -1), now_ms()))
        elif outcome is not None and outcome != "stuck":
            say(f"fail {s} {outcome.split()[1]}")
        if outcome != "stuck":
            try:
                w.close()
                if outcome is None:
                    say(f"closed {s}")
            except Exception as exc:  # noqa: BLE001
                say(f"close-failed {s} {_name(exc)}")
        if not stop.is_set() and outcome is not None:
            stop.wait(random.uniform(0.1, 0.4))  # let the other writer make progress
    finish(bk)


# ------------------------------------------------------------------------------ main


def finish(bk: BookKeeper) -> None:
    say("done")
    threading.Timer(5.0, lambda: os._exit(0)).start()  # never hang on exit
    try:
        bk.close()
    finally:
        os._exit(0)


def _quorum(text: str) -> tuple[int, int, int]:
    e, qw, qa = (int(x) for x in text.split(","))
    return e, qw, qa


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bk_spark.faults.writers")
    sub = p.add_subparsers(dest="kind", required=True)
    for kind in ("ledger", "log"):
        s = sub.add_parser(kind)
        s.add_argument("uri")
        s.add_argument("tag")
        if kind == "log":
            s.add_argument("log")
            s.add_argument("--roll-every", type=int, default=50)
            s.add_argument("--roll-pause", type=float, default=0.0)
        else:
            s.add_argument("--entries-per-ledger", type=int, default=300)
        s.add_argument("--quorum", type=_quorum, default=(3, 2, 2))
        s.add_argument("--window", type=int, default=16)
        s.add_argument("--rate", type=float, default=250.0)
        s.add_argument("--timeout", type=float, default=2.0)
    args = p.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if args.kind == "ledger":
        ledger_writer(args, stop)
    else:
        log_writer(args, stop)


if __name__ == "__main__":
    main()
