"""The worker's loop: its entry, the poll loop and timers, the link to the supervisor.

Everything a pane does runs in one step of this single-threaded loop, so a check and
the act it guards cannot be separated by the program or the supervisor.
"""
