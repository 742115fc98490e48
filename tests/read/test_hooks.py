"""Hook lifetime in one home (read/hooks.py): what a Hooks added is removed on every exit, and nothing else in
attnroute registers a module hook."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

import attnroute
from attnroute.read.hooks import Hooks, forwards_replaced, recorded

SRC = Path(attnroute.__file__).parent
REGISTER = (
    "register_forward_hook",
    "register_forward_pre_hook",
    "register_full_backward_hook",
    "register_full_backward_pre_hook",
    "register_backward_hook",
)


def _counts(model: torch.nn.Module) -> list[tuple[int, int, int]]:
    return [(len(m._forward_hooks), len(m._forward_pre_hooks), len(m._backward_hooks)) for m in model.modules()]


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))


def test_recorded_keeps_each_modules_output_and_removes_its_hooks():
    net, x = _net(), torch.randn(3, 4)
    before = _counts(net)
    with recorded([net[0], net[2]]) as out:
        y = net(x)
        assert _counts(net) != before
    assert torch.equal(out[1], y) and torch.equal(out[0], net[0](x))
    assert _counts(net) == before


@pytest.mark.parametrize("error", [RuntimeError("the user's metric raised"), KeyboardInterrupt()])
def test_every_hook_is_removed_when_the_block_raises(error):
    net = _net()
    before = _counts(net)
    with pytest.raises(type(error)), Hooks() as hooks:
        hooks.after(net[0], lambda m, a, o: o * 2)
        hooks.before(net[2], lambda m, a, k: None, kwargs=True)
        assert len(hooks) == 2
        raise error
    assert _counts(net) == before and len(hooks) == 0


def test_an_edit_applies_inside_the_block_only():
    net, x = _net(), torch.randn(3, 4)
    clean = net(x)
    with Hooks() as hooks:
        hooks.after(net[2], lambda m, a, o: torch.zeros_like(o))
        assert torch.equal(net(x), torch.zeros_like(clean))
    assert torch.equal(net(x), clean)


def test_nothing_else_in_attnroute_registers_a_module_hook():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path == SRC / "read" / "hooks.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in REGISTER:
                found.append(f"{path.relative_to(SRC)}:{node.lineno} {node.attr}")
    assert found == []


def _sets_forward(node) -> bool:
    """``x.forward = …``, ``del x.forward`` or ``x.__dict__["forward"] = …``."""
    targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else []
    for t in targets:
        if isinstance(t, ast.Attribute) and t.attr == "forward":
            return True
        if isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant) and t.slice.value == "forward":
            return True
    return False


def test_nothing_else_in_attnroute_replaces_a_modules_forward():
    """A forward replaced and then deleted took accelerate's hook wrapper with it (a dispatched layer's weights
    then stayed on disk), and one saved as ``m.forward`` came back as an instance attribute the model never had:
    every replacement goes through models/forwards.py."""
    allowed = {SRC / "models" / "forwards.py"}
    found = [
        f"{path.relative_to(SRC)}:{node.lineno}"
        for path in sorted(SRC.rglob("*.py"))
        if path not in allowed
        for node in ast.walk(ast.parse(path.read_text()))
        if _sets_forward(node)
    ]
    assert found == []


def test_a_replaced_forward_gives_back_exactly_what_the_module_held():
    net, x = _net(), torch.randn(3, 4)
    wrapper = lambda *a: torch.ones(3, 4)  # noqa: E731  (as accelerate's: an instance attribute)
    net[0].forward = wrapper
    with forwards_replaced({net[0]: lambda *a: torch.zeros(3, 4), net[2]: lambda *a: torch.zeros(3, 2)}):
        assert torch.equal(net(x), torch.zeros(3, 2))
    assert vars(net[0])["forward"] is wrapper and "forward" not in vars(net[2])
    with pytest.raises(ZeroDivisionError), forwards_replaced({net[2]: lambda *a: 1 / 0}):
        net(x)
    assert "forward" not in vars(net[2]) and vars(net[0])["forward"] is wrapper
