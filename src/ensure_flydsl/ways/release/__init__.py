"""The release way: the pin is a release tag's commit and the package index has its wheel (provider.py:
download, provenance, install); checks.py: the doctor's prediction, and auto's hint instead of a build."""
