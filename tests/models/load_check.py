"""Loads weights that `cpc export-weights` wrote (safetensors, the ONNX initializers' names, which
are the PyTorch module's state-dict keys) into a zoo model built by PyTorch and prints its loss on
the fixture's batch as JSON: what a user taking trained weights back to PyTorch does.

    /work/venv-export/bin/python tests/models/load_check.py MODEL WEIGHTS.safetensors FIXTURE_DIR

The model gets the fixture's weights first (export.regenerate: its buffers and the parameters it
does not train, as the export had them), then `load_state_dict` of the file; every parameter
PyTorch trains must be in it, and nothing in it may be unknown to the model.
"""
import json
import os
import sys

import numpy as np
import safetensors.torch
import torch

import export
import zoo


def main():
    name, weights, fixture_dir = sys.argv[1:4]
    fixture = zoo.build(name)
    model = fixture.model
    export.regenerate(model)
    state = safetensors.torch.load_file(weights)
    missing, unexpected = model.load_state_dict(state, strict=False)
    trained = [n for n, p in model.named_parameters() if p.requires_grad]
    not_loaded = [n for n in trained if n in missing]
    if unexpected or not_loaded:
        sys.exit("load_check: unknown to %s: %s; trained but not in the file: %s" % (name, unexpected, not_loaded))
    inputs = [torch.from_numpy(np.load(os.path.join(fixture_dir, n + ".npy"))) for n in fixture.inputs]
    with torch.no_grad():
        loss = float(model(*inputs))
    print(json.dumps({"loss": loss, "loaded": len(state), "trained": len(trained)}))


if __name__ == "__main__":
    main()
