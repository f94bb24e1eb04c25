"""The documentation is executed, not just written.

Every fenced `bash`, `console` and `python` block under docs/ runs, in order, once per document, in a
fresh lab directory: its own temporary working directory, `tp` and `python` from the interpreter
running the tests first on PATH, and the private HOME, XDG dirs, git identity and storage root of
tests/conftest.py. Working directory and shell variables carry from one block to the next, as they
would for a reader typing the commands into one terminal.

- `bash` blocks run under `set -euo pipefail`: any failing command fails the document.
- `console` blocks: a line starting with `$ ` is a command (a trailing `\\` continues it); the lines
  after it are output that must appear, in order, in what the command prints (`...` matches any
  text; spacing is compared loosely). A command ending in `# exit N` must exit with N, any other
  with 0.
- `python` blocks run with this interpreter in the same working directory and environment.
- A block that needs a real cluster or GPUs opts out with the line
  `<!-- doc-test: skip (why) -->` right before its fence; each opt-out is reported as one skipped
  test with that reason, so they are listed in the test summary. A document can say
  `<!-- doc-test: needs-module NAME -->` for an optional third-party package (torch): when it is
  not installed, that document is skipped with the reason.
- A document that says `<!-- doc-test: needs-slurm -->` runs against the real two-node Slurm cluster
  of tests/slurm_cluster.py (`SLURM_CONF` points the reader's session at it); where the cluster
  cannot start it is skipped with the reason (failed in CI).
- A document that says `<!-- doc-test: needs-kube -->` runs against the Kubernetes cluster twin
  (tests/fakekube.py): `KUBECONFIG` points the session at it, and its `kubectl` is tests/kubectl_twin.py,
  the few verbs the guides use done through the real `kubernetes` client.

Besides running the blocks, this file checks that the generated command reference matches the CLI,
that every guide is linked from the index, that relative links resolve, that every schema and
environment variable the code uses is documented, that every `tp validate` rule id is explained,
and that the example files in the file-format reference pass their JSON Schemas.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support.installed import needs
from support.labs import new_lab

from tuneplane import __version__

pytest_plugins = ("slurm_cluster", "fakekube")  # the slurm_cluster fixture, for documents that need it

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
PACKAGE = REPO / "tuneplane"
RUN_LANGS = {"bash", "console", "python"}
BLOCK_TIMEOUT = 180  # seconds; a hung block fails instead of hanging the suite
MARKER = re.compile(r"^<!--\s*doc-test:\s*(?P<body>.*?)\s*-->\s*$")
SKIP = re.compile(r"^skip\s*\((?P<reason>[^)]+)\)$")
NEEDS = re.compile(r"^needs-module\s+(?P<module>[A-Za-z_][A-Za-z0-9_.]*)$")
NEEDS_SLURM = "needs-slurm"
NEEDS_KUBE = "needs-kube"
FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`\s]*)")
NOT_BEFORE_FENCE = "a skip marker must be the line right before a fence"
EXPECT_EXIT = re.compile(r"\s+#\s*exit\s+(?P<code>\d+)\s*$")


# ── parsing ──────────────────────────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    skip: str = ""  # the opt-out reason, when the block does not run

    @property
    def where(self) -> str:
        return f"{_shown(self.doc)}:{self.line}"


def _shown(path: Path) -> str:
    """A document's path as the report shows it: relative to the repository when inside it."""
    try:
        return path.relative_to(REPO).as_posix()
    except ValueError:
        return path.name


@dataclass
class Document:
    path: Path
    blocks: list[Block] = field(default_factory=list)
    needs: list[str] = field(default_factory=list)
    slurm: bool = False  # runs against the test Slurm cluster
    kube: bool = False  # runs against the Kubernetes cluster twin
    errors: list[str] = field(default_factory=list)  # malformed markers


