"""Checks that forge's training checkpoints load in HF transformers with the same numbers.

Run on a machine with transformers (the GPU machine; no GPU needed):

    python3 tools/hf_load_check.py OUT_DIR IDS FORGE_LOSS [TEXT FORGE_IDS_JSON]

IDS: comma-separated token ids; FORGE_LOSS: `forge eval -m OUT_DIR --ids IDS --json`'s loss.
With TEXT and the JSON of `forge tokenize -m OUT_DIR --text TEXT --json`, also checks that
HF's GPT2Tokenizer and GPT2TokenizerFast, loaded from the same folder, give forge's ids.
Prints the comparisons and exits 1 if the loss differs by more than 1e-5 relative or the ids
differ.
"""
import json
import sys

import torch
from transformers import GPT2LMHeadModel, GPT2Tokenizer, GPT2TokenizerFast


def main():
    out, ids_text, forge_loss = sys.argv[1], sys.argv[2], float(sys.argv[3])
    ids = [int(x) for x in ids_text.split(",")]
    model = GPT2LMHeadModel.from_pretrained(out).double().eval()
    with torch.no_grad():
        loss = model(torch.tensor([ids]), labels=torch.tensor([ids])).loss.item()
    rel = abs(loss - forge_loss) / abs(loss)
    print(f"{out}: HF loss {loss!r}, forge {forge_loss!r}, relative difference {rel:.3g}")
    ok = rel <= 1e-5
    if len(sys.argv) > 5:
        text, want = sys.argv[4], json.load(open(sys.argv[5]))["ids"]
        for cls in (GPT2Tokenizer, GPT2TokenizerFast):
            got = cls.from_pretrained(out).encode(text)
            print(f"{cls.__name__}: ids equal to forge's: {got == want}")
            ok = ok and got == want
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
