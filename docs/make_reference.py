"""docs/reference.md, generated from the code: every setting, exit code, stage, file and JSON key.

    python docs/make_reference.py            # print the reference (markdown)
    python docs/make_reference.py --check    # exit 1, with a diff, when docs/reference.md is not what it prints
    python docs/make_reference.py --update   # rewrite docs/reference.md

Nothing here is written by hand but the headings and the bad values each setting is tried with: the rows are
the settings table (src/ensure_flydsl/settings.py), the defaults ``load_settings`` gives with no flag and no
variable, what each setting allows as its own parser words it when it refuses a bad value, the exit codes and
stages (errors.py), every path of layout.py (each function called with placeholders) and its docstring, and the
JSON Schemas in docs/schema/.  tests/unit/test_reference.py runs ``--check``, so a change to any of them that is
not carried into docs/reference.md fails CI.
"""

from __future__ import annotations

import argparse
import difflib
import glob
import inspect
import json
import os
import sys
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)
REFERENCE = os.path.join(HERE, "reference.md")
sys.path.insert(0, os.path.join(TOP, "src"))

from ensure_flydsl import layout, settings  # noqa: E402
from ensure_flydsl.errors import FAILURE_CODES, BadInput, ExitCode, Stage  # noqa: E402
from ensure_flydsl.settings import EMPTY_REFUSED, FLAG, LIST, SETTINGS, SWITCH, load_settings  # noqa: E402

COMMAND = "python docs/make_reference.py --update"

# The bad values each setting is tried with: the reference shows what its parser says is allowed for each.
BAD_VALUES: Dict[str, Sequence[str]] = {
    "root": ["/", "a:b", "a\nb"],
    "store": ["a\nb"],
    "min_version": ["not-a-version"],
    "pin": ["-x"],
    "repo": ["-x", "ext::sh -c id"],
    "lock_file": ["a\nb"],
    "fail_marker": ["a\nb"],
    "rocm_path": ["a\nb"],
    "mlir_path": ["a\nb"],
    "python": ["a\nb"],
    "shim_dir": ["a\nb"],
    "vllm_moe": ["maybe"],
    "require": ["not a module"],
    "strategy": ["fastest"],
    "jobs": ["0"],
    "lock_timeout": ["-1"],
    "probe_timeout": ["0"],
    "cache": ["-x"],
    "lease_ttl": ["0"],
    "verify": ["maybe"],
    "fix_rocm_in_place": ["maybe"],
    "git_mirrors": ["https://github.com/", "ext::x=/srv/m"],
    "exact_pin": ["maybe"],
    "cache_signing_key": ["/nonexistent/ci.secret"],
    "cache_trusted_keys": ["", "ci-2026:not-base64"],
    "mlir_url": ["llvm.tar.gz"],
}
# Variables read outside the settings table, with the check that refuses a bad value.
OTHER_VARIABLES: Tuple[Tuple[str, str, Callable[[str], object]], ...] = (
    (settings.HOST_ID, "names this host in the build lease records (default: the host name)",
     lambda value: settings.check_host_id({settings.HOST_ID: value})),
    ("GIT_CONFIG_COUNT", "the caller's own git config entries; the mirrors' go after them (read with mirrors set)",
     lambda value: settings.git_config_count({"GIT_CONFIG_COUNT": value})),
)
OTHER_BAD: Dict[str, Sequence[str]] = {settings.HOST_ID: ["a\nb"], "GIT_CONFIG_COUNT": ["x"]}

# The placeholders layout.py's functions are called with, by parameter name.
ROOT = "BASE/ROOT"
PLACEHOLDERS: Dict[str, object] = {
    "root": ROOT, "base_dir": "BASE", "tools": layout.tools_dir(ROOT), "overlay": layout.rocm_overlay(ROOT),
    "runs": layout.runs_dir(ROOT), "run_id": "<run id>", "step": "<step>", "host_dir": "HOST", "timings": "HOST/runs",
    "store": "STORE", "key": "<tree key>", "tree": "STORE/trees/<tree key>",
    "install": os.path.join(layout.cached_mlir_dir("BASE"), "<key>"),
    "environ": {"XDG_CACHE_HOME": "/XDG_CACHE_HOME"},
}