def parse(path: Path) -> Document:
    """Fenced blocks and doc-test markers of one Markdown file."""
    doc = Document(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    pending: tuple[int, str] | None = None  # a skip marker waiting for its fence
    i = 0
    while i < len(lines):
        line = lines[i]
        marker = MARKER.match(line.strip())
        fence = FENCE.match(line)
        if marker:
            pending = _marker(doc, i + 1, marker.group("body"), pending)
        elif fence:
            end = _closing(lines, i, fence.group("fence"))
            lang = fence.group("info").lower()
            code = "\n".join(lines[i + 1 : end]) + "\n"
            if lang in RUN_LANGS:
                doc.blocks.append(Block(path, i + 1, lang, code, pending[1] if pending else ""))
            elif pending:
                doc.errors.append(f"{path.name}:{pending[0]}: a skip marker before a `{lang}` block, which never runs")
            pending = None
            i = end
        elif line.strip() and pending:
            doc.errors.append(f"{path.name}:{pending[0]}: {NOT_BEFORE_FENCE}")
            pending = None
        i += 1
    if pending:
        doc.errors.append(f"{path.name}:{pending[0]}: a skip marker with no block after it")
    return doc


def _marker(doc: Document, number: int, body: str, pending: tuple[int, str] | None) -> tuple[int, str] | None:
    skip, needs = SKIP.match(body), NEEDS.match(body)
    if pending:
        doc.errors.append(f"{doc.path.name}:{pending[0]}: {NOT_BEFORE_FENCE}")
    if skip and skip.group("reason").strip():
        return number, skip.group("reason").strip()
    if needs:
        doc.needs.append(needs.group("module"))
    elif body == NEEDS_SLURM:
        doc.slurm = True
    elif body == NEEDS_KUBE:
        doc.kube = True
    else:
        doc.errors.append(
            f"{doc.path.name}:{number}: unknown doc-test marker {body!r} "
            "(use `skip (why)`, `needs-module NAME` or `needs-slurm`)"
        )
    return None


def _closing(lines: list[str], start: int, fence: str) -> int:
    for j in range(start + 1, len(lines)):
        stripped = lines[j].strip()
        if stripped.startswith(fence[0] * len(fence)) and stripped.strip(fence[0]) == "":
            return j
    raise AssertionError(f"unclosed fence opened on line {start + 1}")


def markdown_files() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


DOCUMENTS = [parse(p) for p in markdown_files()]
RUNNABLE = [d for d in DOCUMENTS if any(b.lang in RUN_LANGS for b in d.blocks)]
SKIPPED = [b for d in DOCUMENTS for b in d.blocks if b.skip]


# ── running ──────────────────────────────────────────────────────────────────────────────────────

# Shell variables (new ones, and exported ones whose value changed) and the working directory are
# saved when a block ends and restored before the next, as in one terminal session.
PRELUDE = r"""
declare -A __doc_seen=() __doc_init=()
for __doc_v in $(compgen -v); do __doc_seen[$__doc_v]=1; done
for __doc_v in $(compgen -e); do __doc_init[$__doc_v]=${!__doc_v-}; done
__doc_save() {
  local rc=$? v
  pwd > "$__DOC_STATE/cwd"
  for v in $(compgen -v); do
    case $v in
      __doc*|__DOC*|BASH*|FUNCNAME|PIPESTATUS|_|PWD|OLDPWD|SHLVL) continue;;
      LINENO|RANDOM|SRANDOM|SECONDS|EPOCH*) continue;;
    esac
    if [[ -z ${__doc_seen[$v]-} ]]; then
      declare -p "$v" 2>/dev/null || true
    elif [[ -v __doc_init[$v] ]] && [[ ${!v-} != "${__doc_init[$v]}" ]]; then
      declare -p "$v" 2>/dev/null || true
    fi
  done > "$__DOC_STATE/vars.sh"
  return $rc
}
trap __doc_save EXIT
[[ -f "$__DOC_STATE/vars.sh" ]] && source "$__DOC_STATE/vars.sh"
cd "$(cat "$__DOC_STATE/cwd")"
set -euo pipefail
"""


@dataclass
class Session:
    """One reader's terminal: a working directory, an environment, shell variables."""

    state: Path
    env: dict[str, str]

    @classmethod
    def start(cls, tmp: Path) -> Session:
        work, state, shims = tmp / "work", tmp / ".doc-state", tmp / ".doc-bin"
        for d in (work, state, shims):
            d.mkdir(parents=True)
        (state / "cwd").write_text(str(work), encoding="utf-8")
        return cls(state, _environment(shims))

    def bash(self, code: str) -> subprocess.CompletedProcess[str]:
        """Run `code` in its own process group; output goes to a file, so a process the block left in
        the background cannot hold the test up, and such leftovers are stopped when the block ends."""
        script, log = self.state / "block.sh", self.state / "block.log"
        script.write_text(PRELUDE + code, encoding="utf-8")
        with log.open("wb") as out:
            child = subprocess.Popen(
                ["bash", str(script)],
                env={**self.env, "__DOC_STATE": str(self.state)},
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            try:
                code_ = child.wait(timeout=BLOCK_TIMEOUT)
            except subprocess.TimeoutExpired:
                code_ = -1
            finally:
                _stop_group(child.pid)
        output = log.read_text(encoding="utf-8", errors="replace")
        if code_ == -1:
            output += f"\n(timed out after {BLOCK_TIMEOUT} s)"
        return subprocess.CompletedProcess(["bash", str(script)], code_, output, "")

    def python(self, code: str) -> subprocess.CompletedProcess[str]:
        source = self.state / "block.py"
        source.write_text(code, encoding="utf-8")
        return self.bash(f"python {shlex.quote(str(source))}\n")


def _stop_group(pgid: int) -> None:
    """Stop whatever the block left running in its process group (a server started with `&`)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _environment(shims: Path) -> dict[str, str]:
    """This test's environment (conftest isolated it), with this interpreter's `python` and `tp` first."""
    bin_dir = Path(sys.executable).parent
    for name in ("python", "python3"):  # a script, not a symlink: a venv is found from the path run
        shim = shims / name
        shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n', encoding="utf-8")
        shim.chmod(0o755)
    if not (bin_dir / "tp").exists():  # an interpreter without the console script: run the module
        tp = shims / "tp"
        tp.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m tuneplane "$@"\n', encoding="utf-8")
        tp.chmod(0o755)
    if not (bin_dir / "sf").exists():  # the same for StarForge's name of tp (an install older than it)
        sf = shims / "sf"
        sf.write_text(
            f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -c "from tuneplane.cli.sf import run; run()" "$@"\n',
            encoding="utf-8",
        )
        sf.chmod(0o755)
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(shims), str(bin_dir), env.get("PATH", "")])
    env.update(
        {
            "COLUMNS": "100",
            "PYTHONDONTWRITEBYTECODE": "1",
            "LC_ALL": "C.UTF-8",
            "TERM": "dumb",
            # a reader's tp came from an index: their `tp init` fills tool.requirement, whatever this
            # checkout's remotes say (a checkout without one would add the empty-requirement warning)
            "TUNEPLANE_TOOL_REQUIREMENT": f"tuneplane=={__version__}",
        }
    )
    env.pop("PYTHONPATH", None)
    return env


@dataclass(frozen=True)
class Command:
    line: int
    text: str
    expected: list[str]
    exit_code: int


def console_commands(block: Block) -> list[Command]:
    """`$ ` lines (with `\\` continuations) and the output lines after each."""
    commands: list[Command] = []
    lines = block.code.splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            if lines[i].strip() and not commands:
                raise AssertionError(f"{block.where}: console output before the first `$ ` command")
            if lines[i].strip():
                commands[-1].expected.append(lines[i])
            i += 1
            continue
        start, text = i, lines[i][2:]
        while text.endswith("\\") and i + 1 < len(lines):
            i += 1
            text = text + "\n" + lines[i]
        exit_match = EXPECT_EXIT.search(text)
        code = int(exit_match.group("code")) if exit_match else 0
        commands.append(Command(block.line + start + 1, text, [], code))
        i += 1
    return commands


def output_pattern(expected: str) -> re.Pattern[str]:
    """An expected output line as a regex: `...` is any text, runs of spaces are any spacing."""
    parts = [r"\s+".join(re.escape(w) for w in chunk.split()) for chunk in expected.strip().split("...")]
    return re.compile(r"\s*" + ".*".join(parts) + r"\s*")


def missing_output(expected: list[str], actual: str) -> str | None:
    """The first expected line not found (in order) in the actual output, else None."""
    lines = actual.splitlines()
    position = 0
    for want in expected:
        pattern = output_pattern(want)
        while position < len(lines) and not pattern.fullmatch(lines[position]):
            position += 1
        if position == len(lines):
            return want
        position += 1
    return None


def _fail(where: str, what: str, code: str, output: str) -> None:
    tail = "\n".join(output.splitlines()[-80:])
    pytest.fail(f"{where}: {what}\n--- block ---\n{code.rstrip()}\n--- output ---\n{tail}", pytrace=False)


def run_block(session: Session, block: Block) -> None:
    if block.lang == "bash":
        done = session.bash(block.code)
        if done.returncode:
            _fail(block.where, f"bash block exited {done.returncode}", block.code, done.stdout)
    elif block.lang == "python":
        done = session.python(block.code)
        if done.returncode:
            _fail(block.where, f"python block exited {done.returncode}", block.code, done.stdout)
    else:
        for command in console_commands(block):
            done = session.bash(command.text + "\n")
            where = f"{_shown(block.doc)}:{command.line}"
            if done.returncode != command.exit_code:
                _fail(
                    where,
                    f"`{command.text}` exited {done.returncode}, expected {command.exit_code}",
                    command.text,
                    done.stdout,
                )
            missing = missing_output(command.expected, done.stdout)
            if missing is not None:
                _fail(
                    where, f"`{command.text}` did not print (in order): {missing.strip()!r}", command.text, done.stdout
                )


# ── the executed documents ───────────────────────────────────────────────────────────────────────


def _doc_id(doc: Document) -> str:
    return doc.path.relative_to(DOCS).as_posix()


def _costs(doc: Document) -> list[pytest.MarkDecorator]:
    """A document's cost markers, as a test using the cluster fixtures gets them (tests/conftest.py): a
    Slurm document runs with the other Slurm tests, on their cluster."""
    return [mark for mark, needed in ((pytest.mark.slurm, doc.slurm), (pytest.mark.cluster, doc.kube)) if needed]


@pytest.mark.parametrize("doc", [pytest.param(d, marks=_costs(d), id=_doc_id(d)) for d in RUNNABLE])
def test_document_runs(doc: Document, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Every runnable block of the document, in order, in one fresh session."""
    for module in doc.needs:
        needs(module, reason=f"{_doc_id(doc)} needs the optional package {module}")
    session = Session.start(tmp_path)
    if doc.slurm:
        session.env.update(request.getfixturevalue("slurm_cluster").env)
    if doc.kube:
        session.env.update(_kube_twin(request.getfixturevalue("fake_kube").url, tmp_path))
    for block in doc.blocks:
        if not block.skip:
            run_block(session, block)


def _kube_twin(server: str, tmp: Path) -> dict[str, str]:
    """A kubeconfig naming the twin, and tests/kubectl_twin.py as the session's `kubectl`."""
    from support.repos import kubeconfig

    shim = tmp / ".doc-bin" / "kubectl"
    stand_in = Path(__file__).with_name("kubectl_twin.py")
    shim.write_text(
        f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(stand_in))} "$@"\n', encoding="utf-8"
    )
    shim.chmod(0o755)
    return {"KUBECONFIG": str(kubeconfig(tmp / "kubeconfig", server))}


