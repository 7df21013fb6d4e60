"""PyTorch side of the safetensors interop cross-check (hash-locked torch 2.13.0 and
safetensors 0.8.0, ci/python-torch). No numpy.

    python torch_probe.py probe EXPORT_DIR IMAGES OUT
        Loads EXPORT_DIR/model.safetensors into a two-layer nn.Sequential and writes the
        logits of the probe images (IMAGES: 128*784 raw bytes) to OUT, FP32 LE row-major.

    python torch_probe.py train EXPORT_DIR IMAGES LABELS OUT_DIR
        Loads the model and AdamW state, takes one torch.optim.AdamW step on the probe
        images with the export's hyper-parameters, and writes OUT_DIR/model.safetensors,
        optimizer.safetensors, metadata.json (no root: ShardLift recomputes it) and the
        new model's probe logits to OUT_DIR/probe.bin.
"""
import hashlib
import json
import os
import sys

import torch
from safetensors.torch import load_file, save_file

torch.set_num_threads(1)
NAMES = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]


def model_from(tensors):
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)
    )
    keys = ["0.weight", "0.bias", "2.weight", "2.bias"]
    model.load_state_dict({k: tensors[n] for k, n in zip(keys, NAMES)})
    return model


def probe_bytes(model, images_path):
    with open(images_path, "rb") as f:
        raw = f.read()
    pixels = torch.frombuffer(bytearray(raw), dtype=torch.uint8).to(torch.float32)
    x = (pixels / 255.0).view(128, 784)
    with torch.no_grad():
        logits = model(x).contiguous()
    return bytes(logits.reshape(-1).view(torch.uint8).tolist())


def main():
    mode = sys.argv[1]
    export = sys.argv[2]
    model = model_from(load_file(os.path.join(export, "model.safetensors")))
    if mode == "probe":
        with open(sys.argv[4], "wb") as f:
            f.write(probe_bytes(model, sys.argv[3]))
        return 0
    images, labels_path, out = sys.argv[3], sys.argv[4], sys.argv[5]
    with open(os.path.join(export, "metadata.json")) as f:
        metadata = json.load(f)
    hyper = metadata["hyperparameters"]
    optimizer_state = load_file(os.path.join(export, "optimizer.safetensors"))
    params = list(model.parameters())
    optimizer = torch.optim.AdamW(
        params,
        lr=hyper["learning_rate"],
        betas=(hyper["beta1"], hyper["beta2"]),
        eps=hyper["epsilon"],
        weight_decay=hyper["weight_decay"],
    )
    for param, name in zip(params, NAMES):
        optimizer.state[param] = {
            "step": torch.tensor(float(metadata["step"])),
            "exp_avg": optimizer_state[name + ".exp_avg"].clone(),
            "exp_avg_sq": optimizer_state[name + ".exp_avg_sq"].clone(),
        }
    with open(images, "rb") as f:
        x = (torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).float() / 255.0).view(128, 784)
    with open(labels_path, "rb") as f:
        y = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).long()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    os.makedirs(out)
    state = dict(zip(NAMES, [p.detach().contiguous() for p in params]))
    slots = {}
    for param, name in zip(params, NAMES):
        slots[name + ".exp_avg"] = optimizer.state[param]["exp_avg"].contiguous()
        slots[name + ".exp_avg_sq"] = optimizer.state[param]["exp_avg_sq"].contiguous()
    files = {}
    for file, tensors in [("model.safetensors", state), ("optimizer.safetensors", slots)]:
        path = os.path.join(out, file)
        save_file(tensors, path, metadata={"format": "pt"})
        with open(path, "rb") as f:
            files[file] = hashlib.sha256(f.read()).hexdigest()
    record = dict(metadata)
    record.update(
        generation=None,
        commit_digest=None,
        logical_state_root=None,
        step=metadata["step"] + 1,
        files=files,
    )
    with open(os.path.join(out, "metadata.json"), "w") as f:
        json.dump(record, f, sort_keys=True)
    with open(os.path.join(out, "probe.bin"), "wb") as f:
        f.write(probe_bytes(model, images))
    return 0


if __name__ == "__main__":
    sys.exit(main())
