"""``panewarden ctl``'s service side, in one place: the socket's wire contract (shared
with the client in ``cli``), the socket server, the attestation of the calling pane, and
the commands it runs as that pane."""
