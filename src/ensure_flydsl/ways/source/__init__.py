"""The source way: build the pin (provider.py), its environment, tools, ROCm fix, and the doctor's checks."""
