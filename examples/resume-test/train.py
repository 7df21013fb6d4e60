"""A small CPU training job that resumes exactly after a kill, and the ways to break it.

    python train.py                    # correct: every piece of state is checkpointed
    python train.py --break rng        # RNG states not saved (dropout draws differ)
    python train.py --break sampler    # sampler epoch and position not saved
    python train.py --break scheduler  # LR scheduler not saved
    python train.py --break optimizer  # optimizer state (AdamW moments) not saved
    python train.py --break save-before-step  # checkpoint taken before optimizer.step()
    python train.py --break in-place   # checkpoint written over the old file in place
    torchrun --standalone --nproc-per-node=2 train.py --ddp  # two processes, gloo, CPU

Run it under `shardlift resume-test ... -- python /abs/path/train.py [--break X]`. It
checkpoints every few steps into `checkpoint.pt` in its working directory and resumes
from it when it is there. The probe (python/shardlift_probe.py) reports each step.
"""
import argparse
import io
import os
import random
import sys

import numpy
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import shardlift_probe as probe  # noqa: E402

STEPS = 24
SAVE_EVERY = 3
BATCH = 16
SAMPLES = 256
CHECKPOINT = "checkpoint.pt"
WRITE_CHUNK_BYTES = 256 * 1024


def dataset():
    """Fixed synthetic data: the same bytes in every run."""
    generator = torch.Generator().manual_seed(1234)
    inputs = torch.randn(SAMPLES, 32, generator=generator)
    labels = torch.randint(0, 4, (SAMPLES,), generator=generator)
    return inputs, labels


class Sampler:
    """A seeded permutation per epoch and a position in it: the data cursor."""

    def __init__(self):
        self.epoch, self.position = 0, 0

    def next_batch(self):
        order = torch.randperm(SAMPLES, generator=torch.Generator().manual_seed(100 + self.epoch))
        indices = order[self.position : self.position + BATCH]
        self.position += BATCH
        if self.position >= SAMPLES:
            self.epoch, self.position = self.epoch + 1, 0
        return indices


def model_and_optimizer():
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 384), torch.nn.ReLU(), torch.nn.Dropout(0.2),
        torch.nn.Linear(384, 384), torch.nn.ReLU(), torch.nn.Linear(384, 4),
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=5, gamma=0.5)
    return model, optimizer, scheduler


def write_checkpoint(payload, in_place):
    """Streams the checkpoint in chunks (as a large one would be); durable before return."""
    target = CHECKPOINT if in_place else CHECKPOINT + ".tmp"
    with open(target, "wb") as f:
        for offset in range(0, len(payload), WRITE_CHUNK_BYTES):
            f.write(payload[offset : offset + WRITE_CHUNK_BYTES])
            f.flush()
            os.fsync(f.fileno())
    if not in_place:
        os.rename(target, CHECKPOINT)
        directory = os.open(".", os.O_RDONLY)
        os.fsync(directory)
        os.close(directory)


def save(step, model, optimizer, scheduler, sampler, broken):
    state = {"step": step, "model": model.state_dict()}
    if broken != "optimizer":
        state["optimizer"] = optimizer.state_dict()
    if broken != "scheduler":
        state["scheduler"] = scheduler.state_dict()
    if broken != "sampler":
        state["sampler"] = (sampler.epoch, sampler.position)
    if broken != "rng":
        state["rng"] = (torch.get_rng_state(), random.getstate(), numpy.random.get_state())
    buffer = io.BytesIO()
    torch.save(state, buffer)
    probe.saving(step)
    write_checkpoint(buffer.getvalue(), in_place=broken == "in-place")
    probe.saved(step)


def restore(model, optimizer, scheduler, sampler):
    """Loads the checkpoint if there is one; returns the first step to run."""
    if not os.path.exists(CHECKPOINT):
        return 1
    state = torch.load(CHECKPOINT, weights_only=False)
    model.load_state_dict(state["model"])
    if "optimizer" in state:
        optimizer.load_state_dict(state["optimizer"])
    if "scheduler" in state:
        scheduler.load_state_dict(state["scheduler"])
    if "sampler" in state:
        sampler.epoch, sampler.position = state["sampler"]
    if "rng" in state:
        torch_state, python_state, numpy_state = state["rng"]
        torch.set_rng_state(torch_state)
        random.setstate(python_state)
        numpy.random.set_state(numpy_state)
    return state["step"] + 1


def distributed_setup(model):
    """With --ddp under torchrun: gloo on CPU, each rank takes its slice of the global batch.

    Every rank draws the same random numbers (same seeds, same draws), so the RNG states
    rank 0 checkpoints are every rank's.
    """
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    return torch.nn.parallel.DistributedDataParallel(model), rank, world


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--break", dest="broken", default=None,
                        choices=["rng", "sampler", "scheduler", "optimizer", "save-before-step", "in-place"])
    parser.add_argument("--ddp", action="store_true", help="run under torchrun (gloo, CPU)")
    arguments = parser.parse_args()
    broken = arguments.broken
    torch.set_num_threads(1)
    torch.manual_seed(0)
    random.seed(0)
    numpy.random.seed(0)
    inputs, labels = dataset()
    model, optimizer, scheduler = model_and_optimizer()
    sampler = Sampler()
    first = restore(model, optimizer, scheduler, sampler)
    wrapped, rank, world = distributed_setup(model) if arguments.ddp else (model, 0, 1)
    saves = rank == 0
    for step in range(first, STEPS + 1):
        indices = sampler.next_batch()[rank::world]
        # Input noise from numpy and a label-smoothing draw from Python's RNG: every RNG counts.
        noise = torch.from_numpy(numpy.random.normal(0.0, 0.01, size=(BATCH, 32)).astype("float32"))
        smoothing = 0.05 * random.random()
        loss = torch.nn.functional.cross_entropy(wrapped(inputs[indices] + noise[: len(indices)]),
                                                 labels[indices], label_smoothing=smoothing)
        optimizer.zero_grad()
        loss.backward()
        if saves and broken == "save-before-step" and step % SAVE_EVERY == 0:
            save(step, model, optimizer, scheduler, sampler, broken)
        optimizer.step()
        scheduler.step()
        probe.step(step, model=model, optimizer=optimizer, scheduler=scheduler, batch=indices, loss=loss)
        if saves and broken != "save-before-step" and step % SAVE_EVERY == 0:
            save(step, model, optimizer, scheduler, sampler, broken)


if __name__ == "__main__":
    main()
