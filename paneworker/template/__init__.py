"""The worker template: a warm process that forks every pane's worker.

``process`` is the template itself; ``forking`` turns a forked child into a worker
exactly as a cold start is; ``rehearsal``, ``prefork`` and ``spares`` lay its memory
out for sharing before the first fork.
"""
