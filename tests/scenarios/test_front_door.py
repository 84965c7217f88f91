"""The front door (ensure_flydsl/warm.py): a warm call with the raw inputs of an earlier answer is answered from the
root's stamp with no other module of the tool; anything it cannot vouch for (a stamp that is not this user's
own, garbage, other raw inputs, a twin rewritten, a failure marker) is a miss, and the command line answers
as before, then keeps an entry for those inputs."""

from __future__ import annotations

import json
import marshal
import os
import re
import subprocess
import sys
from typing import Dict, List, Tuple

import pytest

from tests.helpers.scenario import ensure_json
from tests.helpers.workspace import Workspace


def call(ws: Workspace, *args: str, cwd: str = "/", **env: str) -> Tuple[bool, subprocess.CompletedProcess]:
    """The tool with ``args``: whether the front door answered alone, and the call."""
    modules, out = imported(ws, *args, cwd=cwd, **env)
    return "ensure_flydsl.cli.main" not in modules, out


def imported(ws: Workspace, *args: str, cwd: str = "/", **env: str) -> Tuple[List[str], subprocess.CompletedProcess]:
    """The tool with ``args`` under ``-X importtime``: the modules it imported, and the call without those lines."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "ensure_flydsl", *args], env=dict(ws.env, **env),
                         cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stderr.splitlines()
    out.stderr = "\n".join(line for line in lines if not line.startswith("import time:"))
    return [line.rsplit("|", 1)[1].strip() for line in lines if line.startswith("import time:")], out


def stamp(ws: Workspace) -> str:
    return os.path.join(ws.root, ".ensure_flydsl", "warm")


def without_clock(text: str) -> List[str]:
    return [re.sub(r"^\[\d\d:\d\d:\d\d\] ", "", line) for line in text.splitlines()]


def test_the_front_door_answers_as_the_command_line_does(ws: Workspace) -> None:
    assert ensure_json(ws, cwd="/")["action"] == "provisioned"
    door, out = call(ws, "--json")
    assert door, "the second call with the same raw inputs is the front door's"
    os.unlink(stamp(ws))
    line, cli = call(ws, "--json")  # the command line's warm answer, which keeps the entry again
    assert not line and os.path.isfile(stamp(ws))
    ours, theirs = json.loads(out.stdout), json.loads(cli.stdout)
    for varying in ("run_id", "elapsed_s", "durations"):
        assert type(ours.pop(varying)) is type(theirs.pop(varying)), varying
    assert ours == theirs and ours["action"] == "warm" and ours["ok"] is True
    events = [json.loads(text) for text in (out.stderr.strip(), cli.stderr.strip())]
    assert [e.pop("time") > 0 for e in events] == [True, True] and events[0] == events[1]
    door, plain = call(ws)
    assert door and plain.stderr == ""
    os.unlink(stamp(ws))
    assert without_clock(call(ws)[1].stdout) == without_clock(plain.stdout)
    assert len(without_clock(plain.stdout)) == 2 and "nothing changed since the last success" in plain.stdout


def test_other_raw_inputs_miss_once_then_have_their_entry(ws: Workspace, tmp_path: "os.PathLike[str]") -> None:
    ensure_json(ws, cwd="/")
    other = str(tmp_path)
    inputs: List[Tuple[Tuple[str, ...], Dict[str, str], str]] = [
        ((), {}, other),  # another working folder
        ((), {"FLYDSL_MIN_VERSION": "0.2.1"}, "/"),  # another value of a setting's variable
        (("--root", ws.root), {}, "/"),  # a flag
        (("ensure", "--json"), {}, "/"),  # the command named: the same raw inputs as none
    ]
    for args, env, cwd in inputs:
        first, _ = call(ws, *args, cwd=cwd, **env)
        second, out = call(ws, *args, cwd=cwd, **env)
        assert second, (args, env, cwd)
        assert ("ensure" in args) or not first, (args, env, cwd)
        if "--json" in args:
            assert json.loads(out.stdout)["action"] == "warm"
    assert call(ws, cwd="/")[0] and call(ws, cwd=other)[0], "each kept its own entry"
    assert not call(ws, "-q", cwd="/")[0] and not call(ws, "-q", cwd="/")[0], "-q is no setting: never an entry"


def test_a_stamp_this_user_did_not_write_alone_is_never_read(ws: Workspace) -> None:
    ensure_json(ws, cwd="/")
    assert call(ws)[0]
    os.chmod(stamp(ws), 0o664)  # another user of the group could have written it
    assert not call(ws)[0]
    assert call(ws)[0], "the command line wrote it again, as this user's own"
    os.chown(stamp(ws), 65534, 65534)
    assert not call(ws)[0]
    for garbage in (b"", b"\x00" * 64, b"not marshal at all", os.urandom(4096)):
        with open(stamp(ws), "wb") as handle:
            handle.write(garbage)
        door, out = call(ws, "--json")
        assert not door and json.loads(out.stdout)["action"] == "warm", garbage[:16]


def test_what_the_fingerprint_and_the_files_say_still_decides(ws: Workspace) -> None:
    ensure_json(ws, cwd="/")
    assert call(ws)[0]
    twin = ws.env_twin()
    with open(ws.env_json, "w") as handle:  # the same twin, written again
        handle.write(json.dumps(twin, indent=2, sort_keys=True) + "\n")
    assert not call(ws)[0] and call(ws)[0]
    with open(ws.fail_marker, "w") as handle:  # whoever's it is, the command line judges it: this one names
        handle.write("{}")                    # no request, so it is taken for the root's own, and withdrawn
    assert not call(ws)[0] and not os.path.exists(ws.fail_marker)
    assert call(ws)[0]
    module = os.path.join(ws.root, "kernels", "moe_gemm_2stage.py")
    with open(module, "a") as handle:
        handle.write("\n# edited\n")
    door, out = call(ws, "--json")
    assert not door and json.loads(out.stdout)["action"] != "warm"


def test_the_stamp_goes_wherever_the_env_file_goes(ws: Workspace) -> None:
    ensure_json(ws, cwd="/")
    assert os.path.isfile(stamp(ws))
    assert ws.run("clean").returncode == 0
    assert not os.path.exists(ws.env_file) and not os.path.exists(stamp(ws))


def test_a_poll_imports_what_it_reads_with_and_no_run(ws: Workspace) -> None:
    """`status`, `wait` and `env` import a command's module on dispatch: none of the pipeline, the doctor, the ways,
    the GEAK folder or the downloads (the cold command line was 6x slower when the parser imported them all)."""
    ensure_json(ws, cwd="/")
    for args in (("status", "--json"), ("wait", "--timeout", "0"), ("env",), ("--root", ws.root, "status")):
        modules = imported(ws, *args)[0]
        assert "ensure_flydsl.runs.answer" in modules, args  # what a reader reads with (`-X importtime` does not
        # list the command's own module: importlib.import_module is not an import statement)
        heavy = [m for m in modules if m.split(".")[:2] in (["ensure_flydsl", p] for p in ("pipeline", "doctor", "ways",
                 "geak")) or m in ("urllib.request", "ssl", "packaging.requirements")]
        assert heavy == [], args


def test_a_shadow_made_or_taken_away_in_the_working_folder_is_said_as_the_command_line_says_it(
        ws: Workspace, tmp_path: "os.PathLike[str]") -> None:
    """The warning that the working folder shadows the tree is the files' now, not those of the call that kept
    the entry: the front door misses when a candidate appeared or went away."""
    here = os.path.join(str(tmp_path), "work")
    os.makedirs(here)
    ensure_json(ws, cwd=here)
    assert call(ws, cwd=here)[0]
    shadow = os.path.join(here, "kernels")
    os.makedirs(shadow)
    door, out = call(ws, cwd=here)
    assert not door and f"warning: {shadow} is imported instead of the tree" in out.stdout, out.stdout
    door, out = call(ws, cwd=here)
    assert door and f"warning: {shadow} is imported instead of the tree" in out.stdout, out.stdout
    os.rmdir(shadow)
    door, out = call(ws, cwd=here)
    assert not door and "warning:" not in out.stdout, out.stdout


def test_a_setting_the_entrys_writer_did_not_know_is_never_taken_as_unset(ws: Workspace) -> None:
    """An entry names the variables its writer's settings read; a FLYDSL_ variable set now that it does not name
    (a setting a later version added) may change the request: a miss, not the writer's answer."""
    ensure_json(ws, cwd="/")
    assert call(ws)[0]
    with open(stamp(ws), "rb") as handle:
        kept = marshal.loads(handle.read())
    for entry in kept["entries"]:
        del entry["environ"]["FLYDSL_REQUIRE"]  # as a writer that knew no FLYDSL_REQUIRE left it
    with open(stamp(ws), "wb") as handle:
        handle.write(marshal.dumps(kept))
    door, out = call(ws, "--json", FLYDSL_REQUIRE="flydsl,kernels")
    assert not door and "kernels" in json.loads(out.stdout)["files"], out.stdout


