"""AutoRecovery: the Auditor, Replication Workers and under-replication state.

BookKeeper's answer to a bookie that is gone for good (or lost its disk): an elected
*Auditor* finds every ledger with a fragment on it and marks it under-replicated in
ZooKeeper; *Replication Workers* (in every bookie process, or standalone) lock one marked
ledger at a time, copy the affected fragments' entries from surviving replicas to a
replacement bookie and swap the bookie in the fragment with one metadata CAS.

Layers, bottom up:

* :mod:`.plan` is pure: which fragments a missing bookie affects, which entries a bookie
  of a fragment holds, what a worker does with each fragment (a table).
* :mod:`.underreplication` is the ZooKeeper recipe for the under-replication state.
* :mod:`.replicator` copies one fragment and CASes the replacement (one ledger at a time),
  with the ledger's master key from a matching password, the worker's own bookie or (mutual
  TLS) a surviving bookie (``ledger_secret``); ``copy_entries`` is the copy alone.
* :mod:`.worker`, :mod:`.auditor` and :mod:`.service` run them.
"""
