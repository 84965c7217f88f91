"""Signed cache entries at the unit level: key files, signatures, the verdict, and tampering of every kind
held against the real verification function (binary_cache/signing.py) with real ed25519 keys."""

from __future__ import annotations

import base64
import os
import sys
import threading
import time
from typing import List, Tuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ensure_flydsl.errors import BadInput
from ensure_flydsl.settings import flag_text, load_settings
from ensure_flydsl.trees.backends import FolderStore
from ensure_flydsl.trees.manifest import parse_manifest
from ensure_flydsl.trees.signing import (
    SIGNATURE_MAX,
    KeyProblem,
    MissingLibrary,
    PublicKey,
    SecretKey,
    check_entry,
    check_secret,
    generate,
    judge,
    manifest_sha,
    parse_public,
    parse_secret,
    parse_signature,
    read_public_keys,
    read_secret_key,
    sign,
    signature_path,
    verify,
    write_signature,
)
from tests.helpers.cache_entries import KEY
from tests.helpers.signing_keys import entry_manifest, keygen


def pair(name: str) -> Tuple[SecretKey, PublicKey]:
    secret_line, public_line = generate(name)
    return parse_secret(secret_line, "test"), parse_public(public_line, "test")


K1, P1 = pair("k1")
K2, P2 = pair("k2")
MANIFEST = entry_manifest()
SIG1 = parse_signature(sign(K1, MANIFEST))[1]


# -- keys ---------------------------------------------------------------------------------------------------

def test_a_key_pair_round_trips_and_signs() -> None:
    assert PublicKey(K1.name, K1.public) == P1
    name, signature = parse_signature(sign(K1, MANIFEST))
    assert name == "k1" and len(signature) == 64
    assert sign(K1, MANIFEST) == sign(K1, MANIFEST)  # deterministic: two signers write the same bytes
    assert verify(P1, MANIFEST, signature) and not verify(P2, MANIFEST, signature)


def test_keygen_files(tmp_path: "os.PathLike[str]") -> None:
    secret, public = keygen(str(tmp_path), "ci-2026")
    assert os.stat(secret).st_mode & 0o777 == 0o600 and os.stat(public).st_mode & 0o077 == 0o044
    assert read_secret_key(secret).name == "ci-2026"
    assert read_public_keys(public)[0].key == read_secret_key(secret).public


@pytest.mark.parametrize("text, expected", [
    ("k1", "is not NAME:BASE64"),
    (".k:AAAA", "is not NAME:BASE64"),
    ("k1:not base64!", "not base64"),
    ("k1:" + base64.b64encode(b"x" * 31).decode(), "holds 31 bytes; an ed25519 public key has 32"),
    ("k1:" + base64.b64encode(b"x" * 64).decode(), "a secret key? trust the NAME.pub file"),
])
def test_public_key_lines_refused(text: str, expected: str) -> None:
    with pytest.raises(KeyProblem, match=expected.replace("?", r"\?")):
        parse_public(text, "the key")


def test_key_files_refused(tmp_path: "os.PathLike[str]") -> None:
    secret, public = keygen(str(tmp_path), "k1")
    with pytest.raises(KeyProblem, match="may be read by others .mode 640."):
        os.chmod(secret, 0o640)
        read_secret_key(secret)
    os.chmod(secret, 0o600)
    with pytest.raises(KeyProblem, match="holds 32 bytes; an ed25519 secret key file holds 64"):
        os.chmod(public, 0o600)
        read_secret_key(public)
    with pytest.raises(KeyProblem, match="cannot be read: No such file"):
        read_secret_key(os.path.join(str(tmp_path), "absent.secret"))
    fifo = os.path.join(str(tmp_path), "fifo.pub")
    os.mkfifo(fifo)
    with pytest.raises(KeyProblem, match="is not a regular file"):
        read_public_keys(fifo)  # refused, not waited on
    big = os.path.join(str(tmp_path), "big.pub")
    with open(big, "w") as handle:
        handle.write("k1:" + "A" * 5000 + "\n")
    with pytest.raises(KeyProblem, match="larger than 4096 bytes"):
        read_public_keys(big)


