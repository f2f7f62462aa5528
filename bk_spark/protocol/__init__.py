"""The protocol as pure code: no I/O, no threads, no clocks (see the README's layout table).

Everything a writer, recoverer or log owner *decides* lives here as tables and functions of
metadata values, so it is tested with the seed's own examples and no server
(``tests/unit``). The I/O layers above read metadata, ask these modules what to do, and do it.
"""
