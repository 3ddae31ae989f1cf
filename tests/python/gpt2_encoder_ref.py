"""Independent reference for forge's GPT-2 tokenizer: OpenAI's original encoder algorithm.

Written from GPT-2's published description (bytes_to_unicode, the split regex run by the
`regex` module, and BPE that repeatedly merges every occurrence of the lowest-ranked pair),
so it shares no code or data structures with forge's PCRE2 + heap implementation.
<|endoftext|> is split out first, as HF's GPT2Tokenizer does.

Usage (from tests/pyref.h): gpt2_encoder_ref.py IN.json OUT.json
  IN:  {"dir": folder with encoder.json + vocab.bpe, "texts": [str, ...]}
  OUT: {"ids": [[int, ...], ...]}
"""
import json
import os
import sys

import regex

PATTERN = regex.compile(
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
EOT = "<|endoftext|>"


def bytes_to_unicode():
    keep = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
            list(range(ord("®"), ord("ÿ") + 1)))
    mapping = {}
    extra = 0
    for b in range(256):
        if b in keep:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


class Encoder:
    def __init__(self, folder):
        with open(os.path.join(folder, "encoder.json"), encoding="utf-8") as f:
            self.vocab = json.load(f)
        with open(os.path.join(folder, "vocab.bpe"), encoding="utf-8") as f:
            lines = f.read().split("\n")
        rules = [tuple(line.split(" ")) for line in lines[1:] if line]
        self.ranks = {pair: i for i, pair in enumerate(rules)}
        self.byte_map = bytes_to_unicode()
        self.cache = {}

    def bpe(self, word):
        if word in self.cache:
            return self.cache[word]
        symbols = list(word)
        while len(symbols) > 1:
            pairs = {(symbols[i], symbols[i + 1]) for i in range(len(symbols) - 1)}
            best = min(pairs, key=lambda p: self.ranks.get(p, float("inf")))
            if best not in self.ranks:
                break
            merged = []
            i = 0
            while i < len(symbols):
                if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == best:
                    merged.append(symbols[i] + symbols[i + 1])
                    i += 2
                else:
                    merged.append(symbols[i])
                    i += 1
            symbols = merged
        self.cache[word] = symbols
        return symbols

    def encode(self, text):
        ids = []
        parts = text.split(EOT)
        for k, part in enumerate(parts):
            if k > 0:
                ids.append(self.vocab[EOT])
            for piece in PATTERN.findall(part):
                word = "".join(self.byte_map[b] for b in piece.encode("utf-8"))
                ids.extend(self.vocab[s] for s in self.bpe(word))
        return ids


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        request = json.load(f)
    enc = Encoder(request["dir"])
    out = {"ids": [enc.encode(t) for t in request["texts"]]}
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