def cell(text: object) -> str:
    """A markdown table cell: pipes escaped, line breaks shown as spaces."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def allowed(parse: Callable[[str], object], values: Sequence[str]) -> str:
    """What the parser says is allowed, for each bad value (once each), in its own words."""
    said: List[str] = []
    for value in values:
        try:
            parse(value)
        except BadInput as refusal:
            text = refusal.reason.split(" is not allowed: ", 1)[-1]
            said.extend(part for part in text.split("; ") if part not in said)  # a shared start once
        else:
            raise SystemExit(f"make_reference.py: {value!r} is no bad value any more; change BAD_VALUES")
    return "; ".join(f"`{cell(text)}`" if text.startswith("one of") else cell(text) for text in said)


def default_text(value: object) -> str:
    if value is None or value == ():
        return "unset"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, tuple):
        return "`" + ",".join(str(item) for item in value) + "`"
    if isinstance(value, float) and value == int(value):
        value = int(value)
    return f"`{value}`"


def flag_text(flag: str, kind: str, metavar: str) -> str:
    if kind == SWITCH:
        return f"`{flag}` / `--no-{flag[2:]}`"
    if kind == FLAG:
        return f"`{flag}`"
    if kind == LIST:
        return f"`{flag} {metavar}` (repeatable)"
    return f"`{flag} VALUE`"


def settings_section() -> List[str]:
    defaults = load_settings({}, {})
    lines = [
        "## Settings",
        "",
        "Every setting is a variable and a flag (a flag wins; an empty variable means the default"
        + (", except " + ", ".join(f"`{s.env}`" for s in SETTINGS if s.name in EMPTY_REFUSED)
           + ", where set but empty is refused" if EMPTY_REFUSED else "")
        + "). The API keyword is the name. A value the setting does not allow is exit 64, before anything is"
        " touched, with one line naming the setting; \"allowed\" is that line's end for the bad values tried.",
        "",
        "| variable | flag | API keyword | kind | default | what it is | allowed (as the refusal says) |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in SETTINGS:
        parse = s.parse
        said = allowed(lambda value, p=parse, e=s.env: p(e, value), BAD_VALUES[s.name])  # type: ignore[misc]
        lines.append(f"| `{s.env}` | {flag_text(s.flag, s.kind, s.metavar)} | `{s.name}` | {s.kind} | "
                     f"{default_text(getattr(defaults, s.name))} | {cell(s.help)} | {said} |")
    lines += ["", "Variables outside the table (no flag):", "", "| variable | what it is | allowed |", "|---|---|---|"]
    for name, what, check in OTHER_VARIABLES:
        lines.append(f"| `{name}` | {cell(what)} | {allowed(check, OTHER_BAD[name])} |")
    return lines


def exit_codes_section() -> List[str]:
    lines = ["## Exit codes", "",
             "The stages that fail with a code are those of errors.py's `Stage`; a failed run records one of the "
             "failure codes (every code but 0 and 75).", "",
             "| code | name | meaning | stages that fail with it | a failed run may record it |",
             "|---|---|---|---|---|"]
    for code in ExitCode:
        stages = ", ".join(f"`{stage.value}`" for stage in Stage if stage.exit_code == code)
        recorded = "yes" if int(code) in FAILURE_CODES else "no"
        lines.append(f"| {int(code)} | `{code.name}` | {cell(code.meaning)} | {stages} | {recorded} |")
    lines += ["", "### Stages", "",
              "In the order a run goes through them (`stage` in the failure marker, the run records and JSON).", "",
              "| stage | exit code | plans (routes) | doctor's order |", "|---|---|---|---|"]
    for stage in Stage:
        shown = "several" if stage.exit_code is None else str(int(stage.exit_code))
        plans = ", ".join(plan.value for plan in sorted(stage.plans, key=lambda p: p.value))
        order = "" if stage.order is None else str(stage.order)
        lines.append(f"| `{stage.value}` | {shown} | {plans} | {order} |")
    return lines


def layout_paths() -> List[Tuple[str, str, str]]:
    """(function, path with placeholders, first sentence of its docstring) of every path function."""
    rows = []
    for name, function in inspect.getmembers(layout, lambda m: inspect.isfunction(m) or isinstance(m, layout.Under)):
        if isinstance(function, layout.Under):
            rows.append((name, function(str(PLACEHOLDERS[function.base])), ""))
            continue
        if function.__module__ != layout.__name__ or name.startswith("_"):
            continue
        params = inspect.signature(function).parameters
        path = function(*(PLACEHOLDERS[param] for param in params))
        if isinstance(path, (tuple, list)):
            path = ", ".join(path)
        doc = (function.__doc__ or "").strip().split("\n\n")[0]
        rows.append((name, str(path), " ".join(doc.split())))
    return rows


def files_section() -> List[str]:
    paragraphs = inspect.cleandoc(layout.__doc__ or "").split("\n\n")
    lines = ["## Files", "", "layout.py's map (BASE is the root's parent folder, `$(dirname ROOT)`):", "", "```"]
    lines += "\n\n".join(paragraphs[1:-1]).splitlines()
    lines += ["```", "", " ".join(paragraphs[-1].split()), "",
              f"Every path function of layout.py, called with ROOT = `{ROOT}`, BASE and HOST "
              "(`${XDG_CACHE_HOME:-~/.cache}/ensure-flydsl`):", "",
              "| function | path | what |", "|---|---|---|"]
    for name, path, doc in layout_paths():
        lines.append(f"| `{name}` | `{cell(path)}` | {cell(doc)} |")
    return lines


def type_text(schema: Mapping[str, object]) -> str:
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    if "enum" in schema:
        return "one of " + ", ".join(f"`{json.dumps(value)}`" for value in schema["enum"])  # type: ignore[attr-defined]
    if "$ref" in schema:
        return f"see `{str(schema['$ref']).split('/')[-1]}`"
    if "oneOf" in schema:
        return " or ".join(type_text(branch) for branch in schema["oneOf"])  # type: ignore[attr-defined]
    kind = schema.get("type", "any")
    return " or ".join(kind) if isinstance(kind, list) else str(kind)


def key_rows(properties: Mapping[str, Mapping[str, object]], required: Sequence[str], defs: Mapping[str, object],
             prefix: str = "") -> List[str]:
    """One row a key; a key only required here is one of result.schema.json's (or its $defs')."""
    rows = []
    for key in list(properties) + [k for k in required if k not in properties]:
        schema = properties.get(key, {"$ref": "result.schema.json"})
        meaning = schema.get("description", "")
        ref = str(schema.get("$ref", ""))
        if not meaning and ref.startswith("#/$defs/"):
            meaning = defs.get(ref.split("/")[-1], {}).get("description", "")  # type: ignore[attr-defined]
        rows.append(f"| `{prefix}{key}` | {'yes' if key in required else 'no'} | {cell(type_text(schema))} | "
                    f"{cell(meaning)} |")
    return rows


def schema_section() -> List[str]:
    lines = ["## JSON keys", "",
             "Every key of the JSON Schemas in docs/schema/ (`required`: the command always prints it). A command "
             "prints the keys of `result.schema.json` and its own.", ""]
    for path in sorted(glob.glob(os.path.join(HERE, "schema", "*.schema.json"))):
        with open(path, encoding="utf-8") as handle:
            schema = json.load(handle)
        lines += [f"### {os.path.basename(path)}: {schema.get('title', '')}", ""]
        if schema.get("description"):
            lines += [str(schema["description"]), ""]
        lines += ["| key | required | type | meaning |", "|---|---|---|---|"]
        defs = schema.get("$defs", {})
        lines += key_rows(schema.get("properties", {}), schema.get("required", []), defs)
        for branch in schema.get("oneOf", []):
            when = "on success" if branch.get("properties", {}).get("ok", {}).get("const") else "on failure"
            own = {k: v for k, v in branch.get("properties", {}).items() if k != "ok"}
            lines += [f"| *{when}:* | | | |"] + key_rows(own, branch.get("required", []), defs)
        for name, definition in defs.items():
            for option in definition.get("oneOf", []):
                if "properties" in option:
                    lines += key_rows(option["properties"], option.get("required", []), defs, prefix=f"{name}.")
        lines.append("")
    return lines


def render() -> str:
    lines = ["# Reference", "",
             f"<!-- Generated by docs/make_reference.py from the code: do not edit; run `{COMMAND}`. -->", "",
             "Generated from the code, and checked in CI (`python docs/make_reference.py --check`): the settings "
             "table, the exit codes and stages, the on-disk layout and the JSON Schemas. What each means in use: "
             "[guide.md](guide.md), [agents.md](agents.md), [troubleshooting.md](troubleshooting.md).", "",
             "- [Settings](#settings)", "- [Exit codes](#exit-codes)", "- [Files](#files)", "- [JSON keys](#json-keys)",
             ""]
    for section in (settings_section(), exit_codes_section(), files_section(), schema_section()):
        lines += section + [""]
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit 1 with a diff when docs/reference.md is stale")
    mode.add_argument("--update", action="store_true", help="rewrite docs/reference.md")
    parser.add_argument("--file", default=REFERENCE, help="the reference to check or rewrite (docs/reference.md)")
    args = parser.parse_args(argv)
    text = render()
    if args.update:
        with open(args.file, "w", encoding="utf-8") as handle:
            handle.write(text)
        return 0
    if not args.check:
        sys.stdout.write(text)
        return 0
    try:
        with open(args.file, encoding="utf-8") as handle:
            current = handle.read()
    except FileNotFoundError:
        current = ""
    if current == text:
        return 0
    sys.stdout.writelines(difflib.unified_diff(current.splitlines(True), text.splitlines(True),
                                               "docs/reference.md", "docs/make_reference.py's output"))
    print(f"\ndocs/reference.md is stale: run `{COMMAND}` and commit it", file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
