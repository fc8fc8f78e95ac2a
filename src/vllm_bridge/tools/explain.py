"""Build the configuration `vllm serve` would build, without an engine, and
say what vllm-bridge changed in it and why."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from vllm_bridge.config import audit

if TYPE_CHECKING:
    from vllm.config import VllmConfig


def build_serve_config(argv: Sequence[str]) -> tuple[VllmConfig, list[audit.Change]]:
    """Parse ``argv`` with `vllm serve`'s own parser and build the config the
    way its API server does; returns it with the changes made meanwhile."""
    import vllm
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.usage.usage_lib import UsageContext
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(
        FlexibleArgumentParser(
            prog="vllm-bridge explain",
            usage="vllm-bridge explain [model_tag] [options]",
        )
    )
    args = parser.parse_args(list(argv))
    if getattr(args, "model_tag", None) is not None:
        args.model = args.model_tag
    engine_args = vllm.AsyncEngineArgs.from_cli_args(args)
    with audit.capture() as changes:
        config = engine_args.create_engine_config(
            usage_context=UsageContext.OPENAI_API_SERVER
        )
    return config, changes
