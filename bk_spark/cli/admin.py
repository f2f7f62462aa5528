"""``bk spark-check`` (Spark's Python can import the data source) and ``bk zk-acl``.
"""

from __future__ import annotations

from typing import Annotated

import typer

from bk_spark.cli.common import (
    JsonOpt,
    UriOpt,
    cli_security,
    console,
    err_console,
    fail,
    print_json,
)


# --------------------------------------------------------------------------- spark-check
def spark_check(
    python: Annotated[str | None, typer.Option(
        "--python", help="check this Python instead of the one Spark would pick")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Check that Spark's Python workers find the bookkeeper data source; exit 1 if not.

    Prints which Python the workers use (PYSPARK_PYTHON, spark.pyspark.python, or python3
    on the PATH), whether it imports pyspark, bk_spark and pyspark_bookkeeper, and whether
    Spark's lookup (pkgutil.iter_modules) lists pyspark_bookkeeper; every failure says how
    to fix it.
    """
    from bk_spark.spark_check import run_checks, worker_python

    wp = worker_python(python)
    report = run_checks(wp)
    if as_json:
        print_json(report.to_json())
    else:
        console.print(f"Spark's Python workers run {wp.path or wp.command} (from "
                      f"{wp.source})", highlight=False, soft_wrap=True)
        for note in wp.notes:
            console.print(f"  note: {note}", highlight=False, soft_wrap=True)
        for c in report.checks:
            mark = "[green]ok  [/]" if c.ok else "[bold red]FAIL[/]"
            console.print(f"{mark} {c.name}: {c.detail}", highlight=False, soft_wrap=True)
        for names, fix in report.fixes():
            err_console.print(f"[bold red]error:[/] {', '.join(names)}: {fix}",
                              highlight=False, soft_wrap=True)
        if report.ok:
            console.print("format(\"bookkeeper\") will be found by Spark's workers.")
    if not report.ok:
        raise typer.Exit(1)


# --------------------------------------------------------------------------- zk-acl
def zk_acl(metadata_service_uri: UriOpt = None, as_json: JsonOpt = False) -> None:
    """Protect an existing cluster's metadata: give every znode under the root the ACL
    "all rights to the ZooKeeper user in use (--zk-auth-file / BK_ZK_AUTH_FILE), none to
    anyone else". Bookies and clients then need those credentials too."""
    from bk_spark.io.zk import apply_acls, connect_zk, zk_acl
    from bk_spark.metadata_uri import parse_metadata_service_uri

    security = cli_security().zk
    acl = zk_acl(security)
    if acl is None:
        fail("zk-acl needs ZooKeeper credentials: put user:password in a file and pass "
              "--zk-auth-file FILE (or set BK_ZK_AUTH_FILE)")
    msu = parse_metadata_service_uri(metadata_service_uri)
    zk = connect_zk(msu, security=security)
    try:
        if not zk.exists(msu.root):
            fail(f"{msu.root} does not exist at {msu.hosts}: nothing to protect")
        n = apply_acls(zk, msu.root, acl)
    finally:
        zk.stop()
        zk.close()
    if as_json:
        print_json({"root": msu.root, "user": security.user, "znodes": n})
    else:
        console.print(f"{n} znodes under {msu.root} now readable and writable only by "
                      f"ZooKeeper user {security.user!r}")
