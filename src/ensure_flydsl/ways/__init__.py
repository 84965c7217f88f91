"""The ways to a FlyDSL tree, one package each, and the one table of which ways each strategy tries.

A way holds its action and its prediction side by side: ``provider.py`` (a :class:`~ensure_flydsl.ways.base.
Provider`: give a verified tree, or None to let the next way try) and ``checks.py`` (the doctor's checks of
what that way needs, each a :class:`~ensure_flydsl.ways.checks.Check`).  The reuse way's action is the
pipeline's decision (``pipeline/decide.py``), handed to the doctor as its check.  ``STRATEGY`` says which ways
a strategy tries, in order; the run (``pipeline/provision.py: providers_for``) and the doctor
(``doctor/diagnose.py: run_checks``) read it alike, so the doctor predicts the branching the run takes.

This module is light (the warm call reads the run's context below it): it imports no way."""

from __future__ import annotations

import enum
from typing import Mapping, Tuple

from ensure_flydsl.settings import Strategy


class Way(str, enum.Enum):
    """One way to a tree: reuse one that is there, install the release wheel, fetch it from the binary cache,
    build it from source, link it from the host store."""

    REUSE = "reuse"
    RELEASE = "release"
    CACHE = "cache"
    SOURCE = "source"
    # The host's store of trees (pipeline/store_way.py): first in every strategy's order that provisions, so
    # it is no strategy's choice and stands in no row of STRATEGY (FLYDSL_STORE=off turns it off).
    STORE = "store"

    def __str__(self) -> str:
        return str(self.value)


# Which ways each strategy tries, in the order it tries them.  The release way applies only when the pin is a
# release tag's commit, the cache only when FLYDSL_CACHE is set; the source way always gives a tree or fails.
STRATEGY: "Mapping[Strategy, Tuple[Way, ...]]" = {
    Strategy.AUTO: (Way.REUSE, Way.RELEASE, Way.CACHE, Way.SOURCE),
    Strategy.SOURCE: (Way.REUSE, Way.CACHE, Way.SOURCE),
    Strategy.RELEASE: (Way.REUSE, Way.RELEASE),
    Strategy.REUSE_ONLY: (Way.REUSE,),
}


def provisioning(strategy: Strategy) -> "Tuple[Way, ...]":
    """The ways that make a tree (all but reuse), in order."""
    return tuple(w for w in STRATEGY[strategy] if w is not Way.REUSE)


def tries(strategy: Strategy, way: Way) -> bool:
    return way in STRATEGY[strategy]


def provisions(strategy: Strategy) -> bool:
    """Whether the strategy may make a tree at all (``reuse-only`` never does)."""
    return bool(provisioning(strategy))


def demands(strategy: Strategy, way: Way) -> bool:
    """Whether ``way`` is the strategy's only way to make a tree (``release``: its failure is the run's)."""
    return provisioning(strategy) == (way,)


def falls_back(strategy: Strategy) -> bool:
    """Whether a source build is the way past a release that does not apply (``auto``): a release wheel makes
    what blocks only a build not block, and a build that cannot succeed may suggest a release instead."""
    ways = provisioning(strategy)
    return Way.RELEASE in ways and Way.SOURCE in ways and ways.index(Way.RELEASE) < ways.index(Way.SOURCE)
