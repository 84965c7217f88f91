"""nanobind's version and CMake folder, one a line, as the build's interpreter imports it (``python -c``)."""
import sys

import nanobind  # type: ignore[import-not-found]

sys.stdout.write(nanobind.__version__ + "\n" + nanobind.cmake_dir())
