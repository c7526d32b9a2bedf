"""Every citation of the reference notes resolves inside the repository.

Docstrings and comments cite the notes in docs/ ("docs/official_code.md 1.6", "hazard H5",
"docs/ecosystem.md B4", "docs/feasibility.md, Slurm pitfall 3", "submitit #1625"). A clone has nothing else, so
each cited file must exist in docs/, each cited label must be a heading (or bold lead) of that file, each hazard
id must be defined in docs/official_code.md, and each upstream tracker number must be recorded in
docs/ecosystem.md. A citation may carry any path prefix: the file is looked up in docs/ by its name.

The parser is tested on its own first, so that a checker which silently finds nothing cannot pass.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
THIS_FILE = Path(__file__).resolve()

# What is scanned: code, tests, registries, Slurm material, the notes themselves, the recorded paper numbers.
SCANNED = ("exoformer", "benchmarks", "tests", "experiments", "slurm", "docs", "results/paper", "figures",
           "README.md", "reproduce.py", "pyproject.toml")
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".sh", ".toml", ".cfg", ".ini", ".txt"}
SKIPPED_DIRS = {"__pycache__", ".pytest_cache", ".venv", "node_modules"}
MAX_BYTES = 1_000_000

NOTE_NAMES = ("official_code", "paper", "feasibility", "ecosystem")
HAZARD_FILE = "official_code.md"
TRACKER_FILE = "ecosystem.md"

# A label: "Slurm pitfall 3", an item id (A3, B4, C7, H5), or a section number (4, 4.1, 2b). The lookahead
# rejects a number glued to more word characters ("10B", "57,601" is split at the comma and stops the list).
_LABEL = r"(?:(?:[Ss]lurm|lm-eval) pitfall \d+|[A-Z]\d{1,2}|\d+(?:\.\d+)*[a-z]?)(?![\w.]*\w)"
_RANGE = rf"(?:§\s*)?{_LABEL}(?:\s*[-–]\s*{_LABEL})?"
_SECTION_WORD = r"(?:(?:sections?|sec\.|§)\s*)?"
_LIST = rf"{_RANGE}(?:(?:\s*,\s*|\s+and\s+){_SECTION_WORD}{_RANGE})*"
CITATION = re.compile(
    rf"(?<![\w/.-])(?P<path>/?(?:[\w.-]+/)*(?P<name>{'|'.join(NOTE_NAMES)})\.md)\b"
    rf"(?:[`'\"]?,?\s*{_SECTION_WORD}(?P<labels>{_LIST}))?"
)
# Ours only: an upstream file is cited as "owner/repo:docs/x.md" or "owner/repo@commit:docs/x.md".
DOCS_PATH = re.compile(r"(?<![\w/.:-])docs/(?P<name>[\w.-]+\.md)\b")

HAZARD = re.compile(r"\bH(\d{1,2})\b")
HAZARD_EXPLICIT = re.compile(r"(?i:\b(?:hazards?|traps?|note))\s+H(\d{1,2})\b")
# H0, H1, H2 also name hidden states (the anchor-depth ablation): such lines count only explicit hazard words.
HIDDEN_STATE_LINE = re.compile(r"\bH0\b|(?i:from[\s_-]+h\d)|(?i:anchor[\s-]depth)")
BARE_ITEM = re.compile(r"\b([AB]\d)\b")
ITEM_CONTEXT = re.compile(r"(?i)ecosystem\.md|submitit|lm[-_]eval")
TRACKER = re.compile(r"(?<![\w&#])#(\d{3,5})\b")
TRACKER_CONTEXT = re.compile(r"(?i)submitit|lm[-_]eval|hydra|ecosystem\.md|\bissue|\bPR\b")

HEADING_LABEL = re.compile(r"^#{1,6}\s+(?:§\s*)?(?P<label>(?:[Ss]lurm|lm-eval) pitfall \d+|[A-Z]\d{0,2}"
                           r"|\d+(?:\.\d+)*[a-z]?)(?=[.:)\s]|$)")
BOLD_LABEL = re.compile(r"^\s*(?:[-*+]\s+|\d+\.\s+)?\*\*(?P<label>(?:[Ss]lurm|lm-eval) pitfall \d+|[A-Z]\d{1,2}"
                        r"|\d+(?:\.\d+)*[a-z]?)[.:]?\*\*")


@dataclass(frozen=True, slots=True)
class Citation:
    where: str  # "path:line"
    doc: str  # file name inside docs/, e.g. "official_code.md"
    label: str | None  # None when only the file is cited


def _normal(label: str) -> str:
    return label.replace("§", "").strip().rstrip(".").lower()


def _expand(first: str, last: str) -> list[str]:
    """'1.1'-'1.6' -> 1.1 ... 1.6 and 'H1'-'H3' -> H1, H2, H3; anything else -> both ends."""
    a, b = _normal(first), _normal(last)
    num_a, num_b = re.fullmatch(r"(.*?)(\d+)", a), re.fullmatch(r"(.*?)(\d+)", b)
    if num_a and num_b and num_a[1] == num_b[1] and int(num_a[2]) <= int(num_b[2]) <= int(num_a[2]) + 50:
        return [f"{num_a[1]}{i}" for i in range(int(num_a[2]), int(num_b[2]) + 1)]
    return [a, b]


def _joined(text: str) -> tuple[str, list[int]]:
    """The text with line breaks and leading comment markers folded to spaces, so that a citation wrapped over
    two lines is read whole; plus the offsets where each source line starts (to report line numbers)."""
    parts, starts, offset = [], [], 0
    for line in text.split("\n"):
        stripped = re.sub(r"^\s*(?:#+(?=\s|$))?\s*", "", line)
        starts.append(offset)
        parts.append(stripped)
        offset += len(stripped) + 1
    return " ".join(parts), starts


def find_citations(text: str, where: str) -> list[Citation]:
    """Citations of the four notes (any path prefix), with each label they name, and any other docs/*.md."""
    joined, starts = _joined(text)
    found: list[Citation] = []
    for match in CITATION.finditer(joined):
        at = f"{where}:{bisect.bisect_right(starts, match.start())}"
        doc = f"{match['name']}.md"
        labels = match["labels"]
        if not labels:
            found.append(Citation(at, doc, None))
            continue
        for piece in re.split(r"\s*,\s*|\s+and\s+", labels):
            piece = re.sub(rf"^{_SECTION_WORD}", "", piece.strip())
            span = re.fullmatch(rf"(?:§\s*)?({_LABEL})\s*[-–]\s*(?:§\s*)?({_LABEL})", piece)
            names = _expand(span[1], span[2]) if span else [_normal(piece)]
            found.extend(Citation(at, doc, name) for name in names)
    for match in DOCS_PATH.finditer(joined):
        if Path(match["name"]).stem not in NOTE_NAMES:
            found.append(Citation(f"{where}:{bisect.bisect_right(starts, match.start())}", match["name"], None))
    return found


def find_hazards(text: str, where: str) -> list[tuple[str, str]]:
    """(where, 'h5') for every hazard id cited; hidden-state names (H0/H1/H2 anchors) are not hazards."""
    found = []
    for number, line in enumerate(text.split("\n"), start=1):
        pattern = HAZARD_EXPLICIT if HIDDEN_STATE_LINE.search(line) else HAZARD
        found.extend((f"{where}:{number}", f"h{int(m[1])}") for m in pattern.finditer(line))
    return found


def find_bare_items(text: str, where: str) -> list[tuple[str, str]]:
    """(where, 'b6') for ecosystem item ids cited without the file name, on lines about lm-eval or submitit."""
    found = []
    for number, line in enumerate(text.split("\n"), start=1):
        if ITEM_CONTEXT.search(line):
            found.extend((f"{where}:{number}", m[1].lower()) for m in BARE_ITEM.finditer(line))
    return found


def find_tracker_numbers(text: str, where: str) -> list[tuple[str, str]]:
    """(where, '1625') for upstream issue/PR numbers cited on lines about our dependencies."""
    found = []
    for number, line in enumerate(text.split("\n"), start=1):
        if TRACKER_CONTEXT.search(line):
            found.extend((f"{where}:{number}", m[1]) for m in TRACKER.finditer(line))
    return found


def defined_labels(markdown: str) -> list[str]:
    """Labels a note defines: the leading token of a heading, or a bold lead at the start of a line."""
    labels = []
    for line in markdown.split("\n"):
        match = HEADING_LABEL.match(line) or BOLD_LABEL.match(line)
        if match:
            labels.append(_normal(match["label"]))
    return labels


def scanned_files(root: Path) -> list[Path]:
    files = []
    for name in SCANNED:
        top = root / name
        candidates = [top] if top.is_file() else sorted(top.rglob("*")) if top.is_dir() else []
        for path in candidates:
            if (path.is_file() and path.suffix in TEXT_SUFFIXES and path.resolve() != THIS_FILE
                    and not SKIPPED_DIRS.intersection(path.relative_to(root).parts)
                    and path.stat().st_size <= MAX_BYTES):
                files.append(path)
    return files


@dataclass(slots=True)
class Report:
    problems: list[str]
    citations: int
    hazards: int


def check(root: Path) -> Report:
    """Every problem as one line 'path:line: what is wrong', plus how many citations were checked."""
    docs = root / "docs"
    labels = {p.name: set(defined_labels(p.read_text(encoding="utf-8"))) for p in docs.glob("*.md")}
    tracker_text = (docs / TRACKER_FILE).read_text(encoding="utf-8") if (docs / TRACKER_FILE).is_file() else ""
    problems: list[str] = []
    citations = hazards = 0
    for path in scanned_files(root):
        text = path.read_text(encoding="utf-8", errors="replace")
        where = path.relative_to(root).as_posix()
        for cite in find_citations(text, where):
            citations += 1
            if cite.doc not in labels:
                problems.append(f"{cite.where}: cites {cite.doc}, but docs/{cite.doc} does not exist")
            elif cite.label is not None and cite.label not in labels[cite.doc]:
                problems.append(f"{cite.where}: cites {cite.doc} '{cite.label}', which docs/{cite.doc} does "
                                f"not define as a heading or bold lead")
        for at, hazard in find_hazards(text, where):
            hazards += 1
            if hazard not in labels.get(HAZARD_FILE, set()):
                problems.append(f"{at}: hazard {hazard.upper()} is not defined in docs/{HAZARD_FILE}")
        for at, item in find_bare_items(text, where):
            if item not in labels.get(TRACKER_FILE, set()):
                problems.append(f"{at}: item {item.upper()} is not defined in docs/{TRACKER_FILE}")
        for at, number in find_tracker_numbers(text, where):
            if not re.search(rf"#{number}\b", tracker_text):
                problems.append(f"{at}: upstream #{number} is not recorded in docs/{TRACKER_FILE}")
    return Report(problems, citations, hazards)


# --- the parser and the checker on made-up text ---------------------------------------------------------------


def _labels(text: str) -> set[tuple[str, str | None]]:
    return {(c.doc, c.label) for c in find_citations(text, "x.py")}


def test_citation_forms_are_read_with_every_label():
    text = (
        '"""Mixing (paper Eq. 10; official_code.md 1.2-1.4). Loaded per official_code.md 1.7, 2, 3:\n'
        "    see docs/paper.md 2.2, 7.4) and paper.md\n"
        "    2.1 (wrapped). # Sources: paper.md section 3 and 6; ecosystem.md B3, #1625 and (ecosystem.md A1: x).\n"
        "# shared/reference/feasibility.md section 2b, `feasibility.md`, Slurm pitfall 3, feasibility.md.\n"
        "/work/shared/reference/paper.md sections 4.1-4.2; paper.md 4.1, 10B tokens; official_code.md section 4).\n"
    )
    assert _labels(text) == {
        ("official_code.md", "1.2"), ("official_code.md", "1.3"), ("official_code.md", "1.4"),
        ("official_code.md", "1.7"), ("official_code.md", "2"), ("official_code.md", "3"),
        ("official_code.md", "4"),
        ("paper.md", "2.2"), ("paper.md", "7.4"), ("paper.md", "2.1"), ("paper.md", "3"), ("paper.md", "6"),
        ("paper.md", "4.1"), ("paper.md", "4.2"),
        ("ecosystem.md", "b3"), ("ecosystem.md", "a1"),
        ("feasibility.md", "2b"), ("feasibility.md", "slurm pitfall 3"), ("feasibility.md", None),
    }


def test_citation_line_numbers_point_at_the_file_name():
    cites = find_citations("first line\n# see paper.md\n# 4.1 here\nofficial_code.md H5", "f.yaml")
    assert [(c.where, c.label) for c in cites] == [("f.yaml:2", "4.1"), ("f.yaml:4", "h5")]


def test_hazard_ids_are_told_from_hidden_state_names():
    text = (
        "bf16 with no master copy (hazard H4); z-loss twice, H3)\n"
        "# Ablations: anchor depth H1/H2 (H0 rows are Table 1 specs)\n"
        "description: E-ExoFormer with anchors projected from H1 (output of the first block)\n"
        "label: \"Static ExoFormer, H2\", specs: [static-e-exoformer-from-h2-s42]\n"
        "exogenous anchor from H0; the trap H6 still applies\n"
        "ambiguous, H7). A100 and H100 are GPUs.\n"
    )
    assert find_hazards(text, "v.yaml") == [("v.yaml:1", "h4"), ("v.yaml:1", "h3"), ("v.yaml:5", "h6"),
                                            ("v.yaml:6", "h7")]


def test_bare_items_and_tracker_numbers_need_a_dependency_on_the_line():
    text = "submitit's default must never bite: B6 (#1685)\nrow B6 of a table, colour #333\n"
    assert find_bare_items(text, "b.py") == [("b.py:1", "b6")]
    assert find_tracker_numbers(text, "b.py") == [("b.py:1", "1685")]


def test_labels_come_from_headings_and_bold_leads():
    markdown = (
        "# Title\n## 0. Sources\n### 1.6 model4.py\n### 2b. Custom tasks\n## A. lm-eval\n### B4. Requeue\n"
        "### H11. Statistics\n- **Slurm pitfall 3.** sacct\n1. **lm-eval pitfall 2.** paths\n## Summary\n"
        "- **Standard error:** closed form\ntext 4.1 in a sentence\n"
    )
    assert defined_labels(markdown) == ["0", "1.6", "2b", "a", "b4", "h11", "slurm pitfall 3",
                                        "lm-eval pitfall 2"]


def test_checker_reports_missing_files_labels_hazards_and_tracker_numbers(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "official_code.md").write_text("## 1. Architecture\n### 1.1 Blocks\n### H1. Vocab\n")
    (tmp_path / "docs" / "ecosystem.md").write_text("### B3. Jobs\nre-attach (#1625)\n")
    (tmp_path / "exoformer").mkdir()
    (tmp_path / "exoformer" / "mod.py").write_text(
        '"""Blocks (official_code.md 1.1); shards (hazard H1); manifest (ecosystem.md B3, #1625).\n'
        "Mixing: official_code.md 1.2. Metric: paper.md 7.4. Hazard H9 (submitit B6, #1704). docs/design.md\n"
        '"""\n'
    )
    report = check(tmp_path)
    assert report.citations == 5 and report.hazards == 3  # H1 of the note's own heading counts too
    assert sorted(report.problems) == sorted([
        "exoformer/mod.py:2: cites official_code.md '1.2', which docs/official_code.md does not define as a "
        "heading or bold lead",
        "exoformer/mod.py:2: cites paper.md, but docs/paper.md does not exist",
        "exoformer/mod.py:2: hazard H9 is not defined in docs/official_code.md",
        "exoformer/mod.py:2: item B6 is not defined in docs/ecosystem.md",
        "exoformer/mod.py:2: upstream #1704 is not recorded in docs/ecosystem.md",
        "exoformer/mod.py:2: cites design.md, but docs/design.md does not exist",
    ])


# --- the repository itself --------------------------------------------------------------------------------------


def test_every_citation_in_the_repository_resolves_inside_docs():
    report = check(ROOT)
    assert report.citations > 0 and report.hazards > 0, "the scan found no citation: is SCANNED still right?"
    assert not report.problems, "unresolved citations:\n" + "\n".join(report.problems)


def test_each_note_defines_its_labels_once():
    for path in sorted((ROOT / "docs").glob("*.md")):
        labels = defined_labels(path.read_text(encoding="utf-8"))
        repeated = sorted({label for label in labels if labels.count(label) > 1})
        assert not repeated, f"docs/{path.name} defines these labels more than once: {repeated}"


def test_hazards_h1_to_h12_are_defined_in_official_code():
    labels = set(defined_labels((ROOT / "docs" / HAZARD_FILE).read_text(encoding="utf-8")))
    assert {f"h{i}" for i in range(1, 13)} <= labels
