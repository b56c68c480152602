"""What the CLI tests share: where the tandem binary and the default model
are (TND_BIN, TND_SRC as CTest sets them), and a skip (exit 77) when the
model is missing."""
import os
import sys


def default_model_paths():
    """(src, tandem, model); exits 77, the skip code, without the model."""
    src = os.environ.get("TND_SRC", ".")
    tandem = os.environ.get("TND_BIN", os.path.join(src, "build", "tandem"))
    model = os.path.join(src, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(model):
        print("skipped: default model missing")
        sys.exit(77)
    return src, tandem, model
