"""LongContextJob manifests for tests, built by keyword (as JobSet's test builders do), so that a
test spells only the fields it is about."""

from __future__ import annotations

from longctx_operator.names import API_VERSION, KIND


def job_manifest(
    name: str = "job",
    *,
    namespace: str | None = None,
    preset: str = "tiny",
    sequence_length: int = 4096,
    layout: tuple[int, int, int] | None = None,
    resources: tuple[int, int, str] | None = None,
    metadata: dict | None = None,
    **spec,
) -> dict:
    """A manifest of model `preset` at `sequence_length` tokens. `layout`: manual parallelism
    (data, context, tensor); `resources`: (nodes, gpusPerNode, gpuType); `metadata`: more metadata
    fields (uid, annotations...); any other keyword is a spec field under its API (camelCase) name."""
    body: dict = {"model": {"preset": preset}, "sequenceLength": sequence_length}
    if layout is not None:
        data, context, tensor = layout
        body["parallelism"] = {"mode": "manual", "data": data, "context": context, "tensor": tensor}
    if resources is not None:
        nodes, gpus_per_node, gpu_type = resources
        body["resources"] = {"nodes": nodes, "gpusPerNode": gpus_per_node, "gpuType": gpu_type}
    meta = {"name": name, **({"namespace": namespace} if namespace else {}), **(metadata or {})}
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta, "spec": {**body, **spec}}
