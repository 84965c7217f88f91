"""Pure functions: no subprocess, no file system beyond tmp_path."""
