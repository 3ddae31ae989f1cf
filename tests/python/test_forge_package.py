"""The Python package forge (python/), imported from the build tree, against HF's golden
logits, the CLI's greedy tokens and training losses, and the CLI's error messages.

Run by ctest (entry python_package) with PYTHONPATH=<build>/python, FORGE_BINARY and
FORGE_SOURCE_DIR set; Debian's python3 and numpy.
"""
import json
import os
import struct
import subprocess
import tempfile
import threading
import unittest

import numpy as np

import forge

SOURCE = os.environ["FORGE_SOURCE_DIR"]
BINARY = os.environ["FORGE_BINARY"]
GOLDEN = os.path.join(SOURCE, "tests/data/golden/odd")
CORPUS = os.path.join(SOURCE, "data/sotu")


def read_safetensors(path, name):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        t = header[name]
        begin, end = t["data_offsets"]
        f.seek(8 + n + begin)
        return np.frombuffer(f.read(end - begin), dtype=np.float32).reshape(t["shape"])


def cli(*args):
    return subprocess.run([BINARY, *args], capture_output=True, text=True, env={**os.environ, "FORGE_NUM_THREADS": "2"})


SMALL = dict(preset="mini", layers=2, heads=2, embd=64, ctx=64, batch=2, seq=32, eval_batches=1,
             sample_every=0, save_every=0, seed=7, tokenizer=os.path.join(SOURCE, "data/gpt2-tokenizer"))


class ForgePackage(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.model_dir = os.path.join(cls.tmp.name, "trained")
        # The package's own training makes the model the other tests use.
        forge.train(data=CORPUS, out=cls.model_dir, steps=3, **SMALL)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_logits_and_loss_equal_hf_golden(self):
        golden = json.load(open(os.path.join(GOLDEN, "golden.json")))
        m = forge.Model.load(GOLDEN)
        ids = golden["prompt_ids"][0]
        want = read_safetensors(os.path.join(GOLDEN, "golden.safetensors"), "prompt_logits")[0]
        got = m.logits(ids)
        self.assertEqual(got.shape, (len(ids), m.config["vocab_size"]))
        self.assertEqual(got.dtype, np.float32)
        scale = max(1.0, float(np.abs(want).max()))
        self.assertLessEqual(float(np.abs(got - want).max()), 1e-4 * scale)
        self.assertAlmostEqual(m.eval_loss(ids), golden["loss"]["prompt"], delta=2e-5 * golden["loss"]["prompt"])

    def test_logits_view_the_result_without_a_copy(self):
        m = forge.Model.load(GOLDEN)
        a = m.logits([1, 2, 3])
        self.assertFalse(a.flags["OWNDATA"])  # a view of the engine's tensor
        copy = a.copy()
        del m
        np.testing.assert_array_equal(a, copy)  # the view keeps the tensor alive

    def test_greedy_tokens_equal_the_cli(self):
        m = forge.Model.load(self.model_dir)
        for prompt in ["Hello, my dog is cute", "The State of the Union"]:
            r = cli("generate", "-m", self.model_dir, "-p", prompt, "-n", "16", "--greedy", "--json")
            self.assertEqual(r.returncode, 0, r.stderr)
            want = json.loads(r.stdout)
            got = m.generate(prompt, max_tokens=16, greedy=True)
            self.assertEqual(got["ids"], want["ids"])
            self.assertEqual(got["text"], want["text"])
            stream = m.generate(prompt, max_tokens=16, greedy=True, stream=True)
            self.assertEqual("".join(stream), want["text"])
            self.assertEqual(stream.ids, want["ids"])
            self.assertEqual(m.detokenize(m.tokenize(prompt)), prompt)
        # The model as a GGUF file (forge quantize, f32): the same tokens.
        gguf = os.path.join(self.tmp.name, "model.gguf")
        r = cli("quantize", "-m", self.model_dir, "-o", gguf, "--type", "f32")
        self.assertEqual(r.returncode, 0, r.stderr)
        g = forge.Model.load(gguf)
        self.assertEqual(g.generate("The nation", max_tokens=8, greedy=True)["ids"],
                         m.generate("The nation", max_tokens=8, greedy=True)["ids"])
        self.assertEqual(m.tokenize("Hello, my dog is cute"), [15496, 11, 616, 3290, 318, 13779])

    def test_training_equals_the_cli_with_the_same_settings(self):
        out = os.path.join(self.tmp.name, "cli")
        args = ["train", "--data", CORPUS, "--out", out, "--steps", "3"]
        for k, v in SMALL.items():
            args += ["--" + k.replace("_", "-"), str(v)]
        r = cli(*args)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = lambda d: [json.loads(x) for x in open(os.path.join(d, "metrics.jsonl"))]
        want = [x["loss"] for x in lines(out) if "loss" in x]
        got = [x["loss"] for x in lines(self.model_dir) if "loss" in x]
        self.assertEqual(len(got), 3)
        self.assertEqual(got, want)

    def test_errors_are_forge_errors_with_the_clis_messages(self):
        with self.assertRaises(forge.IoError) as e:
            forge.Model.load("/nonexistent/model")
        self.assertIsInstance(e.exception, forge.Error)
        m = forge.Model.load(self.model_dir)
        with self.assertRaises(forge.RangeError) as e:
            m.generate([60000], max_tokens=2)
        r = cli("generate", "-m", self.model_dir, "--prompt-ids", "60000", "-n", "2")
        self.assertEqual(r.returncode, 1)
        self.assertIn(str(e.exception), r.stderr)  # "error: <the same message>"
        with self.assertRaises(forge.RangeError):
            m.generate("x", max_tokens=2, top_p=0.0)
        with self.assertRaises(forge.FormatError) as e:
            forge.train(data=CORPUS, out=os.path.join(self.tmp.name, "bad"), steps=0)
        r = cli("train", "--data", CORPUS, "--out", os.path.join(self.tmp.name, "bad"), "--steps", "0")
        self.assertEqual(r.returncode, 1)
        self.assertIn("--steps: 0 is outside", str(e.exception))
        self.assertIn("--steps: 0 is outside", r.stderr)
        no_tok = forge.Model.load(GOLDEN)
        with self.assertRaises(forge.TokenizerError):
            no_tok.generate("text needs a tokenizer")

    def test_decoding_releases_the_gil(self):
        m = forge.Model.load(self.model_dir)
        done = threading.Event()
        def work():
            m.generate("x", max_tokens=60, ignore_eos=True, greedy=True)
            done.set()
        t = threading.Thread(target=work)
        spins = 0
        t.start()
        while not done.is_set():
            spins += 1
        t.join()
        # With the GIL held for the whole call, this thread could not have run meanwhile.
        self.assertGreater(spins, 1000)


if __name__ == "__main__":
    unittest.main()
