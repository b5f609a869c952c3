"""The README and docs/ stay true: every command the README shows can run, every link lands somewhere.

A newcomer copies the README's commands and follows its links; a renamed make target, CLI option or heading must
fail here, not on their machine. Nothing is run for real (no network, no AWS, no venv rebuild).

Commands: the lines of the README's fenced blocks tagged ```bash, ```sh, ```shell or ```console. In a console
block only lines starting with "$ " are commands (the rest is output); in the others every line is but blank ones
and "#" comments. A trailing "# ..." is a comment, a trailing "\\" joins the next line, and "&&", "||", ";" and "|"
split a line into commands, each checked on its own; leading VAR=value words are dropped. Placeholders (CLUSTER,
<repo url>) are fine, since nothing is executed. Each command must match one rule, else the test fails naming it
(fail closed: add a rule here, or keep the command out of the README):
- `make [VAR=value ...] TARGET ...`: each TARGET is a rule of the Makefile. Parsed, not `make -n`: a dry run would
  still rebuild .venv when the Makefile is newer than .venv/.installed, and its recursive $(MAKE) lines run.
- `hpdhc WORDS... [--option ...]` (or .venv/bin/hpdhc): `python -m hyperpod_dhc.hpdhc WORDS... --help` exits 0 (so every
  subcommand exists) and its help names every --option the line uses.
- `python -m MODULE ...` (python3, .venv/bin/python): `python -m MODULE --help` exits 0.
- `cp SRC DST`: SRC exists (nothing is copied).
- NOT_RUN (`cd`, `git clone`, `pip install`, `pipx install`): shown to the reader, not checked.

Links: every link of README.md and docs/*.md outside code (`[text](target)`, `![alt](target)`, `[ref]: target`,
`href="..."`, `src="..."`) that is relative names an existing file, and its #anchor a heading of the target by
GitHub's slug rules (lowercase; drop everything but letters, digits, spaces, "-" and "_"; spaces to "-"; a repeated
heading gets -1, -2, ...). http(s) links must be well formed; they are not fetched.

Each command and each link is its own test case, so a failure names the one that broke.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import unicodedata
from pathlib import Path
from urllib.parse import urlparse

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
MAX_README_LINES = 250

SHELL_TAGS = {"bash", "sh", "shell", "console"}
NOT_RUN = {("cd",), ("git", "clone"), ("pip", "install"), ("pipx", "install")}
OPERATORS = {"&&", "||", ";", "|"}
FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+-]*)")


def fenced_blocks(text: str) -> list[tuple[str, list[str]]]:
    """(info tag, lines) of each fenced code block."""
    blocks: list[tuple[str, list[str]]] = []
    current: list[str] | None = None
    fence = tag = ""
    for line in text.splitlines():
        match = FENCE.match(line)
        if current is None and match:
            fence, tag, current = match.group(1), match.group(2).lower(), []
        elif current is not None and line.strip().startswith(fence) and not line.strip().strip(fence[0]):
            blocks.append((tag, current))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def outside_code_blocks(text: str) -> list[str]:
    out: list[str] = []
    in_fence = ""
    for line in text.splitlines():
        match = FENCE.match(line)
        if not in_fence and match:
            in_fence = match.group(1)
        elif in_fence and line.strip().startswith(in_fence) and not line.strip().strip(in_fence[0]):
            in_fence = ""
        elif not in_fence:
            out.append(line)
    return out


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks, with inline code spans blanked (a link there is not a link)."""
    return [re.sub(r"(`+)(?:(?!\1).)+?\1", "``", line) for line in outside_code_blocks(text)]


def readme_commands() -> list[str]:
    commands: list[str] = []
    for tag, lines in fenced_blocks(README.read_text()):
        if tag not in SHELL_TAGS:
            continue
        if tag == "console":
            lines = [line[2:] for line in lines if line.startswith("$ ")]
        joined: list[str] = []
        for line in lines:
            if joined and joined[-1].endswith("\\"):
                joined[-1] = joined[-1][:-1] + " " + line.strip()
            else:
                joined.append(line.strip())
        for line in joined:
            commands.extend(split_commands(line))
    return commands


