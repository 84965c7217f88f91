"""The source way: build the pin (provider.py: submodules, fixes, tools, MLIR, build.sh), its build
environment, tools and ROCm fix; checks.py: the doctor's prediction of what the build needs."""
