"""Valid specs that will not do what their author most likely wants: warnings, not errors.

The API server cannot warn from a CRD schema, so the operator posts each as a Warning Event when
it plans a spec, and `longctx validate` / `plan` / `render` print them on stderr (cli_advice).
"""

from __future__ import annotations

from dataclasses import dataclass

from longctx_trainer.contract.config import is_url

from .. import reasons
from ..reasons import Reason
from .spec import LongContextJobSpec


@dataclass(frozen=True)
class Advice:
    reason: Reason  # the Event reason
    field: str
    message: str

    def __str__(self) -> str:
        return f"warning: {self.field}: {self.message}"


def _checkpoints_survive(spec: LongContextJobSpec) -> bool:
    return is_url(spec.checkpoint.path) or spec.checkpoint.persistent_volume_claim is not None


def advice(spec: LongContextJobSpec) -> list[Advice]:
    """What in a valid spec is likely a mistake on Kubernetes, each naming the field to change."""
    found = []
    if not _checkpoints_survive(spec):
        nodes = spec.resources.nodes
        where = (
            f"the {nodes} pods would write their parts of each checkpoint to {nodes} different disks, "
            f"so the trainer runs without checkpoints"
            if nodes > 1
            else "it lives on the pod's own disk"
        )
        found.append(
            Advice(
                reasons.CHECKPOINT_NOT_PERSISTENT,
                "spec.checkpoint.persistentVolumeClaim",
                f"on Kubernetes, checkpoint.path {spec.checkpoint.path!r} is not on shared storage: {where}, "
                f"and a gang restart starts again from step 0; mount a ReadWriteMany claim here or use an "
                f"object-store path (gs://, s3://)",
            )
        )
    return found


def cli_advice(spec: LongContextJobSpec) -> list[Advice]:
    """The advice the CLI prints. CPU jobs leave out where checkpoints live: they are what
    `longctx run` trains on this machine (checkpoints in its run directory) and what test clusters
    run, and a paragraph about cluster storage on every command would bury what matters. The
    operator still posts the Event when such a job reaches a cluster."""
    found = advice(spec)
    if spec.on_cpu:
        found = [a for a in found if a.reason != reasons.CHECKPOINT_NOT_PERSISTENT]
    return found
