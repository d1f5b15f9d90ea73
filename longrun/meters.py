"""
The numbers on the step line beside the loss: how many FLOPs a token costs, how much of the GPUs'
peak the model's own math uses (MFU), with the datasheet table that peak comes from, and the time
left. A module of its own: none of it trains anything.
"""

import re
import time

import torch


def flops_per_token(model, T):
    """Training FLOPs per token: 6 per weight (forward + backward) plus attention's (PaLM, appendix
    B)."""
    c = model.config
    n_params = sum(p.numel() for p in model.parameters()) - model.transformer.wpe.weight.numel()
    return 6 * n_params + 12 * c.n_layer * c.n_embd * T


class MFU:
    """Model FLOPs utilisation: the share of the GPUs' peak bf16 throughput that the model's own
    math uses."""

    # Each part's dense bf16 tensor-core peak (TFLOPS per GPU) and its SM count. Hopper's datasheets
    # give the figure with 2:4 sparsity: dense is half of it (1,979 -> 989). The first pattern found
    # in the device's name decides, so "H100 PCIe" comes before "H100". Fewer SMs than the part has
    # is a MIG slice or a cut-down part: peak not known.
    PARTS = (  # (pattern in the upper-cased name, part, TFLOPS, SMs)
        (r"\bGH200\b", "GH200", 989, 132),  # GH200 datasheet: BF16 1,979 TFLOPS with sparsity
        (r"\bH200 NVL\b", "H200 NVL", 835, 132),  # H200 datasheet: 1,671 with sparsity
        (r"\bH200\b", "H200 SXM", 989, 132),  # H200 datasheet: 1,979 with sparsity
        (r"\bH100 NVL\b", "H100 NVL", 835, 132),  # H100 datasheet: 1,671 with sparsity
        (r"\bH100 PCIE\b", "H100 PCIe", 756, 114),  # H100 datasheet: 1,513 with sparsity
        # H100 datasheet: 1,979 with sparsity; named "NVIDIA H100 80GB HBM3"
        (r"\bH100\b", "H100 SXM", 989, 132),
        (r"\bH800 PCIE\b", "H800 PCIe", 756, 114),  # H800 datasheet: 1,513 with sparsity
        (r"\bH800\b", "H800 SXM", 989, 132),  # H800 datasheet: 1,979 with sparsity
        (r"\bA100\b", "A100", 312, 108),  # A100 datasheet: 312 dense, SXM4 and PCIe alike
        (r"\bA800\b", "A800", 312, 108),  # A800 datasheet: 312 dense
    )

    def __init__(self, model, T, device, world_size):
        self.flops_per_token, self.world_size = flops_per_token(model, T), world_size
        gpu = torch.cuda.get_device_properties(device) if device.startswith("cuda") else None
        self.device_name = gpu.name if gpu else device
        # the peak and the part, or None and why the peak is not known
        self.tflops, self.about = self.lookup(self.device_name, gpu and gpu.multi_processor_count)

    @classmethod
    def lookup(cls, device_name, sms):
        """(dense bf16 TFLOPS, part) for a device's name and SM count, or (None, why it is not
        known)."""
        name = device_name.upper()
        if re.search(r"\bMIG\b", name):
            return None, f"{device_name} is a MIG slice: its share of the GPU's peak is not known"
        for pattern, part, tflops, part_sms in cls.PARTS:
            if re.search(pattern, name):
                if sms != part_sms:
                    return (
                        None,
                        f"{device_name} has {sms} SMs, the {part} has {part_sms}: a slice or "
                        "another part",
                    )
                return tflops, part
        return None, f"no peak bf16 throughput known for {device_name}"

    def basis(self):
        """One line saying what the mfu column divides by, or why there is none."""
        if not self.tflops:
            return f"mfu: unknown, {self.about}"
        gpus = f"{self.world_size} x {self.tflops} TFLOPS ({self.device_name}: {self.about})"
        return f"mfu: {self.flops_per_token / 1e9:.3f} GFLOPs per token against {gpus}"

    def percent(self, tokens_per_sec):
        return 100 * self.flops_per_token * tokens_per_sec / (self.tflops * 1e12 * self.world_size)

    def __call__(self, tokens_per_sec):
        """' | mfu 41.3%' for the printed lines, or nothing where the peak is unknown (a CPU,
        another GPU)."""
        return f" | mfu {self.percent(tokens_per_sec):.1f}%" if self.tflops else ""


class TimeLeft:
    """The run's time left at its pace since its first step (which pays for compilation), evaluation
    included."""

    def __init__(self, max_steps):
        self.max_steps, self.since, self.steps = max_steps, None, 0

    def __call__(self, step, dt):
        """' | eta 62.3 min' (or s, or h) for the line of the step that just took dt seconds."""
        if self.since is None:  # the first step: its own time is all there is to go by
            self.since, pace = time.time(), dt
        else:
            self.steps += 1
            pace = (time.time() - self.since) / self.steps
        return f" | eta {duration(pace * (self.max_steps - step - 1))}"


def duration(seconds):
    """'42 s', '62.3 min' or '3.1 h': a span of time in the unit a person reads it in."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"
