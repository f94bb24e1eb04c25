"""The Kubernetes backend. The only package that imports `kubernetes`, and only inside functions.

client · apply · status · pods · kueue, wired by `backend.KubernetesBackend`; `types` holds the
TypedDicts of the raw objects read back.
"""

from tuneplane.backends.kubernetes.backend import ApiRetry, KubernetesBackend, build_api_client

__all__ = ["KubernetesBackend", "ApiRetry", "build_api_client"]
