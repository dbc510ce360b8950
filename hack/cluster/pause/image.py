"""Writes the pause image as an OCI image-layout tar that `ctr images import` reads, from a
statically linked pause binary: one layer holding /pause, no base image, no registry.

Usage: python3 image.py PAUSE_BINARY IMAGE_REF OUTPUT_TAR
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
import tarfile
from pathlib import Path

PLATFORM = {"architecture": "amd64", "os": "linux"}


def tar_bytes(members: dict[str, tuple[bytes, int]]) -> bytes:
    """A reproducible tar (zero mtimes, root owner) of name -> (content, mode)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, (content, mode) in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(content), mode, 0
            tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def descriptor(media_type: str, blob: bytes, **extra) -> dict:
    return {"mediaType": media_type, "digest": f"sha256:{hashlib.sha256(blob).hexdigest()}", "size": len(blob), **extra}


def image_layout(binary: bytes, ref: str) -> bytes:
    layer = tar_bytes({"pause": (binary, 0o755)})
    config = json.dumps(
        {
            **PLATFORM,
            "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(layer).hexdigest()}"]},
        }
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": descriptor("application/vnd.oci.image.config.v1+json", config),
            "layers": [descriptor("application/vnd.oci.image.layer.v1.tar", layer)],
        }
    ).encode()
    tag = ref.rsplit(":", 1)[1]
    annotations = {"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": tag}
    index = {
        "schemaVersion": 2,
        "manifests": [
            descriptor(
                "application/vnd.oci.image.manifest.v1+json", manifest, platform=PLATFORM, annotations=annotations
            )
        ],
    }
    blobs = {f"blobs/sha256/{hashlib.sha256(blob).hexdigest()}": (blob, 0o644) for blob in (layer, config, manifest)}
    return tar_bytes(
        {
            "oci-layout": (json.dumps({"imageLayoutVersion": "1.0.0"}).encode(), 0o644),
            "index.json": (json.dumps(index).encode(), 0o644),
            **blobs,
        }
    )


if __name__ == "__main__":
    binary, ref, output = sys.argv[1:]
    Path(output).write_bytes(image_layout(Path(binary).read_bytes(), ref))
