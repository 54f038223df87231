"""What limits a model's requests: retries and the rate limits of this process (``policy``),
the interface every limiter offers (``limiter``), the Prefect server's concurrency limits
(``server``), the requests going now (``meter``, for the live view), and every endpoint
checked before a session (``reachability``).

May import, inside ``ape.tasks.models``: the ``local`` wing (which models run locally);
and what the package may import.
"""
