"""Checks the core's conventions that the compiler cannot (``make lint``).

The conventions are written in csrc/base/base.h and csrc/include/tpurt.h;
written only there, they drift. Each check reads the C sources of the core
(csrc/, without csrc/tests), or the C++ glue, through a small lexer that blanks comments and
string literals, so code in a comment or a string never matches, and splits
each file into its file-scope statements (declarations and function
definitions; bodies are skipped). A check returns one ``Violation`` per
finding, named by file and line:

- ``must-use``: a function returning ``tpurt_status_t`` declared in a header,
  or static in a .c file, without ``TPURT_MUST_USE`` (a dropped status is a
  lost error);
- ``consume``: a function whose comment says it takes ownership of an
  argument, and whose name does not contain ``_consume``;
- ``duplicate-row``: the same aten name in two rows of the op tables
  (csrc/lower/*.c); table.c's map would keep one and silently drop the other;
- ``op-literal``: a ``"stablehlo.`` or ``"chlo.`` op-name literal outside the
  op list (``OP_LIST_FILES``): rules name ops by their ``ir_op_t``;
- ``guarded-by``: a mutable file-scope variable in csrc/engine/ or csrc/cache/
  without ``TPURT_GUARDED_BY(lock)`` (or ``_Thread_local``, const, atomic, or
  itself a lock): every piece of shared state names what guards it;
- ``op-branch``: a test of an aten op's name in the C++ glue (torch_tpu/csrc:
  ``name == "aten::x"``, ``name.rfind("aten::x", 0)``...) outside its
  registration functions (``GLUE_REGISTRATION``): what an op means is a fact
  of its row in the core (csrc/lower), which the glue asks for, never a branch
  of its own. The bare namespace ``"aten::"`` names no op.

Usage: ``python tools/lint_conventions.py [--root DIR] [--check NAME ...]``;
exit status 1 when something is found. Only the standard library is used.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

# The op list: the one place where StableHLO/CHLO op names are spelled
# (the X-macro list the ir_op_t enum and the printer are made from).
OP_LIST_FILES = frozenset({"csrc/ir/ir_ops.def", "csrc/ir/ir_ops.h"})
# Directories whose file-scope state is shared between threads.
GUARDED_DIRS = ("csrc/engine", "csrc/cache")
# The glue (C++), and its functions that decide which ops it registers: the
# only places an aten op's name may be tested there.
GLUE_DIR = "torch_tpu/csrc"
GLUE_REGISTRATION = frozenset({"register_core_ops", "keeps_pytorch_kernel"})
# Comment phrases that say a function takes ownership of an argument.
OWNERSHIP_PHRASES = re.compile(
    r"\b(?:takes|take|taking) (?:over )?ownership\b|\bconsumes\b|\bsteals\b", re.IGNORECASE
)
# A subject before the phrase that makes someone else the new owner
# ("the caller takes ownership of the result").
OTHER_OWNER = re.compile(r"\b(?:caller|callers|who|which the caller)\s*$", re.IGNORECASE)
# Types that are synchronisation objects themselves, or set up once by one.
SYNC_TYPES = re.compile(
    r"\b(?:pthread_mutex_t|pthread_cond_t|pthread_rwlock_t|pthread_once_t|pthread_spinlock_t)\b"
)


@dataclass(frozen=True)
class Violation:
    path: str
    line: int
    check: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.check}: {self.message}"


@dataclass
class Source:
    """One C file: its text, the text with comments/strings blanked, and them."""

    rel: str
    text: str
    code: str  # same length as text; comments, strings, preprocessor lines blanked
    comments: list[tuple[int, int]]  # [start, end) offsets
    strings: list[tuple[int, str]]  # offset, literal body (outside comments)

    def line_of(self, offset: int) -> int:
        return self.text.count("\n", 0, offset) + 1


@dataclass
class Statement:
    """A file-scope declaration (ending in ';') or a function definition's head."""

    start: int  # offset of the first non-blank character
    end: int
    code: str  # blanked text of the statement (for a definition: up to its '{')
    is_definition: bool


