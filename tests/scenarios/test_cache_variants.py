"""A publish never replaces a manifest another host may trust (issue 26 item 5): the first manifest of a key
stays; a host that signs adds its own variant beside it; a host that does not sign publishes nothing there.
Real folder caches, real trees, real ed25519 keys (binary_cache/variants.py)."""

from __future__ import annotations

import glob
import json
import os
import time
from dataclasses import replace
from typing import Dict, List, Tuple

from ensure_flydsl.cli.cache import sign_entries
from ensure_flydsl.settings import Settings
from ensure_flydsl.trees.remote import MAX_VARIANTS, ORPHAN_GRACE_S, Cache, manifest_path, open_cache, variant_path
from ensure_flydsl.trees.signing import (
    PublicKey,
    SecretKey,
    check_entry,
    generate,
    parse_public,
    parse_secret,
    signature_path,
)
from tests.helpers.cache_entries import FIELDS, KEY, manifest_file
from tests.helpers.cache_trees import make_tree


def pair(name: str) -> Tuple[SecretKey, PublicKey]:
    secret_line, public_line = generate(name)
    return parse_secret(secret_line, "test"), parse_public(public_line, "test")


K1, P1 = pair("k1")
K2, P2 = pair("k2")


def files(cache_dir: str) -> Dict[str, bytes]:
    """Every manifest and signature object, with its bytes."""
    found = glob.glob(os.path.join(cache_dir, "entries", "**", "*"), recursive=True)
    return {os.path.relpath(p, cache_dir): open(p, "rb").read() for p in found if os.path.isfile(p)}


def publish(cache: Cache, tmp: str, name: str, signers: List[SecretKey]):  # type: ignore[no-untyped-def]
    return cache.put("tree", KEY, FIELDS, make_tree(os.path.join(tmp, name), seed=name), signers)


def test_an_unsigned_publish_never_replaces_a_signed_entry(cache_dir: str, tmp_path: "os.PathLike[str]") -> None:
    cache = open_cache(cache_dir)
    first = publish(cache, str(tmp_path), "a", [K2])
    assert first.written and first.entry.path == manifest_path("tree", KEY)
    before = files(cache_dir)
    second = publish(cache, str(tmp_path), "b", [])
    assert not second.written and second.entry.path == ""
    assert second.why == (f"an entry for this key is already there ({manifest_path('tree', KEY)}), and a publish never "
                          "replaces one (other hosts may trust it)")
    assert files(cache_dir) == before  # a's manifest and signature, byte for byte
    assert check_entry(cache.store, cache.lookup("tree", KEY), [P2]).trusted  # type: ignore[arg-type]


def test_a_signer_adds_its_variant_once_and_removes_the_signatures_it_did_not_use(
        cache_dir: str, tmp_path: "os.PathLike[str]") -> None:
    cache = open_cache(cache_dir)
    publish(cache, str(tmp_path), "a", [K2])
    before = files(cache_dir)
    mine = publish(cache, str(tmp_path), "b", [K1])
    assert mine.written and mine.entry.path == variant_path("tree", KEY, "k1") and mine.entry.variant == "k1"
    assert "beside the entry another host published for this key" in mine.note
    after = files(cache_dir)
    assert {p: after[p] for p in before} == before
    assert sorted(set(after) - set(before)) == sorted([variant_path("tree", KEY, "k1"),
                                                      signature_path("tree", KEY, mine.entry.manifest, "k1")])
    (variant,) = cache.variants("tree", KEY)
    assert variant == mine.entry and variant.manifest == mine.entry.manifest
    assert check_entry(cache.store, variant, [P1]).trusted
    # A second host signing with k1 finds k1's entry there: it adds nothing, and no stray signature.
    again = publish(cache, str(tmp_path), "c", [K1])
    assert not again.written and again.why == f"{variant_path('tree', KEY, 'k1')} is signed by k1 already"
    assert files(cache_dir) == after
    # Both entries fetch; each host's pick is its own (the first manifest for k2, the variant for k1).
    for n, entry in enumerate((cache.lookup("tree", KEY), variant)):
        assert entry is not None
        cache.get(entry, os.path.join(str(tmp_path), f"dest{n}"))


