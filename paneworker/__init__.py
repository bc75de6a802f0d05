"""Pane worker: one process per pane holding the PTY, the emulator and the reaper."""
