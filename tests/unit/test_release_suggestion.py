"""The release hint's pure parts: the tags and commits in ``git ls-remote`` output (an annotated tag by the
commit it names), which modules a tag's files can show, and the words for each answer (a release named as
working only when its tag was read and holds the modules)."""

from __future__ import annotations

from ensure_flydsl.source.git import ref_objects, tag_commits
from ensure_flydsl.source.requirements import TagAnswer, checked_modules
from ensure_flydsl.ways.package_index import newest_first
from ensure_flydsl.ways.release.provider import suggestion_text

A = "a" * 40
B = "b" * 40
C = "c" * 40


def test_tag_commits_peels_annotated_tags_and_ignores_what_is_no_ref_line() -> None:
    out = (f"{A}\trefs/tags/v0.2.2\n{B}\trefs/tags/v0.3.0\n{C}\trefs/tags/v0.3.0^{{}}\n{A}\trefs/heads/main\n"
           "warning: redirecting to https://example.invalid/FlyDSL.git/\nnot-a-sha\trefs/tags/v9\n")
    assert tag_commits(ref_objects(out)) == {"v0.2.2": A, "v0.3.0": C}
    assert tag_commits(ref_objects("")) == {}


def test_only_the_modules_of_the_sources_packages_are_checked() -> None:
    assert checked_modules(("flydsl", "kernels.moe_gemm_2stage", "torch", "flydsl.x")) == ["kernels.moe_gemm_2stage"]


def test_newest_first_keeps_the_floor_and_the_order() -> None:
    assert newest_first(["0.2.2", "0.5.0", "0.2.1", "0.3.1", "junk", "0.2.2.post1"], "0.2.2") == \
        ["0.5.0", "0.3.1", "0.2.2.post1", "0.2.2"]


def test_the_words_name_a_release_as_working_only_when_its_tag_holds_the_modules() -> None:
    modules = ["kernels.moe_gemm_2stage"]
    repo = "https://example.invalid/FlyDSL.git"
    assert suggestion_text(TagAnswer(holding="0.2.2"), modules, repo) == (
        "FLYDSL_PIN=v0.2.2 has a wheel for this interpreter and its tag holds kernels.moe_gemm_2stage: about 10 s, "
        "nothing built")
    assert suggestion_text(TagAnswer(holding="0.3.1"), [], repo) == (
        "FLYDSL_PIN=v0.3.1 has a wheel for this interpreter: about 10 s, nothing built")
    unread = TagAnswer(unread="0.3.1", why="git fetch of v0.3.1 from X failed: fatal: gone")
    assert suggestion_text(unread, modules, repo) == (
        "FLYDSL_PIN=v0.3.1 has a wheel for this interpreter, but whether its tag holds kernels.moe_gemm_2stage "
        "could not be checked (git fetch of v0.3.1 from X failed: fatal: gone)")
    assert "whether https://example.invalid/FlyDSL.git has its tag could not be checked" in str(
        suggestion_text(unread, [], repo))
    assert suggestion_text(TagAnswer(), modules, repo) is None
