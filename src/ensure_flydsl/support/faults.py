"""Fault points for the reliability suite: ``ENSURE_FLYDSL_FAULT=<point>`` SIGKILLs the run's process group there,
as the OOM killer would (``ENSURE_FLYDSL_FAULT_LOG=<file>`` gets the point's name first)."""

from __future__ import annotations

import os
import signal

POINTS = (
    "root-claimed",  # the root is ours, nothing fetched yet
    "fetched",  # the pin's objects are fetched, nothing checked out
    "checkout-begun",  # the checkout's intent is recorded, git checkout not run
    "checked-out",  # the pin is checked out, submodules not updated
    "fixes-applied",  # the hip overlay and tool shims exist, LLVM not started
    "llvm-built",  # build_llvm.sh succeeded, its record not yet written
    "build-done",  # build.sh succeeded, its stamp not yet written
    "release-installed",  # the wheel is unpacked into the staging folder, not yet moved into place
    "verified",  # the full probe passed, the tree stamp not yet written
    "twin-written",  # flydsl_env.json is written, flydsl_env.sh is not
    "published",  # the env file is written, the run has not returned
    "cache-fetched",  # a cached tree is unpacked into build-fly/python_packages, its stamp not yet written
    "cache-published",  # a built tree is uploaded to FLYDSL_CACHE (after the env file), the run has not returned
)


def point(name: str) -> None:
    if os.environ.get("ENSURE_FLYDSL_FAULT") == name:
        fired = os.environ.get("ENSURE_FLYDSL_FAULT_LOG")
        if fired:  # the suite checks that every point fired somewhere: a point that stops firing is a bug
            with open(fired, "a") as handle:
                handle.write(name + "\n")

        os.killpg(os.getpgrp(), signal.SIGKILL)
