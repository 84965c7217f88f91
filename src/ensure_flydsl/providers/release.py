"""The release way: when the pin is a release tag's commit, the ``flydsl==X`` wheel for the target
interpreter, installed without dependencies into ``ROOT/build-fly/python_packages`` beside the tag's
``kernels/`` (the layout of a source build, in seconds)."""

from __future__ import annotations

import os
from typing import Optional

from ensure_flydsl.build.wheels import check_versions_agree, install_wheel, installed_version, static_version
from ensure_flydsl.errors import EnsureError, ExitCode
from ensure_flydsl.layout import packages_dir
from ensure_flydsl.providers.base import Provider
from ensure_flydsl.providers.tree import prepare_build_dir, verify_tree
from ensure_flydsl.result import How
from ensure_flydsl.runs.context import Decision, Run
from ensure_flydsl.runs.records import RELEASE_PLAN
from ensure_flydsl.source.root import remove_tree
from ensure_flydsl.support import faults


class ReleaseProvider(Provider):
    name = "release"

    def __init__(self, version: str, *, demanded: bool) -> None:
        self.version = version
        self.demanded = demanded  # FLYDSL_STRATEGY=release: no wheel is the run's failure (exit 8)

    def provide(self, run: Run, commit: str) -> Optional[Decision]:
        try:
            return self._provide(run, commit)
        except EnsureError as exc:
            if self.demanded or exc.code != ExitCode.ARTIFACT:
                raise
            run.say(f"no release wheel to use ({exc.reason}); building the pin from source instead")
            return None

    def _provide(self, run: Run, commit: str) -> Decision:
        run.plan(RELEASE_PLAN)
        key = {"release": self.version, "commit": commit, "abi": run.interpreter.abi}
        with run.step("release"):
            self._install(run, key)
        with run.step("verify"):
            try:
                return verify_tree(run, commit, How.RELEASED)
            except EnsureError:
                run.stamps.undo("build")
                raise

    def _install(self, run: Run, key: dict) -> None:  # type: ignore[type-arg]
        root, stamps, version = run.settings.root, run.stamps, self.version
        build_dir = prepare_build_dir(run, key)
        packages = packages_dir(root)
        if stamps.done("build", key) and os.path.isdir(packages):
            run.say(f"the flydsl {version} wheel is already installed in {packages}")
            return
        stamps.begin("build", key)
        run.worked()
        run.say(f"release v{version}: installing the flydsl=={version} wheel for {run.interpreter.executable}")
        os.makedirs(build_dir, exist_ok=True)
        staging = os.path.join(build_dir, ".python_packages.installing")
        remove_tree(staging)  # a leftover of an interrupted install of ours
        install_wheel(run.interpreter, version, staging, run.build_line)
        faults.point("release-installed")
        check_versions_agree(
            "v" + version,
            static_version(os.path.join(root, "python", "flydsl", "__init__.py")),
            installed_version(staging),
            static_version(os.path.join(staging, "flydsl", "__init__.py")),
        )
        remove_tree(packages)
        os.rename(staging, packages)
        stamps.finish("build", key)
