"""The one table of the ways: what each is, in the order a run and the doctor ask them."""

from __future__ import annotations

from typing import List, Mapping, Type

from ensure_flydsl.settings import Strategy
from ensure_flydsl.ways import Way, provisioning
from ensure_flydsl.ways.base import Provider
from ensure_flydsl.ways.cache.provider import CacheProvider
from ensure_flydsl.ways.release.provider import ReleaseProvider
from ensure_flydsl.ways.source.provider import SourceProvider
from ensure_flydsl.ways.store import StoreProvider

WAYS: Mapping[Way, Type[Provider]] = {
    Way.STORE: StoreProvider,
    Way.RELEASE: ReleaseProvider,
    Way.CACHE: CacheProvider,
    Way.SOURCE: SourceProvider,
}


def ways_for(strategy: Strategy) -> List[Type[Provider]]:
    """The ways that make a tree for ``strategy``, in order: the host store first (a tree this host holds is
    copied, not made again), then those ``STRATEGY`` names."""
    return [WAYS[way] for way in (Way.STORE, *provisioning(strategy))]
