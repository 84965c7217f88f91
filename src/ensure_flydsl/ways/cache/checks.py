"""The doctor's look at the binary cache's trust: a cache that hosts share installs, into each of them, what
anybody who can write to it put there, unless FLYDSL_CACHE_TRUSTED_KEYS names whose signatures count.
A warning, never blocking: many caches are one host's own folder."""

from __future__ import annotations

import concurrent.futures
from typing import List, Optional

from ensure_flydsl.errors import Stage
from ensure_flydsl.settings import Settings
from ensure_flydsl.support.urls import shown_location
from ensure_flydsl.ways.checks import OK, WRONG, Check, RunContext, Submit, settled


def check_cache_trust(settings: Settings) -> Optional[Check]:
    """None without a cache; else ok (trusted keys are set) or a non-blocking warning."""
    if settings.cache is None:
        return None
    trusted = settings.label("cache_trusted_keys")
    if settings.cache_trusted_keys:
        names = ", ".join(line.partition(":")[0] for line in settings.cache_trusted_keys)
        signing = ("; this host signs what it publishes" if settings.cache_signing_key else
                   f"; this host publishes unsigned ({settings.label('cache_signing_key')} is not set), and hosts "
                   "that check signatures will not install what it publishes")
        return Check(name="cache-trust", status=OK,
                     detail=f"cache entries are installed only when signed by {names}{signing}", remedy="",
                     blocking=False, stage=Stage.SETTINGS)
    return Check(name="cache-trust", status=WRONG,
                 detail=f"{trusted} is not set: if other hosts or users can write to "
                 f"{shown_location(settings.cache)}, this host installs whatever they put there (the hashes only "
                 "prove the blob matches its manifest, not who wrote it)",
                 remedy="sign on the host that builds (FLYDSL_CACHE_SIGNING_KEY, from `ensure-flydsl cache keygen`) "
                 f"and set {trusted} to its .pub file on every host; ignore this if the cache is this host's alone",
                 blocking=False, stage=Stage.SETTINGS)


def predict(ctx: RunContext, checkout: Optional[str], submit: Submit) -> List["concurrent.futures.Future[Check]"]:
    """The cache way's check: whose entries it installs (a warning at most)."""
    trust = check_cache_trust(ctx.settings)
    return [settled(trust)] if trust is not None else []
