"""The fault-injection suite: seeded fault schedules against real processes, and an
independent checker of BookKeeper's guarantees.

* :mod:`~bk_spark.faults.plan` — schedules from a seed (pure): the workload and the faults
  (kill -9 / pause of bookies, disk full, entry-log corruption, torn journal tails, ZooKeeper
  restarts and session expiries, writer kills mid-stream and mid-roll, fencing; with Spark:
  driver kills, and a log truncated and deleted-recreated while a query reads it);
* :mod:`~bk_spark.faults.cluster` — ZooKeeper plus bookie processes and every fault as one
  method acting on real processes and files (by PID, never by name);
* :mod:`~bk_spark.faults.writers` — the writer processes, printing what their client told
  them (:mod:`~bk_spark.faults.transcript` parses it) with payloads derived from their ids
  (:mod:`~bk_spark.faults.payloads`);
* :mod:`~bk_spark.faults.checker` — the invariants, checked from those transcripts and from
  what independent readers read;
* :mod:`~bk_spark.faults.spark_sink` — the Spark workload: an exactly-once copy across
  driver kills, and a ``failOnDataLoss=false`` query whose checker counts silent skips;
* :mod:`~bk_spark.faults.runner` — runs schedules on one shared cluster and sums them up.

``python -m bk_spark.faults --schedules 200`` (``make faults``) runs long schedules;
``tests/faults/test_fault_schedules.py`` runs 14 short ones (one led by each kind of fault)
inside ``make test``; a failing schedule prints ``python -m bk_spark.faults --seed <seed>``,
which replays it.
"""
