"""The map matches the house: every repository path the architecture documents
name exists, and every local link of the README and the docs resolves.

- docs/ARCHITECTURE.md and docs/design/*.md: each backticked text that looks
  like a repository path (it contains a '/' and starts at a top-level folder of
  the repository or ends in '/', or it ends in a source or document extension)
  exists relative to the repository root. `<p>`, `<id>`, ... and `*` are
  wildcards and `{md,json}` alternatives: such a pattern must match something.
  A backticked name that is the text of a link is checked through the link.
  Not repository paths, so not checked: absolute paths (`/proc/PID/root`),
  build products (`build/...`), include spellings in quotes (`"tracecorr/..."`).
- README.md, docs/*.md and docs/design/*.md: every link to a local file (inline
  `[text](target)` or a reference definition `[label]: target`) names a file
  that exists relative to the document, and its `#anchor` is a heading of that
  file by GitHub's slug rules.

By default the repository alone is checked (the merged tree). While the
layout moves on other branches, TRACECORR_DOCS_EXTRA_TREES (colon-separated
roots, e.g. other worktrees) makes a path count when it exists in any of them.
Needs no build.
"""
from __future__ import annotations

import glob
import itertools
import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

PATH_CHECKED_DOCS = ["docs/ARCHITECTURE.md", "docs/design/*.md"]
LINK_CHECKED_DOCS = ["README.md", "docs/*.md", "docs/design/*.md"]

# A name ending so is a file of the repository (shared objects, packages and
# the like are build products: not listed).
EXTENSIONS = (".md", ".json", ".hpp", ".h", ".cpp", ".c", ".py", ".pyi", ".cmake", ".sh", ".yml",
              ".yaml", ".proto", ".js", ".rs", ".toml", ".txt", ".png", ".in")

