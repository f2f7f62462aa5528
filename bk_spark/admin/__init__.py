"""Seeing the cluster: the facts an operator asks about, in one place, and the ways to show
them.

================  ============================================================================
module            job
================  ============================================================================
:mod:`.access`    which HTTP endpoint changes state and who may call it (a table, pure)
:mod:`.facts`     the facts (bookies, AutoRecovery, ledgers, logs, streaming lag), gathered with
                  the project's own functions (registration, under-replication, metadata)
:mod:`.http`      the bookie's HTTP admin API (BookKeeper's paths), the status page's files
:mod:`.doctor`    ``bk doctor``: checks, each finding with its remedy
:mod:`.dashboard` the Grafana dashboard and Prometheus alert rules, from the metric registries
================  ============================================================================
"""
