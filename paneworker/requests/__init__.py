"""Supervisor requests, each checked and acted on inside one loop step.

The dispatcher (``handler``), what a request does to its pane (``pane_io``), and the
two requests that span several steps: prompt delivery and dialog answering.
"""
