"""Settings: flags over variables, empty variables as defaults, and every refusal naming the setting."""

from __future__ import annotations

import os
from typing import Dict, Optional

import pytest

from ensure_flydsl.errors import BadInput, ExitCode
from ensure_flydsl.settings import (
    DEFAULT_MIN_VERSION,
    DEFAULT_PIN,
    DEFAULT_REPO,
    DEFAULT_ROOT,
    SETTINGS,
    load_settings,
)


def load(flags: Optional[Dict[str, Optional[str]]] = None, **env: str):  # type: ignore[no-untyped-def]
    return load_settings(flags or {}, env)


def refused(flags: Optional[Dict[str, Optional[str]]] = None, **env: str) -> BadInput:
    with pytest.raises(BadInput) as info:
        load(flags, **env)
    assert info.value.code == ExitCode.BAD_INPUT
    assert "\n" not in str(info.value)
    return info.value


def test_defaults_are_the_contracts() -> None:
    s = load()
    assert s.root == DEFAULT_ROOT == "/opt/flydsl/FlyDSL"
    assert s.min_version == DEFAULT_MIN_VERSION == "0.2.2"
    assert s.pin == DEFAULT_PIN == "a35627a2fef0a5a70c63536c4174674223866737"
    assert s.repo == DEFAULT_REPO
    assert s.lock_file == "/opt/flydsl/.flydsl_build.lock"
    assert s.fail_marker == "/opt/flydsl/.flydsl_build.failed"
    assert s.log_file == "/opt/flydsl/ensure_flydsl.log"
    assert s.env_file == "/opt/flydsl/FlyDSL/flydsl_env.sh"
    assert s.require == ("flydsl", "kernels.moe_gemm_2stage")
    assert s.strategy == "auto" and s.vllm_moe is True and s.shim_dir is None and s.jobs is None
    assert s.lock_timeout is None and s.verify is False and s.python == "python3"


def test_every_setting_has_a_variable_and_a_flag() -> None:
    names = {s.name for s in SETTINGS}
    assert names == {"root", "min_version", "pin", "repo", "lock_file", "fail_marker", "rocm_path", "mlir_path",
                     "python", "shim_dir", "vllm_moe", "require", "strategy", "jobs", "lock_timeout", "probe_timeout",
                     "cache", "lease_ttl", "verify", "fix_rocm_in_place", "git_mirrors", "exact_pin",
                     "cache_signing_key", "cache_trusted_keys", "store", "mlir_url"}
    assert all(s.env and s.flag.startswith("--") for s in SETTINGS)


def test_the_store_setting_is_off_or_a_path() -> None:
    assert load(FLYDSL_STORE="off").store == "off" and load(FLYDSL_STORE="OFF").store == "off"
    assert load(FLYDSL_STORE="relative/store").store == os.path.abspath("relative/store")
    assert load().store is None  # the default, in the user's cache folder


def test_empty_variable_means_default() -> None:
    s = load(FLYDSL_MIN_VERSION="", FLYDSL_ROOT="", FLYDSL_JOBS="", FLYDSL_STRATEGY="", FLYDSL_PIN="")
    assert s.min_version == "0.2.2" and s.root == DEFAULT_ROOT and s.jobs is None and s.pin == DEFAULT_PIN


def test_flag_wins_over_variable_and_messages_name_the_source() -> None:
    s = load({"jobs": "3"}, FLYDSL_JOBS="5")
    assert s.jobs == 3 and s.label("jobs") == "--jobs"
    assert load(FLYDSL_JOBS="5").label("jobs") == "FLYDSL_JOBS"
    assert "FLYDSL_JOBS='0'" in str(refused(FLYDSL_JOBS="0"))
    assert "--jobs='0'" in str(refused({"jobs": "0"}, FLYDSL_JOBS="4"))


def test_empty_flag_is_refused() -> None:
    err = refused({"root": ""})
    assert "--root=''" in str(err) and "non-empty" in str(err)


def test_derived_paths_follow_the_root(tmp_path: "os.PathLike[str]") -> None:
    s = load(FLYDSL_ROOT=os.path.join(str(tmp_path), "x", "FlyDSL"))
    assert s.lock_file == os.path.join(str(tmp_path), "x", ".flydsl_build.lock")
    assert s.fail_marker == os.path.join(str(tmp_path), "x", ".flydsl_build.failed")


