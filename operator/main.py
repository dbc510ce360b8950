"""`longctx operator`: runs the kopf handlers of handlers.py in this process."""

from __future__ import annotations

import argparse
import logging
import os


def add_arguments(parser: argparse.ArgumentParser) -> None:
    scope = parser.add_mutually_exclusive_group(required=True)
    scope.add_argument("--namespace", "-n", action="append", dest="namespaces", metavar="NS",
                       help="watch this namespace (repeatable)")
    scope.add_argument("--all-namespaces", "-A", action="store_true", help="watch every namespace")
    parser.add_argument("--liveness-port", type=int, default=8080,
                        help="serve kopf's liveness probe on http://0.0.0.0:PORT/healthz (0: off)")
    parser.add_argument("--liveness", metavar="URL", help="kopf-style liveness endpoint URL (overrides --liveness-port)")
    parser.add_argument("--standalone", action="store_true",
                        help="accepted for kopf compatibility: the operator always runs standalone (one replica)")
    parser.add_argument("--metrics-port", type=int, default=8000,
                        help="serve the operator's Prometheus metrics on this port (0: off)")
    parser.add_argument("--workers", type=int, help="concurrent reconciliations (default 16)")
    parser.add_argument("--progress-interval", type=float,
                        help="seconds between reads of rank 0's metrics (default 10)")
    parser.add_argument("--verbose", "-v", action="store_true")


def run(args: argparse.Namespace) -> int:
    import kopf

    from . import handlers  # noqa: F401 - registers the handlers

    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not args.verbose:  # kopf logs every handled watch event at INFO
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    if args.metrics_port:
        os.environ["LONGCTX_OPERATOR_METRICS_PORT"] = str(args.metrics_port)
    if args.workers:
        os.environ["LONGCTX_OPERATOR_WORKERS"] = str(args.workers)
    if args.progress_interval:
        os.environ["LONGCTX_PROGRESS_INTERVAL_SECONDS"] = str(args.progress_interval)
    kopf.run(standalone=True, clusterwide=args.all_namespaces, namespaces=args.namespaces or (),
             liveness_endpoint=args.liveness or (f"http://0.0.0.0:{args.liveness_port}/healthz"
                                                 if args.liveness_port else None))
    return 0
