"""The binary cache refuses every way an entry can be corrupt or hostile (a damaged blob, a tampered
manifest, hostile tarballs published by hand) before anything is written."""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
from typing import Callable, Dict, List

import pytest

from ensure_flydsl.trees.manifest import CacheEntry, Member
from ensure_flydsl.trees.remote import open_cache
from tests.helpers.cache_entries import KEY, _member, blob_file, manifest_file, publish_raw
from tests.helpers.cache_trees import assert_rejected, published, write


# -- corrupt entries -----------------------------------------------------------------------------------
def test_a_flipped_byte_in_the_blob_is_rejected(cache_dir: str, work: str, tmp_path: "os.PathLike[str]") -> None:
    cache, entry, _source = published(cache_dir, tmp_path)
    with open(blob_file(cache_dir, entry), "r+b") as handle:
        handle.seek(entry.size // 2)
        byte = handle.read(1)
        handle.seek(entry.size // 2)
        handle.write(bytes([byte[0] ^ 0x01]))
    assert_rejected(cache, entry, work, f"blob sha256 mismatch: expected {entry.blob[:12]}")


def test_a_truncated_blob_is_rejected(cache_dir: str, work: str, tmp_path: "os.PathLike[str]") -> None:
    cache, entry, _source = published(cache_dir, tmp_path, big=1 << 20)
    with open(blob_file(cache_dir, entry), "r+b") as handle:
        handle.truncate(entry.size - 100)
    assert_rejected(cache, entry, work, "truncated")
    os.unlink(blob_file(cache_dir, entry))
    assert_rejected(cache, entry, work, "missing from the cache")


def test_a_truncated_blob_with_a_manifest_that_matches_it_is_rejected(cache_dir: str, work: str,
                                                                      tmp_path: "os.PathLike[str]") -> None:
    cache, entry, _source = published(cache_dir, tmp_path, big=1 << 20)
    data = open(blob_file(cache_dir, entry), "rb").read()[: entry.size // 2]
    sha = hashlib.sha256(data).hexdigest()
    with open(os.path.join(cache_dir, "blobs", sha + ".tar.gz"), "wb") as handle:
        handle.write(data)
    manifest = json.load(open(manifest_file(cache_dir)))
    manifest.update(blob=sha, size=len(data))
    with open(manifest_file(cache_dir), "w") as handle:
        json.dump(manifest, handle)
    bad = cache.lookup("tree", KEY)
    assert bad is not None
    assert_rejected(cache, bad, work, "is not a readable gzip'd tar")


Edit = Callable[[List[Dict[str, object]]], object]


def _tamper(cache_dir: str, edit: Edit) -> None:
    manifest = json.load(open(manifest_file(cache_dir)))
    edit(manifest["members"])
    with open(manifest_file(cache_dir), "w") as handle:
        json.dump(manifest, handle)


@pytest.mark.parametrize("edit, reason", [
    (lambda ms: [m.update(sha256="0" * 64) for m in ms if m["path"] == "flydsl/tool.sh"],
     "extracted file 'flydsl/tool.sh' sha256 mismatch"),
    (lambda ms: ms.append({"path": "flydsl/extra.py", "type": "file", "mode": 0o644, "size": 0,
                           "sha256": hashlib.sha256(b"").hexdigest()}),
     "manifest member 'flydsl/extra.py' is missing from the blob"),
    (lambda ms: ms.remove(next(m for m in ms if m["path"] == "flydsl/__init__.py")),
     "member 'flydsl/__init__.py' is not in the manifest"),
    (lambda ms: [m.update(mode=0o4755) for m in ms if m["path"] == "flydsl/tool.sh"],
     "member 'flydsl/tool.sh' differs from the manifest in its mode"),
    (lambda ms: [m.update(target="libFly.so.2") for m in ms if m["type"] == "symlink"],
     "differs from the manifest in its target"),
])
def test_a_tampered_manifest_is_rejected(cache_dir: str, work: str, tmp_path: "os.PathLike[str]",
                                         edit: Edit, reason: str) -> None:
    cache, _entry, _source = published(cache_dir, tmp_path)
    _tamper(cache_dir, edit)
    tampered = cache.lookup("tree", KEY)
    assert tampered is not None
    assert_rejected(cache, tampered, work, reason)


# -- hostile tarballs, published by hand with a manifest that is correct for their bytes -------------------
HOSTILE = {
    "dotdot": ([_member("../evil", data=b"x")], "member '../evil' escapes the destination"),
    "dotdot-deep": ([_member("a", tarfile.DIRTYPE, mode=0o755), _member("a/../../../evil", data=b"x")],
                    "escapes the destination"),
    "absolute": ([_member("{abs}", data=b"x")], "is an absolute path"),
    "symlink-out": ([_member("link", tarfile.SYMTYPE, target="../../outside"),
                     _member("link/evil", data=b"x")], "resolves outside the destination"),
    "symlink-abs": ([_member("link", tarfile.SYMTYPE, target="{outside}")], "points to the absolute path"),
    "symlink-chain": ([_member("b", tarfile.DIRTYPE, mode=0o755), _member("b/c", tarfile.SYMTYPE, target=".."),
                       _member("a", tarfile.SYMTYPE, target="b/c"), _member("x", tarfile.SYMTYPE, target="a/..")],
                      "symlink 'x' -> 'a/..' resolves outside"),
    "through-inner-symlink": ([_member("d", tarfile.DIRTYPE, mode=0o755), _member("l", tarfile.SYMTYPE, target="d"),
                               _member("l/f", data=b"x")], "is written through the symlink 'l'"),
    "hardlink": ([_member("f", data=b"x"), _member("g", tarfile.LNKTYPE, target="f")], "'g' is a hard link"),
    "hardlink-out": ([_member("g", tarfile.LNKTYPE, target="{outside}/victim")], "'g' is a hard link"),
    "device": ([_member("null", tarfile.CHRTYPE)], "'null' is a device file"),
    "fifo": ([_member("pipe", tarfile.FIFOTYPE)], "'pipe' is a fifo"),
    "duplicate": ([_member("f", data=b"x"), _member("f", data=b"y")], "'f' appears twice"),
    "dot-slash": ([_member("./f", data=b"x")], "not a normalised relative path"),
    "orphan-member": ([_member("nowhere/f", data=b"x")], "does not follow its folder 'nowhere'"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_tarballs_are_rejected_before_anything_is_written(case: str, cache_dir: str, work: str,
                                                                  tmp_path: "os.PathLike[str]") -> None:
    outside = os.path.join(str(tmp_path), "outside")
    os.makedirs(outside)
    write(os.path.join(outside, "victim"), "precious")
    spec, reason = HOSTILE[case]
    members = []
    for info, data in spec:
        info = _copy(info)
        info.name = info.name.replace("{abs}", os.path.join(outside, "abs-evil"))
        info.linkname = info.linkname.replace("{outside}", outside)
        members.append((info, data))
    entry = publish_raw(cache_dir, members)
    assert_rejected(open_cache(cache_dir), entry, work, reason)
    assert sorted(os.listdir(outside)) == ["victim"] and open(os.path.join(outside, "victim")).read() == "precious"
    assert sorted(os.listdir(str(tmp_path))) == ["cache", "outside", "work"]


def _copy(info: tarfile.TarInfo) -> tarfile.TarInfo:
    new = tarfile.TarInfo(info.name)
    for field in ("type", "mode", "linkname", "size", "devmajor", "devminor"):
        setattr(new, field, getattr(info, field))
    return new


def test_the_tar_itself_is_checked_not_only_its_manifest(cache_dir: str, work: str) -> None:
    """An innocent manifest does not vouch for a tarball whose bytes match it but whose members do not."""
    entry = publish_raw(cache_dir, [_member("../evil", data=b"x")])
    honest = Member(path="evil", type="file", mode=0o644, size=1, sha256=hashlib.sha256(b"x").hexdigest())
    lying = CacheEntry(kind=entry.kind, key=entry.key, blob=entry.blob, size=entry.size, created=entry.created,
                       fields=entry.fields, members=(honest,))
    # Each header is held against the manifest before its member is written: ../evil is not in it.
    assert_rejected(open_cache(cache_dir), lying, work, "member '../evil' is not in the manifest")


def test_modes_from_a_hand_made_manifest_are_never_group_or_world_writable(cache_dir: str, work: str) -> None:
    entry = publish_raw(cache_dir, [_member("d", tarfile.DIRTYPE, mode=0o777),
                                    _member("d/f", data=b"x", mode=0o6777)])
    dest = os.path.join(work, "dest")
    open_cache(cache_dir).get(entry, dest)
    assert os.stat(os.path.join(dest, "d")).st_mode & 0o7777 == 0o755
    assert os.stat(os.path.join(dest, "d", "f")).st_mode & 0o7777 == 0o755


def test_a_member_before_its_folder_in_the_tar_is_rejected(cache_dir: str, work: str) -> None:
    """The manifest lists the folder first; the tar stream brings its file first: refused, not written."""
    entry = publish_raw(cache_dir, [_member("d/x", data=b"x"), _member("d", kind=tarfile.DIRTYPE)])
    honest = (Member("d", "dir", 0o755), Member(path="d/x", type="file", mode=0o644, size=1,
                                                sha256=hashlib.sha256(b"x").hexdigest()))
    lying = CacheEntry(kind=entry.kind, key=entry.key, blob=entry.blob, size=entry.size, created=entry.created,
                       fields=entry.fields, members=honest)
    assert_rejected(open_cache(cache_dir), lying, work, "comes before its folder")
