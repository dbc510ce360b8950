"""Resource quantities as the API pattern admits them (operator/api/quantity.py)."""

import re

import pytest

from longctx_operator.api.quantity import parse_quantity
from longctx_operator.api.spec import QUANTITY_PATTERN


@pytest.mark.parametrize(
    "text,value",
    [
        ("1800Gi", 1800 * 2**30),
        ("2Ti", 2 * 2**40),
        ("512Mi", 512 * 2**20),
        ("1.5G", 1.5e9),
        ("96", 96),
        ("500m", 0.5),
        ("64k", 64000),
        ("3Ki", 3072),
    ],
)
def test_parses_binary_and_decimal_suffixes(text, value):
    assert parse_quantity(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["", "Gi", "1.5.2Gi", "1e3", "-1Gi", "12gi", "1 Gi"])
def test_rejects_what_the_api_pattern_rejects(text):
    assert re.match(QUANTITY_PATTERN, text) is None
    with pytest.raises(ValueError, match="not a resource quantity"):
        parse_quantity(text)
