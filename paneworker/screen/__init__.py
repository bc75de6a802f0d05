"""The pane's screen: the output path (drain, then parse), the terminal in front of the
emulator backends, a turn's output and the output watches."""
