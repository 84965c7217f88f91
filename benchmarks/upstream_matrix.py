"""What ensure-flydsl reads and decides for every tag of the real FlyDSL repository and its default branch.

    ENSURE_FLYDSL_REAL_REPO=/path/to/FlyDSL python benchmarks/upstream_matrix.py [--wheels DIR] [--no-wheels]
        [--python PY] [--only REF ...] [--markdown]

For each ref, from the repository's git objects (no checkout), with the tool's own readers:

* the LLVM commit and the file it is read from, and the other MLIR inputs (patches build_llvm.sh names, every
  file of a folder it names, the variables it lets the caller override beyond those every tag has and those
  the tool sets): ``source/needs.py``;
* the knobs of the scripts the tool sets for the build (``PYTHON_EXECUTABLE``, ``FLY_BUILD_DIR``: which of
  build_llvm.sh and build.sh read them) and the nanobind the build is held to (``source/needs.py``);
* the submodules (``.gitmodules``);
* where the default required modules (``FLYDSL_REQUIRE=flydsl,kernels.moe_gemm_2stage``) are;
* what the requirements preflight says (``doctor/diagnose.py: assess`` with ``--python``, default this
  interpreter): ok, or the module it refuses and why;
* what ``ensure-flydsl doctor --json`` (strategy source, a fresh root, the repository as FLYDSL_REPO) says:
  its requirements and mlir checks, and the build needs it read;
* for a release tag whose wheel the package index has (one ``pip index versions flydsl`` look-up): whether
  the release provider's provenance check (``ways/release/wheels.py: check_provenance``, the tracked files of
  python/flydsl against the wheel) passes.  Wheels (~75 MB, one a tag, for this interpreter) are downloaded
  with pip into ``--wheels`` (kept there for the next run).

Prints one block a ref, or with ``--markdown`` the table docs/UPSTREAM.md holds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Sequence

from packaging.version import InvalidVersion, Version

from ensure_flydsl.doctor.diagnose import absent_reason, advised_require, assess
from ensure_flydsl.settings import DEFAULT_REQUIRE
from ensure_flydsl.source.git import CommitFiles, read_texts, resolve_in
from ensure_flydsl.source.needs import TOOL_SET, BuildNeeds, LlvmInputs, code_lines, pin_needs
from ensure_flydsl.source.requirements import Sources, absent_modules, read_sources, source_file, tag_version
from ensure_flydsl.ways.release.wheels import check_provenance

BASE_VARIABLES = ("LLVM_INSTALL_DIR", "LLVM_INSTALL_TGZ", "LLVM_PACKAGE_INSTALL", "LLVM_REF", "LLVM_COMMIT",
                  "LLVM_REMOTE", "LLVM_TARGETS_TO_BUILD")
TOOL_KNOBS = ("PYTHON_EXECUTABLE", "FLY_BUILD_DIR")  # ways/source/environment.py sets them for the build
SCRIPTS = ("scripts/build_llvm.sh", "scripts/build.sh")


def git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], check=True, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE).stdout.decode(errors="replace")


def ref_order(tag: str) -> "tuple[int, object]":
    try:
        return 0, Version(tag.lstrip("v"))
    except InvalidVersion:
        return 1, tag


def refs(repo: str, only: Sequence[str]) -> List[str]:
    if only:
        return list(only)
    tags = sorted(git(repo, "tag").split(), key=ref_order)
    head = git(repo, "symbolic-ref", "--short", "HEAD").strip() or "main"
    return tags + [head]


def where_modules(sources: Sources, require: Sequence[str]) -> str:
    from ensure_flydsl.layout import PACKAGE_SOURCES

    said = []
    absent = {a.module: a for a in absent_modules(require, sources)}
    for module in require:
        if module in absent:
            instead = absent[module].instead
            said.append(f"{module}: absent" + (f", at {', '.join(p for _, p in instead)}" if instead else ""))
        else:
            path = source_file(module, sources, dict(PACKAGE_SOURCES))
            said.append(f"{module}: {path or 'no source file (not checked: the build adds to it)'}")
    return "; ".join(said)


def llvm_said(inputs: LlvmInputs) -> str:
    if inputs.commit is None:
        return f"unknown ({inputs.problem})"
    return f"{inputs.commit[:12]} ({inputs.commit_from})"


def other_inputs(inputs: LlvmInputs) -> str:
    parts = [f"{path} {digest[:12] if digest else '(absent)'}" for path, digest in inputs.files]
    extra = [v for v in inputs.variables if v not in BASE_VARIABLES and v not in TOOL_SET]
    if extra:
        parts.append("overridable: " + ", ".join(extra))
    missing = [v for v in BASE_VARIABLES if v not in inputs.variables]
    if missing:
        parts.append("not overridable: " + ", ".join(missing))
    return "; ".join(parts) or "build_llvm.sh only"


def knobs(repo: str, commit: str, needs: BuildNeeds) -> str:
    """Which script reads each knob the tool sets, and the nanobind the build is held to."""
    texts = {path: code_lines(text) for path, text in read_texts(CommitFiles(repo, commit), SCRIPTS).items()}
    parts = [f"nanobind {needs.nanobind_spec}"]
    for knob in TOOL_KNOBS:
        where = [os.path.basename(p) for p in SCRIPTS if re.search(rf"\b{knob}\b", texts.get(p, ""))]
        parts.append(f"{knob}: {', '.join(where) or 'neither script'}")
    return "; ".join(parts)


def preflight(sources: Sources, python: str, ref: str, require: Sequence[str] = DEFAULT_REQUIRE) -> str:
    finding = assess(sources, python, require, os.environ, 120.0, "--python", ref)
    if finding.absent:
        advised = advised_require(finding)
        said = "exit 6: " + absent_reason(finding)
        if advised:
            said += f"; with FLYDSL_REQUIRE={advised}: " + preflight(sources, python, ref, advised.split(","))
        return said
    needed = finding.names(finding.needed) or "nothing third-party"
    if finding.missing:
        return f"exit 6: {python} lacks {finding.names(finding.missing)} (needs {needed})"
    return f"ok (needs {needed})"


def doctor(repo: str, ref: str, work: str, python: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLYDSL_", "LLVM_"))}
    env.update({"FLYDSL_REPO": repo, "FLYDSL_PIN": ref, "FLYDSL_STRATEGY": "source",
                "FLYDSL_ROOT": os.path.join(work, "doctor-root", "FlyDSL"), "FLYDSL_PYTHON": python})
    out = subprocess.run([sys.executable, "-m", "ensure_flydsl", "doctor", "--json"], env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600, check=False)
    try:
        data = json.loads(out.stdout)
    except ValueError:
        return {"requirements": f"no answer (exit {out.returncode}): {out.stderr.strip()[-200:]}", "mlir": "",
                "needs": ""}
    checks = {c["name"]: c for c in data.get("checks", [])}
    said = {}
    for name in ("requirements", "mlir"):
        check = checks.get(name)
        said[name] = f"[{check['status']}] {check['detail']}" if check else "(not run)"
    needs = data.get("needs") or {}
    said["needs"] = str(needs.get("llvm_commit") or "no LLVM commit")
    return said


def wheel_versions(python: str) -> List[str]:
    out = subprocess.run([python, "-m", "pip", "index", "versions", "flydsl", "--disable-pip-version-check"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False, timeout=120)
    match = re.search(r"Available versions:\s*(.+)", out.stdout)
    return [v.strip() for v in match.group(1).split(",")] if match else []


def wheel_for(version: str, folder: str) -> Optional[str]:
    os.makedirs(folder, exist_ok=True)
    for name in os.listdir(folder):
        if name.startswith(f"flydsl-{version}-") and name.endswith(".whl"):
            return os.path.join(folder, name)
    out = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
                          "--disable-pip-version-check", "-d", folder, f"flydsl=={version}"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)
    if out.returncode != 0:
        return None
    return wheel_for(version, folder) if any(n.startswith(f"flydsl-{version}-") for n in os.listdir(folder)) else None


def provenance(repo: str, commit: str, version: str, folder: str, work: str) -> str:
    wheel = wheel_for(version, folder)
    if wheel is None:
        return f"flydsl {version}: no wheel for this interpreter"
    sources = os.path.join(work, f"src-{commit[:12]}")
    os.makedirs(sources, exist_ok=True)
    archive = subprocess.run(["git", "-C", repo, "archive", commit, "python/flydsl"], check=True,
                             stdout=subprocess.PIPE).stdout
    subprocess.run(["tar", "-x", "-C", sources], input=archive, check=True)
    listing = git(repo, "ls-tree", "-r", "-z", "--full-tree", commit, "--", "python/flydsl/")
    files = [e.partition("\t")[2][len("python/flydsl/"):] for e in listing.split("\0")
             if e and e.split(" ")[1:2] == ["blob"]]
    found = check_provenance(wheel, os.path.join(sources, "python", "flydsl"), files)
    return f"{os.path.basename(wheel)}: {'passes' if found.proven else 'FAILS'} ({found.summary()})"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--wheels", default=os.path.expanduser("~/.cache/ensure-flydsl/upstream-wheels"))
    parser.add_argument("--no-wheels", action="store_true")
    parser.add_argument("--python", default=sys.executable, help="the interpreter the preflight asks")
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    repo = os.environ.get("ENSURE_FLYDSL_REAL_REPO")
    if not repo:
        print("ENSURE_FLYDSL_REAL_REPO is not set: nothing to read")
        return 0
    versions = [] if args.no_wheels else wheel_versions(sys.executable)
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for ref in refs(repo, args.only):
            commit = resolve_in(repo, ref)
            if commit is None:
                continue
            needs = pin_needs(CommitFiles(repo, commit), {})
            inputs = needs.llvm
            assert inputs is not None
            sources = read_sources(CommitFiles(repo, commit))
            release = tag_version(ref)
            row = {
                "ref": ref, "commit": commit[:12], "llvm": llvm_said(inputs), "inputs": other_inputs(inputs),
                "build knobs": knobs(repo, commit, needs),
                "submodules": ", ".join(p for p, _ in needs.submodules) or "none",
                "modules": where_modules(sources, DEFAULT_REQUIRE),
                "preflight": preflight(sources, args.python, ref),
            }
            row.update({f"doctor {k}": v for k, v in doctor(repo, ref, work, args.python).items()})
            if release and release in versions:
                row["wheel"] = provenance(repo, commit, release, args.wheels, work)
            else:
                row["wheel"] = "no wheel on the index" if release else "not a release"
            rows.append(row)
            if not args.markdown:
                print(f"== {ref} ({commit[:12]})")
                for key, value in row.items():
                    if key not in ("ref", "commit"):
                        print(f"  {key}: {value}")
                sys.stdout.flush()
    if args.markdown:
        print_markdown(rows)
    return 0


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def print_markdown(rows: List[Dict[str, str]]) -> None:
    columns = ["ref", "commit", "llvm", "inputs", "build knobs", "submodules", "modules", "preflight",
               "doctor requirements", "doctor mlir", "wheel"]
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(cell(row.get(c, "")) for c in columns) + " |")


if __name__ == "__main__":
    sys.exit(main())
