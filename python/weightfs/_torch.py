"""torch helpers, imported only when torch tensors are used (torch is optional)."""

import numpy as np
import torch

# Same-width integer dtypes torch has on every version (torch 1.13 has no uint16/32/64):
# patches move values through them, so copies are bit-exact (NaN payloads, -0).
_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_NP_INT = {1: np.dtype("u1"), 2: np.dtype("<i2"), 4: np.dtype("<i4"), 8: np.dtype("<i8")}


def is_tensor(x):
    return isinstance(x, torch.Tensor)


def torch_dtype(dt):
    """The torch dtype of a safetensors DType, or None if this torch lacks it (F8 before 2.1,
    unsigned 16/32/64-bit before 2.3)."""
    return getattr(torch, dt.torch, None) if dt.torch else None


def int_dtype(width):
    return _INT[width]


def from_raw(raw, dt, shape, device="cpu"):
    """A torch tensor of dtype dt (or the same-width integer if torch lacks dt) holding the
    little-endian bytes raw (a numpy uint8 array), with the given shape, on device."""
    t = torch.from_numpy(np.array(raw).view(_NP_INT[dt.width]))
    td = torch_dtype(dt)
    if td is not None and td != t.dtype:
        t = t.view(td)
    return t.reshape(tuple(shape)).to(device)


def raw_bytes(t):
    """The bytes of a contiguous tensor, as a numpy uint8 array on the CPU."""
    flat = t.detach().reshape(-1)
    if flat.dtype != torch.bool and flat.element_size() in _INT and flat.dtype != _INT[flat.element_size()]:
        flat = flat.view(_INT[flat.element_size()])
    return flat.cpu().numpy().view(np.uint8)
