"""A job on a cluster through the Kubernetes API: submit and delete (actions), status, logs and list
(observe)."""
