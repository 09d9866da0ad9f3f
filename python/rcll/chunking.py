"""Splitting a document into chunks for keyless (chunk-mode) retain.

Chunks break at paragraph, then sentence, then word boundaries and stay under max_chars
(about 250 tokens at 1,000 characters: well inside bge-small's 512-token window, so no chunk
is silently truncated by the embedder).
"""

from __future__ import annotations

import re

DEFAULT_MAX_CHARS = 1000
_PARAGRAPH = re.compile(r"\n\s*\n")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=\S)")


def _pack(pieces: list[str], max_chars: int, sep: str) -> list[str]:
    out: list[str] = []
    current = ""
    for piece in pieces:
        if not piece:
            continue
        candidate = f"{current}{sep}{piece}" if current else piece
        if len(candidate) <= max_chars:
            current = candidate
        else:
            if current:
                out.append(current)
            current = piece
    if current:
        out.append(current)
    return out


def _split_long(text: str, max_chars: int) -> list[str]:
    if len(text) <= max_chars:
        return [text]
    sentences = _SENTENCE.split(text)
    if len(sentences) > 1:
        return [c for s in _pack(sentences, max_chars, " ") for c in _split_long(s, max_chars)]
    words = text.split()
    if len(words) > 1:
        return _pack(words, max_chars, " ") if max(map(len, words)) <= max_chars else [
            text[i:i + max_chars] for i in range(0, len(text), max_chars)]
    return [text[i:i + max_chars] for i in range(0, len(text), max_chars)]


def chunk_text(text: str, max_chars: int = DEFAULT_MAX_CHARS) -> list[str]:
    """Chunks of text, each non-empty and at most max_chars long, in document order."""
    paragraphs = [p.strip() for p in _PARAGRAPH.split(text) if p.strip()]
    pieces = [piece for p in paragraphs for piece in _split_long(p, max_chars)]
    return _pack(pieces, max_chars, "\n\n")
