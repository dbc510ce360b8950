"""lifecycle.draft: text quoted from pods, Kueue and the API server reaches status and Events printable."""

from longctx_operator.api.status import LongContextJobStatus
from longctx_operator.observe import KueueVerdict, RankFailure, WorkloadObservation
from support.lifecycle import T0, spec, step

HOSTILE = "boom\x1b[2J\x1b[H\rFAKE: Succeeded\nnext\u202eesrever\x00\x7f\x85\u2028end\t!"


def test_text_from_pods_and_kueue_reaches_status_and_events_without_control_characters():
    """A trainer image picks its own termination reason, and Kueue and the API server quote names
    and values: terminal escapes, carriage returns, line breaks or bidi overrides in them must not
    reach what `kubectl describe` prints."""
    s = spec(restartPolicy={"maxRestarts": 0})
    admitted, _ = step(s, LongContextJobStatus())
    hostile = WorkloadObservation(
        exists=True, created=T0, total=2, running=1, failed=1, failure=RankFailure(1, "job-g1-1-x", HOSTILE)
    )
    failed, _ = step(s, admitted.status, hostile)
    kueue = spec(scheduling={"admission": "kueue", "queueName": "q"})
    queued, _ = step(kueue, LongContextJobStatus())
    waiting = WorkloadObservation(
        exists=True, suspended=True, created=T0, total=2, kueue=KueueVerdict(False, "Pending\x1b[31m", HOSTILE)
    )
    quoted, _ = step(kueue, queued.status, waiting)
    refused = WorkloadObservation(exists=False, create_error=f"creating the workload failed: 422 {HOSTILE}")
    create_failed, _ = step(s, admitted.status, refused)
    for decision in (failed, quoted, create_failed):
        texts = [decision.status.message] + [c.message or "" for c in decision.status.conditions]
        texts += [e.message for e in decision.events]
        assert "FAKE: Succeeded" in decision.status.message and "end !" in decision.status.message
        assert all(text.isprintable() for text in texts), texts
