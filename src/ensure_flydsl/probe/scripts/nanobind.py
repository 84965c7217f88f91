"""nanobind's version and CMake folder, one a line, as the build's interpreter imports it (``python -c``)."""
import sys

# `python -c` puts "" (the caller's folder) first on sys.path: off it first, so no file there shadows a module.
if sys.path and sys.path[0] == "":
    del sys.path[0]
import nanobind  # type: ignore[import-not-found]  # noqa: E402

sys.stdout.write(nanobind.__version__ + "\n" + nanobind.cmake_dir())
