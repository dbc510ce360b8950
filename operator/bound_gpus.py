"""GPUs per node held by pods bound to nodes, counted from the API server's protobuf list of pods.

Builtin admission lists the pods that are not the jobs' own (occupancy.py). On a busy cluster that
is tens of thousands of pods, and the count needs two things of each: its node and its containers'
GPU requests. Served as JSON, the list costs the API server 2-3x what protobuf in large pages does,
and the operator must decode every pod (docs/operator.md, "The list's wait"). Here the pods bound to
a node are read as protobuf with a schema of only those fields: the `protobuf` package's C parser
skips everything else, and no dict is built for any pod.

The schema holds Kubernetes' own field numbers (read from k8s.io/api and k8s.io/apimachinery
v0.36.3's generated.proto; a protobuf field keeps its number for good): PodList.items = 2,
Pod.spec = 2, PodSpec.containers = 2, PodSpec.nodeName = 10, Container.resources = 8,
ResourceRequirements.limits = 1 and requests = 2, Quantity.string = 1, ListMeta.continue = 3; a
protobuf response is the 4 bytes `k8s\\0` and a runtime.Unknown whose raw (2) is the PodList.
tests/integration/test_bound_gpus.py checks the count against the JSON list on a real API server.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from .admission import GPU, quantity

PROTOBUF = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"

_F = descriptor_pb2.FieldDescriptorProto
_SCHEMA = {  # message: [(field, number, type, message type or None, repeated)]
    "Unknown": [("raw", 2, _F.TYPE_BYTES, None, False)],
    "ListMeta": [("continue", 3, _F.TYPE_STRING, None, False)],
    "PodList": [("metadata", 1, _F.TYPE_MESSAGE, "ListMeta", False), ("items", 2, _F.TYPE_MESSAGE, "Pod", True)],
    "Pod": [("spec", 2, _F.TYPE_MESSAGE, "PodSpec", False)],
    "PodSpec": [
        ("containers", 2, _F.TYPE_MESSAGE, "Container", True),
        ("nodeName", 10, _F.TYPE_STRING, None, False),
    ],
    "Container": [("resources", 8, _F.TYPE_MESSAGE, "ResourceRequirements", False)],
    "ResourceRequirements": [
        ("limits", 1, _F.TYPE_MESSAGE, "ResourceRequirements.LimitsEntry", True),
        ("requests", 2, _F.TYPE_MESSAGE, "ResourceRequirements.RequestsEntry", True),
    ],
    "Quantity": [("string", 1, _F.TYPE_STRING, None, False)],
}
_PACKAGE = "longctx.boundgpus"


def _field(name: str, number: int, kind: int, type_name: str | None, repeated: bool) -> _F:
    field = _F(name=name, number=number, type=kind, label=_F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL)
    if type_name:
        field.type_name = f".{_PACKAGE}.{type_name}"
    return field


def _messages() -> dict[str, type]:
    """The schema's message classes, in a pool of their own (never the process's default pool)."""
    file = descriptor_pb2.FileDescriptorProto(name="longctx_bound_gpus.proto", package=_PACKAGE, syntax="proto2")
    for name, fields in _SCHEMA.items():
        message = file.message_type.add(name=name)
        message.field.extend(_field(*field) for field in fields)
        if name == "ResourceRequirements":
            for entry in ("LimitsEntry", "RequestsEntry"):  # map<string, Quantity>
                nested = message.nested_type.add(name=entry)
                nested.options.map_entry = True
                nested.field.extend(
                    [
                        _field("key", 1, _F.TYPE_STRING, None, False),
                        _field("value", 2, _F.TYPE_MESSAGE, "Quantity", False),
                    ]
                )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}")) for name in _SCHEMA}


MESSAGES = _messages()
_UNKNOWN, _POD_LIST = MESSAGES["Unknown"], MESSAGES["PodList"]


def count_page(data: bytes, used: dict[str, int]) -> str | None:
    """Adds the GPUs of each pod of one protobuf page to `used[node]` (requests, else limits, as
    admission.pod_gpus) and returns the page's continue token (None on the last page). A pod not
    bound to a node (not listed here: the list selects bound pods) would be skipped."""
    if not data.startswith(MAGIC):
        raise ValueError(f"not a Kubernetes protobuf response: {data[:16]!r}")
    page = _POD_LIST.FromString(_UNKNOWN.FromString(data[len(MAGIC) :]).raw)
    for pod in page.items:
        spec = pod.spec
        if not spec.nodeName:
            continue
        gpus = 0
        for container in spec.containers:
            resources = container.resources
            held = resources.requests.get(GPU)
            if held is None:
                held = resources.limits.get(GPU)
            if held is not None:
                gpus += quantity(held.string)
        if gpus:
            used[spec.nodeName] = used.get(spec.nodeName, 0) + gpus
    return getattr(page.metadata, "continue") or None
