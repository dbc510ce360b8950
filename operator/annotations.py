"""Pod annotations a job asks for (its longctx.io/pod-annotations annotation), under the admin's
allow-list (OperatorConfig.allowedPodAnnotations).

Annotations on pods are not harmless: some CNI plugins read networks of other namespaces from
them, runtimes read AppArmor or device-injection settings, so a job may only set the keys its
cluster admin allows. Anything else is refused with a reason the job's status shows.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from .api.spec import QUALIFIED_NAME_PATTERN
from .config import OperatorConfig
from .names import PLACEMENT_ANNOTATION, POD_ANNOTATIONS_ANNOTATION

MAX_ENTRIES = 64
MAX_BYTES = 64 * 1024


@dataclass(frozen=True)
class PodAnnotations:
    values: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    """Why the requested annotations were refused (then `values` is empty)."""


def _refused(reason: str) -> PodAnnotations:
    return PodAnnotations(error=f"annotation {POD_ANNOTATIONS_ANNOTATION}: {reason}")


def pod_annotations(job_annotations: dict[str, str], config: OperatorConfig) -> PodAnnotations:
    """The annotations to put on the job's pods, or the reason they are refused."""
    raw = job_annotations.get(POD_ANNOTATIONS_ANNOTATION)
    if raw is None:
        return PodAnnotations()
    if len(raw.encode()) > MAX_BYTES:
        return _refused(f"larger than {MAX_BYTES} bytes")
    try:
        requested = json.loads(raw)
    except (ValueError, RecursionError):
        return _refused("not valid JSON")
    if not isinstance(requested, dict):
        return _refused("must be a JSON object of strings")
    if len(requested) > MAX_ENTRIES:
        return _refused(f"more than {MAX_ENTRIES} entries")
    for key, value in requested.items():
        if not isinstance(value, str):
            return _refused(f"the value of {json.dumps(key)} must be a string")
        if len(key) > 317 or re.fullmatch(QUALIFIED_NAME_PATTERN.strip("^$"), key) is None:
            return _refused(f"{json.dumps(key)} is not an annotation key")
        if key == PLACEMENT_ANNOTATION:  # the operator's own, whatever the allow-list says
            return _refused(f"{json.dumps(key)} is written by the operator")
        if not config.pod_annotation_allowed(key):
            allowed = ", ".join(config.allowed_pod_annotations) or "none"
            return _refused(f"{json.dumps(key)} is not allowed by the operator's allowedPodAnnotations ({allowed})")
    return PodAnnotations(values=requested)
