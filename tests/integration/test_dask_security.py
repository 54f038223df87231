"""The Dask cluster a run starts admits only that run: another process, and another local
user, that find the scheduler's port cannot run code on it; no HTTP page of it is served.

The attack is the one reported against a cluster without ``security``: connect with
``distributed.Client`` and ``submit`` a function, which then ran as the APE user. Here it is
tried over plain TCP, over TLS without a certificate, and over TLS with a certificate of the
attacker's own; each must be refused and the function's marker file never written.
"""

from __future__ import annotations

import json
import operator
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from ape.config import load_config
from tests.helpers.other_user import can_run_as_other_user, python_as_other_user
from tests.helpers.paths import REPO_ROOT
from tests.helpers.processes import stop_group
from tests.helpers.runner import make_benchmark, read_results

pytest.importorskip("prefect_dask")
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_server")]

ATTACK = r'''
import json, os, ssl, sys
from distributed import Client
from distributed.security import Security

address, marker = sys.argv[1], sys.argv[2]
host_port = address.split("://", 1)[1]


def plant(path):
    import os
    with open(path, "w") as handle:
        handle.write(str(os.getuid()))
    return os.getuid()


def lax_context(certificate=None):
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # accept whatever the scheduler shows
    if certificate is not None:
        context.load_cert_chain(*certificate)
    return context


class NoCertificate(Security):
    """TLS without a client certificate."""

    def get_connection_args(self, role):
        return {"ssl_context": lax_context(), "require_encryption": True, "extra_conn_args": {}}


class OwnCertificate(Security):
    """TLS with a key and certificate the attacker made (distributed's own recipe)."""

    def get_connection_args(self, role):
        import tempfile
        own = Security.temporary()
        with tempfile.TemporaryDirectory() as folder:
            cert, key = os.path.join(folder, "c.pem"), os.path.join(folder, "k.pem")
            open(cert, "w").write(own.tls_client_cert)
            open(key, "w").write(own.tls_client_key)
            context = lax_context((cert, key))
        return {"ssl_context": context, "require_encryption": True, "extra_conn_args": {}}


attempts = {
    "tcp": ("tcp://" + host_port, None),
    "tls without a certificate": ("tls://" + host_port, NoCertificate()),
    "tls with its own certificate": ("tls://" + host_port, OwnCertificate()),
}
outcome = {}
for name, (target, security) in attempts.items():
    try:
        client = Client(target, security=security, timeout=6)
    except Exception as exc:
        outcome[name] = "refused: " + type(exc).__name__
        continue
    try:
        client.submit(plant, marker, pure=False).result(timeout=30)
        client.run_on_scheduler(plant, marker + ".scheduler")
        outcome[name] = "ran"
    except Exception as exc:
        outcome[name] = "connected, then failed: " + type(exc).__name__
    finally:
        client.close()
print(json.dumps(outcome))
'''

# what distributed's HTTP servers serve by default: the dashboard, info pages, logs, JSON state, metrics
PAGES = ("/status", "/info/main/workers.html", "/info/main/logs.html", "/json/identity.json", "/metrics", "/health")


def attack(command: list[str]) -> dict[str, str]:
    done = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def listening_ports(exclude: set[int]) -> set[int]:
    """TCP ports this process and its children listen on (the cluster's scheduler, nannies,
    workers), less ``exclude`` (the test's Prefect server)."""
    import psutil

    me = psutil.Process()
    ports = set()
    for process in (me, *me.children(recursive=True)):
        try:
            connections = process.net_connections(kind="tcp")
        except psutil.Error:
            continue
        ports |= {c.laddr.port for c in connections if c.status == psutil.CONN_LISTEN}
    return ports - exclude


def served(port: int, path: str) -> int | None:
    """The HTTP status ``path`` gets on ``port`` (None: not an HTTP server, e.g. a TLS comm port)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=3) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, prefect_server) -> Iterator[tuple[str, Path]]:
    """A Dask run's cluster, started as the run starts it (the runner ``dask_task_runner``
    makes, its client made as for the run's first item); yields its scheduler address and an
    empty folder for the attackers' marker files."""
    from ape.flows.feeders import dask_task_runner

    root = tmp_path_factory.mktemp("dask-security")
    config = load_config(make_benchmark(root / "bench", n=2, run='task_runner = "dask"\ndask_workers = 1'))
    markers = root / "markers"
    markers.mkdir()
    with dask_task_runner(config) as runner:
        client = runner.client
        address = client.scheduler.address
        assert client.submit(operator.add, 40, 2).result(timeout=60) == 42  # the run's own client works
        yield address, markers
    assert sorted(p.name for p in markers.iterdir()) == []


def test_the_scheduler_speaks_only_tls(cluster):
    address, _ = cluster
    assert address.startswith("tls://127.0.0.1:"), address


