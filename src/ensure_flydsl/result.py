"""What ``ensure`` returns.  A module of its own, light to import: the warm path builds one without
loading the machinery of a full run."""

from __future__ import annotations

import dataclasses
import enum
from typing import Dict, List, Optional


class How(str, enum.Enum):
    """How the tree in use came to be (the env file's twin and ``status`` show it)."""

    REUSED = "reused"  # found on the interpreter's path, or in a root another tool made
    BUILT = "built"  # a source build of the pin
    RELEASED = "released"  # the pin's release wheel beside its kernels/
    CACHED = "cached"  # a tree another host built, from the binary cache

    def __str__(self) -> str:
        return self.value


class Action(str, enum.Enum):
    """What one call did."""

    WARM = "warm"  # answered from the fingerprint: nothing changed, no probe
    VERIFIED = "verified"  # the full probe confirmed the root's own tree
    REUSED = "reused"  # a tree found elsewhere on the path
    PROVISIONED = "provisioned"  # the root's tree was made (or finished) by this call

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(frozen=True)
class Result:
    """What ``ensure`` returns: the tree in use and how it was obtained."""

    how: How
    action: Action
    root: str
    tree: str
    version: str
    python: str
    python_version: str
    abi: str
    commit: Optional[str]
    env: Dict[str, str]
    env_file: str
    prepend: List[str]  # the folders the env file puts first on PYTHONPATH
    files: Dict[str, str]
    durations: Dict[str, float]
    run_id: str

    def to_json(self) -> Dict[str, object]:
        data = dataclasses.asdict(self)
        data["durations"] = {k: round(v, 3) for k, v in self.durations.items()}
        return data
