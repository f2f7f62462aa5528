"""Who may call which endpoint of the HTTP admin API (bk_spark.admin.access)."""

from __future__ import annotations

import itertools

from bk_spark.admin.access import CHANGE, READ, RULES, decide, kind_of
from bookie_server.access import ADMIN, BOOKIE, CLIENT


def test_the_table_covers_every_kind_with_and_without_allow_lists():
    assert set(RULES) == set(itertools.product((READ, CHANGE), (True, False)))


def test_every_state_changing_endpoint_is_a_change_and_reads_are_reads():
    for method, path in (("PUT", "/api/v1/autorecovery/decommission"),
                         ("PUT", "/api/v1/bookie/gc"), ("DELETE", "/api/v1/ledger/delete"),
                         ("PUT", "/api/v1/autorecovery/trigger_audit"),
                         ("PUT", "/api/v1/bookie/state/readonly")):
        assert kind_of(method, path) == CHANGE
    for method, path in (("GET", "/api/v1/bookie/gc"), ("GET", "/api/v1/ledger/list"),
                         ("GET", "/metrics"), ("GET", "/api/v1/bookie/cluster_info")):
        assert kind_of(method, path) == READ


def test_changes_need_the_admin_identity_when_the_bookie_names_roles():
    assert decide(CHANGE, True, ADMIN, loopback=True) is None
    for role in (CLIENT, BOOKIE, None):
        assert "--allow-admin" in (decide(CHANGE, True, role, loopback=True) or "")
    assert decide(READ, True, CLIENT, loopback=False) is None
    assert decide(READ, True, None, loopback=False) is not None


def test_without_identities_changes_are_allowed_on_loopback_only():
    assert decide(CHANGE, False, None, loopback=True) is None
    assert "--allow-admin" in (decide(CHANGE, False, None, loopback=False) or "")
    assert decide(READ, False, None, loopback=False) is None