@pytest.mark.parametrize("block", SKIPPED, ids=lambda b: b.where)
def test_opted_out_block(block: Block) -> None:
    """Blocks that need a cluster or GPUs do not run here; each is listed with its reason."""
    pytest.skip(f"doc-test opt-out at {block.where}: {block.skip}")


def test_doc_test_markers_are_well_formed() -> None:
    errors = [e for d in DOCUMENTS for e in d.errors]
    assert errors == []


def test_opt_outs_are_only_for_clusters_gpus_or_the_network() -> None:
    """An opt-out says what the test machine lacks; anything else must run."""
    allowed = re.compile(r"\b(cluster|GPUs?|network|package index|kubectl|GitHub)\b", re.IGNORECASE)
    assert [b.where for b in SKIPPED if not allowed.search(b.skip)] == []


# ── the harness itself (fast, no documents) ─────────────────────────────────────────────────────


def test_harness_carries_directory_and_variables_between_blocks(tmp_path: Path) -> None:
    session = Session.start(tmp_path)
    doc = tmp_path / "x.md"
    code = 'mkdir sub && cd sub\nNAME=alpha\nexport GREETING=hi\nexport PATH="/nowhere:$PATH"\n'
    first = Block(doc, 1, "bash", code)
    run_block(session, first)
    done = session.bash('echo "$(basename "$PWD") $NAME $GREETING ${PATH%%:*}"\n')
    assert done.stdout.strip() == "sub alpha hi /nowhere"


