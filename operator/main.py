"""`longctx operator`: runs the kopf handlers of handlers.py in this process.

The configuration is the chart's operator.yaml (`--config`); each flag overrides one of its
values. It is loaded once here and reaches the handlers through kopf's memo.
"""

from __future__ import annotations

import argparse
import logging

from .config import OperatorConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="operator configuration (the chart's operator.yaml)")
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "--namespace",
        "-n",
        action="append",
        dest="namespaces",
        metavar="NS",
        help="watch this namespace (repeatable; default: the configuration's watchNamespaces)",
    )
    scope.add_argument(
        "--all-namespaces",
        "-A",
        action="store_true",
        help="watch every namespace (the default when the configuration names none)",
    )
    parser.add_argument("--health-port", type=int, help="kopf's liveness endpoint /healthz on this port (0: off)")
    parser.add_argument("--metrics-port", type=int, help="the operator's Prometheus metrics on this port (0: off)")
    defaults = OperatorConfig.model_fields
    parser.add_argument(
        "--workers",
        type=int,
        help=f"concurrent decisions (default {defaults['workers'].default}); each job's writes run apart",
    )
    parser.add_argument(
        "--progress-interval",
        type=float,
        dest="progress_interval_seconds",
        help=f"seconds between reads of rank 0's metrics (default {defaults['progress_interval_seconds'].default:g})",
    )
    parser.add_argument("--verbose", "-v", action="store_true")


def config_from(args: argparse.Namespace, base: OperatorConfig) -> OperatorConfig:
    """`base` with the values the flags set."""
    overrides = {
        name: getattr(args, name)
        for name in ("health_port", "metrics_port", "workers", "progress_interval_seconds")
        if getattr(args, name) is not None
    }
    if args.namespaces:
        overrides["watch_namespaces"] = args.namespaces
    elif args.all_namespaces:
        overrides["watch_namespaces"] = []
    return OperatorConfig.model_validate({**base.model_dump(), **overrides})


def run(config: OperatorConfig, verbose: bool = False) -> int:
    import kopf

    from .handlers import make_registry

    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if not verbose:  # kopf logs every handled watch event at INFO
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    kopf.run(
        registry=make_registry(config),
        memo=kopf.Memo(config=config),
        standalone=True,
        clusterwide=not config.watch_namespaces,
        namespaces=config.watch_namespaces,
        liveness_endpoint=f"http://0.0.0.0:{config.health_port}/healthz" if config.health_port else None,
    )
    return 0
