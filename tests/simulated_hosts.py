"""Several "hosts" on one machine for the distributed tests: a process run
under ``as_host(name)`` gets a mount and UTS namespace of its own, so its own
/dev/shm (what separates hosts for POSIX shared memory) and host name, on
the machine's one network."""

from __future__ import annotations

import shutil
import subprocess


def can_simulate_hosts() -> bool:
    """Whether this process may give a child its own /dev/shm and host name
    (unshare and mount need CAP_SYS_ADMIN, e.g. root in the CI container)."""
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-m", "-u", "sh", "-c", "mount -t tmpfs tmpfs /dev/shm"],
        capture_output=True,
    )
    return probe.returncode == 0


def as_host(name: str) -> tuple[str, ...]:
    """A command prefix that runs what follows as on host ``name``."""
    return (
        "unshare",
        "-m",
        "-u",
        "sh",
        "-c",
        f'mount -t tmpfs tmpfs /dev/shm && hostname {name} && exec "$@"',
        "-",
    )
