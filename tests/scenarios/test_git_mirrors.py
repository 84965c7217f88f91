"""Git mirrors for air-gapped sites (FLYDSL_GIT_MIRRORS / --git-mirror): git's own URL rewriting handed to
every git command of the run and of the build scripts through GIT_CONFIG_COUNT/KEY/VALUE, never written to
a git config file.  The fixture's submodule and LLVM URLs point at unreachable.invalid (a name that never
resolves); the mirrors are local fixture repositories."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Dict, Tuple

import pytest

from ensure_flydsl.errors import BadInput
from ensure_flydsl.settings import parse_git_mirrors
from ensure_flydsl.source.git import rewrite, with_git_config
from tests.helpers.flydsl_fixture import FixtureRepo, add_submodule, git, write
from tests.helpers.workspace import Workspace

DLPACK_FROM = "https://unreachable.invalid/dmlc/"
DLPACK_URL = DLPACK_FROM + "dlpack.git"
LLVM_FROM = "https://unreachable.invalid/llvm/"
LLVM_URL = LLVM_FROM + "llvm-project.git"


class Site:
    """A workspace whose pin has thirdparty/dlpack at DLPACK_URL, the local mirrors that serve it and
    llvm-project, and an empty HOME (a git config file written there would show)."""

    def __init__(self, tmp: str, repo: FixtureRepo) -> None:
        self.tmp = tmp
        self.dlpack_mirror = os.path.join(tmp, "mirrors", "dmlc") + "/"
        self.llvm_mirror = os.path.join(tmp, "mirrors", "llvm") + "/"
        add_submodule(repo, self.dlpack_mirror + "dlpack.git", "with-local-sub")
        git(repo.path, "config", "-f", ".gitmodules", "submodule.thirdparty/dlpack.url", DLPACK_URL)
        git(repo.path, "commit", "-q", "-am", "dlpack from its upstream URL")
        repo.commits["with-sub"] = git(repo.path, "rev-parse", "HEAD")
        llvm = self.llvm_mirror + "llvm-project.git"
        os.makedirs(llvm)
        git(llvm, "init", "-q", "-b", "main")
        write(os.path.join(llvm, "README.txt"), "fixture llvm-project\n")
        git(llvm, "add", "-A")
        git(llvm, "commit", "-q", "-m", "fixture llvm-project commit")
        self.home = os.path.join(tmp, "home")
        os.makedirs(self.home)
        self.ws = Workspace(os.path.join(tmp, "base"), repo)
        self.ws.env.update({"FLYDSL_PIN": repo.commits["with-sub"], "HOME": self.home})
        self.ws.env.pop("XDG_CONFIG_HOME", None)

    @property
    def dlpack_pair(self) -> str:
        return f"{DLPACK_FROM}={self.dlpack_mirror}"

    @property
    def llvm_pair(self) -> str:
        return f"{LLVM_FROM}={self.llvm_mirror}"

    def log(self) -> str:
        with open(self.ws.log) as handle:
            return handle.read()

    def assert_no_git_config_written(self) -> None:
        """No mirror in any config file of the root's repository (nor its submodules'), none in HOME."""
        assert os.listdir(self.home) == []
        gitdir = os.path.join(self.ws.root, ".git")
        for folder, _, files in os.walk(gitdir):
            for name in files:
                if name == "config":
                    with open(os.path.join(folder, name)) as handle:
                        text = handle.read()
                    assert "insteadof" not in text.lower() and self.tmp + "/mirrors" not in text, (folder, text)


@pytest.fixture
def site(tmp_path: "os.PathLike[str]", own_repo: FixtureRepo) -> Site:
    return Site(str(tmp_path), own_repo)


def one_line(out: "subprocess.CompletedProcess[str]") -> str:
    assert out.returncode == 64, out.stderr
    assert out.stderr.count("\n") == 1 and out.stdout == "", out.stderr
    return out.stderr


# -- the submodule behind an unreachable URL ------------------------------------------------------------


def test_unreachable_submodule_fails_with_exit_2_naming_it(site: Site) -> None:
    ws = site.ws
    out = ws.run()
    assert out.returncode == 2, out.stderr
    assert "stage submodules" in out.stderr
    assert f"cannot fetch thirdparty/dlpack from {DLPACK_URL}" in out.stderr
    assert "next: a submodule's repository is unreachable from here" in out.stderr
    assert "FLYDSL_GIT_MIRRORS=FROM=TO" in out.stderr
    marker = ws.marker()
    assert marker["exit_code"] == 2 and marker["stage"] == "submodules"
    assert f"thirdparty/dlpack from {DLPACK_URL}" in str(marker["reason"])
    assert not os.path.exists(ws.env_file)


def test_the_variable_maps_the_submodule_to_a_mirror_and_writes_no_git_config(site: Site) -> None:
    ws = site.ws
    out = ws.run(FLYDSL_GIT_MIRRORS=site.dlpack_pair)
    assert out.returncode == 0, out.stderr
    assert os.path.isfile(os.path.join(ws.root, "thirdparty", "dlpack", "include", "dlpack", "dlpack.h"))
    assert ws.source_and_import().returncode == 0
    assert not os.path.exists(ws.fail_marker)
    # The checkout still names the upstream URL: the mirror is this run's, not the tree's.
    assert DLPACK_URL in open(os.path.join(ws.root, ".gitmodules")).read()
    site.assert_no_git_config_written()


def test_the_repository_itself_is_fetched_through_a_mirror(site: Site, fixture_repo: FixtureRepo) -> None:
    """FLYDSL_REPO keeps its upstream URL (the root's origin names it); the mirror serves the fetch."""
    ws = site.ws
    upstream = "https://unreachable.invalid/ROCm/FlyDSL.git"
    ws.env.update({"FLYDSL_REPO": upstream, "FLYDSL_PIN": fixture_repo.commits["dev"]})
    out = ws.run()
    assert out.returncode == 2 and "cannot list the refs of https://unreachable.invalid/ROCm/FlyDSL.git" in out.stderr
    assert ws.marker()["stage"] == "fetch"
    mirror = os.path.dirname(fixture_repo.path) + "/"
    out = ws.run(FLYDSL_GIT_MIRRORS=f"https://unreachable.invalid/ROCm/={mirror}")
    assert out.returncode == 0, out.stderr
    origin = subprocess.run(["git", "-C", ws.root, "config", "--get", "remote.origin.url"], text=True,
                            stdout=subprocess.PIPE, check=True).stdout.strip()
    assert origin == upstream
    site.assert_no_git_config_written()



def test_the_doctor_never_shows_a_password_in_the_repository_url(ws: Workspace, fixture_repo: FixtureRepo) -> None:
    """Its checks' lines and its JSON's ``repo`` name FLYDSL_REPO as the fetch's messages do (https://fly:***@)."""
    repo = "https://fly:s3cret@unreachable.invalid/ROCm/FlyDSL.git"
    mirrors = f"https://fly:s3cret@unreachable.invalid/ROCm/={os.path.dirname(fixture_repo.path)}/"
    for env in ({}, {"FLYDSL_GIT_MIRRORS": mirrors}):  # unreachable: the requirements line; mirrored: a local one
        for args in (("doctor",), ("doctor", "--json")):
            out = ws.run(*args, FLYDSL_REPO=repo, **env)
            assert "fly:***@unreachable.invalid" in out.stdout, out.stdout
            assert "s3cret" not in out.stdout + out.stderr, (args, env)
        assert json.loads(out.stdout)["repo"] == "https://fly:***@unreachable.invalid/ROCm/FlyDSL.git"

# -- the build scripts' own git commands ----------------------------------------------------------------


def test_build_llvm_clone_goes_through_the_mirror(site: Site) -> None:
    ws = site.ws
    out = ws.run(FLYDSL_GIT_MIRRORS=site.dlpack_pair, FIXTURE_LLVM_CLONE=LLVM_URL)
    assert out.returncode == 4, out.stderr
    marker = ws.marker()
    assert marker["exit_code"] == 4 and marker["stage"] == "llvm"
    assert "unreachable.invalid" in "\n".join(str(line) for line in marker["log_tail"])  # type: ignore[union-attr]
    out = ws.run(FLYDSL_GIT_MIRRORS=f"{site.dlpack_pair}\n{site.llvm_pair}", FIXTURE_LLVM_CLONE=LLVM_URL)
    assert out.returncode == 0, out.stderr
    assert f"LLVM source from {LLVM_URL}: fixture llvm-project commit" in site.log()
    site.assert_no_git_config_written()


def test_the_callers_own_git_config_count_is_kept(site: Site) -> None:
    """A user's GIT_CONFIG_KEY_0=user.name stays; the mirrors' entries come after it, in git and in the
    build scripts."""
    ws = site.ws
    seen = os.path.join(ws.counter, "seen")
    hook = (f'git config --get user.name > "{seen}.name"; '
            f'git config --get-regexp "^url\\..*insteadof$" > "{seen}.url"')
    out = ws.run(FLYDSL_GIT_MIRRORS=site.dlpack_pair, GIT_CONFIG_COUNT="1", GIT_CONFIG_KEY_0="user.name",
                 GIT_CONFIG_VALUE_0="Somebody Else", FIXTURE_BUILD_HOOK=hook)
    assert out.returncode == 0, out.stderr
    assert open(seen + ".name").read().strip() == "Somebody Else"
    assert open(seen + ".url").read().split() == [f"url.{site.dlpack_mirror}.insteadof", DLPACK_FROM]
    site.assert_no_git_config_written()


# -- the flag, the API, a detached run ------------------------------------------------------------------


def test_repeated_flags_replace_the_variable(site: Site) -> None:
    ws = site.ws
    wrong = f"{DLPACK_FROM}={site.tmp}/nowhere/ {LLVM_FROM}={site.tmp}/nowhere/"
    out = ws.run(FLYDSL_GIT_MIRRORS=wrong, FIXTURE_LLVM_CLONE=LLVM_URL)
    assert out.returncode == 2 and f"through the mirror {site.tmp}/nowhere/dlpack.git" in out.stderr
    out = ws.run("--git-mirror", site.dlpack_pair, "--git-mirror", site.llvm_pair,
                 FLYDSL_GIT_MIRRORS=wrong, FIXTURE_LLVM_CLONE=LLVM_URL)
    assert out.returncode == 0, out.stderr
    assert f"LLVM source from {LLVM_URL}: fixture llvm-project commit" in site.log()


def test_a_detached_run_takes_the_mirrors_along(site: Site) -> None:
    ws = site.ws
    out = ws.run("start", "--git-mirror", site.dlpack_pair)
    assert out.returncode == 0, out.stderr
    out = ws.run("wait", "--timeout", "120", "--git-mirror", site.dlpack_pair, timeout=150)
    assert out.returncode == 0, out.stdout + out.stderr
    assert os.path.isfile(os.path.join(ws.root, "thirdparty", "dlpack", "include", "dlpack", "dlpack.h"))


def test_the_python_api_takes_a_mapping(site: Site) -> None:
    ws = site.ws
    code = ("import ensure_flydsl, sys; "
            f"r = ensure_flydsl.ensure(git_mirrors={{{DLPACK_FROM!r}: {site.dlpack_mirror!r}}}); print(r.how)")
    out = subprocess.run([sys.executable, "-c", code], env=ws.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "built"


# -- bad input ------------------------------------------------------------------------------------------

BAD = [
    ("no '='", "https://github.com/", "is not FROM=TO"),
    ("empty FROM", "=/srv/mirrors/", "is not FROM=TO"),
    ("empty TO", "https://github.com/=", "is not FROM=TO"),
    ("FROM an option", "-c=/srv/mirrors/", "starts with '-'"),
    ("TO an option", "https://github.com/=--upload-pack=touch", "starts with '-'"),
    ("ext:: helper", "https://github.com/=ext::sh", "remote helper"),
    ("fd:: helper", "fd::3=/srv/mirrors/", "remote helper"),
    ("control character", "https://github.com/=/srv/mir\x01rors/", "no control characters"),
    ("another scheme", "https://github.com/=foo://mirror/", "another scheme"),
    ("two TOs for one FROM", "https://github.com/=/a/ https://github.com/=/b/", "one TO for each FROM"),
]


@pytest.mark.parametrize("kind,value,why", BAD, ids=[b[0] for b in BAD])
def test_a_malformed_pair_is_bad_input(site: Site, kind: str, value: str, why: str) -> None:
    ws = site.ws
    line = one_line(ws.run(FLYDSL_GIT_MIRRORS=value))
    assert line.startswith("ensure-flydsl: FLYDSL_GIT_MIRRORS=") and why in line
    assert "whitespace-separated FROM=TO pairs" in line
    assert not os.path.exists(ws.root)
    assert ws.marker()["exit_code"] == 64 and ws.marker()["stage"] == "settings"
    os.unlink(ws.fail_marker)
    line = one_line(ws.run(f"--git-mirror={value}", "--git-mirror", site.dlpack_pair))
    assert line.startswith("ensure-flydsl: --git-mirror=") and why in line
    assert not os.path.exists(ws.root)


def test_a_bogus_git_config_count_is_bad_input_with_git_config(site: Site) -> None:
    ws = site.ws
    line = one_line(ws.run(FLYDSL_GIT_MIRRORS=site.dlpack_pair, GIT_CONFIG_COUNT="two"))
    assert "GIT_CONFIG_COUNT='two' is not allowed: a whole number >= 0" in line
    assert not os.path.exists(ws.root)


# -- the doctor -----------------------------------------------------------------------------------------


def doctor(ws: Workspace, **env: str) -> Tuple[int, Dict[str, Dict[str, object]]]:
    out = ws.run("doctor", "--json", timeout=60, **env)
    data = json.loads(out.stdout)
    assert out.returncode == data["exit_code"], out.stderr
    return out.returncode, {c["name"]: c for c in data["checks"]}


def test_the_doctor_checks_the_submodules_through_the_mirrors(site: Site) -> None:
    ws = site.ws
    code, checks = doctor(ws)
    sub = checks["submodules"]
    assert code == 2 and sub["status"] == "missing" and sub["blocking"] is True
    assert f"thirdparty/dlpack ({DLPACK_URL}: " in str(sub["detail"])
    assert "FLYDSL_GIT_MIRRORS=FROM=TO" in str(sub["remedy"])

    code, checks = doctor(ws, FLYDSL_GIT_MIRRORS=site.dlpack_pair)
    sub = checks["submodules"]
    assert code == 0 and sub["status"] == "ok", sub
    assert (f"thirdparty/dlpack from {DLPACK_URL} through the mirror {site.dlpack_mirror}dlpack.git "
            f"(FLYDSL_GIT_MIRRORS {site.dlpack_pair})") in str(sub["detail"])

    code, checks = doctor(ws, FLYDSL_GIT_MIRRORS=f"https://unreachable.invalid/other/={site.dlpack_mirror}")
    sub = checks["submodules"]
    assert code == 2 and "no FLYDSL_GIT_MIRRORS pair covers it" in str(sub["detail"])

    code, checks = doctor(ws, FLYDSL_GIT_MIRRORS=f"{DLPACK_FROM}={site.tmp}/nowhere/")
    sub = checks["submodules"]
    assert code == 2 and f"{site.tmp}/nowhere/dlpack.git does not exist" in str(sub["detail"])
    assert "through the mirror" in str(sub["detail"])


def test_the_doctor_checks_the_repository_through_the_mirrors(site: Site, fixture_repo: FixtureRepo) -> None:
    ws = site.ws
    upstream = "https://unreachable.invalid/ROCm/FlyDSL.git"
    ws.env.update({"FLYDSL_REPO": upstream, "FLYDSL_PIN": "v0.2.2"})
    code, checks = doctor(ws)
    assert code == 2 and checks["repository"]["status"] == "missing"
    assert f"{upstream} does not answer" in str(checks["repository"]["detail"])
    mirror = os.path.dirname(fixture_repo.path) + "/"
    code, checks = doctor(ws, FLYDSL_GIT_MIRRORS=f"https://unreachable.invalid/ROCm/={mirror}")
    repo = checks["repository"]
    assert repo["status"] == "ok" and f"local repository {fixture_repo.path} for {upstream}" in str(repo["detail"])
    # A mirror that is a URL: git itself rewrites it for ls-remote (its own error names the mirror's URL).
    code, checks = doctor(ws, FLYDSL_GIT_MIRRORS="https://unreachable.invalid/ROCm/=https://mirror.invalid/gh/")
    detail = str(checks["repository"]["detail"])
    assert code == 2 and checks["repository"]["status"] == "missing"
    assert f"{upstream} through the mirror https://mirror.invalid/gh/FlyDSL.git" in detail
    assert "unable to access 'https://mirror.invalid/gh/FlyDSL.git/'" in detail


def test_the_doctor_reads_the_pin_from_a_local_mirror_before_any_fetch(site: Site, own_repo: FixtureRepo) -> None:
    """The pin's submodules are known from the mirror of FLYDSL_REPO, so they are checked before a fetch."""
    ws = site.ws
    ws.env["FLYDSL_REPO"] = "https://unreachable.invalid/ROCm/FlyDSL.git"
    flydsl = f"https://unreachable.invalid/ROCm/={os.path.dirname(own_repo.path)}/"
    code, checks = doctor(ws, FLYDSL_GIT_MIRRORS=flydsl)
    assert code == 2 and checks["submodules"]["status"] == "missing", checks["submodules"]
    assert f"thirdparty/dlpack ({DLPACK_URL}: " in str(checks["submodules"]["detail"])
    code, checks = doctor(ws, FLYDSL_GIT_MIRRORS=f"{flydsl} {site.dlpack_pair}")
    assert code == 0 and checks["submodules"]["status"] == "ok", checks["submodules"]


# -- the parts, as git decides ----------------------------------------------------------------------------


def test_the_longest_from_wins_and_a_relative_to_becomes_absolute(tmp_path: "os.PathLike[str]") -> None:
    mirrors = parse_git_mirrors("X", "https://github.com/=https://m.example/gh/ "
                                     "https://github.com/dmlc/=mirrors/dmlc/")
    assert mirrors[1] == ("https://github.com/dmlc/", os.path.join(os.getcwd(), "mirrors", "dmlc") + "/")
    assert rewrite("https://github.com/dmlc/dlpack.git", mirrors)[0] == os.getcwd() + "/mirrors/dmlc/dlpack.git"
    assert rewrite("https://github.com/apache/tvm-ffi.git", mirrors)[0] == "https://m.example/gh/apache/tvm-ffi.git"
    assert rewrite("https://gitlab.com/x.git", mirrors) == ("https://gitlab.com/x.git", None)
    # git agrees: ls-remote through the same environment picks the longest FROM.
    target = os.path.join(str(tmp_path), "longest")
    git(str(tmp_path), "init", "-q", "--bare", target)
    env = with_git_config({"PATH": os.environ["PATH"], "HOME": str(tmp_path)},
                       (("https://unreachable.invalid/", "/nonexistent/"), ("https://unreachable.invalid/a/",
                                                                             str(tmp_path) + "/")))
    out = subprocess.run(["git", "ls-remote", "https://unreachable.invalid/a/longest"], env=env, check=False,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert out.returncode == 0, out.stderr


def test_the_environment_appends_after_the_callers_entries() -> None:
    env = with_git_config({"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "user.name", "GIT_CONFIG_VALUE_0": "U"},
                       (("https://github.com/", "/srv/m/"),))
    limits = {"GIT_CONFIG_KEY_3": "http.lowSpeedLimit", "GIT_CONFIG_VALUE_3": "1",
              "GIT_CONFIG_KEY_4": "http.lowSpeedTime", "GIT_CONFIG_VALUE_4": "60"}
    assert env == {"GIT_CONFIG_COUNT": "5", "GIT_CONFIG_KEY_0": "user.name", "GIT_CONFIG_VALUE_0": "U",
                   "GIT_CONFIG_KEY_1": "url./srv/m/.insteadOf", "GIT_CONFIG_VALUE_1": "https://github.com/",
                   "GIT_CONFIG_KEY_2": "protocol.file.allow", "GIT_CONFIG_VALUE_2": "always", **limits}
    alone = with_git_config({"A": "1"}, ())  # the network limits only
    assert alone == {"A": "1", "GIT_CONFIG_COUNT": "2", "GIT_CONFIG_KEY_0": "http.lowSpeedLimit",
                     "GIT_CONFIG_VALUE_0": "1", "GIT_CONFIG_KEY_1": "http.lowSpeedTime", "GIT_CONFIG_VALUE_1": "60"}
    assert with_git_config({"GIT_CONFIG_COUNT": "x"}, ()) == {"GIT_CONFIG_COUNT": "x"}  # git refuses it: left as is
    with pytest.raises(BadInput):
        with_git_config({"GIT_CONFIG_COUNT": "x"}, (("a", "b"),))


def test_a_mirror_that_lacks_the_pin_is_named(ws: Workspace, own_repo: FixtureRepo, tmp_path: str) -> None:
    """A stale mirror: the pin was said not to be a commit of FLYDSL_REPO (which has it), hint: check the pin."""
    mirror = os.path.join(str(tmp_path), "mirror", "FlyDSL.git")
    subprocess.run(["git", "clone", "-q", "--bare", own_repo.path, mirror], check=True)
    newer = own_repo.commit("newer", "0.2.4")
    upstream = "https://unreachable.invalid/ROCm/FlyDSL.git"
    out = ws.run(FLYDSL_REPO=upstream, FLYDSL_PIN=newer,
                 FLYDSL_GIT_MIRRORS=f"https://unreachable.invalid/ROCm/={os.path.dirname(mirror)}/")
    assert out.returncode == 3, out.stderr
    assert f"is not a commit, tag or branch of {upstream} through the mirror {mirror}" in out.stderr


def test_a_password_in_the_repository_url_is_never_shown(ws: Workspace) -> None:
    out = ws.run(FLYDSL_REPO="https://fly:s3cret@127.0.0.1:9/ROCm/FlyDSL.git")
    assert out.returncode == 2, out.stderr
    assert "cannot list the refs of https://fly:***@127.0.0.1:9/ROCm/FlyDSL.git" in out.stderr
    assert "s3cret" not in out.stdout + out.stderr + open(ws.log).read()


def test_the_api_fetches_with_the_git_configuration_of_the_environment_it_is_given(
        ws: Workspace, fixture_repo: FixtureRepo, tmp_path: "os.PathLike[str]") -> None:
    """``ensure(environ=...)`` whose HOME's .gitconfig rewrites the upstream URL to a reachable copy fetches through
    it: the git commands read the given environment, not the process's (exit 2 before: they used os.environ)."""
    home = os.path.join(str(tmp_path), "job-home")
    os.makedirs(home)
    upstream = "https://unreachable.invalid/ROCm/FlyDSL.git"
    with open(os.path.join(home, ".gitconfig"), "w") as handle:
        handle.write(f'[url "{fixture_repo.path}"]\n\tinsteadOf = {upstream}\n')
    given = {**ws.env, "HOME": home, "FLYDSL_REPO": upstream, "FLYDSL_PIN": fixture_repo.commits["dev"]}
    code = "import json, sys, ensure_flydsl\nprint(ensure_flydsl.ensure(environ=json.loads(sys.argv[1])).how)"
    out = subprocess.run([sys.executable, "-c", code, json.dumps(given)], env=ws.env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["built"]