def test_harness_fails_a_bash_block_on_the_first_error(tmp_path: Path) -> None:
    session = Session.start(tmp_path)
    block = Block(tmp_path / "x.md", 3, "bash", "false\necho never\n")
    with pytest.raises(pytest.fail.Exception, match="x.md:3: bash block exited 1"):
        run_block(session, block)


def test_harness_checks_console_output_and_exit_codes(tmp_path: Path) -> None:
    session = Session.start(tmp_path)
    good = Block(
        tmp_path / "x.md",
        1,
        "console",
        "$ printf 'a  b\\nrun 123 done\\n'\na b\nrun ... done\n$ sh -c 'exit 3'  # exit 3\n",
    )
    run_block(session, good)
    wrong_text = Block(tmp_path / "x.md", 1, "console", "$ echo hello\ngoodbye\n")
    with pytest.raises(pytest.fail.Exception, match="did not print"):
        run_block(session, wrong_text)
    wrong_code = Block(tmp_path / "x.md", 1, "console", "$ sh -c 'exit 2'\n")
    with pytest.raises(pytest.fail.Exception, match="exited 2, expected 0"):
        run_block(session, wrong_code)


def test_harness_uses_this_interpreter_and_tp(tmp_path: Path) -> None:
    session = Session.start(tmp_path)
    done = session.bash('python -c "import sys; print(sys.prefix)"; tp --version\n')
    assert done.returncode == 0, done.stdout
    prefix, version = done.stdout.split()[0], done.stdout.split()[-1]
    from tuneplane import __version__

    assert prefix == sys.prefix and version == __version__


