"""Kubernetes resource quantities (the subset spec.QUANTITY_PATTERN admits) as numbers."""

from __future__ import annotations

import re

from .spec import QUANTITY_PATTERN

_SUFFIXES = {
    "": 1,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
}


def parse_quantity(text: str) -> float:
    """ "1800Gi" -> 1800 * 2**30; raises ValueError for anything the API pattern rejects."""
    match = re.fullmatch(QUANTITY_PATTERN, text)
    if match is None:
        raise ValueError(f"not a resource quantity: {text!r}")
    suffix = match.group(2) or ""
    return float(text[: len(text) - len(suffix)]) * _SUFFIXES[suffix]
