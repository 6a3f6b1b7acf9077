"""No function in the engine, the packages' suites or the BPF programs is over
100 lines: a function is read at once, or split into named steps.

A brace-matching scan of the C and C++ sources under simulator/, probes/ and
bpf/ (comments, strings, character literals and preprocessor lines blanked
first). A function is a brace block opened at namespace or class scope whose
head has a parameter list; it runs from the first line of its signature to its
closing brace, lambdas and local classes inside counted toward it. A lambda
given a name at namespace scope counts as a function of its own.

KNOWN_LONG lists the functions allowed over the limit for now (none since the
host agent moved into the engine in named steps); an entry no longer over the
limit fails, so the list only shrinks.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FOLDERS = ("simulator", "probes", "bpf")
SUFFIXES = {".c", ".h", ".cc", ".cpp", ".hpp"}
LIMIT = 100

# "<file name>:<qualified function name>": over LIMIT today, split later.
KNOWN_LONG: set[str] = set()


@dataclass(frozen=True)
class Function:
    path: Path
    name: str
    first: int  # 1-based line of the signature's start
    last: int  # 1-based line of the closing brace

    @property
    def lines(self) -> int:
        return self.last - self.first + 1

    @property
    def key(self) -> str:
        return f"{self.path.name}:{self.name}"


def blank_non_code(text: str) -> str:
    """The source with comments, string and character literals and
    preprocessor lines replaced by spaces (newlines kept, so lines still
    count)."""
    out = list(text)
    i, n = 0, len(text)

    def blank(a: int, b: int) -> None:
        for k in range(a, min(b, n)):
            if out[k] != "\n":
                out[k] = " "

    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c == "#":
            # A preprocessor line, with its continuations.
            j = i
            while j < n and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            blank(i, j)
            i = j
            continue
        if c == "\n":
            at_line_start = True
            i += 1
            continue
        if not c.isspace():
            at_line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            blank(i, j)
            i = j
        elif c == "R" and text.startswith('"', i + 1) and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i + m.end())
            j = n if end < 0 else end + len(m.group(1)) + 2
            blank(i, j)
            i = j
        elif c == '"' or (c == "'" and not digit_separator(text, i)):
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            blank(i, j + 1)
            i = j + 1
        else:
            i += 1
    return "".join(out)


def digit_separator(text: str, i: int) -> bool:
    """Whether the quote at i separates digits (1'000), not opens a literal."""
    j = i
    while j > 0 and (text[j - 1].isalnum() or text[j - 1] in "_'."):
        j -= 1
    return j < i and text[j].isdigit()


SCOPE_HEAD = re.compile(r"^(?:template\s*<.*?>\s*)?(?:typedef\s+)?(?:inline\s+)?"
                        r"(namespace|extern|class|struct|union|enum)\b", re.S)
ATTRIBUTES = re.compile(r"\b(?:alignas|__attribute__|__declspec|SEC)\s*\((?:[^()]|\([^()]*\))*\)|\[\[.*?\]\]", re.S)
ACCESS = re.compile(r"\b(?:public|private|protected)\s*:(?!:)")


def top_level(head: str) -> str:
    """The head with everything inside parentheses removed."""
    depth, out = 0, []
    for c in head:
        if c == "(":
            depth += 1
            out.append("(" if depth == 1 else "")
        elif c == ")":
            depth -= 1
            out.append(")" if depth == 0 else "")
        elif depth == 0:
            out.append(c)
    return "".join(out)


def is_function_head(head: str) -> bool:
    h = ATTRIBUTES.sub(" ", head).strip()
    if not h or "(" not in h:
        return False
    flat = top_level(h)
    if "=" in re.sub(r"operator\s*\S*=|[=!<>]=", "", flat):
        return re.search(r"=\s*\[[^\]]*\]\s*\(", h) is not None  # a named lambda
    m = SCOPE_HEAD.match(flat)
    if m and m.group(1) in ("namespace", "extern", "enum"):
        return False
    if m:  # a class, or a function returning `struct x *`
        return re.match(r"^(?:template\s*<.*?>\s*)?\w+\s+\w+\s*[\s*&]+\s*\w+\s*\(", flat, re.S) is not None
    return not re.match(r"^\s*(?:if|for|while|switch|catch|do|else)\b", flat)


def function_name(head: str) -> str:
    h = ATTRIBUTES.sub(" ", head)
    m = re.search(r"=\s*\[", h)
    if m:  # named lambda: the name before '='
        names = re.findall(r"[A-Za-z_]\w*", h[: m.start()])
        return names[-1] if names else "<lambda>"
    before = h[: h.index("(")]
    m = re.search(r"((?:[A-Za-z_]\w*\s*(?:<[^<>()]*>)?\s*::\s*)*~?\s*(?:operator\s*\S+|[A-Za-z_]\w*))\s*$", before)
    return re.sub(r"\s+", "", m.group(1)) if m else before.strip()


def class_name(head: str) -> str:
    """The class a scope head opens ("" for a namespace: names are keyed
    without them, so a move between namespaces keeps a function's key)."""
    flat = ATTRIBUTES.sub(" ", head)
    m = re.search(r"\b(?:class|struct|union)\s+(?:final\s+)?([A-Za-z_]\w*)", flat)
    return m.group(1) if m else ""


def functions(path: Path) -> list[Function]:
    text = blank_non_code(path.read_text(errors="replace"))
    line_at = [0] * (len(text) + 1)
    line = 1
    for k, c in enumerate(text):
        line_at[k] = line
        if c == "\n":
            line += 1
    found: list[Function] = []
    # Each open brace at scope level: ("scope", name) or ("block", "").
    stack: list[tuple[str, str]] = []
    head_start = 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in ";}" or c == "{":
            pass
        else:
            i += 1
            continue
        if c == ";":
            head_start = i + 1
            i += 1
            continue
        if c == "}":
            if not stack:
                raise AssertionError(f"{path}:{line_at[i]}: unbalanced '}}'")
            stack.pop()
            head_start = i + 1
            i += 1
            continue
        head = text[head_start:i]
        head = ACCESS.split(head)[-1]
        in_init_list = re.search(r"\)\s*(?:const\s*)?(?:noexcept\s*)?:(?!:)", top_level(head)) is not None
        before = head.rstrip()
        if in_init_list and before and (before[-1].isalnum() or before[-1] in "_>"):
            # A member's brace initializer in a constructor's list: skip it, the head goes on.
            i = matching_brace(text, i, path, line_at) + 1
            continue
        if is_function_head(head):
            end = matching_brace(text, i, path, line_at)
            offset = len(text[head_start:i]) - len(head)
            first_char = head_start + offset + (len(head) - len(head.lstrip()))
            qualified = "::".join([name for kind, name in stack if kind == "scope" and name] + [function_name(head)])
            found.append(Function(path, qualified, line_at[first_char], line_at[end]))
            head_start = end + 1
            i = end + 1
            continue
        stack.append(("scope", class_name(head)) if SCOPE_HEAD.match(ATTRIBUTES.sub(" ", head).strip()) else ("block", ""))
        head_start = i + 1
        i += 1
    if stack:
        raise AssertionError(f"{path}: {len(stack)} brace(s) never closed")
    return found


def matching_brace(text: str, i: int, path: Path, line_at: list[int]) -> int:
    depth = 0
    for k in range(i, len(text)):
        if text[k] == "{":
            depth += 1
        elif text[k] == "}":
            depth -= 1
            if depth == 0:
                return k
    raise AssertionError(f"{path}:{line_at[i]}: brace never closed")


def sources() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (REPO / folder).rglob("*") if p.suffix in SUFFIXES and p.is_file())


