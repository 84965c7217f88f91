"""Building: the build environment, private build tools, the ROCm overlay."""