def test_no_message_holds_key_material(tmp_path: "os.PathLike[str]") -> None:
    secret, _public = keygen(str(tmp_path), "k1")
    material = open(secret).read().strip()
    encoded = material.partition(":")[2]
    for env in ({"FLYDSL_CACHE_TRUSTED_KEYS": material}, {"FLYDSL_CACHE_TRUSTED_KEYS": secret},
                {"FLYDSL_CACHE_TRUSTED_KEYS": "k0:" + encoded[:40]}, {"FLYDSL_CACHE_TRUSTED_KEYS": material + ";"},
                {"FLYDSL_CACHE_SIGNING_KEY": material}, {"FLYDSL_CACHE_SIGNING_KEY": material + "!"}):
        with pytest.raises(BadInput) as info:
            load_settings({}, env)
        assert encoded not in info.value.reason and encoded[:20] not in info.value.reason
        assert info.value.reason.startswith(next(iter(env)) + "=")


@pytest.mark.parametrize("value", ["", " ", "\n", " \t\n "])
def test_trusted_keys_set_but_empty_are_bad_input_not_checks_off(value: str, tmp_path: "os.PathLike[str]") -> None:
    """Issue 26 item 6: `FLYDSL_CACHE_TRUSTED_KEYS="$(cat ci.pub)"` where ci.pub is not gives "": that turned
    signature checks off without a word (an empty variable meant the default).  Refused, naming the setting."""
    from ensure_flydsl.settings import load_settings

    _secret, public = keygen(str(tmp_path), "k1")
    refusals = []
    for flags, env in (({}, {"FLYDSL_CACHE_TRUSTED_KEYS": value}),
                       ({"cache_trusted_keys": flag_text("cache_trusted_keys", [value])}, {}),
                       ({"cache_trusted_keys": flag_text("cache_trusted_keys", [public, value])}, {}),
                       ({"cache_trusted_keys": flag_text("cache_trusted_keys", [value])},
                        {"FLYDSL_CACHE_TRUSTED_KEYS": public})):
        with pytest.raises(BadInput) as info:
            load_settings(flags, env)
        refusals.append(info.value.reason)
    for kwargs in ({"cache_trusted_keys": value}, {"cache_trusted_keys": [value]}, {"cache_trusted_keys": []}):
        with pytest.raises(BadInput) as info:
            load_settings(kwargs, {})
        refusals.append(info.value.reason)
    for reason in refusals:
        assert reason.startswith(("FLYDSL_CACHE_TRUSTED_KEYS=", "--cache-trusted-key=")), reason
        assert "set but empty, it would check no signatures" in reason and "absolute path" in reason, reason
        assert "\n" not in reason
    # The other settings keep every setting's rule: an empty variable is the default.
    assert load_settings({}, {"FLYDSL_CACHE_SIGNING_KEY": "", "FLYDSL_CACHE": ""}) == load_settings({}, {})
    assert load_settings({}, {"FLYDSL_CACHE_TRUSTED_KEYS": public}).cache_trusted_keys == (
        read_public_keys(public)[0].line(),)


# -- the verdict --------------------------------------------------------------------------------------------

def test_verdicts() -> None:
    assert judge(MANIFEST, {"k1": SIG1}, [P1]).trusted_by == ("k1",)
    assert judge(MANIFEST, {}, [P1]).problem == "is not signed"
    foreign = judge(MANIFEST, {"k2": parse_signature(sign(K2, MANIFEST))[1]}, [P1])
    assert foreign.problem == "is signed by k2, which is not trusted (trusted: k1)"
    assert not foreign.trusted and foreign.signers == ("k2",)
    changed = judge(MANIFEST + b" ", {"k1": SIG1}, [P1])
    assert changed.problem.startswith("was changed after k1 signed it: the signature does not match")
    moved = judge(MANIFEST, {}, [P1], other_versions=["k1"])
    assert moved.problem.startswith("was changed after k1 signed it: no signature covers")
    # A key of another name with the same bytes does not count: the name is part of what is trusted.
    assert not judge(MANIFEST, {"k1": SIG1}, [PublicKey("k9", P1.key)]).trusted


