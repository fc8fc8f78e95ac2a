"""docs/reliability.md's table of bad inputs is rendered from the test cases
that check them, so every row is tested and every tested case is listed.
``UPDATE_SNAPSHOTS=1`` rewrites the table."""

from __future__ import annotations

import json
import os

from tests.conftest import REPO
from tests.engine import test_serve_bad_input
from tests.engine.bad_requests import CASES as BAD_REQUESTS
from tests.unit.test_schema import BAD_INPUTS as BAD_SETTINGS

DOC = REPO / "docs" / "reliability.md"
START = "<!-- bad-inputs:start -->"
END = "<!-- bad-inputs:end -->"


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def setting_input(additional_config: object, environ: dict[str, str]) -> str:
    parts = [f"`{name}={value}`" for name, value in environ.items()]
    if additional_config is not None:
        parts.append(f"`--additional-config '{json.dumps(additional_config)}'`")
    return cell(", ".join(parts))


def render() -> str:
    rows = [
        "| # | where | bad input | answer (fragments of the one message) | test |",
        "|---|---|---|---|---|",
    ]

    def add(where: str, bad_input: str, answer: str, test: str) -> None:
        rows.append(f"| {len(rows) - 1} | {where} | {bad_input} | {answer} | {test} |")

    for additional_config, environ, fragments in BAD_SETTINGS:
        add(
            "setting",
            setting_input(additional_config, environ),
            cell(" … ".join(f"`{fragment}`" for fragment in fragments)),
            "`test_schema.py::test_bad_input_names_the_problem`",
        )
    for extra, environ, message in test_serve_bad_input.CASES:
        arguments = " ".join(extra)
        bad_input = ", ".join(
            [f"`{name}={value}`" for name, value in environ.items()]
            + ([f"`vllm serve … {arguments}`"] if arguments else ["`vllm serve`"])
        )
        add(
            "`vllm serve`",
            cell(bad_input),
            f"exit 1, `{cell(message)}`",
            "`test_serve_bad_input.py`",
        )
    for case in BAD_REQUESTS:
        body = (
            case.raw.decode(errors="backslashreplace") if case.raw is not None else ""
        )
        bad_input = f"{case.name}" + (f": `{cell(body)}`" if body else "")
        add(
            f"`/v1/{case.endpoint.replace('.', '/')}`",
            bad_input,
            f"HTTP {case.status}, `{cell(case.message)}`",
            "`test_serve.py::test_bad_request_gets_a_4xx_naming_the_problem`",
        )
    return "\n".join(rows) + "\n"


def test_bad_input_table_matches_the_tested_cases():
    text = DOC.read_text()
    head, _, rest = text.partition(START + "\n")
    _, _, tail = rest.partition(END)
    table = render()
    if os.environ.get("UPDATE_SNAPSHOTS") == "1":
        DOC.write_text(f"{head}{START}\n{table}{END}{tail}")
        return
    assert rest, f"{DOC} has no {START} marker"
    assert rest.partition(END)[0] == table, (
        "docs/reliability.md's bad-input table is stale: "
        "run this test with UPDATE_SNAPSHOTS=1"
    )
    assert len(BAD_SETTINGS) + len(BAD_REQUESTS) >= 40