def test_a_stamp_swapped_after_its_owner_was_checked_is_never_read(
        tmp_path: "os.PathLike[str]", monkeypatch: pytest.MonkeyPatch) -> None:
    """Who owns the stamp is judged on the file read, not on what the path named a moment before: a writer of
    the state folder that swaps in a link to its own stamp between the two is not read."""
    from ensure_flydsl import warm

    root = os.path.join(str(tmp_path), "root")
    os.makedirs(os.path.join(root, ".ensure_flydsl"))
    planted = os.path.join(str(tmp_path), "planted")
    with open(planted, "wb") as handle:
        handle.write(marshal.dumps({"format": warm.STAMP_FORMAT, "root": root, "env_file": b"", "twin": [1, 2, 3],
                                    "print": {}, "entries": [], "tree": {"watch": [], "site_dirs": [], "folders": [],
                                                                        "stamp": ""}}))
    os.chmod(planted, 0o666)  # anyone may have written it
    own = os.path.join(str(tmp_path), "own")
    with open(own, "wb") as handle:
        handle.write(b"")
    os.symlink(planted, warm.stamp_path(root))
    checked = os.lstat(own)  # what the path was when its owner was checked: this user's regular file
    real_lstat = os.lstat
    monkeypatch.setattr(warm.os, "lstat", lambda path: checked if path == warm.stamp_path(root) else real_lstat(path))
    assert warm.read_stamp(root) is None


@pytest.mark.parametrize("closed", [">&-", "2>&-", ">&- 2>&-"])
@pytest.mark.parametrize("args", [(), ("--json",)])
def test_a_warm_answer_with_a_standard_stream_closed_is_no_crash(ws: Workspace, closed: str,
                                                                  args: Tuple[str, ...]) -> None:
    """`ensure-flydsl >&-`: Python starts with sys.stdout None; the front door answers (exit 0) all the same, as
    the command line does, without importing the package to get there."""
    ensure_json(ws, cwd="/")
    assert call(ws, *args)[0]
    script = f'exec "$@" {closed}'
    out = subprocess.run(["bash", "-c", script, "bash", sys.executable, "-X", "importtime", "-m", "ensure_flydsl",
                          *args], env=ws.env, cwd="/", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         timeout=60, check=False)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr[-3000:]
    assert "ensure_flydsl.cli.main" not in out.stderr, "the front door answered alone"
