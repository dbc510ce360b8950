"""Render a LongContextJob into Kubernetes objects: pure functions that build them as data."""

from .layout import ResolvedLayout
from .workload import Workload, render_workload, render_yaml

__all__ = ["ResolvedLayout", "Workload", "render_workload", "render_yaml"]
