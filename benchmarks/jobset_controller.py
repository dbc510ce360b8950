"""The JobSet controller (sigs.k8s.io/jobset) as a local process: a baseline of operator_scale.py.

The binary, its CRD and its webhook configuration come from hack/cluster/build jobset (built from
Go modules, cached by version, JOBSET_VERSION in hack/cluster/versions.env). It runs as JobSet is
deployed, webhooks included: its admission server listens on loopback with a serving certificate
made here, and its webhook configurations (the module's own, with the pod webhooks' object
selector of its kustomize patch) point the API server at that address with this CA. Only the
webhooks' address and the controller's in-cluster cert rotation (off: the certificate is given)
differ from a deployment in the cluster.
"""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "hack" / "cluster"
GROUP, VERSION = "jobset.x-k8s.io", "v1alpha2"
REPLICATED_JOB = "w"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"


def home() -> Path:
    """The cached build's folder (bin/jobset, config/), built first when missing."""
    subprocess.run([str(SCRIPTS / "build"), "jobset"], check=True, stdout=subprocess.DEVNULL)
    script = f'source "{REPO}/hack/lib.sh"; component_dir jobset "$JOBSET_VERSION"'
    return Path(subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout.strip())


def job_name(jobset: str) -> str:
    """The one Job of a JobSet with one replicated Job of one replica (JobSet's naming)."""
    return f"{jobset}-{REPLICATED_JOB}-0"


def jobset(job: dict, name: str) -> dict:
    """The rendered Indexed Job as a JobSet of one replicated Job: same pod template, labels and Job
    spec. The pods' affinity and coordinator address name the Job, whose name JobSet chooses; the
    Service and the pods' subdomain are JobSet's (spec.network)."""
    text = json.dumps(job).replace(json.dumps(job["metadata"]["name"])[:-1], json.dumps(job_name(name))[:-1])
    renamed = json.loads(text)
    renamed["spec"]["template"]["spec"].pop("subdomain", None)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": job["metadata"]["namespace"], "labels": job["metadata"]["labels"]},
        "spec": {
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "replicatedJobs": [
                {
                    "name": REPLICATED_JOB,
                    "replicas": 1,
                    "template": {"metadata": {"labels": job["metadata"]["labels"]}, "spec": renamed["spec"]},
                }
            ],
        },
    }


def webhook_configurations(manifests: str, port: int, ca: bytes) -> list[dict]:
    """The module's webhook configurations pointed at https://127.0.0.1:port with this CA."""
    docs = [d for d in yaml.safe_load_all(manifests) if d]
    for doc in docs:
        doc["metadata"]["name"] = f"jobset-{doc['metadata']['name']}"
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": base64.b64encode(ca).decode()}
            if hook["rules"][0]["resources"] == ["pods"]:
                hook["objectSelector"] = {"matchExpressions": [{"key": JOBSET_NAME_LABEL, "operator": "Exists"}]}
    return docs


def _certificates(folder: Path) -> bytes:
    """A CA and a serving certificate for 127.0.0.1 (tls.crt, tls.key in folder); the CA's PEM."""
    folder.mkdir(parents=True, exist_ok=True)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=folder)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=jobset-bench-ca",
            "-keyout", "ca.key", "-out", "ca.crt")  # fmt: skip
    (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", "tls.key", "-out", "tls.csr")
    openssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "2", "-extfile", "san.ext", "-out", "tls.crt")  # fmt: skip
    return (folder / "ca.crt").read_bytes()


class JobSetController:
    """Starts the controller against the cluster (CRD, webhooks registered once it is ready) and stops
    it (webhook configurations removed first, so nothing is left calling a dead address)."""

    def __init__(self, cluster, scratch: Path, webhook_port: int, health_port: int):
        self.cluster, self.scratch = cluster, scratch
        self.webhook_port, self.health_port = webhook_port, health_port
        self.home = home()
        self.process: subprocess.Popen | None = None
        self.webhooks: list[dict] = []

    def start(self) -> None:
        for crd in sorted((self.home / "config").glob("*jobsets.yaml")):
            self.cluster("apply", "--server-side", "--force-conflicts", "-f", str(crd))
        self.cluster.wait_established(f"jobsets.{GROUP}")
        certs = self.scratch / "jobset-certs"
        ca = _certificates(certs)
        config = self.scratch / "jobset-config.yaml"
        config.write_text(
            json.dumps(
                {
                    "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
                    "kind": "Configuration",
                    "internalCertManagement": {"enable": False},
                    "leaderElection": {"leaderElect": False},
                    "webhook": {"port": self.webhook_port, "host": "127.0.0.1", "certDir": str(certs)},
                }
            )
        )
        self.process = subprocess.Popen(
            [str(self.home / "bin" / "jobset"), "--config", str(config), "--metrics-bind-address", "0",
             "--health-probe-bind-address", f"127.0.0.1:{self.health_port}", "--zap-log-level", "error"],
            env=self.cluster.env,
            stdout=open(self.scratch / "jobset.log", "wb"),
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        self._wait_ready(120)
        self.webhooks = webhook_configurations(
            (self.home / "config" / "manifests.yaml").read_text(), self.webhook_port, ca
        )
        self._wait_webhooks(ca, 60)
        self.cluster("apply", "-f", "-", input="\n---\n".join(json.dumps(d) for d in self.webhooks))

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"jobset exited with {self.process.returncode}; see {self.scratch / 'jobset.log'}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=2):
                    return
            except (urllib.error.URLError, OSError) as e:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"jobset not ready after {timeout}s; see {self.scratch / 'jobset.log'}") from e
                time.sleep(0.5)

    def _wait_webhooks(self, ca: bytes, timeout: float) -> None:
        """Until every webhook path answers: the controller reports ready before it has registered
        them, and the API server then refuses a JobSet with a 404 from the webhook (2026-11-28)."""
        context = ssl.create_default_context(cadata=ca.decode())
        urls = [hook["clientConfig"]["url"] for doc in self.webhooks for hook in doc["webhooks"]]
        deadline = time.monotonic() + timeout
        while urls:
            try:
                with urllib.request.urlopen(urllib.request.Request(urls[0], data=b"{}"), timeout=2, context=context):
                    urls.pop(0)
            except (urllib.error.URLError, OSError) as e:
                if isinstance(e, urllib.error.HTTPError) and e.code != 404:  # registered: it refuses {} itself
                    urls.pop(0)
                    continue
                if time.monotonic() > deadline:
                    raise TimeoutError(f"jobset webhook {urls[0]} not served after {timeout}s") from e
                time.sleep(0.5)

    def stop(self) -> None:
        for doc in self.webhooks:
            self.cluster("delete", doc["kind"].lower(), doc["metadata"]["name"], "--ignore-not-found")
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=30)
