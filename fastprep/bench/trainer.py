"""What consumes the batches: the classic toy CNN on a real device, or a simulated
accelerator with a fixed step time.

Every trainer exposes the same timeline interface so the runner can tell how long the
device was busy during the measured window; the rest of the window the device starved.
"""

from __future__ import annotations

import math
import time

import torch
from torch import nn

__all__ = ["ASSUMED_GPU_TFLOPS", "NullConsumer", "RealTrainer", "SimulatedAccelerator", "ToyNet", "Trainer",
           "default_step_ms", "make_trainer", "train_step_flops"]

#: Effective fp32 throughput assumed for "a mid-range GPU" running the toy CNN with cuDNN
#: (an RTX 3060 / T4 class card peaks at 8-13 TFLOP/s; 30-channel 3x3 convolutions reach
#: about half of that).
ASSUMED_GPU_TFLOPS = 6.0


class ToyNet(nn.Sequential):
    """The classic toy classifier: conv 3->30, ``ceil(log2(size))`` blocks of
    (conv 30->30, ReLU, MaxPool2d(2)), conv 30->10, flatten -> logits ``[N, 10]``.

    Convolutions are 3x3 with padding 1 (the last one 1x1 on the 1x1 map).
    """

    def __init__(self, size: int = 256, width: int = 30, num_classes: int = 10):
        blocks = max(1, math.ceil(math.log2(size)))
        layers: list[nn.Module] = [nn.Conv2d(3, width, 3, padding=1)]
        for _ in range(blocks):
            layers += [nn.Conv2d(width, width, 3, padding=1), nn.ReLU(inplace=True),
                       nn.MaxPool2d(2, ceil_mode=True)]
        layers += [nn.Conv2d(width, num_classes, 1), nn.Flatten()]
        super().__init__(*layers)


