"""Imported by the forkserver that :func:`fastprep.data.make_loader` starts: brings in
torch, torchvision and fastprep and loads the mask kernels once, so that every worker
forked from the server starts with them instead of importing and loading them itself."""

from .loader import warm_up_kernels

warm_up_kernels()
