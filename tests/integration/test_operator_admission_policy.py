"""The operator's admission policy on the real control plane (docs/operator.md, Admit): an operator
configured with `admissionModes: [builtin]` holds a job that asks for `scheduling.admission none`
Pending with reason AdmissionNotAllowed and creates nothing; once the author switches to builtin
the gang is admitted and runs. Its own module and operator: the operator of test_operator.py
allows every mode and must not be running at the same time."""

from __future__ import annotations

import pytest

from longctx_operator import conditions as cond
from longctx_operator import reasons
from support import operator_harness as h

pytestmark = pytest.mark.integration


def test_an_admission_mode_outside_the_allow_list_is_held_with_its_reason(
    cluster, admin_kubectl, kubectl, wait_until, namespace, tmp_path
):
    nodes = h.add_pool_nodes(admin_kubectl, namespace, count=2)
    with h.running_operator(admin_kubectl, tmp_path, nodes, {"admissionModes": ["builtin"]}):
        kubectl.apply(
            h.job_manifest(
                "skipper",
                pool=namespace,
                pod_annotations={"longctx.io/complete-after": "3s"},
                scheduling={"admission": "none"},
            )
        )

        def held():
            obj = kubectl.json("get", "lcj", "skipper")
            return obj if h.conditions(obj).get(cond.ADMITTED) == ("False", reasons.ADMISSION_NOT_ALLOWED) else None

        status = wait_until(held, timeout=30, what="Admitted False, AdmissionNotAllowed")["status"]
        assert (status["phase"], status["reason"]) == ("Pending", reasons.ADMISSION_NOT_ALLOWED)
        assert "scheduling.admission none is not allowed" in status["message"] and "builtin" in status["message"]
        assert h.children(kubectl, "skipper") == {"services": [], "configmaps": [], "jobs": [], "pods": []}
        h.wait_event(kubectl, wait_until, "skipper", "Warning", reasons.ADMISSION_NOT_ALLOWED)
        kubectl.run("patch", "lcj", "skipper", "--type=merge", "-p", '{"spec":{"scheduling":{"admission":"builtin"}}}')
        done = h.wait_phase(kubectl, wait_until, "skipper", "Succeeded", timeout=90)
        assert h.conditions(done)[cond.ADMITTED] == ("True", reasons.GANG_FITS)
