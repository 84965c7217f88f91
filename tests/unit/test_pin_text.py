"""setting_values._pin_text and _module_name are ``re.match(_PIN, value)`` and ``re.match(_MODULE, value)``
without re (the warm call's settings parse the pin and the twin's request, and import no re): each agrees with its
pattern on every kind of value, good and bad."""

from __future__ import annotations

import random
import re

from ensure_flydsl.setting_values import _MODULE, _PIN, _module_name, _pin_text

ALPHABET = "aZ09_./+-@{}~^: \t\n\u00e9\u0661\u212a"
MODULE_ALPHABET = "aZ_09.\u00e9\u212a- \n"


def test_pin_text_is_the_pattern() -> None:
    cases = ["", "v0.2.2", "main", "-x", "_x", ".x", "a" * 255, "a" * 256, "264983721d470f2e", "feature/x+y",
             "a b", "x\n", "\u00e9", "\u0661", "\u212a", "release/v0.2.2", "a..b", "A-Z_09"]
    rng = random.Random(7)
    cases += ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 8))) for _ in range(5000)]
    for value in cases:
        assert _pin_text(value) == (re.match(_PIN, value) is not None), repr(value)


def test_module_name_is_the_pattern() -> None:
    cases = ["", "flydsl", "kernels.moe_gemm_2stage", "a.", ".a", "a..b", "_x._y", "0a", "a.0b", "a\n", "\u00e9",
             "\u212a", "a-b", "a b"]
    rng = random.Random(11)
    cases += ["".join(rng.choice(MODULE_ALPHABET) for _ in range(rng.randint(0, 8))) for _ in range(5000)]
    for value in cases:
        assert _module_name(value) == (re.match(_MODULE, value) is not None), repr(value)