def train_step_flops(batch_size: int = 64, size: int = 256) -> float:
    """FLOPs of one training step of :class:`ToyNet` (forward + backward = 3x forward)."""
    h = w = size
    flops = 0.0
    for m in ToyNet(size):
        if isinstance(m, nn.Conv2d):
            k = m.kernel_size[0] * m.kernel_size[1]
            flops += 2.0 * h * w * m.out_channels * m.in_channels * k
        elif isinstance(m, nn.MaxPool2d):
            h, w = -(-h // 2), -(-w // 2)
    return 3.0 * flops * batch_size


def default_step_ms(batch_size: int = 64, size: int = 256) -> float:
    """The simulated step time: :func:`train_step_flops` at :data:`ASSUMED_GPU_TFLOPS`."""
    return max(1.0, round(train_step_flops(batch_size, size) / (ASSUMED_GPU_TFLOPS * 1e12) * 1e3))


class Trainer:
    """Interface: ``step`` consumes a batch; ``begin_window``/``end_window`` bracket the
    measured steps: ``begin_window`` waits for the warm-up work to finish, ``end_window``
    waits for all submitted work and returns ``(busy_seconds, end_time)``."""

    device: torch.device
    simulated = False
    #: The simulated device's time per step in seconds (0 for a real device: it has none).
    step_s = 0.0

    def step(self, images: torch.Tensor, targets: torch.Tensor) -> None:
        raise NotImplementedError

    def begin_window(self) -> None:
        raise NotImplementedError

    def end_window(self) -> tuple[float, float]:
        raise NotImplementedError

    def metrics(self) -> dict:
        return {}


class SimulatedAccelerator(Trainer):
    """A device that needs ``step_ms`` per batch and runs asynchronously, like a GPU.

    ``step`` submits a batch and returns at once when the device is idle; when the device
    is still busy with the previous batch the host waits (``time.sleep``, no CPU used)
    until it is free -- a GPU launch queue of depth one. So loading batch k+1 overlaps the
    device's work on batch k exactly as with a real GPU and a training loop with no host
    synchronisation. Device idle time between steps is GPU starvation.
    """

    simulated = True

    def __init__(self, step_ms: float):
        if not step_ms >= 0:
            raise ValueError(f"step_ms must be >= 0, got {step_ms}")
        self.step_s = step_ms / 1e3
        self.device = torch.device("cpu")
        self._busy_until = 0.0
        self._window_start = None
        self._busy = 0.0
        self.steps = 0

    def step(self, images, targets):
        now = time.perf_counter()
        if self._busy_until > now:
            time.sleep(self._busy_until - now)
            now = max(time.perf_counter(), self._busy_until)
        self._busy_until = now + self.step_s
        self.steps += 1
        if self._window_start is not None:
            self._busy += self.step_s

    def begin_window(self):
        # Let the device finish the warm-up steps first, so every measured step lies wholly
        # inside the window (the loader keeps producing meanwhile).
        now = time.perf_counter()
        if self._busy_until > now:
            time.sleep(self._busy_until - now)
        self._window_start = time.perf_counter()
        self._busy = 0.0

    def end_window(self):
        now = time.perf_counter()
        if self._busy_until > now:
            time.sleep(self._busy_until - now)
        end = max(time.perf_counter(), self._busy_until)
        busy, self._window_start = self._busy, None
        return busy, end


class NullConsumer(Trainer):
    """Takes each batch and does nothing with it: what is measured is the input pipeline
    alone (the bench's uncapped runs). It is never busy; on CUDA both ends of the window
    wait for the work the pipeline queued on the device (its copies and batch transform),
    so that work is inside the window."""

    def __init__(self, device="cpu"):
        self.device = torch.device(device)

    def step(self, images, targets):
        pass

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def begin_window(self):
        self._sync()

    def end_window(self):
        self._sync()
        return 0.0, time.perf_counter()


class RealTrainer(Trainer):
    """:class:`ToyNet` trained with CrossEntropy and SGD (momentum 0.9) on ``device``.

    Loss and accuracy accumulate on the device: no ``.item()``, no host synchronisation in
    ``step``. On CUDA, device busy time comes from events around each step (read once at
    the end); on the CPU the step is synchronous, so busy time is its wall time.
    """

    def __init__(self, device, size: int = 256, lr: float = 0.01, seed: int = 0, num_classes: int = 10):
        self.device = torch.device(device)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.model = ToyNet(size, num_classes=num_classes).to(self.device)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=lr, momentum=0.9)
        self.loss_fn = nn.CrossEntropyLoss()
        self.loss_sum = torch.zeros((), device=self.device)
        self.correct = torch.zeros((), dtype=torch.int64, device=self.device)
        self.seen = 0
        self._cuda = self.device.type == "cuda"
        self._events: list | None = None
        self._busy = 0.0

    def step(self, images, targets):
        if isinstance(images, list):  # multi-view: the model trains on every view, as multi-crop models do
            for view in images:
                self.step(view, targets)
            return
        if images.device != self.device:
            raise ValueError(f"batch is on {images.device}, trainer on {self.device}")
        t0 = time.perf_counter()
        if self._cuda and self._events is not None:
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        logits = self.model(images)
        loss = self.loss_fn(logits, targets)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        with torch.no_grad():
            self.loss_sum += loss.detach() * targets.shape[0]
            self.correct += (logits.argmax(1) == targets).sum()
        self.seen += targets.shape[0]
        if self._cuda and self._events is not None:
            stop.record()
            self._events.append((start, stop))
        elif not self._cuda and self._events is not None:
            self._busy += time.perf_counter() - t0

    def begin_window(self):
        if self._cuda:
            torch.cuda.synchronize(self.device)  # warm-up work finishes before the window
        self._events = []
        self._busy = 0.0

    def end_window(self):
        if self._cuda:
            torch.cuda.synchronize(self.device)
            busy = sum(a.elapsed_time(b) for a, b in self._events) / 1e3
        else:
            busy = self._busy
        self._events = None
        return busy, time.perf_counter()

    def metrics(self):
        if not self.seen:
            return {}
        return {"mean_loss": float(self.loss_sum) / self.seen, "accuracy": int(self.correct) / self.seen}


def make_trainer(device: str, step_ms: float | None, batch_size: int, size: int,
                 num_classes: int = 10) -> Trainer:
    """``device``: ``"sim"`` (simulated accelerator), ``"cpu"``, ``"cuda[:i]"`` or ``"auto"``
    (CUDA when available, else simulated); ``num_classes``: outputs of the real model."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "sim"
    if device == "sim":
        return SimulatedAccelerator(step_ms if step_ms is not None else default_step_ms(batch_size, size))
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {device}: CUDA is not available here; use --device sim or cpu")
    return RealTrainer(dev, size, num_classes=num_classes)
