"""The local backend: a run as a process group on this machine."""
