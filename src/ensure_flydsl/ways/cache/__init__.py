"""The binary cache way: a tree or MLIR another host built (provider.py), and the build lease (fleet.py)."""