def test_parser_reads_markers_and_rejects_stray_ones(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text(
        "<!-- doc-test: needs-module torch -->\n\n<!-- doc-test: skip (needs a cluster) -->\n"
        "```bash\nkubectl get pods\n```\n\n```python\nprint(1)\n```\n\n"
        "<!-- doc-test: skip (needs GPUs) -->\n\ntext\n```yaml\na: 1\n```\n",
        encoding="utf-8",
    )
    doc = parse(page)
    assert doc.needs == ["torch"]
    assert [(b.lang, b.skip) for b in doc.blocks] == [("bash", "needs a cluster"), ("python", "")]
    assert len(doc.errors) == 1 and "right before a fence" in doc.errors[0]


# ── the reference ────────────────────────────────────────────────────────────────────────────────


def test_command_reference_is_generated_from_the_cli() -> None:
    from tuneplane.dev import docgen

    committed = (REPO / docgen.REFERENCE).read_text(encoding="utf-8")
    assert committed == docgen.render(), (
        "docs/reference/commands.md is stale: run `python -m tuneplane.dev.docgen` and commit the result"
    )


def test_command_reference_lists_every_command_and_option() -> None:
    """Independent of docgen's own walk: every leaf command and every option string is on the page."""
    from tuneplane.dev import docgen

    page = (REPO / docgen.REFERENCE).read_text(encoding="utf-8")
    root = docgen.cli_root()
    leaves = list(docgen.walk(root))
    assert {"init", "validate", "submit"} <= {e.path[0] for e in leaves}
    for entry in leaves:
        assert f"## {entry.title}\n" in page
        for param in entry.command.params:
            for opt in [*getattr(param, "opts", []), *getattr(param, "secondary_opts", [])]:
                if opt.startswith("-") and opt not in ("--help", "-h"):
                    assert f"`{opt}`" in page.split(f"## {entry.title}\n", 1)[1], (entry.title, opt)


def test_docgen_check_mode_reports_a_stale_file(tmp_path: Path) -> None:
    from tuneplane.dev import docgen

    stale = tmp_path / "commands.md"
    stale.write_text("# old\n", encoding="utf-8")
    assert docgen.main(["--check", "--output", str(stale)]) == 1
    assert docgen.main(["--output", str(stale)]) == 0
    assert docgen.main(["--check", "--output", str(stale)]) == 0
    assert stale.read_text(encoding="utf-8") == docgen.render()


# ── links, coverage of code facts ────────────────────────────────────────────────────────────────

GUIDES = [
    "getting-started.md",
    "gitops.md",
    "custom-trainer.md",
    "plugins.md",
    "framework-adapters.md",
    "migrating-from-starforge.md",
    "architecture.md",
    "reference/commands.md",
    "reference/files.md",
    "reference/environment.md",
    "reference/rules.md",
    "reference/report.md",
]
LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)\s]+)\)")