def test_rotation_two_trusted_keys() -> None:
    sig2 = parse_signature(sign(K2, MANIFEST))[1]
    both = [P1, P2]
    assert judge(MANIFEST, {"k1": SIG1}, both).trusted_by == ("k1",)  # signed by the old key
    assert judge(MANIFEST, {"k1": SIG1, "k2": sig2}, both).trusted_by == ("k1", "k2")  # re-signed by the new
    assert judge(MANIFEST, {"k1": SIG1, "k2": sig2}, [P2]).trusted_by == ("k2",)  # the old key retired


@pytest.mark.parametrize("data, why", [
    (b"k1:" + b"A" * 600 + b"\n", "larger than 512 bytes"),
    (b"k1:AAAA\nk1:AAAA\n", "not one line"),
    (b"k1:\xff\xfe", "not ASCII"),
    (b"k1:" + base64.b64encode(b"s" * 63) + b"\n", "holds 63 bytes"),
    (b"", "NAME:BASE64"),
])
def test_malformed_signatures_refused(data: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_signature(data)


# -- tampering: any byte of a signed manifest changed, inserted or removed ------------------------------------

def _tamper(data: bytes, how: str, at: int, byte: int) -> bytes:
    at %= len(data) + (1 if how == "insert" else 0)
    if how == "change":
        new = byte if byte != data[at] else (byte + 1) % 256
        return data[:at] + bytes([new]) + data[at + 1:]
    if how == "insert":
        return data[:at] + bytes([byte]) + data[at:]
    return data[:at] + data[at + 1:]


TAMPER = st.tuples(st.sampled_from(["change", "insert", "remove"]), st.integers(0, 1 << 20), st.integers(0, 255))


@settings(max_examples=400, deadline=None)
@given(TAMPER)
def test_any_tampered_manifest_is_refused_by_the_verification(tamper: Tuple[str, int, int]) -> None:
    tampered = _tamper(MANIFEST, *tamper)
    assert tampered != MANIFEST
    assert not verify(P1, tampered, SIG1)
    verdict = judge(tampered, {"k1": SIG1}, [P1, P2])
    assert not verdict.trusted and verdict.problem.startswith("was changed after k1 signed it")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(TAMPER)
def test_any_tampered_manifest_in_a_store_is_refused(tmp_path: "os.PathLike[str]",
                                                     tamper: Tuple[str, int, int]) -> None:
    """The store as an attacker leaves it: the manifest edited, the honest signature left where it was
    and also copied to the edited version's folder.  Whatever parses is refused."""
    root = os.path.join(str(tmp_path), os.urandom(6).hex())
    store = FolderStore(root)
    rel = write_signature(store, "tree", KEY, MANIFEST, K1)
    tampered = _tamper(MANIFEST, *tamper)
    try:
        entry = parse_manifest(tampered)
    except ValueError:
        return  # not a manifest any more: a miss, never installed
    store.put_bytes(signature_path("tree", KEY, tampered, "k1"), store.read_bytes(rel, 1 << 20) or b"")
    verdict = check_entry(store, entry, [P1])
    assert not verdict.trusted and "changed after k1 signed it" in verdict.problem


# -- the store's signature objects ------------------------------------------------------------------------------

def test_signatures_live_beside_the_manifest_per_version(tmp_path: "os.PathLike[str]") -> None:
    store = FolderStore(str(tmp_path))
    entry = parse_manifest(MANIFEST)
    assert not check_entry(store, entry, [P1]).trusted
    rel = write_signature(store, "tree", KEY, MANIFEST, K1)
    assert rel == f"entries/tree/{KEY}.sig/{manifest_sha(MANIFEST)}/k1.sig"
    assert check_entry(store, entry, [P1]).trusted_by == ("k1",)
    write_signature(store, "tree", KEY, MANIFEST, K2)
    assert check_entry(store, entry, [P1, P2]).trusted_by == ("k1", "k2")
    assert check_entry(store, entry, []).signers == ("k1", "k2")


def test_two_signers_at_once_write_the_same_object(tmp_path: "os.PathLike[str]") -> None:
    store = FolderStore(str(tmp_path))
    barrier = threading.Barrier(8)
    errors: List[BaseException] = []

    def signer() -> None:
        try:
            barrier.wait()
            for _ in range(20):
                write_signature(store, "tree", KEY, MANIFEST, K1)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=signer) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    folder = os.path.join(str(tmp_path), "entries", "tree", KEY + ".sig", manifest_sha(MANIFEST))
    assert os.listdir(folder) == ["k1.sig"]  # no temporary file left, one object
    assert check_entry(store, parse_manifest(MANIFEST), [P1]).trusted