BACKTICKED = re.compile(r"`([^`\n]+)`")
INLINE_LINK = re.compile(r"(?<!!)\[((?:[^\[\]]|`[^`]*`)*)\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
IMAGE_LINK = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
REFERENCE_USE = re.compile(r"\[((?:[^\[\]]|`[^`]*`)*)\]\[([^\]]*)\]")
REFERENCE_DEF = re.compile(r"^ {0,3}\[([^\]]+)\]:\s*(\S+)", re.M)
PATH_CHARS = re.compile(r"^[\w.\-/<>*{},+]+$")
FENCE = re.compile(r"^\s*(```|~~~)")


def trees() -> list[Path]:
    extra = os.environ.get("TRACECORR_DOCS_EXTRA_TREES", "")
    return [REPO] + [Path(p) for p in extra.split(":") if p]


def documents(patterns: list[str], root: Path = REPO) -> list[Path]:
    return sorted({Path(p) for pattern in patterns for p in glob.glob(str(root / pattern))})


def prose_lines(text: str) -> list[tuple[int, str]]:
    """The document's lines outside fenced code blocks, numbered from 1."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, line))
    return out


def top_level_names(roots: list[Path]) -> set[str]:
    names = set()
    for root in roots:
        names |= {p.name for p in root.iterdir() if not p.name.startswith(".") and not p.name.startswith("build")}
    return names


def looks_like_path(text: str, top_level: set[str]) -> bool:
    if not PATH_CHARS.match(text) or text.startswith(("/", "~", "-", ".")):
        return False
    if text.split("/")[0].startswith("build"):
        return False  # a build product, not a repository path
    if "/" in text:
        return text.endswith("/") or text.split("/")[0] in top_level or text.endswith(EXTENSIONS)
    return all(name.endswith(EXTENSIONS) for name in alternatives(text))


def alternatives(pattern: str) -> list[str]:
    """`spec/x.{md,json}` -> both names; every alternative must exist."""
    parts = re.split(r"\{([^{}]*)\}", pattern)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(c) for c in itertools.product(*choices)]


def path_exists(path: str, roots: list[Path]) -> bool:
    pattern = re.sub(r"<[^<>/]+>", "*", path)
    wild = "*" in pattern
    for root in roots:
        if not wild:
            if (root / pattern).exists():
                return True
            continue
        for match in glob.glob(str(root / pattern)):
            first = Path(match).relative_to(root).parts[0]
            if not first.startswith(("build", ".")):
                return True
    return False


def link_label_spans(line: str) -> list[tuple[int, int]]:
    spans = [m.span(1) for m in INLINE_LINK.finditer(line)]
    spans += [m.span(1) for m in REFERENCE_USE.finditer(line)]
    return spans


def stale_paths(doc: Path, roots: list[Path], root: Path = REPO) -> list[str]:
    """`doc:line: path` for every path named in doc that exists in none of roots."""
    top_level = top_level_names(roots)
    stale = []
    for number, line in prose_lines(doc.read_text()):
        if REFERENCE_DEF.match(line):
            continue
        labels = link_label_spans(line)
        for m in BACKTICKED.finditer(line):
            if any(start <= m.start() < end for start, end in labels):
                continue  # a link's text: the link is checked
            text = m.group(1).strip()
            if not looks_like_path(text, top_level):
                continue
            if not all(path_exists(p, roots) for p in alternatives(text)):
                stale.append(f"{doc.relative_to(root)}:{number}: `{text}`")
    return stale


def github_slug(heading: str) -> str:
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose_lines(doc.read_text()):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = github_slug(m.group(1))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


def local_links(doc: Path) -> list[tuple[int, str]]:
    links = []
    for number, line in prose_lines(doc.read_text()):
        targets = [m.group(2) for m in INLINE_LINK.finditer(line)]
        targets += [m.group(1) for m in IMAGE_LINK.finditer(line)]
        d = REFERENCE_DEF.match(line)
        if d:
            targets.append(d.group(2))
        for target in targets:
            target = target.strip("<>")
            if re.match(r"^[a-z][a-z0-9+.\-]*:", target, re.I):
                continue  # https:, mailto:, ...
            links.append((number, target))
    return links


def undefined_references(doc: Path, root: Path = REPO) -> list[str]:
    """`[text][label]` whose label the document never defines: shown as plain brackets."""
    lines = prose_lines(doc.read_text())
    defined = {m.group(1).strip().lower() for _, line in lines for m in [REFERENCE_DEF.match(line)] if m}
    missing = []
    for number, line in lines:
        for m in REFERENCE_USE.finditer(line):
            label = (m.group(2) or m.group(1)).strip().lower()
            if label not in defined:
                missing.append(f"{doc.relative_to(root)}:{number}: [{m.group(2) or m.group(1)}]: no definition")
    return missing


def broken_links(doc: Path, roots: list[Path], root: Path = REPO) -> list[str]:
    broken = undefined_references(doc, root)
    relative_dir = doc.parent.relative_to(root)
    for number, target in local_links(doc):
        file_part, _, anchor = target.partition("#")
        where = f"{doc.relative_to(root)}:{number}: ({target})"
        if file_part:
            relative = os.path.normpath(relative_dir / file_part)
            found = [r / relative for r in roots if (r / relative).exists()]
            if relative.startswith("..") or not found:
                broken.append(f"{where}: no file {relative}")
                continue
            linked = found[0]
        else:
            linked = doc
        if anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{where}: no heading #{anchor} in {linked.name}")
    return broken


def test_every_path_the_architecture_documents_name_exists():
    docs = documents(PATH_CHECKED_DOCS)
    assert REPO / "docs" / "ARCHITECTURE.md" in docs
    stale = [line for doc in docs for line in stale_paths(doc, trees())]
    assert not stale, "paths named in the docs that do not exist:\n" + "\n".join(stale)


def test_every_local_link_of_the_readme_and_docs_resolves():
    docs = documents(LINK_CHECKED_DOCS)
    assert REPO / "README.md" in docs
    broken = [line for doc in docs for line in broken_links(doc, trees())]
    assert not broken, "links that resolve to nothing:\n" + "\n".join(broken)


def test_the_design_notes_are_each_linked_from_the_architecture():
    linked = {os.path.normpath(REPO / "docs" / t.partition("#")[0])
              for _, t in local_links(REPO / "docs" / "ARCHITECTURE.md")}
    notes = documents(["docs/design/*.md"])
    assert notes, "docs/design/ holds the architecture's topic notes"
    unlinked = [str(n.relative_to(REPO)) for n in notes if str(n) not in linked]
    assert not unlinked, f"design notes no link from docs/ARCHITECTURE.md leads to: {unlinked}"


@pytest.mark.parametrize("line, stale", [
    ("the sampler (`simulator/include/tracecorr/sampler.hpp`)", False),
    ("stale: `simulator/src/agent/no_such_file.cpp`", True),
    ("a bare name is relative to the root: `sampler.hpp`", True),
    ("a folder: `simulator/src/no_such_room/`", True),
    ("a pattern: `probes/<p>/` and `tests/unit/*_test.cpp`", False),
    ("a pattern matching nothing: `probes/<p>/no_such_probe.cpp`", True),
    ("alternatives: `spec/elastic-v1.{md,json}`", False),
    ("an alternative missing: `spec/elastic-v1.{md,yaml}`", True),
    ("not paths: `/proc/PID/root`, `TCTX-21/23`, `\"tracecorr/...\"`, `build/bin/tracecorr`", False),
    ("a link's text: [`sampler.hpp`](../simulator/include/tracecorr/sampler.hpp)", False),
])
def test_the_path_check_fails_on_a_stale_path(tmp_path, line, stale):
    doc = tmp_path / "docs" / "note.md"
    doc.parent.mkdir()
    doc.write_text(f"# Note\n\n{line}\n")
    roots = [REPO]
    found = stale_paths(doc, roots, root=tmp_path)
    assert bool(found) == stale, found


@pytest.mark.parametrize("target, broken", [
    ("ARCHITECTURE.md", False),
    ("ARCHITECTURE.md#no-such-heading", True),
    ("no_such_file.md", True),
    ("#note", False),
    ("#a-heading-with-code-and-punctuation", False),
    ("#missing", True),
    ("https://example.com/x.md#y", False),
])
def test_the_link_check_fails_on_a_broken_link(tmp_path, target, broken):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "ARCHITECTURE.md").write_text("# Architecture\n")
    doc = docs / "note.md"
    doc.write_text(f"# Note\n\n## A heading, with `code` and punctuation!\n\nSee [there]({target}).\n")
    found = broken_links(doc, [tmp_path], root=tmp_path)
    assert bool(found) == broken, found


def test_the_link_check_fails_on_a_reference_never_defined(tmp_path):
    doc = tmp_path / "note.md"
    doc.write_text("# Note\n\nSee [`a.hpp`][a.hpp] and [`b.hpp`][b].\n\n[A.HPP]: note.md\n")
    found = broken_links(doc, [tmp_path], root=tmp_path)
    assert found == ["note.md:3: [b]: no definition"], found


def test_github_slugs():
    assert github_slug("Adding a protocol (a checklist)") == "adding-a-protocol-a-checklist"
    assert github_slug("The `AgentHook` and `SampledProtocol`") == "the-agenthook-and-sampledprotocol"
    assert github_slug("OTLP receiver: what a local attacker can and cannot do") == \
        "otlp-receiver-what-a-local-attacker-can-and-cannot-do"
