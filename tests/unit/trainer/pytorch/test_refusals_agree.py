"""The PyTorch example's refusals (pytorch/__main__.py `unsupported`) and the API's rules for it
(operator/api/rules.py) agree: each malformed PyTorch-example case of tests/data/malformed.yaml,
rendered as if the API had let it through, is refused by the trainer naming the same field."""

import pytest

import longctx_trainer.pytorch
from longctx_operator.api.rules import PYTORCH_EXAMPLE
from longctx_operator.api.spec import LongContextJob
from longctx_operator.render.trainer_config import trainer_config
from longctx_operator.resolve import resolve_layout
from longctx_trainer.pytorch.__main__ import unsupported
from support.manifests import apply_case, malformed_cases

BASE, CASES = malformed_cases()
# the trainer does not know the GPU type: only the API can refuse GPUs it would leave idle
TRAINER_CASES = [
    c for c in CASES if c["name"].startswith("pytorch-example-") and c["name"] != "pytorch-example-on-gpus"
]


def test_the_rules_name_the_trainers_module():
    assert PYTORCH_EXAMPLE == longctx_trainer.pytorch.__name__


@pytest.mark.parametrize("case", TRAINER_CASES, ids=[c["name"] for c in TRAINER_CASES])
def test_the_trainer_refuses_what_the_api_refuses_naming_the_same_field(case):
    job = LongContextJob.model_validate(apply_case(BASE, case))  # the schema only, not the rules
    layout, _ = resolve_layout(job.spec)
    problem = unsupported(trainer_config(job.metadata.name, job.spec, layout))
    assert problem is not None and problem.startswith(case["field"].removeprefix("spec.") + ":"), problem