def test_relative_paths_become_absolute(tmp_path: "os.PathLike[str]", monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(str(tmp_path))
    s = load(FLYDSL_ROOT="rel/FlyDSL", FLYDSL_REPO="mirror/FlyDSL.git")
    assert s.root == os.path.join(str(tmp_path), "rel", "FlyDSL")
    assert s.repo == os.path.join(str(tmp_path), "mirror", "FlyDSL.git")


@pytest.mark.parametrize(
    "env, setting, allowed",
    [
        ({"FLYDSL_MIN_VERSION": "not.a.version!"}, "FLYDSL_MIN_VERSION", "PEP 440"),
        ({"FLYDSL_MIN_VERSION": "latest"}, "FLYDSL_MIN_VERSION", "PEP 440"),
        ({"FLYDSL_JOBS": "0"}, "FLYDSL_JOBS", "whole number"),
        ({"FLYDSL_JOBS": "-4"}, "FLYDSL_JOBS", "whole number"),
        ({"FLYDSL_JOBS": "many"}, "FLYDSL_JOBS", "whole number"),
        ({"FLYDSL_STRATEGY": "yolo"}, "FLYDSL_STRATEGY", "auto, source, release, reuse-only"),
        ({"FLYDSL_PIN": "--upload-pack=touch /tmp/x"}, "FLYDSL_PIN", "not starting with -"),
        ({"FLYDSL_PIN": "-c"}, "FLYDSL_PIN", "commit hash"),
        ({"FLYDSL_PIN": "v1..v2"}, "FLYDSL_PIN", "commit hash"),
        ({"FLYDSL_PIN": "HEAD@{1}"}, "FLYDSL_PIN", "commit hash"),
        ({"FLYDSL_PIN": "a b"}, "FLYDSL_PIN", "commit hash"),
        ({"FLYDSL_REPO": "--upload-pack=touch /tmp/x"}, "FLYDSL_REPO", "never an option"),
        ({"FLYDSL_REPO": "-c core.sshCommand=touch /tmp/x"}, "FLYDSL_REPO", "never an option"),
        ({"FLYDSL_REPO": "ext::sh -c touch% /tmp/x"}, "FLYDSL_REPO", "https, http, ssh, git or file"),
        ({"FLYDSL_REPO": "fd::17"}, "FLYDSL_REPO", "https, http, ssh, git or file"),
        ({"FLYDSL_REPO": "gopher://example.com/x"}, "FLYDSL_REPO", "https, http, ssh, git or file"),
        ({"FLYDSL_ROOT": "/"}, "FLYDSL_ROOT", "not /"),
        ({"FLYDSL_ROOT": "/tmp/a\nb"}, "FLYDSL_ROOT", "without newlines"),
        ({"FLYDSL_ROOT": "/tmp/a:b"}, "FLYDSL_ROOT", "without ':'"),
        ({"FLYDSL_VLLM_MOE": "maybe"}, "FLYDSL_VLLM_MOE", "1/0"),
        ({"FLYDSL_VERIFY": "2"}, "FLYDSL_VERIFY", "1/0"),
        ({"FLYDSL_REQUIRE": "flydsl,kernels.moe-gemm"}, "FLYDSL_REQUIRE", "module names"),
        ({"FLYDSL_REQUIRE": ",,"}, "FLYDSL_REQUIRE", "module names"),
        ({"FLYDSL_LOCK_TIMEOUT": "-1"}, "FLYDSL_LOCK_TIMEOUT", "a number >= 0"),
        ({"FLYDSL_LOCK_TIMEOUT": "soon"}, "FLYDSL_LOCK_TIMEOUT", "a number >= 0"),
        ({"FLYDSL_LOCK_TIMEOUT": "nan"}, "FLYDSL_LOCK_TIMEOUT", "a number >= 0"),
        ({"FLYDSL_BUILD_LOCK": "/tmp/x\n.lock"}, "FLYDSL_BUILD_LOCK", "without newlines"),
        ({"FLYDSL_PYTHON": "python3\n-c"}, "FLYDSL_PYTHON", "interpreter"),
        ({"FLYDSL_CACHE": "--help"}, "FLYDSL_CACHE", "fsspec URL"),
    ],
)
def test_bad_values_are_refused_with_one_line(env: Dict[str, str], setting: str, allowed: str) -> None:
    err = refused(**env)
    assert str(err).startswith(setting + "=")
    assert allowed in str(err)
    assert err.setting == setting


@pytest.mark.parametrize("folder, allowed", [("a:b", "without ':'"), ("a\nb", "without newlines")])
def test_a_relative_root_under_a_working_folder_it_may_not_hold_is_refused(
        tmp_path: "os.PathLike[str]", monkeypatch: pytest.MonkeyPatch, folder: str, allowed: str) -> None:
    # The check read the path as typed: "FlyDSL" under /x/a:b became /x/a:b/FlyDSL on PYTHONPATH.
    os.makedirs(os.path.join(str(tmp_path), folder))
    monkeypatch.chdir(os.path.join(str(tmp_path), folder))
    err = refused(FLYDSL_ROOT="FlyDSL")
    assert str(err).startswith("FLYDSL_ROOT='FlyDSL' is not allowed") and allowed in str(err)
    assert "relative: its working folder is" in str(err)


def test_an_absolute_root_needs_no_working_folder(tmp_path: "os.PathLike[str]",
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    gone = os.path.join(str(tmp_path), "gone")
    os.makedirs(gone)
    monkeypatch.chdir(gone)
    os.rmdir(gone)  # a shell whose folder was removed under it
    assert load(FLYDSL_ROOT="/tmp//a/FlyDSL").root == "/tmp/a/FlyDSL"


@pytest.mark.parametrize("value", ["1", "true", "YES", "on"])
def test_true_values(value: str) -> None:
    assert load(FLYDSL_VLLM_MOE=value).vllm_moe is True


@pytest.mark.parametrize("value", ["0", "false", "No", "off"])
def test_false_values(value: str) -> None:
    assert load(FLYDSL_VLLM_MOE=value).vllm_moe is False


@pytest.mark.parametrize(
    "repo",
    ["https://github.com/ROCm/FlyDSL.git", "ssh://git@host/x.git", "git@github.com:ROCm/FlyDSL.git",
     "file:///srv/mirror/FlyDSL.git", "git://host/x"],
)
def test_good_repositories(repo: str) -> None:
    assert load(FLYDSL_REPO=repo).repo == repo


@pytest.mark.parametrize("pin", ["a35627a2fef0a5a70c63536c4174674223866737", "a35627a2", "v0.2.2", "release/0.3"])
def test_good_pins(pin: str) -> None:
    assert load(FLYDSL_PIN=pin).pin == pin


def test_require_and_timeouts_parse() -> None:
    s = load(FLYDSL_REQUIRE=" flydsl , kernels.moe_gemm_2stage,x.y ", FLYDSL_LOCK_TIMEOUT="2.5")
    assert s.require == ("flydsl", "kernels.moe_gemm_2stage", "x.y") and s.lock_timeout == 2.5
    assert load(FLYDSL_LOCK_TIMEOUT="none").lock_timeout is None


def test_api_keywords_are_validated_like_flags() -> None:
    s = load_settings({"jobs": 2, "vllm_moe": False, "require": ["flydsl"]}, {})
    assert s.jobs == 2 and s.vllm_moe is False and s.require == ("flydsl",)
    with pytest.raises(BadInput):
        load_settings({"jobs": 0}, {})
    with pytest.raises(TypeError):
        load_settings({"jbos": 2}, {})


def test_request_identifies_what_a_marker_must_satisfy() -> None:
    a, b = load(), load(FLYDSL_PIN="v0.2.3")
    assert a.request() != b.request()
    assert load(FLYDSL_JOBS="3").request() == a.request()  # parallelism changes nothing in the result


def test_exact_pin_from_its_variable_flag_and_keyword() -> None:
    assert load().exact_pin is False and "exact_pin" in load().request().to_json()
    assert load(FLYDSL_EXACT_PIN="1").exact_pin is True
    assert load_settings({"exact_pin": "1"}, {}).exact_pin is True
    assert load_settings({"exact_pin": True}, {}).exact_pin is True
    with pytest.raises(BadInput) as refused:
        load(FLYDSL_EXACT_PIN="sometimes")
    assert "FLYDSL_EXACT_PIN='sometimes' is not allowed" in refused.value.reason
