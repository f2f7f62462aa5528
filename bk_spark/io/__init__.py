"""The I/O adapters: the only modules that import gRPC, protobuf or kazoo.

The bookie client (gRPC calls, answers turned into typed errors), the entry codec (the wire
framing of entries), the ledger metadata store and its one CAS loop, ZooKeeper sessions
with their credentials, and bookie registration. Everything above them sees bk-spark's own
types and :class:`~bk_spark.errors.BKError` only.
"""
