"""The build toolchain: the build environment, private build tools, ROCm (the prefix, the overlay fix)."""