def lex(rel: str, text: str) -> Source:
    code = list(text)
    comments: list[tuple[int, int]] = []
    strings: list[tuple[int, str]] = []
    i, n = 0, len(text)
    line_start = True  # only blanks since the last newline
    directive = False  # inside a preprocessor line: not C to parse
    while i < n:
        c = text[i]
        if c == "/" and text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            comments.append((i, j))
            for k in range(i, j):
                if code[k] != "\n":
                    code[k] = " "
            i = j
            continue
        if c == "/" and text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            comments.append((i, j))
            for k in range(i, j):
                code[k] = " "
            i = j
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j, n - 1)
            if c == '"':
                strings.append((i, text[i + 1 : j]))
            # the quotes stay (a blanked "C" still reads as a string)
            for k in range(i + 1, j):
                code[k] = " "
            if directive:
                code[i] = code[j] = " "
            i = j + 1
            line_start = False
            continue
        if c == "\n":
            line_start = True
            if not (directive and i > 0 and text[i - 1] == "\\"):
                directive = False
        elif c == "#" and line_start:
            directive = True
        elif not c.isspace():
            line_start = False
        if directive and c != "\n":
            code[i] = " "
        i += 1
    return Source(rel, text, "".join(code), comments, strings)


def statements(src: Source) -> Iterator[Statement]:
    """The file-scope statements of |src|, in order."""
    code = src.code
    n = len(code)
    start = 0
    depth = 0
    i = 0
    while i < n:
        c = code[i]
        if c == "{":
            head = code[start:i]
            if depth == 0 and re.search(r"\bextern\s*\"\s*\"\s*$", head):
                start = i + 1  # extern "C" { ... }: its contents are file scope
            elif depth == 0 and re.search(r"\)\s*$", head) and "=" not in head:
                yield _statement(code, start, i, True)
                i = _matching_brace(code, i)
                start = i + 1
            else:
                depth += 1
        elif c == "}":
            if depth == 0:
                start = i + 1  # the end of an extern "C" block
            else:
                depth -= 1
        elif c == ";" and depth == 0:
            yield _statement(code, start, i + 1, False)
            start = i + 1
        i += 1


def _statement(code: str, start: int, end: int, is_definition: bool) -> Statement:
    text = code[start:end]
    skip = len(text) - len(text.lstrip())
    return Statement(start + skip, end, text.strip(), is_definition)


