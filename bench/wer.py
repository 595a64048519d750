"""Word error rate for the speech-recognition benchmarks.

``wer(reference, hypothesis)`` is the word-level Levenshtein distance (substitutions +
deletions + insertions) divided by the number of reference words, after both texts went
through :func:`normalize`:

* lower case; punctuation dropped (an apostrophe inside a word stays: "don't");
  hyphens split words ("forty-five" -> "forty five");
* numerals become words, so "90" and "ninety" are the same word: a numeral up to 999 999 999
  is read as a cardinal ("180" -> "one hundred eighty", "1,500" -> "one thousand five
  hundred"), one with a leading zero digit by digit ("007" -> "zero zero seven"), a decimal
  with "point" ("2.5" -> "two point five"), an ordinal as such ("3rd" -> "third");
  "90°" -> "ninety degrees", "10%" -> "ten percent";
* "and" inside a spoken number is dropped ("one hundred and five" == "one hundred five" ==
  "105");
* British spellings of the units become American ("metres" -> "meters").

A digit string is compared as spoken: "four seven two" is not "472" (which reads "four
hundred seventy two"); a recogniser that writes digit strings as one numeral is charged for
it. Corpus-level WER is the sum of the errors over the sum of the reference words
(:func:`corpus_wer`), not the mean of the per-utterance rates.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, List, Sequence, Tuple

from nerve.asr.tokenizer import DIGIT_WORDS, int_to_words

__all__ = ["number_to_words", "normalize", "WordErrors", "word_errors", "wer", "corpus_wer"]

_SCALES = ("million", "thousand", "hundred")
_ORDINAL = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
            "nine": "ninth", "twelve": "twelfth"}
_NUMBER_WORDS = {int_to_words(n) for n in range(20)} | {int_to_words(10 * k) for k in range(2, 10)} | set(_SCALES)
_SPELLING = {"metre": "meter", "metres": "meters", "centimetre": "centimeter",
             "centimetres": "centimeters", "millimetre": "millimeter", "millimetres": "millimeters",
             "kilometre": "kilometer", "kilometres": "kilometers"}
_MAX = 999_999_999


def number_to_words(n: int) -> str:
    """Cardinal English words of 0 <= n <= 999 999 999, without "and": 45 -> "forty five"
    (nerve's own spelling, nerve.asr.tokenizer.int_to_words)."""
    if not 0 <= n <= _MAX:
        raise ValueError(f"number_to_words: {n} is outside [0, {_MAX}]")
    return int_to_words(n)


def _ordinal(n: int) -> str:
    words = number_to_words(n).split()
    last = words[-1]
    if last in _ORDINAL:
        words[-1] = _ORDINAL[last]
    elif last.endswith("y"):
        words[-1] = last[:-1] + "ieth"
    else:
        words[-1] = last + "th"
    return " ".join(words)


def _digits(s: str) -> str:
    return " ".join(DIGIT_WORDS[int(c)] for c in s)


# One numeral: digits with optional thousands separators, an optional decimal part, then an
# optional ordinal suffix, degree or percent sign.
_NUMERAL = re.compile(r"(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?(st|nd|rd|th|°|%)?")


def _numeral_words(m: "re.Match[str]") -> str:
    whole, frac, suffix = m.group(1), m.group(2), m.group(3)
    plain = whole.replace(",", "")
    if suffix in ("st", "nd", "rd", "th") and frac is None and int(plain) <= _MAX:
        return " " + _ordinal(int(plain)) + " "
    if (len(plain) > 1 and plain[0] == "0") or int(plain) > _MAX:
        words = _digits(plain)
    else:
        words = number_to_words(int(plain))
    if frac is not None:
        words += " point " + _digits(frac)
    if suffix == "°":
        words += " degrees"
    elif suffix == "%":
        words += " percent"
    elif suffix:  # an ordinal suffix on a decimal or a huge number: keep the letters apart
        words += " " + suffix
    return " " + words + " "


def normalize(text: str) -> List[str]:
    """The words of `text` as WER compares them (see the module docstring)."""
    s = _NUMERAL.sub(_numeral_words, text.lower())
    s = s.replace("-", " ")
    s = re.sub(r"[^a-z0-9' ]+", " ", s)      # punctuation (numerals are words by now)
    words = []
    for w in s.split():
        w = w.strip("'")
        if w:
            words.append(_SPELLING.get(w, w))
    # "and" between a scale word and the rest of the number: "one hundred and five"
    out = []
    for i, w in enumerate(words):
        if (w == "and" and out and out[-1] in ("hundred", "thousand", "million")
                and i + 1 < len(words) and words[i + 1] in _NUMBER_WORDS):
            continue
        out.append(w)
    return out


@dataclass(frozen=True)
class WordErrors:
    """Edit counts of one alignment (or a sum of them) against `words` reference words."""
    substitutions: int = 0
    deletions: int = 0
    insertions: int = 0
    words: int = 0

    @property
    def errors(self) -> int:
        return self.substitutions + self.deletions + self.insertions

    @property
    def wer(self) -> float:
        """errors / reference words; with no reference words: 0 if no errors, else inf."""
        if self.words == 0:
            return 0.0 if self.errors == 0 else float("inf")
        return self.errors / self.words

    def __add__(self, other: "WordErrors") -> "WordErrors":
        return WordErrors(self.substitutions + other.substitutions, self.deletions + other.deletions,
                          self.insertions + other.insertions, self.words + other.words)


def _align(ref: Sequence[str], hyp: Sequence[str]) -> Tuple[int, int, int]:
    """(substitutions, deletions, insertions) of a minimal word-level edit script."""
    n, m = len(ref), len(hyp)
    # cost[i][j]: distance between ref[:i] and hyp[:j]
    cost = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n + 1):
        cost[i][0] = i
    for j in range(m + 1):
        cost[0][j] = j
    for i in range(1, n + 1):
        row, prev = cost[i], cost[i - 1]
        for j in range(1, m + 1):
            row[j] = min(prev[j - 1] + (ref[i - 1] != hyp[j - 1]), prev[j] + 1, row[j - 1] + 1)
    sub = dele = ins = 0
    i, j = n, m
    while i > 0 or j > 0:  # walk back; any minimal path gives the same total
        if i > 0 and j > 0 and cost[i][j] == cost[i - 1][j - 1] + (ref[i - 1] != hyp[j - 1]):
            sub += ref[i - 1] != hyp[j - 1]
            i, j = i - 1, j - 1
        elif i > 0 and cost[i][j] == cost[i - 1][j] + 1:
            dele += 1
            i -= 1
        else:
            ins += 1
            j -= 1
    return sub, dele, ins


def word_errors(reference: str, hypothesis: str) -> WordErrors:
    """The edit counts between the normalised texts."""
    ref, hyp = normalize(reference), normalize(hypothesis)
    sub, dele, ins = _align(ref, hyp)
    return WordErrors(sub, dele, ins, len(ref))


def wer(reference: str, hypothesis: str) -> float:
    """Word error rate of one utterance (can exceed 1 when the hypothesis inserts words)."""
    return word_errors(reference, hypothesis).wer


def corpus_wer(pairs: Iterable[Tuple[str, str]]) -> WordErrors:
    """The summed edit counts of (reference, hypothesis) pairs; ``.wer`` is the corpus WER."""
    total = WordErrors()
    for reference, hypothesis in pairs:
        total = total + word_errors(reference, hypothesis)
    return total