def test_index_links_every_guide() -> None:
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    targets = {m.group("target").split("#", 1)[0] for m in LINK.finditer(index)}
    assert [g for g in GUIDES if g not in targets] == []
    orphans = [
        p.relative_to(DOCS).as_posix()
        for p in markdown_files()
        if p.name != "README.md" and p.relative_to(DOCS).as_posix() not in targets
    ]
    assert orphans == [], "every page is reachable from docs/README.md"


def _anchors(path: Path) -> set[str]:
    anchors = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


def _prose(text: str) -> str:
    """A page without its fenced blocks: a `](…)` in a command or its output is no link."""
    kept, fence = [], ""
    for line in text.splitlines():
        found = FENCE.match(line)
        if found and (not fence or found.group("fence").startswith(fence)):
            fence = "" if fence else found.group("fence")[:3]
        elif not fence:
            kept.append(line)
    return "\n".join(kept)


def test_relative_links_resolve() -> None:
    broken = []
    for page in [*markdown_files(), REPO / "README.md"]:
        text = _prose(page.read_text(encoding="utf-8"))
        for m in LINK.finditer(text):
            target = m.group("target")
            if re.match(r"^[a-z]+:", target) or target.startswith("mailto:"):
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists():
                broken.append(f"{page.relative_to(REPO)}: {target}")
            elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
                broken.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    assert broken == []


def test_docs_contain_no_machine_paths() -> None:
    """Examples must work anywhere: no home directories or temporary paths of some machine."""
    machine = re.compile(r"(/root/|/home/\w|/Users/\w|/tmp/pytest|/private/var/|\.pyenv)")
    offenders = [
        f"{p.relative_to(REPO)}:{n}"
        for p in markdown_files()
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if machine.search(line)
    ]
    assert offenders == []


def test_every_schema_is_linked_from_the_file_reference() -> None:
    page = (DOCS / "reference" / "files.md").read_text(encoding="utf-8")
    schemas = sorted(p.name for p in (REPO / "schemas").glob("*.schema.json"))
    assert schemas and [s for s in schemas if f"../../schemas/{s}" not in page] == []


def _package_source() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(PACKAGE.rglob("*.py")))


def test_every_environment_variable_the_code_uses_is_documented() -> None:
    page = (DOCS / "reference" / "environment.md").read_text(encoding="utf-8")
    used = set(re.findall(r"\bTUNEPLANE_[A-Z][A-Z0-9_]*[A-Z0-9]\b", _package_source()))
    assert used, "the package names no TUNEPLANE_ variable?"
    assert sorted(v for v in used if f"`{v}`" not in page) == []


def test_the_job_environment_is_documented_in_the_custom_guide(tmp_path: Path) -> None:
    """What a job actually receives (computed by the code, not a list kept by hand) is in the contract
    table of the custom guide and in the environment reference."""
    from tuneplane.lab.load import load_lab
    from tuneplane.models.run import RunRequest
    from tuneplane.plan.environment import SECRET_KEYS, job_env
    from tuneplane.plan.resolve import resolve

    lab = new_lab(tmp_path / "lab", "lab", experiments={"e": "custom/custom"})
    request = RunRequest(
        experiment="e",
        run_id="20250101-120000-abc123",
        profile="local",
        image="python:3.12",
        observability_url="https://example.org",
    )
    spec = resolve(load_lab(lab), "e", request, commit="0" * 40, dirty=False)
    names = set(job_env(spec, {}, ingest_endpoint="http://ingest")) | set(SECRET_KEYS)
    assert {"TUNEPLANE_OUT_DIR", "TUNEPLANE_JOB_ENDPOINT", "TUNEPLANE_EXTERNAL_OBSERVABILITY_URL"} <= names
    guide = (DOCS / "custom-trainer.md").read_text(encoding="utf-8")
    reference = (DOCS / "reference" / "environment.md").read_text(encoding="utf-8")
    assert sorted(n for n in names if n.startswith("TUNEPLANE_") and f"`{n}`" not in guide) == []
    assert sorted(n for n in names if f"`{n}`" not in reference) == []


