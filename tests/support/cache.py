"""The machine's cache of slow builds (hack/lib.sh's `cache_root`): `$LONGCTX_CACHE`, else
~/.cache/longctx."""

import os
from pathlib import Path


def cache_root() -> Path:
    return Path(os.environ.get("LONGCTX_CACHE", Path.home() / ".cache" / "longctx"))
