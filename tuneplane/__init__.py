"""TunePlane GitOps: declarative ML training runs kept in git."""

__version__ = "0.5.0"
