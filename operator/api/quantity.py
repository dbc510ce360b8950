"""Kubernetes resource quantities (the subset spec.QUANTITY_PATTERN admits) as numbers."""

from __future__ import annotations

import re
from decimal import Decimal

from .spec import QUANTITY_PATTERN

MULTIPLIERS: dict[str, Decimal] = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1)}
"""Every suffix a Kubernetes quantity may carry, and its value: decimal SI and binary."""
MULTIPLIERS |= {suffix: Decimal(10) ** (3 * (i + 1)) for i, suffix in enumerate("kMGTPE")}
MULTIPLIERS |= {f"{suffix}i": Decimal(2) ** (10 * (i + 1)) for i, suffix in enumerate("KMGTPE")}


def parse_quantity(text: str) -> float:
    """ "1800Gi" -> 1800 * 2**30; raises ValueError for anything the API pattern rejects."""
    match = re.fullmatch(QUANTITY_PATTERN, text)
    if match is None:
        raise ValueError(f"not a resource quantity: {text!r}")
    suffix = match.group(2) or ""
    return float(Decimal(text[: len(text) - len(suffix)]) * MULTIPLIERS[suffix])
