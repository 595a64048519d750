"""Moonshine's tokenizer (``tokenizer.bin``) and the number spelling of transcripts.

``tokenizer.bin`` lists the pieces in id order, each as a length then its UTF-8 bytes; the
length is one byte, or two when >= 128 (low 7 bits first, then the high bits). ``▁`` (U+2581)
marks a word start; ids 3..258 are the 256 single bytes (byte fallback), so joining the
pieces' bytes and decoding once gives the text.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, Iterable, List, Sequence, Union

from ..errors import ModelError

__all__ = ["Tokenizer", "int_to_words", "numbers_to_words", "numbers_to_digits", "DIGIT_WORDS"]

WORD_START = "\u2581"


class Tokenizer:
    UNK, BOS, EOS = 0, 1, 2

    def __init__(self, pieces: Sequence[bytes]):
        self.pieces: List[bytes] = list(pieces)
        self._word_start = WORD_START.encode()

    @classmethod
    def load(cls, source: Union[str, Path, bytes]) -> "Tokenizer":
        data = source if isinstance(source, (bytes, bytearray)) else Path(source).read_bytes()
        pieces, i = [], 0
        while i < len(data):
            n = data[i]
            i += 1
            if n >= 128:
                if i >= len(data):
                    raise ModelError(f"tokenizer: truncated length at byte {i - 1}")
                n = (n & 127) | (data[i] << 7)
                i += 1
            if i + n > len(data):
                raise ModelError(f"tokenizer: piece {len(pieces)} (length {n}) runs past the end "
                                 f"of the file at byte {i}")
            pieces.append(bytes(data[i:i + n]))
            i += n
        if len(pieces) < 3:
            raise ModelError(f"tokenizer: {len(pieces)} pieces; not a Moonshine tokenizer")
        return cls(pieces)

    def __len__(self) -> int:
        return len(self.pieces)

    def piece_text(self, token: int) -> str:
        """The piece as text with its word-start mark turned into a space (for a trie)."""
        return self.pieces[token].decode("utf-8", errors="replace").replace(WORD_START, " ")

    def decode(self, tokens: Iterable[int]) -> str:
        raw = b"".join(self.pieces[t] for t in tokens
                       if 2 < t < len(self.pieces))  # specials and padding ids carry no text
        return raw.decode("utf-8", errors="replace").replace(WORD_START, " ").strip()

    def word_starts(self, token: int) -> bool:
        return 0 <= token < len(self.pieces) and self.pieces[token].startswith(self._word_start)


# ---- numbers: one spelling for a command parser (words by default)
_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
         "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
         "nineteen"]
DIGIT_WORDS = _ONES[:10]
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_SCALES = [(10 ** 9, "billion"), (10 ** 6, "million"), (1000, "thousand"), (100, "hundred")]


def int_to_words(n: int) -> str:
    """Cardinal English words of 0 <= n < 10**12, without "and": 45 -> "forty five"."""
    if not 0 <= n < 10 ** 12:
        raise ValueError(f"int_to_words: {n} is outside [0, 10**12)")
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + ("" if n % 10 == 0 else " " + _ONES[n % 10])
    for value, name in _SCALES:
        if n >= value:
            rest = n % value
            head = int_to_words(n // value) + " " + name
            return head if rest == 0 else head + " " + int_to_words(rest)
    raise AssertionError(n)


def _number_token_words(token: str) -> str:
    digits = token.replace(",", "")
    if len(digits) > 1 and digits.startswith("0") or len(digits) > 12:
        # a digit string ("007", a phone number): read digit by digit
        return " ".join(_ONES[int(c)] for c in digits)
    return int_to_words(int(digits))


# A number, then either an ordinal suffix ("2nd"), a percent sign, or letters glued on as the
# model writes units ("3m", "90deg"); not inside a word ("mp3") nor after a decimal point.
_NUMBER = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?"
                     r"(?:(?<=1)(st)|(?<=2)(nd)|(?<=3)(rd)|(?<=\d)(th)|(%)|([^\W\d_]+))?(?!\w)")
_ORDINAL_ENDS = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
                 "nine": "ninth", "twelve": "twelfth"}


def _ordinal(words: str) -> str:
    """'twenty one' -> 'twenty first', 'ninety' -> 'ninetieth', 'eleven' -> 'eleventh'."""
    head, _, last = words.rpartition(" ")
    last = _ORDINAL_ENDS.get(last) or (last[:-1] + "ieth" if last.endswith("y") else last + "th")
    return f"{head} {last}" if head else last


def numbers_to_words(text: str) -> str:
    """'turn 90 degrees, 2.5 m' -> 'turn ninety degrees, two point five m'; '3m' -> 'three m'
    (letters glued to a number are read after it); '2nd' -> 'second'; '15%' -> 'fifteen percent'."""
    def spell(m: re.Match) -> str:
        integer, fraction, st, nd, rd, th, percent, letters = m.groups()
        out = _number_token_words(integer)
        if fraction:
            out += " point " + " ".join(_ONES[int(c)] for c in fraction)
        elif st or nd or rd or th:
            out = _ordinal(out)
        if percent:
            out += " percent"
        if letters:
            out += " " + letters
        return out
    return _NUMBER.sub(spell, text)


_WORD_VALUE: Dict[str, int] = {w: i for i, w in enumerate(_ONES)}
_WORD_VALUE.update({w: 10 * i for i, w in enumerate(_TENS) if w})
_SCALE_VALUE = {name: value for value, name in _SCALES}


def numbers_to_digits(text: str) -> str:
    """'turn ninety degrees' -> 'turn 90 degrees'; 'two hundred five' -> '205'. Runs of number
    words become one number; other words pass through unchanged."""
    words = text.split(" ")
    out: List[str] = []
    i = 0
    while i < len(words):
        bare = words[i].lower().strip(",.!?")
        if bare not in _WORD_VALUE:
            out.append(words[i])
            i += 1
            continue
        total, current, j = 0, 0, i
        while j < len(words):
            w = words[j].lower().strip(",.!?")
            if w in _WORD_VALUE:
                v = _WORD_VALUE[w]
                if v == 0:                 # "zero" is a number of its own ("zero zero seven")
                    if j == i:
                        j += 1
                    break
                if current % 10 == 0 and current % 100 != 0 and 0 < v < 10 and current:
                    current += v           # "ninety" "five"
                elif current == 0 or current >= 100 and current % 100 == 0:
                    current += v
                else:
                    break                  # "four seven": two numbers
            elif w in _SCALE_VALUE and current:
                if _SCALE_VALUE[w] == 100:
                    current *= 100
                else:
                    total += current * _SCALE_VALUE[w]
                    current = 0
            else:
                break
            j += 1
            if words[j - 1][-1:] in ",.!?":
                break
        tail = words[j - 1][len(words[j - 1].rstrip(",.!?")):]
        out.append(str(total + current) + tail)
        i = j
    return " ".join(out)
