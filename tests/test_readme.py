"""README.md and the pages of docs/ say only what is true: their code runs and their samples are
what the programs print.

* Every Python block runs, as a user would run it, in the environment it names in the comment
  before it (``<!-- env: sdk5 -->``, ``sdk3`` or ``any``; blocks of the other SDK generation are
  skipped here and run in the other nox session), against ``wm-middleware serve --demo-data``
  with the ``SUPERMEMORY_*`` variables the README tells the reader to set. ``+otlp``
  (``sdk5+otlp``) adds an OTLP/HTTP collector at ``OTEL_EXPORTER_OTLP_ENDPOINT``, which must
  receive the block's spans; ``+redis`` starts a ``valkey-server`` of its own at ``REDIS_URL``.
  A print marked
  ``# -> text`` must print a line starting with ``text``.
* Read top to bottom, the README and the home page are in the set-up command's environment
  (``.venv``, SDK 3.x) until a passage names another (``.venv5``): each Python block is for the
  environment the page is in where it stands. Each block runs in a fresh interpreter, in page
  order.
* Every block marked ``<!-- output: COMMAND -->`` is what COMMAND prints today, numbers and bar
  lengths aside, in the session that installs what COMMAND needs (the demo's stack, or a
  framework example's extra: ``nox -s examples``).
* The README's examples table lists every example, and every extra a page installs exists.
* The usage in ``wm_middleware``'s module docstring shows supermemory 5.x, then 3.x, and each
  block runs in its SDK's session.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import re
import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

import pytest

from wm_middleware.emulator import EmulatorServer

from .conftest import SDK_MAJOR
from .demo._run import ROOT, environment, run, serving
from .demo.test_examples import FRAMEWORK, ran_example

# The README, then every page of the documentation site, as paths relative to the checkout.
DOCUMENTS = ["README.md", *sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob("docs/*.md"))]
README = (ROOT / "README.md").read_text(encoding="utf-8")


@dataclass(frozen=True)
class Block:
    """A fenced block of a page and the ``<!-- key: value -->`` comment just before it."""

    document: str  # README.md, docs/telemetry.md, ...
    line: int  # of the opening fence, 1-based
    language: str
    marker: tuple[str, str] | None
    text: str

    @property
    def id(self) -> str:
        return f"{self.document}:line{self.line}-{self.language or 'text'}"


def _blocks(document: str) -> list[Block]:
    """Fenced blocks, and Markdown tables right after a marker (their language is ``table``)."""
    blocks: list[Block] = []
    lines = (ROOT / document).read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        previous = lines[index - 1] if index else ""
        found = re.fullmatch(r"<!-- (\w+): (.+?) -->", previous)
        marker = (found.group(1), found.group(2)) if found else None
        opening = re.fullmatch(r"```(\w*)", lines[index])
        if opening is not None:
            end = lines.index("```", index + 1)
            text = "\n".join(lines[index + 1 : end])
            blocks.append(Block(document, index + 1, opening.group(1), marker, text))
            index = end + 1
        elif marker is not None and lines[index].startswith("|"):
            end = index
            while end < len(lines) and lines[end].startswith("|"):
                end += 1
            blocks.append(Block(document, index + 1, "table", marker, "\n".join(lines[index:end])))
            index = end
        else:
            index += 1
    return blocks


BLOCKS = [block for document in DOCUMENTS for block in _blocks(document)]
PYTHON = [b for b in BLOCKS if b.language == "python"]
README_PYTHON = [b for b in PYTHON if b.document == "README.md"]
OUTPUTS = [b for b in BLOCKS if b.marker is not None and b.marker[0] == "output"]


def _supermemory_generation() -> str | None:
    try:
        return f"sdk{int(version('supermemory').split('.')[0])}"
    except (PackageNotFoundError, ValueError):
        return None


@pytest.fixture(scope="module")
def demo_emulator() -> Iterator[str]:
    """The emulator exactly as the README starts it: ``wm-middleware serve --demo-data``."""
    with serving("--demo-data") as base_url:
        yield base_url


def _wants(block: Block) -> tuple[str, set[str]]:
    """A block's environment and what else it needs: ``<!-- env: sdk5+otlp -->`` is
    ``("sdk5", {"otlp"})``, an OTLP collector at ``OTEL_EXPORTER_OTLP_ENDPOINT``."""
    generation, *needs = (block.marker[1] if block.marker else "?").split("+")
    return generation, set(needs)


def test_the_documents_are_the_readme_and_every_page_of_the_site() -> None:
    assert DOCUMENTS[0] == "README.md"
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = DOCUMENTS[1:]
    assert pages, "docs/ has the site's pages"
    for page in pages:  # mkdocs build --strict refuses a page left out of the nav
        assert f" {page.removeprefix('docs/')}\n" in nav, f"{page} is not in mkdocs.yml's nav"


def test_every_python_block_names_its_environment() -> None:
    unmarked = [b.id for b in PYTHON if b.marker is None or b.marker[0] != "env"]

    assert unmarked == [], (
        "a Python block needs <!-- env: sdk3|sdk5|any[+otlp][+redis] --> before it"
    )
    assert {_wants(b)[0] for b in PYTHON} <= {"sdk3", "sdk5", "any"}
    assert set().union(*(_wants(b)[1] for b in PYTHON)) <= {"otlp", "redis"}


def test_the_readme_has_python_blocks_for_both_sdk_generations() -> None:
    environments = [_wants(b)[0] for b in README_PYTHON]

    assert {"sdk3", "sdk5"} <= set(environments)
    # The set-up command's environment (supermemory 3.x) comes first.
    assert environments.index("sdk3") < environments.index("sdk5")


# The pages a reader follows from the set-up command on, and the environment it makes: `.venv`,
# with the demo's stack (supermemory 3.x).
FOLLOWED = ["README.md", "docs/index.md"]
SET_UP = "sdk3"


def _environment_named(prose: str) -> str | None:
    """The generation of the last virtual environment a passage names (`.venv` or `.venv5`)."""
    named = re.findall(r"\.venv5?(?![\w-])", prose)
    return None if not named else "sdk5" if named[-1] == ".venv5" else "sdk3"


def _lead_in(block: Block) -> str:
    """The prose a reader has just read before ``block``: since the previous Python block of
    its page, or since the last heading when one comes after it."""
    lines = (ROOT / block.document).read_text(encoding="utf-8").splitlines()
    previous = [b for b in PYTHON if b.document == block.document and b.line < block.line]
    start = previous[-1].line + len(previous[-1].text.splitlines()) + 1 if previous else 0
    headings = [n for n in range(start, block.line - 1) if lines[n].startswith("#")]
    return "\n".join(lines[headings[-1] if headings else start : block.line - 1])


@pytest.mark.parametrize("document", FOLLOWED)
def test_each_block_runs_in_the_environment_the_page_is_in_at_that_point(document: str) -> None:
    """Read top to bottom, a page is in the set-up's environment until a passage names another;
    a block for another generation must come after a passage that switches to it."""
    current = SET_UP
    wrong = []
    for block in (b for b in PYTHON if b.document == document):
        current = _environment_named(_lead_in(block)) or current
        if _wants(block)[0] not in ("any", current):
            wrong.append(f"{block.id} is {_wants(block)[0]}, but the page is in {current} there")

    assert wrong == []


@pytest.mark.parametrize("block", PYTHON, ids=[b.id for b in PYTHON])
def test_python_block_runs_against_the_emulator(
    block: Block, request: pytest.FixtureRequest
) -> None:
    wanted, needs = _wants(block)
    if wanted != "any" and wanted != _supermemory_generation():
        pytest.skip(f"a {wanted} block: it runs in the {wanted} test session")
    demo_emulator: str = request.getfixturevalue("demo_emulator")
    extra = {"SUPERMEMORY_BASE_URL": demo_emulator, "SUPERMEMORY_API_KEY": "sk-wm-demo"}

    with contextlib.ExitStack() as stack:
        if "otlp" in needs:  # a collector where the README says to point the block
            from .telemetry._otlp_receiver import http_receiver

            extra["OTEL_EXPORTER_OTLP_ENDPOINT"], received = stack.enter_context(http_receiver())
        if "redis" in needs:  # a server of its own, where the README's REDIS_URL points
            from .shared.servers import Server

            server = Server().start()
            stack.callback(server.close)
            extra["REDIS_URL"] = server.url
        result = subprocess.run(
            [sys.executable, "-c", block.text],
            cwd=ROOT,
            env=environment(**extra),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    if "otlp" in needs:
        assert "search_memory" in {span["name"] for span in received.spans}
    printed = iter(result.stdout.splitlines())
    for expected in re.findall(r"^\s*print\(.*\)\s+# -> (.+)$", block.text, flags=re.MULTILINE):
        assert any(line.startswith(expected) for line in printed), (expected, result.stdout)


def _shape(line: str) -> str:
    """A printed line with its measurements taken out: numbers, bar lengths, column padding."""
    line = re.sub(r"<?\d+(?:\.\d+)?", "N", line)  # "<0.01x": a ratio under the display's step
    line = re.sub(r"[█▏#|]+", "", line)
    line = re.sub(r"([━─])\1+", r"\1", line)  # table rules as wide as their columns
    return re.sub(r"\s+", " ", line).strip()


def _contains(printed: list[str], sample: list[str]) -> bool:
    return any(printed[i : i + len(sample)] == sample for i in range(len(printed)))


def _command(command: str) -> tuple[list[str], str]:
    """The arguments that run COMMAND here, and the module it needs installed."""
    if command == "wm-middleware demo":
        # The README's sample is from the default run; 20 ms latency keeps its shape.
        return ["-m", "wm_middleware", "demo", "--latency-ms", "20"], "supermemory_openai"
    if command == "wm-middleware demo --workers 3":
        args = ["-m", "wm_middleware", "demo", "--workers", "3", "--latency-ms", "20"]
        return args, "supermemory_openai"
    if command == "python benchmarks/bench_agent_loop.py":
        return ["benchmarks/bench_agent_loop.py", "--latency-ms", "0"], "supermemory_openai"
    example = re.fullmatch(r"python (examples/(\w+)\.py)", command)
    if example is not None and example.group(2) in FRAMEWORK:  # run by ``nox -s examples``
        return [example.group(1)], FRAMEWORK[example.group(2)]
    raise AssertionError(f"no way to run {command!r}: add it here")


def _sample_lines(block: Block) -> list[str]:
    if block.language == "table":  # made from the program's columns
        rows = [line.strip("|").split("|") for line in block.text.splitlines()]
        return [
            "  ".join(cell.strip().replace("**", "") for cell in row)
            for row in rows
            if not set("".join(row)) <= set("-: ")
        ]
    return block.text.splitlines()


@functools.cache
def _printed(*args: str) -> subprocess.CompletedProcess[str]:
    """What ``args`` print, run once per process however many samples show it (the programs
    are seeded: a second run prints the same)."""
    return run(*args, timeout=120)


@pytest.mark.parametrize("block", OUTPUTS, ids=[b.id for b in OUTPUTS])
def test_output_sample_is_what_the_program_prints(block: Block) -> None:
    assert block.marker is not None
    args, needs = _command(block.marker[1])
    if importlib.util.find_spec(needs) is None:  # the demo's 3.x stack, or a framework's extra
        pytest.skip(f"{block.marker[1]} needs {needs}, which this session does not install")
    example = re.fullmatch(r"examples/(\w+)\.py", args[0])
    # An example's run is shared with tests/demo/test_examples.py: one per session.
    result = ran_example(example.group(1)) if example else _printed(*args)

    assert result.returncode == 0, result.stderr
    printed = [_shape(line) for line in result.stdout.splitlines()]
    sample = [_shape(line) for line in _sample_lines(block)]
    printed = [line for line in printed if line and not set(line) <= set("- ")]
    sample = [line for line in sample if line]
    assert _contains(printed, sample), "\n".join([f"{block.id}:", *sample, "printed:", *printed])


def test_every_output_sample_names_a_command() -> None:
    assert len(OUTPUTS) >= 3  # the demo's table and waterfall, the agent-loop benchmark
    for block in OUTPUTS:
        assert block.marker is not None
        _command(block.marker[1])


def test_the_examples_table_lists_every_example() -> None:
    listed = set(re.findall(r"^\| `(\w+)\.py` \|", README, flags=re.MULTILINE))

    # A module with a leading underscore is what examples share, not an example.
    assert listed == {path.stem for path in (ROOT / "examples").glob("[!_]*.py")}


def _writes_bullet() -> str:
    """The README's bullet on what a write through the same process does, on one line."""
    found = re.search(r"^- a write through the same process.*?(?=^- |^$)", README, re.M | re.S)
    assert found is not None, "the README no longer says what a write does"
    return " ".join(found.group(0).split())


