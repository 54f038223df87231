"""Which Dask clusters a run accepts, and with what credentials (no cluster is started here;
tests/integration/test_dask_security.py attacks a real one)."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("distributed")

import dask.config  # noqa: E402

from ape.flows.dask_cluster import SealedLocalCluster, external_cluster, local_cluster  # noqa: E402
from ape.schemas.config import RunConfig  # noqa: E402
from ape.schemas.errors import ApeError  # noqa: E402


def test_the_local_cluster_makes_credentials_when_it_starts():
    kwargs = local_cluster(2, 3)
    assert kwargs["cluster_class"] is SealedLocalCluster
    # LocalCluster's own switch for Security.temporary(): a fresh key for each cluster, made
    # as it starts; the client prefect-dask builds from the cluster takes its security
    assert kwargs["cluster_kwargs"]["security"] is True
    assert kwargs["cluster_kwargs"]["dashboard_address"] is None


@pytest.mark.parametrize("address", ["tcp://10.0.0.5:8786", "10.0.0.5:8786", "ws://10.0.0.5:8786"])
def test_an_address_without_tls_is_refused(address):
    with pytest.raises(ApeError) as refused:
        external_cluster(RunConfig(task_runner="dask", dask_address=address))
    assert refused.value.where == "[run] dask_address"
    assert "not a tls:// scheduler" in str(refused.value) and "dask_allow_insecure" in str(refused.value.hint)


def test_the_opt_out_warns_once_per_address(caplog):
    run = RunConfig(task_runner="dask", dask_address="tcp://10.0.0.6:8786", dask_allow_insecure=True)
    with caplog.at_level(logging.WARNING, logger="ape"):
        assert external_cluster(run) == {"address": "tcp://10.0.0.6:8786"}
        external_cluster(run)
    assert [r.getMessage() for r in caplog.records].count(
        "[run] dask_address tcp://10.0.0.6:8786 is not TLS (dask_allow_insecure = true): anyone who "
        "reaches that scheduler can run code on its workers and read this run's items and answers"
    ) == 1


def test_a_tls_address_takes_the_client_certificate_from_dasks_configuration(tmp_path):
    run = RunConfig(task_runner="dask", dask_address="tls://10.0.0.5:8786")
    with dask.config.set({"distributed.comm.tls.ca-file": None, "distributed.comm.tls.client.cert": None}):
        with pytest.raises(ApeError, match="no client certificate") as missing:
            external_cluster(run)
    assert "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT" in str(missing.value.hint)
    ca, cert, key = (str(tmp_path / name) for name in ("ca.pem", "cert.pem", "key.pem"))
    settings = {
        "distributed.comm.tls.ca-file": ca,
        "distributed.comm.tls.client.cert": cert,
        "distributed.comm.tls.client.key": key,
    }
    with dask.config.set(settings):
        kwargs = external_cluster(run)
    security = kwargs["client_kwargs"]["security"]
    assert kwargs["address"] == "tls://10.0.0.5:8786"
    assert (security.tls_ca_file, security.tls_client_cert, security.tls_client_key) == (ca, cert, key)
