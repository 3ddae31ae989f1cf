"""forge: GPT-2 inference and training from Python.

    import forge
    m = forge.Model.load("out/demo-300")            # a model folder or .gguf file
    print(m.generate("The nation", max_tokens=20, greedy=True)["text"])
    for piece in m.generate("The nation", max_tokens=20, stream=True):
        print(piece, end="", flush=True)           # the GIL is released while it decodes
    ids = m.tokenize("Hello, my dog is cute")
    m.logits(ids)                                  # NumPy float32 [T, V], no copy on the CPU
    m.eval_loss(ids)                               # mean next-token loss, nats
    forge.train(data="data/sotu", out="out/run", preset="mini", steps=100)

Errors raise forge.Error (forge.ShapeError, forge.IoError, ... one per kind) with the CLI's
messages.
"""
from ._forge import (  # noqa: F401
    BackendError,
    DeviceError,
    DTypeError,
    Error,
    FormatError,
    IoError,
    Model,
    RangeError,
    ShapeError,
    TextStream,
    TokenizerError,
    UnsupportedError,
    devices,
    train,
)

__all__ = [
    "Model", "TextStream", "train", "devices", "Error", "ShapeError", "DeviceError", "DTypeError",
    "IoError", "FormatError", "TokenizerError", "BackendError", "UnsupportedError", "RangeError",
]
