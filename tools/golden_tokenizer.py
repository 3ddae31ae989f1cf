#!/usr/bin/env python3
"""Writes tests/data/tokenizer_golden.json: GPT-2 token ids made by HF transformers.

Run on a machine with transformers (no internet needed):
  python3 tools/golden_tokenizer.py --tokenizer-dir data/gpt2-tokenizer

--tokenizer-dir holds either encoder.json + vocab.bpe (scripts/fetch_tokenizer.sh gets them;
they are copied to a temp folder as vocab.json + merges.txt) or vocab.json + merges.txt.
Texts: every string of tests/data/tokenizer_cases.json, a few hundred random strings drawn
(with a fixed seed) from characters that stress the split regex, and one long mixed text.
Each is encoded by GPT2TokenizerFast, by GPT2Tokenizer (in transformers < 5 the pure-Python
one; from 5 on it is the same Rust-backed class as the fast one, so it proves little) and by
tiktoken when installed (built from the same files, with no download); the script fails,
listing every difference, unless all give the same ids and decode them back to the text.
Output: a JSON list [{"text": str, "ids": [int, ...]}, ...], which tests/test_tokenizer.cpp
compares forge against.
"""
import argparse
import json
import os
import random
import shutil
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Characters chosen to hit every branch of GPT-2's regex and Unicode's edges: ASCII classes,
# every kind of white space (and look-alikes that are not White_Space), letters and numbers of
# several scripts and categories (Lm, Lt, Mn, Nd, Nl, No), emoji pieces (ZWJ, skin tones,
# variation selectors), apostrophes for the case-sensitive contractions, and <|endoftext|>.
POOL = (
    list("abcXYZ019 ") + ["'", "'s", "'S", "'re", "'RE", "'ll", "'d", "'m", "'t", "'ve"] +
    list(" \t\n\r\x0b\x0c\x1c\x1f\x85\xa0\u1680\u180e\u2000\u2009\u200a\u200b\u2028\u2029"
         "\u202f\u205f\u3000\ufeff") +
    list(".,;:!?-_()[]{}<>/\\|@#$%^&*+=~`\"") +
    list("éÅßœǅʰ\u0301\u0308ΩЖאعक\u093fก日本語中한글") +
    list("٣३Ⅻ²½") +
    ["😀", "👍", "\U0001F3FD", "\u200d", "\ufe0f", "👨\u200d👩\u200d👧", "🇺🇸", "\ue000"] +
    ["<|endoftext|>", "<|", "|>", "  ", "\r\n", "\n\n"])


def texts(cases_path):
    with open(cases_path, encoding="utf-8") as f:
        cases = json.load(f)
    rng = random.Random(1234)
    fuzz = ["".join(rng.choice(POOL) for _ in range(rng.randint(1, 24))) for _ in range(400)]
    long_text = "\n".join(cases * 3)
    return cases + fuzz + [long_text]


def make_tiktoken(vocab):
    """tiktoken's GPT-2 encoding built from the vocab itself (tiktoken.get_encoding would
    download); None when tiktoken is not installed."""
    try:
        import tiktoken
    except ImportError:
        return None
    # Undo GPT-2's bytes_to_unicode: vocab strings stand for bytes.
    keep = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
            list(range(ord("®"), ord("ÿ") + 1)))
    to_byte, extra = {}, 0
    for b in range(256):
        if b in keep:
            to_byte[chr(b)] = b
        else:
            to_byte[chr(256 + extra)] = b
            extra += 1
    special = {"<|endoftext|>": vocab["<|endoftext|>"]}
    ranks = {bytes(to_byte[c] for c in token): i for token, i in vocab.items()
             if token not in special}
    return tiktoken.Encoding(
        name="gpt2-golden",
        pat_str=r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
        mergeable_ranks=ranks, special_tokens=special)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer-dir", required=True)
    ap.add_argument("--cases", default=os.path.join(REPO, "tests/data/tokenizer_cases.json"))
    ap.add_argument("--out", default=os.path.join(REPO, "tests/data/tokenizer_golden.json"))
    args = ap.parse_args()

    import transformers
    from transformers import GPT2Tokenizer, GPT2TokenizerFast

    with tempfile.TemporaryDirectory() as tmp:
        src = args.tokenizer_dir
        for theirs, hf in (("encoder.json", "vocab.json"), ("vocab.bpe", "merges.txt")):
            path = os.path.join(src, theirs)
            if not os.path.exists(path):
                path = os.path.join(src, hf)
            if not os.path.exists(path):
                sys.exit(f"golden_tokenizer: {src} has neither {theirs} nor {hf}")
            shutil.copy(path, os.path.join(tmp, hf))
        # from_pretrained reads vocab.json + merges.txt in every transformers version (the
        # constructors' arguments changed in 5.0).
        fast = GPT2TokenizerFast.from_pretrained(tmp)
        slow = GPT2Tokenizer.from_pretrained(tmp)
        with open(os.path.join(tmp, "vocab.json"), encoding="utf-8") as f:
            vocab = json.load(f)
        if len(fast) != len(vocab) or len(slow) != len(vocab):
            sys.exit(f"golden_tokenizer: tokenizers loaded {len(fast)}/{len(slow)} tokens, "
                     f"expected {len(vocab)}")
        encoders = {"GPT2TokenizerFast": lambda t: fast.encode(t, add_special_tokens=False),
                    "GPT2Tokenizer": lambda t: slow.encode(t, add_special_tokens=False)}
        tik = make_tiktoken(vocab)
        if tik:
            encoders["tiktoken"] = lambda t: tik.encode(t, allowed_special="all")
        print(f"transformers {transformers.__version__}: GPT2Tokenizer is "
              f"{'fast (Rust)' if slow.is_fast else 'pure Python'}; checking "
              f"{', '.join(encoders)}")

        golden, problems = [], []
        for text in texts(args.cases):
            results = {name: enc(text) for name, enc in encoders.items()}
            ids = results["GPT2TokenizerFast"]
            if any(r != ids for r in results.values()):
                problems.append(f"encoders differ on {text!r}:\n" +
                                "\n".join(f"  {n}: {r}" for n, r in results.items()))
                continue
            back = fast.decode(ids, clean_up_tokenization_spaces=False)
            if back != text:
                problems.append(f"decode does not give the text back: {text!r} -> {back!r}")
            golden.append({"text": text, "ids": ids})

    if problems:
        print("\n".join(problems), file=sys.stderr)
        sys.exit(f"golden_tokenizer: {len(problems)} problem(s); nothing written")
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False)
        f.write("\n")
    print(f"golden_tokenizer: wrote {len(golden)} cases to {args.out}")


if __name__ == "__main__":
    main()