def test_what_the_readme_says_a_write_does_is_what_it_does(emulator: EmulatorServer) -> None:
    import supermemory

    import wm_middleware

    emulator.seed("sk-a", ["User likes tea"], container_tag="user-1")
    emulator.set_indexing_delay(600.0)  # the added documents stay pending throughout the test
    client = supermemory.Supermemory(api_key="sk-a", base_url=emulator.base_url, max_retries=0)
    naming = {"custom_id": "doc-1"} if SDK_MAJOR == "3" else {"id": "doc-1"}

    def search() -> object:
        if SDK_MAJOR == "3":
            return client.search.memories(q="tea", container_tag="user-1")
        return client.search("user-1", query="tea")

    def add(**named: str) -> object:
        if SDK_MAJOR == "3":
            return client.add(content="User likes oolong", container_tag="user-1", **named)
        return client.add("user-1", content="User likes oolong", **named)

    def searches() -> int:
        return emulator.count("POST", "*search*")

    # Copies live 3/4 of the interval: a loaded machine's pauses stay well inside that.
    wm_middleware.instrument(settle_interval=30.0)
    try:
        search()
        add()  # new documents only: no answer shows them before they are indexed
        search()
        standing = searches() == 1
        add(**naming)  # names a document: it may change an answer at once
        search()
        refetched = searches() == 2
    finally:
        wm_middleware.uninstrument()
    assert refetched
    bullet = _writes_bullet()
    assert "so the next read asks the API again" in bullet
    # A README that promised a refetch after every write was wrong: the add leaves answers.
    assert standing == ("an add of new documents" in bullet and "may stand" in bullet)


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_extra_a_page_installs_exists(document: str) -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    text = (ROOT / document).read_text(encoding="utf-8")
    named = {name for group in re.findall(r"\.\[([\w,-]+)\]'", text) for name in group.split(",")}

    assert named <= set(extras), named - set(extras)
    if document == "README.md":
        assert named, "the README installs the package with its extras"


def _package_usage() -> list[tuple[str, str]]:
    """(sdk generation, code) of each usage block in ``wm_middleware``'s module docstring."""
    import wm_middleware

    found = re.findall(
        r"^(.*?(\d)\.x.*)::\n\n((?:    .*\n|\n)+)", wm_middleware.__doc__ or "", flags=re.M
    )
    return [(f"sdk{major}", textwrap.dedent(code)) for _, major, code in found]


def test_the_package_docstring_shows_the_current_sdk_first_then_3x() -> None:
    assert [generation for generation, _ in _package_usage()] == ["sdk5", "sdk3"]


@pytest.mark.parametrize(("generation", "code"), _package_usage(), ids=["sdk5", "sdk3"])
def test_the_package_docstring_usage_runs_against_the_emulator(
    generation: str, code: str, request: pytest.FixtureRequest
) -> None:
    if generation != _supermemory_generation():
        pytest.skip(f"a {generation} block: it runs in the {generation} test session")
    demo_emulator: str = request.getfixturevalue("demo_emulator")

    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=environment(SUPERMEMORY_BASE_URL=demo_emulator, SUPERMEMORY_API_KEY="sk-wm-demo"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("CacheStats(hits=1, misses=1, coalesced=0")
