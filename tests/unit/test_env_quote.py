"""The env file quotes every value as shlex.quote does: sourcing it never runs code that came from a path."""

from __future__ import annotations

import os
import shlex
import subprocess

from ensure_flydsl.runs.markers import EnvFile


def test_the_env_file_quotes_every_value_with_it() -> None:
    text = EnvFile("/r o/o't", ("/r o/o't", "/p$q"), "/s h", True).text()
    assert "export FLYDSL_ROOT='/r o/o'\"'\"'t'" in text
    assert f'[ -n "${{FLYDSL_SHIM_DIR:-}}" ] || FLYDSL_SHIM_DIR={shlex.quote("/s h")}\nexport FLYDSL_SHIM_DIR' in text
    assert f"for _ensure_flydsl_d in {shlex.quote('/r o/o' + chr(39) + 't')} {shlex.quote('/p$q')}; do" in text


def test_sourcing_keeps_what_the_caller_set(tmp_path: "os.PathLike[str]") -> None:
    """GEAK's own FLYDSL_SHIM_DIR (a tuned overlay) and VLLM_USE_FLYDSL_MOE=0 (its A/B baselines) survive
    sourcing the env file, under bash and sh; unset, they take the file's values; FLY_BUILD names the build."""
    path = os.path.join(str(tmp_path), "flydsl_env.sh")
    with open(path, "w") as handle:
        handle.write(EnvFile("/r", ("/r",), "/shim dir}'x", True).text())
    show = f'. "{path}"; printf "%s|%s|%s" "$FLYDSL_SHIM_DIR" "$VLLM_USE_FLYDSL_MOE" "$FLY_BUILD"'
    for shell in ("bash", "sh"):
        for given, expected in (({}, "/shim dir}'x|1|build-fly"),
                                ({"FLYDSL_SHIM_DIR": "/tuned", "VLLM_USE_FLYDSL_MOE": "0"}, "/tuned|0|build-fly"),
                                ({"FLYDSL_SHIM_DIR": "", "FLY_BUILD": "other"}, "/shim dir}'x|1|build-fly")):
            out = subprocess.run([shell, "-u", "-c", show], env={"PATH": "/usr/bin:/bin", **given}, text=True,
                                 stdout=subprocess.PIPE, check=True)
            assert out.stdout == expected, (shell, given)
            environ = {"PATH": "/usr/bin:/bin", **given}
            EnvFile("/r", ("/r",), "/shim dir}'x", True).apply(environ, [])
            assert "|".join(environ[k] for k in ("FLYDSL_SHIM_DIR", "VLLM_USE_FLYDSL_MOE", "FLY_BUILD")) == expected