# Where rule ids appear: the rule is this positional argument of these calls (or `rule=`).
RULE_ARG = {"Problem": 3, "problem": 1, "Refusal": 1, "_warn": 3, "_fail": 1, "parse_model": 2}
RULE_LIKE = re.compile(r"^[a-z]+(-[a-z0-9]+)+$|^entrypoint$|^binary$|^encoding$|^unreadable$")
RULE_PREFIX = re.compile(
    r"[\"'](?P<id>(?:lint|run|lock|config|plugin|plugins|experiment|lab|runtime|"
    r"starforge|yaml|json)-[a-z0-9-]+)[\"']"
)


def rule_ids() -> set[str]:
    """Every rule id the package can report: string arguments of Problem-making calls, plus any
    literal with a rule prefix (rules passed through variables), minus the names of the schemas."""
    import ast

    from tuneplane.dev.schemagen import models as schema_models

    ids: set[str] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        ids |= set(RULE_PREFIX.findall(source))
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            args = [node.args[RULE_ARG[name]]] if name in RULE_ARG and len(node.args) > RULE_ARG[name] else []
            args += [k.value for k in node.keywords if k.arg == "rule"]
            ids |= {
                a.value
                for a in args
                if isinstance(a, ast.Constant) and isinstance(a.value, str) and RULE_LIKE.match(a.value)
            }
    return ids - set(schema_models())


def test_every_validate_rule_is_explained() -> None:
    ids = rule_ids()
    page = (DOCS / "reference" / "rules.md").read_text(encoding="utf-8")
    assert {"lint-scaffold", "run-image", "entrypoint", "yaml-syntax", "config-unknown"} <= ids
    assert sorted(i for i in ids if f"`{i}`" not in page) == []


SCHEMA_MARK = re.compile(r"^<!--\s*schema:\s*(?P<name>[a-z-]+)\s*-->$")


def _schema_examples() -> list[tuple[str, str, str, int]]:
    """(schema name, language, text, line) of each block in files.md marked `<!-- schema: NAME -->`."""
    lines = (DOCS / "reference" / "files.md").read_text(encoding="utf-8").splitlines()
    found = []
    for i, line in enumerate(lines[:-1]):
        mark = SCHEMA_MARK.match(line.strip())
        fence = FENCE.match(lines[i + 1])
        if mark and fence:
            end = _closing(lines, i + 1, fence.group("fence"))
            found.append((mark.group("name"), fence.group("info"), "\n".join(lines[i + 2 : end]), i + 2))
    return found


def test_file_format_examples_pass_their_schemas() -> None:
    import jsonschema
    import yaml

    examples = _schema_examples()
    kinds = {"lab", "recipe", "recipe-lock", "plugin", "plugins-lock", "run", "status", "experiment"}
    assert {name for name, *_ in examples} >= kinds
    for name, lang, text, line in examples:
        schema = json.loads((REPO / "schemas" / f"{name}.schema.json").read_text(encoding="utf-8"))
        data = json.loads(text) if lang == "json" else yaml.safe_load(text)
        errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(data), key=str)
        assert errors == [], f"files.md:{line}: the {name} example fails its schema: {errors[0].message}"


def test_no_page_installs_another_project_by_name() -> None:
    """PyPI's `tuneplane` is another project: the docs install this one from its repository or a wheel."""
    by_name = re.compile(r"pip install\s+(-[-\w]+\s+)*['\"]?tuneplane(?![\w@ -]*@)(\s|==|['\"`]|$)")
    offenders = [
        f"{p.relative_to(REPO)}:{n}"
        for p in [*markdown_files(), REPO / "README.md"]
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if by_name.search(line)
    ]
    assert offenders == []
