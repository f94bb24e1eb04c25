"""What the tests share: real git, labs, runs and servers built the same way in every suite.

`tests/` is on `sys.path` when pytest runs (the rootdir conftest), so a test imports a module of this
package by its full name, `from support.repos import git`; `tests/support/` itself is never on the
path, so its module names cannot shadow a library's. The cluster and Slurm twins stay beside the
tests (`fakekube.py`, `twin_*.py`, `slurm_cluster.py`): they stand in for a system, they are not helpers.

- `labs`: `new_lab`, the one way to make a lab: `tp init`'s output made once per process and copied,
  with a test's lab file, experiments and files committed on top.
- `repos`: the one `git()` (a fixed identity, checked, its stdout; `git_result`, its whole result, where
  git's exit status and stderr are what a test asserts), bare remotes, clones, seeded labs,
  run requests, `tp` processes, kubeconfigs for the twin, `copy_work_tree` (the project as a clone holds it).
- `wait`: `wait_until`, the one polling loop: ask until yes, or fail saying what never happened; `until`,
  the same for a value and a test of it, failing with the last value.
- `shared`: `require_shared`, the one way to read `../shared` (skip on a plain clone, fail in CI).
- `render`: labs with one experiment per recipe, rendered for the cluster; `slurm`: labs on the real
  Slurm cluster; `local`: a local run's processes; `resume`: what a resumed run leaves behind.
- `frameworks`: OpenRLHF's and ms-swift's real parsers; `collector`: one collector pass; `ingest`: a
  receiver process; `httpd`: a tiny HTTP server; `hostile`: `tp` fenced in for adversarial input.

The `lab` fixture (`tests/conftest.py`) is `new_lab` in the test's own folder, and its working directory.
"""
