"""Building: the build environment, private build tools, the package index, the ROCm overlay, wheels."""
