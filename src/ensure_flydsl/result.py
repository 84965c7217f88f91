"""What ``ensure`` returns.  A module of its own, light to import: the warm path builds one without
loading the machinery of a full run."""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional


@dataclasses.dataclass(frozen=True)
class Result:
    """What ``ensure`` returns: the tree in use and how it was obtained."""

    how: str  # reused | built | released | cached: how the tree came to be
    # What this call did: "warm" (answered from the fingerprint: nothing changed, no probe), "verified" (the
    # full probe confirmed the root's tree), "reused" (a tree found elsewhere on the path), "provisioned".
    action: str
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