def test_identical_bytes_get_the_signature_beside_them(cache_dir: str, tmp_path: "os.PathLike[str]") -> None:
    cache = open_cache(cache_dir)
    first = publish(cache, str(tmp_path), "a", [K2]).entry
    same = cache.put_manifest(replace(first, path=""), [K1])
    assert same.written and same.note == "the same manifest was there already"
    assert check_entry(cache.store, first, [P1]).trusted_by == ("k1",)
    assert check_entry(cache.store, first, [P1, P2]).trusted_by == ("k1", "k2")
    assert cache.variants("tree", KEY) == []


def test_what_is_not_a_manifest_is_replaced_and_a_newer_format_is_not(cache_dir: str,
                                                                      tmp_path: "os.PathLike[str]") -> None:
    cache = open_cache(cache_dir)
    publish(cache, str(tmp_path), "a", [])
    path = manifest_file(cache_dir)
    newer = json.dumps({"format": 2, "kind": "tree", "key": KEY, "anything": "a later version's"}).encode()
    with open(path, "wb") as handle:
        handle.write(newer)
    kept = publish(cache, str(tmp_path), "b", [])
    assert not kept.written and open(path, "rb").read() == newer
    with open(path, "wb") as handle:
        handle.write(b'{"format": 1, "kind": "tree"')  # torn: no host can trust it
    repaired = publish(cache, str(tmp_path), "c", [])
    assert repaired.written and repaired.entry.path == manifest_path("tree", KEY)
    assert cache.lookup("tree", KEY) == repaired.entry


def test_a_fifo_at_the_manifest_is_left_alone_and_a_signer_publishes_beside_it(
        cache_dir: str, tmp_path: "os.PathLike[str]") -> None:
    cache = open_cache(cache_dir)
    os.makedirs(os.path.dirname(manifest_file(cache_dir)))
    os.mkfifo(manifest_file(cache_dir))
    plain = publish(cache, str(tmp_path), "a", [])
    assert not plain.written and "is a FIFO, not a regular file" in plain.why
    signed = publish(cache, str(tmp_path), "b", [K1])
    assert signed.written and signed.entry.path == variant_path("tree", KEY, "k1")
    assert os.path.exists(manifest_file(cache_dir)) and not os.path.isfile(manifest_file(cache_dir))


def test_a_variant_slot_holding_what_its_key_did_not_sign_is_not_replaced(
        cache_dir: str, tmp_path: "os.PathLike[str]") -> None:
    cache = open_cache(cache_dir)
    publish(cache, str(tmp_path), "a", [K2])
    planted = publish(cache, str(tmp_path), "p", [K1]).entry  # k1's variant, then edited in place
    slot = os.path.join(cache_dir, variant_path("tree", KEY, "k1"))
    edited = planted.manifest.replace(b'"host":"', b'"host":"x', 1)
    with open(slot, "wb") as handle:
        handle.write(edited)
    before = files(cache_dir)
    refused = publish(cache, str(tmp_path), "b", [K1])
    assert not refused.written and refused.why.startswith(
        f"{variant_path('tree', KEY, 'k1')} is there but no signature of k1 covers it")
    assert "remove it to let a host that signs with k1 publish there" in refused.why
    assert files(cache_dir) == before


def test_variants_read_are_bounded_and_trusted_names_first(cache_dir: str, tmp_path: "os.PathLike[str]") -> None:
    cache = open_cache(cache_dir)
    real = publish(cache, str(tmp_path), "a", [K1]).entry
    folder = os.path.dirname(os.path.join(cache_dir, variant_path("tree", KEY, "k1")))
    os.makedirs(folder)
    for n in range(MAX_VARIANTS + 5):
        with open(os.path.join(folder, f"a{n:03d}.json"), "wb") as handle:
            handle.write(b"{}")
    with open(os.path.join(folder, "zz.json"), "wb") as handle:
        handle.write(real.manifest)  # a copy, named after a key this host trusts: read despite the flood
    found = cache.variants("tree", KEY, ["zz"])
    assert [e.variant for e in found] == ["zz"]
    assert f"read only {MAX_VARIANTS} of the {MAX_VARIANTS + 6} variants of tree/{KEY[:12]}" in cache.warnings[0]
    assert sum("ignored the manifest" in w for w in cache.warnings) == MAX_VARIANTS - 1


