"""A plan written out: the per-size training configs (configs), the Kubernetes manifests (manifests),
the dry run's files (dry_run)."""
