"""The LongContextJob API: pydantic models (the source of truth), CEL rules, CRD generation."""

from .spec import LongContextJob, LongContextJobSpec
from .status import LongContextJobStatus
from .validate import InvalidJob, Problem, parse_job, problems

__all__ = [
    "LongContextJob",
    "LongContextJobSpec",
    "LongContextJobStatus",
    "InvalidJob",
    "Problem",
    "parse_job",
    "problems",
]
