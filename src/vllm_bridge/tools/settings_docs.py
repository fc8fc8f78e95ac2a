"""The settings table of the README, generated from envs.py so that the
README cannot drift from the code (tests/unit/test_settings_docs.py)."""

from __future__ import annotations

from vllm_bridge import envs


def _default(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value in ((), None):
        return "(none)"
    return str(value)


def render() -> str:
    rows = [
        "| variable | `--additional-config` key | default | allowed | meaning |",
        "|---|---|---|---|---|",
    ]
    for variable in envs.ALL:
        key = f"`{variable.key}`" if variable.key else "-"
        rows.append(
            f"| `{variable.name}` | {key} | {_default(variable.default)} | "
            f"{variable.allowed} | {variable.doc} |"
        )
    return "\n".join(rows) + "\n"
