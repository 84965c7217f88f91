"""Issue 21's benchmark: what signed cache entries cost, per entry, beside the fetch of an entry for scale.

    python benchmarks/signing.py [--runs 31] [--work DIR]

For manifests of three sizes (a tree of 10, 1,000 and 10,000 files: the real FlyDSL tree has a few
thousand), measured in this process, with real ed25519 keys (the cryptography package):

- sign: the signature of the manifest's bytes (what a publish adds per key);
- verify (crypto): one signature checked against one trusted key;
- verify (entry): what a fetch with FLYDSL_CACHE_TRUSTED_KEYS adds: list the entry's signature folder,
  read its signature (bounded), verify it (`binary_cache/signing.py: check_entry`), in a folder cache;
- fetch: `Cache.get` of the same entry (its blob unpacked, every hash checked) into a new folder, for
  scale; the files are 4 KiB each, so 10,000 files is a 40 MiB tree.

Plus the one-time cost per process of importing the cryptography package (a fresh interpreter that
imports it, less one that does not), paid only by runs with a key set.  Medians of --runs rounds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, List, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))

from ensure_flydsl.trees.manifest import cache_key  # noqa: E402
from ensure_flydsl.trees.remote import open_cache  # noqa: E402
from ensure_flydsl.trees.signing import (  # noqa: E402
    PublicKey,
    SecretKey,
    check_entry,
    generate,
    parse_public,
    parse_secret,
    parse_signature,
    sign,
    verify,
)

SIZES = (10, 1000, 10000)


def median_ms(fn: Callable[[], object], runs: int) -> float:
    times: List[float] = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def make_tree(folder: str, files: int) -> None:
    for n in range(files):
        sub = os.path.join(folder, "flydsl", f"pkg{n // 100:03d}")
        os.makedirs(sub, exist_ok=True)
        with open(os.path.join(sub, f"mod{n:05d}.py"), "wb") as handle:
            handle.write(os.urandom(2048).hex().encode())  # 4 KiB that do not compress to nothing


def import_cost(runs: int) -> float:
    def fresh(code: str) -> float:
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        return time.perf_counter() - started

    with_import, without = [], []
    for _ in range(max(5, runs // 3)):
        with_import.append(fresh("import cryptography.hazmat.primitives.asymmetric.ed25519"))
        without.append(fresh("pass"))
    return (statistics.median(with_import) - statistics.median(without)) * 1000


def table(title: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    cells = [list(header)] + [list(row) for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = [f"\n{title}\n"]
    for n, row in enumerate(cells):
        lines.append("| " + " | ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths)))
                     + " |")
        if n == 0:
            lines.append("|" + "|".join("-" * (w + 2) if i == 0 else "-" * (w + 1) + ":" for i, w in enumerate(widths))
                         + "|")
    return "\n".join(lines)


def measure(work: str, files: int, secret: SecretKey, public: PublicKey, runs: int) -> List[str]:
    source = os.path.join(work, f"tree-{files}")
    shutil.rmtree(source, ignore_errors=True)
    make_tree(source, files)
    shutil.rmtree(os.path.join(work, f"cache-{files}"), ignore_errors=True)  # a publish replaces no manifest
    cache = open_cache(os.path.join(work, f"cache-{files}"))
    fields = {"files": files}
    entry = cache.put("tree", cache_key("tree", fields), fields, source, [secret]).entry
    manifest = entry.manifest
    signature = parse_signature(sign(secret, manifest))[1]
    assert check_entry(cache.store, entry, [public]).trusted
    sign_ms = median_ms(lambda: sign(secret, manifest), runs)
    crypto_ms = median_ms(lambda: verify(public, manifest, signature), runs)
    entry_ms = median_ms(lambda: check_entry(cache.store, entry, [public]), runs)
    dest = os.path.join(work, "dest")

    def fetch() -> None:
        shutil.rmtree(dest, ignore_errors=True)
        cache.get(entry, dest)

    fetch_ms = median_ms(fetch, max(3, runs // 4))
    return [f"{files} files", f"{len(manifest) / 1024:.1f} KiB", f"{sign_ms:.3f}", f"{crypto_ms:.3f}",
            f"{entry_ms:.3f}", f"{fetch_ms:.1f}", f"{100 * entry_ms / fetch_ms:.2f}%"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=31)
    parser.add_argument("--work", default=None, help="a scratch folder (default: a temporary one)")
    args = parser.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="signing-bench-")
    secret_line, public_line = generate("ci")
    secret, public = parse_secret(secret_line, "bench"), parse_public(public_line, "bench")
    rows = [measure(work, files, secret, public, args.runs) for files in SIZES]
    print(table(f"signed cache entries, per entry (medians of {args.runs} rounds; fetch: of {max(3, args.runs // 4)})",
                ["tree entry", "manifest", "sign ms", "verify (crypto) ms", "verify (entry) ms", "fetch ms",
                 "verify / fetch"], rows))
    print(f"\nimporting the cryptography package, once per process with a key set: {import_cost(args.runs):.0f} ms")
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
