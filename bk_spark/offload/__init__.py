"""Tiered storage: closed ledgers of a log offloaded to Parquet (Pulsar's
``LedgerOffloader``), read transparently.

The decisions (what is due, where a reader reads, when a bookie copy goes) are the tables
of :mod:`bk_spark.protocol.offload_rules`; here is the I/O, one step per module:

* :mod:`~bk_spark.io.offload_files`: the Parquet file of one ledger (write, verify, read,
  delete) on any pyarrow filesystem URI (``file://``, ``s3://``).
* :mod:`~bk_spark.offload.offloader`: the protocol's four steps for one ledger
  (:func:`offload_ledger`), the deletion lag, and the elected :class:`Offloader`.
* :mod:`~bk_spark.offload.service`: the offloader in a process (a bookie's ``--offload``,
  or ``bk offloader``).
"""
