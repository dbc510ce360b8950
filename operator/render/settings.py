"""Operator-wide settings: the Helm chart writes them to operator.yaml (LONGCTX_OPERATOR_CONFIG).

Keys are camelCase as in the chart's ConfigMap; keys this model does not know belong to other
parts of the operator and are ignored here. LONGCTX_TRAINER_IMAGE and friends override the file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

CONFIG_ENV = "LONGCTX_OPERATOR_CONFIG"


class OperatorSettings(BaseModel):
    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True,
                              extra="ignore")

    trainer_image: str = "ghcr.io/longctx/longctx-trainer:0.1.0"
    trainer_image_pull_policy: str = "IfNotPresent"
    tcpx_daemon_image: str = "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpx/tcpgpudmarxd-dev:v2.0.12"
    tcpxo_daemon_image: str = "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/tcpgpudmarxd-dev:v1.0.14"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> "OperatorSettings":
        values: dict = {}
        if environ.get(CONFIG_ENV):
            values.update(yaml.safe_load(Path(environ[CONFIG_ENV]).read_text()) or {})
        for name in cls.model_fields:
            override = environ.get(f"LONGCTX_{name.upper()}")
            if override:
                values[to_camel(name)] = override
        return cls.model_validate(values)
