"""`longctx run` (operator/localrun.py) and the rendered rendezvous name: in a cluster rank 0 is a
fully qualified DNS name, locally it is this host's loopback."""

from longctx_operator.api import parse_job
from longctx_operator.localrun import local_workers
from support.jobs import job_manifest

JOB = job_manifest(
    "j", namespace="team", sequence_length=512, globalBatchTokens=2048, layout=(2, 2, 1), resources=(2, 2, "cpu")
)


def test_local_workers_meet_on_loopback_not_at_the_cluster_name(tmp_path):
    workers = local_workers(parse_job(JOB), tmp_path, 12345)
    assert len(workers) == 2
    for worker in workers:
        assert worker.env["JAX_COORDINATOR_ADDRESS"] == "127.0.0.1:12345"
        assert not [value for value in worker.env.values() if ".svc." in value]