def _matching_brace(code: str, i: int) -> int:
    depth = 0
    for j in range(i, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(code) - 1


ANNOTATIONS = re.compile(r"\b(?:TPURT_GUARDED_BY|__attribute__)\s*\((?:[^()]|\([^()]*\))*\)")
FUNCTION = re.compile(r"(?<![\w*(])\s*\b([A-Za-z_]\w*)\s*\(")


def function_name(stmt: Statement) -> str | None:
    """The name of the function |stmt| declares or defines, or None."""
    code = ANNOTATIONS.sub(" ", stmt.code)
    if re.match(r"(?:typedef|_Static_assert|static_assert)\b", code):
        return None
    head = code.split("=", 1)[0]
    if re.search(r"\(\s*\*", head):
        return None  # a pointer to a function is a variable
    m = re.search(r"\b([A-Za-z_]\w*)\s*\(", head)
    if not m or m.group(1) in ("TPURT_MUST_USE", "sizeof"):
        return None
    prefix = head[: m.start()]
    if not re.search(r"[\w*]\s*$", prefix):
        return None  # no return type: a macro call at file scope
    return m.group(1)


def returns_status(stmt: Statement, name: str) -> bool:
    head = ANNOTATIONS.sub(" ", stmt.code)
    m = re.search(r"\b" + re.escape(name) + r"\s*\(", head)
    return bool(m) and re.search(r"\btpurt_status_t\s*$", head[: m.start()]) is not None


def core_files(root: Path) -> Iterator[Path]:
    csrc = root / "csrc"
    for path in sorted(csrc.rglob("*")):
        if path.suffix in (".c", ".h", ".def") and path.is_file():
            rel = path.relative_to(csrc).parts
            if rel[0] != "tests":
                yield path


def glue_files(root: Path) -> Iterator[Path]:
    glue = root / GLUE_DIR
    if glue.is_dir():
        yield from sorted(p for p in glue.iterdir() if p.suffix in (".cpp", ".h") and p.is_file())


def load(root: Path) -> list[Source]:
    paths = [*core_files(root), *glue_files(root)]
    return [lex(p.relative_to(root).as_posix(), p.read_text(errors="replace")) for p in paths]


def check_must_use(sources: list[Source]) -> list[Violation]:
    out = []
    for src in sources:
        header = src.rel.endswith(".h")
        for stmt in statements(src):
            name = function_name(stmt)
            if not name or not returns_status(stmt, name):
                continue
            if not header and not re.match(r"(?:\w+\s+)*static\b", ANNOTATIONS.sub(" ", stmt.code)):
                continue  # an external definition: its header declaration is checked
            if not re.search(r"\bTPURT_MUST_USE\b", stmt.code):
                out.append(
                    Violation(
                        src.rel,
                        src.line_of(stmt.start),
                        "must-use",
                        f"{name} returns a tpurt_status_t but is not TPURT_MUST_USE",
                    )
                )
    return out


def doc_comment(src: Source, stmt: Statement, before: int) -> str:
    """The comment just above |stmt| and a comment trailing its last line."""
    parts = []
    # the nearest comment above, which starts its own line
    for a, b in reversed(src.comments):
        if b > stmt.start:
            continue
        if b <= before or src.text[b : stmt.start].strip():
            break
        line_begin = src.text.rfind("\n", 0, a) + 1
        if src.text[line_begin:a].strip():
            break  # trailing another statement
        parts.append(src.text[a:b])
        if not src.text[a:b].startswith("//"):
            break
    # a comment after the statement on its last line
    line_end = src.text.find("\n", stmt.end)
    line_end = len(src.text) if line_end < 0 else line_end
    for a, b in src.comments:
        if stmt.end <= a < line_end and not src.text[stmt.end : a].strip(" \t;{}"):
            parts.append(src.text[a:b])
    words = " ".join(parts)
    return re.sub(r"[/*\s]+", " ", words)


def check_consume(sources: list[Source]) -> list[Violation]:
    out = []
    for src in sources:
        previous_end = 0
        for stmt in statements(src):
            name = function_name(stmt)
            if name and "_consume" not in name:
                comment = doc_comment(src, stmt, previous_end)
                for m in OWNERSHIP_PHRASES.finditer(comment):
                    if OTHER_OWNER.search(comment[: m.start()]):
                        continue
                    out.append(
                        Violation(
                            src.rel,
                            src.line_of(stmt.start),
                            "consume",
                            f"{name}: its comment says it {m.group(0).lower()}, but its name has no _consume",
                        )
                    )
                    break
            previous_end = stmt.end
    return out


ROW_TABLE = re.compile(r"\blower_rule_t\s+(\w+)\s*\[\s*\]\s*=\s*\{")


def table_rows(sources: list[Source]) -> list[tuple[Source, int, str, str]]:
    """(source, offset, table, aten name) for every row of the op tables."""
    rows = []
    for src in sources:
        if not (src.rel.startswith("csrc/lower/") and src.rel.endswith(".c")):
            continue
        for m in ROW_TABLE.finditer(src.code):
            body_end = _matching_brace(src.code, m.end() - 1)
            for off, literal in src.strings:
                if m.end() <= off < body_end and literal.startswith("aten::"):
                    rows.append((src, off, m.group(1), literal))
    return rows


def check_duplicate_rows(sources: list[Source]) -> list[Violation]:
    out = []
    first: dict[str, tuple[Source, int, str]] = {}
    for src, off, table, name in table_rows(sources):
        if name in first:
            fsrc, foff, ftable = first[name]
            out.append(
                Violation(
                    src.rel,
                    src.line_of(off),
                    "duplicate-row",
                    f'"{name}" in {table} is already a row of {ftable} ({fsrc.rel}:{fsrc.line_of(foff)})',
                )
            )
        else:
            first[name] = (src, off, table)
    return out


def check_op_literals(sources: list[Source]) -> list[Violation]:
    out = []
    for src in sources:
        if src.rel in OP_LIST_FILES:
            continue
        for off, literal in src.strings:
            # the bare dialect prefix (pjrt/execute.c counts ops by it) names no op
            if literal.startswith(("stablehlo.", "chlo.")) and literal not in ("stablehlo.", "chlo."):
                out.append(
                    Violation(
                        src.rel,
                        src.line_of(off),
                        "op-literal",
                        f'"{literal}": name the op by its ir_op_t (op list: {sorted(OP_LIST_FILES)[0]})',
                    )
                )
    return out


def _is_const_object(decl: str) -> bool:
    """True if the variable (not only what it points to) is const."""
    declarator = decl.split("=", 1)[0]
    if "*" in declarator:
        return re.search(r"\*\s*const\b[^*]*$", declarator) is not None
    return re.search(r"\bconst\b", declarator) is not None


def check_guarded(sources: list[Source]) -> list[Violation]:
    out = []
    for src in sources:
        if not src.rel.startswith(tuple(d + "/" for d in GUARDED_DIRS)) or not src.rel.endswith(".c"):
            continue
        for stmt in statements(src):
            if stmt.is_definition or function_name(stmt):
                continue
            code = stmt.code
            bare = ANNOTATIONS.sub(" ", code)
            if re.match(r"(?:typedef|extern|_Static_assert|static_assert)\b", bare):
                continue
            # a struct/enum/union type declaration without a variable
            if re.fullmatch(r"(?:struct|enum|union)\b\s*\w*\s*(?:\{.*\})?\s*;", bare, re.DOTALL):
                continue
            if re.search(r"\bTPURT_GUARDED_BY\s*\(", code):
                continue
            if re.search(r"\b(?:_Thread_local|thread_local|__thread|_Atomic)\b|\batomic_\w+\b", bare):
                continue
            if SYNC_TYPES.search(bare) or _is_const_object(re.sub(r"\{.*\}", "", bare, flags=re.DOTALL)):
                continue
            names = re.findall(
                r"(\w+)\s*(?:\[[^\]]*\]\s*)*(?:=|,|;)", re.sub(r"\{.*\}", "{}", bare, flags=re.DOTALL)
            )
            name = names[0] if names else "?"
            out.append(
                Violation(
                    src.rel,
                    src.line_of(stmt.start),
                    "guarded-by",
                    f"file-scope {name} is mutable shared state: annotate it TPURT_GUARDED_BY(lock) "
                    "(or make it const, atomic or _Thread_local)",
                )
            )
    return out


# A comparison with the string literal at the end of |before| / the start of |after|.
COMPARED_BEFORE = re.compile(
    r"(?:[=!]=\s*|\b(?:r?find|compare|starts_with|ends_with|starts|contains|strn?cmp)\s*\([^;{}]*)$"
)
COMPARED_AFTER = re.compile(r"^\s*[=!]=")


def enclosing_function(src: Source, offset: int) -> str:
    """The name of the glue function around |offset|: clang-format indents
    bodies, so its head is the nearest line above starting at column 0."""
    start = src.code.rfind("\n", 0, offset) + 1
    while True:
        line = src.code[start : src.code.find("\n", start)]
        if line[:1] not in ("", " ", "\t", "}", "#") and not line.startswith("namespace"):
            m = re.match(r"(?:struct|class)\s+(\w+)", line) or re.search(r"\b(\w+)\s*\(", line)
            return m.group(1) if m else ""
        if start == 0:
            return ""
        start = src.code.rfind("\n", 0, start - 1) + 1


def check_op_branches(sources: list[Source]) -> list[Violation]:
    out = []
    for src in sources:
        if not src.rel.startswith(GLUE_DIR + "/"):
            continue
        for off, literal in src.strings:
            if not literal.startswith("aten::") or literal == "aten::":
                continue
            end = off + len(literal) + 2
            line_start = src.code.rfind("\n", 0, off) + 1
            if not (
                COMPARED_BEFORE.search(src.code[line_start:off])
                or COMPARED_AFTER.match(src.code[end : end + 8])
            ):
                continue
            function = enclosing_function(src, off)
            if function in GLUE_REGISTRATION:
                continue
            out.append(
                Violation(
                    src.rel,
                    src.line_of(off),
                    "op-branch",
                    f'{function or "file scope"} tests the op name "{literal}": make it a fact of the op\'s '
                    "row in csrc/lower and ask the core for it",
                )
            )
    return out


CHECKS: dict[str, Callable[[list[Source]], list[Violation]]] = {
    "must-use": check_must_use,
    "consume": check_consume,
    "duplicate-row": check_duplicate_rows,
    "op-literal": check_op_literals,
    "guarded-by": check_guarded,
    "op-branch": check_op_branches,
}
# Checks of the glue; the others read the core alone.
GLUE_CHECKS = frozenset({"op-branch"})


def run(root: Path, names: list[str] | None = None) -> list[Violation]:
    sources = load(root)
    core = [s for s in sources if not s.rel.startswith(GLUE_DIR + "/")]
    found: list[Violation] = []
    for name in names or list(CHECKS):
        found.extend(CHECKS[name](sources if name in GLUE_CHECKS else core))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--check", action="append", choices=sorted(CHECKS), help="run only this check")
    args = parser.parse_args(argv)
    found = run(args.root, args.check)
    for v in found:
        print(v)
    if found:
        by_check: dict[str, int] = {}
        for v in found:
            by_check[v.check] = by_check.get(v.check, 0) + 1
        summary = ", ".join(f"{k}: {n}" for k, n in sorted(by_check.items()))
        print(f"lint_conventions: {len(found)} violation(s) ({summary})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