def all_functions() -> list[Function]:
    return [f for p in sources() for f in functions(p)]


def test_scanner_measures_known_shapes(tmp_path: Path) -> None:
    """The scanner counts what it claims: a member function, a constructor
    with a brace-initialized member, a lambda inside (counted toward its
    function), a string and a comment holding braces, a namespace-scope
    initializer (not a function)."""
    src = tmp_path / "shapes.cpp"
    src.write_text(
        '#include <x>\n'                                   # 1
        'namespace a {\n'                                  # 2
        'const int kTable[] = {1, 2};\n'                   # 3
        'class C : public B {\n'                           # 4
        ' public:\n'                                       # 5
        '  C(int x)\n'                                     # 6
        '      : x_{x}, y_(1) {\n'                         # 7
        '    auto f = [&](int) { return "}"; };\n'         # 8
        '  }\n'                                            # 9
        '  int get() const override { return x_; }  // }\n'  # 10
        '};\n'                                             # 11
        'int C::run(int n) {\n'                            # 12
        "  char b = '{'; int big = 1'000;\n"               # 13
        '  /* { */ if (n) {\n'                             # 14
        '    return [] { return 1; }();\n'                 # 15
        '  }\n'                                            # 16
        '  return 0;\n'                                    # 17
        '}\n'                                              # 18
        'struct S *make(void) {\n'                         # 19
        '  return 0;\n'                                    # 20
        '}\n'                                              # 21
        '}  // namespace a\n')                             # 22
    got = {(f.name, f.first, f.last) for f in functions(src)}
    assert got == {("C::C", 6, 9), ("C::get", 10, 10), ("C::run", 12, 18), ("make", 19, 21)}


def test_the_scan_finds_the_sources() -> None:
    """A scan that found nothing would pass everything."""
    found = all_functions()
    assert len(sources()) > 100
    assert len(found) > 1000


def test_no_function_over_the_limit() -> None:
    long = {f.key: f for f in all_functions() if f.lines > LIMIT}
    unexpected = sorted(f"{f.path.relative_to(REPO)}:{f.first} {f.name}: {f.lines} lines"
                        for key, f in long.items() if key not in KNOWN_LONG)
    assert not unexpected, f"over {LIMIT} lines (split into named steps):\n" + "\n".join(unexpected)


def test_known_long_functions_are_not_stale() -> None:
    long = {f.key for f in all_functions() if f.lines > LIMIT}
    stale = sorted(KNOWN_LONG - long)
    assert not stale, "no longer over the limit (or gone): remove from KNOWN_LONG: " + ", ".join(stale)


if __name__ == "__main__":  # a list of the longest, for whoever splits them
    for f in sorted(all_functions(), key=lambda f: -f.lines)[:40]:
        print(f"{f.lines:5d} {f.path.relative_to(REPO)}:{f.first} {f.name}")
