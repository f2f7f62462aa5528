"""The benchmarks (``make bench``). They measure the client as a data-moving process would run
it, so importing this package opts the benchmark process in to the client's malloc tuning
(:func:`bk_spark.allocator.tune_allocator`, off by default for a library client)."""

from bk_spark.allocator import tune_allocator

tune_allocator()
