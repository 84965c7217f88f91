"""The ensure run in order: preflight, reuse decision, lock, warm path, provisioning, publishing."""