def test_another_process_cannot_run_code_on_the_cluster(cluster):
    address, markers = cluster
    outcome = attack([sys.executable, "-c", ATTACK, address, str(markers / "same-user")])
    assert all(result.startswith("refused") for result in outcome.values()), outcome
    assert list(markers.iterdir()) == []


def test_another_user_cannot_run_code_on_the_cluster(cluster):
    reason = can_run_as_other_user()
    if reason is not None:
        pytest.skip(f"the second-user attack {reason}")
    address, markers = cluster
    outcome = attack(python_as_other_user(ATTACK, address, str(markers / "other-user")))
    assert all(result.startswith("refused") for result in outcome.values()), outcome
    assert list(markers.iterdir()) == []


def test_the_cluster_serves_no_dashboard_or_pages(cluster, prefect_server):
    # no dashboard, info page, log, state or metrics on any of the cluster's ports
    server_port = int(prefect_server.rsplit(":", 1)[1].split("/")[0])
    ports = listening_ports(exclude={server_port})
    assert 8787 not in ports, ports
    pages = {(port, path): served(port, path) for port in ports for path in PAGES}
    assert {key: status for key, status in pages.items() if status not in (None, 404)} == {}
    assert any(status == 404 for status in pages.values()), pages  # its HTTP servers were reached


def ape_run(config: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ape", "run", str(config), *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_dask_address_without_tls_is_refused_before_anything_runs(tmp_path):
    run = 'task_runner = "dask"\ndask_address = "tcp://127.0.0.1:8786"'
    config = make_benchmark(tmp_path, n=2, run=run)
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    refused = ape_run(config, "--no-server", env=env)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    line = refused.stderr.strip().splitlines()[-1]
    assert f"{config}:" in line and "[run] dask_address" in line and "not a tls:// scheduler" in line, line
    assert "dask_allow_insecure" in line
    assert not (tmp_path / "out" / "results.jsonl").exists()

    # the documented opt-out lets it through, with a warning (then, without a server, stops there)
    config.write_text(config.read_text().replace(run, run + "\ndask_allow_insecure = true"))
    allowed = ape_run(config, "--no-server", env=env)
    assert "is not TLS (dask_allow_insecure = true)" in allowed.stderr, allowed.stderr
    assert "needs a Prefect server" in allowed.stderr and allowed.returncode == 2


def test_a_secure_external_cluster_runs_the_benchmark(tmp_path, prefect_server):
    """The cluster docs/dask.md describes: a scheduler and a worker started with the dask CLI
    on TLS certificates, and the run given the client's certificates through Dask's
    environment variables."""
    from distributed.security import Security

    credentials = Security.temporary()  # one self-signed certificate: the CA and every role's
    certs = tmp_path / "certs"
    certs.mkdir(mode=0o700)
    ca, cert, key = certs / "ca.pem", certs / "cert.pem", certs / "key.pem"
    ca.write_text(credentials.tls_ca_file)
    cert.write_text(credentials.tls_client_cert)
    key.write_text(credentials.tls_client_key)
    key.chmod(0o600)
    tls = ["--tls-ca-file", str(ca), "--tls-cert", str(cert), "--tls-key", str(key)]
    env = dict(os.environ, PREFECT_API_URL=prefect_server, PYTHONPATH=str(REPO_ROOT))
    scheduler_file = tmp_path / "scheduler.json"
    dask = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
    started = []
    try:
        started.append(
            subprocess.Popen(
                [
                    *dask,
                    "--protocol",
                    "tls",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    "0",
                    "--no-dashboard",
                    "--scheduler-file",
                    str(scheduler_file),
                    *tls,
                ],
                env=env,
                cwd=tmp_path,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
        deadline = time.monotonic() + 60
        while not scheduler_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        address = json.loads(scheduler_file.read_text())["address"]
        assert address.startswith("tls://")
        started.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "distributed.cli.dask_worker",
                    address,
                    "--nthreads",
                    "2",
                    "--no-dashboard",
                    *tls,
                ],
                env=env,
                cwd=tmp_path,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
        config = make_benchmark(tmp_path / "bench", n=4, run=f'task_runner = "dask"\ndask_address = "{address}"')
        client_env = dict(
            env,
            DASK_DISTRIBUTED__COMM__TLS__CA_FILE=str(ca),
            DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT=str(cert),
            DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY=str(key),
        )
        done = ape_run(config, "--no-server", env=client_env)
        assert done.returncode == 0, done.stdout + done.stderr
        assert len(read_results(tmp_path / "bench" / "out" / "results.jsonl")) == 4

        # the same run without the client's certificates stops at once, naming the key
        without = ape_run(config, "--no-server", env=env)
        assert without.returncode == 2 and "no client certificate" in without.stderr, without.stderr
    finally:
        for process in reversed(started):
            stop_group(process, 20)
