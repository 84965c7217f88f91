"""The binary cache way: a tree (and MLIR) another host built, fetched and checked (provider.py), the build
lease a fleet takes turns with (fleet.py), whose entries count (trust.py); checks.py: the doctor's
prediction.  The store itself is :mod:`ensure_flydsl.binary_cache`."""
