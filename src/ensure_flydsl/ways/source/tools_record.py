"""The record of the build tools provided privately (``provided/tools.json``, ``tools.py`` writes it): read back
at one place, each tool's entry checked for what it means before it steers anything.

An entry is what ``tools.py: _install_privately`` made: the tool's version (a dotted version, or "unknown"
when its wheel named none), the pip spec it was installed from, its ``--target`` folder (``<provided>/<name>``,
the only place the tool installs it) and its programs (the tool's own names, each a file inside that
folder).  An entry that is not one (a planted ``programs`` pointing at ``/bin/true``, a folder elsewhere, a
tool this version does not provide) is treated as absent: the tool is looked for on the machine and provided
again, and the run says so in one line.  Whether a good entry is still usable (its files there, its version
good enough for the pin) is :func:`usable`'s.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Dict, Mapping, Optional, Tuple

from ensure_flydsl.support import fields
from ensure_flydsl.support.files import read_json
from ensure_flydsl.ways.source.tool_versions import accepts, version_of

UNKNOWN_VERSION = "unknown"  # what an entry records when the installed wheel named no version


@dataclass(frozen=True)
class ProvidedTool:
    """One tool installed privately: its version, the pip spec, its folder and its programs (name -> file)."""

    version: str
    spec: str
    folder: str
    programs: Dict[str, str]

    def to_json(self) -> Dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, name: str, data: object, root: str,
                  executables: Mapping[str, Tuple[str, ...]]) -> Optional["ProvidedTool"]:
        """The entry of ``name`` under the provided root ``root``, or None when it is not one the tool writes."""
        if not isinstance(data, dict):
            return None
        version, spec = fields.short_text(data.get("version")), fields.short_text(data.get("spec"))
        folder, programs = fields.absolute_path(data.get("folder")), fields.text_map(data.get("programs"))
        if version is None or (version != UNKNOWN_VERSION and version_of(version) != version):
            return None
        if spec is None or not spec.startswith(name) or folder != os.path.join(root, name) or programs is None:
            return None
        own = executables.get(name, ())
        if (own and name not in programs) or not set(programs) <= set(own):
            return None
        inside = folder + os.sep
        if not all(fields.absolute_path(p) is not None and os.path.normpath(p).startswith(inside)
                   for p in programs.values()):
            return None
        return cls(version=version, spec=spec, folder=folder, programs=programs)


@dataclass(frozen=True)
class ToolsRecord:
    """``tools.json`` as it reads back: the good entries, and why the rest was left out (None: nothing was)."""

    entries: Dict[str, ProvidedTool]
    ignored: Optional[str] = None


def read_tools_record(path: str, root: str, executables: Mapping[str, Tuple[str, ...]],
                      providable: Tuple[str, ...]) -> ToolsRecord:
    """The record at ``path`` (none when absent); an entry (or a file) that is not one the tool writes is left
    out, and ``ignored`` says which, as a clause."""
    if not os.path.lexists(path):
        return ToolsRecord({})
    data = read_json(path)
    if data is None:
        return ToolsRecord({}, "it is not a JSON object the tool writes")
    entries: Dict[str, ProvidedTool] = {}
    bad = []
    for name, value in data.items():
        entry = ProvidedTool.from_json(name, value, root, executables) if name in providable else None
        if entry is None:
            bad.append(name)
        else:
            entries[name] = entry
    if not bad:
        return ToolsRecord(entries)
    return ToolsRecord(entries, f"its record of {', '.join(sorted(bad))} is not one this tool writes (a version, a "
                       f"pip spec, the folder {os.path.join(root, '<tool>')} and the tool's programs inside it)")


def usable(entry: ProvidedTool, requirement: Optional[str]) -> bool:
    """A tool recorded as provided is still usable: its files are there and its version is good enough."""
    version = entry.version if entry.version != UNKNOWN_VERSION else None
    if not os.path.isdir(entry.folder) or not accepts(version, requirement):
        return False
    return all(os.access(p, os.X_OK) for p in entry.programs.values())
