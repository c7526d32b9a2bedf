"""Prose metrics of a Markdown file: lines, sentences, mean and longest sentence length in words.

Only prose counts. Fenced and indented code blocks, tables, headings and HTML comments are skipped. An inline
code span counts as one word, and a link counts as its text. Each paragraph and each list item ends a sentence,
as does a full stop, question mark or exclamation mark followed by a space. tests/test_readme_prose.py holds
README.md and the pages of docs/ to limits read from these metrics.

    .venv/bin/python tools/prose_stats.py README.md docs/cluster.md [--longest 5]
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

FENCE = re.compile(r"^\s*(```|~~~)")
LIST_ITEM = re.compile(r"^\s*([-*+]|\d+[.)])\s+")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
COMMENT = re.compile(r"<!--.*?-->", re.S)
# Abbreviations whose full stop ends no sentence.
ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "cf.", "al.", "approx.", "no.", "fig.", "sec.")
SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]*_]*\s+")
WORD = re.compile(r"\w")


@dataclass
class ProseStats:
    lines: int
    sentences: list[str] = field(default_factory=list)

    @property
    def lengths(self) -> list[int]:
        return [word_count(s) for s in self.sentences]

    @property
    def mean(self) -> float:
        return sum(self.lengths) / len(self.lengths) if self.sentences else 0.0

    @property
    def longest(self) -> int:
        return max(self.lengths, default=0)

    def summary(self, name: str) -> str:
        return (f"{name}: {self.lines} lines, {len(self.sentences)} sentences, mean {self.mean:.1f} words, "
                f"longest {self.longest} words")


def word_count(sentence: str) -> int:
    return sum(1 for token in sentence.split() if WORD.search(token))


def paragraphs(text: str) -> list[str]:
    """The prose paragraphs of a Markdown text, one string each, with code spans and links reduced."""
    text = COMMENT.sub("", text)
    out: list[str] = []
    current: list[str] = []
    fenced = False
    previous_blank = True
    in_list = False

    def flush():
        if current:
            out.append(" ".join(current))
            current.clear()

    for line in text.splitlines():
        stripped = line.strip()
        if FENCE.match(line):
            flush()
            fenced = not fenced
            previous_blank = in_list = False
            continue
        if fenced:
            continue
        if not stripped:
            flush()
            previous_blank = True
            continue
        indented_code = line.startswith(("    ", "\t")) and previous_blank and not in_list
        if indented_code or stripped.startswith(("#", "|")):
            flush()
            previous_blank = in_list = False
            continue
        if LIST_ITEM.match(line):
            flush()
            in_list = True
            stripped = LIST_ITEM.sub("", line, count=1).strip()
        elif previous_blank:
            in_list = line.startswith(" ") and in_list
        current.append(stripped)
        previous_blank = False
    flush()
    return [reduce_inline(p) for p in out]


def reduce_inline(paragraph: str) -> str:
    """A code span is one word (`CODE`) and a link is its text."""
    paragraph = CODE_SPAN.sub("CODE", paragraph)
    return LINK.sub(r"\1", paragraph)


def sentences(paragraph: str) -> list[str]:
    protected = paragraph
    for abbreviation in ABBREVIATIONS:
        protected = re.sub(re.escape(abbreviation), abbreviation.replace(".", "\0"), protected, flags=re.I)
    parts = [part.replace("\0", ".").strip() for part in SENTENCE_END.split(protected)]
    return [part for part in parts if word_count(part)]


def prose_stats(text: str) -> ProseStats:
    return ProseStats(lines=len(text.splitlines()),
                      sentences=[s for p in paragraphs(text) for s in sentences(p)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path, help="Markdown files")
    parser.add_argument("--longest", type=int, default=0, metavar="N", help="also print the N longest sentences")
    args = parser.parse_args(argv)
    for path in args.files:
        stats = prose_stats(path.read_text(encoding="utf-8"))
        print(stats.summary(str(path)))
        ranked = sorted(stats.sentences, key=word_count, reverse=True)[:args.longest]
        for sentence in ranked:
            print(f"  {word_count(sentence):4d}  {sentence}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
