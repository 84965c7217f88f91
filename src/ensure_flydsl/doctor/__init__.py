"""Checks, in seconds, whether the configured strategy can succeed here, and why not."""
