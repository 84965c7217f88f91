"""The ways to a FlyDSL tree, and which of them each strategy tries: ``STRATEGY`` is read alike by the run
(``pipeline/provision.py``) and the doctor (``doctor/diagnose.py``); ``table.py: WAYS`` holds the providers."""

from __future__ import annotations

from typing import Mapping, Tuple

from ensure_flydsl.errors import StrEnum
from ensure_flydsl.settings import Strategy


class Way(StrEnum):
    REUSE = "reuse"
    RELEASE = "release"
    CACHE = "cache"
    SOURCE = "source"
    # The host's store of trees: asked first whenever a strategy provisions, so it stands in no row of
    # STRATEGY (FLYDSL_STORE=off turns it off).
    STORE = "store"


# The release way applies only when the pin is a release tag's commit, the cache only when FLYDSL_CACHE is
# set; the source way always gives a tree or fails.
STRATEGY: Mapping[Strategy, Tuple[Way, ...]] = {
    Strategy.AUTO: (Way.REUSE, Way.RELEASE, Way.CACHE, Way.SOURCE),
    Strategy.SOURCE: (Way.REUSE, Way.CACHE, Way.SOURCE),
    Strategy.RELEASE: (Way.REUSE, Way.RELEASE),
    Strategy.REUSE_ONLY: (Way.REUSE,),
}


def provisioning(strategy: Strategy) -> Tuple[Way, ...]:
    """The ways that make a tree (all but reuse), in order."""
    return tuple(w for w in STRATEGY[strategy] if w is not Way.REUSE)


def tries(strategy: Strategy, way: Way) -> bool:
    return way in STRATEGY[strategy]


def provisions(strategy: Strategy) -> bool:
    return bool(provisioning(strategy))


def demands(strategy: Strategy, way: Way) -> bool:
    """Whether ``way`` is the strategy's only way to make a tree: its failure is the run's."""
    return provisioning(strategy) == (way,)


def falls_back(strategy: Strategy) -> bool:
    """Whether a source build follows a release that does not apply (``auto``): then what blocks only a build
    does not block, and a build that cannot succeed may suggest a release."""
    ways = provisioning(strategy)
    return Way.RELEASE in ways and Way.SOURCE in ways and ways.index(Way.RELEASE) < ways.index(Way.SOURCE)
