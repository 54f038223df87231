"""The Dask cluster a run uses, locked to its owner.

A Dask scheduler runs whatever function a connected client submits, as the user who
started it, so whoever reaches its port reaches that user's account (their API keys in the
workers' environment among it). The local cluster APE starts therefore speaks only TLS with
credentials made for that one cluster (a fresh key and certificate in memory, handed to
the workers and to APE's client and to no one else), and its scheduler and workers serve
no HTTP pages: Dask's HTTP server, which distributed starts even with the dashboard off
(on port 8787 for the scheduler), would otherwise show the cluster's workers, logs and
metrics to any local user.

A cluster someone else runs (``[run] dask_address``) must be a ``tls://`` one whose client
certificates are in Dask's own configuration; a plain ``tcp://`` one is refused unless
``[run] dask_allow_insecure`` says the owner accepts it.

Imported only when a run uses the Dask task runner (``distributed`` is the dask extra).
"""

from __future__ import annotations

import importlib.util
import logging
from typing import Any

import dask.config
from distributed import LocalCluster
from distributed.security import Security

from ape.schemas.config import RunConfig
from ape.schemas.errors import ApeError

log = logging.getLogger("ape")

# where distributed reads the handlers it mounts on the scheduler's and the workers' HTTP
# servers (info pages, logs, JSON state, Prometheus metrics, a proxy to the workers)
_HTTP_ROUTES = ("distributed.scheduler.http.routes", "distributed.worker.http.routes")
_warned_insecure: set[str] = set()


class SealedLocalCluster(LocalCluster):
    """A LocalCluster whose scheduler and workers serve no HTTP routes, with the scheduler's
    HTTP listener on a free loopback port instead of 8787.

    distributed always starts an HTTP server on the scheduler (``dashboard_address=None``
    turns off only the Bokeh dashboard; the server then takes port 8787) and reads its routes
    from Dask's configuration when the scheduler is made, so the routes are emptied while this
    cluster is built; the workers get the same configuration as a snapshot, which the nanny
    also hands to a worker it restarts later.
    """

    def __init__(self, **kwargs: Any) -> None:
        with dask.config.set({key: [] for key in _HTTP_ROUTES}):
            # dask.config.merge copies every level, so the snapshot outlives this block
            kwargs.setdefault("config", dask.config.merge(dask.config.config))
            scheduler = dict(kwargs.pop("scheduler_kwargs", None) or {})
            scheduler.setdefault("dashboard_address", "127.0.0.1:0")
            super().__init__(scheduler_kwargs=scheduler, **kwargs)

    @property
    def dashboard_link(self) -> str:
        """None to show: without it prefect-dask would log a dashboard link to a page that
        is not served."""
        return ""


def local_cluster(workers: int, threads: int) -> dict[str, Any]:
    """The DaskTaskRunner arguments of a local cluster of ``workers`` processes that admits
    only clients holding this cluster's own credentials.

    ``security=True`` makes LocalCluster create them (``Security.temporary()``: a fresh key
    and self-signed certificate in memory, TLS required on every connection, both ends
    showing a certificate) when it starts, so a run makes one key, and only when its cluster
    starts. The workers get them from the cluster, and so does prefect-dask's client, which
    it builds from the cluster object (``Client(cluster)`` takes ``cluster.security``).
    """
    if importlib.util.find_spec("cryptography") is None:  # what Security.temporary needs
        raise ApeError(
            "task_runner = 'dask' needs the cryptography package for the cluster's credentials",
            where="[run] task_runner",
            hint="pip install 'ape-bench[dask]'",
        )
    return {
        "cluster_class": SealedLocalCluster,
        "cluster_kwargs": {
            "n_workers": workers,
            "processes": True,
            "threads_per_worker": threads,
            "dashboard_address": None,  # no Bokeh dashboard
            "security": True,
        },
    }


def external_cluster(run: RunConfig) -> dict[str, Any]:
    """The DaskTaskRunner arguments for ``[run] dask_address``: a ``tls://`` scheduler with the
    client certificates from Dask's configuration (``distributed.comm.tls.*``, also set by the
    ``DASK_DISTRIBUTED__COMM__TLS__...`` variables); anything else only with
    ``dask_allow_insecure``, and a warning."""
    address = run.dask_address or ""
    if not address.startswith("tls://"):
        if not run.dask_allow_insecure:
            raise ApeError(
                f"{address!r} is not a tls:// scheduler: any process that reaches it "
                "can run code on its workers and read what this run sends them",
                where="[run] dask_address",
                hint="run the cluster with TLS as docs/dask.md shows, or set [run] dask_allow_insecure = true",
            )
        if address not in _warned_insecure:
            _warned_insecure.add(address)
            log.warning(
                "[run] dask_address %s is not TLS (dask_allow_insecure = true): anyone who reaches "
                "that scheduler can run code on its workers and read this run's items and answers",
                address,
            )
        return {"address": address}
    security = Security()  # from Dask's configuration
    client_tls = security.get_tls_config_for_role("client")
    if not (client_tls["ca_file"] and client_tls["cert"]):
        raise ApeError(
            f"{address!r} is a tls:// scheduler but Dask's configuration has no client certificate for it",
            where="[run] dask_address",
            hint="set DASK_DISTRIBUTED__COMM__TLS__CA_FILE, DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT "
            "and DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY, as docs/dask.md shows",
        )
    return {"address": address, "client_kwargs": {"security": security}}
