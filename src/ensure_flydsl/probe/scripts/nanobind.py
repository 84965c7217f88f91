"""nanobind's version and CMake folder, one a line, as the build's interpreter imports it (``python -c``)."""
import sys

# `python -c` puts "" (the working folder: the caller's, where a shim picks the interpreter) first on
# sys.path: off it before anything else is imported, so no file of the caller's shadows a module.
if sys.path and sys.path[0] == "":
    del sys.path[0]
import nanobind  # type: ignore[import-not-found]  # noqa: E402

sys.stdout.write(nanobind.__version__ + "\n" + nanobind.cmake_dir())
