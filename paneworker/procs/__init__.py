"""The pane's processes: its program on the PTY, the subreaper, OS calls, leftovers.

Imports nothing of the other rooms: the loop, the screen and the template use it.
"""
