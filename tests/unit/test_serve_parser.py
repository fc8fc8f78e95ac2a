"""`--additional-config` as vLLM's own `vllm serve` parser reads it once the
platform has hooked it: malformed JSON, or JSON that is not an object, is a
usage error (exit status 2) naming the argument, raised while the command
line is parsed. Built in-process: the parser is vLLM's real one, and no
server is needed to parse a command line."""

from __future__ import annotations

import pytest
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser


@pytest.fixture(scope="module")
def serve_parser() -> FlexibleArgumentParser:
    return make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("{kv_cache_share: 0.3", "argument --additional-config: not valid JSON"),
        ("[0.3]", "must be a JSON object of vllm-bridge keys"),
    ],
)
def test_malformed_additional_config_is_a_usage_error(
    serve_parser: FlexibleArgumentParser,
    capsys: pytest.CaptureFixture[str],
    value: str,
    message: str,
):
    with pytest.raises(SystemExit) as exit_info:
        serve_parser.parse_args(["model", "--additional-config", value])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_a_valid_additional_config_reaches_the_engine_args(
    serve_parser: FlexibleArgumentParser,
):
    args = serve_parser.parse_args(
        ["model", "--additional-config", '{"kv_cache_share": 0.3}']
    )
    assert args.additional_config == {"kv_cache_share": 0.3}
