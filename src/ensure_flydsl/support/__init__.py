"""Helpers with no knowledge of FlyDSL: atomic files, subprocesses, messages and the log, fault points."""
