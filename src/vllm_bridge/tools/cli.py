"""The `vllm-bridge` command."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from vllm_bridge import envs
from vllm_bridge.config import audit
from vllm_bridge.errors import BridgeConfigError
from vllm_bridge.patches.catalogue import REGISTRY
from vllm_bridge.patching.registry import Problem
from vllm_bridge.tools import patch_docs as docs

app = typer.Typer(no_args_is_help=True, add_completion=False)
console = Console()


@app.callback()
def _root(ctx: typer.Context) -> None:
    """vllm-bridge: vLLM's CPU platform, out of tree."""
    from vllm_bridge.config.schema import check_environment

    if ctx.invoked_subcommand == "doctor":
        return  # doctor reports bad settings among its findings
    try:
        check_environment(os.environ)
    except BridgeConfigError as exc:
        raise _fail(exc) from None


def _fail(exc: BridgeConfigError) -> typer.Exit:
    """Print a bad-input error as one line on stderr; exit code 2."""
    Console(stderr=True, soft_wrap=True).print(
        f"error: {exc}", markup=False, highlight=False
    )
    return typer.Exit(2)


def _table(*columns: str, title: str | None = None) -> Table:
    """A table whose first column never wraps and whose others fold."""
    table = Table(title=title)
    table.add_column(columns[0], no_wrap=True)
    for column in columns[1:]:
        table.add_column(column, overflow="fold")
    return table


def _status(name: str, problems: list[Problem], disabled: set[str]) -> str:
    if name in disabled:
        return "disabled"
    kinds = {problem.kind for problem in problems}
    if "target_missing" in kinds:
        return "target missing"
    if "version_range" in kinds:
        return "outside version range"
    if problems:
        return "drifted"
    return "ok"


@app.command()
def patches(
    check: Annotated[
        bool, typer.Option("--check", help="Exit 1 if any patch has a problem.")
    ] = False,
    docs_path: Annotated[
        Path | None, typer.Option("--docs", help="Write the patch docs to this file.")
    ] = None,
) -> None:
    """List every patch and its status against the installed vLLM."""
    if docs_path is not None:
        docs_path.write_text(docs.render(REGISTRY))
        console.print(f"wrote {docs_path}")
        return
    try:
        disabled = REGISTRY.disabled_names()
    except BridgeConfigError as exc:
        raise _fail(exc) from None
    table = _table("name", "stage", "target", "status", "detail")
    failed = False
    for patch in REGISTRY.patches():
        problems = REGISTRY.problems(patch)
        status = _status(patch.name, problems, disabled)
        failed = failed or status not in ("ok", "disabled")
        table.add_row(
            patch.name, patch.stage, patch.target, status, "; ".join(map(str, problems))
        )
    console.print(table)
    if check and failed:
        raise typer.Exit(1)


@app.command()
def passes(
    docs_path: Annotated[
        Path | None, typer.Option("--docs", help="Write the pass docs to this file.")
    ] = None,
) -> None:
    """List the fusion passes and whether each runs with the current
    VLLM_BRIDGE_ENABLE_PASSES and VLLM_BRIDGE_DISABLE_PASSES."""
    from vllm_bridge.fusion.catalogue import PASSES, enabled
    from vllm_bridge.tools import pass_docs

    if docs_path is not None:
        docs_path.write_text(pass_docs.render(PASSES))
        console.print(f"wrote {docs_path}")
        return
    on = enabled(envs.ENABLE_PASSES.get(), envs.DISABLE_PASSES.get())
    for fusion_pass in PASSES:
        state = "on" if fusion_pass in on else "off"
        console.print(f"{fusion_pass.name}: {state} ({fusion_pass.applies_to})")


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def explain(ctx: typer.Context) -> None:
    """Build the config `vllm serve ARGS` would run with, without starting an
    engine, and show every option vllm-bridge changes and why."""
    # vLLM logs to stdout; keep stdout for the report (vLLM is first
    # imported below, where its logging is configured).
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    from vllm_bridge.tools.explain import build_serve_config

    try:
        config, changes = build_serve_config(ctx.args)
    except BridgeConfigError as exc:
        raise _fail(exc) from None
    model = config.model_config.model
    if not changes:
        print(f"vllm-bridge changes nothing in the config of {model}.")
        return
    print(f"vllm-bridge changes {len(changes)} option(s) in the config of {model}:\n")
    print(audit.format_changes(changes))


@app.command()
def settings() -> None:
    """Print every VLLM_BRIDGE_* variable and --additional-config key
    (Markdown)."""
    from vllm_bridge.tools import settings_docs

    print(settings_docs.render(), end="")


@app.command()
def doctor() -> None:
    """Check this machine and environment for vLLM on the CPU; exit 1 if a
    finding is an error."""
    from vllm_bridge.tools import doctor as checks

    findings = checks.run()
    print(checks.format_findings(findings))
    if any(finding.level == "error" for finding in findings):
        raise typer.Exit(1)


def main() -> None:
    app()
