"""longctx_operator.api: the API's models (spec, status, rules) import no planner; the choices they
spell (attention, load balance, `auto`) come from the framework-free contract."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]


def test_the_api_models_load_without_the_planner():
    code = (
        "import json, sys\n"
        "import longctx_operator.api.spec, longctx_operator.api.status, longctx_operator.api.rules\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT / "tests")
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.splitlines()[-1])
    assert "longctx_operator.api.spec" in loaded
    assert not [name for name in loaded if name.startswith("longctx_operator.planner")]
