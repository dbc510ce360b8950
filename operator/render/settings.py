"""Operator-wide defaults the renderer needs (set by Helm values through the operator's env)."""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict


class OperatorSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    trainer_image: str = "ghcr.io/longctx/trainer:0.1.0"
    image_pull_policy: str = "IfNotPresent"
    tcpx_daemon_image: str = "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpx/tcpgpudmarxd-dev:v2.0.12"
    tcpxo_daemon_image: str = "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/tcpgpudmarxd-dev:v1.0.14"

    @classmethod
    def from_env(cls, environ=os.environ) -> "OperatorSettings":
        """LONGCTX_TRAINER_IMAGE, LONGCTX_IMAGE_PULL_POLICY, LONGCTX_TCPX_DAEMON_IMAGE, ..."""
        values = {name: environ[f"LONGCTX_{name.upper()}"] for name in cls.model_fields
                  if f"LONGCTX_{name.upper()}" in environ}
        return cls(**values)
