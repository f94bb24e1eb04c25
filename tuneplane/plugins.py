"""Job-side plugin runtime: what the launcher installed, and the deferred registry.

The launcher and the training entrypoint share one interpreter, so they meet here: the launcher records
every plugin it applied (so a second install in the same process is a no-op) and registers deferred
plugins; the trainer calls `install_deferred(name, **ctx)` once it has built what the patch needs.
Standard library only: this module is imported inside training images.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from tuneplane.runtime.records import Record, field

# A plugin's install(params, **ctx): what it returns is not looked at.
InstallFn = Callable[..., object]


class DeferredPluginError(LookupError):
    """`install_deferred` was asked for a name nobody registered."""


class PluginInstallError(RuntimeError):
    """A plugin's install function raised: the job must not go on without its patch."""


class _Deferred(Record):
    """A deferred plugin waiting for the trainer's context."""

    ref: str  # <owner>/<name>@<version>, for messages
    install: InstallFn
    params: Mapping[str, object]
    done: bool = False


class _State(Record):
    """Per-process state; one instance, so tests can reset it."""

    installed: dict[str, str] = field(default_factory=dict)  # plugin id -> digest
    deferred: dict[str, _Deferred] = field(default_factory=dict)  # manifest name -> entry


_STATE = _State()


def already_installed(plugin_id: str, digest: str) -> bool:
    """True when this exact plugin (id and digest) was applied or registered in this process.

    Multi-node and restart-based executors can enter the runtime bridge twice in one interpreter;
    wrapping a framework function twice would apply the patch twice.
    """
    return _STATE.installed.get(plugin_id) == digest


def mark_installed(plugin_id: str, digest: str) -> None:
    """Remember that `plugin_id` at `digest` is in effect in this process."""
    _STATE.installed[plugin_id] = digest


def register_deferred(name: str, ref: str, install: InstallFn, params: Mapping[str, object]) -> None:
    """Keep `install` until the trainer calls `install_deferred(name, **ctx)`."""
    _STATE.deferred[name] = _Deferred(ref=ref, install=install, params=params)


def registered() -> list[str]:
    """The manifest names `install_deferred` accepts, sorted."""
    return sorted(_STATE.deferred)


def install_deferred(name: str, **ctx: object) -> bool:
    """Install the deferred plugin registered under manifest `name`, handing it the trainer's context.

    Returns True when the plugin's install ran, False when it had already run in this process.
    An unknown name raises DeferredPluginError listing what is registered: a misspelt name must not
    silently train without the patch.
    """
    entry = _STATE.deferred.get(name)
    if entry is None:
        known = ", ".join(registered()) or "none"
        raise DeferredPluginError(
            f"no deferred plugin named {name!r} is registered in this process (registered: {known}); "
            "pass the manifest name (not <owner>/<name>) of a plugin locked in plugins.lock.json "
            "with load: deferred, and start the entrypoint through tuneplane-launch"
        )
    if entry.done:
        return False
    try:
        entry.install(entry.params, **ctx)
    except (Exception, SystemExit) as exc:  # an exit from install must not end training as a success
        raise PluginInstallError(f"deferred plugin {entry.ref} failed to install: {type(exc).__name__}: {exc}") from exc
    entry.done = True
    return True


def reset() -> None:
    """Forget everything (tests, or an executor that restarts training in the same process)."""
    _STATE.installed.clear()
    _STATE.deferred.clear()