def test_prune_keeps_every_manifests_signatures_and_cache_sign_signs_every_manifest_of_a_key(
        cache_dir: str, tmp_path: "os.PathLike[str]") -> None:
    cache = open_cache(cache_dir)
    first = publish(cache, str(tmp_path), "a", [K2]).entry
    variant = publish(cache, str(tmp_path), "b", [K1]).entry
    old = time.time() - ORPHAN_GRACE_S - 60
    for path in files(cache_dir):
        os.utime(os.path.join(cache_dir, path), (old, old))
    before = files(cache_dir)
    assert cache.prune(1 << 40) == [] and files(cache_dir) == before
    secret = os.path.join(str(tmp_path), "k3.secret")
    with open(os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as handle:
        handle.write(generate("k3")[0] + "\n")
    said: List[str] = []
    trusting = Settings(cache_trusted_keys=(P1.line(), P2.line()))
    sign_entries(trusting, cache, secret, [KEY[:12]], said.append)
    assert said[-1].startswith("2 signed with k3, 0 already signed by it, 0 skipped"), said
    assert f"signed tree {KEY[:12]} from k1 with k3" in said
    for entry in (first, variant):
        assert os.path.exists(os.path.join(cache_dir, signature_path("tree", KEY, entry.manifest, "k3")))


def test_prune_leaves_what_a_newer_formats_manifest_may_name(cache_dir: str, tmp_path: "os.PathLike[str]") -> None:
    """A later version rewrote the key's manifest in its format: this prune cannot read it, so it cannot know that
    the blob and the signatures beside it are that manifest's; before, it removed both as orphans."""
    cache = open_cache(cache_dir)
    entry = publish(cache, str(tmp_path), "a", [K1]).entry
    newer = {**json.loads(entry.manifest), "format": 2}
    with open(os.path.join(cache_dir, entry.path), "w") as handle:
        json.dump(newer, handle)
    old = time.time() - ORPHAN_GRACE_S - 60
    for path in files(cache_dir):
        os.utime(os.path.join(cache_dir, path), (old, old))
    before = files(cache_dir)
    assert cache.prune(1 << 40) == [] and files(cache_dir) == before


def test_a_manifest_whose_blob_is_gone_is_replaced(cache_dir: str, tmp_path: "os.PathLike[str]") -> None:
    """No host can install an entry without its blob (an older prune, a hand): a publish takes its place,
    the first manifest's and a signer's variant's alike, instead of leaving the key dead for good."""
    cache = open_cache(cache_dir)
    first = publish(cache, str(tmp_path), "a", [K2]).entry
    variant = publish(cache, str(tmp_path), "b", [K1]).entry
    for entry in (first, variant):
        os.unlink(os.path.join(cache_dir, "blobs", entry.blob + ".tar.gz"))
    plain = publish(cache, str(tmp_path), "c", [])
    assert plain.written and plain.entry.path == manifest_path("tree", KEY)
    assert plain.note == f"in place of {manifest_path('tree', KEY)}, whose blob is gone, so that no host can install it"
    signed = publish(cache, str(tmp_path), "d", [K1])
    assert signed.written and signed.entry.path == variant_path("tree", KEY, "k1"), signed
    assert cache.lookup("tree", KEY) == plain.entry and cache.variants("tree", KEY) == [signed.entry]
    for n, entry in enumerate((plain.entry, signed.entry)):
        cache.get(entry, os.path.join(str(tmp_path), f"dest{n}"))
