"""The operator's read-only screen feed: the hub that fans worker frames out to viewers,
its event contract, and the two ways to reach it (HTTP ``/feed``, the operator socket)."""
