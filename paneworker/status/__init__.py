"""The pane's status: the status machine, OSC 7501 reports and the screen rules.

Pure logic over what the screen shows and the program reports; imports no other room.
"""
