"""ACP panes: the Agent Client Protocol over the program's stdio, beside the terminal."""