def split_commands(line: str) -> list[str]:
    """One shell line -> its simple commands, comments and VAR=value prefixes dropped, each re-quoted."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars="|;&")
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    for word in lexer:
        if word in OPERATORS:
            commands.append([])
        elif commands[-1] or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", word):
            commands[-1].append(word)
    return [shlex.join(argv) for argv in commands if argv]


def makefile_targets() -> set[str]:
    """The explicit targets of the Makefile's rules (`a b: deps`), not variable assignments (`A := x`, `A ?= x`)."""
    targets: set[str] = set()
    for line in (ROOT / "Makefile").read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.%/-][A-Za-z0-9_.%/ -]*?)\s*::?(?!=)", line)
        if match and not line.startswith(("\t", "export ")):
            targets.update(match.group(1).split())
    return targets


def makefile_rules() -> dict[str, tuple[list[str], list[str]]]:
    """target -> (prerequisites, recipe lines) of every explicit rule, `$(VAR)` expanded from `VAR := value`."""
    text = (ROOT / "Makefile").read_text()
    variables = dict(re.findall(r"^([A-Z0-9_]+)\s*[:?]?=\s*(.*?)\s*$", text, re.M))

    def expand(words: str) -> str:
        for _ in range(5):  # variables of variables
            words = re.sub(r"\$\(([A-Z0-9_]+)\)", lambda m: variables.get(m.group(1), m.group(0)), words)
        return words

    rules: dict[str, tuple[list[str], list[str]]] = {}
    current: list[str] = []
    for line in text.splitlines():
        if line.startswith("\t"):
            for target in current:
                rules[target][1].append(expand(line))
            continue
        match = re.match(r"^([^\s#:=][^:=]*?)\s*:(?!=)\s*([^#]*)", line)
        if match and not line.startswith("export "):
            current = expand(match.group(1)).split()
            for target in current:
                rules[target] = (expand(match.group(2)).split(), [])
        elif line.strip() and not line.startswith((" ", "#")):
            current = []
    return rules


def needs(target: str) -> set[str]:
    """Every target `make TARGET` may build first, itself included (recursive `$(MAKE) X` lines too)."""
    rules, seen, todo = makefile_rules(), set(), [target]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        prerequisites, recipe = rules.get(name, ([], []))
        todo += prerequisites + [w for line in recipe for w in re.findall(r"\$\(MAKE\)[^\n]*?\s([\w./-]+)$", line)]
    return seen


def test_make_demo_installs_only_what_the_demo_needs():
    """No Slurm (apt-get as root), no Python 3.10, no CDK CLI: the demo runs the twin from the venv alone. The
    tests that need Slurm still get it: `make test` (and so .ci/run) builds `install`, which builds `slurm`."""
    demo = needs("demo")
    assert ".venv/.installed" in demo
    assert not demo & {"install", "slurm", "oldest-python", ".venv-py310/.installed"}, demo
    recipes = [line for t in demo for line in makefile_rules().get(t, ([], []))[1]]
    # The venv links Node.js's npm (it comes with the Python stack); it installs nothing with it.
    assert not [line for line in recipes if "apt-get" in line or "npm install" in line]
    assert {"install", "slurm", "oldest-python"} <= needs("test") and "slurm" in needs("bridge")


def help_of(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *argv, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )


def check_command(command: str) -> None:
    argv = shlex.split(command)
    program = Path(argv[0]).name
    if tuple(argv[:1]) in NOT_RUN or tuple(argv[:2]) in NOT_RUN:
        return
    if program == "make":
        missing = [w for w in argv[1:] if not w.startswith("-") and "=" not in w and w not in makefile_targets()]
        assert not missing, f"`{command}`: no Makefile target {missing}"
    elif program == "hpdhc":
        first_option = next((i for i, w in enumerate(argv[1:]) if w.startswith("-")), len(argv) - 1)
        words = argv[1 : 1 + first_option]
        done = help_of(["-m", "hyperpod_dhc.hpdhc", *words])
        assert done.returncode == 0, f"`{command}`: `hpdhc {' '.join(words)} --help` failed:\n{done.stderr}"
        options = {w.split("=")[0] for w in argv[1:] if w.startswith("--")}
        unknown = sorted(o for o in options if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", done.stdout))
        assert not unknown, f"`{command}`: `hpdhc {' '.join(words)} --help` names no {unknown}"
    elif re.fullmatch(r"python3?(\.\d+)?", program) and argv[1:2] == ["-m"] and len(argv) > 2:
        done = help_of(["-m", argv[2]])
        assert done.returncode == 0, f"`{command}`: `python -m {argv[2]} --help` failed:\n{done.stderr}"
    elif program == "cp" and len(argv) == 3:
        assert (ROOT / argv[1]).exists(), f"`{command}`: {argv[1]} does not exist"
    else:
        pytest.fail(f"`{command}`: no rule says how to check it (tests/docs/test_docs.py: add one, or drop it)")


COMMANDS = readme_commands()


def test_the_readme_shows_commands():
    # An empty list would pass every check below: a fence tag renamed must not silently turn the test off.
    assert {"make demo", "make test"} <= set(COMMANDS)
    assert COMMANDS[:2] == ["make demo", "make test"], "the README's first two commands are the demo and the tests"


@pytest.mark.parametrize("command", COMMANDS)
def test_readme_command_runs(command):
    check_command(command)


def test_readme_is_short():
    lines = len(README.read_text().splitlines())
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; move detail to docs/ (at most {MAX_README_LINES})"


def slug(heading: str) -> str:
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    kept = "".join(c for c in text if c.isalnum() or c in " -_" or unicodedata.category(c).startswith("M"))
    return kept.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out: set[str] = set()
    for line in outside_code_blocks(page.read_text()):
        match = re.match(r"^ {0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$", line)
        if not match:
            continue
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
HTML = re.compile(r"\b(?:href|src)=\"([^\"]+)\"")


def links(page: Path) -> list[str]:
    text = page.read_text()
    found: list[str] = []
    for line in prose_lines(text):
        found += LINK.findall(line) + HTML.findall(line)
        if match := REFERENCE.match(line):
            found.append(match.group(1))
    return found


def check_link(page: Path, target: str) -> None:
    where = f"{page.relative_to(ROOT)}: ({target})"
    parsed = urlparse(target)
    if parsed.scheme in {"http", "https"}:
        assert parsed.netloc and " " not in target, f"{where}: not a well-formed URL"
        return
    if parsed.scheme == "mailto":
        assert "@" in parsed.path, f"{where}: not an address"
        return
    assert not parsed.scheme, f"{where}: a scheme this test does not know"
    path, _, anchor = target.partition("#")
    file = (page.parent / path).resolve() if path else page
    assert file.exists(), f"{where}: {file.relative_to(ROOT) if file.is_relative_to(ROOT) else file} does not exist"
    if anchor:
        assert file.suffix == ".md", f"{where}: an anchor into a file that is not Markdown"
        assert anchor in anchors(file), f"{where}: no heading #{anchor} in {file.relative_to(ROOT)}"


LINKS = list(dict.fromkeys((page, target) for page in PAGES for target in links(page)))


def test_pages_have_links():
    assert any(page == README for page, _ in LINKS), "no link found in README.md: is the link parser broken?"


@pytest.mark.parametrize(("page", "target"), LINKS, ids=[f"{p.relative_to(ROOT)}:{t}" for p, t in LINKS])
def test_link_resolves(page, target):
    check_link(page, target)


def test_the_slug_rules():
    # GitHub's: the pages link to these by hand.
    assert slug("6. Groups with HyperPod's own on-start checks") == "6-groups-with-hyperpods-own-on-start-checks"
    assert slug("Report (`--json`)") == "report---json"
    assert slug("The `hpdhc` CLI") == "the-hpdhc-cli"
    page = ROOT / "docs" / "BENCHMARKS.md"
    assert {"latest-figures", "latest-figures-1"} <= anchors(page)


def test_the_checks_fail_closed():
    # The rules above catch what they are for, and a command no rule knows fails rather than passes.
    for command in ("make no-such-target", "hpdhc status --no-such-option", "hpdhc no-such-command", "rm -rf x"):
        with pytest.raises((AssertionError, pytest.fail.Exception)):
            check_command(command)
    for command in ("python -m hyperpod_dhc.hpdhc status", "cd somewhere", "make demo 'ARGS=--json'"):
        check_command(command)
    with pytest.raises(AssertionError):
        check_link(README, "docs/SAFETY.md#no-such-heading")


def test_the_readme_python_synthesizes_the_construct(tmp_path, monkeypatch):
    """The README's ```python block (the construct in an app of one's own) runs as shown and synthesizes a stack
    (into tmp_path, layer bundling skipped as in the infra tests: what the CDK CLI would pass the app)."""
    import aws_cdk

    (code,) = [lines for tag, lines in fenced_blocks(README.read_text()) if tag == "python"]
    app = aws_cdk.App
    monkeypatch.setattr(
        aws_cdk, "App", lambda **kw: app(outdir=str(tmp_path), context={"aws:cdk:bundling-stacks": []}, **kw)
    )
    exec(compile("\n".join(code), "README.md", "exec"), {"__name__": "readme"})
    template = (tmp_path / "HyperPodDhc.template.json").read_text()
    assert '"AWS::StepFunctions::StateMachine"' in template and "oncall@example.com" in template
