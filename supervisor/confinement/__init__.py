"""Confinement: the Bubblewrap sandbox every confined pane's program and every verification
recipe runs in, built from one policy (``policy``), the service's own paths it hides
(``secrets``), what this host can do (``host``) and the policy of one pane (``pane``)."""
