"""The TPC-DI workload.

* :mod:`tpcdi.readers`: every file DIGen writes into typed Arrow tables, bad lines into rejects;
* :mod:`tpcdi.generator`: the same files and answer keys at any scale factor, fast and
  deterministic (``streamdi tpcdi generate``);
* :mod:`tpcdi.verify`: answer keys recounted from the files, and the data rules a load relies on
  (``streamdi tpcdi check``);
* :mod:`tpcdi.datasets`: where real DIGen output is (``TPCDI__DIGEN_DATA``), unpacked once.
"""
