"""A job on this machine: a local run (run) and a rehearsal of capacity events (rehearse, report,
timeline)."""
