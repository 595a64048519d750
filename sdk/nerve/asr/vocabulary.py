"""Constrained decoding: the recogniser can only say what the robot understands.

``Vocabulary(tokenizer, words=[...])`` accepts any sequence of those words;
``Vocabulary(tokenizer, phrases=[...])`` accepts exactly one of those phrases. Both are a
character trie walked by the tokenizer's pieces: at every decoding step ``mask(state)`` is a
boolean array over the vocabulary (True: the piece keeps the text inside the trie), and the end
token is allowed only where a word (or phrase) is complete. Matching ignores case and the
punctuation Moonshine writes after words (, . ! ?), and numbers may come as digits (the form
Moonshine prefers: "90" for "ninety", when every word of the number is in the vocabulary);
:meth:`spell` then gives the result exactly as the caller spelled it, numbers in words.
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import InputError
from .tokenizer import Tokenizer, numbers_to_digits, numbers_to_words

__all__ = ["Vocabulary"]

_PUNCT = set(",.!?")


class _Trie:
    def __init__(self):
        self.children: List[Dict[str, int]] = [{}]
        self.terminal: List[bool] = [False]

    def add(self, text: str) -> None:
        node = 0
        for ch in text:
            nxt = self.children[node].get(ch)
            if nxt is None:
                nxt = len(self.children)
                self.children[node][ch] = nxt
                self.children.append({})
                self.terminal.append(False)
            node = nxt
        self.terminal[node] = True


def _normal(text: str) -> str:
    return " ".join(text.lower().split())


class Vocabulary:
    ROOT = 0

    def __init__(self, tokenizer: Tokenizer, words: Optional[Sequence[str]] = None,
                 phrases: Optional[Sequence[str]] = None):
        if (words is None) == (phrases is None):
            raise InputError("give either words= or phrases= (not both)")
        items = list(words if words is not None else phrases)
        if not items or not all(isinstance(w, str) and w.strip() for w in items):
            raise InputError("words/phrases must be a non-empty list of non-empty strings")
        self.loop = words is not None          # words: any sequence; phrases: exactly one
        if self.loop and any(len(w.split()) != 1 for w in items):
            bad = next(w for w in items if len(w.split()) != 1)
            raise InputError(f"words= takes single words; {bad!r} has spaces (use phrases=)")
        self.spelling: Dict[str, str] = {_normal(w): " ".join(w.split()) for w in items}
        self._add_digit_spellings()
        self.trie = _Trie()
        for key in self.spelling:
            self.trie.add(key)
        self.tokenizer = tokenizer
        alphabet = {ch for key in self.spelling for ch in key} | {" "} | _PUNCT
        # only pieces made of the vocabulary's characters can ever fit; indexed by their first
        # character, so a state only walks the pieces that can start where it is
        self._candidates: Dict[str, List[Tuple[int, str]]] = {}
        for token in range(3, len(tokenizer)):
            text = tokenizer.piece_text(token).lower()
            if text and set(text) <= alphabet:
                self._candidates.setdefault(text[0], []).append((token, text))
        self._masks: Dict[int, np.ndarray] = {}
        self._next: Dict[Tuple[int, int], int] = {}

    def _add_digit_spellings(self) -> None:
        """Moonshine writes most numbers as digits ("turn left 90 degrees"): accept the digit
        form of every number the vocabulary can say, and spell it back in words."""
        if self.loop:
            vocab = set(self.spelling)
            for n in range(1000):
                spoken = numbers_to_words(str(n))
                if set(spoken.split()) <= vocab:
                    self.spelling.setdefault(str(n), " ".join(self.spelling[w] for w in spoken.split()))
        else:
            for key, phrase in list(self.spelling.items()):
                digits = _normal(numbers_to_digits(key))
                if digits != key:
                    self.spelling.setdefault(digits, phrase)

    # A state is a trie node; -1 is dead, START the root before anything (where the first
    # piece's leading space is allowed). Words mode: a space after a complete word goes back to
    # the root. Punctuation is skipped where a word ends. Never two spaces in a row.
    START = -2

    def _walk(self, node: int, text: str) -> int:
        for ch in text:
            if node == self.START:
                node = self.ROOT
                if ch == " ":
                    continue
            if ch in _PUNCT:
                if not self._word_end(node):
                    return -1
                continue
            if ch == " " and self.loop:
                if not self.trie.terminal[node]:
                    return -1
                node = self.ROOT
                continue
            nxt = self.trie.children[node].get(ch)
            if nxt is None:
                return -1
            node = nxt
        return node

    def _word_end(self, node: int) -> bool:
        return self.trie.terminal[node] or " " in self.trie.children[node]

    def start(self) -> int:
        return self.START

    def mask(self, state: int) -> np.ndarray:
        m = self._masks.get(state)
        if m is None:
            m = np.zeros(len(self.tokenizer), bool)
            for first in self._first_chars(state):
                for token, text in self._candidates.get(first, ()):
                    if self._walk(state, text) >= 0:
                        m[token] = True
            if state >= 0 and self.trie.terminal[state]:
                m[Tokenizer.EOS] = True
            self._masks[state] = m
        return m

    def _first_chars(self, state: int):
        """Characters a piece may start with at `state` (a superset; _walk decides)."""
        node = self.ROOT if state == self.START else state
        chars = set(self.trie.children[node])
        if state == self.START or (self.loop and self.trie.terminal[node]):
            chars.add(" ")
        if self._word_end(node):
            chars |= _PUNCT
        return chars

    def advance(self, state: int, token: int) -> int:
        key = (state, token)
        nxt = self._next.get(key)
        if nxt is None:
            nxt = self._walk(state, self.tokenizer.piece_text(token).lower())
            self._next[key] = nxt
        return nxt

    def spell(self, text: str) -> str:
        """The recognised text in the caller's spelling (words or the phrase as given)."""
        plain = _normal("".join(ch for ch in text if ch not in _PUNCT))
        if not self.loop:
            return self.spelling.get(plain, plain)
        return " ".join(self.spelling.get(w, w) for w in plain.split())  # "90" -> "ninety"

    @property
    def words(self) -> Iterable[str]:
        return self.spelling.values()