def test_hostile_signature_objects(tmp_path: "os.PathLike[str]") -> None:
    """A FIFO, a huge file, a symlink to a huge file, garbage: each skipped (and named), none waited on, none
    read past the bound; the honest signature beside them still counts."""
    store = FolderStore(str(tmp_path))
    entry = parse_manifest(MANIFEST)
    folder = os.path.dirname(os.path.join(str(tmp_path), signature_path("tree", KEY, MANIFEST, "k1")))
    os.makedirs(folder)
    os.mkfifo(os.path.join(folder, "a-fifo.sig"))
    huge = os.path.join(str(tmp_path), "huge")
    with open(huge, "wb") as handle:
        handle.truncate(1 << 30)  # sparse: 1 GiB that nobody may read whole
    os.symlink(huge, os.path.join(folder, "b-link.sig"))
    with open(os.path.join(folder, "c-big.sig"), "wb") as handle:
        handle.truncate(SIGNATURE_MAX + 1)
    with open(os.path.join(folder, "d-garbage.sig"), "wb") as handle:
        handle.write(b"d-garbage:" + b"!" * 20)
    problems: List[str] = []
    assert check_entry(store, entry, [P1], problems).problem == "is not signed"
    assert len(problems) == 4 and all("ignored the signature" in p for p in problems)
    write_signature(store, "tree", KEY, MANIFEST, K1)
    assert check_entry(store, entry, [P1]).trusted_by == ("k1",)


def test_a_signature_named_for_another_key_is_refused(tmp_path: "os.PathLike[str]") -> None:
    store = FolderStore(str(tmp_path))
    store.put_bytes(signature_path("tree", KEY, MANIFEST, "k1"), sign(K2, MANIFEST))  # k2's bytes as "k1"
    problems: List[str] = []
    verdict = check_entry(store, parse_manifest(MANIFEST), [P1], problems)
    assert not verdict.trusted and "names the key k2" in problems[0]


def test_a_flood_of_foreign_objects_does_not_hide_the_trusted_one(tmp_path: "os.PathLike[str]") -> None:
    store = FolderStore(str(tmp_path))
    for n in range(100):
        write_signature(store, "tree", KEY, MANIFEST, pair(f"a{n:03d}")[0])
    write_signature(store, "tree", KEY, MANIFEST, K1)
    problems: List[str] = []
    assert check_entry(store, parse_manifest(MANIFEST), [P1], problems).trusted_by == ("k1",)
    assert any("read only 64 of the 101" in p for p in problems)




@pytest.mark.parametrize("old, new", [(b'"sha256":"abab', b'"sha256":"efab'), (b'"ci-host"', b'"ev-host"'),
                                      (b'"size":123456', b'"size":123457')])
def test_an_edited_manifest_that_still_parses_is_refused(tmp_path: "os.PathLike[str]", old: bytes, new: bytes) -> None:
    """A member's hash, the host, the blob's size: edits an attacker would make, each still a manifest."""
    store = FolderStore(str(tmp_path))
    write_signature(store, "tree", KEY, MANIFEST, K1)
    edited = MANIFEST.replace(old, new, 1)
    entry = parse_manifest(edited)  # still a well-formed manifest
    assert check_entry(store, entry, [P1]).problem.startswith("was changed after k1 signed it: no signature covers")
    store.put_bytes(signature_path("tree", KEY, edited, "k1"), sign(K1, MANIFEST))
    assert check_entry(store, entry, [P1]).problem.startswith("was changed after k1 signed it: the signature does")


