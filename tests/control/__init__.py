"""Tests of the coordination layer: controller leases, receipts, lanes, stores and locks,
and ``panewarden ctl``.

Shared helpers are in ``tests.control.support``; this package stays light so the helper
processes it starts (``lease_writer``) import only what they use.
"""
