"""docs/reference.md is generated from the code (docs/make_reference.py): CI fails when it drifts, i.e. when a
setting, an exit code, a stage, a path of layout.py or a JSON Schema changed and the reference was not
regenerated (`python docs/make_reference.py --update`)."""

from __future__ import annotations

import os
import subprocess
import sys

TOP = os.path.join(os.path.dirname(__file__), "..", "..")
GENERATOR = os.path.join(TOP, "docs", "make_reference.py")


def check(*args: str) -> "subprocess.CompletedProcess[str]":
    return subprocess.run([sys.executable, GENERATOR, "--check", *args], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=120)


def test_docs_reference_md_is_what_the_code_generates() -> None:
    out = check()
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_stale_reference_fails_the_check_with_a_diff(tmp_path: "os.PathLike[str]") -> None:
    with open(os.path.join(TOP, "docs", "reference.md"), encoding="utf-8") as handle:
        text = handle.read()
    stale = os.path.join(str(tmp_path), "reference.md")
    with open(stale, "w", encoding="utf-8") as handle:
        handle.write(text.replace("| 64 | `BAD_INPUT` |", "| 65 | `BAD_INPUT` |"))
    out = check("--file", stale)
    assert out.returncode == 1
    assert "-| 65 | `BAD_INPUT` |" in out.stdout and "+| 64 | `BAD_INPUT` |" in out.stdout, out.stdout
    assert "docs/reference.md is stale: run `python docs/make_reference.py --update`" in out.stderr


def test_every_setting_and_exit_code_is_in_the_reference() -> None:
    from ensure_flydsl.errors import ExitCode
    from ensure_flydsl.settings import SETTINGS

    with open(os.path.join(TOP, "docs", "reference.md"), encoding="utf-8") as handle:
        text = handle.read()
    for setting in SETTINGS:
        assert f"| `{setting.env}` | `{setting.flag}" in text, setting.env
    for code in ExitCode:
        assert f"| {int(code)} | `{code.name}` |" in text, code


def test_the_readme_is_short_opens_with_the_two_commands_and_links_only_what_exists() -> None:
    """Issue 27, item 5: a newcomer reads the README in five minutes (at most 120 lines), its first block is
    the two set-up commands (.ci/run reads the second), and every file it links is there."""
    import re

    with open(os.path.join(TOP, "README.md"), encoding="utf-8") as handle:
        text = handle.read()
    assert len(text.splitlines()) <= 120
    first = text.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert len(first) == 2 and first[0].startswith("python3 -m pip install . && ensure-flydsl")
    assert "pytest" in first[1]
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if "://" not in target:
            assert os.path.exists(os.path.join(TOP, target)), target