def test_prune_removes_signatures_of_gone_or_replaced_manifests_once_old(tmp_path: "os.PathLike[str]") -> None:
    from ensure_flydsl.trees.remote import ORPHAN_GRACE_S, open_cache
    from tests.helpers.cache_entries import FIELDS

    source = os.path.join(str(tmp_path), "src")
    os.makedirs(source)
    with open(os.path.join(source, "a.py"), "w") as handle:
        handle.write("x = 1\n")
    folder = os.path.join(str(tmp_path), "cache")
    cache = open_cache(folder)
    entry = cache.put("tree", KEY, FIELDS, source, [K1]).entry
    current = os.path.join(folder, signature_path("tree", KEY, entry.manifest, "k1"))
    stale = os.path.join(folder, signature_path("tree", KEY, MANIFEST, "k1"))  # another version's
    write_signature(cache.store, "tree", KEY, MANIFEST, K1)
    cache.prune(1 << 40)
    assert os.path.exists(stale) and os.path.exists(current)  # young: maybe a publisher's, before its manifest
    old = time.time() - ORPHAN_GRACE_S - 60
    os.utime(stale, (old, old))
    os.utime(current, (old, old))
    removed = cache.prune(1 << 40)
    assert not os.path.exists(stale) and os.path.exists(current)  # the current manifest's signature stays
    assert [r.fields["path"] for r in removed] == [signature_path("tree", KEY, MANIFEST, "k1")]
    cache.prune(0)  # the entry goes; its (old) signature with it
    assert not os.path.exists(current)


def test_the_python_api_and_the_detached_worker_carry_the_key_settings(tmp_path: "os.PathLike[str]") -> None:
    import json

    from ensure_flydsl.cli.start import settings_from_json
    from ensure_flydsl.settings import load_settings

    secret, public = keygen(str(tmp_path), "k1")
    settings = load_settings({"cache_trusted_keys": [public, P2.line()], "cache_signing_key": secret}, {})
    assert settings.cache_trusted_keys == (read_public_keys(public)[0].line(), P2.line())
    assert settings.cache_signing_key == secret
    text = json.dumps(settings.to_json())
    assert settings_from_json(text) == settings
    assert open(secret).read().strip().partition(":")[2] not in text  # the worker gets the path, not the secret


def test_cache_list_names_each_signer_and_whether_it_is_trusted(tmp_path: "os.PathLike[str]") -> None:
    from ensure_flydsl.cli.cache import signers_of, signers_text
    from ensure_flydsl.settings import Settings
    from ensure_flydsl.trees.remote import Cache

    store = FolderStore(str(tmp_path))
    edited = MANIFEST.replace(b'"ci-host"', b'"ev-host"', 1)
    store.put_bytes(signature_path("tree", KEY, edited, "k1"), sign(K1, MANIFEST))  # a copied signature
    write_signature(store, "tree", KEY, edited, K2)
    entry = parse_manifest(edited)
    warnings: List[str] = []
    shown = signers_of(Settings(cache_trusted_keys=(P1.line(),)), Cache(store), [entry], warnings)
    assert signers_text(shown[0]) == (
        "signed by k1 (trusted key, but the signature does not match the manifest), k2 (not trusted)")
    plain = signers_of(Settings(), Cache(store), [entry], warnings)
    assert signers_text(plain[0]) == "signed by k1, k2" and not warnings
    assert signers_text([]) == "unsigned"


def test_without_the_library_a_secret_key_check_names_the_remedy(monkeypatch: pytest.MonkeyPatch) -> None:
    """`cache sign` checks its key's two halves: without cryptography that is MissingLibrary (its remedy, exit
    64), as signing and verifying are, not the ImportError of the first module it asked for (a traceback)."""
    for name in ("cryptography.hazmat.primitives.asymmetric.ed25519", "cryptography.hazmat.primitives.serialization"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(MissingLibrary, match="cryptography"):
        check_secret(SecretKey("k1", b"\0" * 32, b"\0" * 32))
