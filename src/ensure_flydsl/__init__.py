"""ensure-flydsl: make ``import flydsl, kernels.moe_gemm_2stage`` work from one consistent tree (``ensure()``, then
``activate()``).  The names load from their modules at first use: the front door (warm.py) answers without them."""

from __future__ import annotations

__all__ = ["AlreadyImported", "BadInput", "EnsureError", "ExitCode", "Result", "__version__", "activate", "ensure"]  # noqa: F822


def __getattr__(name: str) -> object:
    if name in __all__:
        from ensure_flydsl import api, errors, result, version

        return next(getattr(home, name) for home in (api, errors, result, version) if hasattr(home, name))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
