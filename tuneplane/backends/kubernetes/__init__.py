"""The Kubernetes backend. The only package that imports `kubernetes`."""
