import torch

import attnroute as ar


def qkv(B=2, H=4, Hkv=2, Tq=5, Tk=7, D=8, Dv=None, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, Tq, D, generator=g)
    k = torch.randn(B, Hkv, Tk, D, generator=g)
    v = torch.randn(B, Hkv, Tk, Dv or D, generator=g)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def eager64(q, k, v, mask=None, **kw):
    """The fp64 eager oracle for inputs too large for the list reference."""
    return ar.attend(q.double(), k.double(), v.double(), mask, impl="eager", memory_budget=1 << 34, **kw)
