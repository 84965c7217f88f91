"""support/names.py: pin_text and module_name are ``re.match(PIN, value)`` and ``re.match(MODULE, value)``
without re (the warm call's settings parse the pin and the twin's request, and import no re): each agrees with its
pattern on every kind of value, good and bad."""

from __future__ import annotations

import random
import re

from ensure_flydsl.support.names import MODULE, PIN, module_name, pin_text

ALPHABET = "aZ09_./+-@{}~^: \t\n\u00e9\u0661\u212a"
MODULE_ALPHABET = "aZ_09.\u00e9\u212a- \n"


def testpin_text_is_the_pattern() -> None:
    cases = ["", "v0.2.2", "main", "-x", "_x", ".x", "a" * 255, "a" * 256, "264983721d470f2e", "feature/x+y",
             "a b", "x\n", "\u00e9", "\u0661", "\u212a", "release/v0.2.2", "a..b", "A-Z_09"]
    rng = random.Random(7)
    cases += ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 8))) for _ in range(5000)]
    for value in cases:
        assert pin_text(value) == (re.match(PIN, value) is not None), repr(value)


def testmodule_name_is_the_pattern() -> None:
    cases = ["", "flydsl", "kernels.moe_gemm_2stage", "a.", ".a", "a..b", "_x._y", "0a", "a.0b", "a\n", "\u00e9",
             "\u212a", "a-b", "a b"]
    rng = random.Random(11)
    cases += ["".join(rng.choice(MODULE_ALPHABET) for _ in range(rng.randint(0, 8))) for _ in range(5000)]
    for value in cases:
        assert module_name(value) == (re.match(MODULE, value) is not None), repr(value)
