"""Render a LongContextJob into Kubernetes objects: pure functions over jinja2 templates."""

from .layout import ResolvedLayout
from .settings import OperatorSettings
from .workload import render_workload, render_yaml

__all__ = ["OperatorSettings", "ResolvedLayout", "render_workload", "render_yaml"]
