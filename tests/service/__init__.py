"""Tests of the long-running HTTP service: access, audit, signals, status and the stdio proxy."""
